from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import RoIAlignRotated
from visdet_ops.reference.roi_align import roi_align_reference
from visdet_ops.reference.roi_align_rotated import roi_align_rotated_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import require_cuda, torchvision_or_skip
from ._rois import (
    RoIOpTester,
    pooled_edge_rows,
    roi_case,
    rois_autocast_cases,
    sampled_roi_run,
)


def random_rois(k: int, batch: int, height: int, width: int, scale: float, rng: torch.Generator, angle=math.pi):
    """Rotated RoIs (batch_index, x, y, w, h, angle) in image coordinates: centres over the map and a little past
    it, sizes up to 60% of the map (some tiny), angles uniform in [-angle, angle)."""
    img_h, img_w = height / scale, width / scale
    cx = torch.rand(k, generator=rng, dtype=torch.float64) * img_w * 1.1 - img_w * 0.05
    cy = torch.rand(k, generator=rng, dtype=torch.float64) * img_h * 1.1 - img_h * 0.05
    w = torch.rand(k, generator=rng, dtype=torch.float64) * img_w * 0.6
    h = torch.rand(k, generator=rng, dtype=torch.float64) * img_h * 0.6
    theta = (torch.rand(k, generator=rng, dtype=torch.float64) * 2 - 1) * angle
    b = torch.randint(0, batch, (k,), generator=rng).double()
    return torch.stack([b, cx, cy, w, h, theta], 1)


def case(rng, batch=2, channels=3, height=13, width=17, k=12, scale=0.5, angle=math.pi):
    x = torch.randn(batch, channels, height, width, generator=rng, dtype=torch.float64)
    return x, random_rois(k, batch, height, width, scale, rng, angle)


def as_boxes(rois: torch.Tensor) -> torch.Tensor:
    """Rotated RoIs at angle 0 as axis-aligned ones (batch_index, x1, y1, x2, y2)."""
    b, cx, cy, w, h = rois[:, :5].unbind(1)
    return torch.stack([b, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)


# float32: sample positions round to ~1e-6 px, which on randn data moves a bilinear value by ~1e-5; a logic error
# moves it by O(0.1).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}


def _float32_agrees(x, rois, output_size, scale, sampling_ratio, aligned, clockwise, device) -> bool:
    """Whether float32 and float64 evaluations of the op on the same values agree: a sample that sits, to rounding,
    on the map's border (y == -1 or H, where the value jumps) or a bin size an integer to rounding (the adaptive
    grid's ceil) is decided by rounding. Continuous random draws land there with probability ~1e-6 per RoI."""
    ph, pw = output_size
    x, rois = x.to(device), rois.to(device)
    lo = torch.ops.visdet_ops.roi_align_rotated(
        x.float(), rois.float(), ph, pw, scale, sampling_ratio, aligned, clockwise
    )
    hi = torch.ops.visdet_ops.roi_align_rotated(x, rois, ph, pw, scale, sampling_ratio, aligned, clockwise)
    return torch.allclose(lo.double(), hi, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("clockwise", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 2])
@pytest.mark.parametrize("output_size", [(7, 7), (3, 5)])
def test_forward_backward_match_reference(device, dtype, rng, aligned, clockwise, sampling_ratio, output_size):
    scale = 0.5
    x, rois = case(rng)
    rois = rois.to(dtype).double()  # the values the op sees
    want = roi_align_rotated_reference(x.requires_grad_(), rois, output_size, scale, sampling_ratio, aligned, clockwise)
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64)
    (want_grad,) = torch.autograd.grad(want, x, grad_out)

    xd = x.detach().to(device, dtype).requires_grad_()
    got = visdet_ops.roi_align_rotated(
        xd, rois.to(device, dtype), output_size, scale, sampling_ratio, aligned, clockwise
    )
    assert got.dtype == dtype and got.device.type == device.type
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **TOL[dtype])
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, dtype))
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **TOL[dtype])


# mmcv's own test (tests/test_ops/test_roi_align_rotated.py): a 2x2 output, sampling_ratio 2, aligned, the gradient
# of ones; its values through our names.
MMCV_INPUTS = [
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, 0]]),
    ([[[[1.0, 2.0], [3.0, 4.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, np.pi / 2]]),
    ([[[[1.0, 2.0], [3.0, 4.0]], [[4.0, 3.0], [2.0, 1.0]]]], [[0.0, 0.5, 0.5, 1.0, 1.0, 0]]),
    (
        [[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
        [[0.0, 1.5, 1.5, 3.0, 3.0, 0]],
    ),
    (
        [[[[1.0, 2.0, 5.0, 6.0], [3.0, 4.0, 7.0, 8.0], [9.0, 10.0, 13.0, 14.0], [11.0, 12.0, 15.0, 16.0]]]],
        [[0.0, 1.5, 1.5, 3.0, 3.0, np.pi / 2]],
    ),
]
_GRAD_4X4 = [
    [0.47265625, 0.42968750, 0.42968750, 0.04296875],
    [0.42968750, 0.39062500, 0.39062500, 0.03906250],
    [0.42968750, 0.39062500, 0.39062500, 0.03906250],
    [0.04296875, 0.03906250, 0.03906250, 0.00390625],
]
MMCV_OUTPUTS = [
    ([[[[1.0, 1.25], [1.5, 1.75]]]], [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
    ([[[[1.5, 1], [1.75, 1.25]]]], [[[[3.0625, 0.4375], [0.4375, 0.0625]]]]),
    (
        [[[[1.0, 1.25], [1.5, 1.75]], [[4.0, 3.75], [3.5, 3.25]]]],
        [[[[3.0625, 0.4375], [0.4375, 0.0625]], [[3.0625, 0.4375], [0.4375, 0.0625]]]],
    ),
    ([[[[1.9375, 4.75], [7.5625, 10.375]]]], [[_GRAD_4X4]]),
    ([[[[7.5625, 1.9375], [10.375, 4.75]]]], [[_GRAD_4X4]]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=["f32", "f64", "f16"])
def test_mmcv_cases(device, dtype):
    for (x_np, rois_np), (want, want_grad) in zip(MMCV_INPUTS, MMCV_OUTPUTS, strict=True):
        x = torch.tensor(np.array(x_np), dtype=dtype, device=device, requires_grad=True)
        rois = torch.tensor(np.array(rois_np), dtype=dtype, device=device)
        out = visdet_ops.roi_align_rotated(x, rois, (2, 2), 1.0, 2, True)
        out.backward(torch.ones_like(out))
        assert np.allclose(out.detach().float().cpu().numpy(), np.array(want), atol=1e-3)
        assert np.allclose(x.grad.float().cpu().numpy(), np.array(want_grad), atol=1e-3)
        # The reference on the same values (16-bit RoIs: pi / 2 rounded).
        ref = roi_align_rotated_reference(x.detach().cpu().double(), rois.cpu().double(), (2, 2), 1.0, 2, True)
        tol = TOL.get(dtype, dict(rtol=2e-3, atol=2e-3))  # float16: the output's rounding
        torch.testing.assert_close(out.detach().cpu().double(), ref, **tol)
        if dtype == torch.float64:
            m = RoIAlignRotated((2, 2), 1.0, 2)
            assert torch.autograd.gradcheck(m, (x.detach().requires_grad_(), rois), eps=1e-5, atol=1e-5)
    with pytest.warns(DeprecationWarning, match="'out_size' is deprecated"):
        old = RoIAlignRotated(out_size=(2, 2), spatial_scale=1.0, sample_num=2)
    torch.testing.assert_close(
        old(x, rois), RoIAlignRotated(output_size=(2, 2), spatial_scale=1.0, sampling_ratio=2)(x, rois)
    )


def test_against_torchvision_at_angle_zero(device, dtype, rng):
    """At angle 0 a rotated RoI is the axis-aligned box around it: torchvision's roi_align with the same aligned flag
    and sampling ratio (aligned=False clamps the size to 1 about the RoI's centre here, about its corner in
    roi_align: sizes of a pixel or more only)."""
    tv = torchvision_or_skip()
    x, rois = case(rng, channels=8, height=25, width=31, k=40, scale=0.25, angle=0.0)
    rois[:, 3:5] = rois[:, 3:5].clamp(min=4.0)  # at least a pixel at scale 1/4
    x, rois = x.to(device, dtype), rois.to(device, dtype)
    for aligned in (True, False):
        for sr in (0, 2):
            for clockwise in (False, True):
                got = visdet_ops.roi_align_rotated(x, rois, (7, 6), 0.25, sr, aligned, clockwise)
                want = tv.roi_align(x, as_boxes(rois), (7, 6), 0.25, sr, aligned)
                torch.testing.assert_close(got, want, **TOL[dtype])


def test_against_roi_align_at_angle_zero(device, dtype, rng):
    """Where torchvision is absent too: at angle 0 the op and its reference are roi_align (avg) and roi_align's
    reference on the box around each RoI (roi_align is itself checked against torchvision)."""
    x, rois = case(rng, channels=4, height=20, width=23, k=20, scale=0.5, angle=0.0)
    rois[:, 3:5] = rois[:, 3:5].clamp(min=2.0)  # aligned=False: at least a pixel (see above)
    rois = rois.to(dtype).double()
    for aligned in (True, False):
        for sr in (0, 1, 3):
            ref = roi_align_rotated_reference(x, rois, (5, 4), 0.5, sr, aligned)
            axis = roi_align_reference(x, as_boxes(rois), (5, 4), 0.5, sr, "avg", aligned)
            torch.testing.assert_close(ref, axis, **TOL[torch.float64])
            xd, rd = x.to(device, dtype), rois.to(device, dtype)
            got = visdet_ops.roi_align_rotated(xd, rd, (5, 4), 0.5, sr, aligned)
            want = visdet_ops.roi_align(xd, as_boxes(rd), (5, 4), 0.5, sr, "avg", aligned)
            torch.testing.assert_close(got, want, **TOL[dtype])


def test_reference_against_torchvision_at_angle_zero(rng):
    """The reference itself, on its own: at angle 0 it is torchvision's roi_align."""
    tv = torchvision_or_skip()
    x, rois = case(rng, channels=4, height=20, width=23, k=20, scale=0.5, angle=0.0)
    rois[:, 3:5] = rois[:, 3:5].clamp(min=2.0)
    for aligned in (True, False):
        for sr in (0, 1, 3):
            want = tv.roi_align(x, as_boxes(rois), (5, 4), 0.5, sr, aligned)
            got = roi_align_rotated_reference(x, rois, (5, 4), 0.5, sr, aligned)
            torch.testing.assert_close(got, want, **TOL[torch.float64])


def _interior_case(rng, k=10):
    """A map and RoIs whose samples all lie strictly inside it (no border clamping), with centres off the pixel
    grid: the rotation identities below hold there exactly in real arithmetic."""
    x = torch.randn(2, 3, 24, 26, generator=rng, dtype=torch.float64)
    centre = torch.rand(k, 2, generator=rng, dtype=torch.float64) * 4 + torch.tensor([11.0, 10.0])
    size = torch.rand(k, 2, generator=rng, dtype=torch.float64) * 10 + 2
    theta = (torch.rand(k, 1, generator=rng, dtype=torch.float64) * 2 - 1) * math.pi
    b = torch.randint(0, 2, (k, 1), generator=rng).double()
    return x, torch.cat([b, centre, size, theta], 1)


def test_rotation_identities(device, rng):
    """The reference and the op against identities of the rotation itself:
    - angle + pi turns every sample about the centre: bin (ph, pw) takes bin (PH-1-ph, PW-1-pw)'s samples, so the
      output is the 180-degree turn of the output (any map);
    - on a map symmetric under a 180-degree turn about a RoI's centre, angle + pi gives the same output;
    - angles beyond +-pi: angle + 2 pi and angle - 4 pi are angle;
    - clockwise=True with angle is clockwise=False with -angle (exactly);
    - angle + pi/2 with w and h swapped and the output size swapped: the output turned by 90 degrees."""
    x, rois = _interior_case(rng)
    xd = x.to(device)
    for fn in (
        lambda r, size=(4, 3), **kw: roi_align_rotated_reference(x, r, size, 1.0, 2, True, **kw),
        lambda r, size=(4, 3), **kw: visdet_ops.roi_align_rotated(xd, r.to(device), size, 1.0, 2, True, **kw).cpu(),
    ):
        base = fn(rois)
        turned = rois.clone()
        turned[:, 5] += math.pi
        torch.testing.assert_close(fn(turned), base.flip(-2, -1), rtol=1e-9, atol=1e-9)
        for period in (2 * math.pi, -4 * math.pi):
            wrapped = rois.clone()
            wrapped[:, 5] += period
            torch.testing.assert_close(fn(wrapped), base, rtol=1e-9, atol=1e-9)
        mirrored = rois.clone()
        mirrored[:, 5] = -rois[:, 5]
        torch.testing.assert_close(fn(mirrored, clockwise=True), base, rtol=0, atol=0)
        quarter = rois[:, [0, 1, 2, 4, 3, 5]].clone()
        quarter[:, 5] += math.pi / 2
        torch.testing.assert_close(fn(quarter, size=(3, 4)), base.transpose(-2, -1).flip(-1), rtol=1e-9, atol=1e-9)
    # A 24x26 map symmetric under a 180-degree turn about its centre, pixel (y, x) = (11.5, 12.5), and RoIs centred
    # there: (x, y) = (13, 12) in RoI coordinates, which aligned shifts by -0.5.
    sym = x + x.flip(-2, -1)
    centred = rois.clone()
    centred[:, 1], centred[:, 2] = 13.0, 12.0
    turned = centred.clone()
    turned[:, 5] += math.pi
    want = roi_align_rotated_reference(sym, centred, (4, 3), 1.0, 2, True)
    torch.testing.assert_close(
        roi_align_rotated_reference(sym, turned, (4, 3), 1.0, 2, True), want, rtol=1e-9, atol=1e-9
    )
    got = visdet_ops.roi_align_rotated(sym.to(device), turned.to(device), (4, 3), 1.0, 2, True).cpu()
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("aligned", [True, False])
def test_gradcheck(device, rng, aligned):
    x, rois = case(rng, batch=2, channels=2, height=6, width=7, k=4, scale=1.0)
    x = x.to(device).requires_grad_()
    rois = rois.to(device)
    fn = lambda inp: visdet_ops.roi_align_rotated(inp, rois, (3, 2), 1.0, 2, aligned, True)  # noqa: E731
    # The CUDA backward accumulates with atomics (docs/ops.md): two runs may round differently.
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5, nondet_tol=1e-12)


def test_opcheck(device, rng):
    x, rois = case(rng, channels=2, height=6, width=7, k=4, scale=1.0)
    args = (x.to(device).requires_grad_(), rois.to(device), 3, 2, 1.0, 2, True, False)
    torch.library.opcheck(torch.ops.visdet_ops.roi_align_rotated.default, args)
    grad = torch.randn(4, 2, 3, 2, generator=rng, dtype=torch.float64).to(device)
    back = (grad, rois.to(device), 2, 2, 6, 7, 1.0, 0, False, True)
    torch.library.opcheck(torch.ops.visdet_ops._roi_align_rotated_backward.default, back)


def test_no_gradient_for_rois(device, rng):
    """As mmcv: rois get no gradient (None), even when they require one."""
    x, rois = case(rng, k=3)
    xd, rd = x.to(device).requires_grad_(), rois.to(device).requires_grad_()
    out = visdet_ops.roi_align_rotated(xd, rd, 2, 0.5)
    out.sum().backward()
    assert rd.grad is None and xd.grad is not None


def test_backward_paths_and_strided_grad(device, dtype, rng):
    """The CUDA backward's paths: one block per RoI and 16 channels (37 here: a partial last group) sums into a
    shared-memory tile of the box around the RoI's rotated samples, in several channel passes when the box is large,
    or adds to global memory directly when one channel's box does not fit (6,144 float / 3,072 double pixels: here
    the RoI over the whole map); samples kept in shared memory (small grids) or computed where used (large adaptive
    grids). Tiny RoIs, large ones, RoIs partly outside, adaptive and fixed sampling, a width that is a multiple of 4
    (the vector flush) and one that is not. The gradient is read through its strides: a transposed and an expanded
    one give what their contiguous copies give."""
    boxes = [[0, 11.0, 12.5, 2.5, 1.0, 0.3], [1, 22.0, 20.0, 36.0, 28.0, -0.7], [0, 32.0, 29.0, 24.0, 42.0, 2.0],
             [1, 47.5, 43.0, 101.5, 90.0, 0.1], [0, 100.0, 90.0, 60.0, 60.0, -2.5],
             [1, 30.0, 40.0, 20.0, 70.0, 1.57]]  # fmt: skip
    rois = torch.tensor(boxes, dtype=torch.float64)
    tol = TOL[dtype]
    for width in (100, 98):
        x = torch.randn(2, 37, 90, width, generator=rng, dtype=torch.float64)
        channels, height, _ = x.shape[1:]
        for sr in (0, 2):
            want = roi_align_rotated_reference(x.requires_grad_(), rois, (7, 6), 1.0, sr, True)
            grad_t = torch.randn(6, channels, 6, 7, generator=rng, dtype=torch.float64).transpose(2, 3)
            (want_grad,) = torch.autograd.grad(want, x, grad_t, retain_graph=True)
            (want_ones,) = torch.autograd.grad(want, x, torch.ones_like(want))
            xd = x.detach().to(device, dtype).requires_grad_()
            got = visdet_ops.roi_align_rotated(xd, rois.to(device, dtype), (7, 6), 1.0, sr, True)
            torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **tol)
            gd = grad_t.to(device, dtype)
            assert not gd.is_contiguous()
            (got_grad,) = torch.autograd.grad(got, xd, gd, retain_graph=True)
            torch.testing.assert_close(got_grad.cpu().double(), want_grad, **tol)
            (got_ones,) = torch.autograd.grad(got.sum(), xd)  # an expanded, stride-0 gradient
            torch.testing.assert_close(got_ones.cpu().double(), want_ones, **tol)
            x = x.detach()


def test_empty_batch_and_channels(device):
    out = visdet_ops.roi_align_rotated(
        torch.randn(2, 0, 5, 5, device=device), torch.tensor([[0, 2, 2, 3, 3, 0.5]], device=device), 2, 1.0
    )
    assert out.shape == (1, 0, 2, 2)
    x = torch.randn(2, 3, 5, 5, device=device, requires_grad=True)
    out = visdet_ops.roi_align_rotated(x, torch.empty(0, 6, device=device), (2, 3), 1.0)
    assert out.shape == (0, 3, 2, 3)
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_non_contiguous_and_channels_last(device, dtype, rng):
    x, rois = case(rng, channels=4)
    rois = rois.to(dtype).double()
    want = roi_align_rotated_reference(x, rois, (4, 4), 0.5, 2, True)
    x_cl = x.to(device, dtype).contiguous(memory_format=torch.channels_last)
    rois_nc = torch.cat([rois, rois], 1).to(device, dtype)[:, ::2]
    rois_nc[:] = rois.to(device, dtype)
    assert not x_cl.is_contiguous() and not rois_nc.is_contiguous()
    got = visdet_ops.roi_align_rotated(x_cl, rois_nc, 4, 0.5, 2, True)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])
    xg = x_cl.detach().requires_grad_()
    visdet_ops.roi_align_rotated(xg, rois_nc, 4, 0.5, 2, True).sum().backward()
    xr = x.clone().requires_grad_()
    roi_align_rotated_reference(xr, rois, (4, 4), 0.5, 2, True).sum().backward()
    torch.testing.assert_close(xg.grad.cpu().double(), xr.grad, **TOL[dtype])


def test_degenerate_rois(device):
    """Zero-size, negative-size (aligned: a mirrored grid with a fixed sampling ratio, no samples with an adaptive
    one), fully-outside RoIs and angles far beyond +-pi give finite values, no crash; aligned=False makes a
    degenerate RoI 1x1."""
    x = torch.randn(1, 2, 8, 8, device=device, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor(
        [[0, 3, 3, 0, 0, 0.4], [0, 4, 4, -3, 2, 0.2], [0, 4.2, 3.7, -2, -3, 1.0], [0, 100, 100, 20, 30, 0.5],
         [0, -50, -50, 10, 5, -1.0], [0, 4, 4, 3, 5, 1e4], [0, 3.3, 4.1, 0, 5, -7.0]],
        device=device, dtype=torch.float64,
    )  # fmt: skip
    for sr in (0, 2):
        for aligned in (True, False):
            got = visdet_ops.roi_align_rotated(x, rois, 2, 1.0, sr, aligned)
            want = roi_align_rotated_reference(x.detach().cpu(), rois.cpu(), (2, 2), 1.0, sr, aligned)
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got.detach().cpu(), want)
            (grad,) = torch.autograd.grad(got.sum(), x)
            assert torch.isfinite(grad).all()
            if sr == 0 and aligned:  # adaptive: a zero or negative size has no samples, 0 and no gradient
                assert torch.equal(got[[0, 1, 2]].detach().cpu(), torch.zeros(3, 2, 2, 2, dtype=torch.float64))


@pytest.mark.parametrize("poison", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize("sampling_ratio", [0, 2, 128], ids=["sr0", "sr2", "sr128"])
def test_samples_outside_the_map_stay_zero_beside_non_finite_pixels(device, poison, sampling_ratio):
    """A sample outside the map is 0 and only the pixels a sample inside touches matter: the CUDA forward loads an
    outside sample's corners from the plane's first pixel and selects 0 (a select, not a zero weight, so a NaN or inf
    there stays out). The first pixel of every plane is poisoned; RoIs half outside (sampled from the table and, at
    sampling_ratio 128, where used) and one wholly outside whose samples never touch it."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 9, 11, generator=g, dtype=torch.float64)
    x[:, :, 0, 0] = poison
    x[:, :, 0, 1] = 1.0  # beside the poisoned pixel, read by in-map samples near the corner only
    rois = torch.tensor(
        [[0, 10.5, 4.0, 6, 3, 0.3], [1, 5.0, 8.8, 4, 4, -0.7], [0, -30, -30, 4, 4, 0.5], [1, 5, 4, 3, 3, 0.2]],
        dtype=torch.float64,
    )  # fmt: skip
    want = roi_align_rotated_reference(x, rois, (3, 3), 1.0, sampling_ratio, True)
    assert torch.isfinite(want).all()  # the case never touches the poisoned pixel inside the map
    for dtype in (torch.float32, torch.float64):
        got = visdet_ops.roi_align_rotated(x.to(device, dtype), rois.to(device, dtype), 3, 1.0, sampling_ratio, True)
        torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])
    assert torch.equal(want[2], torch.zeros(3, 3, 3, dtype=torch.float64))


def test_huge_sampling_ratio_is_bounded(device, rng):
    """sampling_ratio at its bound (128): 16384 samples per bin, computed where used (too many to keep per RoI)."""
    x, rois = case(rng, channels=2, height=6, width=7, k=2, scale=1.0)
    got = visdet_ops.roi_align_rotated(x.to(device), rois.to(device), 2, 1.0, 128, True)
    want = roi_align_rotated_reference(x, rois, (2, 2), 1.0, 128, True)
    torch.testing.assert_close(got.cpu(), want)


def test_large_random_float32_matches_reference(device, rng):
    x, rois = case(rng, batch=2, channels=16, height=40, width=48, k=64, scale=0.125)
    rois = rois.float().double()
    want = roi_align_rotated_reference(x, rois, (7, 7), 0.125, 0, True)
    got = visdet_ops.roi_align_rotated(x.float().to(device), rois.float().to(device), 7, 0.125, 0, True)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[torch.float32])
    assert ((got.cpu().double() - want).norm() / want.norm()).item() < 1e-5


# What RoIOpTester.test_shared_checks does not cover: the checks of this op alone.
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rois=torch.zeros(6)), "rois must have 2 dimensions"),
        (dict(output_size=(2, 4097)), r"output_size must be in \[1, 4096\]"),
        (dict(sampling_ratio=-2), r"sampling_ratio must be in \[-1, 128\], got -2"),
        (dict(sampling_ratio=129), r"sampling_ratio must be in \[-1, 128\], got 129"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(input=torch.zeros(2, 3, 4, 4), rois=torch.zeros(1, 6), output_size=2, spatial_scale=1.0)
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.roi_align_rotated(**args)


def test_bad_module_arguments():
    with pytest.raises(ValueError, match=r"RoIAlignRotated: sampling_ratio must be in \[-1, 128\], got -3"):
        RoIAlignRotated(7, 1.0, -3)
    with pytest.raises(ValueError, match=r"RoIAlignRotated: output_size must be positive"):
        RoIAlignRotated((7, 0), 1.0)
    with pytest.raises(TypeError, match="output_size"):
        RoIAlignRotated(7.5, 1.0)


def test_bad_inputs_cuda():
    require_cuda()
    x = torch.zeros(2, 3, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="input and rois must be on the same device"):
        visdet_ops.roi_align_rotated(x, torch.zeros(1, 6), 2, 1.0)


# 16-bit inputs (the CPU computes them through float32, as CUDA does) against the float64 reference on the same
# (rounded) values: what is left is the final rounding to 11 (float16) or 8 (bfloat16) significant bits.
HALF_TOL = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("aligned", [True, False])
def test_half_matches_reference(device, rng, dtype16, aligned):
    for _ in range(20):
        x, rois = case(rng)
        x, rois = x.to(dtype16).double(), rois.to(dtype16).double()
        # 16-bit RoIs (few significant bits) put samples exactly on the map's border, where float32 and float64
        # may fall on either side: such draws are redrawn.
        if _float32_agrees(x, rois, (7, 7), 0.5, 0, aligned, False, device):
            break
    want = roi_align_rotated_reference(x.requires_grad_(), rois, (7, 7), 0.5, 0, aligned)
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64).to(dtype16).double()
    (want_grad,) = torch.autograd.grad(want, x, grad_out)
    xd = x.detach().to(device, dtype16).requires_grad_()
    out = visdet_ops.roi_align_rotated(xd, rois.to(device, dtype16), 7, 0.5, 0, aligned)
    assert out.dtype == dtype16
    torch.testing.assert_close(out.detach().cpu().double(), want.detach(), **HALF_TOL[dtype16])
    (got_grad,) = torch.autograd.grad(out, xd, grad_out.to(device, dtype16))
    assert got_grad.dtype == dtype16
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **HALF_TOL[dtype16])


def test_backward_op_skips_invalid_rois(device):
    """The backward op is callable directly and trusts the forward's RoI check: a RoI with a batch index outside
    [0, N) or a non-finite value adds nothing (and touches nothing out of bounds)."""
    grad = torch.ones(3, 1, 2, 2, device=device, dtype=torch.float64)
    rois = torch.tensor(
        [[0, 2, 2, 3, 3, 0.5], [4, 2, 2, 3, 3, 0], [0, 2, 2, 3, 3, float("nan")]], device=device, dtype=torch.float64
    )
    got = torch.ops.visdet_ops._roi_align_rotated_backward(grad, rois, 1, 1, 4, 4, 1.0, 2, True, False)
    x = torch.zeros(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    want = roi_align_rotated_reference(x, rois[:1].cpu(), (2, 2), 1.0, 2, True)
    (want_grad,) = torch.autograd.grad(want, x, torch.ones_like(want))
    torch.testing.assert_close(got.cpu(), want_grad)


def test_autograd_is_registered_from_python():
    """One autograd formula for the classic and the stable build: torch.library.register_autograd in
    visdet_ops/ops/roi_align_rotated.py, for the op and its backward."""
    for name in ("roi_align_rotated", "_roi_align_rotated_backward"):
        op = getattr(torch.ops.visdet_ops, name).default
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Autograd")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    x = torch.randn(1, 1, 4, 4, requires_grad=True)
    rois = torch.tensor([[0, 2, 2, 3, 3, 0.5]])
    direct = torch.ops.visdet_ops.roi_align_rotated(x, rois, 2, 2, 1.0, 0, True, False)
    assert "GeneratedBackwardFor_visdet_ops_roi_align_rotated" in direct.grad_fn.name()
    out = visdet_ops.roi_align_rotated(x, rois, 2, 1.0)  # held: see _rois.assert_autograd_registered_from_python
    assert out.grad_fn.name() == "roi_align_rotated_eagerBackward"


def test_cuda_backward_raises_the_determinism_alert():
    require_cuda()
    x = torch.randn(1, 2, 8, 8, device="cuda", requires_grad=True)
    out = visdet_ops.roi_align_rotated(x, torch.tensor([[0, 4, 4, 3, 3, 0.5]], device="cuda"), 2, 1.0)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="roi_align_rotated backward \\(CUDA\\) does not have a deterministic"):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


def test_cpu_backward_is_deterministic(rng):
    x, rois = case(rng, channels=5, k=30)
    grads = []
    for _ in range(2):
        xd = x.clone().requires_grad_()
        torch.use_deterministic_algorithms(True)
        try:
            visdet_ops.roi_align_rotated(xd, rois, 7, 0.5, 0).sum().backward()
        finally:
            torch.use_deterministic_algorithms(False)
        grads.append(xd.grad)
    assert torch.equal(grads[0], grads[1])


def test_module_matches_functional(device, rng):
    x, rois = case(rng)
    m = RoIAlignRotated((7, 5), spatial_scale=0.5, sampling_ratio=2, aligned=False, clockwise=True)
    assert list(m.state_dict()) == []
    assert repr(m) == (
        "RoIAlignRotated(output_size=(7, 5), spatial_scale=0.5, sampling_ratio=2, aligned=False, clockwise=True)"
    )
    got = m(x.to(device), rois.to(device))
    want = visdet_ops.roi_align_rotated(x, rois, (7, 5), 0.5, 2, False, True)
    torch.testing.assert_close(got.cpu(), want)


def test_module_old_argument_names_as_mmcv():
    """mmcv's RoIAlignRotated takes out_size= / sample_num= with a deprecation warning."""
    with pytest.warns(DeprecationWarning, match="RoIAlignRotated: 'out_size' is deprecated, use 'output_size'"):
        m = RoIAlignRotated(out_size=(3, 4), spatial_scale=0.5, sample_num=2)
    assert m.output_size == (3, 4) and m.sampling_ratio == 2 and m.spatial_scale == 0.5
    with pytest.raises(TypeError, match="RoIAlignRotated: got both 'out_size'"):
        RoIAlignRotated(out_size=3, output_size=3, spatial_scale=1.0)


def test_mmcv_module_path():
    from visdet_ops.roi_align_rotated import RoIAlignRotated as M
    from visdet_ops.roi_align_rotated import roi_align_rotated as f

    assert M is RoIAlignRotated and f is visdet_ops.roi_align_rotated


class TestRoIOp(RoIOpTester):
    """tests/ops/_rois.py's RoI tests, with rotated RoIs [K, 6]."""

    name = "roi_align_rotated"
    call = staticmethod(visdet_ops.roi_align_rotated)
    valid = dict(output_size=2, spatial_scale=1.0)
    tol = TOL[torch.float64]
    roi_columns = 6
    bad_rois = [
        [5, 3, 3, 5, 5, 0.1],
        [-1, 3, 3, 5, 5, 0.1],
        [0, float("nan"), 3, 5, 5, 0.1],
        [1, 3, 3, 5, 5, -math.inf],
    ]
    bad_batch_roi = [5.0, 1, 1, 1, 1, 0]
    inf_roi = [0, 1, 1, float("inf"), 1, 0]

    def fn(self, x, rois, variant=None):
        return visdet_ops.roi_align_rotated(x, rois, 3, 0.5, 2, True, False)

    def reference(self, x, rois, variant=None):
        return roi_align_rotated_reference(x, rois, (3, 3), 0.5, 2, True, False)

    def case(self, rng):
        return case(rng, k=4)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _edge_inputs(device, gen):
    x, boxes = edges.roi_inputs(device, gen)
    b, x1, y1, x2, y2 = boxes.cpu().unbind(1)
    angle = torch.tensor([0.4, -1.1], dtype=torch.float64)
    rois = torch.stack([b, (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, angle], 1)
    return x, rois.to(device)


def _roi_align_rotated(device, gen, output_size=3, sampling_ratio=2, fn=None):
    from visdet_ops.ops.roi_align_rotated import roi_align_rotated
    from visdet_ops.reference.roi_align_rotated import roi_align_rotated_reference

    x, rois = _edge_inputs(device, gen)
    got = (fn or roi_align_rotated)(x, rois, output_size, 1.0, sampling_ratio)
    out = edges.small(output_size, 1, 64, 3)
    edges.close(got, roi_align_rotated_reference(x.cpu(), rois.cpu(), (out, out), 1.0, sampling_ratio, True))


def _roi_align_rotated_op(device, gen, ph=3, pw=3, sr=2):
    from visdet_ops.reference.roi_align_rotated import roi_align_rotated_reference

    x, rois = _edge_inputs(device, gen)
    got = torch.ops.visdet_ops.roi_align_rotated(x, rois, ph, pw, 1.0, sr, True, False)
    edges.close(got, roi_align_rotated_reference(x.cpu(), rois.cpu(), (ph, pw), 1.0, sr, True))


def _roi_align_rotated_backward_op(device, gen, sr):
    from visdet_ops.reference.roi_align_rotated import roi_align_rotated_reference

    x, rois = _edge_inputs(device, gen)
    go = torch.rand(2, 3, 3, 3, generator=gen, dtype=torch.float64).to(device)
    got = torch.ops.visdet_ops._roi_align_rotated_backward(go, rois, 2, 3, 8, 8, 1.0, sr, True, False)
    xr = x.cpu().requires_grad_()
    (want,) = torch.autograd.grad(
        (roi_align_rotated_reference(xr, rois.cpu(), (3, 3), 1.0, sr, True) * go.cpu()).sum(), xr
    )
    edges.close(got, want)


def _roi_align_rotated_module(device, gen, output_size=3, sampling_ratio=2):
    from visdet_ops.ops.roi_align_rotated import RoIAlignRotated

    m = RoIAlignRotated(output_size, 1.0, sampling_ratio)
    _roi_align_rotated(device, gen, m.output_size[0], m.sampling_ratio, fn=lambda x, r, *_: m(x, r))


INTEGER_EDGE_OP_COVERED_OTHERWISE = {
    f"op._roi_align_rotated_backward-{arg}": "the forward input's shape, passed by autograd"
    for arg in ("batch_size", "channels", "height", "width")
}

INTEGER_EDGE_ROWS = pooled_edge_rows(
    "roi_align_rotated",
    "RoIAlignRotated",
    _roi_align_rotated,
    _roi_align_rotated_module,
    _roi_align_rotated_op,
    _roi_align_rotated_backward_op,
    (1, 128),
)
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def _amp_rotated_rois(gen, k, batch, size):
    """float32 rotated RoIs over amp.rois' boxes, angles in [-pi, pi)."""
    b = amp.rois(gen, k, batch, size)
    angle = (torch.rand(k, generator=gen) * 2 - 1) * math.pi
    return torch.stack(
        [b[:, 0], (b[:, 1] + b[:, 3]) / 2, (b[:, 2] + b[:, 4]) / 2, b[:, 3] - b[:, 1], b[:, 4] - b[:, 2], angle], 1
    )


AUTOCAST_CASES = rois_autocast_cases(
    lambda gen: _amp_rotated_rois(gen, 12, 2, 4 * 28),
    {"RoIAlignRotated": lambda: visdet_ops.RoIAlignRotated(7, 0.25, 2, True, False)},
    roi_align_rotated=lambda x, rois: visdet_ops.roi_align_rotated(x, rois, 7, 0.25, 2, True, False),
)


AUTOCAST_OPCHECKS = {
    "roi_align_rotated": lambda device, dtype, gen: (
        torch.ops.visdet_ops.roi_align_rotated.default,
        (amp.features(device, dtype, gen), _amp_rotated_rois(gen, 5, 2, 40).to(device), 3, 3, 0.5, 2, True, False),
    ),
}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


@st.composite
def _roi_align_rotated_case(draw, device):
    fn = draw(st.sampled_from(["roi_align_rotated", "RoIAlignRotated"]))
    case = draw(roi_case(device, fn, ("sampling_ratio",)))
    case["sampling_ratio"] = draw(st.sampled_from([0, -1, 1, 2, 3]))
    case["aligned"] = draw(st.booleans())
    case["clockwise"] = draw(st.booleans())
    if fn == "RoIAlignRotated":
        case["old_names"] = draw(core.one_in(5))
    if case["bad"] == "sampling_ratio":
        case["sampling_ratio"] = draw(st.sampled_from([-2, 129, 2**31, 1.5, "1"]))
    return case


def _roi_align_rotated_run(case):
    sampled_roi_run(
        case,
        "roi_align_rotated",
        visdet_ops.RoIAlignRotated,
        visdet_ops.roi_align_rotated,
        ("output_size", "spatial_scale", "sampling_ratio", "aligned", "clockwise"),
        roi_align_rotated_reference,
        ctor_bad=("output_size", "sampling_ratio"),
        rotated=True,
    )


FUZZ = core.family("roi_align_rotated", ["roi_align_rotated", "RoIAlignRotated"])(
    (_roi_align_rotated_case, _roi_align_rotated_run)
)


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# registered forward op -> its custom-domain node's call, inputs and attributes (tests/test_onnx.py's
# test_custom_nodes)
ONNX_CUSTOM_CASES = {
    "roi_align_rotated": lambda rng: (
        lambda x, r: visdet_ops.roi_align_rotated(x, r, (3, 2), 0.5, 2, True, True),
        (torch.randn(1, 2, 8, 8, generator=rng), torch.tensor([[0, 6.0, 5.0, 7.0, 4.0, 0.6]])),
        {
            "pooled_height": 3,
            "pooled_width": 2,
            "spatial_scale": 0.5,
            "sampling_ratio": 2,
            "aligned": 1,
            "clockwise": 1,
        },
    ),
}
