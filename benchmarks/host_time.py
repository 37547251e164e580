"""Host time per call of the public ops on tiny inputs, ours against torchvision's in one process (issue 24's table):
roi_align and roi_pool fwd+bwd (4 RoIs on a 1x4x16x16 map), nms (50 boxes), DCNv2 fwd+bwd (4 channels, 8x8).
Each call writes fresh leaf gradients, as a training step after zero_grad(set_to_none=True) does.

Calls run back to back; on CUDA the tiny kernels finish long before the host has issued the next call, so the wall
time per call is the host's. Rounds alternate ours and the peer; the median round counts.

  python benchmarks/host_time.py [--device cuda|cpu] [--rounds 11] [--calls 200] [--profile] [--json OUT]

--profile adds, per case, the CPU-side operators that cost the most (torch.profiler, self CPU time per call)."""

from __future__ import annotations

import argparse
import json
import sys

import torch
from bench import alternating_medians, wall_time_per_call  # benchmarks/bench.py: the harness's timing

import visdet_ops


def _cases(dev: str):
    """(name, ours, peer) callables; None where torchvision has no such op."""
    import torchvision

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 16, 16, generator=gen).to(dev)
    rois = torch.tensor([[0, 1.0, 1, 9, 9], [0, 2, 3, 12, 14], [0, 0, 0, 15, 15], [0, 4, 4, 8, 10]]).to(dev)
    boxes = torch.rand(50, 4, generator=gen) * 40
    boxes[:, 2:] += boxes[:, :2] + 1
    boxes, scores = boxes.to(dev), torch.rand(50, generator=gen).to(dev)
    dx = torch.randn(1, 4, 8, 8, generator=gen).to(dev)
    weight = torch.randn(4, 4, 3, 3, generator=gen).to(dev)
    offset = (0.5 * torch.randn(1, 18, 8, 8, generator=gen)).to(dev)
    mask = torch.rand(1, 9, 8, 8, generator=gen).to(dev)

    def fwd_bwd(fn, *leaves):
        def step():
            inputs = [t.detach().requires_grad_() for t in leaves]  # fresh leaves, no .grad to accumulate into
            fn(*inputs).sum().backward()

        return step

    tvops = torchvision.ops
    yield (
        "roi_align fwd+bwd",
        fwd_bwd(lambda t: visdet_ops.roi_align(t, rois, 7, 1.0, 2, "avg", True), x),
        fwd_bwd(lambda t: tvops.roi_align(t, rois, 7, 1.0, 2, True), x),
    )
    yield (
        "roi_pool fwd+bwd",
        fwd_bwd(lambda t: visdet_ops.roi_pool(t, rois, 7, 1.0), x),
        fwd_bwd(lambda t: tvops.roi_pool(t, rois, 7, 1.0), x),
    )
    yield "nms", lambda: visdet_ops.nms(boxes, scores, 0.5), lambda: tvops.nms(boxes, scores, 0.5)
    yield (
        "DCNv2 fwd+bwd",
        fwd_bwd(lambda t, w, o, m: visdet_ops.modulated_deform_conv2d(t, o, m, w, None, 1, 1, 1, 1, 1), dx, weight,
                offset, mask),
        fwd_bwd(lambda t, w, o, m: tvops.deform_conv2d(t, o, w, None, 1, 1, 1, m), dx, weight, offset, mask),
    )  # fmt: skip


def _top_operators(fn, calls: int, sync, limit: int = 8) -> list[tuple[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        sync()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:limit]
    return [(e.key, round(e.self_cpu_time_total / calls, 1)) for e in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(1)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    build = "stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic"
    print(f"# host time per call, {args.device}, {build} build, torch {torch.__version__}; median of {args.rounds} "
          f"alternating rounds of {args.calls} calls", flush=True)  # fmt: skip
    print("| case | ours µs | torchvision µs | ratio (tv / ours) |\n|---|---:|---:|---:|")
    results = []
    for name, ours, peer in _cases(args.device):
        for fn in (ours, peer):
            for _ in range(20):
                fn()
        ours_us, peer_us = alternating_medians(
            ours, peer, args.rounds, lambda fn: wall_time_per_call(fn, args.calls, sync) * 1e6
        )
        row = {"case": name, "ours": ours_us, "peer": peer_us}
        row["ratio"] = row["peer"] / row["ours"]
        print(f"| {name} | {row['ours']:.1f} | {row['peer']:.1f} | {row['ratio']:.2f}x |", flush=True)
        if args.profile:
            row["ours_top"] = _top_operators(ours, 50, sync)
            row["peer_top"] = _top_operators(peer, 50, sync)
            for who in ("ours_top", "peer_top"):
                print(f"    {who}: " + ", ".join(f"{k} {v}" for k, v in row[who]), flush=True)
        results.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "build": build, "torch": torch.__version__, "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
