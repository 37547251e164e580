"""nms_rotated in float64 pure PyTorch: the greedy loop over the float64 IoUs of visdet_ops.reference.box_iou_rotated
(the exact polygon intersection)."""

from __future__ import annotations

import torch

from .box_iou_rotated import box_iou_rotated_reference


def nms_rotated_reference(
    dets: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float,
    labels: torch.Tensor | None = None,
    clockwise: bool = True,
) -> torch.Tensor:
    """The kept indices of mmcv's nms_rotated, in descending score order (ties: lower index first, a stable sort):
    a box is dropped when an earlier kept box of the same label (any box without labels) has IoU > iou_threshold
    with it (a NaN IoU never suppresses)."""
    n = dets.size(0)
    if n == 0:
        return torch.empty(0, dtype=torch.long)
    order = torch.sort(scores.detach().cpu(), descending=True, stable=True).indices
    boxes = dets.detach().cpu().to(torch.float64)[order]
    iou = box_iou_rotated_reference(boxes, boxes, "iou", False, clockwise)
    suppress = iou > iou_threshold
    if labels is not None:
        classes = labels.detach().cpu()[order]
        suppress &= classes[:, None] == classes[None, :]
    removed = torch.zeros(n, dtype=torch.bool)
    later = torch.arange(n)
    keep = []
    for i in range(n):
        if removed[i]:
            continue
        keep.append(i)
        removed |= suppress[i] & (later > i)
    return order[torch.tensor(keep, dtype=torch.long)]
