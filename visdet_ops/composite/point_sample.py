"""mmcv.ops.point_sample's names (PointRend, Mask2Former's point losses and matching): point_sample,
rel_roi_point_to_rel_img_point and SimpleRoIAlign, with mmcv 2.2.0's signatures and results (docs/ops.md,
"point_sample"). Pure PyTorch over F.grid_sample, as in mmcv."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair

from ..ops import _args

__all__ = ["SimpleRoIAlign", "point_sample", "rel_roi_point_to_rel_img_point"]


def _check_rank(op: str, arg: str, t, ranks: tuple[int, ...], what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {arg} must be a Tensor, got {type(t).__name__}")
    if t.dim() not in ranks:
        raise _args.ShapeError(f"{op}: {arg} must have shape {what}, got {list(t.shape)}")


def point_sample(input: torch.Tensor, points: torch.Tensor, align_corners: bool = False, **kwargs) -> torch.Tensor:
    """F.grid_sample at points in [0, 1] x [0, 1] (mmcv.ops.point_sample).

    Args:
        input: [N, C, H, W] feature map.
        points: [N, P, 2] or [N, Hg, Wg, 2], (x, y) relative to the map, 0 and 1 at its borders.
        align_corners: grid_sample's (False: 0 and 1 are the outer edges of the corner pixels).
        kwargs: passed to F.grid_sample (mode, padding_mode).

    Returns:
        [N, C, P] or [N, C, Hg, Wg].
    """
    _check_rank("point_sample", "input", input, (4,), "[N, C, H, W]")
    _check_rank("point_sample", "points", points, (3, 4), "[N, P, 2] or [N, Hg, Wg, 2]")
    if points.size(-1) != 2 or points.size(0) != input.size(0):
        raise _args.ShapeError(
            f"point_sample: points must have shape [N, P, 2] or [N, Hg, Wg, 2] with N = input.size(0) = "
            f"{input.size(0)}, got {list(points.shape)}"
        )
    add_dim = points.dim() == 3
    if add_dim:
        points = points.unsqueeze(2)
    # mmcv's denormalize, points * 2 - 1, in one pass over the points: -1 + 2 * points (2 * p is exact, so the value
    # is mmcv's bit for bit); the two ops of `points * 2.0 - 1.0` each read and write every coordinate, as much
    # traffic as the sampling itself for Mask2Former's one-channel masks. The -1 is a 0-d CPU tensor, which takes
    # part in neither the result's dtype nor its device.
    grid = torch.add(_MINUS_ONE, points, alpha=2)
    output = F.grid_sample(input, grid, align_corners=align_corners, **kwargs)
    return output.squeeze(3) if add_dim else output


_MINUS_ONE = torch.tensor(-1.0)


def _rel_roi_point_to_abs_img_point(rois: torch.Tensor, rel_roi_points: torch.Tensor) -> torch.Tensor:
    # mmcv's formula and order of rounding (x1 + p * (x2 - x1)), without gradient as in mmcv.
    with torch.no_grad():
        if rois.size(1) == 5:
            rois = rois[:, 1:]
        xs = rel_roi_points[:, :, 0] * (rois[:, None, 2] - rois[:, None, 0])
        ys = rel_roi_points[:, :, 1] * (rois[:, None, 3] - rois[:, None, 1])
        xs = xs + rois[:, None, 0]
        ys = ys + rois[:, None, 1]
        return torch.stack([xs, ys], dim=2)


def rel_roi_point_to_rel_img_point(rois: torch.Tensor, rel_roi_points: torch.Tensor, img, spatial_scale=1.0):
    """Points relative to each RoI -> points relative to the image or feature map, for point_sample
    (mmcv.ops.rel_roi_point_to_rel_img_point; no gradient, as in mmcv).

    Args:
        rois: [K, 4] boxes or [K, 5] (batch index first), in image coordinates.
        rel_roi_points: [K, P, 2], (x, y) relative to its RoI (0 and 1 at the RoI's borders).
        img: (height, width), or a [N, C, H, W] tensor whose H x W is taken.
        spatial_scale: points are multiplied by it after the division by the size.

    Returns:
        [K, P, 2]: x / W * spatial_scale, y / H * spatial_scale, in the dtype of dividing by a float32 (W, H)
        (mmcv's: float16/bfloat16 points give float32, float64 stay float64).
    """
    op = "rel_roi_point_to_rel_img_point"
    _check_rank(op, "rois", rois, (2,), "[K, 4] or [K, 5]")
    _check_rank(op, "rel_roi_points", rel_roi_points, (3,), "[K, P, 2]")
    if rois.size(1) not in (4, 5):
        raise _args.ShapeError(f"{op}: rois must have shape [K, 4] or [K, 5], got {list(rois.shape)}")
    if rel_roi_points.size(0) != rois.size(0) or rel_roi_points.size(2) != 2:
        raise _args.ShapeError(
            f"{op}: rel_roi_points must have shape [K, P, 2] with K = rois.size(0) = {rois.size(0)}, "
            f"got {list(rel_roi_points.shape)}"
        )
    if isinstance(img, tuple) and len(img) == 2:
        h, w = img
    elif isinstance(img, torch.Tensor) and img.dim() == 4:
        h, w = img.shape[2:]
    else:
        got = list(img.shape) if isinstance(img, torch.Tensor) else repr(img)
        raise _args.ArgumentError(f"{op}: img must be an (h, w) tuple or an [N, C, H, W] tensor, got {got}")
    abs_points = _rel_roi_point_to_abs_img_point(rois, rel_roi_points)
    scale = torch.tensor([w, h], dtype=torch.float, device=abs_points.device).view(1, 1, 2)
    return abs_points / scale * spatial_scale


def _cell_centres(size: tuple[int, int], device, dtype) -> torch.Tensor:
    """[PH * PW, 2]: the centres ((j + 0.5) / PW, (i + 0.5) / PH) of a PH x PW grid over [0, 1]^2, row by row, as
    mmcv's generate_grid makes them (F.affine_grid of the identity, align_corners=False, moved to [0, 1]; float32)."""
    identity = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], device=device)
    grid = F.affine_grid(identity, torch.Size((1, 1, *size)), align_corners=False)
    return ((grid + 1.0) / 2.0).view(-1, 2).to(dtype)


class SimpleRoIAlign(nn.Module):
    """PointRend's RoI feature extractor (mmcv.ops.SimpleRoIAlign): one bilinear sample at each bin centre through
    point_sample, which zero-pads outside the map (RoIAlign clamps there).

    Args:
        output_size: int or (h, w).
        spatial_scale: feature-map pixels per image pixel.
        aligned: True: samples at pixel centres (align_corners=False); False: mmdet's legacy align_corners=True.

    forward(features [N, C, H, W], rois [K, 5]) -> [K, C, PH, PW], row k from rois[k] (mmcv: the rows in image
    order, the same for rois sorted by batch index, as mmdet's bbox2roi makes them).
    """

    def __init__(self, output_size, spatial_scale: float, aligned: bool = True) -> None:
        super().__init__()
        self.output_size = _pair(output_size)
        for side in self.output_size:
            _args.check_int("SimpleRoIAlign", "output_size", side, _args.POOLED_SIZE)
        self.output_size = tuple(int(s) for s in self.output_size)
        self.spatial_scale = float(spatial_scale)
        # to be consistent with other RoI ops (mmcv's attribute)
        self.use_torchvision = False
        self.aligned = aligned

    def forward(self, features: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        op = "SimpleRoIAlign"
        _check_rank(op, "features", features, (4,), "[N, C, H, W]")
        _check_rank(op, "rois", rois, (2,), "[K, 5]")
        if rois.size(1) != 5:
            raise _args.ShapeError(f"{op}: rois must have shape [K, 5], got {list(rois.shape)}")
        if rois.device != features.device:
            raise _args.ShapeError(
                f"{op}: features and rois must be on the same device, got {features.device} and {rois.device}"
            )
        n, channels = features.size(0), features.size(1)
        k, (ph, pw) = rois.size(0), self.output_size
        if k == 0:
            return features.new_empty((0, channels, ph, pw))
        centres = _cell_centres(self.output_size, rois.device, rois.dtype)
        # [K, P, 2] relative to the map, as mmcv's rel_roi_point_to_rel_img_point (no gradient to the rois),
        # in the features' dtype (mmcv: in float32 or float64 from the rois, which grid_sample refuses beside
        # 16-bit or float64 features).
        points = _rel_roi_point_to_abs_img_point(rois, centres.expand(k, -1, -1))
        size = torch.tensor([features.size(3), features.size(2)], dtype=torch.float, device=points.device).view(1, 1, 2)
        points = (points / size * self.spatial_scale).to(features.dtype)
        align_corners = not self.aligned
        batch = rois[:, 0].long()
        if n == 1 and rois.device.type != "cpu":
            # One image: every RoI samples it; its batch index is not read (no host sync, as the RoI ops on CUDA).
            sampled = point_sample(features, points[None], align_corners=align_corners)[0]  # [C, K, P]
            return sampled.transpose(0, 1).reshape(k, channels, ph, pw)
        # One host sync for the lot (mmcv: two per image): how many RoIs each image has (an index outside [0, N)
        # counts in the first or past the last bin) and whether they come in image order (as mmdet's bbox2roi
        # makes them); each image then samples its own RoIs in one grid_sample.
        stats = torch.cat(
            [torch.bincount(batch.clamp(min=-1) + 1, minlength=n + 1), (batch[1:] < batch[:-1]).sum().view(1)]
        ).tolist()
        counts, unsorted = stats[:-1], stats[-1]
        if len(counts) != n + 1 or counts[0]:
            raise _args.ShapeError(f"{op}: rois' batch indices (rois[:, 0]) must be in [0, {n}) for {n} images")
        counts = counts[1:]
        if n == 1:
            sampled = point_sample(features, points[None], align_corners=align_corners)[0]
            return sampled.transpose(0, 1).reshape(k, channels, ph, pw)
        order = torch.argsort(batch, stable=True) if unsorted else None
        by_image = (points if order is None else points[order]).split(counts)
        parts = [
            point_sample(features[i : i + 1], by_image[i][None], align_corners=align_corners)[0].transpose(0, 1)
            for i in range(n)
            if counts[i]
        ]
        sampled = torch.cat(parts)  # [K, C, P], RoIs in image order
        if order is not None:  # back to the RoIs' order (mmcv leaves them in image order)
            sampled = sampled.index_select(0, torch.argsort(order))
        return sampled.view(k, channels, ph, pw)

    def __repr__(self) -> str:
        # mmcv's text (without the closing parenthesis, as mmcv's)
        return f"{type(self).__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}"
