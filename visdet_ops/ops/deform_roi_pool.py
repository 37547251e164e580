"""deform_roi_pool / DeformRoIPool / DeformRoIPoolPack /
ModulatedDeformRoIPoolPack with mmcv.ops semantics, constructor arguments and
state-dict keys.

Forward: as mmcv (RoIAlign aligned=True geometry, each bin moved by
gamma * RoI size * offset, the average of a sample grid set by the RoI).
Gradients flow to input and offset (not rois). The offset gradient is the
exact derivative of the forward; it equals mmcv's everywhere except at
samples within one pixel of the map border, where mmcv's closed form uses the
unclamped sample position (mmcv's gradient there is not the derivative of
its own forward).

This module registers the fake impls, autograd, autocast and the CUDA
backward's determinism alert (for the classic and the stable build alike:
docs/stable-abi.md), and holds the Python API and the modules.
"""

from __future__ import annotations

import torch
from torch import nn

from . import _args, example, note_device
from ._registration import alert_not_deterministic, compute_dtype, floating_to, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack", "deform_roi_pool"]


@torch.library.register_fake("visdet_ops::deform_roi_pool")
def _deform_roi_pool_fake(input, rois, offset, pooled_height, pooled_width, spatial_scale, sampling_ratio, gamma):
    torch._check(
        input.dim() == 4, lambda: f"deform_roi_pool: input must have 4 dimensions, got shape {list(input.shape)}"
    )
    torch._check(
        rois.dim() == 2 and rois.size(1) == 5,
        lambda: f"deform_roi_pool: rois must have shape [K, 5], got {list(rois.shape)}",
    )
    _args.check_fake("deform_roi_pool", "pooled_height", pooled_height, _args.POOLED_SIZE)
    _args.check_fake("deform_roi_pool", "pooled_width", pooled_width, _args.POOLED_SIZE)
    _args.check_fake("deform_roi_pool", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    if offset is not None:
        torch._check(
            offset.dim() == 4
            and offset.size(0) == rois.size(0)
            and offset.size(1) == 2
            and offset.size(2) == pooled_height
            and offset.size(3) == pooled_width,
            lambda: f"deform_roi_pool: offset must have shape [K, 2, PH, PW], got {list(offset.shape)}",
        )
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))


@torch.library.register_fake("visdet_ops::_deform_roi_pool_backward")
def _deform_roi_pool_backward_fake(grad_output, input, rois, offset, spatial_scale, sampling_ratio, gamma):
    _args.check_fake("deform_roi_pool", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    grad_offset = offset.new_empty(offset.shape) if offset is not None else input.new_empty((0,))
    return input.new_empty(input.shape), grad_offset


# Autograd, autocast and the determinism alert, for the classic and the stable build alike (the stable ABI has no C++
# API for them; one source either way). Gradients flow to input and offset, never to rois (as in mmcv). The backward
# is its own op, _deform_roi_pool_backward, so that torch.compile and the fake-tensor machinery see it.


def _deform_roi_pool_setup_context(ctx, inputs, output):
    input, rois, offset, _pooled_height, _pooled_width, spatial_scale, sampling_ratio, gamma = inputs
    ctx.save_for_backward(input, rois, offset)
    ctx.spatial_scale, ctx.sampling_ratio, ctx.gamma = spatial_scale, sampling_ratio, gamma
    ctx.on_cuda = input.is_cuda


def _deform_roi_pool_backward(ctx, grad_output):
    if ctx.on_cuda:
        # The input gradient is accumulated with atomicAdd: the summation order, and so the last bits, vary from run
        # to run. (The offset gradient alone would be deterministic.)
        alert_not_deterministic("deform_roi_pool_backward_cuda")
    input, rois, offset = ctx.saved_tensors
    grad_input, grad_offset = torch.ops.visdet_ops._deform_roi_pool_backward(
        grad_output, input, rois, offset, ctx.spatial_scale, ctx.sampling_ratio, ctx.gamma
    )
    # One entry per forward argument: input, rois, offset, then the five non-tensor arguments.
    return grad_input, None, grad_offset if offset is not None else None, None, None, None, None, None


_deform_roi_pool = register_autograd("deform_roi_pool", _deform_roi_pool_backward, _deform_roi_pool_setup_context)


def _deform_roi_pool_autocast(device_type: str):
    # input stays in its dtype (read directly by the kernels, sampled and accumulated in float32); rois go to the
    # compute dtype (float32 beside a 16-bit input), never to 16 bits; offset (a [K, 2, PH, PW] fraction of the RoI
    # size, small) goes to the input's dtype, which the kernels read it in. The output has the input's dtype; the
    # offset gradient comes back in the offset's own dtype through the cast.
    def kernel(input, rois, offset, pooled_height, pooled_width, spatial_scale, sampling_ratio, gamma):
        return torch.ops.visdet_ops.deform_roi_pool(
            input,
            floating_to(compute_dtype(input.dtype), rois),
            floating_to(input.dtype, offset),
            pooled_height,
            pooled_width,
            spatial_scale,
            sampling_ratio,
            gamma,
        )

    return kernel


register_autocast("deform_roi_pool", _deform_roi_pool_autocast)


def deform_roi_pool(
    input: torch.Tensor,
    rois: torch.Tensor,
    offset: torch.Tensor | None,
    output_size,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    gamma: float = 0.1,
) -> torch.Tensor:
    """Deformable RoI pooling (mmcv semantics).

    Args:
        input: [N, C, H, W] feature map (float32/float64, or
            float16/bfloat16 computed in float32).
        rois: [K, 5] (batch_index, x1, y1, x2, y2) in input-image coordinates,
            input's dtype (or float32 beside a 16-bit input; never rounded).
        offset: [K, 2, PH, PW] normalised bin shifts (channel 0: x, 1: y), or
            None (then RoIAlign aligned=True avg pooling). mmcv's convention of
            an empty 1-D tensor for "no offset" is accepted too.
        output_size: int or (PH, PW).
        spatial_scale: feature-map size / image size.
        sampling_ratio: samples per bin side; <= 0: ceil(RoI size / output size).
        gamma: bin (ph, pw) moves by gamma * (roi_w, roi_h) * offset[:, :, ph, pw].

    Returns:
        [K, C, PH, PW].
    """
    out_h, out_w = _args.check_call_pair("deform_roi_pool", "output_size", output_size, _args.POOLED_SIZE)
    sampling_ratio = _args.check_call_int("deform_roi_pool", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    if offset is not None and offset.dim() == 1 and offset.numel() == 0:
        offset = None
    note_device(input)
    return _deform_roi_pool(input, rois, offset, out_h, out_w, float(spatial_scale), sampling_ratio, float(gamma))


class DeformRoIPool(nn.Module):
    """mmcv.ops.DeformRoIPool: same constructor arguments, no parameters."""

    def __init__(self, output_size, spatial_scale: float = 1.0, sampling_ratio: int = 0, gamma: float = 0.1):
        super().__init__()
        name = type(self).__name__
        self.output_size = _args.check_pair(name, "output_size", output_size, _args.POOLED_SIZE)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = _args.check_int(name, "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
        self.gamma = float(gamma)

    def forward(self, input: torch.Tensor, rois: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        return deform_roi_pool(
            input, rois, offset, self.output_size, self.spatial_scale, self.sampling_ratio, self.gamma
        )

    def extra_repr(self) -> str:
        return (
            f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
            f"sampling_ratio={self.sampling_ratio}, gamma={self.gamma}"
        )


def _init_offset_fc(module: DeformRoIPool, output_channels, deform_fc_channels) -> int:
    """What DeformRoIPoolPack and ModulatedDeformRoIPoolPack construct alike: the checked output_channels and
    deform_fc_channels attributes and mmcv's `offset_fc` (Linear-ReLU-Linear-ReLU-Linear, the last layer
    zero-initialised). Returns the fc input width (PH * PW * output_channels)."""
    name = type(module).__name__
    module.output_channels = _args.check_int(name, "output_channels", output_channels, _args.CHANNELS)
    module.deform_fc_channels = _args.check_int(name, "deform_fc_channels", deform_fc_channels, _args.CHANNELS)
    in_features = module.output_size[0] * module.output_size[1] * module.output_channels
    module.offset_fc = nn.Sequential(
        nn.Linear(in_features, module.deform_fc_channels),
        nn.ReLU(inplace=True),
        nn.Linear(module.deform_fc_channels, module.deform_fc_channels),
        nn.ReLU(inplace=True),
        nn.Linear(module.deform_fc_channels, module.output_size[0] * module.output_size[1] * 2),
    )
    module.offset_fc[-1].weight.data.zero_()
    module.offset_fc[-1].bias.data.zero_()
    return in_features


def _check_channels(name: str, input: torch.Tensor, output_channels: int) -> None:
    if input.dim() != 4 or input.size(1) != output_channels:
        raise _args.ArgumentError(
            f"{name}: input must have shape [N, output_channels={output_channels}, H, W], got {list(input.shape)}"
        )


def _first_pass(module: DeformRoIPool, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
    """The Pack modules' first pass: input checked against output_channels, pooled without offsets and flattened
    per RoI (flatten(1), not mmcv's view(rois_num, -1): that fails for zero RoIs), the fc layers' input."""
    _check_channels(type(module).__name__, input, module.output_channels)
    return DeformRoIPool.forward(module, input, rois).flatten(1)


class DeformRoIPoolPack(DeformRoIPool):
    """mmcv.ops.DeformRoIPoolPack: pools once without offset, predicts the
    offsets with `offset_fc` (Linear-ReLU-Linear-ReLU-Linear, the last layer
    zero-initialised, so training starts from plain RoIAlign) and pools again.
    The layer structure is mmcv's, so mmcv/mmdet checkpoints load unchanged
    (offset_fc.0.*, offset_fc.2.*, offset_fc.4.*)."""

    def __init__(
        self,
        output_size,
        output_channels: int,
        deform_fc_channels: int = 1024,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ):
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        _init_offset_fc(self, output_channels, deform_fc_channels)

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        offset = self.offset_fc(_first_pass(self, input, rois)).view(rois.size(0), 2, *self.output_size)
        return super().forward(input, rois, offset)


class ModulatedDeformRoIPoolPack(DeformRoIPool):
    """mmcv.ops.ModulatedDeformRoIPoolPack: DeformRoIPoolPack plus a per-bin
    mask from `mask_fc` (Linear-ReLU-Linear-Sigmoid, the last Linear
    zero-initialised: the mask starts at 0.5). mmcv's layer structure and
    state-dict keys (offset_fc.{0,2,4}.*, mask_fc.{0,2}.*)."""

    def __init__(
        self,
        output_size,
        output_channels: int,
        deform_fc_channels: int = 1024,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        gamma: float = 0.1,
    ):
        super().__init__(output_size, spatial_scale, sampling_ratio, gamma)
        in_features = _init_offset_fc(self, output_channels, deform_fc_channels)
        self.mask_fc = nn.Sequential(
            nn.Linear(in_features, self.deform_fc_channels),
            nn.ReLU(inplace=True),
            nn.Linear(self.deform_fc_channels, self.output_size[0] * self.output_size[1] * 1),
            nn.Sigmoid(),
        )
        self.mask_fc[2].weight.data.zero_()
        self.mask_fc[2].bias.data.zero_()

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        features = _first_pass(self, input, rois)
        offset = self.offset_fc(features).view(rois.size(0), 2, *self.output_size)
        mask = self.mask_fc(features).view(rois.size(0), 1, *self.output_size)
        return super().forward(input, rois, offset) * mask


# Fixed RoIs and offsets (no sample within 5e-4 px of an integer coordinate, where float32 rounding
# could move the offset gradient by a kink), random features. Tolerances: the float64 reference on
# the same rounded inputs.
_EXAMPLE_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10, torch.float16: 5e-3, torch.bfloat16: 3e-2}


@example("deform_roi_pool")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Forward, input gradient (atomics on CUDA) and offset gradient (shuffles), with and without
    offsets; in a 16-bit dtype also under autocast beside float32 RoIs."""
    from ..reference.deform_roi_pool import deform_roi_pool_reference
    from ._examples import autocast_forward_backward, rois_for

    x = torch.randn(2, 5, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    rois = torch.tensor(
        [[0, 1.3, 1.1, 7.2, 6.4], [1, -2.2, 0.3, 12.6, 9.1], [1, 3.1, 3.3, 3.6, 4.2], [0, 20.2, 20.3, 30.1, 30.4]],
        dtype=torch.float64,
    )
    rois = rois.to(dtype).double()
    offset = torch.linspace(-0.71, 0.93, 4 * 2 * 3 * 3, dtype=torch.float64).reshape(4, 2, 3, 3).to(dtype).double()
    grad_out = torch.randn(4, 5, 3, 3, generator=gen, dtype=torch.float64).to(dtype).double()
    tol = _EXAMPLE_TOLERANCE[dtype]
    for off in (None, offset):
        xr = x.clone().requires_grad_()
        orr = None if off is None else off.clone().requires_grad_()
        want = deform_roi_pool_reference(xr, rois, orr, (3, 3), 1.0, 0, 0.3)
        wants = torch.autograd.grad(want, (xr,) if orr is None else (xr, orr), grad_out)
        xd = x.to(device, dtype, copy=True).requires_grad_()
        od = None if off is None else off.to(device, dtype, copy=True).requires_grad_()
        got = deform_roi_pool(xd, rois.to(device, dtype), od, 3, 1.0, 0, 0.3)
        gots = torch.autograd.grad(got, (xd,) if od is None else (xd, od), grad_out.to(device, dtype))
        what = "with" if off is not None else "without"
        for name, g, w in zip(("output", "grad_input", "grad_offset"), (got, *gots), (want, *wants), strict=False):
            g = g.detach().cpu().double()
            scale = max(w.abs().max().item(), 1.0)
            if not torch.allclose(g / scale, w.detach() / scale, rtol=tol, atol=tol):
                return f"deform_roi_pool {what} offset: wrong {name} (max error {(g - w).abs().max().item():.3g})"
    if dtype in (torch.float16, torch.bfloat16):
        error = autocast_forward_backward(
            lambda t, r, o: deform_roi_pool(t, r, o, 3, 0.1, 2, 0.1),
            lambda t, r, o: deform_roi_pool_reference(t, r, o, (3, 3), 0.1, 2, 0.1),
            [
                torch.randn(2, 5, 12, 14, generator=gen, dtype=torch.float64),
                rois_for(gen, 9),
                torch.randn(9, 2, 3, 3, generator=gen, dtype=torch.float64) * 0.1,
            ],
            {1}, {1}, dtype, gen, device,
        )  # fmt: skip
        if error is not None:
            return f"deform_roi_pool under autocast: {error}"
    return None
