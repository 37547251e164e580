"""Host time of one bare op call (below autograd, tiny inputs) and the ATen ops it runs, for one build per
process: where the stable ABI's extra microseconds per call go (issue 23). Run it for each build in turn.

  python runs/gpu/2026-11-27-run19h-host_cost.py [--device cuda] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import visdet_ops


def _calls(dev: str):
    g = torch.Generator().manual_seed(0)
    b = (torch.rand(16, 4, generator=g) * 50).to(dev)
    b[:, 2:] += b[:, :2]
    x = torch.randn(1, 4, 16, 16, generator=g).to(dev)
    rois = torch.tensor([[0, 1.0, 1, 9, 9]] * 4).to(dev)
    s = torch.rand(16, generator=g).to(dev)
    ops = torch.ops.visdet_ops
    yield "bbox_overlaps 16x16", lambda: ops.bbox_overlaps(b, b, "iou", False, 0)
    yield "roi_align fwd 4 rois", lambda: ops.roi_align(x, rois, 7, 7, 1.0, 2, "avg", True)
    yield "roi_pool fwd 4 rois", lambda: ops.roi_pool(x, rois, 7, 7, 1.0)
    yield "nms 16 boxes", lambda: ops.nms(b, s, 0.5, 0)
    yield "corner_pool 1x4x16x16", lambda: ops.corner_pool(x, "top")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args(argv)
    label = "stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic"
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    with torch.no_grad():
        for name, fn in _calls(args.device):
            for _ in range(200):
                fn()
            sync()
            per_call = []
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(args.calls // 5):
                    fn()
                per_call.append((time.perf_counter() - started) / (args.calls // 5) * 1e6)
                sync()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(100):
                    fn()
            aten = sorted(
                (e.key, e.count // 100) for e in prof.key_averages() if e.key.startswith("aten::") and e.count >= 100
            )
            print(f"{label:8s} | {name:24s} | {statistics.median(per_call):6.2f} us/call | {aten}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
