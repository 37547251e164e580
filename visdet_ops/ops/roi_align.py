"""roi_align / RoIAlign with mmcv.ops semantics (avg and max pool_mode,
`aligned` half-pixel shift, adaptive sampling_ratio=0)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.utils import _pair

from . import note_device, smoke_test

_POOL_MODES = ("avg", "max")


@torch.library.register_fake("visdet_ops::roi_align")
def _roi_align_fake(input, rois, pooled_height, pooled_width, spatial_scale, sampling_ratio, pool_mode, aligned):
    torch._check(input.dim() == 4, lambda: f"roi_align: input must have 4 dimensions, got {list(input.shape)}")
    torch._check(
        rois.dim() == 2 and rois.size(1) == 5, lambda: f"roi_align: rois must have shape [K, 5], got {list(rois.shape)}"
    )
    out = input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))
    if pool_mode == "max":
        return out, torch.empty_like(out), torch.empty_like(out)
    return out, input.new_empty((0,)), input.new_empty((0,))


@torch.library.register_fake("visdet_ops::_roi_align_backward")
def _roi_align_backward_fake(
    grad_output,
    rois,
    argmax_y,
    argmax_x,
    batch_size,
    channels,
    height,
    width,
    spatial_scale,
    sampling_ratio,
    pool_mode,
    aligned,
):
    return grad_output.new_empty((batch_size, channels, height, width))


def _setup_context(ctx, inputs, output):
    input, rois, _, _, spatial_scale, sampling_ratio, pool_mode, aligned = inputs
    _, argmax_y, argmax_x = output
    ctx.mark_non_differentiable(argmax_y, argmax_x)
    ctx.save_for_backward(rois, argmax_y, argmax_x)
    ctx.input_shape = input.shape
    ctx.params = (spatial_scale, sampling_ratio, pool_mode, aligned)


def _backward(ctx, grad_output, _grad_argmax_y, _grad_argmax_x):
    rois, argmax_y, argmax_x = ctx.saved_tensors
    batch, channels, height, width = ctx.input_shape
    grad_input = torch.ops.visdet_ops._roi_align_backward(
        grad_output, rois, argmax_y, argmax_x, batch, channels, height, width, *ctx.params
    )
    return grad_input, None, None, None, None, None, None, None


torch.library.register_autograd("visdet_ops::roi_align", _backward, setup_context=_setup_context)


def roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """RoIAlign (mmcv semantics).

    Args:
        input: [N, C, H, W] feature map.
        rois: [K, 5] (batch_index, x1, y1, x2, y2) in input-image coordinates.
        output_size: int or (h, w).
        spatial_scale: feature-map size / image size.
        sampling_ratio: samples per bin side; 0 = ceil(roi size / output size).
        pool_mode: 'avg' or 'max' over the samples of a bin.
        aligned: shift by half a pixel (True matches torchvision aligned=True).
    """
    if pool_mode not in _POOL_MODES:
        raise ValueError(f"roi_align: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    out_h, out_w = _pair(output_size)
    note_device(input)
    output, _, _ = torch.ops.visdet_ops.roi_align(
        input, rois, int(out_h), int(out_w), float(spatial_scale), int(sampling_ratio), pool_mode, bool(aligned)
    )
    return output


class RoIAlign(nn.Module):
    """mmcv.ops.RoIAlign: same constructor arguments, no parameters."""

    def __init__(
        self,
        output_size,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        pool_mode: str = "avg",
        aligned: bool = True,
        use_torchvision: bool = False,
    ):
        super().__init__()
        if pool_mode not in _POOL_MODES:
            raise ValueError(f"RoIAlign: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
        if use_torchvision and pool_mode != "avg":
            raise ValueError("RoIAlign: use_torchvision=True supports only pool_mode='avg'")
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.pool_mode = pool_mode
        self.aligned = aligned
        self.use_torchvision = use_torchvision

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        if self.use_torchvision:
            from torchvision.ops import roi_align as tv_roi_align

            return tv_roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)
        return roi_align(
            input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.pool_mode, self.aligned
        )

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, pool_mode={self.pool_mode}, aligned={self.aligned}, "
            f"use_torchvision={self.use_torchvision})"
        )


@smoke_test("roi_align")
def _smoke(device: torch.device) -> None:
    from ..reference.roi_align import roi_align_reference

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 8, 9, generator=gen, dtype=torch.float64)
    rois = torch.tensor([[0, 1.0, 1.5, 6.0, 7.0], [1, 0.0, 0.0, 8.0, 4.5]], dtype=torch.float64)
    for mode in _POOL_MODES:
        got = roi_align(x.to(device), rois.to(device), 3, 1.0, 2, mode, True).cpu()
        want = roi_align_reference(x, rois, (3, 3), 1.0, 2, mode, True)
        if not torch.allclose(got, want, rtol=1e-9, atol=1e-12):
            raise AssertionError(f"roi_align smoke ({mode}): max error {(got - want).abs().max().item():.3g}")
