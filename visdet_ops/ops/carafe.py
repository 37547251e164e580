"""carafe / carafe_naive / CARAFE / CARAFENaive / CARAFEPack with mmcv.ops
semantics, constructor arguments and state-dict keys (CARAFE: Content-Aware
ReAssembly of FEatures, https://arxiv.org/abs/1905.02188).

carafe and carafe_naive compute the same function:
    out[n, c, ph, pw] = sum_{iy, ix < K} features[n, c, ph//S + iy - r, pw//S + ix - r]
                                         * masks[n, (g*K + iy)*K + ix, ph, pw]
(r = (K-1)//2, g = c // (C // G), features outside the map count as 0).
They differ in their CUDA kernels: carafe_naive is the direct one thread per
output element; carafe keeps a 32 x 8 output tile's masks in shared memory
across a chunk of channels (and tiles the masks gradient the same way). On
the CPU both run the same code. Gradients flow to features and masks; both
backwards are gathers (no atomics), so they are deterministic, unlike mmcv's
atomicAdd kernels.

Autograd and autocast are registered here, for the classic and the stable build alike (docs/stable-abi.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _args, example, note_device
from ._registration import floating_to, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["CARAFE", "CARAFENaive", "CARAFEPack", "carafe", "carafe_naive"]

_INT_BOUNDS = (
    ("kernel_size", _args.CARAFE_KERNEL),
    ("group_size", _args.CARAFE_GROUPS),
    ("scale_factor", _args.CARAFE_SCALE),
)


def _check_ranges(
    op: str, kernel_size, group_size, scale_factor, error: type[Exception] = _args.ArgumentError
) -> tuple[int, int, int]:
    """The three ints within their bounds (functions: error=OpArgumentError, as _args.check_call_int)."""
    k, g, s = (
        _args.check_int(op, arg, value, bounds, error)
        for (arg, bounds), value in zip(_INT_BOUNDS, (kernel_size, group_size, scale_factor), strict=True)
    )
    return k, g, s


def _check_ranges_fake(op: str, kernel_size, group_size, scale_factor) -> None:
    for (arg, bounds), value in zip(_INT_BOUNDS, (kernel_size, group_size, scale_factor), strict=True):
        _args.check_fake(op, arg, value, bounds)


def _fake_output(features, masks, kernel_size, group_size, scale_factor, op):
    torch._check(
        features.dim() == 4, lambda: f"{op}: features must have 4 dimensions, got shape {list(features.shape)}"
    )
    torch._check(masks.dim() == 4, lambda: f"{op}: masks must have 4 dimensions, got shape {list(masks.shape)}")
    _check_ranges_fake(op, kernel_size, group_size, scale_factor)
    n, c, h, w = features.shape
    return features.new_empty((n, c, h * scale_factor, w * scale_factor))


@torch.library.register_fake("visdet_ops::carafe")
def _carafe_fake(features, masks, kernel_size, group_size, scale_factor):
    return _fake_output(features, masks, kernel_size, group_size, scale_factor, "carafe")


@torch.library.register_fake("visdet_ops::carafe_naive")
def _carafe_naive_fake(features, masks, kernel_size, group_size, scale_factor):
    return _fake_output(features, masks, kernel_size, group_size, scale_factor, "carafe_naive")


@torch.library.register_fake("visdet_ops::_carafe_backward")
def _carafe_backward_fake(grad_output, features, masks, kernel_size, group_size, scale_factor):
    _check_ranges_fake("carafe", kernel_size, group_size, scale_factor)
    return features.new_empty(features.shape), masks.new_empty(masks.shape)


@torch.library.register_fake("visdet_ops::_carafe_naive_backward")
def _carafe_naive_backward_fake(grad_output, features, masks, kernel_size, group_size, scale_factor):
    _check_ranges_fake("carafe_naive", kernel_size, group_size, scale_factor)
    return features.new_empty(features.shape), masks.new_empty(masks.shape)


# Autograd and autocast are registered here, for the classic and the stable build alike (the stable ABI has no C++
# API for them; one source either way): docs/stable-abi.md. Gradients flow to features and masks; each backward is
# its own op (_carafe_backward, _carafe_naive_backward) so that torch.compile and fake tensors see it.


def _carafe_setup_context(ctx, inputs, output):
    features, masks, kernel_size, group_size, scale_factor = inputs
    ctx.save_for_backward(features, masks)
    ctx.sizes = (kernel_size, group_size, scale_factor)


def _carafe_backward_formula(backward_op):
    def backward(ctx, grad_output):
        features, masks = ctx.saved_tensors
        grad_features, grad_masks = backward_op(grad_output, features, masks, *ctx.sizes)
        return grad_features, grad_masks, None, None, None

    return backward


def _carafe_autocast(op: str):
    # features keep their dtype (the kernels read float16/bfloat16 directly and accumulate in float32); masks go to
    # the features' dtype, which the kernels read them in (softmax under autocast hands float32 masks to 16-bit
    # features: the reassembly weights lie in [0, 1] and sum to 1, so 16 bits lose about 1e-3 relative per weight).
    # The output has the features' dtype; the masks' gradient comes back in the masks' own dtype through the cast.
    def make_kernel(device_type: str):
        def kernel(features, masks, kernel_size, group_size, scale_factor):
            if features.is_floating_point():  # else the op's own check names features
                masks = floating_to(features.dtype, masks)
            return getattr(torch.ops.visdet_ops, op)(features, masks, kernel_size, group_size, scale_factor)

        return kernel

    return make_kernel


# op name -> its eager entry point (register_autograd)
_EAGER = {
    op: register_autograd(
        op, _carafe_backward_formula(getattr(torch.ops.visdet_ops, f"_{op}_backward")), _carafe_setup_context
    )
    for op in ("carafe", "carafe_naive")
}
for _op in _EAGER:
    register_autocast(_op, _carafe_autocast(_op))


def carafe(
    features: torch.Tensor, masks: torch.Tensor, kernel_size: int, group_size: int, scale_factor: int
) -> torch.Tensor:
    """CARAFE upsampling (mmcv.ops.carafe).

    Args:
        features: [N, C, H, W] (float32/float64, or
            float16/bfloat16 computed in float32).
        masks: [N, kernel_size**2 * group_size, H * scale_factor,
            W * scale_factor] reassembly kernels (normally softmax-normalised).
        kernel_size: odd K.
        group_size: G, dividing C; channel group g = c // (C // G).
        scale_factor: S >= 1.

    Returns:
        [N, C, H * S, W * S].
    """
    kernel_size, group_size, scale_factor = _check_ranges(
        "carafe", kernel_size, group_size, scale_factor, _args.OpArgumentError
    )
    note_device(features)
    return _EAGER["carafe"](features, masks, kernel_size, group_size, scale_factor)


def carafe_naive(
    features: torch.Tensor, masks: torch.Tensor, kernel_size: int, group_size: int, scale_factor: int
) -> torch.Tensor:
    """The same function as `carafe` with the direct CUDA kernels (mmcv.ops.carafe_naive)."""
    kernel_size, group_size, scale_factor = _check_ranges(
        "carafe_naive", kernel_size, group_size, scale_factor, _args.OpArgumentError
    )
    note_device(features)
    return _EAGER["carafe_naive"](features, masks, kernel_size, group_size, scale_factor)


def _check_ints(name: str, kernel_size, group_size, scale_factor) -> None:
    for arg, value in (("kernel_size", kernel_size), ("group_size", group_size), ("scale_factor", scale_factor)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name}: {arg} must be an int, got {value!r}")
    _check_ranges(name, kernel_size, group_size, scale_factor)


class CARAFENaive(nn.Module):
    """mmcv.ops.CARAFENaive(kernel_size, group_size, scale_factor); no parameters."""

    def __init__(self, kernel_size: int, group_size: int, scale_factor: int):
        super().__init__()
        _check_ints(type(self).__name__, kernel_size, group_size, scale_factor)
        self.kernel_size = kernel_size
        self.group_size = group_size
        self.scale_factor = scale_factor

    def forward(self, features: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return carafe_naive(features, masks, self.kernel_size, self.group_size, self.scale_factor)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, group_size={self.group_size}, scale_factor={self.scale_factor}"


class CARAFE(CARAFENaive):
    """mmcv.ops.CARAFE(kernel_size, group_size, scale_factor); no parameters."""

    def forward(self, features: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return carafe(features, masks, self.kernel_size, self.group_size, self.scale_factor)


class CARAFEPack(nn.Module):
    """mmcv.ops.CARAFEPack: channel compressor (1x1 conv) -> content encoder
    (conv predicting up_kernel**2 * up_group * scale_factor**2 channels) ->
    pixel shuffle + softmax over each K*K kernel -> carafe.

    Submodule names, shapes and initialisation are mmcv's (xavier-uniform
    convs with zero bias, then the content encoder re-initialised
    normal(std=0.001)), so mmdet CARAFE checkpoints load with strict=True:
    channel_compressor.{weight,bias}, content_encoder.{weight,bias}.
    """

    def __init__(
        self,
        channels: int,
        scale_factor: int,
        up_kernel: int = 5,
        up_group: int = 1,
        encoder_kernel: int = 3,
        encoder_dilation: int = 1,
        compressed_channels: int = 64,
    ):
        super().__init__()
        name = type(self).__name__
        channels = _args.check_int(name, "channels", channels, _args.CHANNELS)
        scale_factor = _args.check_int(name, "scale_factor", scale_factor, _args.CARAFE_SCALE)
        up_kernel = _args.check_int(name, "up_kernel", up_kernel, _args.CARAFE_KERNEL)
        if up_kernel % 2 == 0:  # carafe's rule, raised here rather than at the first forward
            raise _args.ArgumentError(f"{name}: up_kernel must be odd, got {up_kernel}")
        up_group = _args.check_int(name, "up_group", up_group, _args.CARAFE_GROUPS)
        encoder_kernel = _args.check_int(name, "encoder_kernel", encoder_kernel, _args.KERNEL_SIZE)
        encoder_dilation = _args.check_int(name, "encoder_dilation", encoder_dilation, _args.DILATION)
        compressed_channels = _args.check_int(name, "compressed_channels", compressed_channels, _args.CHANNELS)
        self.channels = channels
        self.scale_factor = scale_factor
        self.up_kernel = up_kernel
        self.up_group = up_group
        self.encoder_kernel = encoder_kernel
        self.encoder_dilation = encoder_dilation
        self.compressed_channels = compressed_channels
        self.channel_compressor = nn.Conv2d(channels, self.compressed_channels, 1)
        self.content_encoder = nn.Conv2d(
            self.compressed_channels,
            self.up_kernel * self.up_kernel * self.up_group * self.scale_factor * self.scale_factor,
            self.encoder_kernel,
            padding=int((self.encoder_kernel - 1) * self.encoder_dilation / 2),
            dilation=self.encoder_dilation,
            groups=1,
        )
        self.init_weights()

    def init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight, gain=1)
                nn.init.constant_(m.bias, 0)
        nn.init.normal_(self.content_encoder.weight, 0, 0.001)
        nn.init.constant_(self.content_encoder.bias, 0)

    def kernel_normalizer(self, mask: torch.Tensor) -> torch.Tensor:
        r = self.scale_factor
        if mask.numel() == 0:
            # The same shuffle by view and permute: torch's CPU pixel_unshuffle (pixel_shuffle's backward) returns a
            # zero-element input unchanged, of the wrong shape, and the backward fails (pytorch/pytorch PR 192816).
            n, c, h, w = mask.size()
            c //= r * r
            mask = mask.view(n, c, r, r, h, w).permute(0, 1, 4, 2, 5, 3).reshape(n, c, h * r, w * r)
        else:
            mask = F.pixel_shuffle(mask, r)
        n, mask_c, h, w = mask.size()
        mask_channel = mask_c // (self.up_kernel**2)
        # up_kernel**2, not mmcv's -1: a view of 0 elements (an empty batch or map) cannot infer it.
        mask = mask.view(n, mask_channel, self.up_kernel**2, h, w)
        mask = F.softmax(mask, dim=2, dtype=mask.dtype)
        return mask.view(n, mask_c, h, w).contiguous()

    def feature_reassemble(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return carafe(x, mask, self.up_kernel, self.up_group, self.scale_factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        compressed_x = self.channel_compressor(x)
        mask = self.content_encoder(compressed_x)
        mask = self.kernel_normalizer(mask)
        return self.feature_reassemble(x, mask)


@example("carafe", "carafe_naive")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Both ops, forward and backward: a map that is not a multiple of the 32 x 8 tile with more
    channels than one chunk (32); on CUDA k=5 in float64 takes the tiled path, k=7 the fallback."""
    from ..reference.carafe import carafe_reference
    from ._examples import forward_backward

    x = torch.randn(2, 40, 11, 21, generator=gen, dtype=torch.float64)
    for k, g in ((5, 2), (7, 1)):
        masks = torch.randn(2, g, k * k, 22, 42, generator=gen, dtype=torch.float64).softmax(2).view(2, -1, 22, 42)
        for fn in (carafe, carafe_naive):
            error = forward_backward(
                lambda f, m, fn=fn, k=k, g=g: fn(f, m, k, g, 2),
                lambda f, m, k=k, g=g: carafe_reference(f, m, k, g, 2),
                [x, masks],
                dtype,
                gen,
                device,
            )
            if error is not None:
                return f"{fn.__name__} k={k}: {error}"
    return None
