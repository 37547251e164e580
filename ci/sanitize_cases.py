"""Launches every CUDA kernel of visdet-ops once (forward and backward, each
dtype) on small inputs, for compute-sanitizer. Exits non-zero on a wrong result,
so a sanitizer run also checks the answers.

One function per op family in CASES: fn(gen, dtype) returns None when the
result is right, else a message. Every case is called with float32, float64,
float16 and bfloat16; a case returns None at once for a dtype its op rejects
(and its tests pin that rejection)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import visdet_ops
from visdet_ops.reference.nms import nms_reference
from visdet_ops.reference.roi_align import roi_align_reference
from visdet_ops.reference.roi_pool import roi_pool_reference

CASES: list[Callable[[torch.Generator, torch.dtype], str | None]] = []


def case(fn):
    CASES.append(fn)
    return fn


@case
def nms_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # several 64-box blocks, so both the mask and the walk kernel cross block boundaries.
    if dtype not in (torch.float32, torch.float64):
        return None
    n = 300
    xy = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 96 * 8).round() / 8
    wh = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 * 8 + 4).round() / 8
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.rand(n, generator=gen, dtype=torch.float64)
    keep = visdet_ops.nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), 0.5)[1]
    if keep.tolist() != nms_reference(boxes, scores, 0.5).tolist():
        return "nms: wrong result"
    return None


# Loose enough for bfloat16 outputs of order 1-10 (8 significant bits), far tighter than a
# wrong sample or bin; float32/float64 get 1e-4.
def _tolerance(dtype: torch.dtype) -> float:
    return 3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


# RoIs the kernels must refuse on their own (no host check on CUDA): a batch index outside
# [0, 2) and a NaN coordinate. Their output must be NaN, and memcheck proves nothing is read
# or written out of bounds for them.
_INVALID_ROIS = torch.tensor([[5, 1, 1, 7, 6], [0, float("nan"), 1, 7, 6]], dtype=torch.float64)


@case
def roi_align_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # both pool modes, forward and backward, every float dtype.
    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    all_rois = torch.cat([rois, _INVALID_ROIS]).cuda().to(dtype)
    for mode in ("avg", "max"):
        xc = x.cuda().to(dtype).requires_grad_()
        out = visdet_ops.roi_align(xc, all_rois, 3, 1.0, 0, mode, True)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        want = roi_align_reference(x, rois, (3, 3), 1.0, 0, mode, True)
        got = out.detach().cpu().double()
        tol = _tolerance(dtype)
        if not torch.allclose(got[:4], want, rtol=tol, atol=tol):
            return f"roi_align {mode}: wrong result"
        if not torch.isnan(got[4:]).all():
            return f"roi_align {mode}: an invalid RoI did not give NaN"
        if not torch.isfinite(xc.grad).all():
            return f"roi_align {mode}: non-finite gradient"
    return None


@case
def roi_pool_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # forward and backward, every float dtype; values exact in bfloat16, so results are exact.
    x = (torch.rand(2 * 3, 9 * 11, generator=gen).argsort(1).double() - 50).div(8).reshape(2, 3, 9, 11)
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    all_rois = torch.cat([rois, _INVALID_ROIS]).cuda().to(dtype)
    xc = x.cuda().to(dtype).requires_grad_()
    out = visdet_ops.roi_pool(xc, all_rois, 3, 1.0)
    out.backward(torch.ones_like(out))
    torch.cuda.synchronize()
    want = roi_pool_reference(x.requires_grad_(), rois.to(dtype), (3, 3), 1.0)
    (want_grad,) = torch.autograd.grad(want, x, torch.ones_like(want))
    got = out.detach().cpu().double()
    if not torch.equal(got[:4], want.detach()):
        return "roi_pool: wrong result"
    if not torch.isnan(got[4:]).all():
        return "roi_pool: an invalid RoI did not give NaN"
    if not torch.equal(xc.grad.cpu().double(), want_grad):
        return "roi_pool: wrong gradient"
    return None


def main() -> int:
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for fn in CASES:
            error = fn(gen, dtype)
            torch.cuda.synchronize()
            if error is not None:
                print(f"{fn.__name__} {dtype}: {error}", file=sys.stderr)
                return 1
    print(f"sanitize cases: {len(CASES)} op families launched, results correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
