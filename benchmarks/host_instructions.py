"""Host instructions per call, counted by valgrind's callgrind: a deterministic measure of host cost for comparing
builds (classic / stable) where wall-clock timings of microsecond calls are too noisy (a shared 2-core VM, a GPU
host whose per-process timings vary by tens of percent).

One process per build runs every case on tiny CPU inputs: warm-up calls, then `--calls` measured calls between two
calls of os.getppid(), which callgrind is told to dump its counters before (--dump-before=os_getppid). The count of
the interval that holds the measured calls, divided by their number, is that case's instructions per call: the
Python wrapper, autograd, the dispatcher, our host layer and the CPU kernel (the kernels are the same source in both
builds and tiny here, so a difference between builds is host work). The cases are the `@benchmark(...,
tags=("host_instructions",))` functions of benchmarks/op_benchmarks/<family>.py: each is called with nothing and
yields `Case`s (name, ours: the call, setup: the code that makes its inputs from `g`, a generator seeded 0 before
each case; PRELUDE gives them torch, visdet_ops, ops = torch.ops.visdet_ops and fwd_bwd). Run it once per build
(PYTHONPATH picks it):

  PYTHONPATH=<build> python benchmarks/host_instructions.py [--calls 500] [--case NAME ...] [--json OUT]

Needs valgrind on PATH; about three minutes (valgrind runs the torch import too)."""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TAG = "host_instructions"
PRELUDE = """
import os, torch, visdet_ops
torch.set_num_threads(1)
ops = torch.ops.visdet_ops


def fwd_bwd(fn, *leaves):
    inputs = [t.detach().requires_grad_() for t in leaves]
    fn(*inputs).sum().backward()
"""


def cases() -> dict[str, tuple[str, str]]:
    """name: (the code that makes the inputs, the call: one statement), every family's, in bench.tagged order."""
    from bench import tagged  # benchmarks/bench.py: case discovery (imports torch and visdet_ops)

    return {c.name: (c.setup, c.ours) for b in tagged(TAG) for c in b.run()}


MARKER = "os_getppid"


def _program(names: list[str], calls: int) -> str:
    lines, table = [PRELUDE], cases()
    for name in names:
        setup, call = table[name]
        lines.append(f"g = torch.Generator().manual_seed(0)\n{setup}")
        lines.append(f"for _ in range(100):\n    {call}\nos.getppid()")
        lines.append(f"for _ in range({calls}):\n    {call}\nos.getppid()")
    return "\n".join(lines) + "\n"


def measure(names: list[str], calls: int) -> dict[str, float]:
    """Instructions per call of each case, from one process under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--dump-before={MARKER}", f"--callgrind-out-file={out}"]
        subprocess.run([*command, sys.executable, "-c", _program(names, calls)], check=True, capture_output=True)
        totals = {}
        for path in glob.glob(out + ".*"):
            with open(path) as f:
                totals[int(path.rsplit(".", 1)[1])] = int(re.search(r"^totals:\s+(\d+)", f.read(), re.M).group(1))
    # Dump k holds what ran since dump k-1; case j's measured calls end at marker 2j + 2.
    return {name: totals[2 * j + 2] / calls for j, name in enumerate(names)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    table = cases()
    parser.add_argument("--case", action="append", choices=sorted(table), help="default: every case")
    parser.add_argument("--json", help="write the counts here too")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH")
    import torch

    import visdet_ops  # the build under test, for its label

    label = "stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic"
    counts = measure(args.case or list(table), args.calls)
    for case, per_call in counts.items():
        print(f"{label:8s} | {case:26s} | {per_call:9.0f} instructions/call", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"build": label, "torch": torch.__version__, "calls": args.calls, "counts": counts}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
