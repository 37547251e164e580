from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import CornerPool
from visdet_ops.reference.corner_pool import corner_pool_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from ..conftest import require_cuda

MODES = ["top", "bottom", "left", "right"]
_POOL_FNS = {f"{mode}_pool": mode for mode in MODES}


def ties_input(rng, shape=(2, 3, 9, 11)) -> torch.Tensor:
    # Small integers: many equal maxima along every scan, so the tie rule of
    # the gradient is exercised, and every value is exact in every dtype.
    return torch.randint(-3, 4, shape, generator=rng).double()


def call_by_name(fn: str, x: torch.Tensor, mode: str) -> torch.Tensor:
    """fn: a public name of the module (a `<mode>_pool` function ignores `mode`)."""
    if fn == "CornerPool":
        return visdet_ops.CornerPool(mode)(x)
    if fn == "corner_pool":
        return visdet_ops.corner_pool(x, mode)
    return getattr(visdet_ops, fn)(x)


def check(x, grad_out, mode, xd, grad_out_d, **tol):
    """corner_pool of xd (x on a device, in a dtype, a layout) against the float64 reference of x: the forward
    selects input values, so it is exact (NaN where the reference has NaN); the gradient for grad_out within tol."""
    xr = x.clone().requires_grad_()
    want = corner_pool_reference(xr, mode)
    (want_grad,) = torch.autograd.grad(want, xr, grad_out)
    xd.requires_grad_()
    got = visdet_ops.corner_pool(xd, mode)
    assert got.dtype == xd.dtype and got.device == xd.device and got.shape == x.shape
    want = want.detach().to(xd.dtype).double()
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=0, atol=0, equal_nan=True)
    (got_grad,) = torch.autograd.grad(got, xd, grad_out_d)
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["randn", "ties"])
def test_forward_backward_match_reference(device, dtype, rng, mode, kind):
    shape = (2, 3, 9, 11)
    x = torch.randn(shape, generator=rng, dtype=torch.float64) if kind == "randn" else ties_input(rng, shape)
    grad_out = torch.randn(shape, generator=rng, dtype=torch.float64)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    check(x, grad_out, mode, x.to(device, dtype), grad_out.to(device, dtype), **tol)


@pytest.mark.parametrize("mode", MODES)
def test_tie_rule_nearest_maximum(mode):
    """All equal: every output's gradient stays at its own position (cummax's rule)."""
    x = torch.ones(1, 1, 4, 5, dtype=torch.float64, requires_grad=True)
    visdet_ops.corner_pool(x, mode).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_tie_rule_explicit():
    # bottom pool of one column [2, 1, 2, 0]: outputs [2, 2, 2, 2]; the
    # maxima are rows 0 and 2: rows 0, 1 -> row 0, rows 2, 3 -> row 2.
    x = torch.tensor([2.0, 1, 2, 0], dtype=torch.float64).view(1, 1, 4, 1).requires_grad_()
    grad_out = torch.tensor([1.0, 10, 100, 1000], dtype=torch.float64).view(1, 1, 4, 1)
    out = visdet_ops.bottom_pool(x)
    assert out.flatten().tolist() == [2, 2, 2, 2]
    out.backward(grad_out)
    assert x.grad.flatten().tolist() == [11, 0, 1100, 0]
    # top pool scans upwards: row 3 -> row 3 (value 0), rows 2, 1 -> row 2,
    # row 0 (equal to the running maximum 2) -> itself.
    x.grad = None
    visdet_ops.top_pool(x).backward(grad_out)
    assert x.grad.flatten().tolist() == [1, 0, 110, 1000]


def test_nan_like_cummax(device):
    x = torch.tensor([1.0, float("nan"), 3.0, 0.5, float("nan"), 7.0], dtype=torch.float64)
    for mode, view in (("right", (1, 1, 1, 6)), ("bottom", (1, 1, 6, 1)), ("left", (1, 1, 1, 6))):
        grad_out = torch.arange(1.0, 7.0, dtype=torch.float64).view(view)
        check(x.view(view), grad_out, mode, x.view(view).to(device), grad_out.to(device))


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck(device, rng, mode):
    x = torch.randn(2, 2, 5, 6, generator=rng, dtype=torch.float64, device="cpu").to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: visdet_ops.corner_pool(t, mode), (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_opcheck(device, rng, mode):
    x = torch.randn(2, 3, 4, 5, generator=rng, dtype=torch.float64).to(device).requires_grad_()
    torch.library.opcheck(torch.ops.visdet_ops.corner_pool.default, (x, mode))
    g = torch.randn(2, 3, 4, 5, generator=rng, dtype=torch.float64).to(device)
    torch.library.opcheck(torch.ops.visdet_ops._corner_pool_backward.default, (g, x.detach(), mode))


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0)])
@pytest.mark.parametrize("mode", MODES)
def test_empty(device, dtype, shape, mode):
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    out = visdet_ops.corner_pool(x, mode)
    assert out.shape == shape
    out.sum().backward()
    assert x.grad.shape == shape


@pytest.mark.parametrize("mode", MODES)
def test_non_contiguous(device, dtype, rng, mode):
    x = torch.randn(2, 4, 7, 6, generator=rng, dtype=torch.float64)
    grad_out = torch.randn(2, 4, 7, 6, generator=rng, dtype=torch.float64)
    g_nc = grad_out.to(device, dtype).transpose(2, 3).contiguous().transpose(2, 3)
    for xd in (
        x.to(device, dtype).contiguous(memory_format=torch.channels_last),
        x.transpose(2, 3).contiguous().to(device, dtype).transpose(2, 3),
    ):
        assert not xd.is_contiguous()
        check(x, grad_out, mode, xd, g_nc, rtol=1e-5, atol=1e-5)


def test_bad_inputs():
    with pytest.raises(RuntimeError, match=r"corner_pool: input must have 4 dimensions, got shape \[2, 3, 4\]"):
        visdet_ops.top_pool(torch.zeros(2, 3, 4))
    with pytest.raises(RuntimeError, match="corner_pool: input must be a floating point tensor"):
        torch.ops.visdet_ops.corner_pool(torch.zeros(1, 1, 2, 2, dtype=torch.int64), "top")
    with pytest.raises(RuntimeError, match=r"corner_pool: input must have 4 dimensions, got shape \[2, 3, 4\]"):
        visdet_ops.top_pool(torch.zeros(2, 3, 4, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="corner_pool: input must be a floating point tensor"):
        visdet_ops.top_pool(torch.zeros(1, 1, 2, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="corner_pool: mode must be 'top', 'bottom', 'left' or 'right', got 'up'"):
        visdet_ops.corner_pool(torch.zeros(1, 1, 2, 2), "up")
    with pytest.raises(RuntimeError, match="corner_pool: mode must be 'top', 'bottom', 'left' or 'right', got 'up'"):
        torch.ops.visdet_ops.corner_pool(torch.zeros(1, 1, 2, 2), "up")
    with pytest.raises(ValueError, match="CornerPool: mode must be"):
        CornerPool("diagonal")
    with pytest.raises(RuntimeError, match=r"grad_output must have the shape of input"):
        torch.ops.visdet_ops._corner_pool_backward(torch.zeros(1, 1, 2, 3), torch.zeros(1, 1, 2, 2), "top")
    with pytest.raises(RuntimeError, match="grad_output and input must have the same dtype"):
        torch.ops.visdet_ops._corner_pool_backward(
            torch.zeros(1, 1, 2, 2, dtype=torch.float64), torch.zeros(1, 1, 2, 2), "top"
        )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "int_dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64], ids=str
)
def test_integer_and_bool_maps_like_mmcv(device, rng, mode, int_dtype):
    """mmcv's CornerPool is torch.cummax, which takes any integer or bool map:
    the result is torch.cummax's (the reference is mmcv's forward), exact at
    the dtype's extremes, and the same values as the float path."""
    if int_dtype == torch.bool:
        x = torch.rand(2, 3, 9, 11, generator=rng) < 0.2
    else:
        info = torch.iinfo(int_dtype)
        x = torch.randint(-4, 5, (2, 3, 9, 11), generator=rng)
        x = x.clamp(min=0) if info.min == 0 else x
        x = x.to(int_dtype)
        x[0, 0, 3, 4], x[1, 2, 5, 1] = info.max, info.min
    got = visdet_ops.corner_pool(x.to(device), mode)
    assert got.dtype == int_dtype and got.device.type == device.type
    assert torch.equal(got.cpu(), corner_pool_reference(x, mode))
    assert torch.equal(CornerPool(mode)(x.to(device)).cpu(), got.cpu())
    if int_dtype not in (torch.int64,):  # every value exact in float64
        assert torch.equal(got.cpu().double(), corner_pool_reference(x.double(), mode))
        assert torch.equal(visdet_ops.corner_pool(x.double().to(device), mode).cpu(), got.cpu().double())


def test_double_backward_is_refused():
    x = torch.randn(1, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(visdet_ops.left_pool(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_module_and_named_functions(device, rng):
    x = torch.randn(2, 3, 5, 6, generator=rng, dtype=torch.float64).to(device)
    for fn, mode in _POOL_FNS.items():
        m = CornerPool(mode)
        assert list(m.state_dict()) == [] and f"mode='{mode}'" in repr(m)
        want = corner_pool_reference(x.cpu(), mode)
        assert torch.equal(m(x).cpu(), want)
        assert torch.equal(getattr(visdet_ops, fn)(x).cpu(), want)


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_16bit(device, rng, dtype16, mode):
    x = torch.randn(2, 3, 33, 40, generator=rng, dtype=torch.float64).to(dtype16).double()
    grad_out = torch.randn(x.shape, generator=rng, dtype=torch.float64).to(dtype16).double()
    # Summed in float32, rounded once: within one 16-bit rounding of the sum.
    check(x, grad_out, mode, x.to(device, dtype16), grad_out.to(device, dtype16), rtol=1e-2, atol=5e-2)


def test_cuda_backward_is_deterministic(rng):
    require_cuda()
    x = torch.randint(-2, 3, (2, 8, 64, 64), generator=rng).float().cuda().requires_grad_()
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for mode in MODES:
            for _ in range(2):
                x.grad = None
                visdet_ops.corner_pool(x, mode).backward(torch.ones_like(x))
                grads.append(x.grad.clone())
        for i in range(0, len(grads), 2):
            assert torch.equal(grads[i], grads[i + 1])
    finally:
        torch.use_deterministic_algorithms(False)


def test_large_cuda_matches_cpu(rng):
    require_cuda()
    x = torch.randn(2, 16, 100, 168, generator=rng)
    for mode in MODES:
        xc = x.clone().requires_grad_()
        xg = x.cuda().requires_grad_()
        g = torch.randn(x.shape, generator=rng)
        visdet_ops.corner_pool(xc, mode).backward(g)
        out = visdet_ops.corner_pool(xg, mode)
        out.backward(g.cuda())
        assert torch.equal(out.detach().cpu(), visdet_ops.corner_pool(x, mode))
        torch.testing.assert_close(xg.grad.cpu(), xc.grad)


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_corner_pool(gen, fn):
    def body(p, img):
        return call_by_name(fn, p["stem"](img), "left" if fn == "CornerPool" else "bottom")

    return amp.Case(body, (amp.img(gen),), amp.LOW, stem=amp.Stem(8, gen))


AUTOCAST_CASES = {fn: lambda g, fn=fn: case_corner_pool(g, fn) for fn in (*_POOL_FNS, "corner_pool", "CornerPool")}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_CORNER_BAD = ("ndim", "mode", "complex")


@st.composite
def _corner_case(draw, device):
    fn = draw(st.sampled_from(["corner_pool", *_POOL_FNS, "CornerPool"]))
    bad = core.pick_bad(draw, [b for b in _CORNER_BAD if b != "mode" or fn in ("corner_pool", "CornerPool")])
    main = draw(st.sampled_from(core.FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "shape": [draw(st.integers(0, 2)), draw(st.integers(0, 3)), draw(st.integers(0, 6)), draw(st.integers(0, 6))],
        "big": draw(core.one_in(10)),
        "mode": _POOL_FNS.get(fn) or draw(st.sampled_from(MODES)),
        "values": draw(st.sampled_from(["ties", "randn", "special"])),
        "int_input": draw(core.one_in(6)),
        "bad": bad,
    }
    if case["big"]:  # long scans
        case["shape"][1:] = [draw(st.integers(1, 5)), draw(st.integers(7, 40)), draw(st.integers(7, 40))]
    case["t"], mixed = core.draw_tensors(draw, {"input": 4}, main, device)
    if case["int_input"]:
        case["t"]["input"]["dt"] = draw(st.sampled_from(["i32", "i64", "bool", "u8", "i16"]))
    if bad == "ndim":
        case["shape"] = case["shape"][: draw(st.integers(1, 3))] if draw(st.booleans()) else [*case["shape"], 2]
    elif bad == "mode":
        case["mode"] = draw(st.sampled_from(["Top", "up", ""]))
    elif bad == "complex":
        case["t"]["input"]["dt"] = "c64"
    case["expect"] = core.expectation(bad, mixed)
    return case


def _corner_run(case):
    run = core.family_run(case, "corner_pool")
    shape = case["shape"]
    if case["values"] == "ties":
        base = run.randint(-3, 4, *shape)
    else:
        base = run.randn(*shape) * 3
        if case["values"] == "special" and base.numel():
            flat = base.view(-1)
            flat[:: max(1, flat.numel() // 3)] = float("nan")
            flat[1 :: max(1, flat.numel() // 2)] = float("inf")
    a = run.arg("input", base)
    dt = a.dt
    x = a.x(grad=True)
    mode = case["mode"]

    def check(out):
        if not a.floating:
            # The reference is torch.cummax, which takes integer and bool maps too.
            want = corner_pool_reference(x.detach().cpu(), mode)
            if out.dtype != x.dtype or not torch.equal(out.cpu(), want):
                raise core.Mismatch(f"integer corner_pool differs from torch.cummax ({out.dtype})")
            return
        rl, r = a.ref(grad=True)
        want = corner_pool_reference(r, mode)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, dt, False)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            # Ties follow torch.cummax exactly, so 16-bit gradients are compared too (sums of routed values).
            gw, gg = rl.grad, a.grad()
            if gg is None:
                raise core.Mismatch("grad of input: none")
            core.assert_close("grad of input", gg, gw, dt)

    run.outcome(lambda: call_by_name(case["fn"], x, mode), check)


FUZZ = core.family("corner_pool", ["corner_pool", *_POOL_FNS, "CornerPool"])((_corner_case, _corner_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "corner_pool": lambda rng: (
        lambda x: visdet_ops.corner_pool(x, "left"),
        (torch.randn(1, 2, 5, 6, generator=rng),),
        {"mode": "left"},
    ),
}


# ---------------------------------------------------------------- mmcv's names (tests/test_mmcv_names.py)

# Arguments mmcv checks with `assert`: each call raises our ValueError, which is also an AssertionError
# (test_argument_errors_are_also_assertion_errors)
MMCV_ASSERTION_ERRORS = {"CornerPool-mode": lambda: visdet_ops.CornerPool("corner")}
