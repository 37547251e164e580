"""bbox_overlaps: IoU / IoF / GIoU between two sets of boxes (mmcv.ops name and
arguments, mmdet's modes and batch dimensions)."""

from __future__ import annotations

import math

import torch

from ..reference.bbox_overlaps import bbox_overlaps_reference
from . import _args, example, note_device
from ._registration import compute_dtype, float32_autocast, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["bbox_overlaps"]

# The op's `str mode` (the C++ side checks it too, naming the argument).
_MODES = ("iou", "iof", "giou")


@torch.library.register_fake("visdet_ops::bbox_overlaps")
def _bbox_overlaps_fake(bboxes1, bboxes2, mode="iou", aligned=False, offset=0, eps=1e-6):
    torch._check(
        bboxes1.dim() >= 2 and bboxes1.size(-1) == 4, lambda: "bbox_overlaps: bboxes1 must have shape [..., M, 4]"
    )
    torch._check(
        bboxes2.dim() >= 2 and bboxes2.size(-1) == 4, lambda: "bbox_overlaps: bboxes2 must have shape [..., N, 4]"
    )
    torch._check(bboxes1.shape[:-2] == bboxes2.shape[:-2], lambda: "bbox_overlaps: batch dimensions must match")
    torch._check(mode in _MODES, lambda: f"bbox_overlaps: mode must be 'iou', 'iof' or 'giou', got '{mode}'")
    _args.check_fake("bbox_overlaps", "offset", offset, _args.OFFSET)
    if aligned:
        torch._check(bboxes1.size(-2) == bboxes2.size(-2), lambda: "bbox_overlaps: aligned needs M == N")
        return bboxes1.new_empty(bboxes1.shape[:-1])
    return bboxes1.new_empty((*bboxes1.shape[:-1], bboxes2.size(-2)))


def _setup_context(ctx, inputs, output):
    bboxes1, bboxes2, mode, aligned, offset, eps = inputs
    ctx.save_for_backward(bboxes1, bboxes2)
    ctx.mode, ctx.aligned, ctx.offset, ctx.eps = mode, aligned, offset, eps


def _backward(ctx, grad):
    # The kernel is forward-only; the gradient recomputes the pairs in
    # differentiable PyTorch (same formula, tested equal to the kernel).
    # 16-bit boxes are differentiated in float32, as the kernel computes them, and each gradient is rounded once
    # to its box's dtype: in float16, 1 / union for a union clamped to eps (1e-6 by default: two zero-area boxes)
    # overflows to inf, and inf * 0 made NaN gradients where the true gradient is 0.
    bboxes1, bboxes2 = ctx.saved_tensors
    want = ctx.needs_input_grad[:2]
    with torch.enable_grad():
        a = bboxes1.detach().to(compute_dtype(bboxes1.dtype)).requires_grad_(want[0])
        b = bboxes2.detach().to(compute_dtype(bboxes2.dtype)).requires_grad_(want[1])
        out = bbox_overlaps_reference(a, b, ctx.mode, ctx.aligned, ctx.offset, ctx.eps)
        inputs = [t for t, w in zip((a, b), want, strict=True) if w]
        grads = iter(torch.autograd.grad(out, inputs, grad.to(out.dtype)) if inputs else ())
    grad1 = next(grads).to(bboxes1.dtype) if want[0] else None
    grad2 = next(grads).to(bboxes2.dtype) if want[1] else None
    return grad1, grad2, None, None, None, None


# Autograd and autocast are registered here, for the classic and the stable build alike (docs/stable-abi.md).
_bbox_overlaps = register_autograd("bbox_overlaps", _backward, _setup_context, backward_uses_autograd=True)


# Autocast: both box sets go to float32 (float64 stays float64): coordinates are never rounded to 16 bits, and an IoU
# near 0.5 keeps 24 bits rather than 11 or 8. The output is float32.
register_autocast("bbox_overlaps", float32_autocast("bbox_overlaps", "bboxes1", "bboxes2"))


def bbox_overlaps(
    bboxes1: torch.Tensor,
    bboxes2: torch.Tensor,
    mode: str = "iou",
    aligned: bool | None = None,
    offset: int = 0,
    *,
    is_aligned: bool | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Overlaps between boxes (x1, y1, x2, y2).

    mmcv.ops.bbox_overlaps' arguments (`aligned`, `offset`), plus mmdet's
    (`mmdet.structures.bbox.bbox_overlaps(bboxes1, bboxes2, mode='iou',
    is_aligned=False, eps=1e-6)`) as keywords, so calls written for either work.

    Args:
        bboxes1: [..., M, 4]; bboxes2: [..., N, 4] with the same leading dims.
            An empty 1-D tensor (shape [0]) is taken as [0, 4], as mmcv does.
        mode: 'iou', 'iof' (intersection over bboxes1's area) or 'giou'.
        aligned: pairs bboxes1[i] with bboxes2[i] (M == N) instead of all pairs.
            None (the default) means False, as mmcv's default; None only lets
            an explicit aligned=False be told apart when is_aligned is given.
        offset: 0, or 1 for the legacy "+1 pixel" box size (mmcv).
        is_aligned: mmdet's name for `aligned` (keyword only); giving both
            with different values is a ValueError.
        eps: mmdet's eps (keyword only, finite, >= 0): unions (iou, giou),
            bboxes1's areas (iof) and enclosing areas (giou) are clamped to
            at least eps before dividing, so degenerate boxes give 0 (with
            eps=0, 0/0 gives NaN as in mmdet).

    Returns:
        [..., M, N] (or [..., M] when aligned), bboxes1's dtype; a NaN or
        infinite coordinate gives NaN. Differentiable.
    """
    if mode not in _MODES:
        raise _args.ArgumentError(f"bbox_overlaps: mode must be one of {list(_MODES)}, got {mode!r}")
    if offset not in (0, 1):
        # mmdet's fifth positional argument is eps, not offset.
        hint = "; mmdet's eps is a keyword here: eps=..." if isinstance(offset, float) else ""
        raise _args.ArgumentError(f"bbox_overlaps: offset must be 0 or 1, got {offset!r}{hint}")
    if is_aligned is not None:
        if aligned is not None and bool(aligned) != bool(is_aligned):
            raise _args.ArgumentError(
                f"bbox_overlaps: aligned={aligned!r} and is_aligned={is_aligned!r} disagree "
                "(is_aligned is mmdet's name for aligned: give one of them)"
            )
        aligned = is_aligned
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise _args.ArgumentError(f"bbox_overlaps: eps must be a finite number >= 0, got {eps!r}")
    # mmcv accepts torch.FloatTensor([]) for "no boxes" (its docstring's example).
    if bboxes1.dim() == 1 and bboxes1.numel() == 0:
        bboxes1 = bboxes1.reshape(0, 4)
    if bboxes2.dim() == 1 and bboxes2.numel() == 0:
        bboxes2 = bboxes2.reshape(0, 4)
    note_device(bboxes1)
    return _bbox_overlaps(bboxes1, bboxes2, mode, bool(aligned), int(offset), float(eps))


@example("bbox_overlaps")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Every mode, batched, all pairs and aligned (offset 1)."""
    from ._examples import boxes

    a = boxes(70, gen)[0].reshape(2, 35, 4).to(dtype)
    b = boxes(300, gen)[0].reshape(2, 150, 4).to(dtype)
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 1e-2
    for mode in _MODES:
        got = bbox_overlaps(a.to(device), b.to(device), mode)
        want = bbox_overlaps_reference(a.double(), b.double(), mode)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {mode}: wrong result"
        got = bbox_overlaps(a.to(device), a.flip(1).to(device), mode, True, 1)
        want = bbox_overlaps_reference(a.double(), a.flip(1).double(), mode, True, 1)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {mode} aligned: wrong result"
    return None
