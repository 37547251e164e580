"""detectron2's rotated-box ops on visdet-ops' kernels: `from detectron2.layers import nms_rotated` becomes
`from visdet_ops.detectron2_compat import nms_rotated`, with detectron2's names, signatures and results.

detectron2 writes a rotated box `(x_ctr, y_ctr, w, h, angle)` with the angle in **degrees, counter-clockwise** in
image space (y down), where mmcv (and visdet-ops' own names) take radians and, for box_iou_rotated and nms_rotated,
clockwise by default. Both describe the same rectangles: detectron2's angle `a` is mmcv's `radians(a)` with
`clockwise=False`, for boxes and for RoIs. These adapters convert the angle column and call the ops of
`visdet_ops.ops.box_iou_rotated`, `nms_rotated` and `roi_align_rotated`, so they are those ops' kernels, gradients,
autocast rules, fake impls and ONNX nodes; docs/migration.md ("detectron2's rotated ops") lists every difference
from detectron2's own kernels.

Not an mmcv path (it is in `_OWN_MODULES` of `visdet_ops/__init__.py`); it needs torch only, no detectron2."""

from __future__ import annotations

import math

import torch
from torch import nn

from .ops import _args, attributes_repr
from .ops.box_iou_rotated import box_iou_rotated
from .ops.nms_rotated import batched_nms_rotated as _batched_nms_rotated
from .ops.nms_rotated import nms_rotated as _nms_rotated
from .ops.roi_align_rotated import roi_align_rotated as _roi_align_rotated

__all__ = ["ROIAlignRotated", "batched_nms_rotated", "nms_rotated", "pairwise_iou_rotated", "roi_align_rotated"]

_DEG = math.pi / 180.0


def _radians(t: torch.Tensor, name: str, columns: int) -> torch.Tensor:
    """t ([K, columns], detectron2's layout, the angle last, in degrees) with the angle in radians. 16-bit boxes are
    converted in float32 (the ops compute in float32) and returned in their dtype."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2 or t.size(1) != columns:
        raise ValueError(f"{name} must have shape [K, {columns}], got {list(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    compute = torch.promote_types(t.dtype, torch.float32)
    angle = t[:, -1:].to(compute) * _DEG
    return torch.cat([t[:, :-1], angle.to(t.dtype)], dim=1)


def pairwise_iou_rotated(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """detectron2.layers.pairwise_iou_rotated: the [N, M] IoU of boxes1 [N, 5] and boxes2 [M, 5]
    (x_ctr, y_ctr, w, h, angle in degrees, counter-clockwise)."""
    return box_iou_rotated(_radians(boxes1, "boxes1", 5), _radians(boxes2, "boxes2", 5), clockwise=False)


def nms_rotated(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """detectron2.layers.nms_rotated: the int64 indices of the boxes [N, 5] (angles in degrees, counter-clockwise)
    that rotated NMS keeps, in decreasing order of score."""
    _, keep = _nms_rotated(_radians(boxes, "boxes", 5), scores, iou_threshold, clockwise=False)
    return keep


def batched_nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float
) -> torch.Tensor:
    """detectron2.layers.batched_nms_rotated: rotated NMS within each category of idxs; the kept indices in
    decreasing order of score."""
    return _batched_nms_rotated(_radians(boxes, "boxes", 5), scores, idxs, iou_threshold, clockwise=False)


def roi_align_rotated(
    input: torch.Tensor, roi: torch.Tensor, output_size, spatial_scale: float, sampling_ratio: int
) -> torch.Tensor:
    """detectron2.layers.roi_align_rotated.roi_align_rotated (the autograd Function's apply): RoIs [K, 6]
    (batch index, x_ctr, y_ctr, w, h, angle in degrees, counter-clockwise), pixel-aligned sampling (detectron2 has
    no legacy mode)."""
    return _roi_align_rotated(
        input, _radians(roi, "roi", 6), output_size, spatial_scale, sampling_ratio, aligned=True, clockwise=False
    )


class ROIAlignRotated(nn.Module):
    """detectron2.layers.ROIAlignRotated(output_size, spatial_scale, sampling_ratio): forward(input, rois) with rois
    [K, 6] (batch index, x_ctr, y_ctr, w, h, angle in degrees, counter-clockwise)."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int):
        super().__init__()
        self.output_size = _args.check_pair("ROIAlignRotated", "output_size", output_size, _args.POOLED_SIZE)
        self.spatial_scale = spatial_scale
        self.sampling_ratio = _args.check_int("ROIAlignRotated", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return _roi_align_rotated(
            input,
            _radians(rois, "rois", 6),
            self.output_size,
            self.spatial_scale,
            self.sampling_ratio,
            aligned=True,
            clockwise=False,
        )

    def __repr__(self) -> str:
        return attributes_repr(self, "output_size", "spatial_scale", "sampling_ratio")
