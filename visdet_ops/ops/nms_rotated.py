"""Rotated NMS: nms_rotated (mmcv.ops name and contract) and batched_nms_rotated (torchvision's and detectron2's
batched_nms contract), boxes (x, y, w, h, angle in radians). mmcv's batched_nms takes rotated boxes too
(nms_cfg type 'nms_rotated': visdet_ops/ops/nms.py runs this family's op)."""

from __future__ import annotations

import torch

from . import example, note_device, refuse_graph_capture
from ._boxes import KEPT_DEPENDS_ON_DATA, class_ids
from ._registration import float32_autocast, register_autocast

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["batched_nms_rotated", "nms_rotated"]


@torch.library.register_fake("visdet_ops::nms_rotated")
def _nms_rotated_fake(dets, scores, iou_threshold, labels=None, clockwise=True):
    torch._check(
        dets.dim() == 2 and dets.size(1) == 5,
        lambda: f"nms_rotated: dets must have shape [N, 5] (x, y, w, h, angle), got {list(dets.shape)}",
    )
    torch._check(
        scores.dim() == 1 and scores.size(0) == dets.size(0), lambda: "nms_rotated: scores must have shape [N]"
    )
    if labels is not None:
        torch._check(
            labels.dim() == 1 and labels.size(0) == dets.size(0), lambda: "nms_rotated: labels must have shape [N]"
        )
    # How many boxes survive depends on the data: an unbacked size.
    num_kept = torch.library.get_ctx().new_dynamic_size()
    return dets.new_empty((num_kept,), dtype=torch.long)


# Autocast (registered here for the classic and the stable build alike: docs/stable-abi.md): dets and scores go to
# float32 (float64 stays float64), as nms': box parameters are never rounded to 16 bits and the IoUs are computed in
# float32 (the kernels' compute dtype for 16-bit boxes anyway). The output is int64 indices.
register_autocast("nms_rotated", float32_autocast("nms_rotated", "dets", "scores"))


def _labels(labels, dets):
    """mmcv's labels (its test passes float32 ones): integer, floating point or bool class values, compared by value
    (batched_nms' idxs rule, visdet_ops/ops/_boxes.py's class_ids); anything else is left to the op's checks."""
    return None if labels is None else class_ids(labels, dets)


def nms_rotated(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float, labels=None, clockwise: bool = True):
    """Non-maximum suppression of rotated boxes, mmcv.ops.nms_rotated's contract.

    Args:
        dets: [N, 5] boxes (x_center, y_center, width, height, angle in radians).
        scores: [N] scores (any floating dtype, on dets' device).
        iou_threshold: a box whose IoU with a kept, higher-scored box is > this is dropped.
        labels: [N] class of each box (integer, floating or bool values, as mmcv's float labels), or None: boxes
            suppress only boxes with an equal label.
        clockwise: the angle's positive direction is clockwise in image coordinates (mmcv's default); False:
            counter-clockwise.

    Returns:
        (dets [K, 6] kept boxes with their score, keep [K] int64 indices into dets), in descending score order,
        ties to the lower index. No boxes: a [0, 6] tensor and an empty keep (mmcv returns (dets, None)).
    """
    note_device(dets)
    refuse_graph_capture("nms_rotated", dets, KEPT_DEPENDS_ON_DATA)
    keep = torch.ops.visdet_ops.nms_rotated(dets, scores, float(iou_threshold), _labels(labels, dets), bool(clockwise))
    # index_select, not dets[keep]: the same rows with less host work per call.
    kept = torch.cat((dets.index_select(0, keep), scores.index_select(0, keep).unsqueeze(1)), dim=1)
    return kept, keep


def batched_nms_rotated(
    boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float, clockwise: bool = True
) -> torch.Tensor:
    """Class-aware rotated NMS with torchvision's batched_nms contract (detectron2's batched_nms_rotated, in mmcv's
    units: radians, clockwise by default): boxes suppress only boxes with the same idxs value, in one kernel (no
    coordinate offsets).

    Args:
        boxes: [N, 5] (x_center, y_center, width, height, angle in radians); scores: [N].
        idxs: [N] class of each box (integer, floating or bool values, compared by value).
        iou_threshold: IoU > this suppresses.
        clockwise: as nms_rotated's.

    Returns:
        keep: int64 indices of the kept boxes, in descending score order (ties to the lower index).
    """
    note_device(boxes)
    refuse_graph_capture("batched_nms_rotated", boxes, KEPT_DEPENDS_ON_DATA)
    return torch.ops.visdet_ops.nms_rotated(
        boxes, scores, float(iou_threshold), class_ids(idxs, boxes), bool(clockwise)
    )


@example("nms_rotated")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """nms_rotated without and with labels, both angle conventions, and batched_nms_rotated, over several 64-box
    blocks (the mask and walk kernels cross block boundaries)."""
    from ..reference.box_iou_rotated import box_iou_rotated_reference
    from ..reference.nms_rotated import nms_rotated_reference
    from ._examples import clear_threshold, rotated_boxes

    boxes, scores = rotated_boxes(200, gen)
    b, s = boxes.to(dtype), scores.to(dtype)
    bd, sd = b.to(device), s.to(device)
    labels = torch.randint(0, 5, (200,), generator=gen)
    # A threshold that no IoU lies at (float32 rounding could put it on either side: not an error).
    ious = torch.cat(
        [box_iou_rotated_reference(b.double(), b.double(), clockwise=cw).flatten() for cw in (True, False)]
    )
    iou = clear_threshold(ious, (0.5, 0.45, 0.55, 0.4, 0.6, 0.35, 0.65), 1e-4)
    for clockwise in (True, False):
        want = nms_rotated_reference(b.double(), s.double(), iou, clockwise=clockwise)
        dets, keep = nms_rotated(bd, sd, iou, clockwise=clockwise)
        if keep.tolist() != want.tolist() or list(dets.shape) != [len(want), 6]:
            return f"nms_rotated clockwise={clockwise}: wrong result"
    want = nms_rotated_reference(b.double(), s.double(), iou, labels)
    if nms_rotated(bd, sd, iou, labels.to(device))[1].tolist() != want.tolist():
        return "nms_rotated with labels: wrong result"
    if batched_nms_rotated(bd, sd, labels.to(device), iou).tolist() != want.tolist():
        return "batched_nms_rotated: wrong result"
    return None
