from __future__ import annotations

import torch


def nms_reference(
    boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, offset: int = 0, idxs: torch.Tensor | None = None
) -> torch.Tensor:
    """Greedy NMS in float64: the indices kept, in descending (stable) score order.

    A box is suppressed by a kept, higher-scored box when
    inter > iou_threshold * union (mmcv's rule, IoU > threshold), and, with
    idxs, only when both have the same class."""
    b = boxes.detach().to("cpu", torch.float64)
    s = scores.detach().to("cpu", torch.float64)
    c = None if idxs is None else idxs.detach().cpu()
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
        hit = inter > iou_threshold * union
        if c is not None:
            hit &= c[rest] == c[i]
        suppressed[rest[hit]] = True
    return torch.tensor(keep, dtype=torch.long)


def _iou_row(b: torch.Tensor, i: int, rest: torch.Tensor, offset: float) -> torch.Tensor:
    w = (torch.minimum(b[i, 2], b[rest, 2]) - torch.maximum(b[i, 0], b[rest, 0]) + offset).clamp(min=0)
    h = (torch.minimum(b[i, 3], b[rest, 3]) - torch.maximum(b[i, 1], b[rest, 1]) + offset).clamp(min=0)
    inter = w * h
    area_i = (b[i, 2] - b[i, 0] + offset) * (b[i, 3] - b[i, 1] + offset)
    area_r = (b[rest, 2] - b[rest, 0] + offset) * (b[rest, 3] - b[rest, 1] + offset)
    union = area_i + area_r - inter
    ovr = torch.where(union > 0, inter / union, torch.zeros_like(inter))
    return torch.nan_to_num(ovr, nan=0.0)


def soft_nms_reference(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    iou_threshold: float = 0.3,
    sigma: float = 0.5,
    min_score: float = 1e-3,
    method: str = "linear",
    offset: int = 0,
    idxs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """mmcv's soft-NMS in float64: (kept indices, their scores at pick time),
    in descending score order (ties: lower index first). Per class with idxs.
    NaN scores are dropped; a degenerate or NaN IoU counts as 0."""
    b = boxes.detach().to("cpu", torch.float64)
    s = scores.detach().to("cpu", torch.float64).clone()
    classes = torch.zeros(len(b), dtype=torch.long) if idxs is None else idxs.detach().cpu().long()
    picked, picked_scores = [], []
    for cls in torch.unique(classes).tolist():
        live = torch.nonzero((classes == cls) & ~torch.isnan(s)).squeeze(1)  # ascending index
        while live.numel():
            k = int(torch.argmax(s[live]))  # first maximum: the lowest index
            i = int(live[k])
            picked.append(i)
            picked_scores.append(float(s[i]))
            live = torch.cat([live[:k], live[k + 1 :]])
            if not live.numel():
                break
            ovr = _iou_row(b, i, live, offset)
            if method == "naive":
                weight = torch.where(ovr >= iou_threshold, 0.0, 1.0).double()
            elif method == "linear":
                weight = torch.where(ovr >= iou_threshold, 1 - ovr, torch.ones_like(ovr))
            else:
                weight = torch.exp(-(ovr * ovr) / sigma)
            s[live] = s[live] * weight
            live = live[s[live] >= min_score]
    inds = torch.tensor(picked, dtype=torch.long)
    sc = torch.tensor(picked_scores, dtype=torch.float64)
    by_index = torch.sort(inds, stable=True).indices
    inds, sc = inds[by_index], sc[by_index]
    by_score = torch.sort(sc, descending=True, stable=True).indices
    return inds[by_score], sc[by_score]


def nms_match_reference(dets: torch.Tensor, iou_threshold: float) -> list[list[int]]:
    """mmcv's nms_match loop in float64 (IoU >= threshold, no offset; a zero
    union or NaN never matches)."""
    d = dets.detach().to("cpu", torch.float64)
    order = torch.sort(d[:, 4], descending=True, stable=True).indices
    areas = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
    taken = torch.zeros(len(d), dtype=torch.bool)
    groups = []
    for pos, i in enumerate(order.tolist()):
        if taken[i]:
            continue
        taken[i] = True
        rest = order[pos + 1 :]
        rest = rest[~taken[rest]]
        w = (torch.minimum(d[i, 2], d[rest, 2]) - torch.maximum(d[i, 0], d[rest, 0])).clamp(min=0)
        h = (torch.minimum(d[i, 3], d[rest, 3]) - torch.maximum(d[i, 1], d[rest, 1])).clamp(min=0)
        inter = w * h
        union = areas[i] + areas[rest] - inter
        members = rest[(union > 0) & (inter / union >= iou_threshold)]
        taken[members] = True
        groups.append([i, *members.tolist()])
    return groups
