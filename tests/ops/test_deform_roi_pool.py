from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import DeformRoIPool, DeformRoIPoolPack, ModulatedDeformRoIPoolPack
from visdet_ops.ops import _args
from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference, mmcv_offset_grad_formula

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import assert_uniform_init, assert_zero, require_cuda
from ._rois import (
    DEGENERATE_ROIS,
    RoIOpTester,
    close_up_to_edges,
    pooled_edge_rows,
    random_rois,
    roi_case,
    roi_inputs,
    roi_unchecked,
    rois_autocast_case,
    tiny_inputs,
)

# ---------------------------------------------------------------- inputs


def sample_coords(roi, offset_k, output_size, scale, sampling_ratio, gamma):
    """Sample positions (ys [PH, PW, gh], xs [PH, PW, gw]) of one RoI, float64,
    the geometry of mmcv's kernel."""
    out_h, out_w = output_size
    start_w, start_h = roi[1] * scale - 0.5, roi[2] * scale - 0.5
    roi_w, roi_h = (roi[3] * scale - 0.5) - start_w, (roi[4] * scale - 0.5) - start_h
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    grid_h = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_h), 0)
    grid_w = sampling_ratio if sampling_ratio > 0 else max(math.ceil(bin_w), 0)
    base_h = torch.full((out_h, out_w), start_h, dtype=torch.float64)
    base_w = torch.full((out_h, out_w), start_w, dtype=torch.float64)
    if offset_k is not None:
        base_w = base_w + gamma * roi_w * offset_k[0].double()
        base_h = base_h + gamma * roi_h * offset_k[1].double()
    y0 = base_h + torch.arange(out_h, dtype=torch.float64)[:, None] * bin_h
    x0 = base_w + torch.arange(out_w, dtype=torch.float64)[None, :] * bin_w
    ys = y0[..., None] + (torch.arange(grid_h, dtype=torch.float64) + 0.5) * bin_h / max(grid_h, 1)
    xs = x0[..., None] + (torch.arange(grid_w, dtype=torch.float64) + 0.5) * bin_w / max(grid_w, 1)
    return ys, xs


def near_kink(ys, xs, tol=1e-4) -> bool:
    """True when a sample lies within tol of a point where the op is not smooth
    in the sample position: an integer coordinate (pixel rows/columns, the
    clamp at 0 and the validity edges -1, H, W are all integers). There,
    float32 rounding (or a finite-difference step) may land on either side:
    the offset gradient jumps, and at -1/H/W the value itself does."""
    return bool(((ys - ys.round()).abs() < tol).any() or ((xs - xs.round()).abs() < tol).any())


def case(
    rng,
    batch=2,
    channels=3,
    height=13,
    width=17,
    k=12,
    scale=0.5,
    output_size=(7, 7),
    sampling_ratio=0,
    gamma=0.1,
    with_offset=True,
    offset_scale=1.0,
    storage_dtype=torch.float64,
):
    """Random input, RoIs and offsets, float64, with every sample at least
    1e-4 px away from a kink (see near_kink): each RoI (and its offset) is
    redrawn until it is, so float32 runs, gradcheck and the float64 reference
    agree without masking anything. Values are first rounded to
    storage_dtype, so 16-bit runs see exactly the reference's inputs."""
    x = torch.randn(batch, channels, height, width, generator=rng, dtype=torch.float64)
    x = x.to(storage_dtype).double()
    rois, offsets = [], []
    for _ in range(k):
        for _attempt in range(1000):
            # One RoI as random_rois draws it (partly outside the map, or tiny), rounded to float32 first.
            roi = random_rois(1, batch, height, width, scale, rng)[0].float().to(storage_dtype).double()
            off = None
            if with_offset:
                off = torch.randn(2, *output_size, generator=rng, dtype=torch.float64) * offset_scale
                off = off.to(storage_dtype).double()
            ys, xs = sample_coords(roi.tolist(), off, output_size, scale, sampling_ratio, gamma)
            if not near_kink(ys, xs):
                break
        else:
            raise AssertionError("could not draw a kink-free RoI")
        rois.append(roi)
        offsets.append(off)
    rois_t = torch.stack(rois) if rois else torch.zeros(0, 5, dtype=torch.float64)
    offset_t = None
    if with_offset:
        offset_t = torch.stack(offsets) if offsets else torch.zeros(0, 2, *output_size, dtype=torch.float64)
    return x, rois_t, offset_t


# float32: sample positions round to ~1e-6 px, which on randn data moves a
# bilinear value by ~1e-5 and an offset gradient (x gamma * RoI size, summed
# over channels and samples) by ~1e-4; a logic error moves them by O(0.1).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}
GRAD_OFFSET_TOL = {torch.float32: dict(rtol=1e-3, atol=1e-3), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def reference_with_grads(x, rois, offset, output_size, scale, sr, gamma, grad_out):
    xr = x.detach().clone().requires_grad_()
    orr = None if offset is None else offset.detach().clone().requires_grad_()
    want = deform_roi_pool_reference(xr, rois, orr, output_size, scale, sr, gamma)
    inputs = (xr,) if orr is None else (xr, orr)
    grads = torch.autograd.grad(want, inputs, grad_out, allow_unused=True)
    return want.detach(), grads


def run_and_compare(device, dtype, x, rois, offset, geometry, grad_out, tol, offset_tol=None):
    """deform_roi_pool(x, rois, offset, *geometry) (output_size, spatial_scale, sampling_ratio, gamma) on
    device/dtype, forward and backward with grad_out, against the float64 reference on the same values; the offset's
    gradient within offset_tol (None: the caller compares it). Returns the reference's output and gradients and the
    op's gradients."""
    want, want_grads = reference_with_grads(x, rois, offset, *geometry, grad_out)
    xd = x.to(device, dtype).requires_grad_()
    od = None if offset is None else offset.to(device, dtype).requires_grad_()
    got = visdet_ops.deform_roi_pool(xd, rois.to(device, dtype), od, *geometry)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == want.shape
    torch.testing.assert_close(got.detach().cpu().double(), want, **tol)
    inputs = (xd,) if od is None else (xd, od)
    got_grads = torch.autograd.grad(got, inputs, grad_out.to(device, dtype))
    for g, inp in zip(got_grads, inputs, strict=True):
        assert g.dtype == dtype and g.shape == inp.shape
    torch.testing.assert_close(got_grads[0].cpu().double(), want_grads[0], **tol)
    if od is not None and offset_tol is not None:
        torch.testing.assert_close(got_grads[1].cpu().double(), want_grads[1], **offset_tol)
    return want, want_grads, got_grads


# ---------------------------------------------------------------- correctness


@pytest.mark.parametrize("with_offset", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 2])
@pytest.mark.parametrize("output_size", [(7, 7), (3, 5)])
@pytest.mark.parametrize("gamma", [0.1, 0.5])
def test_forward_backward_match_reference(device, dtype, rng, with_offset, sampling_ratio, output_size, gamma):
    x, rois, offset = case(
        rng, output_size=output_size, sampling_ratio=sampling_ratio, gamma=gamma, with_offset=with_offset
    )
    grad_out = torch.randn(rois.shape[0], x.shape[1], *output_size, generator=rng, dtype=torch.float64)
    geometry = (output_size, 0.5, sampling_ratio, gamma)
    _, want_grads, _ = run_and_compare(
        device, dtype, x, rois, offset, geometry, grad_out, TOL[dtype], GRAD_OFFSET_TOL[dtype]
    )
    if with_offset:
        # Offsets move samples by O(RoI size): a test whose offset gradient is all
        # zero would not test anything.
        assert want_grads[1].abs().max() > 1e-3


def test_large_offsets_push_samples_outside(device, rng):
    """gamma * offset of several RoI sizes: most samples leave the map, some on
    each side; values and gradients still match the reference."""
    x, rois, offset = case(rng, k=16, gamma=1.0, offset_scale=3.0, output_size=(4, 4))
    grad_out = torch.randn(16, 3, 4, 4, generator=rng, dtype=torch.float64)
    want, _, _ = run_and_compare(device, torch.float64, x, rois, offset, ((4, 4), 0.5, 2, 1.0), grad_out, {}, {})
    assert (want == 0).any() and (want != 0).any()


def test_without_offset_equals_roi_align_aligned(device, dtype, rng):
    """mmcv's deform_roi_pool computes RoI corners as roi * scale - 0.5 with no
    minimum size: RoIAlign's aligned=True geometry, average pooling. With no
    (or a zero) offset it is that RoIAlign, values and input gradient."""
    x, rois, _ = case(rng, channels=5, k=20, with_offset=False)
    x, rois = x.to(device, dtype), rois.to(device, dtype)
    for sr in (0, 2):
        xa = x.clone().requires_grad_()
        want = visdet_ops.roi_align(xa, rois, (7, 7), 0.5, sr, "avg", True)
        grad = torch.randn(want.shape, generator=rng, dtype=torch.float64).to(device, dtype)
        (want_grad,) = torch.autograd.grad(want, xa, grad)
        for offset in (None, torch.zeros(20, 2, 7, 7, device=device, dtype=dtype)):
            xd = x.clone().requires_grad_()
            got = visdet_ops.deform_roi_pool(xd, rois, offset, (7, 7), 0.5, sr, 0.1)
            torch.testing.assert_close(got, want, **TOL[dtype])
            torch.testing.assert_close(torch.autograd.grad(got, xd, grad)[0], want_grad, **TOL[dtype])
        # ...and not the legacy aligned=False flavour (so this test can tell them apart).
        legacy = visdet_ops.roi_align(x, rois, (7, 7), 0.5, sr, "avg", False)
        assert (legacy - want).abs().max() > 1e-2


def test_offset_gradient_matches_mmcv_inside_the_map(rng):
    """mmcv's closed-form offset gradient, evaluated as its kernel does, equals
    ours (the exact derivative) when every sample is inside the map."""
    height, width = 20, 24
    x = torch.randn(1, 4, height, width, generator=rng, dtype=torch.float64)
    rois = torch.tensor([[0, 6.0, 5.0, 30.0, 26.0], [0, 10.0, 12.0, 38.0, 30.0]], dtype=torch.float64)

    def draw_offset():
        return (torch.rand(2, 2, 3, 3, generator=rng, dtype=torch.float64) - 0.5) * 0.4

    def samples(offset):
        return [sample_coords(rois[k].tolist(), offset[k], (3, 3), 0.5, 2, 0.1) for k in range(2)]

    # The closed form and the derivative agree away from integer sample positions (the bilinear kinks):
    # redraw the rare offsets that put a sample within near_kink's distance of one (seed 2557757091 did).
    offset = draw_offset()
    for _ in range(100):
        if not any(near_kink(ys, xs) for ys, xs in samples(offset)):
            break
        offset = draw_offset()
    for ys, xs in samples(offset):
        assert ys.min() > 0 and ys.max() < height - 1 and xs.min() > 0 and xs.max() < width - 1
        assert not near_kink(ys, xs)
    grad_out = torch.randn(2, 4, 3, 3, generator=rng, dtype=torch.float64)
    od = offset.clone().requires_grad_()
    out = visdet_ops.deform_roi_pool(x, rois, od, 3, 0.5, 2, 0.1)
    (got,) = torch.autograd.grad(out, od, grad_out)
    torch.testing.assert_close(got, mmcv_offset_grad_formula(x, rois, offset, grad_out, 0.5, 2, 0.1))


def test_offset_gradient_differs_from_mmcv_only_at_the_border(rng):
    """Within a pixel of the border mmcv's closed form uses the unclamped sample
    position, so it is not the derivative of its own forward; ours is (the
    reference's autograd agrees with it). Pins the documented difference."""
    x = torch.randn(1, 2, 8, 8, generator=rng, dtype=torch.float64)
    # The first samples of this RoI lie at y, x ~ -0.62: valid, clamped to 0.
    rois = torch.tensor([[0, -1.0, -1.0, 6.0, 6.0]], dtype=torch.float64)
    offset = torch.full((1, 2, 2, 2), 0.01, dtype=torch.float64)
    ys, xs = sample_coords(rois[0].tolist(), offset[0], (2, 2), 1.0, 2, 0.1)
    assert -1 < ys[0, 0].min() < 0 and -1 < xs[0, 0].min() < 0
    assert ys[1, 1].min() > 0 and ys[1, 1].max() < 7 and xs[1, 1].min() > 0 and xs[1, 1].max() < 7
    grad_out = torch.randn(1, 2, 2, 2, generator=rng, dtype=torch.float64)
    od = offset.clone().requires_grad_()
    (ours,) = torch.autograd.grad(visdet_ops.deform_roi_pool(x, rois, od, 2, 1.0, 2, 0.1), od, grad_out)
    _, (_, exact) = reference_with_grads(x, rois, offset, (2, 2), 1.0, 2, 0.1, grad_out)
    torch.testing.assert_close(ours, exact)
    mmcv = mmcv_offset_grad_formula(x, rois, offset, grad_out, 1.0, 2, 0.1)
    assert (mmcv - ours).abs()[0, :, 0, 0].max() > 1e-3  # the corner bin: clamped samples
    torch.testing.assert_close(mmcv[0, :, 1, 1], ours[0, :, 1, 1])  # the inner bin agrees


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("with_offset", [True, False])
def test_gradcheck(device, rng, sampling_ratio, with_offset):
    x, rois, offset = case(
        rng, batch=2, channels=2, height=6, width=7, k=4, scale=1.0, output_size=(3, 2),
        sampling_ratio=sampling_ratio, gamma=0.3, with_offset=with_offset,
    )  # fmt: skip
    rois = rois.to(device)
    inputs = (x.to(device).requires_grad_(),) + ((offset.to(device).requires_grad_(),) if with_offset else ())
    fn = lambda inp, off=None: visdet_ops.deform_roi_pool(inp, rois, off, (3, 2), 1.0, sampling_ratio, 0.3)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("with_offset", [True, False])
def test_opcheck(device, rng, with_offset):
    x, rois, offset = case(rng, channels=2, height=6, width=7, k=4, scale=1.0, output_size=(3, 2))
    off = offset.to(device).requires_grad_() if with_offset else None
    args = (x.to(device).requires_grad_(), rois.to(device), off, 3, 2, 1.0, 2, 0.1)
    torch.library.opcheck(torch.ops.visdet_ops.deform_roi_pool.default, args)


def test_opcheck_backward_op(device, rng):
    x, rois, offset = case(rng, channels=2, height=6, width=7, k=4, scale=1.0, output_size=(3, 2))
    grad = torch.randn(4, 2, 3, 2, generator=rng, dtype=torch.float64)
    for off in (offset, None):
        args = (grad.to(device), x.to(device), rois.to(device), None if off is None else off.to(device), 1.0, 2, 0.1)
        torch.library.opcheck(torch.ops.visdet_ops._deform_roi_pool_backward.default, args)


def test_fake_and_meta():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 8, 20, 30)
        rois = torch.empty(5, 5)
        out = visdet_ops.deform_roi_pool(x, rois, torch.empty(5, 2, 7, 4), (7, 4))
        assert out.shape == (5, 8, 7, 4)
        assert visdet_ops.deform_roi_pool(x, rois, None, 3).shape == (5, 8, 3, 3)
        gi, go = torch.ops.visdet_ops._deform_roi_pool_backward(out, x, rois, torch.empty(5, 2, 7, 4), 1.0, 0, 0.1)
        assert gi.shape == x.shape and go.shape == (5, 2, 7, 4)
        _, go = torch.ops.visdet_ops._deform_roi_pool_backward(out, x, rois, None, 1.0, 0, 0.1)
        assert go.shape == (0,)
    meta = visdet_ops.deform_roi_pool(
        torch.empty(2, 8, 20, 30, device="meta"), torch.empty(5, 5, device="meta"), None, 7
    )
    assert meta.shape == (5, 8, 7, 7) and meta.device.type == "meta"


def test_empty_channels_gives_zero_offset_gradient(device):
    x = torch.randn(2, 0, 5, 5, device=device, requires_grad=True)
    rois = torch.tensor([[0, 0, 0, 3, 3.0]], device=device)
    offset = torch.randn(1, 2, 2, 2, device=device, requires_grad=True)
    out = visdet_ops.deform_roi_pool(x, rois, offset, 2)
    assert out.shape == (1, 0, 2, 2)
    out.sum().backward()
    assert torch.equal(offset.grad, torch.zeros_like(offset))


def test_non_contiguous(device, dtype, rng):
    x, rois, offset = case(rng, channels=4, output_size=(4, 4), sampling_ratio=2)
    grad_out = torch.randn(rois.shape[0], 4, 4, 4, generator=rng, dtype=torch.float64)
    want, want_grads = reference_with_grads(x, rois, offset, (4, 4), 0.5, 2, 0.1, grad_out)
    x_cl = x.to(device, dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
    rois_nc = torch.cat([rois, rois], 1).to(device, dtype)[:, ::2]
    rois_nc[:] = rois.to(device, dtype)
    offset_nc = offset.transpose(2, 3).contiguous().transpose(2, 3).to(device, dtype).requires_grad_()
    grad_nc = grad_out.to(device, dtype).transpose(2, 3).contiguous().transpose(2, 3)
    assert not x_cl.is_contiguous() and not rois_nc.is_contiguous()
    assert not offset_nc.is_contiguous() and not grad_nc.is_contiguous()
    got = visdet_ops.deform_roi_pool(x_cl, rois_nc, offset_nc, 4, 0.5, 2, 0.1)
    torch.testing.assert_close(got.detach().cpu().double(), want, **TOL[dtype])
    gi, go = torch.autograd.grad(got, (x_cl, offset_nc), grad_nc)
    torch.testing.assert_close(gi.cpu().double(), want_grads[0], **TOL[dtype])
    torch.testing.assert_close(go.cpu().double(), want_grads[1], **GRAD_OFFSET_TOL[dtype])


def test_degenerate_rois(device):
    """Zero-size, reversed and fully-outside RoIs, NaN and infinite offsets:
    finite values equal to the reference, no crash."""
    x = torch.randn(1, 2, 8, 8, device=device, dtype=torch.float64)
    rois = torch.tensor([*DEGENERATE_ROIS, [0, 1, 1, 6, 6]], device=device, dtype=torch.float64)
    offset = torch.randn(5, 2, 2, 2, device=device, dtype=torch.float64)
    for off in (None, offset):
        got = visdet_ops.deform_roi_pool(x, rois, off, 2, 1.0, 0, 0.1)
        want = deform_roi_pool_reference(x.cpu(), rois.cpu(), None if off is None else off.cpu(), (2, 2), 1.0, 0, 0.1)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.cpu(), want)
    bad = offset.clone()
    bad[4, 0, 0, 0] = float("nan")
    bad[4, 1, 1, 1] = float("inf")
    od = bad.requires_grad_()
    got = visdet_ops.deform_roi_pool(x, rois, od, 2, 1.0, 0, 0.1)
    # A NaN/inf offset moves its bin's samples off the map: that bin pools to 0.
    assert got[4, :, 0, 0].eq(0).all() and got[4, :, 1, 1].eq(0).all() and torch.isfinite(got).all()
    got.sum().backward()
    assert torch.isfinite(od.grad).all()


def test_large_random_float32_matches_reference(device, rng):
    x, rois, offset = case(rng, batch=2, channels=16, height=40, width=48, k=64, scale=0.125, output_size=(7, 7))
    want = deform_roi_pool_reference(x, rois, offset, (7, 7), 0.125, 0, 0.1)
    got = visdet_ops.deform_roi_pool(x.float().to(device), rois.float().to(device), offset.float().to(device), 7, 0.125)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[torch.float32])
    assert ((got.cpu().double() - want).norm() / want.norm()).item() < 1e-5


def test_mmcv_empty_offset_means_none(device, rng):
    """mmcv passes input.new_zeros(0) for "no offset"; so may its callers."""
    x, rois, _ = case(rng, with_offset=False)
    x, rois = x.to(device), rois.to(device)
    torch.testing.assert_close(
        visdet_ops.deform_roi_pool(x, rois, x.new_zeros(0), 7, 0.5),
        visdet_ops.deform_roi_pool(x, rois, None, 7, 0.5),
    )


def test_rois_get_no_gradient(device, rng):
    x, rois, offset = case(rng, k=3)
    x, rois, offset = x.to(device).requires_grad_(), rois.to(device).requires_grad_(), offset.to(device)
    visdet_ops.deform_roi_pool(x, rois, offset, 7, 0.5).sum().backward()
    assert rois.grad is None and x.grad is not None


# ---------------------------------------------------------------- dtypes and determinism


@pytest.mark.parametrize(
    "dtype, tol",
    [(torch.float16, dict(rtol=5e-3, atol=5e-3)), (torch.bfloat16, dict(rtol=3e-2, atol=3e-2))],
    ids=["f16", "bf16"],
)
def test_16bit_against_float64_reference(device, rng, dtype, tol):
    """16-bit storage, float32 arithmetic and float32 gradient accumulation: the
    result is the float64 reference on the same (rounded) inputs up to the
    final rounding to 16 bits."""
    x, rois, offset = case(rng, channels=8, k=24, storage_dtype=dtype)
    grad_out = torch.randn(24, 8, 7, 7, generator=rng, dtype=torch.float64).to(dtype).double()
    _, (_, want_go), (_, go) = run_and_compare(device, dtype, x, rois, offset, ((7, 7), 0.5, 0, 0.1), grad_out, tol)
    scale = want_go.abs().max().item()
    torch.testing.assert_close(go.cpu().double() / scale, want_go / scale, **tol)


def test_cuda_offset_gradient_is_deterministic(rng):
    """The offset gradient takes no atomics (fixed lanes, fixed shuffle order):
    bitwise equal across runs, with channels spread over every lane."""
    require_cuda()
    x, rois, offset = case(rng, channels=67, k=40)
    x, rois = x.float().cuda(), rois.float().cuda()
    grads = []
    for _ in range(3):
        od = offset.float().cuda().requires_grad_()
        out = visdet_ops.deform_roi_pool(x, rois, od, 7, 0.5)
        grads.append(torch.autograd.grad(out, od, torch.ones_like(out))[0])
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[0], grads[2])


def test_cpu_backward_is_deterministic(rng):
    """CPU: no atomics (disjoint channel ranges per thread); allowed, and
    bitwise reproducible, under torch.use_deterministic_algorithms."""
    x, rois, offset = case(rng, channels=8, k=30)
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(2):
            xd, od = x.clone().requires_grad_(), offset.clone().requires_grad_()
            out = visdet_ops.deform_roi_pool(xd, rois, od, 7, 0.5)
            grads.append(torch.autograd.grad(out.square().sum(), (xd, od)))
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


# ---------------------------------------------------------------- bad inputs


# What RoIOpTester.test_shared_checks does not cover: the checks of this op alone.
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(offset=torch.zeros(1, 2, 3, 3)),
            r"offset must have shape \[K, 2, PH, PW\] = \[1, 2, 2, 2\], got \[1, 2, 3, 3\]",
        ),
        (dict(offset=torch.zeros(2, 2, 2, 2)), r"offset must have shape \[K, 2, PH, PW\] = \[1, 2, 2, 2\]"),
        (dict(offset=torch.zeros(1, 8)), r"offset must have shape \[K, 2, PH, PW\]"),
        (dict(offset=torch.zeros(1, 2, 2, 2, dtype=torch.float64)), "input and offset must have the same dtype"),
        (dict(gamma=float("inf")), "gamma must be finite, got inf"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(input=torch.zeros(2, 3, 4, 4), rois=torch.zeros(1, 5), offset=None, output_size=2, spatial_scale=1.0)
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.deform_roi_pool(**args)


def test_bad_backward_inputs():
    x, rois = torch.zeros(2, 3, 4, 4), torch.zeros(1, 5)
    with pytest.raises(RuntimeError, match=r"grad_output must have shape \[K, C, PH, PW\] = \[1, 3, PH, PW\]"):
        torch.ops.visdet_ops._deform_roi_pool_backward(torch.zeros(2, 3, 2, 2), x, rois, None, 1.0, 0, 0.1)
    with pytest.raises(RuntimeError, match="grad_output must have 4 dimensions"):
        torch.ops.visdet_ops._deform_roi_pool_backward(torch.zeros(3, 2, 2), x, rois, None, 1.0, 0, 0.1)
    with pytest.raises(RuntimeError, match="input and grad_output must have the same dtype"):
        torch.ops.visdet_ops._deform_roi_pool_backward(
            torch.zeros(1, 3, 2, 2, dtype=torch.float64), x, rois, None, 1.0, 0, 0.1
        )
    with pytest.raises(RuntimeError, match=r"offset must have shape \[K, 2, PH, PW\] = \[1, 2, 2, 2\]"):
        torch.ops.visdet_ops._deform_roi_pool_backward(
            torch.zeros(1, 3, 2, 2), x, rois, torch.zeros(1, 2, 3, 3), 1.0, 0, 0.1
        )


def test_bad_inputs_cuda():
    """Mixed devices are refused with the op's message. (Bad RoI values are not refused on CUDA unless sync checks
    are on: test_cuda_invalid_rois_give_nan_without_a_sync, test_cuda_sync_roi_checks_raise.)"""
    require_cuda()
    x = torch.zeros(2, 3, 4, 4, device="cuda")
    rois = torch.zeros(1, 5, device="cuda")
    with pytest.raises(RuntimeError, match="input and rois must be on the same device"):
        visdet_ops.deform_roi_pool(x, torch.zeros(1, 5), None, 2)
    with pytest.raises(RuntimeError, match="input and rois must be on the same device"):
        visdet_ops.deform_roi_pool(x.cpu(), rois, None, 2)
    with pytest.raises(RuntimeError, match="input and offset must be on the same device"):
        visdet_ops.deform_roi_pool(x, rois, torch.zeros(1, 2, 2, 2), 2)


# ---------------------------------------------------------------- modules


# Parameter names and shapes of mmcv's modules, written from mmcv's source
# (open-mmlab/mmcv, mmcv/ops/deform_roi_pool.py, read at commit f36ef38b2d47;
# the structure is the same in later versions: DeformRoIPoolPack.offset_fc =
# Sequential(Linear(PH*PW*C, F), ReLU, Linear(F, F), ReLU, Linear(F, PH*PW*2));
# ModulatedDeformRoIPoolPack adds mask_fc = Sequential(Linear(PH*PW*C, F), ReLU,
# Linear(F, PH*PW*1), Sigmoid)), for the sizes mmdet's mdpool configs use:
# output_size=7, output_channels=256, deform_fc_channels=1024 (default).
MMCV_DEFORM_ROI_POOL_PACK_KEYS = {
    "offset_fc.0.weight": (1024, 7 * 7 * 256),
    "offset_fc.0.bias": (1024,),
    "offset_fc.2.weight": (1024, 1024),
    "offset_fc.2.bias": (1024,),
    "offset_fc.4.weight": (7 * 7 * 2, 1024),
    "offset_fc.4.bias": (7 * 7 * 2,),
}
MMCV_MODULATED_DEFORM_ROI_POOL_PACK_KEYS = {
    **MMCV_DEFORM_ROI_POOL_PACK_KEYS,
    "mask_fc.0.weight": (1024, 7 * 7 * 256),
    "mask_fc.0.bias": (1024,),
    "mask_fc.2.weight": (7 * 7 * 1, 1024),
    "mask_fc.2.bias": (7 * 7 * 1,),
}


@pytest.mark.parametrize(
    "cls, expected",
    [
        (DeformRoIPoolPack, MMCV_DEFORM_ROI_POOL_PACK_KEYS),
        (ModulatedDeformRoIPoolPack, MMCV_MODULATED_DEFORM_ROI_POOL_PACK_KEYS),
    ],
)
def test_pack_state_dict_matches_mmcv(cls, expected):
    module = cls(output_size=7, output_channels=256)
    sd = module.state_dict()
    assert list(sd) == list(expected)
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected
    # An mmdet checkpoint (here: random tensors under mmcv's keys) loads strictly.
    gen = torch.Generator().manual_seed(0)
    checkpoint = {k: torch.randn(shape, generator=gen) for k, shape in expected.items()}
    fresh = cls(output_size=(7, 7), output_channels=256, deform_fc_channels=1024)
    assert not fresh.load_state_dict(checkpoint, strict=True).missing_keys
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, checkpoint[k])
    # mmdet nests RoI layers as bbox_roi_extractor.roi_layers.<i>: prefixes compose.
    extractor = torch.nn.ModuleDict({"roi_layers": torch.nn.ModuleList([cls(7, 256)])})
    assert list(extractor.state_dict()) == [f"roi_layers.0.{k}" for k in expected]


def test_deform_roi_pool_module_has_no_state():
    m = DeformRoIPool((7, 5), spatial_scale=0.25, sampling_ratio=2, gamma=0.2)
    assert list(m.state_dict()) == []
    assert m.output_size == (7, 5) and m.spatial_scale == 0.25 and m.sampling_ratio == 2 and m.gamma == 0.2
    assert "gamma=0.2" in repr(m)


def test_pack_constructor_arguments_match_mmcv():
    m = DeformRoIPoolPack(3, 8, 16, 0.5, 2, 0.3)
    assert (m.output_size, m.output_channels, m.deform_fc_channels) == ((3, 3), 8, 16)
    assert (m.spatial_scale, m.sampling_ratio, m.gamma) == (0.5, 2, 0.3)
    assert torch.equal(m.offset_fc[-1].weight, torch.zeros(18, 16))
    assert torch.equal(m.offset_fc[-1].bias, torch.zeros(18))
    assert [type(layer) for layer in m.offset_fc] == [
        torch.nn.Linear,
        torch.nn.ReLU,
        torch.nn.Linear,
        torch.nn.ReLU,
        torch.nn.Linear,
    ]
    mm = ModulatedDeformRoIPoolPack(3, 8, 16, 0.5, 2, 0.3)
    assert [type(layer) for layer in mm.mask_fc] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear, torch.nn.Sigmoid]
    assert torch.equal(mm.mask_fc[2].weight, torch.zeros(9, 16))


def test_pack_init_matches_mmcv_formula():
    # mmcv 2.2.0, mmcv/ops/deform_roi_pool.py: the Linear layers keep torch's
    # default init (kaiming_uniform_(a=sqrt(5)): weight and bias uniform in
    # +-1/sqrt(fan_in)), except offset_fc[-1] and mask_fc[2], zeroed.
    ph, pw, c, fc = 3, 3, 4, 2048
    m = DeformRoIPoolPack((ph, pw), c, fc)
    mm = ModulatedDeformRoIPoolPack((ph, pw), c, fc)
    for name, layer, fan_in in [
        ("offset_fc.0", m.offset_fc[0], ph * pw * c),
        ("offset_fc.2", m.offset_fc[2], fc),
        ("offset_fc.0", mm.offset_fc[0], ph * pw * c),
        ("offset_fc.2", mm.offset_fc[2], fc),
        ("mask_fc.0", mm.mask_fc[0], ph * pw * c),
    ]:
        assert_uniform_init(layer.weight, fan_in**-0.5, f"{name}.weight")
        assert_uniform_init(layer.bias, fan_in**-0.5, f"{name}.bias")
    for name, layer in [
        ("offset_fc.4", m.offset_fc[4]),
        ("offset_fc.4", mm.offset_fc[4]),
        ("mask_fc.2", mm.mask_fc[2]),
    ]:
        assert_zero(layer.weight, f"{name}.weight")
        assert_zero(layer.bias, f"{name}.bias")


def test_modules_match_functional(device, rng):
    x, rois, offset = case(rng, channels=4, output_size=(3, 3), sampling_ratio=2, gamma=0.2)
    x, rois, offset = x.to(device), rois.to(device), offset.to(device)
    pool = DeformRoIPool(3, 0.5, 2, 0.2)
    torch.testing.assert_close(pool(x, rois, offset), visdet_ops.deform_roi_pool(x, rois, offset, 3, 0.5, 2, 0.2))
    plain = visdet_ops.deform_roi_pool(x, rois, None, 3, 0.5, 2, 0.2)
    torch.testing.assert_close(pool(x, rois), plain)

    # Fresh packs: zero offsets (plain RoIAlign-like pooling), mask sigmoid(0) = 0.5.
    pack = DeformRoIPoolPack(3, 4, 16, 0.5, 2, 0.2).to(device, torch.float64)
    mpack = ModulatedDeformRoIPoolPack(3, 4, 16, 0.5, 2, 0.2).to(device, torch.float64)
    torch.testing.assert_close(pack(x, rois), plain)
    torch.testing.assert_close(mpack(x, rois), 0.5 * plain)

    # Trained packs: the predicted offsets and mask are used as mmcv uses them.
    with torch.no_grad():
        for m in (pack, mpack):
            m.offset_fc[-1].weight.normal_(0, 0.05)
        mpack.mask_fc[2].weight.normal_(0, 0.05)
    k = rois.shape[0]
    offset_pred = pack.offset_fc(plain.flatten(1)).view(k, 2, 3, 3)
    torch.testing.assert_close(pack(x, rois), visdet_ops.deform_roi_pool(x, rois, offset_pred, 3, 0.5, 2, 0.2))
    offset_pred = mpack.offset_fc(plain.flatten(1)).view(k, 2, 3, 3)
    mask = mpack.mask_fc(plain.flatten(1)).view(k, 1, 3, 3)
    torch.testing.assert_close(mpack(x, rois), visdet_ops.deform_roi_pool(x, rois, offset_pred, 3, 0.5, 2, 0.2) * mask)


def test_packs_accept_zero_rois(device):
    x = torch.randn(1, 4, 6, 6, device=device)
    for cls in (DeformRoIPoolPack, ModulatedDeformRoIPoolPack):
        out = cls(3, 4, 16).to(device)(x, torch.zeros(0, 5, device=device))
        assert out.shape == (0, 4, 3, 3)


def test_packs_check_channels():
    for cls in (DeformRoIPoolPack, ModulatedDeformRoIPoolPack):
        with pytest.raises(
            ValueError, match=r"input must have shape \[N, output_channels=4, H, W\], got \[1, 3, 6, 6\]"
        ):
            cls(3, 4, 16)(torch.zeros(1, 3, 6, 6), torch.zeros(1, 5))


class TestRoIOp(RoIOpTester):
    """tests/ops/_rois.py's RoI tests, with offsets: an invalid RoI's offset gets no gradient either."""

    name = "deform_roi_pool"
    call = staticmethod(visdet_ops.deform_roi_pool)
    valid = dict(offset=None, output_size=2, spatial_scale=1.0)

    def fn(self, x, rois, offset, variant=None):
        return visdet_ops.deform_roi_pool(x, rois, offset, (7, 7), 0.5, 0, 0.1)

    def reference(self, x, rois, offset, variant=None):
        return deform_roi_pool_reference(x, rois, offset, (7, 7), 0.5, 0, 0.1)

    def case(self, rng):
        x, rois, _ = case(rng, k=4)
        return x, rois

    def extra(self, k, rng):
        return (torch.randn(k, 2, 7, 7, generator=rng, dtype=torch.float64) * 0.1,)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _deform_roi_pool(device, gen, output_size=3, sampling_ratio=2, module=False):
    from visdet_ops.ops.deform_roi_pool import DeformRoIPool, deform_roi_pool
    from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference

    x, rois = edges.roi_inputs(device, gen)
    out = edges.small(output_size, 1, 64, 3)
    offset = (0.5 * torch.randn(2, 2, out, out, generator=gen, dtype=torch.float64)).to(device)
    if module:
        got = DeformRoIPool(output_size, 1.0, sampling_ratio, 0.1)(x, rois, offset)
    else:
        got = deform_roi_pool(x, rois, offset, output_size, 1.0, sampling_ratio, 0.1)
    want = deform_roi_pool_reference(x.cpu(), rois.cpu(), offset.cpu(), (out, out), 1.0, sampling_ratio, 0.1)
    edges.close(got, want)


def _deform_roi_pool_op(device, gen, ph=3, pw=3, sr=2):
    from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference

    x, rois = edges.roi_inputs(device, gen)
    got = torch.ops.visdet_ops.deform_roi_pool(x, rois, None, ph, pw, 1.0, sr, 0.1)
    edges.close(got, deform_roi_pool_reference(x.cpu(), rois.cpu(), None, (ph, pw), 1.0, sr, 0.1))


def _deform_roi_pool_backward_op(device, gen, sr):
    from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference

    x, rois = edges.roi_inputs(device, gen)
    offset = (0.5 * torch.randn(2, 2, 3, 3, generator=gen, dtype=torch.float64)).to(device)
    go = torch.rand(2, 3, 3, 3, generator=gen, dtype=torch.float64).to(device)
    gx, goff = torch.ops.visdet_ops._deform_roi_pool_backward(go, x, rois, offset, 1.0, sr, 0.1)
    xr, orr = x.cpu().requires_grad_(), offset.cpu().requires_grad_()
    want = deform_roi_pool_reference(xr, rois.cpu(), orr, (3, 3), 1.0, sr, 0.1)
    wx, woff = torch.autograd.grad((want * go.cpu()).sum(), (xr, orr))
    edges.close(gx, wx)
    torch.testing.assert_close(goff.cpu(), woff, rtol=1e-6, atol=1e-8)


def _deform_roi_pool_pack(device, gen, cls_name, output_size=2, output_channels=3, deform_fc_channels=16, **kw):
    from visdet_ops.ops import deform_roi_pool as mod

    m = getattr(mod, cls_name)(output_size, output_channels, deform_fc_channels, **kw).to(device).double()
    x, rois = edges.roi_inputs(device, gen, c=m.output_channels)
    got = m(x, rois)
    # The last layers start at zero: plain RoIAlign aligned=True (times the 0.5 mask).
    want = mod.deform_roi_pool(x, rois, None, m.output_size, 1.0, m.sampling_ratio, 0.1)
    edges.close(got, want * (0.5 if cls_name.startswith("Modulated") else 1.0))


INTEGER_EDGE_ROWS = [
    *pooled_edge_rows(
        "deform_roi_pool",
        "DeformRoIPool",
        _deform_roi_pool,
        functools.partial(_deform_roi_pool, module=True),
        _deform_roi_pool_op,
        _deform_roi_pool_backward_op,
        (1, 16),
    ),
    *(
        edges.kw_row(f"{cls}-{arg}", arg, bounds, functools.partial(_deform_roi_pool_pack, cls_name=cls), at_bound=at)
        for pack_args in (
            (("output_channels", _args.CHANNELS, (1,)), ("deform_fc_channels", _args.CHANNELS, (1,))),
            (("output_size", _args.POOLED_SIZE, (1, 3)), ("sampling_ratio", _args.SAMPLING_RATIO, (1, 3))),
        )
        for cls in ("DeformRoIPoolPack", "ModulatedDeformRoIPoolPack")
        for arg, bounds, at in pack_args
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)
test_public_functions_name_the_users_argument = edges.public_message_test(
    [
        (
            lambda d: visdet_ops.deform_roi_pool(*tiny_inputs(d), None, 2**40),
            "deform_roi_pool: output_size must be in [1, 4096], got (1099511627776, 1099511627776)",
        )
    ]
)


def test_modules_and_fake_impls_name_the_argument():
    edges.assert_module_message(
        lambda: DeformRoIPoolPack(2**31, 4), "DeformRoIPoolPack: output_size must be in [1, 4096]"
    )
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.deform_roi_pool(
            torch.empty(2, 3, 8, 8), torch.empty(4, 5), None, 3, 3, 1.0, 2**40, 0.1
        ),
        "deform_roi_pool: sampling_ratio must be in",
    )


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_deform_roi_pool(gen, module=False):
    rois = amp.rois(gen, 10, 2, 4 * 28)
    offset_param = torch.nn.Linear(1, 10 * 2 * 7 * 7)
    amp.randomize(offset_param, gen, 0.1)
    with torch.no_grad():
        # Offsets exactly representable in bfloat16 and float16: the autocast kernel casts the float32 offset to
        # the features' dtype (docs/ops.md), and a sampling point that the rounding moves across a pixel edge
        # changes the offset gradient by a step (bilinear weights are not differentiable there), which is not
        # the precision this test measures. The float32 run then samples at exactly the same points.
        offset_param.weight.copy_(offset_param.weight.bfloat16().float())

    def body(p, img, rois):
        x = p["stem"](img)
        # A float32 offset (from a float32 parameter) beside 16-bit features.
        offset = p["offset"].weight.view(10, 2, 7, 7)
        if module:
            return visdet_ops.DeformRoIPool(7, 0.25, 2, 0.1)(x, rois, offset)
        return visdet_ops.deform_roi_pool(x, rois, offset, 7, 0.25, 2, 0.1)

    return amp.Case(body, (amp.img(gen), rois), amp.LOW, stem=amp.Stem(8, gen), offset=offset_param)


def case_pack(gen, cls):
    rois = amp.rois(gen, 10, 2, 4 * 28)
    layer = amp.randomize(cls(7, 8, deform_fc_channels=32, spatial_scale=0.25, sampling_ratio=2), gen, 0.05)
    return rois_autocast_case(gen, rois, None, layer, module=True)


AUTOCAST_CASES = {
    "deform_roi_pool": lambda g: case_deform_roi_pool(g),
    "DeformRoIPool": lambda g: case_deform_roi_pool(g, module=True),
    "DeformRoIPoolPack": lambda g: case_pack(g, DeformRoIPoolPack),
    "ModulatedDeformRoIPoolPack": lambda g: case_pack(g, ModulatedDeformRoIPoolPack),
}


def _opcheck_deform_roi_pool(device, dtype, gen):
    x, rois = amp.features(device, dtype, gen), amp.rois(gen, 5, 2, 40).to(device)
    offset = (torch.randn(5, 2, 3, 3, generator=gen) * 0.1).to(device).requires_grad_()
    return torch.ops.visdet_ops.deform_roi_pool.default, (x, rois, offset, 3, 3, 0.5, 2, 0.1)


AUTOCAST_OPCHECKS = {"deform_roi_pool": _opcheck_deform_roi_pool}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_DRP_MODS = ("DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack")


@st.composite
def _drp_case(draw, device):
    fn = draw(st.sampled_from(["deform_roi_pool", *_DRP_MODS]))
    module = fn != "deform_roi_pool"
    extra = ("sampling_ratio", "gamma") + (("offset_shape",) if fn in ("deform_roi_pool", "DeformRoIPool") else ())
    extra += ("channels", "ctor_int") if fn.endswith("Pack") else ()
    case = draw(roi_case(device, fn, extra, module=fn.endswith("Pack")))
    case["sampling_ratio"] = draw(st.sampled_from([0, -1, 1, 2, 3]))
    case["gamma"] = draw(st.sampled_from([0.0, 0.1, 0.5, -0.3]))
    if case["bad"] == "gamma":
        case["gamma"] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    case["offset"] = draw(st.sampled_from(["none", "tensor", "empty"])) if not fn.endswith("Pack") else "none"
    if fn.endswith("Pack"):
        case["shape"][1] = max(case["shape"][1], 1)
        case["deform_fc_channels"] = draw(st.integers(1, 8))
    o_opts, o_mixed = core.draw_tensors(draw, {"offset": 4}, case["t"]["input"]["dt"], device)
    case["t"]["offset"] = o_opts["offset"]
    if module:
        case["t"]["offset"]["dt"] = case["t"]["input"]["dt"]
    elif o_mixed and case["offset"] == "tensor" and case["expect"] == "ok":
        case["expect"] = "either"
    if case["bad"] == "sampling_ratio":
        case["sampling_ratio"] = draw(st.sampled_from([-2, 129, 2**31, 1.5, "1"]))
    elif case["bad"] == "offset_shape":
        case["offset"] = "tensor"
    elif case["bad"] == "ctor_int":
        case["arg"] = draw(st.sampled_from(["output_channels", "deform_fc_channels"]))
        case["value"] = draw(core.bad_int())
    return case


def _drp_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "deform_roi_pool")
    a_in, a_rois = roi_inputs(run, case)
    roi_unchecked(run, case)
    ph, pw = core.pair(case["output_size"]) if bad != "output_size" else (1, 1)
    k = a_rois.shape[0] if len(a_rois.shape) == 2 else 1
    oshape = [k, 2, ph, pw]
    if bad == "offset_shape":
        oshape[case["seed"] % 4] += 1
    a_off = run.arg("offset", run.randn(*oshape) * 0.3)
    xi, xr = a_in.x(grad=True), a_rois.x()
    if case["offset"] == "tensor":
        xo = a_off.x(grad=True)
    elif case["offset"] == "empty":
        xo = torch.empty(0, dtype=xi.dtype, device=xi.device)
    else:
        xo = None
    dt = core.worst(a_in.dt, a_off.dt) if case["offset"] == "tensor" else a_in.dt
    mixed = case["expect"] == "either"
    geometry = (case["output_size"], case["spatial_scale"], case["sampling_ratio"], case["gamma"])
    if fn == "deform_roi_pool":
        call = lambda: visdet_ops.deform_roi_pool(xi, xr, xo, *geometry)  # noqa: E731
    else:
        ctor_bad = bad in ("output_size", "sampling_ratio", "ctor_int")
        kwargs = dict(zip(("output_size", "spatial_scale", "sampling_ratio", "gamma"), geometry, strict=True))
        if fn.endswith("Pack"):
            kwargs["output_channels"] = case["shape"][1] + (1 if bad == "channels" else 0)
            kwargs["deform_fc_channels"] = case["deform_fc_channels"]
            if bad == "ctor_int":
                kwargs[case["arg"]] = case["value"]
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: getattr(visdet_ops, fn)(**kwargs), expect="error" if ctor_bad else "ok")
        if mod is None:
            return
        if a_in.floating:
            mod = mod.to(run.device, core.DTYPES[a_in.dt])
        if fn.endswith("Pack"):
            with torch.no_grad():  # the last layers start at zero (mmcv): non-zero offsets and masks
                mod.offset_fc[-1].weight.normal_(0, 0.1)
            if hasattr(mod, "mask_fc"):
                with torch.no_grad():
                    mod.mask_fc[2].weight.normal_(0, 0.1)
            call = lambda: mod(xi, xr)  # noqa: E731
        else:
            call = lambda: mod(xi, xr, xo)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        rol, ro = a_off.ref(grad=True)
        size, scale, ratio, gamma = (ph, pw), *geometry[1:]
        m64 = copy.deepcopy(mod).cpu().double() if fn.endswith("Pack") else None

        def reference(rois):
            if m64 is None:
                return deform_roi_pool_reference(
                    r, rois, ro if case["offset"] == "tensor" else None, size, scale, ratio, gamma
                )
            first = deform_roi_pool_reference(r, rois, None, size, scale, ratio, gamma).flatten(1)
            want = deform_roi_pool_reference(
                r, rois, m64.offset_fc(first).view(rois.size(0), 2, ph, pw), size, scale, ratio, gamma
            )
            if hasattr(m64, "mask_fc"):
                want = want * m64.mask_fc(first).view(rois.size(0), 1, ph, pw)
            return want

        want = reference(a_rois.r())
        edge = close_up_to_edges(out, want, a_rois.r(), reference, dt)
        core.out_dtype_ok(out, a_in.dt, mixed)
        if run.grads and out.numel() and not edge:
            core.backward_both(run, out, want)
            pairs = [("input", a_in, rl)] + ([("offset", a_off, rol)] if case["offset"] == "tensor" else [])
            core.check_grads(pairs, dt)

    run.outcome(call, check)


FUZZ = core.family("deform_roi_pool", ["deform_roi_pool", *_DRP_MODS], weight=0.7)((_drp_case, _drp_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "deform_roi_pool": lambda rng: (
        lambda x, r, o: visdet_ops.deform_roi_pool(x, r, o, 2, 0.5, 2, 0.125),
        (
            torch.randn(1, 2, 8, 8, generator=rng),
            torch.tensor([[0, 1.0, 1, 9, 9]]),
            torch.randn(1, 2, 2, 2, generator=rng),
        ),
        {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 0.5, "sampling_ratio": 2, "gamma": 0.125},
    ),
}
