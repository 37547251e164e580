from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import visdet_ops
from visdet_ops import (
    DeformConv2d,
    DeformConv2dPack,
    ModulatedDeformConv2d,
    ModulatedDeformConv2dPack,
    deform_conv2d,
    modulated_deform_conv2d,
)
from visdet_ops._build_rules import parse_release
from visdet_ops.ops import _args
from visdet_ops.reference.deform_conv import deform_conv2d_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from .. import onnx_harness as ox
from ..conftest import assert_uniform_init, assert_zero, require_cuda, torchvision_or_skip

# ---------------------------------------------------------------- inputs


def make_case(
    rng,
    n=2,
    c=4,
    h=7,
    w=8,
    cout=6,
    k=(3, 3),
    stride=(1, 1),
    pad=(1, 1),
    dil=(1, 1),
    groups=1,
    dg=1,
    with_mask=True,
    with_bias=True,
    offset_range=3,
    storage_dtype=torch.float64,
):
    """Random float64 inputs. Offsets are an integer in [-offset_range, offset_range]
    plus a fraction in [0.1, 0.9]: sample positions (integer grid + offset) are never
    within 0.1 px of an integer, where the op is not smooth (pixel edges, the -1/H/W
    validity edges), so float32, gradcheck's finite differences and the reference agree
    without masking anything, while many samples still land outside the map."""
    oh, ow = core.conv_out(h, pad[0], dil[0], k[0], stride[0]), core.conv_out(w, pad[1], dil[1], k[1], stride[1])
    kk = k[0] * k[1]

    def rnd(*shape):
        return torch.randn(*shape, generator=rng, dtype=torch.float64).to(storage_dtype).double()

    x = rnd(n, c, h, w)
    weight = rnd(cout, c // groups, *k)
    integer = torch.randint(-offset_range, offset_range + 1, (n, 2 * dg * kk, oh, ow), generator=rng)
    frac = 0.1 + 0.8 * torch.rand(n, 2 * dg * kk, oh, ow, generator=rng, dtype=torch.float64)
    offset = (integer + frac).to(storage_dtype).double()
    mask = torch.rand(n, dg * kk, oh, ow, generator=rng, dtype=torch.float64).to(storage_dtype).double()
    bias = rnd(cout)
    return dict(
        x=x,
        offset=offset,
        mask=mask if with_mask else None,
        weight=weight,
        bias=bias if with_bias else None,
        stride=stride,
        pad=pad,
        dil=dil,
        groups=groups,
        dg=dg,
    )


NAMES = ("x", "offset", "mask", "weight", "bias")


def leaves(case, device="cpu", dtype=torch.float64, requires_grad=True):
    """The case's tensors (None where absent) on device in dtype, as fresh leaves."""
    return {
        k: None if case[k] is None else case[k].to(device, dtype).detach().clone().requires_grad_(requires_grad)
        for k in NAMES
    }


def op_args(case, t, step=0):
    """The registered op's arguments: the tensors t, then the case's integers."""
    (sh, sw), (ph, pw), (dh, dw) = case["stride"], case["pad"], case["dil"]
    return (*(t[k] for k in NAMES), sh, sw, ph, pw, dh, dw, case["groups"], case["dg"], step)


def forward(case, t, im2col_step=None):
    """DCNv1 (deform_conv2d) without mask and bias, else modulated_deform_conv2d, or the registered op where an
    im2col_step is given."""
    args = (case["stride"], case["pad"], case["dil"], case["groups"], case["dg"])
    if t["mask"] is None and t["bias"] is None:
        step = 32 if im2col_step is None else im2col_step
        return deform_conv2d(t["x"], t["offset"], t["weight"], *args, False, step)
    if im2col_step is None:
        return modulated_deform_conv2d(t["x"], t["offset"], t["mask"], t["weight"], t["bias"], *args)
    return torch.ops.visdet_ops.deform_conv2d(*op_args(case, t, im2col_step))


def reference(case, grad_out=None):
    """Output and (when grad_out is given) grads of x, offset, mask, weight, bias."""
    t = leaves(case)
    out = deform_conv2d_reference(*t.values(), case["stride"], case["pad"], case["dil"], case["groups"], case["dg"])
    if grad_out is None:
        return out.detach(), None
    names = [k for k, v in t.items() if v is not None]
    grads = torch.autograd.grad(out, [t[k] for k in names], grad_out)
    return out.detach(), dict(zip(names, grads, strict=True))


# float32: a sample position rounds to ~1e-6 px; on randn data values move by ~1e-5
# and sums over C * KK terms by ~1e-4. A logic error moves them by O(1).
TOL = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}
GRAD_TOL = {torch.float32: dict(rtol=1e-3, atol=1e-3), torch.float64: dict(rtol=1e-10, atol=1e-10)}


# 16-bit storage, float computation: compared with the float64 reference on the same (rounded) inputs, loosely
# (16-bit columns and GEMM inputs), relative to the largest value.
HALF_TOL = {torch.float16: 2e-2, torch.bfloat16: 8e-2}


def assert_near(got, want, dtype, tol, msg=None):
    got = got.detach().cpu().double()
    if dtype in HALF_TOL:
        assert (got - want).abs().max() < HALF_TOL[dtype] * want.abs().max().item(), msg
    else:
        torch.testing.assert_close(got, want, **tol[dtype], msg=msg)


def check_against_reference(case, device, dtype, rng, im2col_step=None):
    # rounded to dtype: the reference sees the output gradient ours is given
    grad_out = torch.randn(reference(case)[0].shape, generator=rng, dtype=torch.float64).to(dtype).double()
    want, want_grads = reference(case, grad_out)
    t = leaves(case, device, dtype)
    got = forward(case, t, im2col_step)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == want.shape
    assert_near(got, want, dtype, TOL)
    names = list(want_grads)
    got_grads = torch.autograd.grad(got, [t[k] for k in names], grad_out.to(device, dtype))
    for name, g in zip(names, got_grads, strict=True):
        assert g.dtype == dtype and g.shape == want_grads[name].shape, name
        assert_near(g, want_grads[name], dtype, GRAD_TOL, name)
    # The offset gradient must not be vacuous.
    assert want_grads["offset"].abs().max() > 1e-2
    assert torch.isfinite(want).all()


# ---------------------------------------------------------------- correctness

# Larger maps, 40 channels (several CUDA channel slices), offsets of up to 10 px,
# stride, dilation, deform groups: the CUDA backward's paired (vector) grad_input
# atomics see every alignment of the sample's left column and the map's edges.
LARGER = dict(n=2, c=40, h=20, w=72, cout=8, offset_range=2)
CONFIGS = {
    "3x3": dict(),
    "v1": dict(with_mask=False, with_bias=False),
    "stride2": dict(stride=(2, 2), h=9, w=10),
    "dilation2_pad2": dict(dil=(2, 2), pad=(2, 2)),
    "rect_kernel": dict(k=(3, 2), pad=(1, 0), stride=(1, 2), w=9),
    "groups2": dict(groups=2),
    "deform_groups2": dict(dg=2),
    "groups2_dg4": dict(groups=2, dg=4, c=8),
    "1x1_no_pad": dict(k=(1, 1), pad=(0, 0)),
    "mask_no_bias": dict(with_bias=False),
    "v1_groups_dg": dict(with_mask=False, with_bias=False, groups=2, dg=2),
    # Offsets of up to 12 px on a 7x8 map: most samples leave the map (value 0), on
    # every side; outputs and all gradients still match.
    "large_offsets_outside_the_map": dict(offset_range=12),
    "larger_small_offsets": LARGER,
    "larger_large_offsets": {**LARGER, "offset_range": 9},
    "larger_stride2": {**LARGER, "stride": (2, 2), "h": 37, "w": 76},
    "larger_dilation_dg2": {**LARGER, "dil": (2, 3), "pad": (2, 3), "dg": 2},
    "larger_v1": {**LARGER, "with_mask": False, "with_bias": False},
    "larger_width_not_multiple_of_4": {**LARGER, "w": 70},
}


@pytest.mark.parametrize("config", list(CONFIGS), ids=list(CONFIGS))
def test_matches_reference(device, dtype, rng, config):
    check_against_reference(make_case(rng, **CONFIGS[config]), device, dtype, rng)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 32, 0])
def test_im2col_step_does_not_change_the_result(device, rng, step):
    """Chunks of 1, 2, 3 (does not divide 5), 5, 32 (> N) and automatic."""
    for with_mask in (True, False):
        case = make_case(rng, n=5, with_mask=with_mask, with_bias=with_mask)
        check_against_reference(case, device, torch.float64, rng, im2col_step=step)


def test_zero_offsets_equal_conv2d(device, dtype, rng):
    """With zero offsets (and a mask of ones) DCN is an ordinary convolution."""
    case = make_case(rng, stride=(2, 1), dil=(1, 2), pad=(1, 2), groups=2, h=9, w=9)
    t = leaves(case, device, dtype, requires_grad=False)
    t["offset"].zero_()
    t["mask"].fill_(1)
    want = F.conv2d(t["x"], t["weight"], t["bias"], (2, 1), (1, 2), (1, 2), 2)
    torch.testing.assert_close(forward(case, t), want, **TOL[dtype])
    v1 = forward(case, {**t, "mask": None, "bias": None})
    torch.testing.assert_close(v1, want - t["bias"].view(1, -1, 1, 1), **TOL[dtype])


def test_integer_offsets_shift_the_input(rng):
    """An offset of (+1, -2) at every kernel point of a 1x1 conv reads input[y + 1, x - 2]."""
    x = torch.randn(1, 3, 6, 7, generator=rng, dtype=torch.float64)
    weight = torch.eye(3, dtype=torch.float64).view(3, 3, 1, 1)
    offset = torch.empty(1, 2, 6, 7, dtype=torch.float64)
    offset[:, 0], offset[:, 1] = 1.0, -2.0
    got = deform_conv2d(x, offset, weight)
    want = torch.zeros_like(x)
    want[:, :, :5, 2:] = x[:, :, 1:, :5]
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("with_mask", [True, False])
def test_gradcheck(device, rng, with_mask):
    case = make_case(rng, n=2, c=4, h=5, w=4, cout=2, groups=2, dg=2, with_mask=with_mask, with_bias=with_mask)
    names = [k for k in NAMES if case[k] is not None]
    inputs = tuple(case[k].to(device).requires_grad_() for k in names)

    def fn(*tensors):
        t = dict.fromkeys(NAMES) | dict(zip(names, tensors, strict=True))
        return forward(case, t, None if with_mask else 1)

    # On CUDA, grad_input is accumulated with atomicAdd, so two backward passes
    # sum in different orders and differ in the last bits of float64 (~1e-16
    # relative): gradcheck's reentrancy check needs a tolerance for that.
    # 1e-12 is far below any real error yet above float64 reordering noise.
    nondet_tol = 1e-12 if device.type == "cuda" else 0.0
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-6, nondet_tol=nondet_tol)


@pytest.mark.parametrize("with_mask", [True, False])
def test_opcheck(device, rng, with_mask):
    case = make_case(rng, n=3, c=4, h=5, w=6, cout=4, dg=2, with_mask=with_mask, with_bias=with_mask)
    torch.library.opcheck(torch.ops.visdet_ops.deform_conv2d.default, op_args(case, leaves(case, device), step=2))


def test_opcheck_backward_op(device, rng):
    for with_mask in (True, False):
        case = make_case(rng, n=2, c=4, h=5, w=6, cout=4, with_mask=with_mask, with_bias=with_mask)
        args = op_args(case, leaves(case, device, requires_grad=False))
        grad = torch.randn(2, 4, 5, 6, generator=rng, dtype=torch.float64).to(device)
        torch.library.opcheck(torch.ops.visdet_ops._deform_conv2d_backward.default, (grad, *args))


def test_fake_and_meta():
    with FakeTensorMode():
        x = torch.empty(2, 8, 20, 30)
        w = torch.empty(16, 4, 3, 3)
        off = torch.empty(2, 36, 10, 15)
        mask = torch.empty(2, 18, 10, 15)
        out = modulated_deform_conv2d(x, off, mask, w, torch.empty(16), 2, 1, 1, 2, 2)
        assert out.shape == (2, 16, 10, 15)
        grads = torch.ops.visdet_ops._deform_conv2d_backward(out, x, off, mask, w, None, 2, 2, 1, 1, 1, 1, 2, 2, 0)
        assert [tuple(g.shape) for g in grads] == [
            (2, 8, 20, 30),
            (2, 36, 10, 15),
            (2, 18, 10, 15),
            (16, 4, 3, 3),
            (0,),
        ]
    meta = deform_conv2d(
        torch.empty(2, 8, 20, 30, device="meta"), torch.empty(2, 18, 20, 30, device="meta"),
        torch.empty(16, 8, 3, 3, device="meta"), 1, 1,
    )  # fmt: skip
    assert meta.shape == (2, 16, 20, 30) and meta.device.type == "meta"


def test_empty_batch(device, dtype):
    x = torch.randn(0, 4, 5, 5, device=device, dtype=dtype, requires_grad=True)
    off = torch.randn(0, 18, 5, 5, device=device, dtype=dtype, requires_grad=True)
    mask = torch.rand(0, 9, 5, 5, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(3, 4, 3, 3, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(3, device=device, dtype=dtype, requires_grad=True)
    out = modulated_deform_conv2d(x, off, mask, w, b, 1, 1)
    assert out.shape == (0, 3, 5, 5)
    out.sum().backward()
    assert x.grad.shape == x.shape and off.grad.shape == off.shape and mask.grad.shape == mask.shape
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


def test_zero_input_channels_give_the_bias(device):
    x = torch.randn(2, 0, 5, 5, device=device, dtype=torch.float64)
    w = torch.randn(3, 0, 3, 3, device=device, dtype=torch.float64)
    b = torch.randn(3, device=device, dtype=torch.float64)
    off = torch.randn(2, 18, 5, 5, device=device, dtype=torch.float64, requires_grad=True)
    out = modulated_deform_conv2d(x, off, torch.rand(2, 9, 5, 5, device=device, dtype=torch.float64), w, b, 1, 1)
    torch.testing.assert_close(out, b.view(1, 3, 1, 1).expand(2, 3, 5, 5))
    out.sum().backward()
    assert torch.equal(off.grad, torch.zeros_like(off))


def test_non_contiguous(device, dtype, rng):
    case = make_case(rng, n=2, c=4, h=7, w=8, cout=6, dg=2)
    grad_out = torch.randn(2, 6, 7, 8, generator=rng, dtype=torch.float64)
    want, want_grads = reference(case, grad_out)

    def nc(t):  # same values, transposed strides
        return t.to(device, dtype).transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_()

    x = case["x"].to(device, dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
    off, mask = nc(case["offset"]), nc(case["mask"])
    w = case["weight"].to(device, dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
    b = torch.stack([case["bias"], case["bias"]], 1).to(device, dtype)[:, 0].requires_grad_()
    g = nc(grad_out).detach()
    for t in (x, off, mask, w, b, g):
        assert not t.is_contiguous()
    got = modulated_deform_conv2d(x, off, mask, w, b, 1, 1, 1, 1, 2)
    assert_near(got, want, dtype, TOL)
    grads = torch.autograd.grad(got, (x, off, mask, w, b), g)
    for name, gr in zip(NAMES, grads, strict=True):
        assert_near(gr, want_grads[name], dtype, GRAD_TOL, name)


def test_nan_and_inf_offsets_give_zero_samples(device):
    """A NaN or infinite offset puts its sample outside the map: value 0, no crash."""
    x = torch.randn(1, 2, 5, 5, device=device, dtype=torch.float64)
    w = torch.randn(2, 2, 1, 1, device=device, dtype=torch.float64)
    off = torch.zeros(1, 2, 5, 5, device=device, dtype=torch.float64)
    off[0, 0, 1, 1], off[0, 1, 2, 2], off[0, 0, 3, 3] = float("nan"), float("inf"), -1e30
    out = deform_conv2d(x, off, w)
    want = torch.nn.functional.conv2d(x, w)
    for yx in ((1, 1), (2, 2), (3, 3)):
        assert torch.equal(out[0, :, yx[0], yx[1]], torch.zeros(2, device=device, dtype=torch.float64))
        want[0, :, yx[0], yx[1]] = 0
    torch.testing.assert_close(out, want)


# ---------------------------------------------------------------- bad inputs


def _good():
    return dict(
        input=torch.randn(2, 4, 6, 6),
        offset=torch.randn(2, 18, 6, 6),
        mask=torch.rand(2, 9, 6, 6),
        weight=torch.randn(3, 4, 3, 3),
        bias=torch.randn(3),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(input=torch.randn(4, 6, 6)), "input must have 4 dimensions"),
        (dict(input=torch.randint(0, 3, (2, 4, 6, 6))), "input must be a floating point tensor"),
        (dict(weight=torch.randn(3, 3, 3, 3)), "input has 4 channels but weight"),
        (dict(offset=torch.randn(2, 16, 6, 6)), "offset must have shape"),
        # an H x W other than the output's is read as mmcv reads it, where the offset's memory holds that much
        (dict(offset=torch.randn(2, 18, 5, 6)), r"offset has H x W 5 x 6, the output 6 x 6"),
        (dict(offset=torch.randn(2, 18, 6, 6, dtype=torch.float64)), "input and offset must have the same dtype"),
        (dict(mask=torch.rand(2, 18, 6, 6)), "mask must have shape"),
        (dict(mask=torch.rand(2, 9, 6, 6, dtype=torch.float64)), "input and mask must have the same dtype"),
        (dict(bias=torch.randn(4)), "bias must have shape"),
        (dict(bias=torch.randn(3, 1)), "bias must have 1 dimensions"),
        (dict(weight=torch.randn(3, 4, 0, 3)), "weight must have a non-empty kernel"),
        # the integer arguments
        (dict(stride=0), "deform_conv2d: stride must be positive"),
        (dict(padding=-1), "deform_conv2d: padding must be non-negative"),
        (dict(dilation=0), "deform_conv2d: dilation must be positive"),
        (dict(groups=0), "deform_conv2d: groups must be positive"),
        (dict(groups=2, weight=torch.randn(3, 2, 3, 3)), r"weight.size\(0\) \(3\) must be divisible by groups \(2\)"),
        (
            dict(dg=3, offset=torch.randn(2, 54, 6, 6), mask=torch.rand(2, 27, 6, 6)),
            r"input channels \(4\) must be divisible by deform_groups \(3\)",
        ),
        (
            dict(padding=0, input=torch.randn(2, 4, 2, 6), offset=torch.randn(2, 18, 1, 4)),
            "is too small for a 3x3 kernel",
        ),
    ],
)
def test_bad_inputs_name_the_argument(change, message):
    a = {**_good(), "stride": 1, "padding": 1, "dilation": 1, "groups": 1, "dg": 1, **change}
    args = ("input", "offset", "mask", "weight", "bias", "stride", "padding", "dilation", "groups", "dg")
    with pytest.raises(RuntimeError, match=message):
        modulated_deform_conv2d(*(a[k] for k in args))


def test_deform_conv2d_bias_must_be_false():
    a = _good()
    with pytest.raises(ValueError, match="deform_conv2d: bias must be False"):
        deform_conv2d(a["input"], a["offset"], a["weight"], 1, 1, bias=True)


def test_input_too_small_for_the_dilated_kernel_is_refused(device, rng):
    """Regression (fuzzing): the C++ output size (H + 2 * pad - (dilation * (k - 1) + 1)) / stride + 1 truncated a
    negative numerator towards 0, so with stride > 1 an input too small for the dilated kernel gave a made-up
    1-wide output instead of an error. It is refused before the division (the op, its fake impl, DeformConv2d's
    forward); a numerator of exactly 0 (the dilated kernel fits once) still gives a 1x1 output."""
    dev = {"device": device, "dtype": torch.float64}
    too_small = r"deform_conv2d: the input \(4 x 6, shape \[2, 4, 4, 6\]\) is too small"
    with pytest.raises(
        RuntimeError,
        match=r"deform_conv2d: the input \(1 x 1, shape \[1, 1, 1, 1\]\) is too small for a 1x2 kernel with padding "
        r"\(0, 0\) and dilation \(1, 1\): the padded input \(1 x 1\) is smaller than the dilated kernel \(1 x 2\)",
    ):
        deform_conv2d(
            torch.randn(1, 1, 1, 1, **dev), torch.zeros(1, 4, 1, 1, **dev), torch.randn(1, 1, 1, 2, **dev), (1, 2)
        )
    # 4 + 2 * 0 - (2 * (3 - 1) + 1) = -1: -1 // 2 + 1 = 0 rows (C++: -1 / 2 + 1 = 1)
    x, w = torch.randn(2, 4, 4, 6, **dev), torch.randn(3, 4, 3, 3, **dev)
    off, mask = torch.zeros(2, 18, 1, 1, **dev), torch.rand(2, 9, 1, 1, **dev)
    for stride in (2, 3, (2, 1)):
        with pytest.raises(RuntimeError, match=too_small):
            modulated_deform_conv2d(x, off, mask, w, None, stride, 0, 2)
    with pytest.raises(RuntimeError, match=too_small):
        torch.ops.visdet_ops.deform_conv2d(x, off, mask, w, None, 2, 2, 0, 0, 2, 2, 1, 1, 0)
    with pytest.raises(RuntimeError, match=too_small):
        modulated_deform_conv2d(x.to("meta"), off.to("meta"), mask.to("meta"), w.to("meta"), None, 2, 0, 2)
    # padding makes it fit: (4 + 2 - 5) // 2 + 1 = 1 row, (6 + 2 - 5) // 2 + 1 = 2 columns, as the reference
    off = (torch.randn(2, 18, 1, 2, generator=rng, dtype=torch.float64) * 0.5).to(device)
    mask = torch.rand(2, 9, 1, 2, generator=rng, dtype=torch.float64).to(device)
    got = modulated_deform_conv2d(x, off, mask, w, None, 2, 1, 2)
    want = deform_conv2d_reference(x, off, mask, w, None, (2, 2), (1, 1), (2, 2), 1, 1)
    assert got.shape == (2, 3, 1, 2)
    torch.testing.assert_close(got, want)
    # DeformConv2d pads an input smaller than the kernel up to the kernel (mmcv) and names the input as given
    m = DeformConv2d(4, 3, 3, stride=2, dilation=2).double().to(device)
    with pytest.raises(
        _args.ShapeError,
        match=r"DeformConv2d: the input \(2 x 6, zero-padded to 3 x 6 as mmcv does\) is too small for a 3x3 kernel",
    ):
        m(x[:, :, :2], torch.zeros(2, 18, 1, 1, **dev))
    with pytest.raises(_args.ShapeError, match=r"DeformConv2d: the input \(4 x 6\) is too small for a 3x3 kernel"):
        m(x, torch.zeros(2, 18, 1, 1, **dev))


def test_fake_refuses_an_input_too_small_for_the_dilated_kernel():
    with FakeTensorMode(), pytest.raises(RuntimeError, match=r"deform_conv2d: the input \(4 x 6, .*\) is too small"):
        deform_conv2d(torch.empty(2, 4, 4, 6), torch.empty(2, 18, 1, 2), torch.empty(3, 4, 3, 3), 2, 0, 2)


def test_mixed_devices_rejected():
    require_cuda()
    a = _good()
    with pytest.raises(RuntimeError, match="input and offset must be on the same device"):
        modulated_deform_conv2d(a["input"].cuda(), a["offset"], a["mask"].cuda(), a["weight"].cuda(), None, 1, 1)


def test_double_backward_fails_loudly(rng):
    case = make_case(rng, n=1, c=2, h=4, w=4, cout=2)
    x = case["x"].requires_grad_()
    out = modulated_deform_conv2d(x, case["offset"], case["mask"], case["weight"], case["bias"], 1, 1)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# ---------------------------------------------------------------- modules

# Parameter names and shapes of mmcv's modules, from mmcv/ops/deform_conv.py and
# mmcv/ops/modulated_deform_conv.py (open-mmlab/mmcv, DeformConv2d: `weight`
# [out, in // groups, kh, kw], no bias; DeformConv2dPack adds `conv_offset`,
# nn.Conv2d(in, deform_groups * 2 * kh * kw, bias=True); ModulatedDeformConv2d:
# `weight`, `bias` [out]; ModulatedDeformConv2dPack: `conv_offset` with
# deform_groups * 3 * kh * kw channels). mmdet's ResNet DCN checkpoints hold e.g.
# "layer2.0.conv2.weight", "layer2.0.conv2.conv_offset.weight/bias".
MMCV_KEYS = {
    "DeformConv2d": {"weight": (64, 32, 3, 3)},
    "DeformConv2dPack": {
        "weight": (64, 32, 3, 3),
        "conv_offset.weight": (2 * 2 * 9, 64, 3, 3),
        "conv_offset.bias": (2 * 2 * 9,),
    },
    "ModulatedDeformConv2d": {"weight": (64, 32, 3, 3), "bias": (64,)},
    "ModulatedDeformConv2dPack": {
        "weight": (64, 32, 3, 3),
        "bias": (64,),
        "conv_offset.weight": (3 * 2 * 9, 64, 3, 3),
        "conv_offset.bias": (3 * 2 * 9,),
    },
}


@pytest.mark.parametrize("name", list(MMCV_KEYS))
def test_state_dict_keys_match_mmcv(name):
    cls = getattr(visdet_ops, name)
    m = cls(64, 64, 3, stride=1, padding=1, groups=2, deform_groups=2)
    got = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert got == MMCV_KEYS[name]
    # A checkpoint written by mmcv (same keys and shapes) loads strictly.
    ckpt = {k: torch.randn(s) for k, s in MMCV_KEYS[name].items()}
    fresh = cls(64, 64, 3, stride=1, padding=1, groups=2, deform_groups=2)
    fresh.load_state_dict(ckpt, strict=True)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, ckpt[k])


def test_module_defaults_and_init():
    m = DeformConv2d(8, 16, 3)
    assert m.weight.shape == (16, 8, 3, 3) and not hasattr(m, "bias") or getattr(m, "bias", None) is None
    assert m.im2col_step == 32 and m.stride == (1, 1) and m.deform_groups == 1
    mm = ModulatedDeformConv2d(8, 16, 3)
    assert mm.bias is not None and torch.equal(mm.bias, torch.zeros(16))
    assert ModulatedDeformConv2d(8, 16, 3, bias=False).bias is None
    with pytest.raises(ValueError, match="bias"):
        DeformConv2d(8, 16, 3, bias=True)
    with pytest.raises(ValueError, match="not divisible by groups"):
        DeformConv2d(8, 16, 3, groups=3)


@pytest.mark.parametrize("cls", [DeformConv2d, DeformConv2dPack, ModulatedDeformConv2d, ModulatedDeformConv2dPack])
def test_deform_groups_and_its_deprecated_name_together_are_refused(cls):
    """Regression (fuzzing): given both deform_groups and mmcv's deprecated deformable_groups, the modules used
    deformable_groups and dropped deform_groups silently, even an invalid one. Both (by keyword or position, equal
    or not) is a TypeError naming both, as renamed_kwargs (nms' iou_thr, RoIAlign's out_size) and mmcv's
    deprecated_api_warning refuse an old and a new name together."""
    both = (
        rf"{cls.__name__}: got both 'deformable_groups' \(deprecated\) and 'deform_groups'; give 'deform_groups' only"
    )
    for deform_groups in (-1, 1, 2):
        with pytest.raises(TypeError, match=both):
            cls(4, 4, 3, deform_groups=deform_groups, deformable_groups=1)
    with pytest.raises(TypeError, match=both):
        cls(4, 4, 3, 1, 1, 1, 1, 2, deformable_groups=2)  # deform_groups by position
    with pytest.warns(DeprecationWarning, match="deformable_groups"):
        assert cls(4, 4, 3, 1, 1, 1, 1, deformable_groups=2).deform_groups == 2
    assert cls(4, 4, 3, 1, 1, 1, 1, 2, deformable_groups=None).deform_groups == 2


# mmcv 2.2.0, mmcv/ops/deform_conv.py, DeformConv2d.reset_parameters (since
# v1.3.15): nn.init.kaiming_uniform_(self.weight, nonlinearity='relu'), i.e.
# bound = gain * sqrt(3 / fan_in) = sqrt(6 / fan_in), fan_in = weight.size(1) * KH * KW
# = in_channels / groups * KH * KW. DeformConv2dPack inherits it and zeroes
# conv_offset (init_offset).
# mmcv 2.2.0, mmcv/ops/modulated_deform_conv.py, ModulatedDeformConv2d.init_weights:
# n = in_channels * KH * KW (all input channels, whatever groups is),
# weight.uniform_(-1/sqrt(n), 1/sqrt(n)), bias zero; ModulatedDeformConv2dPack
# zeroes conv_offset's weight and bias as well.
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("kernel_size", [3, (3, 5)])
def test_module_init_matches_mmcv_formula(groups, kernel_size):
    cin, cout = 32, 64
    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    kaiming = (6 / (cin // groups * kh * kw)) ** 0.5
    mmcv_v2 = 1 / (cin * kh * kw) ** 0.5
    for cls, bound, reinit in (
        (DeformConv2d, kaiming, "reset_parameters"),
        (DeformConv2dPack, kaiming, "reset_parameters"),
        (ModulatedDeformConv2d, mmcv_v2, "init_weights"),
        (ModulatedDeformConv2dPack, mmcv_v2, "init_weights"),
    ):
        m = cls(cin, cout, kernel_size, groups=groups, padding=1)
        assert_uniform_init(m.weight, bound, f"{cls.__name__}.weight")
        if cls.__name__.startswith("Modulated"):
            assert_zero(m.bias, f"{cls.__name__}.bias")
        if cls.__name__.endswith("Pack"):
            assert_zero(m.conv_offset.weight, "conv_offset.weight")
            assert_zero(m.conv_offset.bias, "conv_offset.bias")
        m.weight.data.fill_(1.0)
        getattr(m, reinit)()  # re-draws with the same formula (mmcv's hook names)
        assert_uniform_init(m.weight, bound, f"{cls.__name__}.weight after {reinit}")


def _pack_offset_mask(m, x):
    """The offset and mask a Pack module computes from x, split as mmcv splits them (DCNv2: o1, o2, mask)."""
    out = m.conv_offset(x)
    if not isinstance(m, ModulatedDeformConv2dPack):
        return out, None
    o1, o2, mask = torch.chunk(out, 3, dim=1)
    return torch.cat((o1, o2), 1), torch.sigmoid(mask)


def _pack_as_conv(m, x):
    """What a Pack module computes with its zero-initialised conv_offset: zero offsets, a convolution (and, DCNv2,
    masks sigmoid(0) = 0.5)."""
    want = F.conv2d(x, m.weight, None, m.stride, m.padding, m.dilation, m.groups)
    if isinstance(m, ModulatedDeformConv2dPack):
        want = 0.5 * want + m.bias.view(1, -1, 1, 1)
    return want


def test_packs_start_as_a_convolution(device, rng):
    """Zero-initialised conv_offset: DCN is conv2d; DCNv2's mask is sigmoid(0) = 0.5."""
    x = torch.randn(2, 8, 9, 10, generator=rng, dtype=torch.float64).to(device)
    dcn = DeformConv2dPack(8, 6, 3, stride=2, padding=1).double().to(device)
    dcn2 = ModulatedDeformConv2dPack(8, 6, 3, padding=1, deform_groups=2).double().to(device)
    with torch.no_grad():
        dcn2.bias.normal_()
    for m in (dcn, dcn2):
        torch.testing.assert_close(m(x), _pack_as_conv(m, x))


def test_pack_forward_matches_reference(device, rng):
    """A trained-looking conv_offset: offsets and masks split as mmcv (o1, o2, mask)."""
    m = ModulatedDeformConv2dPack(4, 6, 3, padding=1, deform_groups=2).double()
    with torch.no_grad():
        m.conv_offset.weight.normal_(0, 0.3, generator=rng)
        m.conv_offset.bias.normal_(0, 0.5, generator=rng)
        m.bias.normal_(generator=rng)
    x = torch.randn(2, 4, 6, 7, generator=rng, dtype=torch.float64)
    offset, mask = _pack_offset_mask(m, x)
    want = deform_conv2d_reference(x, offset, mask, m.weight, m.bias, (1, 1), (1, 1), (1, 1), 1, 2).detach()
    torch.testing.assert_close(m.to(device)(x.to(device)).detach().cpu(), want)


def test_small_input_is_padded_like_mmcv(device, rng):
    """mmcv's DeformConv2d zero-pads an input smaller than the kernel (and the offset)
    at the bottom/right and crops the output back: a 2x5 map through a 3x3 kernel
    with padding 1 gives the 2x5 output of an ordinary padded convolution."""
    m = DeformConv2d(2, 3, 3, padding=1).double().to(device)
    x = torch.randn(1, 2, 2, 5, generator=rng, dtype=torch.float64).to(device)
    off = torch.zeros(1, 18, 2, 5, dtype=torch.float64, device=device)
    out = m(x, off)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, m.weight, None, 1, 1))


# ---------------------------------------------------------------- CUDA only


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_16_bit(device, rng, half):
    """16-bit storage, float computation (HALF_TOL)."""
    check_against_reference(make_case(rng, n=3, c=8, cout=8, dg=2, groups=2, storage_dtype=half), device, half, rng)


@pytest.mark.parametrize(
    ("config", "precision"),
    [
        (dict(n=2, c=8, cout=4), torch.float32),
        (dict(n=2, c=12, cout=6, dg=3, offset_range=12), torch.float32),
        (dict(n=1, c=256, h=4, w=5, cout=4, dg=2), torch.float32),
        (dict(n=2, c=6, cout=4, dg=2), torch.float32),
        (dict(n=1, c=256, h=4, w=5, cout=4, dg=2), torch.float64),
    ],
    ids=["c8", "c12_dg3_far", "c256_dg2_slices", "c6_dg2_portable", "c256_dg2_slices_f64"],
)
def test_cuda_backward(rng, config, precision):
    """float32 on CUDA: with channels per deform group divisible by 4 the backward
    accumulates grad_input channels-last with 4-channel vector atomics (sm_90+);
    otherwise (c6_dg2) the portable path. Both match the float64 reference.
    Few samples and many channels (c256): the CUDA backward splits each deform group
    into channel slices and sums them; gradients still match the reference, in float64 too."""
    require_cuda()
    check_against_reference(make_case(rng, **config), torch.device("cuda"), precision, rng)


def test_matches_torchvision(device, rng):
    tv = torchvision_or_skip()
    for with_mask in (True, False):
        case = make_case(rng, n=3, c=8, cout=6, groups=2, dg=4, stride=(2, 1), pad=(1, 2), dil=(1, 2), h=9, w=9)
        x, off, w, b = (case[k].to(device) for k in ("x", "offset", "weight", "bias"))
        mask = case["mask"].to(device) if with_mask else None
        want = tv.deform_conv2d(x, off, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), mask=mask)
        if with_mask:
            got = modulated_deform_conv2d(x, off, mask, w, b, (2, 1), (1, 2), (1, 2), 2, 4)
        else:
            got = deform_conv2d(x, off, w, (2, 1), (1, 2), (1, 2), 2, 4) + b.view(1, -1, 1, 1)
        torch.testing.assert_close(got, want)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _edge_case(gen, geom_ints, modulated=False):
    """make_case for stride/pad/dilation (h, w), groups, deform_groups given as
    the values under test (out-of-range ones replaced by stand-ins)."""
    lows = (1, 1, 0, 0, 1, 1, 1, 1)  # padding may be 0
    sh, sw, ph, pw, dh, dw, g, dg = (edges.small(v, lo, 4, 1) for v, lo in zip(geom_ints, lows, strict=True))
    return make_case(
        gen,
        n=3,
        cout=4,
        stride=(sh, sw),
        pad=(ph, pw),
        dil=(dh, dw),
        groups=g if 4 % g == 0 else 1,  # the 4 channels must divide
        dg=dg if 4 % dg == 0 else 1,
        with_mask=modulated,
        with_bias=modulated,
    )


def _deform_conv(device, gen, modulated=False, stride=1, padding=1, dilation=1, groups=1, deform_groups=1, step=2):
    case = _edge_case(gen, (stride, stride, padding, padding, dilation, dilation, groups, deform_groups), modulated)
    x, offset, mask, weight, bias = leaves(case, device, requires_grad=False).values()
    if modulated:
        got = modulated_deform_conv2d(x, offset, mask, weight, bias, stride, padding, dilation, groups, deform_groups)
    else:
        got = deform_conv2d(x, offset, weight, stride, padding, dilation, groups, deform_groups, False, step)
    edges.close(got, reference(case)[0])


_DCN_OP_BOUNDS = dict(
    stride_h=_args.STRIDE,
    stride_w=_args.STRIDE,
    pad_h=_args.PADDING,
    pad_w=_args.PADDING,
    dilation_h=_args.DILATION,
    dilation_w=_args.DILATION,
    groups=_args.GROUPS,
    deform_groups=_args.GROUPS,
)


def _deform_conv_op(device, gen, arg, v, backward=False):
    ints = dict.fromkeys(_DCN_OP_BOUNDS, 1) | {"im2col_step": 2}
    ints[arg] = v
    vals = [ints[k] for k in _DCN_OP_BOUNDS]
    case = _edge_case(gen, vals, modulated=True)
    args = (*leaves(case, device, requires_grad=False).values(), *vals, ints["im2col_step"])
    if not backward:
        edges.close(torch.ops.visdet_ops.deform_conv2d(*args), reference(case)[0])
        return
    go = torch.randn(reference(case)[0].shape, generator=gen, dtype=torch.float64)
    got = torch.ops.visdet_ops._deform_conv2d_backward(go.to(device), *args)
    for g, w in zip(got, reference(case, go)[1].values(), strict=True):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-7, atol=1e-9)


def _dcn_module(device, gen, cls_name, **kw):
    m = getattr(visdet_ops, cls_name)(**{"in_channels": 4, "out_channels": 4, "kernel_size": 3, "padding": 1, **kw})
    m = m.to(device).double()
    if cls_name.endswith("Pack"):
        x = torch.randn(2, m.in_channels, 7, 8, generator=gen, dtype=torch.float64).to(device)
        edges.close(m(x).detach(), _pack_as_conv(m, x).detach())
        return
    modulated = cls_name.startswith("Modulated")
    geom = dict(stride=m.stride, pad=m.padding, dil=m.dilation, groups=m.groups, dg=m.deform_groups)
    case = make_case(
        gen, c=m.in_channels, cout=m.out_channels, k=m.kernel_size, with_mask=modulated, with_bias=modulated, **geom
    )
    case.update(weight=m.weight.detach().cpu(), bias=m.bias.detach().cpu() if modulated else None)
    t = leaves(case, device, requires_grad=False)
    got = m(t["x"], t["offset"], *([t["mask"]] if modulated else []))
    edges.close(got.detach(), reference(case)[0])


DCN_FN_ARGS = (
    ("stride", _args.STRIDE),
    ("padding", _args.PADDING),
    ("dilation", _args.DILATION),
    ("groups", _args.GROUPS),
    ("deform_groups", _args.GROUPS),
)
DCN_MODULE_ARGS = (
    ("in_channels", _args.CHANNELS),
    ("out_channels", _args.CHANNELS),
    ("kernel_size", _args.KERNEL_SIZE),
    *DCN_FN_ARGS,
)

INTEGER_EDGE_ROWS = [
    *(
        edges.Row(
            f"deform_conv2d-{arg}", (arg,), b, lambda d, v, g, arg=arg: _deform_conv(d, g, **{arg: v}), at_bound=(1, 2)
        )
        for arg, b in DCN_FN_ARGS
    ),
    edges.Row(
        "deform_conv2d-im2col_step",
        ("im2col_step",),
        _args.IM2COL_STEP_DCN,
        lambda d, v, g: _deform_conv(d, g, step=v),
        at_bound=(1, 2),
    ),
    *(
        edges.Row(
            f"modulated_deform_conv2d-{arg}",
            (arg,),
            b,
            lambda d, v, g, arg=arg: _deform_conv(d, g, True, **{arg: v}),
            at_bound=(1, 2),
        )
        for arg, b in DCN_FN_ARGS
    ),
    *(
        edges.Row(
            f"op.deform_conv2d-{arg}",
            edges.names(arg),
            b,
            lambda d, v, g, arg=arg: _deform_conv_op(d, g, arg, v),
            at_bound=(1, 2),
        )
        for arg, b in _DCN_OP_BOUNDS.items()
    ),
    edges.Row(
        "op.deform_conv2d-im2col_step",
        ("im2col_step",),
        _args.IM2COL_STEP_DCN,
        lambda d, v, g: _deform_conv_op(d, g, "im2col_step", v),
    ),
    *(
        edges.Row(
            f"op._deform_conv2d_backward-{arg}",
            edges.names(arg),
            _DCN_OP_BOUNDS.get(arg, _args.IM2COL_STEP_DCN),
            lambda d, v, g, arg=arg: _deform_conv_op(d, g, arg, v, backward=True),
        )
        for arg in (*_DCN_OP_BOUNDS, "im2col_step")
    ),
    *(
        edges.Row(
            f"{cls}-{arg}",
            (arg,),
            b,
            lambda d, v, g, cls=cls, arg=arg: _dcn_module(d, g, cls, **{arg: v}),
            at_bound=(1,),
        )
        for cls in ("DeformConv2d", "ModulatedDeformConv2d", "DeformConv2dPack", "ModulatedDeformConv2dPack")
        # deformable_groups: mmcv's deprecated name of deform_groups, reported under that name
        for arg, b in (*DCN_MODULE_ARGS, ("deformable_groups", _args.GROUPS))
    ),
    *(
        edges.Row(
            f"{cls}-im2col_step",
            ("im2col_step",),
            _args.IM2COL_STEP_DCN,
            lambda d, v, g, cls=cls: _dcn_module(d, g, cls, im2col_step=v),
        )
        for cls in ("DeformConv2d", "DeformConv2dPack")
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)


def _dcn_call(device, fn, **kw):
    x = torch.randn(1, 2, 5, 5, device=device)
    weight = torch.randn(2, 2, 3, 3, device=device)
    offset = torch.zeros(1, 18, 3, 3, device=device)
    if fn == "modulated_deform_conv2d":
        return visdet_ops.modulated_deform_conv2d(x, offset, torch.ones(1, 9, 3, 3, device=device), weight, **kw)
    return getattr(visdet_ops, fn)(x, offset, weight, **kw)


test_public_functions_name_the_users_argument = edges.public_message_test(
    [
        (
            lambda d: _dcn_call(d, "deform_conv2d", padding=2**31),  # issue 25: the op's check named pad_w
            "deform_conv2d: padding must be in [0, 65536], got (2147483648, 2147483648)",
        ),
        (
            lambda d: _dcn_call(d, "deform_conv2d", stride=(1, 2**16 + 1)),
            "deform_conv2d: stride must be in [1, 65536], got (1, 65537)",
        ),
        (
            lambda d: _dcn_call(d, "modulated_deform_conv2d", dilation=(2**40, 1)),
            "modulated_deform_conv2d: dilation must be in [1, 65536], got (1099511627776, 1)",
        ),
        (
            lambda d: _dcn_call(d, "deform_conv2d", padding=(0, -1)),
            "deform_conv2d: padding must be non-negative, got (0, -1)",
        ),
        (
            lambda d: _dcn_call(d, "modulated_deform_conv2d", groups=2**31),
            "modulated_deform_conv2d: groups must be in [1, 1048576], got 2147483648",
        ),
        (  # before any work: nothing is passed but the bad value
            lambda d: visdet_ops.deform_conv2d(None, None, None, dilation=(1, 2**31)),
            "deform_conv2d: dilation must be in [1, 65536], got (1, 2147483648)",
        ),
    ]
)


def test_modules_and_fake_impls_name_the_argument():
    edges.assert_module_message(
        lambda: DeformConv2d(2, 2, 3, padding=2**31), "DeformConv2d: padding must be in [0, 65536]"
    )
    edges.assert_module_message(
        lambda: visdet_ops.ModulatedDeformConv2dPack(2, 2, 3, stride=(1, 0)), "stride must be positive, got (1, 0)"
    )
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.deform_conv2d(
            *(torch.empty(2, 3, 8, 8), torch.empty(2, 18, 6, 6), None, torch.empty(4, 3, 3, 3), None),
            *(1, 1, 2**40, 0, 1, 1, 1, 1, 1),
        ),
        "deform_conv2d: pad_h must be in",
    )


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_deform_conv(gen, kind):
    c = 8
    if kind in ("pack", "mpack"):
        cls = visdet_ops.DeformConv2dPack if kind == "pack" else visdet_ops.ModulatedDeformConv2dPack
        layer = cls(c, 8, 3, padding=1, deform_groups=2)
        amp.randomize(layer, gen, 0.1)

        def body(p, img):
            return p["layer"](p["stem"](img))

        return amp.Case(body, (amp.img(gen),), amp.LOW, gemm=True, stem=amp.Stem(c, gen), layer=layer)
    modulated = kind in ("mfn", "mmodule")
    conv_offset = amp.randomize(torch.nn.Conv2d(c, (3 if modulated else 2) * 2 * 9, 3, padding=1), gen, 0.1)
    if kind in ("module", "mmodule"):
        cls = visdet_ops.ModulatedDeformConv2d if modulated else visdet_ops.DeformConv2d
        layer = amp.randomize(cls(c, 8, 3, padding=1, deform_groups=2), gen, 0.1)
    else:
        layer = amp.randomize(torch.nn.Conv2d(c, 8, 3, padding=1), gen, 0.1)  # holds weight and bias

    def body(p, img):
        x = p["stem"](img)
        out = p["conv_offset"](x)
        if modulated:
            offset, mask = out[:, : 2 * 2 * 9], out[:, 2 * 2 * 9 :].sigmoid()
            if kind == "mmodule":
                return p["layer"](x, offset, mask)
            w, b = p["layer"].weight, p["layer"].bias
            return visdet_ops.modulated_deform_conv2d(x, offset, mask, w, b, 1, 1, 1, 1, 2)
        if kind == "module":
            return p["layer"](x, out)
        return visdet_ops.deform_conv2d(x, out, p["layer"].weight, 1, 1, 1, 1, 2)

    return amp.Case(
        body, (amp.img(gen),), amp.LOW, gemm=True, stem=amp.Stem(c, gen), conv_offset=conv_offset, layer=layer
    )


AUTOCAST_CASES = {
    "deform_conv2d": lambda g: case_deform_conv(g, "fn"),
    "DeformConv2d": lambda g: case_deform_conv(g, "module"),
    "DeformConv2dPack": lambda g: case_deform_conv(g, "pack"),
    "modulated_deform_conv2d": lambda g: case_deform_conv(g, "mfn"),
    "ModulatedDeformConv2d": lambda g: case_deform_conv(g, "mmodule"),
    "ModulatedDeformConv2dPack": lambda g: case_deform_conv(g, "mpack"),
}


def _opcheck_deform_conv2d(device, dtype, gen):
    x = amp.features(device, dtype, gen)
    offset = (torch.randn(2, 18, 10, 12, generator=gen) * 0.3).to(device, dtype).requires_grad_()
    mask = torch.rand(2, 9, 10, 12, generator=gen).to(device, dtype).requires_grad_()
    weight = torch.randn(6, 4, 3, 3, generator=gen).to(device).requires_grad_()
    bias = torch.randn(6, generator=gen).to(device).requires_grad_()
    return torch.ops.visdet_ops.deform_conv2d.default, (x, offset, mask, weight, bias, 1, 1, 1, 1, 1, 1, 1, 1, 1)


AUTOCAST_OPCHECKS = {"deform_conv2d": _opcheck_deform_conv2d}


# Issue 39: what MMDetection 3.x's own tests found.


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("modulated", [False, True])
def test_output_takes_in_place_ops(device, batch, modulated):
    """The output is a tensor of its own at every batch size (mmcv's too), not a view of the op's scratch: mmdet's
    inplace ReLU after a DCN raised 'Output 0 of deform_conv2d_eager is a view and is being modified inplace' at
    batch 1. Forward and backward, the functions and the modules."""
    x = torch.randn(batch, 4, 7, 6, device=device, requires_grad=True)
    pack = (visdet_ops.ModulatedDeformConv2dPack if modulated else visdet_ops.DeformConv2dPack)(4, 5, 3, padding=1)
    pack = pack.to(device)
    with torch.no_grad():
        pack.conv_offset.weight.normal_(0, 0.1)
    for inplace in (torch.relu_, lambda t: t.mul_(2), lambda t: t.add_(1)):
        out = pack(x)
        assert not out._is_view()
        want = inplace(out.detach().clone())
        inplace(out)
        assert torch.equal(out.detach(), want)
        (g,) = torch.autograd.grad(out.sum(), x)
        assert g.shape == x.shape and torch.isfinite(g).all()
    with torch.no_grad():  # inference, the common batch-1 case
        out = pack(x)
        torch.nn.functional.relu(out, inplace=True)


def test_modulated_offset_larger_than_the_output_is_read_as_mmcv_reads_it(device, rng):
    """mmcv's im2col reads image b's offset as a contiguous [C, OH, OW] array from offset[b]'s first element (its
    strides unused but the batch stride): for DyHead that is the first 18 * OH * OW values of image b's 27-channel
    map, which the reference below takes by flattening that map."""
    n, high, low = 2, 10, 5
    # DyHead's spatial_conv_high inputs: offset and mask from the finer level's (high x high) map, the input the
    # coarser level (low x low): the offset a channel slice of the 27-channel map, the mask its sigmoid.
    om = (torch.randn(n, 27, high, high, generator=rng, dtype=torch.float64) * 0.8).requires_grad_()
    mask = om[:, 18:].sigmoid()
    x = torch.randn(n, 4, low, low, generator=rng, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, 3, 3, generator=rng, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, generator=rng, dtype=torch.float64)
    move = (om, x, weight, bias)
    dom, dx, dw, db = (t.detach().to(device).requires_grad_(t.requires_grad) for t in move)
    got = visdet_ops.modulated_deform_conv2d(dx, dom[:, :18], dom[:, 18:].sigmoid(), dw, db, 1, 1)
    plane = low * low
    offset_read = om.flatten(1)[:, : 18 * plane].view(n, 18, low, low)
    mask_read = mask.flatten(1)[:, : 9 * plane].view(n, 9, low, low)
    want = deform_conv2d_reference(x, offset_read, mask_read, weight, bias, (1, 1), (1, 1), (1, 1), 1, 1)
    torch.testing.assert_close(got.cpu(), want)
    grads = torch.autograd.grad(got.sum(), (dom, dx, dw))
    wants = torch.autograd.grad(want.sum(), (om, x, weight))
    for name, g, w in zip(("offset and mask", "input", "weight"), grads, wants, strict=True):
        torch.testing.assert_close(g.cpu(), w, msg=f"gradient of {name}")
    # the module (DyHead's DyDCNv2 calls ModulatedDeformConv2d(x, offset, mask))
    conv = visdet_ops.ModulatedDeformConv2d(4, 3, 3, padding=1).double().to(device)
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(bias)
        torch.testing.assert_close(conv(dx, dom[:, :18], dom[:, 18:].sigmoid()).cpu(), want)


def test_modulated_offset_smaller_than_the_output_is_refused():
    """mmcv would read past the last image's offset: refused, naming the argument."""
    x = torch.randn(2, 4, 8, 8)
    weight = torch.randn(3, 4, 3, 3)
    offset, mask = torch.randn(2, 18, 4, 4), torch.rand(2, 9, 8, 8)
    with pytest.raises(RuntimeError, match=r"modulated_deform_conv2d: offset has H x W 4 x 4, the output 8 x 8"):
        visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1)
    with pytest.raises(RuntimeError, match=r"modulated_deform_conv2d: mask has H x W 4 x 4, the output 8 x 8"):
        visdet_ops.modulated_deform_conv2d(x, torch.randn(2, 18, 8, 8), torch.rand(2, 9, 4, 4), weight, None, 1, 1)
    # DCNv1 keeps its check: mmcv's deform_conv2d views the offset as the output's shape and fails there too
    with pytest.raises(RuntimeError, match="offset must have shape"):
        visdet_ops.deform_conv2d(x, torch.randn(2, 18, 10, 10), weight, 1, 1)


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_DCN_FNS = ("deform_conv2d", "modulated_deform_conv2d")
_DCN_MODS = ("DeformConv2d", "DeformConv2dPack", "ModulatedDeformConv2d", "ModulatedDeformConv2dPack")
_DCN_BAD = tuple(
    "offset_channels offset_size weight_channels dg_divide groups_divide ndim dtype int_arg bias_v1 "
    "mask_shape bias_shape".split()
)
_DCN_CTOR_BAD = ("ctor_int", "ctor_divide", "ctor_bias")
_DCN_INTS = ("stride", "padding", "dilation", "groups", "deform_groups")


@st.composite
def _dcn_case(draw, device):
    fn = draw(st.sampled_from(_DCN_FNS + _DCN_MODS))
    module = fn in _DCN_MODS
    g, dg = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    lcm = 2 if 2 in (g, dg) else 1
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": draw(st.integers(0, 2)),
        "groups": g,
        "deform_groups": dg,
        "c": lcm * draw(st.integers(0 if not module else 1, 2)),
        "cout": g * draw(st.integers(1, 2)),
        "k": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "stride": core.pair_or_int(draw, 1, 2),
        "padding": core.pair_or_int(draw, 0, 2),
        "dilation": core.pair_or_int(draw, 1, 2),
        "h": draw(st.integers(0 if not module else 1, 6)),
        "w": draw(st.integers(0 if not module else 1, 6)),
        "bias": draw(st.booleans()) if fn != "DeformConv2d" and fn != "DeformConv2dPack" else False,
        "im2col_step": draw(st.sampled_from([None, 1, 2, 0, -1, 5])),
        "reach": draw(st.sampled_from([0.0, 1.5, 4.0])),
    }
    if draw(core.one_in(10)):  # several im2col chunks, more channels and a larger map
        case.update(
            n=draw(st.integers(3, 5)),
            c=lcm * draw(st.integers(3, 10)),
            h=draw(st.integers(6, 12)),
            w=draw(st.integers(6, 12)),
        )
    if module:
        bad = core.pick_bad(draw, _DCN_CTOR_BAD if fn != "DeformConv2d" else _DCN_CTOR_BAD + ("offset_channels",))
        if bad == "ctor_bias" and fn not in ("DeformConv2d", "DeformConv2dPack"):
            bad = "ctor_divide"
        case["deformable_kw"] = draw(core.one_in(6))
        main = draw(st.sampled_from(["f32", "f64"]))
        # No channels_last x for the Pack modules: torch 2.13's CPU conv2d (their conv_offset) segfaults on some
        # channels_last inputs (a torch bug: F.conv2d(torch.randn(2, 4, 2, 1).contiguous(memory_format=
        # torch.channels_last), torch.randn(4, 4, 1, 1), torch.randn(4), stride=2, padding=1, dilation=(1, 2))).
        lay = {
            "x": ["c", "t"] if fn.endswith("Pack") else ["c", "cl", "t"],
            "offset": ["c", "t", "s"],
            "mask": ["c", "s"],
        }
        case["t"], mixed = core.draw_tensors(draw, {"x": 4, "offset": 4, "mask": 4}, main, device, layouts=lay)
        core.uniform(case, main, device)
        mixed = False
    else:
        # offset_size is DCNv1's only: DCNv2's offset of another H x W is read as mmcv reads it (issue 39; pinned by
        # test_modulated_offset_larger_than_the_output_is_read_as_mmcv_reads_it and its refusal test above)
        v1_only, v2_only = {"bias_v1", "offset_size"}, {"mask_shape", "bias_shape"}
        bad = core.pick_bad(draw, [b for b in _DCN_BAD if b not in (v2_only if fn == "deform_conv2d" else v1_only)])
        if bad == "bias_shape":
            case["bias"] = True
        main = draw(st.sampled_from(core.FLOATS))
        case["t"], mixed = core.draw_tensors(
            draw, {"input": 4, "offset": 4, "mask": 4, "weight": 4, "bias": 1}, main, device
        )
    if bad == "int_arg":
        case["arg"] = draw(st.sampled_from(_DCN_INTS + (("im2col_step",) if fn == "deform_conv2d" else ())))
        case["value"] = draw(core.bad_int() if case["arg"] != "im2col_step" else st.sampled_from([1.5, "2", 2**63]))
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    elif bad == "ctor_int":
        case["arg"] = draw(st.sampled_from(("in_channels", "out_channels", "kernel_size") + _DCN_INTS))
        case["value"] = draw(core.bad_int())
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    elif bad == "dtype":
        case["arg"] = draw(st.sampled_from(["input", "offset", "weight"]))
        case["t"][case["arg"]]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "dg_divide":
        case["c"] = max(case["c"], 2 * g)
        case["deform_groups"] = next(d for d in range(3, 64) if case["c"] % d)
    elif bad in ("groups_divide", "ctor_divide"):
        case["groups"] = 3
        case["c"] = 2 * dg if case["c"] % 3 == 0 else case["c"]
    if fn.endswith("Pack"):
        # Their conv_offset (an nn.Conv2d, as mmcv's) sees the input first: an input too small for the kernel gets
        # torch's own error from it. Drawn large enough.
        (ph, pw), (dh, dw) = core.pair(case["padding"]), core.pair(case["dilation"])
        case["h"] = max(case["h"], dh * (case["k"][0] - 1) + 1 - 2 * ph)
        case["w"] = max(case["w"], dw * (case["k"][1] - 1) + 1 - 2 * pw)
    *_, oh, ow = _dcn_shapes(case)
    small = module and (case["h"] < case["k"][0] or case["w"] < case["k"][1])
    case["expect"] = core.expectation(bad, mixed, borderline=oh <= 0 or ow <= 0 or case["c"] == 0 or small)
    case["bad"] = bad
    return case


def _dcn_shapes(case):
    kh, kw = case["k"]
    sh, sw = core.pair(case["stride"])
    ph, pw = core.pair(case["padding"])
    dh, dw = core.pair(case["dilation"])
    oh = core.conv_out(case["h"], ph, dh, kh, sh)
    ow = core.conv_out(case["w"], pw, dw, kw, sw)
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), oh, ow


def _dcn_reference(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg):
    n, _, h, w = x.shape
    if h * w == 0:  # every sample is outside the map: the output is the bias
        kh, kw = weight.shape[2:]
        oh = core.conv_out(h, padding[0], dilation[0], kh, stride[0])
        ow = core.conv_out(w, padding[1], dilation[1], kw, stride[1])
        out = (x.sum() + offset.sum() + weight.sum()) * torch.zeros(n, weight.size(0), oh, ow, dtype=torch.float64)
        if mask is not None:
            out = out + mask.sum() * 0
        return out if bias is None else out + bias.reshape(1, -1, 1, 1)
    return deform_conv2d_reference(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg)


def _dcn_run(case):
    fn, bad = case["fn"], case["bad"]
    # deformable_groups: the modules' old keyword name, read from **kwargs (no signature shows it).
    run = core.family_run(case, "deform_conv", "deformable_groups")
    if fn in _DCN_MODS:
        return _dcn_module_run(case, run)
    (kh, kw), stride, padding, dilation, oh, ow = _dcn_shapes(case)
    n, c, cout, g, dg = case["n"], case["c"], case["cout"], case["groups"], case["deform_groups"]
    kk = kh * kw
    v2 = fn == "modulated_deform_conv2d"
    ishape = [n, c, case["h"], case["w"]]
    oshape = [n, 2 * dg * kk, max(oh, 0), max(ow, 0)]
    mshape = [n, dg * kk, max(oh, 0), max(ow, 0)]
    wshape = [cout, c // g if c % g == 0 else c // g + 1, kh, kw]
    bshape = [cout]
    if bad == "offset_channels":
        oshape[1] += 2
    elif bad == "offset_size":
        oshape[2 + case["seed"] % 2] += 1
    elif bad == "weight_channels":
        wshape[1] += 1
    elif bad == "ndim":
        ishape = ishape[1:]
    elif bad == "mask_shape":
        mshape[1] += 1
    elif bad == "bias_shape":
        bshape[0] += 1
    a_in = run.arg("input", run.randn(*ishape))
    a_off = run.arg("offset", run.randn(*oshape) * case["reach"])
    a_mask = run.arg("mask", run.rand(*mshape))
    a_w = run.arg("weight", run.randn(*wshape) * 0.5)
    a_b = run.arg("bias", run.randn(*bshape))
    has_bias = v2 and case["bias"]
    used = [("input", a_in), ("offset", a_off), ("weight", a_w)]
    if v2:
        used.append(("mask", a_mask))
    if has_bias:
        used.append(("bias", a_b))
    dt = core.worst(*(a.dt for _, a in used))
    mixed = case["expect"] == "either"
    xs = {name: a.x(grad=True) for name, a in used}
    ints = {k: case[k] for k in _DCN_INTS}
    if case["im2col_step"] is not None and not v2:
        ints["im2col_step"] = case["im2col_step"]
    if bad == "int_arg":
        ints[case["arg"]] = case["value"]

    def call():
        if v2:
            return visdet_ops.modulated_deform_conv2d(
                xs["input"], xs["offset"], xs["mask"], xs["weight"], xs.get("bias"), **ints
            )
        return visdet_ops.deform_conv2d(xs["input"], xs["offset"], xs["weight"], bias=bad == "bias_v1", **ints)

    def check(out):
        refs = {name: a.ref(grad=True) for name, a in used}
        # mask (DCNv2) and bias (when given) are None where not used
        tensors = (refs[k][1] if k in refs else None for k in ("input", "offset", "mask", "weight", "bias"))
        want = _dcn_reference(*tensors, stride, padding, dilation, g, dg)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, a_in.dt, mixed)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            core.check_grads([(name, a, refs[name][0]) for name, a in used], dt)

    run.outcome(call, check)


def _dcn_module_run(case, run):
    fn, bad = case["fn"], case["bad"]
    (kh, kw), stride, padding, dilation, oh, ow = _dcn_shapes(case)
    n, c, cout, g, dg = case["n"], case["c"], case["cout"], case["groups"], case["deform_groups"]
    kwargs = {
        "in_channels": c,
        "out_channels": cout,
        "kernel_size": [kh, kw] if kh != kw else kh,
        **{k: case[k] for k in ("stride", "padding", "dilation", "groups")},
        "deformable_groups" if case["deformable_kw"] else "deform_groups": dg,
    }
    if fn.startswith("Modulated"):
        kwargs["bias"] = case["bias"]
    elif case["im2col_step"] is not None:
        kwargs["im2col_step"] = case["im2col_step"]
    if bad == "ctor_int":
        kwargs[case["arg"]] = case["value"]
    elif bad == "ctor_bias":
        kwargs["bias"] = True
    torch.manual_seed(case["seed"])
    ctor_bad = bad is not None and bad.startswith("ctor")
    mod = run.construct(lambda: getattr(visdet_ops, fn)(**kwargs), expect="error" if ctor_bad else "ok")
    if mod is None:
        return
    dt = case["t"]["x"]["dt"]
    mod = mod.to(run.device, core.DTYPES[dt])
    if hasattr(mod, "conv_offset"):
        with torch.no_grad():
            mod.conv_offset.weight.normal_(0, 0.5)
            mod.conv_offset.bias.normal_(0, 0.5)
    h, w = case["h"], case["w"]
    a_x = run.arg("x", run.randn(n, c, h, w))
    # DeformConv2d pads an input smaller than the kernel at the bottom/right (mmcv): the offset then has the output
    # size of the input as given (stride 1), cropped back the same way.
    ph_small, pw_small = max(kh - h, 0), max(kw - w, 0)
    if fn in ("DeformConv2d", "ModulatedDeformConv2d"):
        oh_p = core.conv_out(h + (ph_small if fn == "DeformConv2d" else 0), padding[0], dilation[0], kh, stride[0])
        ow_p = core.conv_out(w + (pw_small if fn == "DeformConv2d" else 0), padding[1], dilation[1], kw, stride[1])
        oh_g, ow_g = (oh_p - ph_small, ow_p - pw_small) if fn == "DeformConv2d" else (oh_p, ow_p)
        ochan = 2 * dg * kh * kw + (2 if bad == "offset_channels" else 0)
        a_off = run.arg("offset", run.randn(n, ochan, max(oh_g, 0), max(ow_g, 0)) * case["reach"])
        a_mask = run.arg("mask", run.rand(n, dg * kh * kw, max(oh_g, 0), max(ow_g, 0)))
        inputs = [a_x, a_off] + ([a_mask] if fn.startswith("Modulated") else [])
    else:
        inputs = [a_x]
    xs = [a.x(grad=True) for a in inputs]

    def check(out):
        m64 = copy.deepcopy(mod).cpu().double()
        refs = [a.ref(grad=True) for a in inputs]
        x = refs[0][1]
        if fn.endswith("Pack"):
            offset, mask = _pack_offset_mask(m64, x)
        else:
            offset, mask = refs[1][1], refs[2][1] if len(refs) > 2 else None
        if fn == "DeformConv2d" and (ph_small or pw_small):
            x = F.pad(x, (0, pw_small, 0, ph_small))
            offset = F.pad(offset, (0, pw_small, 0, ph_small))
        want = _dcn_reference(
            x, offset, mask, m64.weight, m64.bias if fn.startswith("Mod") else None, stride, padding, dilation, g, dg
        )
        if fn == "DeformConv2d" and (ph_small or pw_small):
            want = want[:, :, : want.size(2) - ph_small, : want.size(3) - pw_small]
        core.assert_close("output", out, want, dt)
        if run.grads and out.numel():
            grad = core.rand_grad(run, out)
            run.backward(out, grad.to(out.dtype))
            core.ref_backward(want, grad)
            core.check_grads(
                [(f"forward arg {i}", a, r[0]) for i, (a, r) in enumerate(zip(inputs, refs, strict=True))], dt
            )

    run.outcome(lambda: mod(*xs), check)


FUZZ = core.family("deform_conv", _DCN_FNS + _DCN_MODS, ops=("deform_conv2d",), weight=0.7)((_dcn_case, _dcn_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# registered forward op -> the test of its standard ONNX translation (tests/test_onnx.py's
# test_every_forward_op_has_a_case)
ONNX_COVERED_OTHERWISE = {
    "deform_conv2d": "test_onnx_deform_conv (DeformConv)",
}


class DeformConvModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.v1 = visdet_ops.DeformConv2d(4, 6, 3, stride=2, padding=1, deform_groups=2)
        self.v2 = visdet_ops.ModulatedDeformConv2d(
            4, 6, (3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=2
        )
        torch.nn.init.normal_(self.v1.weight)
        torch.nn.init.normal_(self.v2.weight)
        torch.nn.init.normal_(self.v2.bias)

    def forward(self, x, offset1, offset2, mask2):
        return self.v1(x, offset1), self.v2(x, offset2, mask2)


def _onnx_dcn_inputs(batch: int, height: int, width: int, rng: torch.Generator):
    x = torch.randn(batch, 4, height, width, generator=rng)
    h1, w1 = (height + 2 - 3) // 2 + 1, (width + 2 - 3) // 2 + 1
    h2, w2 = height + 4 - 4 - 1 + 1, (width + 2 - 2) // 2 + 1
    # Offsets of a few pixels: many samples land between pixels and some outside the map.
    offset1 = torch.randn(batch, 2 * 2 * 9, h1, w1, generator=rng) * 2
    offset2 = torch.randn(batch, 2 * 6, h2, w2, generator=rng) * 2
    mask2 = torch.rand(batch, 6, h2, w2, generator=rng)
    return x, offset1, offset2, mask2


def _onnx_has_deform_conv_kernel() -> bool:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["Y"])
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 3, 3]),
        helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 1, 1, 1]),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 2, 3, 3]),
    ]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented:
        return False
    del onnx
    return True


@ox.needs_exporter
def test_onnx_deform_conv(onnx_table, rng):
    # Static shapes (the offsets' sizes follow the map's), fresh values. torch 2.8's exporter defaults to opset 18,
    # which predates DeformConv: there the docs say to ask for 20, torch 2.9's default.
    opset = {"opset_version": 20} if parse_release(torch.__version__).major_minor < (2, 9) else {}
    model = DeformConvModel()
    onnx_model = ox.export(onnx_table, model, _onnx_dcn_inputs(2, 8, 9, rng), **opset)
    nodes = [n for n in onnx_model.graph.node if n.op_type == "DeformConv"]
    assert len(nodes) == 2 and not any(n.domain for n in onnx_model.graph.node)
    import onnx

    attributes = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert attributes == [  # (dilations, group, offset_group, pads, strides) of the two layers
        dict(dilations=[1, 1], group=1, offset_group=2, pads=[1, 1, 1, 1], strides=[2, 2]),
        dict(dilations=[2, 1], group=2, offset_group=1, pads=[2, 1, 2, 1], strides=[1, 2]),
    ]
    if not _onnx_has_deform_conv_kernel():
        import onnxruntime

        pytest.skip(
            f"onnxruntime {onnxruntime.__version__} has no DeformConv kernel (1.25 and later have); graph checked"
        )
    args = _onnx_dcn_inputs(2, 8, 9, rng)
    got = ox.run(onnx_model, *args)
    with torch.no_grad():
        want = model(*args)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- mmcv's names (tests/test_mmcv_names.py)

# Arguments mmcv checks with `assert`: each call raises our ValueError, which is also an AssertionError
# (test_argument_errors_are_also_assertion_errors)
MMCV_ASSERTION_ERRORS = {
    "DeformConv2d-bias": lambda: visdet_ops.DeformConv2d(1, 1, 2, bias=True),
    "DeformConv2d-in_channels-groups": lambda: visdet_ops.DeformConv2d(3, 2, 3, groups=2),
    "DeformConv2d-out_channels-groups": lambda: visdet_ops.DeformConv2d(3, 4, 3, groups=3),
    "ModulatedDeformConv2d-groups": lambda: visdet_ops.ModulatedDeformConv2d(3, 2, 3, groups=2),
}
