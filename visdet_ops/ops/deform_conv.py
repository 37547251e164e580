"""deform_conv2d / DeformConv2d / DeformConv2dPack (DCNv1) and
modulated_deform_conv2d / ModulatedDeformConv2d / ModulatedDeformConv2dPack
(DCNv2) with mmcv.ops semantics, constructor arguments and state-dict keys.

One op, visdet_ops::deform_conv2d, serves both (v1 is v2 without a mask).
Offsets are [N, 2 * deform_groups * KH * KW, OH, OW], a (y, x) pair per kernel
point per deform group (mmcv's and torchvision's layout); masks are
[N, deform_groups * KH * KW, OH, OW].

Batching: images go through im2col and the GEMMs in chunks of `im2col_step`
(v1, default 32 as mmcv) or, for v2 (mmcv has no such argument), of as many
images as a 512 MiB column buffer holds. Unlike mmcv, the step need not divide
the batch: the last chunk is smaller. The chunk size changes only speed and
memory, never the result beyond float rounding.

This module registers the fake impls, autograd, autocast and the CUDA
backward's determinism alert (for the classic and the stable build alike:
docs/stable-abi.md), and holds the Python API and the modules.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.utils import _pair, _single

from . import _args, example, note_device
from ._registration import alert_not_deterministic, autocast_to, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = [
    "DeformConv2d",
    "DeformConv2dPack",
    "ModulatedDeformConv2d",
    "ModulatedDeformConv2dPack",
    "deform_conv2d",
    "modulated_deform_conv2d",
]


def _out_size(size, pad, dilation, kernel, stride):
    return (size + 2 * pad - (dilation * (kernel - 1) + 1)) // stride + 1


def _too_small(op: str, input_desc: str, h, w, kernel, padding, dilation) -> str | None:
    """The message of the C++ check (deform_conv.cpp prepare) when the padded h x w input is smaller than the
    dilated kernel, else None. The check comes before the division by the stride (which would floor a negative
    numerator here, truncate it in C++): no output size is made up."""
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    if h + 2 * ph - (dh * (kh - 1) + 1) >= 0 and w + 2 * pw - (dw * (kw - 1) + 1) >= 0:
        return None
    return (
        f"{op}: the input ({input_desc}) is too small for a {kh}x{kw} kernel with padding ({ph}, {pw}) and "
        f"dilation ({dh}, {dw}): the padded input ({h + 2 * ph} x {w + 2 * pw}) is smaller than the dilated kernel "
        f"({dh * (kh - 1) + 1} x {dw * (kw - 1) + 1})"
    )


# The op's integer arguments in schema order, with their bounds (the C++ check_params).
_OP_INTS = (
    ("stride_h", _args.STRIDE),
    ("stride_w", _args.STRIDE),
    ("pad_h", _args.PADDING),
    ("pad_w", _args.PADDING),
    ("dilation_h", _args.DILATION),
    ("dilation_w", _args.DILATION),
    ("groups", _args.GROUPS),
    ("deform_groups", _args.GROUPS),
    ("im2col_step", _args.IM2COL_STEP_DCN),
)


def _check_op_ints_fake(values) -> None:
    for (arg, bounds), value in zip(_OP_INTS, values, strict=True):
        _args.check_fake("deform_conv2d", arg, value, bounds)


@torch.library.register_fake("visdet_ops::deform_conv2d")
def _deform_conv2d_fake(
    input, offset, mask, weight, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, dg, step
):
    _check_op_ints_fake((stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, dg, step))
    torch._check(input.dim() == 4, lambda: f"deform_conv2d: input must have 4 dimensions, got {list(input.shape)}")
    torch._check(weight.dim() == 4, lambda: f"deform_conv2d: weight must have 4 dimensions, got {list(weight.shape)}")
    for size, pad, dilation, kernel in (
        (input.size(2), pad_h, dilation_h, weight.size(2)),
        (input.size(3), pad_w, dilation_w, weight.size(3)),
    ):
        torch._check(
            size + 2 * pad - (dilation * (kernel - 1) + 1) >= 0,
            lambda: _too_small(
                "deform_conv2d",
                f"{input.size(2)} x {input.size(3)}, shape {list(input.shape)}",
                input.size(2),
                input.size(3),
                (weight.size(2), weight.size(3)),
                (pad_h, pad_w),
                (dilation_h, dilation_w),
            ),
        )
    out_h = _out_size(input.size(2), pad_h, dilation_h, weight.size(2), stride_h)
    out_w = _out_size(input.size(3), pad_w, dilation_w, weight.size(3), stride_w)
    kk = weight.size(2) * weight.size(3)
    torch._check(
        offset.dim() == 4 and offset.size(1) == 2 * dg * kk,
        lambda: f"deform_conv2d: offset must have shape [N, {2 * dg * kk}, out_h, out_w], got {list(offset.shape)}",
    )
    return input.new_empty((input.size(0), weight.size(0), out_h, out_w))


@torch.library.register_fake("visdet_ops::_deform_conv2d_backward")
def _deform_conv2d_backward_fake(grad_output, input, offset, mask, weight, bias, *ints):
    _check_op_ints_fake(ints)
    return (
        torch.empty_like(input, memory_format=torch.contiguous_format),
        torch.empty_like(offset, memory_format=torch.contiguous_format),
        input.new_empty((0,)) if mask is None else torch.empty_like(mask, memory_format=torch.contiguous_format),
        torch.empty_like(weight, memory_format=torch.contiguous_format),
        input.new_empty((0,)) if bias is None else torch.empty_like(bias, memory_format=torch.contiguous_format),
    )


# Autograd, autocast and the determinism alert are registered here, for the classic and the stable build alike (the
# stable ABI has no C++ API for them; one source either way): docs/stable-abi.md. The backward is its own op,
# _deform_conv2d_backward, so that torch.compile and the fake-tensor machinery see it.


def _deform_conv2d_setup_context(ctx, inputs, output):
    input, offset, mask, weight, bias, *ints = inputs
    ctx.save_for_backward(input, offset, mask, weight, bias)
    ctx.ints = ints
    ctx.on_cuda = input.is_cuda


def _deform_conv2d_backward(ctx, grad_output):
    if ctx.on_cuda:
        # grad_input is accumulated with atomicAdd: the summation order, and so the last bits, vary. (grad_offset,
        # grad_mask, grad_weight and grad_bias are deterministic.)
        alert_not_deterministic("visdet_ops::deform_conv2d backward (CUDA)")
    input, offset, mask, weight, bias = ctx.saved_tensors
    gi, go, gm, gw, gb = torch.ops.visdet_ops._deform_conv2d_backward(
        grad_output, input, offset, mask, weight, bias, *ctx.ints
    )
    # One entry per forward argument: 5 tensors, then the 9 ints.
    return (gi, go, None if mask is None else gm, gw, None if bias is None else gb) + (None,) * len(ctx.ints)


_deform_conv2d = register_autograd("deform_conv2d", _deform_conv2d_backward, _deform_conv2d_setup_context)


def _deform_conv2d_autocast(device_type: str):
    # Like a convolution (torch casts conv2d's arguments to the autocast dtype): input, offset, mask, weight and
    # bias all go to the autocast dtype (float16/bfloat16; mmcv casts input and weight to the offset's dtype for the
    # same reason). The kernels sample in float32 and the GEMMs accumulate in float32; the output has the autocast
    # dtype, and each gradient comes back in its argument's dtype through the casts (float32 for a float32 weight).
    # float64 arguments are left alone.
    def kernel(input, offset, mask, weight, bias, *ints):
        to = torch.get_autocast_dtype(device_type)
        return torch.ops.visdet_ops.deform_conv2d(
            *(autocast_to(to, t, device_type) for t in (input, offset, mask, weight, bias)), *ints
        )

    return kernel


def _deform_conv2d_backward_autocast(device_type: str):
    # No casts: the backward's own GEMMs and sums run in the dtypes the forward chose, also when loss.backward() runs
    # inside the autocast region (the kernel runs with the autocast key excluded).
    return torch.ops.visdet_ops._deform_conv2d_backward


register_autocast("deform_conv2d", _deform_conv2d_autocast)
register_autocast("_deform_conv2d_backward", _deform_conv2d_backward_autocast)


def _as_mmcv_reads(op: str, arg: str, t, input, weight, stride, padding, dilation):
    """modulated_deform_conv2d's offset or mask whose H x W differs from the output's, as mmcv's kernels read it
    (docs/migration.md, "Results"): mmcv has no check there, and its im2col and col2im (CPU and CUDA) index image b's
    offset from offset[b]'s data pointer as a contiguous [C, OH, OW] array, the offset's own strides unused but the
    batch stride. That is the view with strides (offset.stride(0), OH * OW, OW, 1) on the offset's memory; its
    gradient is mmcv's too (mmcv's backward writes the same positions of a zeroed tensor). An offset whose memory
    ends before the last image's C * OH * OW values (mmcv reads past it) is refused, naming the argument. Anything
    else (a wrong rank, batch or channel count) is left to the op's check."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4 or input.dim() != 4 or weight.dim() != 4:
        return t
    if weight.size(2) == 0 or weight.size(3) == 0:
        return t  # the op's check names the kernel
    out_h = _out_size(input.size(2), padding[0], dilation[0], weight.size(2), stride[0])
    out_w = _out_size(input.size(3), padding[1], dilation[1], weight.size(3), stride[1])
    if (t.size(2), t.size(3)) == (out_h, out_w) or out_h <= 0 or out_w <= 0 or t.size(0) != input.size(0):
        return t
    n, channels = t.size(0), t.size(1)
    end = t.storage_offset() + (n - 1) * t.stride(0) + channels * out_h * out_w if n and channels else 0
    held = t.untyped_storage().nbytes() // t.element_size()
    if end > held:
        raise _args.ShapeError(
            f"{op}: {arg} has H x W {t.size(2)} x {t.size(3)}, the output {out_h} x {out_w}: mmcv then reads image b's "
            f"{arg} as [{channels}, {out_h}, {out_w}] from {arg}[b]'s first element, which for the last image runs "
            f"past the {arg}'s memory ({end} elements needed, {held} held); give {arg} the output's H x W"
        )
    return t.as_strided((n, channels, out_h, out_w), (t.stride(0), out_h * out_w, out_w, 1))


def _call(input, offset, mask, weight, bias, stride, padding, dilation, groups, deform_groups, im2col_step, op):
    # Under the names the user wrote (op is the public function's name), before any work: the op's own check
    # would name the schema's stride_h, pad_w, ... (_args' docstring).
    sh, sw = _args.check_call_pair(op, "stride", stride, _args.STRIDE)
    ph, pw = _args.check_call_pair(op, "padding", padding, _args.PADDING)
    dh, dw = _args.check_call_pair(op, "dilation", dilation, _args.DILATION)
    if mask is not None and isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor):
        # DCNv2 only: mmcv's deform_conv2d views the offset as the output's shape and raises there.
        geometry = (input, weight, (sh, sw), (ph, pw), (dh, dw))
        offset = _as_mmcv_reads(op, "offset", offset, *geometry)
        mask = _as_mmcv_reads(op, "mask", mask, *geometry)
    groups = _args.check_call_int(op, "groups", groups, _args.GROUPS)
    deform_groups = _args.check_call_int(op, "deform_groups", deform_groups, _args.GROUPS)
    im2col_step = _args.check_call_int(op, "im2col_step", im2col_step, _args.IM2COL_STEP_DCN)
    note_device(input)
    return _deform_conv2d(
        input,
        offset,
        mask,
        weight,
        bias,
        int(sh),
        int(sw),
        int(ph),
        int(pw),
        int(dh),
        int(dw),
        int(groups),
        int(deform_groups),
        int(im2col_step),
    )


def deform_conv2d(
    input: torch.Tensor,
    offset: torch.Tensor,
    weight: torch.Tensor,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    deform_groups: int = 1,
    bias: bool = False,
    im2col_step: int = 32,
) -> torch.Tensor:
    """Deformable convolution v1 (mmcv.ops.deform_conv2d).

    Args:
        input: [N, C, H, W] (float32/float64, or float16/bfloat16).
        offset: [N, 2 * deform_groups * KH * KW, OH, OW], (y, x) per kernel point.
        weight: [C_out, C / groups, KH, KW].
        stride, padding, dilation: int or (h, w).
        groups: convolution groups; deform_groups: offset groups (C must divide).
        bias: must be False, as in mmcv (use modulated_deform_conv2d for a bias).
        im2col_step: images per im2col/GEMM chunk (need not divide N; <= 0: automatic).

    Returns:
        [N, C_out, OH, OW].
    """
    if bias not in (False, None):
        raise _args.ArgumentError(
            "deform_conv2d: bias must be False (mmcv's DCNv1 has no bias); use modulated_deform_conv2d for one"
        )
    return _call(
        input,
        offset,
        None,
        weight,
        None,
        stride,
        padding,
        dilation,
        groups,
        deform_groups,
        im2col_step,
        "deform_conv2d",
    )


def modulated_deform_conv2d(
    input: torch.Tensor,
    offset: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    deform_groups: int = 1,
) -> torch.Tensor:
    """Modulated deformable convolution, DCNv2 (mmcv.ops.modulated_deform_conv2d).

    As deform_conv2d, and each sample is multiplied by
    mask[N, deform_groups * KH * KW, OH, OW]; bias: [C_out] or None.
    """
    return _call(
        input,
        offset,
        mask,
        weight,
        bias,
        stride,
        padding,
        dilation,
        groups,
        deform_groups,
        0,
        "modulated_deform_conv2d",
    )


def _one_deform_groups_name(init):
    """Decorates the modules' __init__: deform_groups (by keyword or position) together with mmcv's deprecated
    name deformable_groups is a TypeError naming both, as renamed_kwargs (and mmcv's deprecated_api_warning, an
    AssertionError there) refuses an old and a new name given together. The check is here, not in __init__, which
    cannot tell an explicit deform_groups=1 from the default."""
    position = list(inspect.signature(init).parameters).index("deform_groups")  # counting self

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        if kwargs.get("deformable_groups") is not None and ("deform_groups" in kwargs or len(args) >= position):
            raise TypeError(
                f"{type(self).__name__}: got both 'deformable_groups' (deprecated) and 'deform_groups'; "
                "give 'deform_groups' only"
            )
        init(self, *args, **kwargs)

    return wrapper


def _deprecated_deformable_groups(cls_name: str, deform_groups: int, deformable_groups: int | None) -> int:
    if deformable_groups is None:
        return deform_groups
    warnings.warn(
        f'"deformable_groups" is deprecated in {cls_name}, please use "deform_groups" instead',
        DeprecationWarning,
        stacklevel=3,
    )
    # Checked here, under the name the user wrote (_init_conv would report it as deform_groups).
    return _args.check_int(cls_name, "deformable_groups", deformable_groups, _args.GROUPS)


def _init_conv(
    module: nn.Module,
    in_channels: int,
    out_channels: int,
    kernel_size,
    stride,
    padding,
    dilation,
    groups: int,
    deform_groups: int,
) -> None:
    """The nn.Conv2d-like attributes and the `weight` parameter that DeformConv2d and
    ModulatedDeformConv2d share (mmcv's names; `transposed` and `output_padding` for
    compatibility with nn.Conv2d, as mmcv)."""
    name = type(module).__name__
    in_channels, out_channels, kernel_size, stride, padding, dilation, groups = _args.check_conv(
        name, in_channels, out_channels, kernel_size, stride, padding, dilation, groups
    )
    deform_groups = _args.check_int(name, "deform_groups", deform_groups, _args.GROUPS)
    if in_channels % groups != 0:
        raise _args.ArgumentError(f"{name}: in_channels {in_channels} is not divisible by groups {groups}")
    if out_channels % groups != 0:
        raise _args.ArgumentError(f"{name}: out_channels {out_channels} is not divisible by groups {groups}")
    module.in_channels = in_channels
    module.out_channels = out_channels
    module.kernel_size = _pair(kernel_size)
    module.stride = _pair(stride)
    module.padding = _pair(padding)
    module.dilation = _pair(dilation)
    module.groups = groups
    module.deform_groups = deform_groups
    module.transposed = False
    module.output_padding = _single(0)
    module.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *module.kernel_size))


class DeformConv2d(nn.Module):
    """mmcv.ops.DeformConv2d: same constructor arguments and parameters (`weight`, no bias).

    forward(x, offset); an input smaller than the kernel is zero-padded at the
    bottom/right and the output cropped back, as mmcv does."""

    @_one_deform_groups_name
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        deform_groups: int = 1,
        bias: bool = False,
        im2col_step: int = 32,
        *,
        deformable_groups: int | None = None,
    ):
        super().__init__()
        deform_groups = _deprecated_deformable_groups(type(self).__name__, deform_groups, deformable_groups)
        if bias:
            raise _args.ArgumentError(f"{type(self).__name__}: bias={bias} is not supported (mmcv's DCNv1 has no bias)")
        _init_conv(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, deform_groups)
        self.im2col_step = _args.check_int(type(self).__name__, "im2col_step", im2col_step, _args.IM2COL_STEP_DCN)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # mmcv's (since v1.3.15): Kaiming-uniform for ReLU, bound
        # sqrt(6 / fan_in) with fan_in = in_channels / groups * KH * KW.
        # ModulatedDeformConv2d keeps mmcv's older +-1/sqrt(in_channels * KH * KW).
        nn.init.kaiming_uniform_(self.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        kh, kw = self.kernel_size
        h, w = x.size(2), x.size(3)
        pad_h, pad_w = max(kh - h, 0), max(kw - w, 0)
        # Checked here, before the padding below changes the input the op's own check would report.
        error = _too_small(
            type(self).__name__,
            f"{h} x {w}" + (f", zero-padded to {h + pad_h} x {w + pad_w} as mmcv does" if pad_h or pad_w else ""),
            h + pad_h,
            w + pad_w,
            self.kernel_size,
            self.padding,
            self.dilation,
        )
        if error is not None:
            raise _args.ShapeError(error)
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), "constant", 0)
            offset = F.pad(offset, (0, pad_w, 0, pad_h), "constant", 0)
        out = self._deform_conv(x, offset)
        if pad_h or pad_w:
            out = out[:, :, : out.size(2) - pad_h, : out.size(3) - pad_w].contiguous()
        return out

    def _deform_conv(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """deform_conv2d with this module's weight and geometry (forward and DeformConv2dPack's forward)."""
        return deform_conv2d(
            x,
            offset,
            self.weight,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            self.deform_groups,
            False,
            self.im2col_step,
        )

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, out_channels={self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
            f"deform_groups={self.deform_groups}, im2col_step={self.im2col_step}"
        )


def _conv_offset(conv, values_per_point: int) -> nn.Conv2d:
    """mmcv's `conv_offset` of a *Pack module: values_per_point (2: y, x offsets;
    3: and a mask) per deform group and kernel point, same geometry as `conv`."""
    return nn.Conv2d(
        conv.in_channels,
        conv.deform_groups * values_per_point * conv.kernel_size[0] * conv.kernel_size[1],
        kernel_size=conv.kernel_size,
        stride=conv.stride,
        padding=conv.padding,
        dilation=conv.dilation,
        bias=True,
    )


class DeformConv2dPack(DeformConv2d):
    """mmcv.ops.DeformConv2dPack ("DCN"): DeformConv2d whose offsets come from
    `conv_offset`, an nn.Conv2d (2 * deform_groups * KH * KW channels, bias,
    zero-initialised: it starts as a plain convolution). forward(x)."""

    # mmcv's state-dict version. mmcv also renames pre-version-2 keys
    # ("<name>_offset.*") in _load_from_state_dict; current torch hands a child
    # only the keys under its own prefix, so that rename cannot see them and is
    # not reproduced here (rename such keys before loading).
    _version = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_offset = _conv_offset(self, values_per_point=2)
        self.init_offset()

    def init_offset(self) -> None:
        with torch.no_grad():
            self.conv_offset.weight.zero_()
            self.conv_offset.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Without DeformConv2d.forward's padding of small inputs, as mmcv's DeformConv2dPack.
        return self._deform_conv(x, self.conv_offset(x))


class ModulatedDeformConv2d(nn.Module):
    """mmcv.ops.ModulatedDeformConv2d: same constructor arguments and parameters
    (`weight`, `bias` unless bias=False). forward(x, offset, mask)."""

    @_one_deform_groups_name
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        deform_groups: int = 1,
        bias: bool = True,
        *,
        deformable_groups: int | None = None,
    ):
        super().__init__()
        deform_groups = _deprecated_deformable_groups(type(self).__name__, deform_groups, deformable_groups)
        _init_conv(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, deform_groups)
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter("bias", None)
        self.init_weights()

    def init_weights(self) -> None:
        # mmcv's formula, kept exactly: uniform(+-1/sqrt(n)) with n counting all
        # in_channels (not in_channels / groups, as a fan-in would), bias zero.
        n = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
        stdv = 1.0 / math.sqrt(n)
        with torch.no_grad():
            self.weight.uniform_(-stdv, stdv)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, x: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return modulated_deform_conv2d(
            x,
            offset,
            mask,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
            self.deform_groups,
        )

    def extra_repr(self) -> str:
        return (
            f"in_channels={self.in_channels}, out_channels={self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
            f"deform_groups={self.deform_groups}, bias={self.bias is not None}"
        )


class ModulatedDeformConv2dPack(ModulatedDeformConv2d):
    """mmcv.ops.ModulatedDeformConv2dPack ("DCNv2"): offsets and masks from
    `conv_offset` (3 * deform_groups * KH * KW channels, zero-initialised),
    split as mmcv: o1, o2, mask = chunk(out, 3, dim=1); offset = cat(o1, o2);
    mask = sigmoid(mask). forward(x)."""

    _version = 2  # as DeformConv2dPack

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_offset = _conv_offset(self, values_per_point=3)
        self.init_weights()

    def init_weights(self) -> None:
        super().init_weights()
        if hasattr(self, "conv_offset"):
            with torch.no_grad():
                self.conv_offset.weight.zero_()
                self.conv_offset.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv_offset(x)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        mask = torch.sigmoid(mask)
        return super().forward(x, offset, mask)


@example("deform_conv2d")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """DCNv2 (mask, bias, 2 groups, 2 deform groups, 2 images in one chunk) and DCNv1 (chunks of 1):
    im2col and the fused col2im, forward and backward; every case has channels per deform group a multiple of 4
    (the channels-last kernels on sm_90; float64 takes the NCHW ones). A 9x10 map; a 12x40 map (width a multiple
    of 4: the NCHW backward's paired vector atomics) with 40 channels and offsets up to 7 px; 32 channels of a 3x2
    kernel on a 3x4 map (the channel-slice path)."""
    from ..reference.deform_conv import deform_conv2d_reference
    from ._examples import synchronize

    for channels, h, w, (kh, kw), reach in ((8, 9, 10, (3, 3), 2), (40, 12, 40, (3, 3), 6), (32, 3, 4, (3, 2), 2)):
        kk = kh * kw
        pad = (kh // 2, kw // 2)
        oh, ow = h + 2 * pad[0] - kh + 1, w + 2 * pad[1] - kw + 1
        x = torch.randn(2, channels, h, w, generator=gen, dtype=torch.float64).to(dtype).double()
        weight = (torch.randn(6, channels // 2, kh, kw, generator=gen, dtype=torch.float64) * 0.2).to(dtype).double()
        bias = torch.randn(6, generator=gen, dtype=torch.float64).to(dtype).double()
        # fractional parts away from 0 so no sample sits on a pixel edge (a kink of the gradient)
        offset = torch.randint(-reach, reach + 1, (2, 4 * kk, oh, ow), generator=gen)
        offset = offset + 0.1 + 0.8 * torch.rand(2, 4 * kk, oh, ow, generator=gen)
        offset = offset.double().to(dtype).double()
        mask = torch.rand(2, 2 * kk, oh, ow, generator=gen, dtype=torch.float64).to(dtype).double()
        tol = 1e-4 if dtype in (torch.float32, torch.float64) else 5e-2
        for with_mask in (True, False):
            ref = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]
            want = deform_conv2d_reference(
                ref[0], ref[1], ref[2] if with_mask else None, ref[3], ref[4] if with_mask else None,
                (1, 1), pad, (1, 1), 2, 2,
            )  # fmt: skip
            grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
            used = [0, 1, 2, 3, 4] if with_mask else [0, 1, 3]
            want_grads = torch.autograd.grad(want, [ref[i] for i in used], grad)
            dev = [t.to(device, dtype, copy=True).requires_grad_() for t in (x, offset, mask, weight, bias)]
            if with_mask:
                out = modulated_deform_conv2d(dev[0], dev[1], dev[2], dev[3], dev[4], 1, pad, 1, 2, 2)
            else:
                out = deform_conv2d(dev[0], dev[1], dev[3], 1, pad, 1, 2, 2, False, 1)
            got_grads = torch.autograd.grad(out, [dev[i] for i in used], grad.to(device, dtype))
            synchronize(device)
            names = [("input", "offset", "mask", "weight", "bias")[i] for i in used]
            for name, g, r in [("output", out, want), *zip(names, got_grads, want_grads, strict=True)]:
                scale = max(r.abs().max().item(), 1.0)
                if (g.detach().cpu().double() - r.detach()).abs().max().item() > tol * scale:
                    return f"deform_conv2d (mask: {with_mask}, {channels} ch): wrong {name}"
    return None
