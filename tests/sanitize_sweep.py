"""Launches every CUDA kernel of visdet-ops, forward and backward, in every float dtype, for
compute-sanitizer: the op modules' example cases (visdet_ops.ops.EXAMPLES, one per op module), so a
new op is swept as soon as its module declares its example. Exits non-zero on a wrong result, so a
sanitizer run also checks the answers.

  compute-sanitizer --tool memcheck python tests/sanitize_sweep.py [family ...]

ci/gpu_check.py runs it under memcheck, racecheck and initcheck."""

from __future__ import annotations

import sys

import torch

import visdet_ops  # noqa: F401 - registers the ops and imports every op module
from visdet_ops.ops import EXAMPLES
from visdet_ops.ops._examples import DTYPES


def main(argv: list[str] | None = None) -> int:
    """Every op family's example, or those whose family name contains one of the arguments."""
    names = sys.argv[1:] if argv is None else argv
    examples = [e for e in EXAMPLES.values() if not names or any(n in e.family for n in names)]
    if not examples:
        print(f"no example case matches {names}; families: {sorted(EXAMPLES)}", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    gen = torch.Generator().manual_seed(1)
    for dtype in DTYPES:
        for example in examples:
            error = example.run(device, dtype, gen)
            torch.cuda.synchronize()
            if error is not None:
                print(f"{example.family} {dtype}: {error}", file=sys.stderr)
                return 1
    print(f"sanitize sweep: {len(examples)} op families x {len(DTYPES)} dtypes launched, results correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
