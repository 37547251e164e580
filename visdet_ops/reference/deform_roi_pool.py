from __future__ import annotations

import math

import torch

from .roi_align import adaptive_grid, bilinear


def deform_roi_pool_reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    offset: torch.Tensor | None,
    output_size: tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    gamma: float = 0.1,
) -> torch.Tensor:
    """mmcv deform_roi_pool, one RoI at a time, differentiable w.r.t. input
    and offset (autograd).

    open-mmlab/mmcv mmcv/ops/csrc/common/cuda/deform_roi_pool_cuda_kernel.cuh
    (read at commit 491966e3dac3): RoI corners at
    roi * spatial_scale - 0.5 (RoIAlign aligned=True, no minimum size), bin
    (ph, pw) moved by gamma * (roi_w * offset[k, 0, ph, pw], roi_h *
    offset[k, 1, ph, pw]), the average of a grid of bilinear samples per bin,
    the grid set by the RoI alone: sampling_ratio, or ceil(roi size / output
    size) when it is <= 0 (at most the map side + 1: adaptive_grid).

    Computes in input's dtype on input's device; pass float64 for a reference."""
    out_h, out_w = output_size
    channels = input.shape[1]
    dev, dt = input.device, input.dtype
    outputs = []
    for k, roi in enumerate(rois.detach().to("cpu", torch.float64).tolist()):
        batch = int(roi[0])
        start_w, start_h = roi[1] * spatial_scale - 0.5, roi[2] * spatial_scale - 0.5
        roi_w = (roi[3] * spatial_scale - 0.5) - start_w
        roi_h = (roi[4] * spatial_scale - 0.5) - start_h
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = sampling_ratio if sampling_ratio > 0 else adaptive_grid(bin_h, input.shape[2])
        grid_w = sampling_ratio if sampling_ratio > 0 else adaptive_grid(bin_w, input.shape[3])
        if grid_h == 0 or grid_w == 0:
            outputs.append(input.new_zeros((channels, out_h, out_w)))
            continue
        # Top-left corner of every bin [out_h, out_w], the offset applied as mmcv does.
        base_h = torch.full((out_h, out_w), start_h, device=dev, dtype=dt)
        base_w = torch.full((out_h, out_w), start_w, device=dev, dtype=dt)
        if offset is not None:
            base_w = base_w + gamma * roi_w * offset[k, 0].to(dt)
            base_h = base_h + gamma * roi_h * offset[k, 1].to(dt)
        y0 = base_h + torch.arange(out_h, device=dev, dtype=dt)[:, None] * bin_h
        x0 = base_w + torch.arange(out_w, device=dev, dtype=dt)[None, :] * bin_w
        fy = (torch.arange(grid_h, device=dev, dtype=dt) + 0.5) * bin_h / grid_h
        fx = (torch.arange(grid_w, device=dev, dtype=dt) + 0.5) * bin_w / grid_w
        ys = y0[:, :, None, None] + fy[None, None, :, None]  # [out_h, out_w, grid_h, 1]
        xs = x0[:, :, None, None] + fx[None, None, None, :]  # [out_h, out_w, 1, grid_w]
        ys, xs = torch.broadcast_tensors(ys, xs)
        vals = bilinear(input[batch], ys.reshape(-1), xs.reshape(-1))
        outputs.append(vals.reshape(channels, out_h, out_w, grid_h * grid_w).sum(-1) / (grid_h * grid_w))
    if not outputs:
        return input.new_zeros((0, channels, out_h, out_w))
    return torch.stack(outputs)


def mmcv_offset_grad_formula(
    input: torch.Tensor,
    rois: torch.Tensor,
    offset: torch.Tensor,
    grad_output: torch.Tensor,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    gamma: float = 0.1,
) -> torch.Tensor:
    """The offset gradient exactly as mmcv's CUDA kernel writes it (its
    `ogx`/`ogy` closed form, evaluated at the unclamped sample position).
    Inside the map, away from the borders, it equals the derivative of the
    forward; tests use it to show that visdet-ops' gradient agrees with
    mmcv's there. float64, loops: small inputs only."""
    num_rois, _, out_h, out_w = grad_output.shape
    height, width = input.shape[-2:]
    grad = torch.zeros_like(offset, dtype=torch.float64)
    inp = input.double()
    for k, roi in enumerate(rois.double().tolist()):
        batch = int(roi[0])
        start_w, start_h = roi[1] * spatial_scale - 0.5, roi[2] * spatial_scale - 0.5
        roi_w = (roi[3] * spatial_scale - 0.5) - start_w
        roi_h = (roi[4] * spatial_scale - 0.5) - start_h
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_h)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(bin_w)
        for ph in range(out_h):
            for pw in range(out_w):
                sw = start_w + gamma * roi_w * float(offset[k, 0, ph, pw])
                sh = start_h + gamma * roi_h * float(offset[k, 1, ph, pw])
                g = grad_output[k, :, ph, pw].double() / (grid_h * grid_w)
                for iy in range(grid_h):
                    y = sh + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        x = sw + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                        if y < -1 or y > height or x < -1 or x > width:
                            continue
                        yc, xc = max(y, 0.0), max(x, 0.0)
                        y_low, x_low = int(yc), int(xc)
                        if y_low >= height - 1:
                            y_low = y_high = height - 1
                        else:
                            y_high = y_low + 1
                        if x_low >= width - 1:
                            x_low = x_high = width - 1
                        else:
                            x_high = x_low + 1
                        v00 = inp[batch, :, y_low, x_low]
                        v10 = inp[batch, :, y_low, x_high]
                        v01 = inp[batch, :, y_high, x_low]
                        v11 = inp[batch, :, y_high, x_high]
                        ogx = (
                            gamma
                            * roi_w
                            * g
                            * (v11 * (y - y_low) + v10 * (y_high - y) + v01 * (y_low - y) + v00 * (y - y_high))
                        )
                        ogy = (
                            gamma
                            * roi_h
                            * g
                            * (v11 * (x - x_low) + v01 * (x_high - x) + v10 * (x_low - x) + v00 * (x - x_high))
                        )
                        grad[k, 0, ph, pw] += ogx.sum()
                        grad[k, 1, ph, pw] += ogy.sum()
    return grad
