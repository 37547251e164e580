"""Issue 24's GPU table: each op's training call (forward + backward, fresh leaf gradients) against its peer, in one
process, at the issue's shapes. The cases are the `@benchmark(..., tags=("gpu_targets",))` functions of
benchmarks/op_benchmarks/<family>.py: each is called with (a generator seeded 0, torchvision.ops) and yields
`Case`s (name, ours, peer, back_to_back, compulsory_bytes); --only takes op modules or their aliases.

  python benchmarks/gpu_targets.py [--only NAME ...] [--rounds 7] [--calls 20] [--json OUT] [--profile]

Every call makes fresh leaf gradients, as a training step after zero_grad(set_to_none=True) does. Rounds alternate
ours and the peer; each round times `--calls` calls one by one between CUDA events after a warm-up, and takes
their median; the table gives the median over rounds and ratio = peer / ours (> 1: ours is faster). Back-to-back
rows time `--calls` calls between one pair of events instead (host and GPU overlap, as in a training loop): the
per-call cost that a host-bound op shows. --profile adds, per case, the GPU kernels of one call of ours and of the
peer (torch.profiler), by name.

Peers: torchvision's op where it has one, else a pure-PyTorch or visdet_ops.reference formulation (each case's
docstring). Cases with compulsory_bytes add that traffic as GB/s and as a fraction of the measured copy bandwidth.
cudnn.benchmark stays off. Needs a CUDA GPU and torchvision.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch
from bench import (  # benchmarks/bench.py: the harness's timing and case discovery
    alternating_medians,
    copy_bandwidth_gbs,
    cuda_time_ms,
    device_kernels,
    tagged,
    tagged_names,
    write_json,
)

import visdet_ops

TAG = "gpu_targets"


def _time_ms(fn: Callable[[], None], calls: int, back_to_back: bool) -> float:
    if back_to_back:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls
    return cuda_time_ms(fn, warmup=0, repeat=calls)["median_ms"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=tagged_names(TAG), help="families to run (default: all)")
    parser.add_argument("--match", default="", help="only the cases whose name contains this")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--profile", action="store_true", help="list each case's kernels (one call, torch.profiler)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_targets.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import torchvision

    torch.backends.cudnn.benchmark = False
    chosen = tagged(TAG, args.only)
    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"visdet_ops {visdet_ops.__version__}; {args.rounds} rounds x {args.calls} calls")  # fmt: skip
    copy_gbs = copy_bandwidth_gbs()
    print(f"# device-to-device copy: {copy_gbs:.0f} GB/s (read + write); compulsory traffic rows: bytes / time")
    print("| case | ours ms | peer ms | peer / ours |\n|---|---|---|---|")
    for b in chosen:
        for case in b.run(torch.Generator().manual_seed(0), torchvision.ops):
            name, ours, peer, back_to_back, compulsory_bytes = case[:5]
            if args.match not in name:
                continue
            for fn in (ours, peer):
                for _ in range(3):
                    fn()
            ours_ms, peer_ms = alternating_medians(
                ours, peer, args.rounds, lambda fn, b2b=back_to_back: _time_ms(fn, args.calls, b2b)
            )
            row = {"case": name, "ours_ms": ours_ms, "peer_ms": peer_ms}
            row["ratio"] = row["peer_ms"] / row["ours_ms"]
            rows.append(row)
            print(f"| {name} | {row['ours_ms']:.4f} | {row['peer_ms']:.4f} | {row['ratio']:.2f}x |", flush=True)
            if compulsory_bytes:
                row["compulsory_gbs"] = compulsory_bytes / (row["ours_ms"] * 1e-3) / 1e9
                row["fraction_of_copy"] = row["compulsory_gbs"] / copy_gbs
                print(f"|   compulsory traffic: {row['compulsory_gbs']:.0f} GB/s, "
                      f"{100 * row['fraction_of_copy']:.0f}% of copy | | | |")  # fmt: skip
            if args.profile and not back_to_back:
                for who, fn in (("ours", ours), ("peer", peer)):
                    for kname, us, _ in device_kernels(fn)[:8]:
                        print(f"|   {who}: {kname[:90]} | {us:.1f} us | | |")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
