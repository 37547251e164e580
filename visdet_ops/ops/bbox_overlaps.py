"""bbox_overlaps: IoU / IoF / GIoU between two sets of boxes (mmcv.ops name and
arguments, mmdet's modes and batch dimensions)."""

from __future__ import annotations

import torch

from ..reference.bbox_overlaps import bbox_overlaps_reference
from . import _args, note_device, smoke_test

_MODES = {"iou": 0, "iof": 1, "giou": 2}
_MODE_NAMES = {v: k for k, v in _MODES.items()}


@torch.library.register_fake("visdet_ops::bbox_overlaps")
def _bbox_overlaps_fake(bboxes1, bboxes2, mode=0, aligned=False, offset=0):
    torch._check(
        bboxes1.dim() >= 2 and bboxes1.size(-1) == 4, lambda: "bbox_overlaps: bboxes1 must have shape [..., M, 4]"
    )
    torch._check(
        bboxes2.dim() >= 2 and bboxes2.size(-1) == 4, lambda: "bbox_overlaps: bboxes2 must have shape [..., N, 4]"
    )
    torch._check(bboxes1.shape[:-2] == bboxes2.shape[:-2], lambda: "bbox_overlaps: batch dimensions must match")
    _args.check_fake("bbox_overlaps", "mode", mode, (0, 2))
    _args.check_fake("bbox_overlaps", "offset", offset, _args.OFFSET)
    if aligned:
        torch._check(bboxes1.size(-2) == bboxes2.size(-2), lambda: "bbox_overlaps: aligned needs M == N")
        return bboxes1.new_empty(bboxes1.shape[:-1])
    return bboxes1.new_empty((*bboxes1.shape[:-1], bboxes2.size(-2)))


def _setup_context(ctx, inputs, output):
    bboxes1, bboxes2, mode, aligned, offset = inputs
    ctx.save_for_backward(bboxes1, bboxes2)
    ctx.mode, ctx.aligned, ctx.offset = mode, aligned, offset


def _backward(ctx, grad):
    # The kernel is forward-only; the gradient recomputes the pairs in
    # differentiable PyTorch (same formula, tested equal to the kernel).
    bboxes1, bboxes2 = ctx.saved_tensors
    want = ctx.needs_input_grad[:2]
    with torch.enable_grad():
        a = bboxes1.detach().requires_grad_(want[0])
        b = bboxes2.detach().requires_grad_(want[1])
        out = bbox_overlaps_reference(a, b, _MODE_NAMES[ctx.mode], ctx.aligned, ctx.offset)
        inputs = [t for t, w in zip((a, b), want, strict=True) if w]
        grads = iter(torch.autograd.grad(out, inputs, grad) if inputs else ())
    return next(grads) if want[0] else None, next(grads) if want[1] else None, None, None, None


torch.library.register_autograd("visdet_ops::bbox_overlaps", _backward, setup_context=_setup_context)


def bbox_overlaps(
    bboxes1: torch.Tensor, bboxes2: torch.Tensor, mode: str = "iou", aligned: bool = False, offset: int = 0
) -> torch.Tensor:
    """Overlaps between boxes (x1, y1, x2, y2).

    Args:
        bboxes1: [..., M, 4]; bboxes2: [..., N, 4] with the same leading dims.
        mode: 'iou', 'iof' (intersection over bboxes1's area) or 'giou'.
        aligned: pairs bboxes1[i] with bboxes2[i] (M == N) instead of all pairs.
        offset: 0, or 1 for the legacy "+1 pixel" box size.

    Returns:
        [..., M, N] (or [..., M] when aligned), bboxes1's dtype. Unions and
        enclosing areas are clamped to >= 1e-6 as in mmdet, so degenerate boxes
        give 0; a NaN or infinite coordinate gives NaN. Differentiable.
    """
    if mode not in _MODES:
        raise ValueError(f"bbox_overlaps: mode must be one of {list(_MODES)}, got {mode!r}")
    if offset not in (0, 1):
        raise ValueError(f"bbox_overlaps: offset must be 0 or 1, got {offset!r}")
    note_device(bboxes1)
    return torch.ops.visdet_ops.bbox_overlaps(bboxes1, bboxes2, _MODES[mode], bool(aligned), int(offset))


@smoke_test("bbox_overlaps")
def _smoke(device: torch.device) -> None:
    a = torch.tensor([[0.0, 0, 10, 10], [5, 5, 15, 15]], device=device)
    b = torch.tensor([[0.0, 0, 10, 10], [10, 0, 20, 10], [20, 20, 30, 30]], device=device)
    got = bbox_overlaps(a, b).cpu()
    want = bbox_overlaps_reference(a.double().cpu(), b.double().cpu()).float()
    if not torch.allclose(got, want, atol=1e-6):
        raise AssertionError(f"bbox_overlaps smoke: expected {want.tolist()}, got {got.tolist()}")
