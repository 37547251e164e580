"""CPU timings of the ops torchvision also has, against torchvision's CPU kernels, in one process (issue 24).

  python benchmarks/cpu.py [--threads 1] [--rounds 11] [--only FAMILY ...] [--out FILE.json]

The cases are the `@benchmark(..., tags=("cpu",))` functions of benchmarks/op_benchmarks/<family>.py: each is
called with (a generator seeded 0, torchvision.ops) and yields `Case`s (name, ours, peer: None where torchvision
has no such op; a peer other than torchvision's kernels, mmcv's compiled ones say, names itself in
`Case.peer_name`, and its rows hold `peer_ms` and `peer` instead of `torchvision_ms`).

Each case times ours and torchvision's alternately, `--rounds` rounds of one call each after a warm-up, and
reports the median of each and ratio = torchvision / ours (>= 1: ours is as fast or faster). Forward + backward
cases give fresh leaf gradients every call, as a training step after zero_grad(set_to_none=True) does. Shapes are
the issue's: a detector's RoI head at stride 8 and its NMS stages. `--threads 0` keeps torch's default (all
cores). Needs torchvision with its C++ ops.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from bench import alternating_medians, tagged, tagged_names  # benchmarks/bench.py: timing, case discovery

TAG = "cpu"


def _time(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def run(families: list[str], rounds: int) -> list[dict]:
    from torchvision import ops as tv

    results = []
    for b in tagged(TAG, families):
        for case in b.run(torch.Generator().manual_seed(0), tv):
            name, ours, peer = case.name, case.ours, case.peer
            for fn in (ours, peer):
                if fn:
                    fn()  # warm-up
            ours_ms, peer_ms = alternating_medians(ours, peer or None, rounds, _time)
            row = {"op": b.family, "case": name, "ours_ms": ours_ms}
            if peer:
                # A peer other than torchvision (Case.peer_name) is named in its row: peer_ms, peer.
                key = "torchvision_ms" if case.peer_name is None else "peer_ms"
                row[key] = peer_ms
                row["ratio"] = peer_ms / row["ours_ms"]
                if case.peer_name is not None:
                    row["peer"] = case.peer_name
            results.append(row)
            ratio = f"{row['ratio']:.2f}x" if peer else "-"
            tv_ms = f"{peer_ms:.2f}" + (f" ({case.peer_name})" if case.peer_name else "") if peer else "-"
            print(f"| {b.family} | {name} | {row['ours_ms']:.2f} | {tv_ms} | {ratio} |", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--only", nargs="*", choices=tagged_names(TAG))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of {args.rounds} alternating rounds")
    print("| op | case | ours ms | torchvision ms | torchvision / ours |\n|---|---|---:|---:|---:|")
    results = run(args.only or tagged_names(TAG), args.rounds)
    if args.out:
        args.out.write_text(json.dumps({"threads": torch.get_num_threads(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
