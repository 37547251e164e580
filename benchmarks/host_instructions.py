"""Host instructions per call, counted by valgrind's callgrind: a deterministic measure of host cost for comparing
builds (classic / stable) where wall-clock timings of microsecond calls are too noisy (a shared 2-core VM, a GPU
host whose per-process timings vary by tens of percent).

One process per build runs every case on tiny CPU inputs: warm-up calls, then `--calls` measured calls between two
calls of os.getppid(), which callgrind is told to dump its counters before (--dump-before=os_getppid). The count of
the interval that holds the measured calls, divided by their number, is that case's instructions per call: the
Python wrapper, autograd, the dispatcher, our host layer and the CPU kernel (the kernels are the same source in both
builds and tiny here, so a difference between builds is host work). Run it once per build (PYTHONPATH picks it):

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

SETUP = """
import os, torch, visdet_ops
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
b = torch.rand(16, 4, generator=g) * 50
b[:, 2:] += b[:, :2]
s = torch.rand(16, generator=g)
x = torch.randn(1, 4, 16, 16, generator=g)
rois = torch.tensor([[0, 1.0, 1, 9, 9]] * 4)
dx = torch.randn(2, 4, 8, 8, generator=g)
dw = torch.randn(4, 4, 3, 3, generator=g)
doff = 0.5 * torch.randn(2, 18, 8, 8, generator=g)
dmask = torch.rand(2, 9, 8, 8, generator=g)
logits = torch.randn(64, 8, generator=g)
labels = torch.randint(0, 8, (64,), generator=g)
value = torch.randn(1, 20, 2, 4, generator=g)
shapes = torch.tensor([[4, 4], [2, 2]])
starts = torch.tensor([0, 16])
locs = torch.rand(1, 6, 2, 2, 2, 2, generator=g)
attn = torch.rand(1, 6, 2, 2, 2, generator=g)
mx = torch.randn(1, 4, 8, 8, generator=g)
mmask = (torch.rand(1, 8, 8, generator=g) > 0.5).float()
mw = torch.randn(4, 4, 3, 3, generator=g)
mb = torch.randn(4, generator=g)
ops = torch.ops.visdet_ops


def fwd_bwd(fn, *leaves):
    inputs = [t.detach().requires_grad_() for t in leaves]
    fn(*inputs).sum().backward()
"""
# name: the call, one statement.
CASES = {
    "bbox_overlaps": "visdet_ops.bbox_overlaps(b, b)",
    "nms": "visdet_ops.nms(b, s, 0.5)",
    "roi_align op": "ops.roi_align(x, rois, 7, 7, 1.0, 2, 'avg', True)",
    "roi_align fwd+bwd": "fwd_bwd(lambda t: visdet_ops.roi_align(t, rois, 7, 1.0, 2, 'avg', True), x)",
    "roi_pool fwd+bwd": "fwd_bwd(lambda t: visdet_ops.roi_pool(t, rois, 7, 1.0), x)",
    "corner_pool fwd+bwd": "fwd_bwd(lambda t: visdet_ops.corner_pool(t, 'top'), x)",
    "DCNv2 fwd+bwd": (
        "fwd_bwd(lambda t, w, o, m: visdet_ops.modulated_deform_conv2d(t, o, m, w, None, 1, 1, 1, 1, 1), "
        "dx, dw, doff, dmask)"
    ),
    "masked_conv2d fwd": "visdet_ops.masked_conv2d(mx, mmask, mw, mb, 1)",
    "MSDA fwd+bwd": (
        "fwd_bwd(lambda v, l, a: visdet_ops.multi_scale_deformable_attn(v, shapes, starts, l, a, 64), "
        "value, locs, attn)"
    ),
    "sigmoid_focal_loss fwd+bwd": "fwd_bwd(lambda t: visdet_ops.sigmoid_focal_loss(t, labels), logits)",
}
MARKER = "os_getppid"


def _program(cases: list[str], calls: int) -> str:
    lines = [SETUP]
    for name in cases:
        call = CASES[name]
        lines.append(f"for _ in range(100):\n    {call}\nos.getppid()")
        lines.append(f"for _ in range({calls}):\n    {call}\nos.getppid()")
    return "\n".join(lines) + "\n"


def measure(cases: list[str], calls: int) -> dict[str, float]:
    """Instructions per call of each case, from one process under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", f"--dump-before={MARKER}", f"--callgrind-out-file={out}"]
        subprocess.run([*command, sys.executable, "-c", _program(cases, calls)], check=True, capture_output=True)
        totals = {}
        for path in glob.glob(out + ".*"):
            with open(path) as f:
                totals[int(path.rsplit(".", 1)[1])] = int(re.search(r"^totals:\s+(\d+)", f.read(), re.M).group(1))
    # Dump k holds what ran since dump k-1; case j's measured calls end at marker 2j + 2.
    return {name: totals[2 * j + 2] / calls for j, name in enumerate(cases)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: every case")
    parser.add_argument("--json", help="write the counts here too")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not on PATH")
    import torch

    import visdet_ops  # the build under test, for its label

    label = "stable" if visdet_ops.BUILD_INFO.get("STABLE_ABI") else "classic"
    counts = measure(args.case or list(CASES), args.calls)
    for case, per_call in counts.items():
        print(f"{label:8s} | {case:26s} | {per_call:9.0f} instructions/call", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"build": label, "torch": torch.__version__, "calls": args.calls, "counts": counts}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
