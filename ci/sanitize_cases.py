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
from visdet_ops.reference.focal_loss import sigmoid_focal_loss_reference, softmax_focal_loss_reference
from visdet_ops.reference.nms import nms_reference
from visdet_ops.reference.roi_align import roi_align_reference

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


@case
def roi_align_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # both pool modes, forward and backward.
    if dtype not in (torch.float32, torch.float64):
        return None
    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64)
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    for mode in ("avg", "max"):
        xc = x.cuda().to(dtype).requires_grad_()
        out = visdet_ops.roi_align(xc, rois.cuda().to(dtype), 3, 1.0, 0, mode, True)
        out.sum().backward()
        torch.cuda.synchronize()
        want = roi_align_reference(x, rois, (3, 3), 1.0, 0, mode, True)
        if not torch.allclose(out.detach().cpu().double(), want, rtol=1e-4, atol=1e-4):
            return f"roi_align {mode}: wrong result"
    return None


@case
def focal_loss_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Both losses, every reduction (elementwise and block-sum + finalize kernels), every softmax
    # lane-group size (C = 3, 7, 16, 80), forward and backward, and the bad-target flag path.
    rtol = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    kinds = (
        (visdet_ops.sigmoid_focal_loss, sigmoid_focal_loss_reference, "sigmoid"),
        (visdet_ops.softmax_focal_loss, softmax_focal_loss_reference, "softmax"),
    )
    for classes in (3, 7, 16, 80):
        x = (torch.randn(300, classes, generator=gen, dtype=torch.float64) * 3).to(dtype).double()
        target = torch.randint(0, classes + 1, (300,), generator=gen)
        weight = (torch.rand(classes, generator=gen, dtype=torch.float64) + 0.5).to(dtype).double()
        for fn, ref, name in kinds:
            t = target if name == "sigmoid" else torch.where(target == classes, -1, target)
            for reduction in ("none", "mean", "sum"):
                xc = x.cuda().to(dtype).requires_grad_()
                out = fn(xc, t.cuda(), 2.0, 0.25, weight.cuda().to(dtype), reduction)
                out.sum().backward()
                torch.cuda.synchronize()
                xr = x.detach().clone().requires_grad_()
                want = ref(xr, t, 2.0, 0.25, weight, reduction)
                want.sum().backward()
                for what, got, exp in (("loss", out.detach(), want.detach()), ("grad", xc.grad, xr.grad)):
                    atol = rtol * exp.abs().max().item() * 1e-2 + 1e-7
                    if not torch.allclose(got.cpu().double(), exp, rtol=rtol, atol=atol):
                        return f"{name}_focal_loss C={classes} {reduction} {what}: wrong result"
            try:
                fn(x.cuda().to(dtype), torch.full((300,), classes + 1).cuda(), 2.0, 0.25, None, "sum")
            except RuntimeError as exc:
                if "target values must" not in str(exc):
                    return f"{name}_focal_loss: unexpected error for a bad target: {exc}"
            else:
                return f"{name}_focal_loss: a bad target was not reported"
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
