from __future__ import annotations

import torch


def _coord_dtype(dtype: torch.dtype) -> torch.dtype:
    # The kernels' compute dtype: float64 for float64 RoIs, float32 otherwise.
    return torch.float64 if dtype == torch.float64 else torch.float32


def roi_pool_reference(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size: tuple[int, int],
    spatial_scale: float = 1.0,
) -> torch.Tensor:
    """mmcv RoIPool, one bin at a time, differentiable w.r.t. input (autograd).

    The bin edges are computed in the kernels' compute dtype for rois.dtype
    (float64 for float64, else float32), one rounded operation at a time as the
    kernels do, so a float32 run picks the same pixels. A RoI with a non-finite
    value or a batch index outside [0, N) gives NaN, as the CUDA kernels do
    (the CPU op raises instead). Values are computed in input's dtype."""
    out_h, out_w = output_size
    batch, channels, height, width = input.shape
    ct = _coord_dtype(rois.dtype)
    scale = torch.tensor(spatial_scale, dtype=ct)
    outputs = []
    for roi in rois.detach().cpu().to(ct):
        if not bool(torch.isfinite(roi).all()) or not (0 <= roi[0].item() < batch):
            outputs.append(input.new_full((channels, out_h, out_w), float("nan")))
            continue
        b = int(roi[0].item())
        x1, y1 = roi[1] * scale, roi[2] * scale
        x2, y2 = (roi[3] + 1) * scale, (roi[4] + 1) * scale
        roi_w, roi_h = x2 - x1, y2 - y1
        if not (roi_w.item() > 0 and roi_h.item() > 0):
            outputs.append(input.new_zeros((channels, out_h, out_w)))
            continue

        def edges(n: int, size: torch.Tensor, start: torch.Tensor, limit: int) -> tuple[list[int], list[int]]:
            bin_size = size / n
            i = torch.arange(n, dtype=ct)
            lo = torch.floor(i * bin_size + start).clamp(0, limit)
            hi = torch.ceil((i + 1) * bin_size + start).clamp(0, limit)
            return [int(v) for v in lo.tolist()], [int(v) for v in hi.tolist()]

        hs, he = edges(out_h, roi_h, y1, height)
        ws, we = edges(out_w, roi_w, x1, width)
        bins = []
        for ph in range(out_h):
            for pw in range(out_w):
                region = input[b, :, hs[ph] : he[ph], ws[pw] : we[pw]].reshape(channels, -1)
                bins.append(region.max(-1).values if region.shape[1] > 0 else input.new_zeros(channels))
        outputs.append(torch.stack(bins, -1).reshape(channels, out_h, out_w))
    if not outputs:
        return input.new_zeros((0, channels, out_h, out_w))
    return torch.stack(outputs)
