"""box_iou_rotated: IoU / IoF between two sets of rotated boxes (x, y, w, h, angle in radians), mmcv.ops' name,
arguments and angle conventions. Forward only, as mmcv's."""

from __future__ import annotations

import torch

from ..reference.box_iou_rotated import box_iou_rotated_reference
from . import _args, example, note_device
from ._registration import float32_autocast, register_autocast

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["box_iou_rotated"]

# The op's `str mode` (the C++ side checks it too, naming the argument).
_MODES = ("iou", "iof")


def _check_boxes_fake(name: str, boxes, shape: str) -> None:
    torch._check(
        boxes.dim() == 2 and boxes.size(1) == 5,
        lambda: f"box_iou_rotated: {name} must have shape {shape} (x, y, w, h, angle), got {list(boxes.shape)}",
    )


@torch.library.register_fake("visdet_ops::box_iou_rotated")
def _box_iou_rotated_fake(bboxes1, bboxes2, mode="iou", aligned=False, clockwise=True):
    _check_boxes_fake("bboxes1", bboxes1, "[M, 5]")
    _check_boxes_fake("bboxes2", bboxes2, "[N, 5]")
    torch._check(bboxes1.dtype == bboxes2.dtype, lambda: "box_iou_rotated: bboxes1 and bboxes2 must have one dtype")
    torch._check(mode in _MODES, lambda: f"box_iou_rotated: mode must be 'iou' or 'iof', got '{mode}'")
    if aligned:
        torch._check(bboxes1.size(0) == bboxes2.size(0), lambda: "box_iou_rotated: aligned needs M == N")
        return bboxes1.new_empty((bboxes1.size(0),))
    return bboxes1.new_empty((bboxes1.size(0), bboxes2.size(0)))


# Autocast (registered here for the classic and the stable build alike: docs/stable-abi.md): both box sets go to
# float32 (float64 stays float64), as bbox_overlaps': centres and angles are never rounded to 16 bits (a bfloat16
# angle is off by up to 0.6 degree at pi), and the polygon clipping runs in float32. The output is float32.
register_autocast("box_iou_rotated", float32_autocast("box_iou_rotated", "bboxes1", "bboxes2"))


def box_iou_rotated(
    bboxes1: torch.Tensor,
    bboxes2: torch.Tensor,
    mode: str = "iou",
    aligned: bool = False,
    clockwise: bool = True,
) -> torch.Tensor:
    """IoU (or IoF) of rotated boxes, mmcv.ops.box_iou_rotated's contract.

    Args:
        bboxes1: [M, 5] boxes (x_center, y_center, width, height, angle in radians).
        bboxes2: [N, 5] boxes, same dtype and device.
        mode: 'iou', or 'iof' (intersection over bboxes1's area).
        aligned: pairs bboxes1[i] with bboxes2[i] (M == N) instead of all pairs.
        clockwise: the angle's positive direction is clockwise in image coordinates (y down), mmcv's default;
            False: counter-clockwise (the angle is negated first, as mmcv does).

    Returns:
        [M, N] (aligned: [M]) in bboxes1's dtype (float16 / bfloat16 computed in float32). A box with
        width * height < 1e-14 has IoU 0 with every box (mmcv's rule); a non-finite parameter gives NaN. No
        gradient (mmcv has none): the output does not require grad.
    """
    if mode not in _MODES:
        raise _args.ArgumentError(f"box_iou_rotated: mode must be one of {list(_MODES)}, got {mode!r}")
    for name, boxes in (("bboxes1", bboxes1), ("bboxes2", bboxes2)):
        if not isinstance(boxes, torch.Tensor):
            raise TypeError(f"box_iou_rotated: {name} must be a Tensor, got {type(boxes).__name__}")
    note_device(bboxes1)
    # No gradient (as mmcv's, whose kernel fills a new tensor): detached, the output does not require grad, so a
    # backward through it raises instead of silently giving the boxes no gradient.
    return torch.ops.visdet_ops.box_iou_rotated(
        bboxes1.detach(), bboxes2.detach(), mode, bool(aligned), bool(clockwise)
    )


@example("box_iou_rotated")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Both modes and angle conventions, all pairs (more rows and columns than one 32 x 32 CUDA tile) and aligned."""
    from ._examples import rotated_boxes

    a = rotated_boxes(70, gen)[0].to(dtype).double()
    b = rotated_boxes(40, gen)[0].to(dtype).double()
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 1e-2
    for mode in _MODES:
        for clockwise in (True, False):
            got = box_iou_rotated(a.to(device, dtype), b.to(device, dtype), mode, False, clockwise)
            want = box_iou_rotated_reference(a, b, mode, False, clockwise)
            if got.dtype != dtype or not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
                return f"box_iou_rotated {mode} clockwise={clockwise}: wrong result"
        got = box_iou_rotated(a[:40].to(device, dtype), b.to(device, dtype), mode, True)
        want = box_iou_rotated_reference(a[:40], b, mode, True)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"box_iou_rotated {mode} aligned: wrong result"
    return None
