"""Times two builds of visdet-ops against each other in lockstep: every bench.py timer, call batch by call batch.

  python benchmarks/compare_builds.py --a classic=/path/to/tree --b stable=/path/to/site [--only FAMILY ... | selftest]
      [--rounds 12] [--calls 10] [--limit 0.03] [--json OUT.json] [--md OUT.md]

Issue 23 asks whether the stable-ABI wheel's benchmarks are within 3% of the per-minor (classic) build's. Two
bench.py runs made one after the other cannot tell: on the GPU machine the same build moved by up to 5% between
runs, on rows no host change can move (docs/stable-abi.md, run 20). This harness takes the time between the two
builds out of the comparison:

- One worker process per build (a build cannot share a process with the other: both register `visdet_ops::*`),
  each importing visdet-ops from its own path (PYTHONPATH), both alive for the whole run, on the same GPU.
- Both run the same benchmark functions (benchmarks/op_benchmarks, seed 0: the same inputs), in step. Each
  `bench.cuda_time_ms(fn)` / `bench.cpu_time_ms(fn)` call is a barrier: after its warm-up, the worker waits, and
  the parent has the two workers time `--calls` calls each in turn (A then B, B then A, ...), `--rounds` times.
  Only one worker runs at a time, so neither disturbs the other's timing.
- Per timer: the median of the per-round ratios B / A (paired rounds: a drift over the minutes of a run falls on
  both), and the median time of each build.
- The peers' timers (torchvision, pure PyTorch) run in both workers too. They run the same code in both, so their
  B / A ratio is this harness's own noise: the control, printed with the rows.

A row fails when its own time (`ours`) is slower in B than in A by more than --limit, after dividing by its
control where it has one (run 22 found the same torchvision call up to twice as slow in one worker process as in
the other on host-bound rows: a difference of the processes, not of the builds), and when B falls behind its peer
where A is ahead of it (the issue's second clause). Exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


# --- the worker: runs the benchmark functions, each timer a barrier ---------------------------------------------


class _Channel:
    """JSON lines to the parent on the process's original stdout (fd 1 moves to stderr, so that a print in a
    benchmark cannot break the protocol), commands from stdin."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, message: dict) -> None:
        self.out.write(json.dumps(message) + "\n")

    def receive(self) -> dict:
        line = sys.stdin.readline()
        if not line:
            raise SystemExit("compare_builds worker: the parent went away")
        return json.loads(line)


_COUNTER = iter(range(1 << 30))  # one sequence for every timer of a worker, CUDA and CPU alike


def _lockstep_timer(channel: _Channel, kind: str):
    """A bench.cuda_time_ms / cpu_time_ms look-alike whose calls the parent times in turn with the other build."""
    import bench
    import torch

    def timer(fn, warmup: int = 10 if kind == "cuda" else 1, repeat: int = 50) -> dict:
        index = next(_COUNTER)
        for _ in range(warmup):
            fn()
        if kind == "cuda":
            torch.cuda.synchronize()
        channel.send({"event": "timer", "index": index, "kind": kind})
        times: list[float] = []
        while True:
            command = channel.receive()
            if command["cmd"] == "time":
                batch = bench.timed_calls(fn, command["calls"], cuda=kind == "cuda")
                times += batch
                channel.send({"event": "times", "index": index, "times": batch})
            elif command["cmd"] == "done":
                break
            else:
                raise SystemExit(f"compare_builds worker: unknown command {command}")
        return {**bench.time_stats(times), "timer": index}

    return timer


# `--only selftest`: the cases tagged "compare_builds" in benchmarks/op_benchmarks/<family>.py, CPU calls each with
# its peer (the control), so that the protocol runs without a GPU (tests/test_bench_compare.py). Each such function
# is called with a generator seeded 0 and yields `Case`s (name, ours, peer, peer_name); each becomes a row of its
# family, timed by cpu_time_ms as a bench.py row is.
TAG = "compare_builds"


def _selftest_rows(b, run) -> None:
    for case in b.run(run.gen):
        row = {"op": b.family, "case": case.name, "ours": run.cpu_time_ms(case.ours)}
        if case.peer is not None:
            row["peer"] = run.cpu_time_ms(case.peer)
            row["peer_name"] = case.peer_name
        run.results.append(row)


def worker(only: list[str] | None) -> int:
    channel = _Channel()
    sys.path.insert(0, str(HERE))
    import bench
    import torch

    import visdet_ops

    cuda = torch.cuda.is_available()
    try:
        from torchvision import ops as tv
    except Exception:  # noqa: BLE001
        tv = None
    cuda_timer = _lockstep_timer(channel, "cuda")
    results: list = []
    failed: list[str] = []
    cpu_timer = _lockstep_timer(channel, "cpu")
    copy_gbs = bench.copy_bandwidth_gbs() if cuda else 0.0
    selftest = only == ["selftest"]
    for b in bench.tagged(TAG) if selftest else bench.benchmarks(only):
        # As bench.py: each benchmark its own generator (seed 0), so the inputs are bench.py's.
        run = bench.BenchRun(torch.Generator().manual_seed(0), tv, copy_gbs, results)
        run.cuda_time_ms = cuda_timer if cuda else cpu_timer
        run.cpu_time_ms = cpu_timer
        try:
            if selftest:
                _selftest_rows(b, run)
            else:
                b.run(run)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{b.family} {b.run.__name__}: {type(exc).__name__}: {exc}")
            print(f"FAILED {failed[-1]}", file=sys.stderr)
    env = {
        "torch": torch.__version__,
        "visdet_ops": visdet_ops.BUILD_INFO["VERSION"],
        "path": visdet_ops.__file__,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
    }
    channel.send({"event": "finished", "results": results, "failed": failed, "env": env})
    return 0


# --- the parent: starts both workers and times them in turn -----------------------------------------------------


class _Worker:
    def __init__(self, label: str, path: str, only: list[str] | None, cpus: str | None) -> None:
        self.label = label
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([path, str(HERE)]))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        if only:
            cmd += ["--only", *only]
        if cpus:
            cmd = ["taskset", "-c", cpus, *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.label} ended early (rc {self.proc.wait()}); its stderr is above")
        return json.loads(line)


def run_lockstep(a: _Worker, b: _Worker, rounds: int, calls: int) -> tuple[dict, dict, dict]:
    """Steps both workers through their timers; returns (per-timer stats, A's finished message, B's)."""
    timers: dict[int, dict] = {}
    while True:
        ea, eb = a.receive(), b.receive()
        if ea["event"] == "finished" or eb["event"] == "finished":
            if ea["event"] != eb["event"]:
                raise RuntimeError(f"the workers diverged: {a.label} sent {ea['event']}, {b.label} {eb['event']}")
            return timers, ea, eb
        if (ea["index"], ea["kind"]) != (eb["index"], eb["kind"]):
            raise RuntimeError(f"the workers diverged at timer {ea['index']} / {eb['index']}")
        index = ea["index"]
        if index in timers:
            raise RuntimeError(f"timer index {index} came twice")
        per_round_a, per_round_b, all_a, all_b = [], [], [], []
        for r in range(rounds):
            order = (a, b) if r % 2 == 0 else (b, a)
            for w in order:
                w.send({"cmd": "time", "calls": calls})
                reply = w.receive()
                (per_round_a if w is a else per_round_b).append(statistics.median(reply["times"]))
                (all_a if w is a else all_b).extend(reply["times"])
        a.send({"cmd": "done"})
        b.send({"cmd": "done"})
        ratios = [tb / ta for ta, tb in zip(per_round_a, per_round_b, strict=True) if ta > 0]
        timers[index] = {
            "a_ms": statistics.median(all_a),
            "b_ms": statistics.median(all_b),
            "ratio": statistics.median(ratios) if ratios else float("nan"),
            "ratio_rounds": ratios,
        }


def _rows(finished: dict) -> dict[tuple[str, str], dict]:
    return {(r["op"], r["case"]): r for r in finished["results"] if isinstance(r.get("ours"), dict)}


def report(timers: dict, fa: dict, fb: dict, names: tuple[str, str], limit: float) -> tuple[str, list[str], dict]:
    """The markdown table, the problems, and a JSON-able summary."""
    na, nb = names
    rows_a, rows_b = _rows(fa), _rows(fb)
    lines = [
        f"| op | case | {na} ms | {nb} ms | {nb} / {na} | peer's {nb} / {na} (control) | ratio / control "
        f"| peer ms | {nb} vs peer |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    problems: list[str] = []
    ratios, controls, normalized, table = [], [], [], []
    for key in sorted(set(rows_a) | set(rows_b)):
        if key not in rows_a or key not in rows_b:
            problems.append(f"{key[0]} / {key[1]}: in one build's run only")
            continue
        rb = rows_b[key]
        t = timers.get(rb["ours"].get("timer"))
        if t is None:
            continue
        peer_t = timers.get(rb["peer"].get("timer")) if isinstance(rb.get("peer"), dict) else None
        ratios.append(t["ratio"])
        if peer_t:
            controls.append(peer_t["ratio"])
        peer_a, peer_b = (peer_t["a_ms"], peer_t["b_ms"]) if peer_t else (None, None)
        control = f"{peer_t['ratio']:.3f}" if peer_t else "-"
        # The row's ratio over its control: what the build changes beyond what the two processes differ by
        # for the same code (rows without a peer: the ratio itself).
        judged = t["ratio"] / peer_t["ratio"] if peer_t else t["ratio"]
        normalized.append(judged)
        peer_text = f"{peer_b:.4f}" if peer_b else "-"
        speedup = f"{peer_b / t['b_ms']:.2f}x" if peer_b else "-"
        lines.append(
            f"| {key[0]} | {key[1]} | {t['a_ms']:.4f} | {t['b_ms']:.4f} | {t['ratio']:.3f} | {control} | "
            f"{judged:.3f} | {peer_text} | {speedup} |"
        )
        table.append({"op": key[0], "case": key[1], **t, "peer": peer_t, "judged": judged})
        if judged > 1 + limit:
            problems.append(f"{key[0]} / {key[1]}: {nb} {t['ratio']:.3f}x {na}'s time ({judged:.3f}x its control)")
        if peer_t and t["a_ms"] <= peer_a and t["b_ms"] > peer_b:
            problems.append(f"{key[0]} / {key[1]}: {nb} {t['b_ms']:.4f} ms behind its peer {peer_b:.4f} ms")
    problems += [f"{na}: {f}" for f in fa["failed"]] + [f"{nb}: {f}" for f in fb["failed"]]
    summary = {
        "rows": len(ratios),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "min_ratio": min(ratios) if ratios else None,
        "control_median": statistics.median(controls) if controls else None,
        "control_max_deviation": max(abs(c - 1) for c in controls) if controls else None,
        "judged_median": statistics.median(normalized) if normalized else None,
        "problems": problems,
    }
    text = "\n".join(lines) + "\n\n"
    if ratios:
        text += (
            f"{len(ratios)} rows; {nb} / {na}: median {summary['median_ratio']:.3f}, min {summary['min_ratio']:.3f}, "
            f"max {summary['max_ratio']:.3f}"
        )
        if controls:
            text += (
                f"; control (the peers, the same code in both): median {summary['control_median']:.3f}, "
                f"largest deviation {summary['control_max_deviation']:.1%}"
            )
        text += f"; ratio / control: median {summary['judged_median']:.3f}; {len(problems)} problem(s)\n"
    text += "".join(f"- {p}\n" for p in problems)
    return text, problems, {"summary": summary, "rows": table, "env": {na: fa["env"], nb: fb["env"]}}


def _build(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {spec!r}")
    return name, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--a", type=_build, help="NAME=PATH: the reference build (its tree or site directory)")
    parser.add_argument("--b", type=_build, help="NAME=PATH: the build judged against it")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="FAMILY",
        help="only these op families' benchmarks (selftest: the CPU cases tagged compare_builds)",
    )
    parser.add_argument("--rounds", type=int, default=12, help="alternating rounds per timer (default 12)")
    parser.add_argument("--calls", type=int, default=10, help="timed calls per round and build (default 10)")
    parser.add_argument("--limit", type=float, default=0.03, help="allowed slowdown of B's rows (default 0.03)")
    parser.add_argument("--cpus", help="taskset CPU list for both workers (the same cores, used in turn)")
    parser.add_argument("--json", type=Path, help="write the table and summary as JSON")
    parser.add_argument("--md", type=Path, help="write the markdown table")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.only)
    if not args.a or not args.b:
        parser.error("--a and --b are required")
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    a = _Worker(args.a[0], args.a[1], args.only, args.cpus)
    b = _Worker(args.b[0], args.b[1], args.only, args.cpus)
    started = time.perf_counter()
    try:
        timers, fa, fb = run_lockstep(a, b, args.rounds, args.calls)
    finally:
        for w in (a, b):
            w.proc.stdin.close()
            w.proc.wait()
    text, problems, data = report(timers, fa, fb, (args.a[0], args.b[0]), args.limit)
    data["seconds"] = time.perf_counter() - started
    data["args"] = {"rounds": args.rounds, "calls": args.calls, "limit": args.limit, "only": args.only}
    header = (
        f"{args.a[0]}: visdet-ops {fa['env']['visdet_ops']} ({fa['env']['path']}); {args.b[0]}: visdet-ops "
        f"{fb['env']['visdet_ops']} ({fb['env']['path']}); torch {fa['env']['torch']}; GPU {fa['env']['gpu']}; "
        f"{args.rounds} rounds x {args.calls} calls per timer, in lockstep; {data['seconds']:.0f} s\n\n"
    )
    print(header + text, end="")
    if args.md:
        args.md.write_text(header + text)
    if args.json:
        args.json.write_text(json.dumps(data, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
