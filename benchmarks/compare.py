"""Compares two benchmark runs (bench.json of benchmarks/bench.py) row by row: a stable-ABI build against the
per-minor (classic) build of the same tree, on the same GPU, one run after the other.

  python benchmarks/compare.py CLASSIC/bench.json STABLE/bench.json [--limit 0.03] [--out FILE.md]
  python benchmarks/compare.py --classic C1.json C2.json C3.json --stable S1.json S2.json S3.json

Several runs of each build (alternating rounds, as ci/gpu_check.py --rounds makes them) are merged row by row: the
median over the runs of each run's median time, ours and the peer's, so that one noisy run does not decide a row.
For every (op, case) row of both builds: our time in each, their ratio (stable / classic), and, where the row
has a peer, whether the stable build is still at least as fast as the peer of its own runs. Prints a markdown table
and a summary line; exit 1 when a row is slower than `limit` (3%: issue 13) or falls behind its peer where the
classic build was ahead.

With two or more runs of each build, the table also gives each row's noise floor: the larger, over the two builds,
of the gap between the merged halves of that build's own runs (runs 1, 3, 5, ... against 2, 4, 6, ...). A row
whose stable / classic gap is under its noise floor is one the runs cannot tell apart from a build compared with
itself; the summary counts the rows over the limit that stand above their noise floor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    data = json.loads(path.read_text())
    return {(r["op"], r["case"]): r for r in data["results"] if "ours" in r}


def _merged(paths: list[Path]) -> dict[tuple[str, str], dict]:
    """The rows of several runs of one build: per row and per key (ours, peer), the median of the runs' medians.
    A row missing from one run is kept from the others."""
    runs = [_rows(p) for p in paths]
    merged = {}
    for key in sorted(set().union(*runs)):
        row = {}
        for field in ("ours", "peer"):
            values = [m for run in runs if key in run and (m := _ms(run[key], field))]
            if values:
                row[field] = {"median_ms": statistics.median(values), "runs": len(values)}
        merged[key] = row
    return merged


def _noise(paths: list[Path]) -> dict[tuple[str, str], float]:
    """Per row, |1 - merged(odd runs) / merged(even runs)| of one build's runs (our time)."""
    if len(paths) < 2:
        return {}
    first, second = _merged(paths[0::2]), _merged(paths[1::2])
    noise = {}
    for key in set(first) & set(second):
        a, b = _ms(first[key], "ours"), _ms(second[key], "ours")
        if a and b:
            noise[key] = abs(1 - a / b)
    return noise


def _ms(row: dict, key: str) -> float | None:
    value = row.get(key)
    return None if not isinstance(value, dict) else value.get("median_ms")


def compare(
    classic: dict, stable: dict, limit: float, noise: dict | None = None
) -> tuple[list[str], list[str], list[float]]:
    noise = noise or {}
    lines = [
        "| op | case | classic ms | stable ms | stable / classic | noise floor | peer ms (stable run) "
        "| stable vs peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    problems, ratios = [], []
    for key in sorted(set(classic) & set(stable)):
        c, s = _ms(classic[key], "ours"), _ms(stable[key], "ours")
        if not c or not s:
            continue
        ratio = s / c
        ratios.append(ratio)
        peer = _ms(stable[key], "peer")
        speedup = f"{peer / s:.2f}x" if peer else "-"
        floor = noise.get(key)
        floor_text = f"{floor:.1%}" if floor is not None else "-"
        lines.append(
            f"| {key[0]} | {key[1]} | {c:.4f} | {s:.4f} | {ratio:.3f} | {floor_text} | "
            f"{f'{peer:.4f}' if peer else '-'} | {speedup} |"
        )
        if ratio > 1 + limit:
            within = f" (under its noise floor {floor:.1%})" if floor is not None and ratio - 1 <= floor else ""
            problems.append(f"{key[0]} / {key[1]}: stable {ratio:.3f}x the classic time{within}")
        classic_peer = _ms(classic[key], "peer")
        if peer and classic_peer and c <= classic_peer and s > peer:
            problems.append(f"{key[0]} / {key[1]}: stable {s:.4f} ms behind its peer {peer:.4f} ms")
    missing = sorted(set(classic) ^ set(stable))
    problems += [f"{op} / {case}: in one run only" for op, case in missing]
    return lines, problems, ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("classic", type=Path, nargs="?", help="one run of the classic build")
    parser.add_argument("stable", type=Path, nargs="?", help="one run of the stable build")
    parser.add_argument("--classic", dest="classic_runs", type=Path, nargs="+", default=[], help="runs, merged")
    parser.add_argument("--stable", dest="stable_runs", type=Path, nargs="+", default=[], help="runs, merged")
    parser.add_argument("--limit", type=float, default=0.03, help="allowed slowdown of a row (default 0.03)")
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    classic_runs = [p for p in [args.classic, *args.classic_runs] if p]
    stable_runs = [p for p in [args.stable, *args.stable_runs] if p]
    if not classic_runs or not stable_runs:
        parser.error("give at least one run of each build")
    noise = _noise(classic_runs)
    for key, value in _noise(stable_runs).items():
        noise[key] = max(value, noise.get(key, 0.0))
    lines, problems, ratios = compare(_merged(classic_runs), _merged(stable_runs), args.limit, noise)
    above = [p for p in problems if "noise floor" not in p]
    summary = (
        f"{len(ratios)} rows; stable / classic: median {statistics.median(ratios):.3f}, "
        f"max {max(ratios):.3f}, min {min(ratios):.3f}; {len(problems)} problem(s), "
        f"{len(problems) - len(above)} of them under the row's noise floor"
        if ratios
        else "no common rows"
    )
    text = "\n".join([*lines, "", summary, *(f"- {p}" for p in problems)]) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 1 if problems or not ratios else 0


if __name__ == "__main__":
    sys.exit(main())
