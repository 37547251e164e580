"""masked_conv2d / MaskedConv2d with mmcv.ops semantics: a stride-1
convolution evaluated only where mask > 0 (masked im2col, one GEMM, masked
col2im), zeros elsewhere.

Generalisations of mmcv (where mmcv asserts or misbehaves): features may have
any batch size N, with a mask of [1, H, W] (shared) or [N, H, W]; mask may be
bool or any real dtype (active where mask > 0); padding may be asymmetric
(pad_h, pad_w). Positions of the mask outside the output (padding smaller than
'same') are ignored, where mmcv writes out of bounds.

Gradients: mmcv's masked_conv2d is not differentiable (its backward returns
None for everything). Here gradients flow to features, weight and bias from
the active outputs only; the mask gets none. The backward is deterministic
(the input gradient is a gather over an index map, no atomics).

Like mmcv, finding the active positions synchronises a CUDA stream with the
host. Autograd and autocast are registered here, for the classic and the stable
build alike (docs/stable-abi.md).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.utils import _pair

from . import _args, example, note_device, refuse_graph_capture
from ._registration import autocast_to, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["MaskedConv2d", "masked_conv2d"]


@torch.library.register_fake("visdet_ops::masked_conv2d")
def _masked_conv2d_fake(features, mask, weight, bias, pad_h, pad_w):
    torch._check(
        features.dim() == 4,
        lambda: f"masked_conv2d: features must have 4 dimensions, got shape {list(features.shape)}",
    )
    torch._check(
        weight.dim() == 4, lambda: f"masked_conv2d: weight must have 4 dimensions, got shape {list(weight.shape)}"
    )
    _args.check_fake("masked_conv2d", "pad_h", pad_h, _args.PADDING)
    _args.check_fake("masked_conv2d", "pad_w", pad_w, _args.PADDING)
    out_h = features.size(2) + 2 * pad_h - weight.size(2) + 1
    out_w = features.size(3) + 2 * pad_w - weight.size(3) + 1
    return features.new_empty((features.size(0), weight.size(0), out_h, out_w))


@torch.library.register_fake("visdet_ops::_masked_conv2d_backward")
def _masked_conv2d_backward_fake(grad_output, features, mask, weight, pad_h, pad_w):
    _args.check_fake("masked_conv2d", "pad_h", pad_h, _args.PADDING)
    _args.check_fake("masked_conv2d", "pad_w", pad_w, _args.PADDING)
    return (
        features.new_empty(features.shape),
        weight.new_empty(weight.shape),
        weight.new_empty((weight.size(0),)),
    )


# Autograd and autocast are registered here, for the classic and the stable build alike (the stable ABI has no C++
# API for them; one source either way): docs/stable-abi.md. mmcv's masked_conv2d is not differentiable (its backward
# returns None); this one is: gradients flow to features, weight and bias from the active outputs only (the mask is
# a constant). The backward is its own op, _masked_conv2d_backward, so that torch.compile and fake tensors see it.


def _masked_conv2d_setup_context(ctx, inputs, output):
    features, mask, weight, bias, pad_h, pad_w = inputs
    ctx.save_for_backward(features, mask, weight)
    ctx.padding = (pad_h, pad_w)
    ctx.has_bias = bias is not None


def _masked_conv2d_backward(ctx, grad_output):
    features, mask, weight = ctx.saved_tensors
    grad_features, grad_weight, grad_bias = torch.ops.visdet_ops._masked_conv2d_backward(
        grad_output, features, mask, weight, *ctx.padding
    )
    # One entry per forward argument: features, mask, weight, bias, pad_h, pad_w.
    return grad_features, None, grad_weight, grad_bias if ctx.has_bias else None, None, None


_masked_conv2d = register_autograd("masked_conv2d", _masked_conv2d_backward, _masked_conv2d_setup_context)


def _masked_conv2d_autocast(device_type: str):
    # Like a convolution: features, weight and bias go to the autocast dtype (float16/bfloat16; float64 left
    # alone), the GEMM accumulates in float32, the output has the autocast dtype. mask only selects positions
    # (mask > 0) and keeps its dtype.
    def kernel(features, mask, weight, bias, pad_h, pad_w):
        to = torch.get_autocast_dtype(device_type)
        return torch.ops.visdet_ops.masked_conv2d(
            autocast_to(to, features, device_type),
            mask,
            autocast_to(to, weight, device_type),
            autocast_to(to, bias, device_type),
            pad_h,
            pad_w,
        )

    return kernel


def _masked_conv2d_backward_autocast(device_type: str):
    # No casts: the backward's own GEMMs and sums run in the dtypes the forward chose, also when loss.backward() runs
    # inside the autocast region (the kernel runs with the autocast key excluded).
    return torch.ops.visdet_ops._masked_conv2d_backward


register_autocast("masked_conv2d", _masked_conv2d_autocast)
register_autocast("_masked_conv2d_backward", _masked_conv2d_backward_autocast)


def masked_conv2d(
    features: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding=0,
    stride=1,
) -> torch.Tensor:
    """Convolution at the positions where mask > 0 (mmcv.ops.masked_conv2d).

    Args:
        features: [N, C_in, H, W] (float32/float64, or
            float16/bfloat16 computed in float32).
        mask: [1, H, W] or [N, H, W]; an output position (h, w) is computed
            where mask[., h, w] > 0 and is 0 elsewhere.
        weight: [C_out, C_in, KH, KW] (groups=1, dilation=1).
        bias: [C_out] or None.
        padding: int or (pad_h, pad_w).
        stride: must be 1 (as in mmcv).

    Returns:
        [N, C_out, H + 2 * pad_h - KH + 1, W + 2 * pad_w - KW + 1].
    """
    stride_h, stride_w = _pair(stride)
    if stride_h != 1 or stride_w != 1:
        raise _args.OpArgumentError(f"masked_conv2d: stride must be 1 (as in mmcv), got {stride!r}")
    pad_h, pad_w = _args.check_call_pair("masked_conv2d", "padding", padding, _args.PADDING)
    note_device(features)
    refuse_graph_capture("masked_conv2d", features, "the positions of the mask are gathered on the host (nonzero)")
    return _masked_conv2d(features, mask, weight, bias, int(pad_h), int(pad_w))


class MaskedConv2d(nn.Conv2d):
    """mmcv.ops.MaskedConv2d: an nn.Conv2d (same arguments, same parameters and
    state-dict keys) whose forward(input, mask) computes only where mask > 0;
    without a mask it is the plain convolution.

    mmcv passes only the padding to the masked op, silently ignoring stride,
    dilation and groups; here a masked call with any of them != 1 raises.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
    ):
        name = type(self).__name__
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups = _args.check_conv(
            name, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, str_padding=True
        )
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

    def forward(self, input: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is None:
            return super().forward(input)
        if self.stride != (1, 1) or self.dilation != (1, 1) or self.groups != 1:
            raise _args.ArgumentError(
                "MaskedConv2d: a masked forward needs stride=1, dilation=1 and groups=1, got "
                f"stride={self.stride}, dilation={self.dilation}, groups={self.groups}"
            )
        if isinstance(self.padding, str) or self.padding_mode != "zeros":
            raise _args.ArgumentError(
                "MaskedConv2d: a masked forward needs numeric zero padding, got "
                f"padding={self.padding!r}, padding_mode={self.padding_mode!r}"
            )
        return masked_conv2d(input, mask, self.weight, self.bias, self.padding)


@example("masked_conv2d")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Forward and backward (input, weight, bias) with about 40% of the pixels masked in."""
    from ..reference.masked_conv import masked_conv2d_reference
    from ._examples import forward_backward

    x = torch.randn(2, 6, 17, 19, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 6, 3, 3, generator=gen, dtype=torch.float64) * 0.3
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 17, 19, generator=gen, dtype=torch.float64) > 0.6
    error = forward_backward(
        lambda f, wt, bs: masked_conv2d(f, mask.to(device), wt, bs, 1),
        lambda f, wt, bs: masked_conv2d_reference(f, mask, wt, bs, (1, 1)),
        [x, w, b],
        dtype,
        gen,
        device,
    )
    return None if error is None else f"masked_conv2d: {error}"
