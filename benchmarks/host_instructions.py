"""Host instructions per bare op call, counted by valgrind's callgrind: a deterministic measure of host cost for
comparing builds (classic / stable) where wall-clock timings of microsecond calls are too noisy (a shared 2-core VM).

Each case runs in its own process under `valgrind --tool=callgrind`, collecting only inside torch's entry point for
a `torch.ops` call from Python (`invokeOperatorFromPython`: argument parsing, dispatch, the autograd kernel, our
host layer and the CPU kernel). The count per call is the collected total divided by the calls made; the kernels
are tiny, so it is mostly host work. Run it once per build (PYTHONPATH picks the build):

  PYTHONPATH=<build> python benchmarks/host_instructions.py [--calls 2000] [--jobs 2] [--case roi_align ...]

Needs valgrind on PATH. About two minutes a case (valgrind runs the torch import too)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

# Each case: the setup and the call, as source for `python -c` (torch.ops only, CPU, no grad).
SETUP = """
import torch, visdet_ops
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
b = torch.rand(16, 4, generator=g) * 50
b[:, 2:] += b[:, :2]
s = torch.rand(16, generator=g)
x = torch.randn(1, 4, 16, 16, generator=g)
rois = torch.tensor([[0, 1.0, 1, 9, 9]] * 4)
ops = torch.ops.visdet_ops
"""
CASES = {
    "bbox_overlaps": "ops.bbox_overlaps(b, b, 'iou', False, 0)",
    "roi_align": "ops.roi_align(x, rois, 7, 7, 1.0, 2, 'avg', True)",
    "roi_pool": "ops.roi_pool(x, rois, 7, 7, 1.0)",
    "nms": "ops.nms(b, s, 0.5, 0)",
    "corner_pool": "ops.corner_pool(x, 'top')",
}
ENTRY = "*invokeOperatorFromPython*"


def _program(call: str, calls: int) -> str:
    """200 warm-up calls, then `calls` more."""
    return SETUP + f"\nwith torch.no_grad():\n    for _ in range(200 + {calls}):\n        {call}\n"


def count(case: str, calls: int) -> float:
    """Instructions per call of one case: (total(200 + calls) - total(200)) / calls, so that the first calls'
    one-time work (lazy initialisation, caches) cancels."""
    totals = []
    for n in (0, calls):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "callgrind.out")
            command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={ENTRY}"]
            command += [f"--callgrind-out-file={out}", sys.executable, "-c", _program(CASES[case], n)]
            subprocess.run(command, check=True, capture_output=True)
            with open(out) as f:
                match = re.search(r"^(?:summary|totals):\s+(\d+)", f.read(), re.MULTILINE)
            totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: every case")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH")
    import visdet_ops  # the build under test, for its label

    label = "stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic"
    cases = args.case or list(CASES)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: count(c, args.calls), cases))
    for case, per_call in zip(cases, results):
        print(f"{label:8s} | {case:14s} | {per_call:9.0f} instructions/call", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
