"""Launches every CUDA kernel of visdet-ops, forward and backward, for compute-sanitizer, in two passes:

1. the op modules' example cases (visdet_ops.ops.EXAMPLES, one per op module) in every float dtype, so a new op is
   swept as soon as its module declares its example;
2. every public op and module under torch.autocast (float16 and bfloat16), as an AMP step feeds it: the
   AUTOCAST_CASES of tests/ops/test_<family>.py (tests/autocast_harness.py), where float32 convs and linears make
   16-bit activations beside float32 RoIs, offsets, weights and parameters (the mixed dtypes of issue 25, e.g.
   a deformable conv module with a float32 input inside autocast).

Exits non-zero on a wrong result (each pass checks its answers), so a sanitizer run also checks the answers.

  compute-sanitizer --tool memcheck python tests/sanitize_sweep.py [--pass examples|autocast] [family ...]
  compute-sanitizer --tool initcheck --print-limit 0 --show-backtrace no python tests/sanitize_sweep.py \
      --initialized-products          (then: python -m ci.sanitizer_report LOG)

ci/gpu_check.py runs it under memcheck, racecheck and initcheck. --device cpu runs the same calls on the CPU
(tests/test_autocast.py does, so the script cannot rot unseen)."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

import torch

import visdet_ops  # noqa: F401 - registers the ops and imports every op module
from visdet_ops.ops import EXAMPLES
from visdet_ops.ops._examples import DTYPES

ROOT = Path(__file__).resolve().parent.parent
AUTOCAST_DTYPES = (torch.float16, torch.bfloat16)


def autocast_cases(families: list[str]) -> list[tuple[str, object]]:
    """(family.name, make_case) of every AUTOCAST_CASES entry of the families' test files."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # `tests` as a package: the test files import their helpers relatively
    found = []
    for family in families:
        module = importlib.import_module(f"tests.ops.test_{family}")
        found += [(f"{family}.{name}", make) for name, make in getattr(module, "AUTOCAST_CASES", {}).items()]
    return found


def cublas_probe(device: torch.device) -> int:
    """No visdet-ops code: a 16-bit cuBLAS GEMM of the size DCN's backward makes under autocast, then a copy reading
    its result. On Hopper, initcheck reports that copy ("Uninitialized access ... by cudaMemcpy source", run 22):
    it does not see the GEMM's own writes, so any kernel reading a 16-bit GEMM's output (DCN's col2im reads
    W^T @ grad_out, its forward copies W @ columns) is reported too. Run it beside the sweep to tell those reports
    from ours: `compute-sanitizer --tool initcheck python tests/sanitize_sweep.py --pass cublas-probe`."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(8, 72, generator=gen).to(device, dtype)
        g = torch.randn(8, 1344, generator=gen).to(device, dtype)
        product = torch.mm(w.t(), g)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"cublas probe {dtype}: copying the GEMM's result", flush=True)
        copy = product.clone()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if not torch.equal(copy, product):
            print(f"cublas probe {dtype}: the copy differs", file=sys.stderr)
            return 1
    print("cublas probe: done")
    return 0


def initialise_products(dispatch_key: str = "CUDA") -> torch.library.Library:
    """Makes every aten mm / bmm / addmm / baddbmm of this process (ours, called from C++ through the dispatcher,
    and torch's, such as nn.Linear's) write into a zero-filled output: for initcheck (`--initialized-products`).

    initcheck does not see the stores of Hopper cuBLAS kernels (`--pass cublas-probe` shows it with no code of
    ours), so every read of a GEMM's result is reported as uninitialised: DCN's col2im reading W^T @ grad_out,
    the deformable RoI pool reading the offsets of its pack's 16-bit nn.Linear, torch's own kernels after a 16-bit
    linear (run 24: 525k reports). A zero fill before the product is a store initcheck does see, and a GEMM writes
    every element of its output, so this removes exactly those reports. The products run as their out= overloads (the
    same cuBLAS calls). Returns the Library holding the overrides; they last as long as it does."""
    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - overriding aten's kernels is the point

    def mm(a, b):
        return torch.mm(a, b, out=a.new_zeros(a.size(0), b.size(1)))

    def bmm(a, b):
        return torch.bmm(a, b, out=a.new_zeros(a.size(0), a.size(1), b.size(2)))

    def addmm(bias, a, b, *, beta=1, alpha=1):
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=a.new_zeros(a.size(0), b.size(1)))

    def baddbmm(bias, a, b, *, beta=1, alpha=1):
        out = a.new_zeros(a.size(0), a.size(1), b.size(2))
        return torch.baddbmm(bias, a, b, beta=beta, alpha=alpha, out=out)

    with warnings.catch_warnings():  # "Overriding a previously registered kernel": intended
        warnings.simplefilter("ignore")
        for name, fn in (("mm", mm), ("bmm", bmm), ("addmm", addmm), ("baddbmm", baddbmm)):
            lib.impl(name, fn, dispatch_key)
    return lib


def main(argv: list[str] | None = None) -> int:
    """Every op family's example and autocast cases, or those whose family name contains one of the arguments."""
    parser = argparse.ArgumentParser()
    parser.add_argument("families", nargs="*")
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--pass", dest="which", choices=("examples", "autocast", "both", "cublas-probe"), default="both"
    )
    parser.add_argument(
        "--initialized-products",
        action="store_true",
        help="run every aten mm/bmm/addmm/baddbmm into a zero-filled output (for initcheck: initialise_products)",
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    families = [f for f in sorted(EXAMPLES) if not args.families or any(n in f for n in args.families)]
    if not families:
        print(f"no family matches {args.families}; families: {sorted(EXAMPLES)}", file=sys.stderr)
        return 1
    device = torch.device(args.device)
    if args.which == "cublas-probe":
        return cublas_probe(device)
    overrides = initialise_products("CUDA" if device.type == "cuda" else "CPU") if args.initialized_products else None
    try:
        return _sweep(args, device, families, products_note=overrides is not None)
    finally:
        if overrides is not None:  # main() may run inside a process that goes on (the CPU suite): undo them
            overrides._destroy()


def _sweep(args: argparse.Namespace, device: torch.device, families: list[str], products_note: bool) -> int:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    gen = torch.Generator().manual_seed(1)
    launched = []
    if args.which in ("examples", "both"):
        for dtype in DTYPES:
            for family in families:
                error = EXAMPLES[family].run(device, dtype, gen)
                sync()
                if error is not None:
                    print(f"{family} {dtype}: {error}", file=sys.stderr)
                    return 1
        launched.append(f"{len(families)} op families x {len(DTYPES)} dtypes")
    if args.which in ("autocast", "both"):
        cases = autocast_cases(families)  # puts the tree's root on sys.path: `tests` imports as a package
        from tests.autocast_harness import check_case

        # The CPU's autocast has no float16 kernels for torch's own convs.
        dtypes = AUTOCAST_DTYPES if device.type == "cuda" else (torch.bfloat16,)
        for dtype in dtypes:
            for name, make in cases:
                try:
                    check_case(name, make, device, dtype, gen)
                    sync()
                except AssertionError as e:
                    print(f"autocast {dtype} {name}: {e}", file=sys.stderr)
                    return 1
        launched.append(f"{len(cases)} autocast cases x {len(dtypes)} dtypes")
    note = ", every aten product into a zero-filled output" if products_note else ""
    print(f"sanitize sweep on {device}: {' and '.join(launched)} launched, results correct{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
