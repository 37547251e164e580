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
from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference
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


@case
def multi_scale_deformable_attn_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # head_dim 32: vector loads + warp-shuffle reduction; 3: scalar loads + atomic
    # reduction; 256 (float32: 64 threads per query and head): atomic reduction.
    spatial = torch.tensor([[6, 7], [3, 4], [2, 2]])
    start = torch.tensor([0, 42, 54])
    tol = 1e-4 if dtype in (torch.float32, torch.float64) else 1e-1
    for dim, heads in ((32, 2), (3, 3), (256, 1)):
        value = torch.randn(2, 58, heads, dim, generator=gen, dtype=torch.float64).to(dtype).double()
        loc = (torch.rand(2, 37, heads, 3, 4, 2, generator=gen, dtype=torch.float64) * 1.4 - 0.2).to(dtype).double()
        attn = torch.rand(2, 37, heads, 3, 4, generator=gen, dtype=torch.float64).to(dtype).double()
        inputs = [t.cuda().to(dtype).requires_grad_() for t in (value, loc, attn)]
        out = visdet_ops.multi_scale_deformable_attn(inputs[0], spatial.cuda(), start.cuda(), inputs[1], inputs[2])
        out.sum().backward()
        torch.cuda.synchronize()
        ref_inputs = [t.detach().clone().requires_grad_() for t in (value, loc, attn)]
        want = multi_scale_deformable_attn_reference(ref_inputs[0], spatial, ref_inputs[1], ref_inputs[2])
        want.sum().backward()
        if not torch.allclose(out.detach().cpu().double(), want.detach(), rtol=tol, atol=tol):
            return f"multi_scale_deformable_attn head_dim {dim}: wrong output"
        for name, got, ref in zip(
            ("value", "sampling_locations", "attention_weights"), inputs, ref_inputs, strict=True
        ):
            scale = max(ref.grad.abs().max().item(), 1.0)
            if (got.grad.cpu().double() - ref.grad).abs().max().item() > 4 * tol * scale:
                return f"multi_scale_deformable_attn head_dim {dim}: wrong grad of {name}"
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
