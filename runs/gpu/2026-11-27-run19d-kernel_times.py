"""Where a build's time per call goes on the GPU: kernel time (torch.profiler) against the time between CUDA events
around the call, and host time, for a few rows of benchmarks/bench.py. Run it once per build in alternating
processes to tell a kernel difference from a host one (issue 23: stable wheel against the per-minor build).

  python runs/gpu/2026-11-27-run19d-kernel_times.py [--calls 50] [--label classic] [--out FILE.json]

Per case: `calls` timed calls after a warm-up, each with fresh leaf gradients; prints the median event time per call,
the median host time per call (the call's Python + dispatcher + launch time, without waiting for the GPU) and the
profiler's summed kernel time per call, with the kernels by name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import visdet_ops


def _cases(gen: torch.Generator, dev: str):
    def rand(*shape, scale=1.0):
        return (torch.rand(*shape, generator=gen) * scale).to(dev)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(dev)

    b1, b2 = rand(5000, 4, scale=500), rand(5000, 4, scale=500)
    b1[:, 2:] += b1[:, :2]
    b2[:, 2:] += b2[:, :2]
    yield "bbox_overlaps 5000x5000 iou f32", lambda: visdet_ops.bbox_overlaps(b1, b2)

    feat = randn(2, 256, 100, 168)
    xy = rand(1000, 2, scale=1000)
    wh = 16 + rand(1000, 2, scale=300)
    rois = torch.cat([torch.randint(0, 2, (1000, 1), generator=gen).float().to(dev), xy, xy + wh], 1)

    def roi_align_step():
        x = feat.detach().requires_grad_()
        out = visdet_ops.roi_align(x, rois, 7, 1 / 8, 2, "avg", True)
        out.backward(torch.ones_like(out))

    yield "roi_align fwd+bwd stride 8, 1000 rois x 256 ch, sr 2", roi_align_step

    x8 = randn(8, 128, 64, 64)
    w = randn(128, 128, 3, 3, scale=0.05)
    off = randn(8, 18, 64, 64)
    mask = rand(8, 9, 64, 64)

    def dcn_step():
        x, weight = x8.detach().requires_grad_(), w.detach().requires_grad_()
        o, m = off.detach().requires_grad_(), mask.detach().requires_grad_()
        out = visdet_ops.modulated_deform_conv2d(x, o, m, weight, None, 1, 1, 1, 1, 1)
        out.backward(torch.ones_like(out))

    yield "DCNv2 fwd+bwd batch 8, 128 ch, 64x64", dcn_step

    pool_in = randn(2, 128, 128, 128)

    def corner_step():
        x = pool_in.detach().requires_grad_()
        out = visdet_ops.corner_pool(x, "top")
        out.backward(torch.ones_like(out))

    yield "corner_pool fwd+bwd top, 2x128x128x128", corner_step


def measure(fn, calls: int) -> dict:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    event_ms, host_ms = [], []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        started = time.perf_counter()
        start.record()
        fn()
        end.record()
        host_ms.append((time.perf_counter() - started) * 1e3)
        torch.cuda.synchronize()
        event_ms.append(start.elapsed_time(end))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name] = kernels.get(e.name, 0.0) + e.device_time_total / 1e3 / calls
    return {
        "event_ms": statistics.median(event_ms),
        "host_ms": statistics.median(host_ms),
        "kernel_ms": sum(kernels.values()),
        "kernels": dict(sorted(kernels.items(), key=lambda kv: -kv[1])),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--label", default="stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = {}
    for name, fn in _cases(torch.Generator().manual_seed(0), "cuda"):
        r = measure(fn, args.calls)
        results[name] = r
        top = ", ".join(f"{k[:40]} {v * 1e3:.1f} us" for k, v in list(r["kernels"].items())[:3])
        print(
            f"{args.label:8s} | {name:52s} | event {r['event_ms']:.4f} ms | host {r['host_ms']:.4f} ms | "
            f"kernels {r['kernel_ms']:.4f} ms ({top})",
            flush=True,
        )
    if args.out:
        args.out.write_text(json.dumps({"label": args.label, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
