"""roi_align_rotated / RoIAlignRotated with mmcv.ops semantics: RoIAlign over rotated boxes (batch_index, x, y, w, h,
angle) with the angle in radians, counter-clockwise unless `clockwise`; `aligned` half-pixel shift; adaptive
sampling_ratio=0; average pooling.

float32, float64, float16 and bfloat16 on CPU and CUDA (16-bit computed in float32, gradients accumulated in a
float32 buffer; rois may be float32 beside a 16-bit input). The gradient is for `input` only, as mmcv's.

The RoI ops' rules apply (docs/ops.md, roi_align): RoI validation (on CUDA a bad RoI gives NaN output and
no gradient, without a host sync, unless VISDET_OPS_SYNC_ROI_CHECKS=1), 16-bit inputs, determinism."""

from __future__ import annotations

import torch
from torch import nn

from . import _args, attributes_repr, example, note_device, renamed_kwargs
from ._registration import register_autocast, register_autograd, rois_autocast, rois_grad_input, rois_setup_context

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["RoIAlignRotated", "roi_align_rotated"]

_OP = "roi_align_rotated"


@torch.library.register_fake("visdet_ops::roi_align_rotated")
def _roi_align_rotated_fake(
    input, rois, pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned, clockwise
):
    _args.check_rois_fake(_OP, input, rois, pooled_height, pooled_width, columns=6)
    _args.check_fake(_OP, "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))


@torch.library.register_fake("visdet_ops::_roi_align_rotated_backward")
def _roi_align_rotated_backward_fake(
    grad_output, rois, batch_size, channels, height, width, spatial_scale, sampling_ratio, aligned, clockwise
):
    _args.check_fake(_OP, "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    return grad_output.new_empty((batch_size, channels, height, width))


# Autograd, autocast and the determinism alert are registered here, for the classic and the stable build alike
# (the stable ABI has no C++ API for them; one source either way): docs/stable-abi.md.


def _roi_align_rotated_setup_context(ctx, inputs, output):
    input, rois, _pooled_height, _pooled_width, spatial_scale, sampling_ratio, aligned, clockwise = inputs
    rois_setup_context(ctx, input, (rois,), (spatial_scale, sampling_ratio, aligned, clockwise))


def _roi_align_rotated_backward(ctx, grad_output):
    # No gradient for rois, as mmcv (and torchvision's roi_align) give none.
    if not ctx.needs_input_grad[0]:
        return (None,) * 8
    return rois_grad_input(_OP, ctx, grad_output), None, None, None, None, None, None, None


_roi_align_rotated = register_autograd(_OP, _roi_align_rotated_backward, _roi_align_rotated_setup_context)


# Autocast: roi_align's rule (rois_autocast: input in its dtype, rois in the compute dtype).
register_autocast(_OP, rois_autocast(_OP))


def roi_align_rotated(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size,
    spatial_scale: float,
    sampling_ratio: int = 0,
    aligned: bool = True,
    clockwise: bool = False,
) -> torch.Tensor:
    """RoIAlignRotated (mmcv semantics).

    Args:
        input: [N, C, H, W] feature map.
        rois: [K, 6] (batch_index, center_x, center_y, w, h, angle) in input-image coordinates, angle in radians.
        output_size: int or (h, w).
        spatial_scale: feature-map size / image size.
        sampling_ratio: samples per bin side; 0 (or -1) = ceil(roi size / output size).
        aligned: shift the centre by half a pixel and keep the RoI's size (False: w and h at least 1, the legacy
            behaviour).
        clockwise: the angle turns clockwise in image space (False: counter-clockwise).

    Returns [K, C, out_h, out_w]; the gradient is for input only."""
    out_h, out_w = _args.check_call_pair(_OP, "output_size", output_size, _args.POOLED_SIZE)
    sampling_ratio = _args.check_call_int(_OP, "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    note_device(input)
    return _roi_align_rotated(
        input, rois, out_h, out_w, float(spatial_scale), sampling_ratio, bool(aligned), bool(clockwise)
    )


class RoIAlignRotated(nn.Module):
    """mmcv.ops.RoIAlignRotated: same constructor arguments (mmcv's old names out_size / sample_num work with a
    DeprecationWarning), no parameters. forward(input [N, C, H, W], rois [K, 6])."""

    @renamed_kwargs("RoIAlignRotated", {"out_size": "output_size", "sample_num": "sampling_ratio"})
    def __init__(
        self,
        output_size,
        spatial_scale: float,
        sampling_ratio: int = 0,
        aligned: bool = True,
        clockwise: bool = False,
    ):
        super().__init__()
        self.output_size = _args.check_pair("RoIAlignRotated", "output_size", output_size, _args.POOLED_SIZE)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = _args.check_int("RoIAlignRotated", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
        self.aligned = aligned
        self.clockwise = clockwise

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return roi_align_rotated(
            input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned, self.clockwise
        )

    def __repr__(self) -> str:
        return attributes_repr(self, "output_size", "spatial_scale", "sampling_ratio", "aligned", "clockwise")


# Rotated RoIs the CUDA kernels must refuse on their own (no host check there): a batch index outside [0, 2) and a
# NaN angle. Their output must be NaN (memcheck proves nothing is read or written out of bounds for them).
_INVALID_ROTATED_ROIS = torch.tensor([[5, 4, 4, 6, 5, 0.3], [0, 4, 4, 6, 5, float("nan")]], dtype=torch.float64)


@example("roi_align_rotated")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Adaptive and fixed sampling, aligned both ways, clockwise both ways, forward and backward; on CUDA invalid
    RoIs must give NaN (no host check there); in a 16-bit dtype also under autocast, a 16-bit map beside float32
    RoIs (the AMP path)."""
    from ..reference.roi_align_rotated import roi_align_rotated_reference
    from ._examples import autocast_forward_backward, synchronize, tolerance

    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    # Centres, sizes and angles on coarse grids (exact in bfloat16); one RoI partly outside, one tiny.
    rois = torch.tensor(
        [[0, 5, 4, 6, 5, 0.5], [1, 2, 7, 12, 6, -2.0], [1, 5.5, 5, 0.5, 1, 1.0], [0, 10, 1, 4, 8, 3.5]],
        dtype=torch.float64,
    )
    tol = tolerance(dtype)
    for ratio, aligned, clockwise in ((0, True, False), (2, False, True)):

        def call(t, r, s=ratio, a=aligned, c=clockwise):
            return roi_align_rotated(t, r, (3, 2), 1.0, s, a, c)

        xd = x.to(device, dtype, copy=True).requires_grad_()
        out = call(xd, rois.to(device, dtype))
        out.backward(torch.ones_like(out))
        synchronize(device)
        want_x = x.clone().requires_grad_()
        want = roi_align_rotated_reference(want_x, rois, (3, 2), 1.0, ratio, aligned, clockwise)
        (want_grad,) = torch.autograd.grad(want, want_x, torch.ones_like(want))
        what = f"roi_align_rotated sampling_ratio={ratio} aligned={aligned} clockwise={clockwise}"
        if not torch.allclose(out.detach().cpu().double(), want.detach(), rtol=tol, atol=tol):
            return f"{what}: wrong result"
        if not torch.allclose(xd.grad.cpu().double(), want_grad, rtol=tol, atol=tol):
            return f"{what}: wrong gradient"
        if device.type == "cuda":
            xb = x.to(device, dtype, copy=True).requires_grad_()
            out = call(xb, torch.cat([rois, _INVALID_ROTATED_ROIS]).to(device, dtype))
            out.backward(torch.ones_like(out))
            synchronize(device)
            got = out.detach().cpu().double()
            if not torch.allclose(got[: len(rois)], want.detach(), rtol=tol, atol=tol):
                return f"{what}: an invalid RoI changed the valid rows"
            if not torch.isnan(got[len(rois) :]).all():
                return f"{what}: an invalid RoI did not give NaN"
            if not torch.allclose(xb.grad.cpu().double(), want_grad, rtol=tol, atol=tol):
                return f"{what}: an invalid RoI changed the gradient"
    if dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 5, 12, 14, generator=gen, dtype=torch.float64)
        rois = torch.tensor(
            [[0, 20, 24, 24, 12, 0.25], [1, 30, 20, 12, 30, -1.0], [0, 36, 30, 18, 18, 2.0]], dtype=torch.float64
        )
        error = autocast_forward_backward(
            lambda t, r: roi_align_rotated(t, r, 3, 0.25, 2, True, False),
            lambda t, r: roi_align_rotated_reference(t, r, (3, 3), 0.25, 2, True, False),
            [x, rois], {1}, {1}, dtype, gen, device,
        )  # fmt: skip
        if error is not None:
            return f"roi_align_rotated under autocast: {error}"
    return None
