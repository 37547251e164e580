"""Times every visdet-ops op against its peer in the same process: the harness.

Each op family declares its benchmarks (`@benchmark` in benchmarks/op_benchmarks/<family>.py, named after its op
module visdet_ops/ops/<family>.py); this file discovers and runs them: CUDA events around each call, warm-up first,
the median of many runs, memory traffic against a measured device-to-device copy, one table. Peer: torchvision where
it has the op, else a pure-PyTorch implementation. Each benchmark gets its own generator (seed 0), so `--only` times
the inputs of a full run.

  python benchmarks/bench.py --out DIR                (writes bench.json and bench.md)
  python benchmarks/bench.py --out DIR --only FAMILY  (the benchmarks of the op families named)
  python benchmarks/bench.py --list                   (the families and their benchmarks; no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import visdet_ops
from visdet_ops.ops import EXAMPLES

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/: op_benchmarks, wherever bench.py runs from
from op_benchmarks import Benchmark, load_all  # noqa: E402

BENCHMARKS = load_all()


def op_families() -> list[str]:
    """What must be benchmarked: every op module of visdet_ops/ops/ (each declares an example case)."""
    return sorted(EXAMPLES)


def unbenchmarked_families() -> list[str]:
    covered = {b.family for b in BENCHMARKS if "bench" in b.tags}
    return [f for f in op_families() if f not in covered]


def tagged(tag: str, only: list[str] | None = None) -> list[Benchmark]:
    """The declared benchmarks tagged `tag` of the families named (all when none; a family is named by its op
    module or its alias), family by family in op_families() order, each family's in declaration order."""
    return [
        b
        for f in op_families()
        for b in BENCHMARKS
        if b.family == f and tag in b.tags and (not only or f in only or b.alias in only)
    ]


def tagged_names(tag: str) -> list[str]:
    """The names a report's --only accepts: the families with a benchmark tagged `tag`, and their aliases."""
    return sorted({n for b in tagged(tag) for n in (b.family, b.alias) if n})


def benchmarks(only: list[str] | None = None) -> list[Benchmark]:
    """bench.py's own benchmarks (tag "bench") of the families named (all when none), in tagged()'s order."""
    return tagged("bench", only)


def timed_calls(fn, calls: int, cuda: bool) -> list[float]:
    """Milliseconds of each of `calls` calls: between CUDA events after a device sync (cuda), else wall time."""
    times = []
    for _ in range(calls):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
    return times


def time_stats(times: list[float]) -> dict:
    """Median and the 10th / 90th percentiles of call times (ms)."""
    times = sorted(times)
    return {
        "median_ms": statistics.median(times),
        "p10_ms": times[len(times) // 10],
        "p90_ms": times[(len(times) * 9) // 10],
    }


def cuda_time_ms(fn, warmup: int = 10, repeat: int = 50) -> dict:
    """Median (and spread) of `repeat` timed calls, each between CUDA events."""
    for _ in range(warmup):
        fn()
    return time_stats(timed_calls(fn, repeat, cuda=True))


def cpu_time_ms(fn, warmup: int = 1, repeat: int = 5) -> dict:
    """Median wall time of `repeat` calls of a CPU function."""
    for _ in range(warmup):
        fn()
    times = sorted(timed_calls(fn, repeat, cuda=False))
    return {"median_ms": statistics.median(times), "p10_ms": times[0], "p90_ms": times[-1]}


def wall_time_per_call(fn, calls: int, sync) -> float:
    """Seconds per call of `calls` calls made back to back between two sync() (host and device overlap, as in a
    training loop: the per-call cost of a host-bound call)."""
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def alternating_medians(ours, peer, rounds: int, timer) -> tuple[float, float | None]:
    """Medians over `rounds` alternating rounds of timer(ours) and timer(peer) (peer may be None), so that a
    drift of the machine hits both sides alike."""
    ours_t, peer_t = [], []
    for _ in range(rounds):
        ours_t.append(timer(ours))
        if peer is not None:
            peer_t.append(timer(peer))
    return statistics.median(ours_t), statistics.median(peer_t) if peer is not None else None


def peak_memory_bytes(fn) -> int:
    """Peak allocated bytes during fn() above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def device_kernels(fn) -> list[tuple[str, float, int]]:
    """fn() once to warm up, then once under torch.profiler with CUDA activity only, so that every entry is the
    device's own (kernels, memsets, copies): (name, device µs, calls) of each, costliest first. CUDA only."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total, e.count) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy of 1 GiB, counting bytes read plus bytes written."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = cuda_time_ms(lambda: dst.copy_(src), warmup=3, repeat=20)["median_ms"]
    return 2 * src.numel() * 4 / (t * 1e-3) / 1e9


def write_json(path: str | None, data) -> None:
    """What the timing scripts' `--json OUT` writes: data as indented JSON at path; nothing without a path."""
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


@dataclass
class BenchRun:
    """What a benchmark function (visdet_ops.ops.benchmark) is called with. Row keys that markdown() reads:
    op, case, ours, peer, peer_name, kept, note, ours_forward_ms, forward_gbs, forward_fraction_of_copy,
    ours_peak_mib, peer_peak_mib, fused_gbs, fused_fraction_of_copy, peer_forward_ms."""

    gen: torch.Generator
    tv: object  # torchvision.ops, or None where torchvision does not import (rows then have no peer)
    copy_gbs: float
    results: list = field(default_factory=list)

    cuda_time_ms = staticmethod(cuda_time_ms)
    cpu_time_ms = staticmethod(cpu_time_ms)
    peak_memory_bytes = staticmethod(peak_memory_bytes)

    def forward_traffic(self, row: dict, forward_ms: float, moved_bytes: int) -> None:
        """The forward's time and its compulsory traffic (bytes it must read and write) as GB/s and as a
        fraction of the copy bandwidth."""
        row["ours_forward_ms"] = forward_ms
        row["forward_gbs"] = moved_bytes / (forward_ms * 1e-3) / 1e9
        row["forward_fraction_of_copy"] = row["forward_gbs"] / self.copy_gbs


def markdown(results: list, env: dict) -> str:
    lines = [
        f"GPU: {env['gpu']} (driver CUDA {env['cuda_runtime']}); torch {env['torch']}; visdet-ops {env['visdet_ops']}; "
        f"device-to-device copy {env['copy_gbs']:.0f} GB/s (read + write).",
        "",
        "| op | case | visdet-ops ms | peer | peer ms | speed-up | note |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results:
        ours = r["ours"]["median_ms"]
        peer = r.get("peer", {}).get("median_ms")
        ratio = f"{peer / ours:.2f}x" if peer else "-"
        note = []
        if "kept" in r:
            note.append(f"{r['kept']} kept")
        if "forward_gbs" in r:
            note.append(
                f"fwd {r['ours_forward_ms']:.3f} ms, {r['forward_gbs']:.0f} GB/s compulsory "
                f"({100 * r['forward_fraction_of_copy']:.0f}% of copy)"
            )
        if "note" in r:
            note.append(r["note"])
        if "ours_peak_mib" in r:
            note.append(
                f"peak memory {r['ours_peak_mib']:.0f} MiB vs {r['peer_peak_mib']:.0f} MiB "
                f"({r['ours_peak_mib'] / r['peer_peak_mib']:.2f}x)"
            )
        if "fused_gbs" in r:
            note.append(f"{r['fused_gbs']:.0f} GB/s compulsory ({100 * r['fused_fraction_of_copy']:.0f}% of copy)")
        if "peer_forward_ms" in r:
            note.append(f"forward alone {r['ours_forward_ms']:.3f} ms vs {r['peer_forward_ms']:.3f} ms")
        lines.append(
            f"| {r['op']} | {r['case']} | {ours:.3f} | {r.get('peer_name', '-')} | "
            f"{peer if peer is None else f'{peer:.3f}'} | {ratio} | {'; '.join(note)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only the benchmarks of the op families named (op module names)"
    )
    parser.add_argument("--list", action="store_true", help="list the op families and their benchmarks, run nothing")
    args = parser.parse_args(argv)
    missing = unbenchmarked_families()
    if missing:
        print(
            f"op families without a benchmark: {missing} (add a @benchmark function to their modules)", file=sys.stderr
        )
        return 1
    unknown = set(args.only or ()) - set(op_families())
    if unknown:
        parser.error(f"--only: {sorted(unknown)} are not op families; families: {op_families()}")
    chosen = benchmarks(args.only)
    if args.list:
        for b in chosen:
            print(f"{b.family}: {b.run.__module__}.{b.run.__name__} ({', '.join(b.ops)})")
        return 0
    if args.out is None:
        parser.error("--out is required (or --list)")
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 1
    try:
        from torchvision import ops as tv
    except Exception as exc:  # noqa: BLE001
        print(f"torchvision unavailable ({exc}): peers that need it are left out", file=sys.stderr)
        tv = None
    copy_gbs = copy_bandwidth_gbs()
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "visdet_ops": visdet_ops.BUILD_INFO["VERSION"],
        "copy_gbs": copy_gbs,
    }
    results: list = []
    failed = []
    for b in chosen:
        # One family's failure (a wrong result, say) must not hide the others'
        # figures; it still fails the run.
        try:
            b.run(BenchRun(torch.Generator().manual_seed(0), tv, copy_gbs, results))
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{b.family} {b.run.__name__}: {type(exc).__name__}: {exc}")
            print(f"FAILED {failed[-1]}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps({"env": env, "results": results, "failed": failed}, indent=2))
    md = markdown(results, env)
    if failed:
        md += "\nFailed benchmark families (no figures):\n\n" + "\n".join(f"- {f}" for f in failed) + "\n"
    (args.out / "bench.md").write_text(md)
    print(md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
