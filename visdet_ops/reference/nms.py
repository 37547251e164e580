from __future__ import annotations

import torch


def nms_reference(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0) -> torch.Tensor:
    """Greedy NMS in float64: the indices kept, in descending (stable) score order.

    A box is suppressed by a kept, higher-scored box when
    inter > iou_threshold * union (mmcv's rule, IoU > threshold)."""
    b = boxes.detach().to("cpu", torch.float64)
    s = scores.detach().to("cpu", torch.float64)
    order = torch.sort(s, descending=True, stable=True).indices
    areas = (b[:, 2] - b[:, 0] + offset) * (b[:, 3] - b[:, 1] + offset)
    suppressed = torch.zeros(len(b), dtype=torch.bool)
    keep = []
    for pos, i in enumerate(order.tolist()):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[pos + 1 :]
        w = (torch.minimum(b[i, 2], b[rest, 2]) - torch.maximum(b[i, 0], b[rest, 0]) + offset).clamp(min=0)
        h = (torch.minimum(b[i, 3], b[rest, 3]) - torch.maximum(b[i, 1], b[rest, 1]) + offset).clamp(min=0)
        inter = w * h
        union = areas[i] + areas[rest] - inter
        suppressed[rest[inter > iou_threshold * union]] = True
    return torch.tensor(keep, dtype=torch.long)
