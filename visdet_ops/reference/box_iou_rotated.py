"""box_iou_rotated in float64 pure PyTorch: the exact intersection of two convex polygons, vectorised over pairs.

Independent of the kernels' arithmetic (csrc/ops/_rotated/rotated_kernel.h): each pair's corners are computed in
absolute coordinates around the mean of the two centres (mmcv's shift), the first box is clipped by the four
edges of the second as general half-planes (Sutherland-Hodgman, no parallel-edge threshold), and the area is the
shoelace sum. tests/ops/test_box_iou_rotated.py checks it against shapely's polygon intersection. The conventions
are the op's: a box with w * h < 1e-14 has IoU 0 with every box, a non-finite parameter (or area) gives NaN."""

from __future__ import annotations

import torch

# mmcv's degenerate rule (csrc/ops/_rotated/rotated_kernel.h, kMinArea).
MIN_AREA = 1e-14
# Pairs processed at once (memory: about 1 KB per pair).
_CHUNK = 1 << 16


def rotated_corners(boxes: torch.Tensor, clockwise: bool = True) -> torch.Tensor:
    """[..., 5] (x, y, w, h, angle in radians) -> [..., 4, 2] corners, centre + R(angle) (+-w/2, +-h/2), in order
    (-w, -h), (+w, -h), (+w, +h), (-w, +h): counter-clockwise in (x right, y up) terms for w * h > 0. clockwise=False
    negates the angle first."""
    x, y, w, h, a = boxes.unbind(-1)
    if not clockwise:
        a = -a
    c, s = torch.cos(a), torch.sin(a)
    lx = torch.stack([-w, w, w, -w], -1) / 2
    ly = torch.stack([-h, -h, h, h], -1) / 2
    px = x[..., None] + c[..., None] * lx - s[..., None] * ly
    py = y[..., None] + s[..., None] * lx + c[..., None] * ly
    return torch.stack([px, py], -1)


def _clip(px, py, count, ax, ay, bx, by):
    """Polygons (px, py) [K, V] with count [K] vertices, clipped to the left of the lines a -> b ([K]): the points
    p with cross(b - a, p - a) >= 0."""
    k, v = px.shape
    idx = torch.arange(v).expand(k, v)
    valid = idx < count[:, None]
    nxt = torch.where(idx + 1 < count[:, None], idx + 1, torch.zeros_like(idx))
    qx, qy = px.gather(1, nxt), py.gather(1, nxt)
    ex, ey = (bx - ax)[:, None], (by - ay)[:, None]
    dp = ex * (py - ay[:, None]) - ey * (px - ax[:, None])
    dq = ex * (qy - ay[:, None]) - ey * (qx - ax[:, None])
    inside = dp >= 0
    crossing = valid & (inside != (dq >= 0))
    t = torch.where(crossing, dp / torch.where(crossing, dp - dq, torch.ones_like(dp)), torch.zeros_like(dp))
    ix, iy = px + t * (qx - px), py + t * (qy - py)
    # Each vertex gives itself (if inside) then the crossing of its edge (if any): [K, 2V], in polygon order.
    cx = torch.stack([px, ix], -1).reshape(k, 2 * v)
    cy = torch.stack([py, iy], -1).reshape(k, 2 * v)
    mask = torch.stack([valid & inside, crossing], -1).reshape(k, 2 * v)
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
    new_count = mask.sum(1)
    width = max(int(new_count.max()) if k else 0, 1)
    order = order[:, :width]
    return cx.gather(1, order), cy.gather(1, order), new_count


def _polygon_area(px, py, count):
    """Areas of polygons (px, py) [K, V] with count [K] vertices (fewer than 3: 0)."""
    k, v = px.shape
    pad = torch.arange(v).expand(k, v) >= count[:, None]
    x = torch.where(pad, px[:, :1], px) - px[:, :1]
    y = torch.where(pad, py[:, :1], py) - py[:, :1]
    twice = (x[:, 1:-1] * y[:, 2:] - x[:, 2:] * y[:, 1:-1]).sum(1)
    return twice.abs() / 2


def _intersection(b1: torch.Tensor, b2: torch.Tensor, clockwise: bool) -> torch.Tensor:
    """Intersection areas of the [K, 5] box pairs, around each pair's mean centre."""
    shift = (b1[:, :2] + b2[:, :2]) / 2
    zero = torch.zeros_like(b1[:, 2:])
    c1 = rotated_corners(b1 - torch.cat([shift, zero], 1), clockwise)
    c2 = rotated_corners(b2 - torch.cat([shift, zero], 1), clockwise)
    # Box 2 counter-clockwise whatever the signs of its w and h (only w * h > 0 reaches here).
    px, py = c1[..., 0], c1[..., 1]
    count = torch.full((len(b1),), 4, dtype=torch.long)
    for e in range(4):
        a, b = c2[:, e], c2[:, (e + 1) % 4]
        px, py, count = _clip(px, py, count, a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    return _polygon_area(px, py, count)


def pair_overlaps(b1: torch.Tensor, b2: torch.Tensor, mode: str = "iou", clockwise: bool = True) -> torch.Tensor:
    """IoU (or IoF: over b1's area) of the [K, 5] pairs b1[k], b2[k], float64."""
    b1, b2 = b1.detach().to(torch.float64).cpu(), b2.detach().to(torch.float64).cpu()
    area1, area2 = b1[:, 2] * b1[:, 3], b2[:, 2] * b2[:, 3]
    bad = ~(torch.isfinite(b1).all(1) & torch.isfinite(b2).all(1) & torch.isfinite(area1) & torch.isfinite(area2))
    out = torch.zeros(len(b1), dtype=torch.float64)
    out[bad] = float("nan")
    live = ~bad & (area1 >= MIN_AREA) & (area2 >= MIN_AREA)
    # Pairs whose circumscribed circles are apart (by a margin far above float64 rounding) do not meet: 0.
    radius1 = b1[:, 2:4].abs().norm(dim=1) / 2
    radius2 = b2[:, 2:4].abs().norm(dim=1) / 2
    dist2 = ((b1[:, :2] - b2[:, :2]) ** 2).sum(1)
    live &= dist2 <= (radius1 + radius2) ** 2 * (1 + 1e-9)
    where = torch.nonzero(live).squeeze(1)
    for start in range(0, len(where), _CHUNK):
        i = where[start : start + _CHUNK]
        inter = _intersection(b1[i], b2[i], clockwise)
        inter = torch.minimum(inter, torch.minimum(area1[i], area2[i]))
        base = area1[i] if mode == "iof" else area1[i] + area2[i] - inter
        out[i] = inter / base
    return out


def box_iou_rotated_reference(
    bboxes1: torch.Tensor, bboxes2: torch.Tensor, mode: str = "iou", aligned: bool = False, clockwise: bool = True
) -> torch.Tensor:
    """mmcv's box_iou_rotated in float64: [M, 5] x [N, 5] -> [M, N] (aligned: [M]), boxes (x, y, w, h, angle in
    radians), mode 'iou' or 'iof' (intersection over bboxes1's area)."""
    if aligned:
        return pair_overlaps(bboxes1, bboxes2, mode, clockwise)
    m, n = bboxes1.size(0), bboxes2.size(0)
    a = bboxes1[:, None, :].expand(m, n, 5).reshape(-1, 5)
    b = bboxes2[None, :, :].expand(m, n, 5).reshape(-1, 5)
    return pair_overlaps(a, b, mode, clockwise).reshape(m, n)
