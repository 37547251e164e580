"""Host time per call of the public ops on tiny inputs, ours against torchvision's in one process (issue 24's table).
The cases are the `@benchmark(..., tags=("host_time",))` functions of benchmarks/op_benchmarks/<family>.py: each is
called with (the device, torchvision.ops), makes its own tiny inputs (a generator seeded 0) and yields `Case`s
(name, ours, peer). Each call writes fresh leaf gradients, as a training step after zero_grad(set_to_none=True) does.

Calls run back to back; on CUDA the tiny kernels finish long before the host has issued the next call, so the wall
time per call is the host's. Rounds alternate ours and the peer; the median round counts.

  python benchmarks/host_time.py [--device cuda|cpu] [--rounds 11] [--calls 200] [--profile] [--json OUT]

--profile adds, per case, the CPU-side operators that cost the most (torch.profiler, self CPU time per call)."""

from __future__ import annotations

import argparse
import sys

import torch
from bench import alternating_medians, tagged, wall_time_per_call, write_json  # benchmarks/bench.py: timing, cases

import visdet_ops


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
    import torchvision

    results = []
    for name, ours, peer, *_ in (c for b in tagged("host_time") for c in b.run(args.device, torchvision.ops)):
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
    write_json(args.json, {"device": args.device, "build": build, "torch": torch.__version__, "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
