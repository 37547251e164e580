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
from visdet_ops.reference.bbox_overlaps import bbox_overlaps_reference
from visdet_ops.reference.carafe import carafe_reference
from visdet_ops.reference.corner_pool import corner_pool_reference
from visdet_ops.reference.masked_conv import masked_conv2d_reference
from visdet_ops.reference.nms import nms_match_reference, nms_reference, soft_nms_reference
from visdet_ops.reference.roi_align import roi_align_reference

CASES: list[Callable[[torch.Generator, torch.dtype], str | None]] = []


def case(fn):
    CASES.append(fn)
    return fn


def _boxes(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    # 1/8-pixel grid below 128 px: exact in float16 too.
    xy = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 96 * 8).round() / 8
    wh = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 * 8 + 4).round() / 8
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen, dtype=torch.float64)


@case
def nms_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # several 64-box blocks, so both the mask and the walk kernel cross block boundaries.
    boxes, scores = _boxes(300, gen)
    scores = scores.to(dtype).double()  # what the kernel sorts
    keep = visdet_ops.nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), 0.5)[1]
    if keep.tolist() != nms_reference(boxes.to(dtype).double(), scores, 0.5).tolist():
        return "nms: wrong result"
    idxs = torch.randint(0, 5, (300,), generator=gen)
    keep = visdet_ops.batched_nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), idxs.cuda(), {"iou_threshold": 0.5})[
        1
    ]
    if keep.tolist() != nms_reference(boxes.to(dtype).double(), scores, 0.5, idxs=idxs).tolist():
        return "batched_nms: wrong result"
    dets = torch.cat([boxes, scores[:, None]], 1)
    groups = visdet_ops.nms_match(dets.cuda().to(dtype), 0.5)
    if [g.tolist() for g in groups] != nms_match_reference(dets.to(dtype).double(), 0.5):
        return "nms_match: wrong result"
    return None


@case
def soft_nms_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    boxes, scores = _boxes(300, gen)
    b, s = boxes.to(dtype), scores.to(dtype)
    idxs = torch.randint(0, 4, (300,), generator=gen)
    for classes in (None, idxs):
        _, want = soft_nms_reference(b.double(), s.double(), 0.3, 0.5, 0.01, "gaussian", idxs=classes)
        _, got = torch.ops.visdet_ops.soft_nms(
            b.cuda(), s.cuda(), 0.3, 0.5, 0.01, 2, 0, None if classes is None else classes.cuda()
        )
        tol = 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2
        if got.shape != want.shape or not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"soft_nms (classes: {classes is not None}): wrong scores"
    if dtype == torch.float64:
        # 30000 float64 scores (240 KB) exceed shared memory: the global-scratch path.
        boxes, scores = _boxes(30000, gen)
        boxes = boxes * 20
        want, _ = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.9, "linear")
        got, _ = torch.ops.visdet_ops.soft_nms(boxes.cuda(), scores.cuda(), 0.3, 0.5, 0.9, 1, 0)
        if got.tolist() != want.tolist():
            return "soft_nms (global scratch): wrong result"
    return None


@case
def bbox_overlaps_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    a, _ = _boxes(70, gen)
    b, _ = _boxes(300, gen)
    a = a.reshape(2, 35, 4)
    b = b.reshape(2, 150, 4)
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 1e-2
    for mode, name in enumerate(("iou", "iof", "giou")):
        got = torch.ops.visdet_ops.bbox_overlaps(a.cuda().to(dtype), b.cuda().to(dtype), mode, False, 0)
        want = bbox_overlaps_reference(a.to(dtype).double(), b.to(dtype).double(), name)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {name}: wrong result"
        got = torch.ops.visdet_ops.bbox_overlaps(a.cuda().to(dtype), a.flip(1).cuda().to(dtype), mode, True, 1)
        want = bbox_overlaps_reference(a.to(dtype).double(), a.flip(1).to(dtype).double(), name, True, 1)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {name} aligned: wrong result"
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


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-4)
    return torch.allclose(got.detach().cpu().double(), want.detach(), rtol=tol, atol=tol)


def _forward_backward(fn, ref, inputs: list[torch.Tensor], dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Runs fn on CUDA copies of inputs (in dtype) and ref on float64 copies
    (of the dtype-rounded values); compares outputs and input gradients."""
    rounded = [t.to(dtype).double() for t in inputs]
    ref_in = [t.clone().requires_grad_() for t in rounded]
    want = ref(*ref_in)
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    want_grads = torch.autograd.grad(want, ref_in, grad)
    dev_in = [t.cuda().to(dtype).requires_grad_() for t in rounded]
    got = fn(*dev_in)
    got_grads = torch.autograd.grad(got, dev_in, grad.cuda().to(dtype))
    torch.cuda.synchronize()
    if not _close(got, want, dtype):
        return "wrong forward"
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        if not _close(g, w, dtype):
            return f"wrong gradient of input {i}"
    return None


@case
def corner_pool_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Small integers: ties along every scan (the tie rule of the backward).
    x = torch.randint(-3, 4, (2, 3, 37, 45), generator=gen).double()
    for mode in ("top", "bottom", "left", "right"):
        error = _forward_backward(
            lambda t, m=mode: visdet_ops.corner_pool(t, m),
            lambda t, m=mode: corner_pool_reference(t, m),
            [x],
            dtype,
            gen,
        )
        if error is not None:
            return f"corner_pool {mode}: {error}"
    return None


@case
def masked_conv_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    x = torch.randn(2, 6, 17, 19, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 6, 3, 3, generator=gen, dtype=torch.float64) * 0.3
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 17, 19, generator=gen, dtype=torch.float64) > 0.6
    error = _forward_backward(
        lambda f, wt, bs: visdet_ops.masked_conv2d(f, mask.cuda(), wt, bs, 1),
        lambda f, wt, bs: masked_conv2d_reference(f, mask, wt, bs, (1, 1)),
        [x, w, b],
        dtype,
        gen,
    )
    return None if error is None else f"masked_conv2d: {error}"


@case
def carafe_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Not a multiple of the 32 x 8 tile, more channels than one chunk (32);
    # k=5 with float64 exercises the tiled path, k=7 float64 the fallback.
    x = torch.randn(2, 40, 11, 21, generator=gen, dtype=torch.float64)
    for k, g in ((5, 2), (7, 1)):
        masks = torch.randn(2, g, k * k, 22, 42, generator=gen, dtype=torch.float64).softmax(2).view(2, -1, 22, 42)
        for name, fn in (("carafe", visdet_ops.carafe), ("carafe_naive", visdet_ops.carafe_naive)):
            error = _forward_backward(
                lambda f, m, fn=fn, k=k, g=g: fn(f, m, k, g, 2),
                lambda f, m, k=k, g=g: carafe_reference(f, m, k, g, 2),
                [x, masks],
                dtype,
                gen,
            )
            if error is not None:
                return f"{name} k={k}: {error}"
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
