from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import RoIAlign
from visdet_ops.reference.roi_align import roi_align_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from .. import onnx_harness as ox
from ..conftest import require_cuda, torchvision_or_skip
from ._rois import (
    DEGENERATE_ROIS,
    RoIOpTester,
    assert_autograd_registered_from_python,
    onnx_export_and_run,
    pooled_edge_rows,
    random_rois,
    roi_case,
    rois_autocast_cases,
    sampled_roi_run,
    tiny_inputs,
)


def case(rng, batch=2, channels=3, height=13, width=17, k=12, scale=0.5):
    x = torch.randn(batch, channels, height, width, generator=rng, dtype=torch.float64)
    return x, random_rois(k, batch, height, width, scale, rng)


# float32: sample positions round to ~1e-6 px, which on randn data moves a
# bilinear value by ~1e-5; a logic error moves it by O(0.1).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _near_tie(x, rois, output_size, scale, sampling_ratio, aligned, dtype, device) -> bool:
    """Whether some bin's maximum is a near-tie that float32 and float64 break differently: the op's sample
    positions (argmax_y/x) differ between the two. Such a choice must still be a maximum: its value must
    equal the float64 one to float32 rounding, else this fails (a wrong pick is a bug, not a tie). Evaluated
    on the device under test, as _on_an_edge is: a 16-bit draw that the device's arithmetic keeps off an edge
    can sit on one in the CPU's (no fused multiply-adds), where float32 and float64 then differ by a whole
    sample (seed 908708500 on the H200: CUDA bf16 max, the edge check on CUDA, this check on the CPU)."""
    ph, pw = output_size
    x, rois = x.to(device), rois.to(device)
    out_lo, ay_lo, ax_lo = torch.ops.visdet_ops.roi_align(
        x.to(dtype), rois.to(dtype), ph, pw, scale, sampling_ratio, "max", aligned
    )
    out, ay, ax = torch.ops.visdet_ops.roi_align(x, rois, ph, pw, scale, sampling_ratio, "max", aligned)
    moved = (ay_lo.double() - ay).abs().gt(1e-4) | (ax_lo.double() - ax).abs().gt(1e-4)
    if not moved.any():
        return False
    torch.testing.assert_close(out_lo.double()[moved], out[moved], rtol=1e-5, atol=1e-5)
    return True


def _on_an_edge(x, rois, output_size, scale, sampling_ratio, pool_mode, aligned, device) -> bool:
    """Whether float32 and float64 evaluations of the op on the same values disagree: some sample sits,
    to rounding, on a discontinuity of RoIAlign itself, so rounding decides the answer. The sample
    validity test (y < -1 or y > H gives 0, else the clamped border pixel) jumps there, and 16-bit RoIs
    (few significant bits) land samples exactly on it: RoI x1=27.75, x2=40.25 at scale 0.5, 7 bins,
    aligned=False puts bin 3's one sample at x = 17.0 = W, inside in float32 and 1 ulp outside in float64
    (seed 2934499241, CI run 21). The float32 kernel itself is checked on continuous inputs by
    test_forward_backward_match_reference, where such draws have probability zero. Evaluated on the device
    under test: its float32 arithmetic (fused multiply-adds on CUDA) decides which side a sample falls."""
    ph, pw = output_size
    x, rois = x.to(device), rois.to(device)
    lo = torch.ops.visdet_ops.roi_align(x.float(), rois.float(), ph, pw, scale, sampling_ratio, pool_mode, aligned)
    hi = torch.ops.visdet_ops.roi_align(x, rois, ph, pw, scale, sampling_ratio, pool_mode, aligned)
    return not torch.allclose(lo[0].double(), hi[0], rtol=1e-4, atol=1e-4)


def _case_not_decided_by_rounding(
    rng, output_size, scale, sampling_ratio, pool_mode, aligned, dtype, round_to=None, device="cpu"
):
    """case(rng), redrawn while rounding decides the answer. In max mode: a bin whose two samples are within
    float32 rounding of each other (see _near_tie) may be picked differently by float32 and float64 (both
    right), and the gradient then lands on different pixels (seed 791606530). round_to: the 16-bit dtype
    the inputs are first rounded to (the kernels compute it in float32); such inputs also put samples
    exactly on the op's edges (see _on_an_edge)."""
    for _ in range(50):
        x, rois = case(rng)
        if round_to is not None:
            x, rois = x.to(round_to).double(), rois.to(round_to).double()
            if _on_an_edge(x, rois, output_size, scale, sampling_ratio, pool_mode, aligned, device):
                continue
        if pool_mode != "max" or not _near_tie(x, rois, output_size, scale, sampling_ratio, aligned, dtype, device):
            return x, rois
    raise AssertionError("50 draws in a row were decided by rounding: the checks themselves are suspect")


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 2])
@pytest.mark.parametrize("output_size", [(7, 7), (3, 5)])
def test_forward_backward_match_reference(device, dtype, rng, pool_mode, aligned, sampling_ratio, output_size):
    scale = 0.5
    if dtype != torch.float64:
        x, rois = _case_not_decided_by_rounding(
            rng, output_size, scale, sampling_ratio, pool_mode, aligned, dtype, device=device
        )
    else:
        x, rois = case(rng)
    want = roi_align_reference(x.requires_grad_(), rois, output_size, scale, sampling_ratio, pool_mode, aligned)
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64)
    (want_grad,) = torch.autograd.grad(want, x, grad_out)

    xd = x.detach().to(device, dtype).requires_grad_()
    got = visdet_ops.roi_align(xd, rois.to(device, dtype), output_size, scale, sampling_ratio, pool_mode, aligned)
    assert got.dtype == dtype and got.device.type == device.type
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **TOL[dtype])
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, dtype))
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **TOL[dtype])


def test_against_torchvision(device, dtype, rng):
    tv = torchvision_or_skip()
    x, rois = case(rng, channels=8, height=25, width=31, k=40, scale=0.25)
    x, rois = x.to(device, dtype), rois.to(device, dtype)
    for aligned in (True, False):
        for sr in (0, 2):
            got = visdet_ops.roi_align(x, rois, (7, 7), 0.25, sr, "avg", aligned)
            want = tv.roi_align(x, rois, (7, 7), 0.25, sr, aligned)
            torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
def test_gradcheck(device, rng, pool_mode):
    x, rois = case(rng, batch=2, channels=2, height=6, width=7, k=4, scale=1.0)
    x = x.to(device).requires_grad_()
    rois = rois.to(device)
    fn = lambda inp: visdet_ops.roi_align(inp, rois, (3, 2), 1.0, 2, pool_mode, True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
def test_opcheck(device, rng, pool_mode):
    x, rois = case(rng, channels=2, height=6, width=7, k=4, scale=1.0)
    args = (x.to(device).requires_grad_(), rois.to(device), 3, 2, 1.0, 2, pool_mode, True)
    torch.library.opcheck(torch.ops.visdet_ops.roi_align.default, args)


@pytest.mark.parametrize("pool_mode", ["avg", "max"])
def test_backward_paths_and_strided_grad(device, dtype, rng, pool_mode):
    """The CUDA backward's paths: one block per RoI and 16 channels (37 here: a partial last group) sums into a
    shared-memory tile of the RoI's footprint, in several channel passes when the footprint is large, or adds to
    global memory directly when one channel's footprint does not fit (6,144 float / 3,072 double pixels: here the
    RoI over the whole map). Tiny RoIs, large ones, RoIs partly outside, adaptive and fixed sampling. The gradient
    is read through its strides: a transposed and an expanded one give what their contiguous copies give."""
    x = torch.randn(2, 37, 90, 100, generator=rng, dtype=torch.float64)
    boxes = [[0, 10.0, 12.0, 12.5, 13.0], [1, 4.0, 6.0, 40.0, 34.0], [0, 20.0, 8.0, 44.0, 50.0],
             [1, -3.0, -2.0, 98.5, 88.0], [0, 70.0, 60.0, 130.0, 120.0]]  # fmt: skip
    rois = torch.tensor(boxes, dtype=torch.float64)
    channels, height, width = x.shape[1:]
    if pool_mode == "max":
        # Samples clamped onto the border (outside the map, or past its last row / column) tie exactly in float64
        # and within rounding in float32, which may then pick another sample: keep max mode's RoIs inside.
        rois[:, 1::2] = rois[:, 1::2].clamp(1, width - 2)
        rois[:, 2::2] = rois[:, 2::2].clamp(1, height - 2)
    tol = TOL[dtype]
    for sr in (0, 2):
        for _ in range(20):  # as _case_not_decided_by_rounding: float32 may break a near-tie another way
            if pool_mode == "avg" or dtype == torch.float64:
                break
            if not _near_tie(x, rois, (7, 6), 1.0, sr, True, dtype, device):
                break
            x = torch.randn(x.shape, generator=rng, dtype=torch.float64)
        want = roi_align_reference(x.requires_grad_(), rois, (7, 6), 1.0, sr, pool_mode, True)
        grad_t = torch.randn(5, channels, 6, 7, generator=rng, dtype=torch.float64).transpose(2, 3)
        (want_grad,) = torch.autograd.grad(want, x, grad_t, retain_graph=True)
        (want_ones,) = torch.autograd.grad(want, x, torch.ones_like(want))
        xd = x.detach().to(device, dtype).requires_grad_()
        got = visdet_ops.roi_align(xd, rois.to(device, dtype), (7, 6), 1.0, sr, pool_mode, True)
        torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **tol)
        gd = grad_t.to(device, dtype)
        assert not gd.is_contiguous()
        (got_grad,) = torch.autograd.grad(got, xd, gd, retain_graph=True)
        torch.testing.assert_close(got_grad.cpu().double(), want_grad, **tol)
        (got_ones,) = torch.autograd.grad(got.sum(), xd)  # an expanded, stride-0 gradient
        torch.testing.assert_close(got_ones.cpu().double(), want_ones, **tol)


def test_empty_batch_and_channels(device):
    out = visdet_ops.roi_align(
        torch.randn(2, 0, 5, 5, device=device), torch.tensor([[0, 0, 0, 3, 3.0]], device=device), 2
    )
    assert out.shape == (1, 0, 2, 2)


def test_non_contiguous(device, dtype, rng):
    x, rois = case(rng, channels=4)
    want = roi_align_reference(x, rois, (4, 4), 0.5, 2, "avg", True)
    x_cl = x.to(device, dtype).contiguous(memory_format=torch.channels_last)
    rois_nc = torch.cat([rois, rois], 1).to(device, dtype)[:, ::2]
    rois_nc[:] = rois.to(device, dtype)
    assert not x_cl.is_contiguous() and not rois_nc.is_contiguous()
    got = visdet_ops.roi_align(x_cl, rois_nc, 4, 0.5, 2, "avg", True)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])


def test_degenerate_rois(device):
    """Zero-size, reversed and fully-outside RoIs give finite values, no crash."""
    x = torch.randn(1, 2, 8, 8, device=device, dtype=torch.float64)
    rois = torch.tensor(DEGENERATE_ROIS, device=device, dtype=torch.float64)
    for mode in ("avg", "max"):
        for aligned in (True, False):
            got = visdet_ops.roi_align(x, rois, 2, 1.0, 0, mode, aligned)
            want = roi_align_reference(x.cpu(), rois.cpu(), (2, 2), 1.0, 0, mode, aligned)
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got.cpu(), want)


def test_large_random_float32_matches_reference(device, rng):
    x, rois = case(rng, batch=2, channels=16, height=40, width=48, k=64, scale=0.125)
    want = roi_align_reference(x, rois, (7, 7), 0.125, 0, "avg", True)
    got = visdet_ops.roi_align(x.float().to(device), rois.float().to(device), 7, 0.125, 0, "avg", True)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[torch.float32])
    assert ((got.cpu().double() - want).norm() / want.norm()).item() < 1e-5


def test_bad_inputs_cuda():
    require_cuda()
    x = torch.zeros(2, 3, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="input and rois must be on the same device"):
        visdet_ops.roi_align(x, torch.zeros(1, 5), 2)


# 16-bit inputs (the CPU computes them through float32, as CUDA does) against the float64
# reference on the same (rounded) values: the kernels compute in float32, so what is left is
# the final rounding to 11 (float16) or 8 (bfloat16) significant bits of values of order 1-10.
HALF_TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("pool_mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [True, False])
def test_half_matches_reference(device, rng, dtype16, pool_mode, aligned):
    x, rois = _case_not_decided_by_rounding(
        rng, (7, 7), 0.5, 0, pool_mode, aligned, torch.float32, round_to=dtype16, device=device
    )
    want = roi_align_reference(x.requires_grad_(), rois, (7, 7), 0.5, 0, pool_mode, aligned)
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64).to(dtype16).double()
    (want_grad,) = torch.autograd.grad(want, x, grad_out)

    xd = x.detach().to(device, dtype16).requires_grad_()
    out, argmax_y, _ = torch.ops.visdet_ops.roi_align(xd, rois.to(device, dtype16), 7, 7, 0.5, 0, pool_mode, aligned)
    assert out.dtype == dtype16 and argmax_y.dtype == torch.float32
    torch.testing.assert_close(out.detach().cpu().double(), want.detach(), **HALF_TOL[dtype16])
    (got_grad,) = torch.autograd.grad(out, xd, grad_out.to(device, dtype16))
    assert got_grad.dtype == dtype16
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **HALF_TOL[dtype16])


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_cpu_16bit_load_and_store_are_exact(dtype16):
    """The CPU kernels read float16/bfloat16 through their own bit conversions
    (scalar.h): one sample at each pixel centre must give back every finite 16-bit
    value bit for bit (load, then a round-to-nearest-even store of an exact value).

    The bit-for-bit half runs in a fresh process: subnormal values survive only while the CPU does not flush
    them, and a library loaded earlier in this process may have switched that on for good (torch 2.4's
    inductor-compiled kernels do, e.g. after tests/ops/test_nms.py's torch.compile)."""
    code = f"""
import torch, visdet_ops
bits = torch.arange(65536, dtype=torch.int32).to(torch.int16).view({dtype16})
# Non-finite values and -0 (the bilinear sum's zero-weight terms make it +0) left out.
keep = torch.isfinite(bits) & (bits.view(torch.int16) != torch.iinfo(torch.int16).min)
x = torch.where(keep, bits, torch.zeros_like(bits)).view(1, 1, 256, 256)
rois = torch.tensor([[0.0, 0.0, 0.0, 256.0, 256.0]])
out = visdet_ops.roi_align(x, rois, (256, 256), 1.0, 1, "avg", True)
assert out.dtype == {dtype16}, out.dtype
wrong = (out.view(torch.int16) != x.view(torch.int16)).nonzero()
assert len(wrong) == 0, f"{{len(wrong)}} values not exact, first at {{wrong[:3].tolist()}}"
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # Rounding: the average of two samples, rounded once to nearest even, as torch rounds.
    wide = torch.randn(1, 1, 8, 8, dtype=torch.float64)
    x16 = wide.to(dtype16)
    got = visdet_ops.roi_align(x16, torch.tensor([[0.0, 0.0, 0.0, 8.0, 8.0]]), (8, 4), 1.0, 0, "avg", True)
    want = visdet_ops.roi_align(x16.float(), torch.tensor([[0.0, 0.0, 0.0, 8.0, 8.0]]), (8, 4), 1.0, 0, "avg", True)
    assert torch.equal(got.view(torch.int16), want.to(dtype16).view(torch.int16))


def test_backward_op_skips_invalid_rois(device):
    """The backward op is callable directly and trusts the forward's RoI check: a RoI with a
    batch index outside [0, N) or a non-finite value adds nothing (and touches nothing out
    of bounds)."""
    grad = torch.ones(3, 1, 2, 2, device=device, dtype=torch.float64)
    rois = torch.tensor(
        [[0, 0, 0, 3, 3], [4, 0, 0, 3, 3], [0, 0, float("nan"), 3, 3]], device=device, dtype=torch.float64
    )
    empty = torch.empty(0, device=device, dtype=torch.float64)
    got = torch.ops.visdet_ops._roi_align_backward(grad, rois, empty, empty, 1, 1, 4, 4, 1.0, 2, "avg", True)
    x = torch.zeros(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    want = roi_align_reference(x, rois[:1].cpu(), (2, 2), 1.0, 2, "avg", True)
    (want_grad,) = torch.autograd.grad(want, x, torch.ones_like(want))
    torch.testing.assert_close(got.cpu(), want_grad)


def test_autograd_is_registered_from_python():
    assert_autograd_registered_from_python("roi_align", visdet_ops.roi_align, 2, 2, 1.0, 0, "avg", True)


def test_bad_pool_mode():
    with pytest.raises(ValueError, match="pool_mode must be 'avg' or 'max', got 'sum'"):
        visdet_ops.roi_align(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5), 2, pool_mode="sum")
    with pytest.raises(RuntimeError, match="pool_mode must be 'avg' or 'max', got 'sum'"):
        torch.ops.visdet_ops.roi_align(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5), 2, 2, 1.0, 0, "sum", True)
    with pytest.raises(ValueError, match="pool_mode"):
        RoIAlign(7, pool_mode="median")


def test_module_matches_functional(device, rng):
    x, rois = case(rng)
    m = RoIAlign((7, 7), spatial_scale=0.5, sampling_ratio=2, pool_mode="max", aligned=False)
    assert list(m.state_dict()) == []
    assert "pool_mode=max" in repr(m) and "aligned=False" in repr(m)
    got = m(x.to(device), rois.to(device))
    want = visdet_ops.roi_align(x, rois, 7, 0.5, 2, "max", False)
    torch.testing.assert_close(got.cpu(), want)


def test_module_old_argument_names_as_mmcv():
    """mmcv's RoIAlign takes out_size= / sample_num= with a deprecation warning."""
    with pytest.warns(DeprecationWarning, match="RoIAlign: 'out_size' is deprecated, use 'output_size'"):
        m = RoIAlign(out_size=(3, 4), spatial_scale=0.5, sample_num=2)
    assert m.output_size == (3, 4) and m.sampling_ratio == 2 and m.spatial_scale == 0.5
    with pytest.raises(TypeError, match="RoIAlign: got both 'out_size'"):
        RoIAlign(out_size=3, output_size=3)


def test_module_use_torchvision(rng):
    torchvision_or_skip()
    x, rois = case(rng)
    got = RoIAlign(5, 0.5, 2, use_torchvision=True)(x, rois)
    torch.testing.assert_close(got, visdet_ops.roi_align(x, rois, 5, 0.5, 2))


class TestRoIOp(RoIOpTester):
    """tests/ops/_rois.py's RoI tests, in both pool modes."""

    name = "roi_align"
    call = staticmethod(visdet_ops.roi_align)
    valid = dict(output_size=2, spatial_scale=1.0)
    tol = TOL[torch.float64]

    @pytest.fixture(params=["avg", "max"])
    def variant(self, request):
        return request.param

    def fn(self, x, rois, variant=None):
        return visdet_ops.roi_align(x, rois, 3, 0.5, 2, variant or "avg", True)

    def reference(self, x, rois, variant=None):
        return roi_align_reference(x, rois, (3, 3), 0.5, 2, variant or "avg", True)

    def case(self, rng):
        return case(rng, k=4)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _roi_align(device, gen, output_size=3, sampling_ratio=2, fn=None):
    from visdet_ops.ops.roi_align import roi_align
    from visdet_ops.reference.roi_align import roi_align_reference

    x, rois = edges.roi_inputs(device, gen)
    got = (fn or roi_align)(x, rois, output_size, 1.0, sampling_ratio)
    out = edges.small(output_size, 1, 64, 3)
    edges.close(got, roi_align_reference(x.cpu(), rois.cpu(), (out, out), 1.0, sampling_ratio, "avg", True))


def _roi_align_op(device, gen, ph=3, pw=3, sr=2):
    from visdet_ops.reference.roi_align import roi_align_reference

    x, rois = edges.roi_inputs(device, gen)
    got, _, _ = torch.ops.visdet_ops.roi_align(x, rois, ph, pw, 1.0, sr, "avg", True)
    edges.close(got, roi_align_reference(x.cpu(), rois.cpu(), (ph, pw), 1.0, sr, "avg", True))


def _roi_align_backward_op(device, gen, sr):
    from visdet_ops.reference.roi_align import roi_align_reference

    x, rois = edges.roi_inputs(device, gen)
    go = torch.rand(2, 3, 3, 3, generator=gen, dtype=torch.float64).to(device)
    empty = x.new_empty((0,))
    got = torch.ops.visdet_ops._roi_align_backward(go, rois, empty, empty, 2, 3, 8, 8, 1.0, sr, "avg", True)
    xr = x.cpu().requires_grad_()
    (want,) = torch.autograd.grad(
        (roi_align_reference(xr, rois.cpu(), (3, 3), 1.0, sr, "avg", True) * go.cpu()).sum(), xr
    )
    edges.close(got, want)


def _roi_align_module(device, gen, output_size=3, sampling_ratio=2):
    from visdet_ops.ops.roi_align import RoIAlign

    m = RoIAlign(output_size, 1.0, sampling_ratio)
    _roi_align(device, gen, m.output_size[0], m.sampling_ratio, fn=lambda x, r, *_: m(x, r))


INTEGER_EDGE_ROWS = pooled_edge_rows(
    "roi_align", "RoIAlign", _roi_align, _roi_align_module, _roi_align_op, _roi_align_backward_op, (1, 16)
)
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)
test_public_functions_name_the_users_argument = edges.public_message_test(
    [
        (  # issue 25: the op's check named pooled_height
            lambda d: visdet_ops.roi_align(*tiny_inputs(d), (2**31, 7)),
            "roi_align: output_size must be in [1, 4096], got (2147483648, 7)",
        ),
        (lambda d: visdet_ops.roi_align(*tiny_inputs(d), 0), "roi_align: output_size must be positive, got (0, 0)"),
    ]
)


def test_modules_op_calls_and_fake_impls_name_the_argument():
    """The constructor names its argument; a direct torch.ops call reaches the C++ check, which names the schema's
    (the backstop), as the fake impl does."""
    edges.assert_module_message(
        lambda: RoIAlign((2**31, 7)), "RoIAlign: output_size must be in [1, 4096], got (2147483648, 7)"
    )
    with pytest.raises(RuntimeError, match=r"roi_align: pooled_height must be in \[1, 4096\], got 2147483648"):
        torch.ops.visdet_ops.roi_align(*tiny_inputs("cpu"), 2**31, 7, 1.0, 0, "avg", True)
    sr = r"roi_align: sampling_ratio must be in \[-1, 128\], got 2147483648"
    x_rois = lambda: (torch.empty(2, 3, 8, 8), torch.empty(4, 5))  # noqa: E731
    edges.assert_fake_rejects(lambda: torch.ops.visdet_ops.roi_align(*x_rois(), 3, 3, 1.0, 2**31, "avg", True), sr)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert torch.ops.visdet_ops.roi_align(*x_rois(), 3, 3, 1.0, 0, "avg", True)[0].shape == (4, 3, 3, 3)


# The backward op's integer arguments that are not a user's: the forward input's shape, which autograd passes and the
# backward allocates its gradient with (checked non-negative and for int64 overflow, csrc/ops/roi_align/roi_align.cpp).
INTEGER_EDGE_OP_COVERED_OTHERWISE = {
    f"op._roi_align_backward-{arg}": "the forward input's shape, passed by autograd"
    for arg in ("batch_size", "channels", "height", "width")
}


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


AUTOCAST_CASES = rois_autocast_cases(
    lambda gen: amp.rois(gen, 12, 2, 4 * 28),
    {"RoIAlign": lambda: visdet_ops.RoIAlign(7, 0.25, 2, "avg", True)},
    roi_align=lambda x, rois: visdet_ops.roi_align(x, rois, 7, 0.25, 2, "avg", True),
    roi_align_max=lambda x, rois: visdet_ops.roi_align(x, rois, 7, 0.25, 2, "max", True),
)


AUTOCAST_OPCHECKS = {
    "roi_align": lambda device, dtype, gen: (
        torch.ops.visdet_ops.roi_align.default,
        (amp.features(device, dtype, gen), amp.rois(gen, 5, 2, 40).to(device), 3, 3, 0.5, 2, "avg", True),
    ),
}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


@st.composite
def _roi_align_case(draw, device):
    fn = draw(st.sampled_from(["roi_align", "RoIAlign"]))
    extra = ("sampling_ratio", "pool_mode") + (("ctor_torchvision",) if fn == "RoIAlign" else ())
    case = draw(roi_case(device, fn, extra))
    case["sampling_ratio"] = draw(st.sampled_from([0, -1, 1, 2, 3]))
    case["pool_mode"] = draw(st.sampled_from(["avg", "max"]))
    case["aligned"] = draw(st.booleans())
    if fn == "RoIAlign":
        case["old_names"] = draw(core.one_in(5))
    if case["bad"] == "sampling_ratio":
        case["sampling_ratio"] = draw(st.sampled_from([-2, 129, 2**31, 1.5, "1"]))
    elif case["bad"] == "pool_mode":
        case["pool_mode"] = draw(st.sampled_from(["sum", "Max", ""]))
    elif case["bad"] == "ctor_torchvision":
        case["pool_mode"] = "max"
    return case


def _roi_align_run(case):
    sampled_roi_run(
        case,
        "roi_align",
        visdet_ops.RoIAlign,
        visdet_ops.roi_align,
        ("output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned"),
        roi_align_reference,
        ctor_bad=("output_size", "sampling_ratio", "pool_mode", "ctor_torchvision"),
        ctor_extra=lambda case: {"use_torchvision": True} if case["bad"] == "ctor_torchvision" else {},
        # max mode: an expanded input has tied samples, whose gradient goes to the first one in each
        # implementation's own rounding: compared only without ties.
        grad_values=lambda case, a_in: case["pool_mode"] == "avg" or a_in.layout != "e",
    )


FUZZ = core.family("roi_align", ["roi_align", "RoIAlign"])((_roi_align_case, _roi_align_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# registered forward op -> the test of its standard ONNX translation (tests/test_onnx.py's
# test_every_forward_op_has_a_case)
ONNX_COVERED_OTHERWISE = {
    "roi_align": "test_onnx_roi_align (RoiAlign)",
}


def _onnx_heads():
    """avg and max, `aligned` both ways, adaptive (0, -1) and fixed sampling."""
    return [
        visdet_ops.RoIAlign((7, 5), 0.5, 0, "avg", True),
        visdet_ops.RoIAlign(3, 0.25, 0, "avg", False),
        visdet_ops.RoIAlign((2, 4), 1.0, 2, "avg", True),
        visdet_ops.RoIAlign(3, 0.5, -1, "avg", False),
        visdet_ops.RoIAlign((3, 2), 0.5, 2, "max", True),
        visdet_ops.RoIAlign(2, 0.25, 3, "max", False),
    ]


@ox.needs_exporter
def test_onnx_roi_align(onnx_table, rng):
    def compare(i, got, want):
        # avg: the same arithmetic (equal in practice); max: the composed grid's sample positions differ from the
        # kernels' in the last bits of float32.
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 if i < 4 else 5e-5, msg=lambda m: f"head {i}: {m}")

    sizes = ((3, 4, 13, 17, 60, 0.5), (1, 2, 5, 4, 1, 0.5), (2, 3, 9, 9, 0, 0.5))
    onnx_export_and_run(onnx_table, _onnx_heads, "RoiAlign", sizes, rng, compare)


@ox.needs_exporter
def test_onnx_roi_align_max_adaptive_fails_clearly(onnx_table):
    model = ox.CallModel(lambda x, r: visdet_ops.roi_align(x, r, 2, 1.0, 0, "max", True))
    message = ox.conversion_message(onnx_table, model, (torch.randn(1, 2, 8, 8), torch.tensor([[0, 1.0, 1, 5, 5]])))
    assert "roi_align: pool_mode='max' with adaptive sampling" in message
    assert "sampling_ratio > 0" in message


# ---------------------------------------------------------------- mmcv's names (tests/test_mmcv_names.py)

# Arguments mmcv checks with `assert`: each call raises our ValueError, which is also an AssertionError
# (test_argument_errors_are_also_assertion_errors)
MMCV_ASSERTION_ERRORS = {"RoIAlign-pool_mode": lambda: visdet_ops.RoIAlign(7, 1.0, pool_mode="sum")}
