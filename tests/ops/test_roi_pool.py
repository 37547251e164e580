from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import RoIPool
from visdet_ops.ops import _args
from visdet_ops.reference.roi_pool import roi_pool_reference

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
    random_rois,
    roi_case,
    roi_inputs,
    roi_unchecked,
    rois_autocast_cases,
    tiny_inputs,
)

HALF_DTYPES = [torch.float16, torch.bfloat16]


def distinct_input(batch: int, channels: int, height: int, width: int, rng: torch.Generator) -> torch.Tensor:
    """float64 values, all different within a plane (so a bin's maximum is unique and the
    gradient goes to one known pixel) and exact in every float dtype down to bfloat16:
    integers in [-128, 128) over 16, which needs planes of at most 256 elements."""
    plane = height * width
    assert plane <= 256
    perm = torch.rand(batch * channels, plane, generator=rng).argsort(1)
    return ((perm - 128).double() / 16).reshape(batch, channels, height, width)


def dyadic_grad(shape, rng: torch.Generator) -> torch.Tensor:
    """Gradients in multiples of 1/16: their sums are exact in float32 in any order."""
    return torch.randint(-64, 64, shape, generator=rng).double() / 16


def case(rng, batch=2, channels=3, height=13, width=17, k=16, scale=0.5):
    x = distinct_input(batch, channels, height, width, rng)
    # RoIs partly or wholly outside the map, some smaller than a pixel, some empty (x2 + 1 <= x1).
    return x, random_rois(k, batch, height, width, scale, rng, margin=0.1, extent=0.7, shrink=2.5)


def run_and_compare(x, rois, output_size, scale, device, dtype, rng):
    """Forward and backward on device/dtype against the reference: both exact, since the
    output is an input element and the gradient a sum of multiples of 1/16 (rounded once
    to a 16-bit dtype, as the reference's sum is)."""
    rois_k = rois.to(device, dtype)
    want = roi_pool_reference(x.requires_grad_(), rois_k.cpu(), output_size, scale)
    grad_out = dyadic_grad(want.shape, rng)
    (want_grad,) = torch.autograd.grad(want, x, grad_out)

    xd = x.detach().to(device, dtype).requires_grad_()
    got = visdet_ops.roi_pool(xd, rois_k, output_size, scale)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == want.shape
    torch.testing.assert_close(got.detach().cpu(), want.detach().to(dtype), rtol=0, atol=0)
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, dtype))
    assert got_grad.dtype == dtype
    torch.testing.assert_close(got_grad.cpu(), want_grad.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("output_size", [(7, 7), (3, 5), (1, 1)])
@pytest.mark.parametrize("scale", [0.5, 1.0, 0.3])
def test_forward_backward_match_reference(device, dtype, rng, output_size, scale):
    x, rois = case(rng, scale=scale)
    run_and_compare(x, rois, output_size, scale, device, dtype, rng)


@pytest.mark.parametrize("dtype16", HALF_DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("output_size", [(7, 7), (2, 3)])
def test_half_matches_reference(device, rng, dtype16, output_size):
    x, rois = case(rng, scale=0.5)
    run_and_compare(x, rois, output_size, 0.5, device, dtype16, rng)


def test_hand_computed():
    """mmcv's rule on a case small enough to do by hand: no rounding of the corners, the
    far corner inclusive, bins floor/ceil. RoI (x 0.5..2.4, y 1..1) at scale 1 spans
    x in [0.5, 3.4), y in [1, 2): two bins across: [floor(0.5), ceil(1.95)) = [0, 2) and
    [floor(1.95), ceil(3.4)) = [1, 4); one bin down: row 1."""
    x = torch.arange(20, dtype=torch.float64).reshape(1, 1, 4, 5)
    x[0, 0, 1] = torch.tensor([3.0, 9.0, 1.0, 2.0, 50.0])
    rois = torch.tensor([[0, 0.5, 1.0, 2.4, 1.0]], dtype=torch.float64)
    out = visdet_ops.roi_pool(x, rois, (1, 2))
    torch.testing.assert_close(out, torch.tensor([[[[9.0, 9.0]]]], dtype=torch.float64))
    _, argmax = torch.ops.visdet_ops.roi_pool(x, rois, 1, 2, 1.0)
    assert argmax.dtype == torch.int32 and argmax.flatten().tolist() == [6, 6]  # row 1, column 1


def test_against_torchvision(device, dtype, rng):
    """torchvision rounds the scaled corners to integers first; for integer RoIs at
    spatial_scale 1 with x2 >= x1 the two rules pick the same pixels, for these output
    sizes: with 7 bins the float edge (7 * (w / 7)) differs from w for some widths
    (e.g. 29), and torchvision's ceil then takes one more column."""
    tv = torchvision_or_skip()
    batch, height, width, k = 2, 14, 18, 60
    x = distinct_input(batch, 4, height, width, rng).to(device, dtype)
    x1 = torch.randint(-5, width + 2, (k,), generator=rng)
    y1 = torch.randint(-5, height + 2, (k,), generator=rng)
    w = torch.randint(0, 25, (k,), generator=rng)
    h = torch.randint(0, 25, (k,), generator=rng)
    b = torch.randint(0, batch, (k,), generator=rng)
    rois = torch.stack([b, x1, y1, x1 + w, y1 + h], 1).to(device, dtype)
    for output_size in ((4, 8), (3, 5), (2, 2)):
        xg = x.clone().requires_grad_()
        xt = x.clone().requires_grad_()
        got = visdet_ops.roi_pool(xg, rois, output_size, 1.0)
        want = tv.roi_pool(xt, rois, output_size, 1.0)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        grad = dyadic_grad(got.shape, rng).to(device, dtype)
        got.backward(grad)
        want.backward(grad)
        torch.testing.assert_close(xg.grad, xt.grad, rtol=0, atol=0)


def test_gradcheck(device, rng):
    x, rois = case(rng, batch=2, channels=2, height=6, width=7, k=5, scale=1.0)
    x = x.to(device).requires_grad_()
    rois = rois.to(device)
    assert torch.autograd.gradcheck(lambda inp: visdet_ops.roi_pool(inp, rois, (3, 2), 1.0), (x,), eps=1e-6, atol=1e-5)


def test_opcheck(device, rng):
    x, rois = case(rng, channels=2, height=6, width=7, k=4, scale=1.0)
    args = (x.to(device).requires_grad_(), rois.to(device), 3, 2, 1.0)
    torch.library.opcheck(torch.ops.visdet_ops.roi_pool.default, args)


def test_opcheck_backward_op(device, rng):
    x, rois = case(rng, channels=2, height=6, width=7, k=4, scale=1.0)
    out, argmax = torch.ops.visdet_ops.roi_pool(x.to(device), rois.to(device), 3, 2, 1.0)
    args = (torch.randn(out.shape, generator=rng, dtype=torch.float64).to(device), rois.to(device), argmax, 2, 2, 6, 7)
    torch.library.opcheck(torch.ops.visdet_ops._roi_pool_backward.default, args)


def test_empty_batch_and_channels(device):
    out = visdet_ops.roi_pool(
        torch.randn(2, 0, 5, 5, device=device), torch.tensor([[0, 0, 0, 3, 3.0]], device=device), 2
    )
    assert out.shape == (1, 0, 2, 2)


def test_non_contiguous(device, dtype, rng):
    x, rois = case(rng, channels=4)
    rois_k = rois.to(dtype)
    want = roi_pool_reference(x, rois_k, (4, 4), 0.5)
    x_cl = x.to(device, dtype).contiguous(memory_format=torch.channels_last)
    rois_nc = torch.cat([rois_k, rois_k], 1).to(device)[:, ::2]
    rois_nc[:] = rois_k.to(device)
    assert not x_cl.is_contiguous() and not rois_nc.is_contiguous()
    got = visdet_ops.roi_pool(x_cl, rois_nc, 4, 0.5)
    torch.testing.assert_close(got.cpu(), want.to(dtype), rtol=0, atol=0)


def test_degenerate_rois(device):
    """Empty (x2 + 1 <= x1), one-pixel, fully outside and huge RoIs: finite values, the
    reference's answer, and no gradient where the output is an empty bin's 0."""
    x = torch.randn(1, 2, 8, 8, device=device, dtype=torch.float64, requires_grad=True)
    # Rows 1 to 4 (reversed, outside, outside, empty) pool empty bins.
    rois = [*DEGENERATE_ROIS, [0, 5, 5, 4, 4], [0, -1e30, -1e30, 1e30, 1e30]]
    rois = torch.tensor(rois, device=device, dtype=torch.float64)
    got = visdet_ops.roi_pool(x, rois, 2)
    want = roi_pool_reference(x.detach().cpu(), rois.cpu(), (2, 2), 1.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.detach().cpu(), want)
    assert torch.equal(got[1:5].detach().cpu(), torch.zeros(4, 2, 2, 2, dtype=torch.float64))
    got[1:5].sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_backward_op_ignores_out_of_range_argmax(device):
    """The backward op is callable directly: an argmax outside the plane, or a RoI with a
    batch index outside [0, N), adds nothing (and reads or writes nothing out of bounds)."""
    grad = torch.ones(3, 1, 1, 1, device=device)
    rois = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 0, 1, 1], [7, 0, 0, 1, 1.0]], device=device)
    argmax = torch.tensor([5, 16, 3], dtype=torch.int32, device=device).reshape(3, 1, 1, 1)
    got = torch.ops.visdet_ops._roi_pool_backward(grad, rois, argmax, 1, 1, 4, 4)
    want = torch.zeros(1, 1, 4, 4)
    want.view(-1)[5] = 1
    torch.testing.assert_close(got.cpu(), want)


def test_autograd_is_registered_from_python():
    assert_autograd_registered_from_python("roi_pool", visdet_ops.roi_pool, 2, 2, 1.0)


# What RoIOpTester.test_shared_checks does not cover: the checks of this op alone.
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(output_size=(2, -1)), r"roi_pool: output_size must be positive, got \(2, -1\)"),
        (dict(spatial_scale=float("inf")), "roi_pool: spatial_scale must be a positive finite number, got inf"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = dict(input=torch.zeros(2, 3, 4, 4), rois=torch.zeros(1, 5), output_size=2, spatial_scale=1.0)
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.roi_pool(**args)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(argmax=torch.zeros(1, 3, 2, 2, dtype=torch.int64)), "roi_pool: argmax must be int32, got Long"),
        (
            dict(argmax=torch.zeros(1, 3, 2, 1, dtype=torch.int32)),
            "roi_pool: argmax must have the shape of grad_output",
        ),
        (dict(grad_output=torch.zeros(2, 3, 2, 2)), r"roi_pool: grad_output must have shape \[1, 3, PH, PW\]"),
        (dict(channels=-1), "roi_pool: the input shape must be non-negative"),
    ],
)
def test_bad_backward_inputs(change, match):
    args = dict(
        grad_output=torch.zeros(1, 3, 2, 2),
        rois=torch.zeros(1, 5),
        argmax=torch.zeros(1, 3, 2, 2, dtype=torch.int32),
        batch_size=2,
        channels=3,
        height=4,
        width=4,
    )
    args.update(change)
    with pytest.raises(RuntimeError, match=match):
        torch.ops.visdet_ops._roi_pool_backward(*args.values())


def test_cuda_bad_device_pairs():
    require_cuda()
    x = torch.zeros(2, 3, 4, 4, device="cuda")
    with pytest.raises(RuntimeError, match="roi_pool: input and rois must be on the same device"):
        visdet_ops.roi_pool(x, torch.zeros(1, 5), 2)


def test_module():
    m = RoIPool((7, 7), spatial_scale=0.25)
    assert list(m.state_dict()) == []
    assert repr(m) == "RoIPool(output_size=(7, 7), spatial_scale=0.25)"
    assert repr(RoIPool(3)) == "RoIPool(output_size=(3, 3), spatial_scale=1.0)"


def test_module_matches_functional(device, rng):
    x, rois = case(rng)
    got = RoIPool((2, 4), 0.5)(x.to(device), rois.to(device))
    torch.testing.assert_close(got.cpu(), visdet_ops.roi_pool(x, rois, (2, 4), 0.5), rtol=0, atol=0)


class TestRoIOp(RoIOpTester):
    """tests/ops/_rois.py's RoI tests (distinct inputs: the maxima, and so the result, are exact)."""

    name = "roi_pool"
    call = staticmethod(visdet_ops.roi_pool)
    valid = dict(output_size=2, spatial_scale=1.0)
    tol = dict(rtol=0, atol=0)

    def fn(self, x, rois, variant=None):
        return visdet_ops.roi_pool(x, rois, 3, 0.5)

    def reference(self, x, rois, variant=None):
        return roi_pool_reference(x, rois, (3, 3), 0.5)

    def case(self, rng):
        return case(rng, k=4)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _roi_pool(device, gen, output_size=3, module=False):
    from visdet_ops.ops.roi_pool import RoIPool, roi_pool
    from visdet_ops.reference.roi_pool import roi_pool_reference

    x, rois = edges.roi_inputs(device, gen)
    got = RoIPool(output_size)(x, rois) if module else roi_pool(x, rois, output_size)
    edges.close(got, roi_pool_reference(x.cpu(), rois.cpu(), (output_size, output_size), 1.0))


def _roi_pool_op(device, gen, pooled_height=3, pooled_width=3):
    from visdet_ops.reference.roi_pool import roi_pool_reference

    x, rois = edges.roi_inputs(device, gen)
    got, _ = torch.ops.visdet_ops.roi_pool(x, rois, pooled_height, pooled_width, 1.0)
    edges.close(got, roi_pool_reference(x.cpu(), rois.cpu(), (pooled_height, pooled_width), 1.0))


INTEGER_EDGE_ROWS = [
    edges.kw_row("roi_pool-output_size", "output_size", _args.POOLED_SIZE, _roi_pool),
    edges.kw_row("RoIPool-output_size", "output_size", _args.POOLED_SIZE, functools.partial(_roi_pool, module=True)),
    *(
        edges.kw_row(f"op.roi_pool-{arg}", arg, _args.POOLED_SIZE, _roi_pool_op)
        for arg in ("pooled_height", "pooled_width")
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)
test_public_functions_name_the_users_argument = edges.public_message_test(
    [
        (
            lambda d: visdet_ops.roi_pool(*tiny_inputs(d), (7, 4097)),
            "roi_pool: output_size must be in [1, 4096], got (7, 4097)",
        ),
        (  # before any work: nothing is passed but the bad value
            lambda d: visdet_ops.roi_pool(None, None, (2**31, 7)),
            "roi_pool: output_size must be in [1, 4096], got (2147483648, 7)",
        ),
    ]
)


def test_modules_and_fake_impls_name_the_argument():
    edges.assert_module_message(lambda: RoIPool(0), "RoIPool: output_size must be positive, got (0, 0)")
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.roi_pool(torch.empty(2, 3, 8, 8), torch.empty(4, 5), 3, 2**63 - 1, 1.0),
        "roi_pool: pooled_width must be in",
    )


# The backward op's integer arguments that are not a user's: the forward input's shape, which autograd passes and the
# backward allocates its gradient with (checked non-negative and for int64 overflow, csrc/ops/roi_pool/roi_pool.cpp).
INTEGER_EDGE_OP_COVERED_OTHERWISE = {
    f"op._roi_pool_backward-{arg}": "the forward input's shape, passed by autograd"
    for arg in ("batch_size", "channels", "height", "width")
}


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


AUTOCAST_CASES = rois_autocast_cases(
    lambda gen: amp.rois(gen, 12, 2, 4 * 28),
    {"RoIPool": lambda: visdet_ops.RoIPool(5, 0.25)},
    roi_pool=lambda x, rois: visdet_ops.roi_pool(x, rois, 5, 0.25),
)


AUTOCAST_OPCHECKS = {
    "roi_pool": lambda device, dtype, gen: (
        torch.ops.visdet_ops.roi_pool.default,
        (amp.features(device, dtype, gen), amp.rois(gen, 5, 2, 40).to(device), 3, 3, 0.5),
    ),
}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


@st.composite
def _roi_pool_case(draw, device):
    fn = draw(st.sampled_from(["roi_pool", "RoIPool"]))
    return draw(roi_case(device, fn))


def _roi_pool_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "roi_pool")
    a_in, a_rois = roi_inputs(run, case, distinct=True)
    roi_unchecked(run, case)
    xi, xr = a_in.x(grad=True), a_rois.x()
    dt = a_in.dt
    if fn == "RoIPool":
        mod = run.construct(
            lambda: visdet_ops.RoIPool(case["output_size"], case["spatial_scale"]),
            expect="error" if bad == "output_size" else "ok",
        )
        if mod is None:
            return
        call = lambda: mod(xi, xr)  # noqa: E731
    else:
        call = lambda: visdet_ops.roi_pool(xi, xr, case["output_size"], case["spatial_scale"])  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        # The reference computes bin edges in the kernels' compute dtype for the RoIs' own dtype.
        size = core.pair(case["output_size"])
        if r.size(1):
            want = roi_pool_reference(r, xr.detach().cpu(), size, case["spatial_scale"])
        else:  # the reference's reshape(channels, -1) takes no channel-less map
            want = r.sum() * torch.zeros(xr.size(0), 0, *size, dtype=torch.float64)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, dt, False)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            core.check_grads([("input", a_in, rl)], dt, check_values=a_in.layout != "e")

    run.outcome(call, check)


FUZZ = core.family("roi_pool", ["roi_pool", "RoIPool"])((_roi_pool_case, _roi_pool_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# registered forward op -> the test of its standard ONNX translation (tests/test_onnx.py's
# test_every_forward_op_has_a_case)
ONNX_COVERED_OTHERWISE = {
    "roi_pool": "test_onnx_roi_pool (MaxRoiPool)",
}


@ox.needs_exporter
def test_onnx_roi_pool(onnx_table, rng):
    def compare(i, got, want):
        # mmcv's bins, each pooled by MaxRoiPool: the same pixels, so the same maximum.
        assert torch.equal(got, want), f"head {i}: largest difference {(got - want).abs().max()}"

    def heads():
        return [
            visdet_ops.RoIPool((7, 5), 0.5),
            visdet_ops.RoIPool(3, 0.25),
            visdet_ops.RoIPool(2, 1.0),
            visdet_ops.RoIPool(4, 1 / 16),
        ]

    sizes = ((3, 4, 13, 17, 80, 0.5), (2, 2, 16, 11, 40, 1 / 16), (1, 1, 4, 6, 0, 1))
    onnx_export_and_run(onnx_table, heads, "MaxRoiPool", sizes, rng, compare)
