from __future__ import annotations

import torch


def bbox_overlaps_reference(
    bboxes1: torch.Tensor,
    bboxes2: torch.Tensor,
    mode: str = "iou",
    aligned: bool = False,
    offset: int = 0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """mmdet's bbox_overlaps in plain, differentiable PyTorch (any dtype, any
    leading batch dims), with mmcv's `offset` on every width and height and
    mmdet's `eps` (unions, iof areas and enclosing areas clamped to >= eps). A
    non-finite coordinate gives NaN for every pair it is in."""
    if aligned:
        a, b = bboxes1, bboxes2
    else:
        a, b = bboxes1[..., :, None, :], bboxes2[..., None, :, :]
    area_a = (a[..., 2] - a[..., 0] + offset) * (a[..., 3] - a[..., 1] + offset)
    area_b = (b[..., 2] - b[..., 0] + offset) * (b[..., 3] - b[..., 1] + offset)
    lt = torch.maximum(a[..., :2], b[..., :2])
    rb = torch.minimum(a[..., 2:], b[..., 2:])
    wh = (rb - lt + offset).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a if mode == "iof" else area_a + area_b - inter
    union = union.clamp(min=eps)
    poison = (a.sum(-1) + b.sum(-1)) * 0
    ious = inter / union + poison
    if mode != "giou":
        return ious
    enclose_wh = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2]) + offset).clamp(min=0)
    enclose = (enclose_wh[..., 0] * enclose_wh[..., 1]).clamp(min=eps)
    return ious - (enclose - union) / enclose
