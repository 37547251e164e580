from __future__ import annotations

import math

import torch


def bilinear(plane: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """plane [C, H, W], y/x [S] -> [C, S] with mmcv's border rules: 0 outside
    [-1, H] x [-1, W]; inside, coordinates below 0 clamp to 0 and the last
    row/column extends to the border. Differentiable w.r.t. plane, y and x
    (zero along a clamped coordinate, as the clamped forward implies)."""
    height, width = plane.shape[-2:]
    valid = (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
    # Invalid samples (and NaN) read (0, 0); their value is masked out below.
    y = torch.where(valid & (y > 0), y, torch.zeros_like(y))
    x = torch.where(valid & (x > 0), x, torch.zeros_like(x))
    y_low = y.detach().floor().long().clamp(max=height - 1)
    x_low = x.detach().floor().long().clamp(max=width - 1)
    y_edge = y_low >= height - 1
    x_edge = x_low >= width - 1
    y_high = torch.where(y_edge, y_low, y_low + 1)
    x_high = torch.where(x_edge, x_low, x_low + 1)
    y = torch.where(y_edge, y_low.to(y.dtype), y)
    x = torch.where(x_edge, x_low.to(x.dtype), x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    val = (
        hy * hx * plane[:, y_low, x_low]
        + hy * lx * plane[:, y_low, x_high]
        + ly * hx * plane[:, y_high, x_low]
        + ly * lx * plane[:, y_high, x_high]
    )
    return torch.where(valid, val, torch.zeros_like(val))


def adaptive_grid(bin_size: float, map_side: int) -> int:
    """Samples per bin side with adaptive sampling: mmcv's ceil(bin size), at
    most map_side + 1 (and 2^15), as the kernels (csrc/ops/_rois/rois_kernel.h).
    A bin of a RoI inside the map is never wider than the map, so the cap only
    changes RoIs far larger than the map (it bounds a huge RoI's work)."""
    return max(min(math.ceil(bin_size), map_side + 1, 2**15), 0)


def roi_align_reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """mmcv RoIAlign, one RoI at a time, differentiable w.r.t. input (autograd).

    Computes in input's dtype on input's device; pass float64 for a reference."""
    out_h, out_w = output_size
    outputs = []
    for roi in rois.detach().to("cpu", torch.float64).tolist():
        batch = int(roi[0])
        offset = 0.5 if aligned else 0.0
        start_w, start_h = roi[1] * spatial_scale - offset, roi[2] * spatial_scale - offset
        roi_w = roi[3] * spatial_scale - offset - start_w
        roi_h = roi[4] * spatial_scale - offset - start_h
        if not aligned:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = sampling_ratio if sampling_ratio > 0 else adaptive_grid(roi_h / out_h, input.shape[2])
        grid_w = sampling_ratio if sampling_ratio > 0 else adaptive_grid(roi_w / out_w, input.shape[3])
        channels = input.shape[1]
        if grid_h == 0 or grid_w == 0:
            outputs.append(input.new_zeros((channels, out_h, out_w)))
            continue
        dev, dt = input.device, input.dtype
        ph = torch.arange(out_h, device=dev, dtype=dt).repeat_interleave(grid_h)
        iy = torch.arange(grid_h, device=dev, dtype=dt).repeat(out_h)
        pw = torch.arange(out_w, device=dev, dtype=dt).repeat_interleave(grid_w)
        ix = torch.arange(grid_w, device=dev, dtype=dt).repeat(out_w)
        ys = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h  # [out_h * grid_h]
        xs = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w  # [out_w * grid_w]
        yy = ys[:, None].expand(-1, xs.numel()).reshape(-1)
        xx = xs[None, :].expand(ys.numel(), -1).reshape(-1)
        vals = bilinear(input[batch], yy, xx)  # [C, out_h*grid_h*out_w*grid_w]
        vals = vals.reshape(channels, out_h, grid_h, out_w, grid_w).permute(0, 1, 3, 2, 4)
        vals = vals.reshape(channels, out_h, out_w, grid_h * grid_w)
        outputs.append(vals.mean(-1) if pool_mode == "avg" else vals.max(-1).values)
    if not outputs:
        return input.new_zeros((0, input.shape[1], out_h, out_w))
    return torch.stack(outputs)
