"""Integer arguments of the modules, the fake impls and the Python wrappers:
one table of accepted ranges and one checker.

The C++ host layer checks the ops' own integer arguments against the same
numbers (csrc/common/checks.h, namespace int_bounds, where the schema names
them: pooled_height, pad_w, ...) before any allocation or launch, and the fake
impls mirror that check (check_fake), so torch.compile rejects what eager
rejects: that is the backstop for direct torch.ops.visdet_ops calls. The public
functions and the module constructors check every integer argument here first,
before any work, under the name the user wrote (output_size, padding, ...),
never under the schema's: check_call_int / check_call_pair in the functions
(OpArgumentError), check_int / check_pair / check_conv in the constructors
(ArgumentError). docs/ops.md ("Integer arguments") lists every bound with its
reason, and tests/test_integer_edges.py checks each from both sides.

Values are accepted the way mmcv accepts them (it mostly calls int()):
Python and NumPy integers, bool, and integer-valued floats such as 7.0. A
float with a fractional part is a TypeError (int() would truncate it
silently); a value outside its range is a ValueError naming the argument.

The message of a value out of range: "<op>: <arg> must be <what>, got <value>",
with <op> the public function or module class the user called and <arg> its
parameter's name. <what> is "positive" (lower bound 1) or "non-negative"
(lower bound 0) for a value below the range, as the ops' own checks say, else
"in [lo, hi]". An argument that takes an int or an (h, w) pair (output_size,
stride, padding, dilation, kernel_size) is reported as the pair it stands for,
whole, as the ops' messages do: `deform_conv2d: padding must be in [0, 65536],
got (2147483648, 2147483648)` for padding=2**31,
`roi_align: output_size must be in [1, 4096], got (2147483648, 7)`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# (lo, hi), both inclusive. Keep in step with csrc/common/checks.h.
# RoI output size per side: mmdet uses 7 and 14; 4096^2 bins per RoI keeps
# [K, C, PH, PW] indexing far from int64 limits.
POOLED_SIZE = (1, 4096)
# Samples per bin side; -1 (torchvision) and 0 (mmcv) mean adaptive. 128^2
# samples per bin is far past where more samples change the mean.
SAMPLING_RATIO = (-1, 128)
# Convolution geometry: models use single or double digits; 2^16 keeps every
# output-size formula exact in int64.
STRIDE = (1, 2**16)
PADDING = (0, 2**16)
DILATION = (1, 2**16)
# Groups divide a real channel count; the bound only matters without channels.
GROUPS = (1, 2**20)
# Module constructors: channel counts and fc widths (ResNet's largest is
# 2048), kernel sizes of the convolutions they create (7x7 is the usual top;
# large-kernel nets use 31).
CHANNELS = (1, 2**16)
KERNEL_SIZE = (1, 64)
# CARAFE: masks have kernel_size^2 * group_size channels, the output is
# scale_factor times the input per side; mmdet uses 5, 1 and 2.
CARAFE_KERNEL = (1, 63)
CARAFE_GROUPS = (1, 2**16)
CARAFE_SCALE = (1, 64)
# Multi-scale deformable attention: Deformable DETR uses 8 heads, 4 levels, 4 points.
NUM_HEADS = (1, 1024)
NUM_LEVELS = (1, 64)
NUM_POINTS = (1, 1024)
# im2col_step only chunks the batch (a step above the batch size is the whole
# batch): no upper bound is needed. deform_conv2d: <= 0 picks the chunk size.
IM2COL_STEP_DCN = (INT64_MIN, INT64_MAX)
IM2COL_STEP_MSDA = (1, INT64_MAX)
# Discrete choices.
OFFSET = (0, 1)
# Any value the schema can take (an int64).
INT64 = (INT64_MIN, INT64_MAX)


class ArgumentError(ValueError, AssertionError):
    """A bad argument value, refused before any work, with a message naming the op, the argument, what was expected
    and what came. A ValueError, and also an AssertionError: mmcv.ops checks its arguments with `assert`, so code
    written against mmcv (and mmcv's own tests) that catches AssertionError keeps working (docs/migration.md)."""


class OpArgumentError(ArgumentError, RuntimeError):
    """An integer argument of a public function out of its range, refused before the function calls the op and
    named as the user wrote it (output_size, padding; the op's own check would name its schema's argument,
    pooled_height, pad_w). That check raises a RuntimeError for the same value, so this is a RuntimeError too, as
    well as the ArgumentError (ValueError, AssertionError) that the module constructors raise."""


class ShapeError(RuntimeError, AssertionError):
    """A tensor argument of the wrong shape (or dtype or device), found by a public function before it calls the op,
    where mmcv asserts the shape in Python or the function would index with it first: the op's own check (C++, for
    direct torch.ops calls) raises a RuntimeError with the same text, so this is a RuntimeError, and an
    AssertionError for code written against mmcv."""


def as_int(op: str, arg: str, value) -> int:
    """value as an int, or TypeError naming the argument."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}: {arg} must be an integer, got {value!r}")
    try:
        return operator.index(value)  # int, bool, NumPy integers, integer 0-d tensors
    except TypeError:
        pass
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{op}: {arg} must be an integer, got {value!r}") from None
    if not number.is_integer():
        raise TypeError(f"{op}: {arg} must be an integer, got {value!r}")
    return int(number)


def _expected(bounds: tuple[int, int], below: bool) -> str:
    """What an out-of-range value must be: the ops' own words for a value below a lower bound of 0 or 1."""
    lo, hi = bounds
    if below and lo in (0, 1):
        return "positive" if lo == 1 else "non-negative"
    return f"in [{lo}, {hi}]"


def check_int(op: str, arg: str, value, bounds: tuple[int, int], error: type[Exception] = ArgumentError) -> int:
    """value as an int within bounds (inclusive), else TypeError/error (an ArgumentError, a ValueError)
    naming the op and the argument."""
    v = as_int(op, arg, value)
    lo, hi = bounds
    if not lo <= v <= hi:
        raise error(f"{op}: {arg} must be {_expected(bounds, v < lo)}, got {v}")
    return v


def check_pair(
    op: str, arg: str, value, bounds: tuple[int, int], error: type[Exception] = ArgumentError
) -> tuple[int, int]:
    """An int or a pair of ints (nn.modules.utils._pair's inputs) as a pair, each within bounds, else
    TypeError/error naming the op and the argument; the message shows the whole pair."""
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        if isinstance(value, torch.Tensor) and value.dim() == 0:
            h = w = as_int(op, arg, value)
        else:
            items = tuple(value)
            if len(items) != 2:
                raise error(f"{op}: {arg} must be an int or a pair of ints, got {value!r}")
            h, w = as_int(op, arg, items[0]), as_int(op, arg, items[1])
    else:
        h = w = as_int(op, arg, value)
    lo, hi = bounds
    if not (lo <= h <= hi and lo <= w <= hi):
        raise error(f"{op}: {arg} must be {_expected(bounds, h <= hi and w <= hi)}, got ({h}, {w})")
    return h, w


def check_call_int(op: str, arg: str, value, bounds: tuple[int, int]) -> int:
    """check_int for an argument of a public function: an OpArgumentError (also a RuntimeError, as the op's own
    check raises) naming the argument as the user wrote it."""
    return check_int(op, arg, value, bounds, OpArgumentError)


def check_call_pair(op: str, arg: str, value, bounds: tuple[int, int]) -> tuple[int, int]:
    """check_pair for an argument of a public function (int or (h, w)), as check_call_int."""
    return check_pair(op, arg, value, bounds, OpArgumentError)


def check_fake(op: str, arg: str, value, bounds: tuple[int, int]) -> None:
    """The C++ check (check_int_range) inside a fake impl, where value may be
    a SymInt: the same bounds and message, so torch.compile rejects what
    eager rejects."""
    lo, hi = bounds
    torch._check(value >= lo, lambda: f"{op}: {arg} must be in [{lo}, {hi}], got {value}")
    torch._check(value <= hi, lambda: f"{op}: {arg} must be in [{lo}, {hi}], got {value}")


def check_rois_fake(op: str, input, rois, pooled_height, pooled_width, columns: int = 5) -> None:
    """The input, rois and output-size checks that the fake impls of roi_align, roi_pool and roi_align_rotated
    (columns=6: rotated RoIs) share."""
    torch._check(input.dim() == 4, lambda: f"{op}: input must have 4 dimensions, got {list(input.shape)}")
    torch._check(
        rois.dim() == 2 and rois.size(1) == columns,
        lambda: f"{op}: rois must have shape [K, {columns}], got {list(rois.shape)}",
    )
    check_fake(op, "pooled_height", pooled_height, POOLED_SIZE)
    check_fake(op, "pooled_width", pooled_width, POOLED_SIZE)


def check_conv(
    name: str, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, *, str_padding: bool = False
):
    """The nn.Conv2d-like constructor arguments of a convolution module (DeformConv2d, ModulatedDeformConv2d,
    MaskedConv2d), each checked in this order: (in_channels, out_channels, (kh, kw), stride pair, padding pair,
    dilation pair, groups). str_padding: a str padding (nn.Conv2d's 'same' / 'valid') is passed through as is."""
    in_channels = check_int(name, "in_channels", in_channels, CHANNELS)
    out_channels = check_int(name, "out_channels", out_channels, CHANNELS)
    kernel_size = check_pair(name, "kernel_size", kernel_size, KERNEL_SIZE)
    stride = check_pair(name, "stride", stride, STRIDE)
    if not (str_padding and isinstance(padding, str)):
        padding = check_pair(name, "padding", padding, PADDING)
    dilation = check_pair(name, "dilation", dilation, DILATION)
    groups = check_int(name, "groups", groups, GROUPS)
    return in_channels, out_channels, kernel_size, stride, padding, dilation, groups
