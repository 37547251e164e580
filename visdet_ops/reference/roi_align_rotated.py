"""The float64 reference of roi_align_rotated (mmcv semantics), pure PyTorch: the sample points of each RoI's rotated
grid as tensors, then mmcv's bilinear border rule (reference/roi_align.py's `bilinear`)."""

from __future__ import annotations

import math

import torch

from .roi_align import bilinear


def adaptive_grid(bin_size: float, height: int, width: int) -> int:
    """Samples per bin side with adaptive sampling: mmcv's ceil(bin size), at most height + width + 2 (and 2^15), as
    the kernels (csrc/ops/roi_align_rotated/roi_align_rotated_kernel.h). A bin of a RoI inside the sampled region
    [-1, H] x [-1, W] is at most its diagonal long, never more than H + W + 2, so the cap only changes bins longer
    than that (it bounds a huge RoI's work). A non-positive bin size has no samples."""
    return max(min(math.ceil(bin_size), height + width + 2, 2**15), 0)


def rotated_sample_points(
    roi: list[float],
    output_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
    clockwise: bool,
    map_size: tuple[int, int],
    dtype: torch.dtype = torch.float64,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The sample points (y, x) of one RoI (batch_index, x, y, w, h, angle) as [PH, PW, gh * gw] tensors (samples of
    a bin row-major in (iy, ix)), or None when the grid is empty. The grid is laid out in the RoI's frame (origin at
    its centre, axes along its sides), then rotated counter-clockwise by the angle (clockwise: by minus the angle) in
    (y, x) image space and moved to the centre."""
    out_h, out_w = output_size
    height, width = map_size
    offset = 0.5 if aligned else 0.0
    cx, cy = roi[1] * spatial_scale - offset, roi[2] * spatial_scale - offset
    w, h = roi[3] * spatial_scale, roi[4] * spatial_scale
    theta = -roi[5] if clockwise else roi[5]
    if not aligned:
        w, h = max(w, 1.0), max(h, 1.0)
    bin_h, bin_w = h / out_h, w / out_w
    grid_h = sampling_ratio if sampling_ratio > 0 else adaptive_grid(bin_h, height, width)
    grid_w = sampling_ratio if sampling_ratio > 0 else adaptive_grid(bin_w, height, width)
    if grid_h == 0 or grid_w == 0:
        return None
    kw = dict(dtype=dtype, device=device)
    # In the RoI frame: bin p's samples at the centres of its grid split, from the corner (-h/2, -w/2).
    yy = -h / 2 + (torch.arange(out_h, **kw)[:, None] + (torch.arange(grid_h, **kw)[None, :] + 0.5) / grid_h) * bin_h
    xx = -w / 2 + (torch.arange(out_w, **kw)[:, None] + (torch.arange(grid_w, **kw)[None, :] + 0.5) / grid_w) * bin_w
    yy = yy[:, None, :, None].expand(out_h, out_w, grid_h, grid_w)  # [PH, PW, gh, gw]
    xx = xx[None, :, None, :].expand(out_h, out_w, grid_h, grid_w)
    cos, sin = math.cos(theta), math.sin(theta)
    y = yy * cos - xx * sin + cy
    x = yy * sin + xx * cos + cx
    return y.reshape(out_h, out_w, -1), x.reshape(out_h, out_w, -1)


def roi_align_rotated_reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    aligned: bool = True,
    clockwise: bool = False,
) -> torch.Tensor:
    """mmcv RoIAlignRotated, one RoI at a time, differentiable w.r.t. input (autograd): each bin the mean of its
    samples' bilinear values (0 for a sample outside [-1, H] x [-1, W]; an empty grid gives 0).

    Computes in input's dtype on input's device; pass float64 for a reference."""
    out_h, out_w = output_size
    channels, height, width = input.shape[1:]
    outputs = []
    for roi in rois.detach().to("cpu", torch.float64).tolist():
        points = rotated_sample_points(
            roi, output_size, spatial_scale, sampling_ratio, aligned, clockwise, (height, width),
            input.dtype, input.device,
        )  # fmt: skip
        if points is None:
            outputs.append(input.new_zeros((channels, out_h, out_w)))
            continue
        y, x = points
        vals = bilinear(input[int(roi[0])], y.reshape(-1), x.reshape(-1))  # [C, PH * PW * S]
        outputs.append(vals.reshape(channels, out_h, out_w, y.shape[-1]).mean(-1))
    if not outputs:
        return input.new_zeros((0, channels, out_h, out_w))
    return torch.stack(outputs)
