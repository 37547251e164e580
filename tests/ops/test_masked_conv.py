from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import MaskedConv2d
from visdet_ops.ops import _args
from visdet_ops.reference.masked_conv import masked_conv2d_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import assert_uniform_init, require_cuda

TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float16: dict(rtol=2e-2, atol=5e-2),
    torch.bfloat16: dict(rtol=5e-2, atol=2e-1),
}


def case(rng, batch=2, cin=3, cout=4, h=9, w=11, k=(3, 3), mask_batch=None, density=0.4):
    x = torch.randn(batch, cin, h, w, generator=rng, dtype=torch.float64)
    mask = (torch.rand(mask_batch or batch, h, w, generator=rng, dtype=torch.float64) < density).double()
    mask = mask * torch.rand(mask.shape, generator=rng, dtype=torch.float64)  # active where > 0
    weight = torch.randn(cout, cin, *k, generator=rng, dtype=torch.float64)
    bias = torch.randn(cout, generator=rng, dtype=torch.float64)
    return x, mask, weight, bias


def check(device, dtype, rng, x, mask, weight, bias, padding):
    leaves = [x, weight] + ([bias] if bias is not None else [])
    ref_leaves = [t.clone().requires_grad_() for t in leaves]
    want = masked_conv2d_reference(
        ref_leaves[0], mask, ref_leaves[1], ref_leaves[2] if bias is not None else None, padding
    )
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64)
    want_grads = torch.autograd.grad(want, ref_leaves, grad_out)

    dev_leaves = [t.to(device, dtype).requires_grad_() for t in leaves]
    got = visdet_ops.masked_conv2d(
        dev_leaves[0], mask.to(device), dev_leaves[1], dev_leaves[2] if bias is not None else None, padding
    )
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **TOL[dtype])
    inactive = want.detach() == 0
    assert (got.detach().cpu()[inactive] == 0).all()
    got_grads = torch.autograd.grad(got, dev_leaves, grad_out.to(device, dtype))
    for g, wg in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g.cpu().double(), wg, **TOL[dtype])


@pytest.mark.parametrize(
    "k, padding",
    [((3, 3), (1, 1)), ((1, 1), (0, 0)), ((3, 5), (1, 2)), ((3, 3), (0, 0)), ((3, 3), (2, 3)), ((2, 2), (1, 0))],
)
@pytest.mark.parametrize("with_bias", [True, False])
def test_forward_backward_match_reference(device, dtype, rng, k, padding, with_bias):
    x, mask, weight, bias = case(rng, k=k)
    check(device, dtype, rng, x, mask, weight, bias if with_bias else None, padding)


@pytest.mark.parametrize(
    "shapes",
    [
        dict(batch=1, cin=8, cout=5, h=12, w=10),  # mmcv's only case: N == 1, mask [1, H, W], 'same' padding.
        dict(batch=3, mask_batch=1),
    ],
    ids=["mmcv_shape_batch1_shared_mask", "shared_mask_over_batch"],
)
def test_mask_shapes(device, dtype, rng, shapes):
    check(device, dtype, rng, *case(rng, **shapes), (1, 1))


def test_mask_dtypes(device, rng):
    x, mask, weight, bias = case(rng)
    want = masked_conv2d_reference(x, mask, weight, bias, (1, 1))
    for m in (mask > 0, (mask > 0).to(torch.uint8), (mask > 0).long(), mask.float(), mask - 0.0):
        got = visdet_ops.masked_conv2d(x.to(device), m.to(device), weight.to(device), bias.to(device), 1)
        torch.testing.assert_close(got.cpu(), want)
    # negative values are inactive (mask > 0, as mmcv)
    got = visdet_ops.masked_conv2d(x, -mask, weight, bias, 1)
    assert torch.equal(got, torch.zeros_like(got))


def test_all_and_none_active(device, dtype, rng):
    x, _, weight, bias = case(rng)
    ones = torch.ones(1, 9, 11)
    got = visdet_ops.masked_conv2d(
        x.to(device, dtype), ones.to(device), weight.to(device, dtype), bias.to(device, dtype), 1
    )
    torch.testing.assert_close(got.cpu().double(), F.conv2d(x, weight, bias, padding=1), **TOL[dtype])
    xd = x.to(device, dtype).requires_grad_()
    wd = weight.to(device, dtype).requires_grad_()
    bd = bias.to(device, dtype).requires_grad_()
    out = visdet_ops.masked_conv2d(xd, torch.zeros(1, 9, 11, device=device), wd, bd, 1)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    for t in (xd, wd, bd):
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_gradcheck(device, rng):
    x, mask, weight, bias = case(rng, batch=2, cin=2, cout=3, h=5, w=6)
    args = [t.to(device).requires_grad_() for t in (x, weight, bias)]
    m = mask.to(device)
    fn = lambda a, w, b: visdet_ops.masked_conv2d(a, m, w, b, (1, 0))  # noqa: E731
    assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-6)


def test_opcheck(device, rng):
    x, mask, weight, bias = case(rng, batch=2, cin=2, cout=3, h=5, w=6)
    x, mask, weight, bias = (t.to(device) for t in (x, mask, weight, bias))
    args = (x.clone().requires_grad_(), mask, weight.clone().requires_grad_(), bias.clone().requires_grad_(), 1, 1)
    torch.library.opcheck(torch.ops.visdet_ops.masked_conv2d.default, args)
    args = (x, mask, weight, None, 1, 1)
    torch.library.opcheck(torch.ops.visdet_ops.masked_conv2d.default, args)
    g = torch.randn(2, 3, 5, 6, generator=rng, dtype=torch.float64).to(device)
    torch.library.opcheck(
        torch.ops.visdet_ops._masked_conv2d_backward.default,
        (g, x, mask, weight, 1, 1),
    )


@pytest.mark.parametrize(
    "shape, cin, cout", [((0, 3, 5, 6), 3, 4), ((2, 3, 0, 6), 3, 4), ((2, 0, 5, 6), 0, 4), ((2, 3, 5, 6), 3, 0)]
)
def test_empty(device, dtype, shape, cin, cout):
    x = torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
    mask = torch.ones(max(shape[0], 1), shape[2], shape[3], device=device)
    w = torch.randn(cout, cin, 3, 3, device=device, dtype=dtype, requires_grad=True)
    b = torch.randn(cout, device=device, dtype=dtype, requires_grad=True)
    out = visdet_ops.masked_conv2d(x, mask, w, b, 1)
    assert out.shape == (shape[0], cout, shape[2], shape[3])
    out.sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and b.grad.shape == b.shape
    if cin == 0 and out.numel() > 0:
        # No input channels: the bias at every active position (all here).
        torch.testing.assert_close(out, b.detach()[None, :, None, None].expand_as(out))
        torch.testing.assert_close(b.grad, torch.full_like(b, shape[0] * shape[2] * shape[3]))


def test_non_contiguous(device, dtype, rng):
    x, mask, weight, bias = case(rng, cin=4)
    want = masked_conv2d_reference(x, mask, weight, bias, (1, 1))
    xd = x.to(device, dtype).contiguous(memory_format=torch.channels_last)
    wd = weight.to(device, dtype).contiguous(memory_format=torch.channels_last)
    md = mask.transpose(1, 2).contiguous().transpose(1, 2).to(device)
    bd = torch.stack([bias, bias], 1).to(device, dtype)[:, 0]
    assert not (xd.is_contiguous() or wd.is_contiguous() or md.is_contiguous() or bd.is_contiguous())
    got = visdet_ops.masked_conv2d(xd, md, wd, bd, 1)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])


def test_bad_inputs():
    x, m, w, b = torch.zeros(1, 3, 5, 5), torch.ones(1, 5, 5), torch.zeros(4, 3, 3, 3), torch.zeros(4)
    cases = [
        (dict(features=torch.zeros(3, 5, 5)), r"masked_conv2d: features must have 4 dimensions"),
        (dict(mask=torch.ones(5, 5)), r"mask must have shape \[1, H, W\] or \[N, H, W\], got \[5, 5\]"),
        (dict(mask=torch.ones(1, 4, 5)), r"mask must have shape \[1, H, W\] or \[N, H, W\] with features"),
        (dict(mask=torch.ones(2, 5, 5)), r"mask must have shape"),
        (dict(weight=torch.zeros(4, 2, 3, 3)), r"weight must have shape \[C_out, C_in, KH, KW\] with C_in"),
        (dict(weight=torch.zeros(4, 3, 3)), r"weight must have 4 dimensions"),
        (dict(bias=torch.zeros(3)), r"bias must have shape \[C_out\] = \[4\], got \[3\]"),
        (dict(bias=torch.zeros(4, dtype=torch.float64)), "features and bias must have the same dtype"),
        (dict(weight=w.double()), "features and weight must have the same dtype"),
        (dict(features=x.long(), weight=w.long(), bias=b.long()), "features must be a floating point tensor"),
        (dict(padding=-1), r"masked_conv2d: padding must be non-negative, got \(-1, -1\)"),
        (dict(weight=torch.zeros(4, 3, 9, 9)), "the kernel is larger than the padded input"),
    ]
    for kwargs, match in cases:
        args = dict(features=x, mask=m, weight=w, bias=b, padding=1)
        args.update(kwargs)
        with pytest.raises(RuntimeError, match=match):
            visdet_ops.masked_conv2d(**args)
    with pytest.raises(ValueError, match="masked_conv2d: stride must be 1"):
        visdet_ops.masked_conv2d(x, m, w, b, 1, stride=2)
    with pytest.raises(RuntimeError, match=r"grad_output must have shape \[1, 4, 5, 5\]"):
        torch.ops.visdet_ops._masked_conv2d_backward(torch.zeros(1, 4, 5, 4), x, m, w, 1, 1)


def test_module(device, rng):
    m = MaskedConv2d(3, 4, 3, padding=1).to(device).double()
    assert sorted(m.state_dict()) == ["bias", "weight"]
    ref = torch.nn.Conv2d(3, 4, 3, padding=1)
    m.load_state_dict(ref.double().state_dict(), strict=True)
    x, mask, _, _ = case(rng)
    x, mask = x.to(device), mask.to(device)
    torch.testing.assert_close(m(x), F.conv2d(x, m.weight, m.bias, padding=1))
    torch.testing.assert_close(
        m(x, mask).cpu(), masked_conv2d_reference(x.cpu(), mask.cpu(), m.weight.cpu(), m.bias.cpu(), (1, 1))
    )
    no_bias = MaskedConv2d(3, 4, (3, 5), padding=(1, 2), bias=False).to(device).double()
    torch.testing.assert_close(
        no_bias(x, mask).cpu(), masked_conv2d_reference(x.cpu(), mask.cpu(), no_bias.weight.cpu(), None, (1, 2))
    )
    for kwargs in (dict(stride=2), dict(dilation=2), dict(groups=3), dict(padding="same")):
        bad = MaskedConv2d(3, 3, 3, **kwargs).to(device).double()
        bad(x)  # the plain convolution still works
        with pytest.raises(ValueError, match="MaskedConv2d: a masked forward needs"):
            bad(x, mask)


def test_double_backward_is_refused():
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64)
    (g,) = torch.autograd.grad(
        visdet_ops.masked_conv2d(x, torch.ones(1, 4, 4), w, None, 1).pow(2).sum(), x, create_graph=True
    )
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


@pytest.mark.parametrize("groups", [1, 2])
def test_module_init_is_conv2d_default_as_mmcv(groups):
    # mmcv 2.2.0, mmcv/ops/masked_conv.py: MaskedConv2d(nn.Conv2d) adds no init,
    # so torch's Conv2d default: weight and bias uniform in +-1/sqrt(fan_in),
    # fan_in = in_channels / groups * KH * KW.
    m = MaskedConv2d(8, 4096, (3, 5), padding=(1, 2), groups=groups)
    bound = (8 // groups * 15) ** -0.5
    assert_uniform_init(m.weight, bound, "weight")
    assert_uniform_init(m.bias, bound, "bias")


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16])
def test_16bit(device, rng, dtype16):
    x, mask, weight, bias = case(rng, cin=8, cout=6, h=20, w=24)
    x, weight, bias = (t.to(dtype16).double() for t in (x, weight, bias))
    check(device, dtype16, rng, x, mask, weight, bias, (1, 1))


def test_cuda_backward_is_deterministic(rng, monkeypatch):
    require_cuda()
    # The GEMMs are cuBLAS calls, which torch's deterministic mode only
    # accepts with this setting (as for any torch matmul).
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    x, mask, weight, bias = case(rng, batch=2, cin=16, cout=16, h=40, w=48, density=0.7)
    xd = x.float().cuda().requires_grad_()
    wd = weight.float().cuda().requires_grad_()
    torch.use_deterministic_algorithms(True)
    try:
        grads = []
        for _ in range(2):
            xd.grad = wd.grad = None
            visdet_ops.masked_conv2d(xd, mask.cuda(), wd, None, 1).backward(torch.ones(2, 16, 40, 48, device="cuda"))
            grads.append((xd.grad.clone(), wd.grad.clone()))
        assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    finally:
        torch.use_deterministic_algorithms(False)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _edge_inputs(device, gen):
    x, mask, w, b = (t.to(device) for t in case(gen, h=6, w=7))
    return x, mask > 0, w, b


def _masked_conv(device, gen, padding, stride=1):
    x, mask, w, b = _edge_inputs(device, gen)
    got = visdet_ops.masked_conv2d(x, mask, w, b, padding, stride)
    p = edges.small(padding, 0, 4, 1)
    edges.close(got, masked_conv2d_reference(x.cpu(), mask.cpu(), w.cpu(), b.cpu(), (p, p)))


def _masked_conv_op(device, gen, pad_h=1, pad_w=1):
    x, mask, w, b = _edge_inputs(device, gen)
    got = torch.ops.visdet_ops.masked_conv2d(x, mask, w, b, pad_h, pad_w)
    edges.close(got, masked_conv2d_reference(x.cpu(), mask.cpu(), w.cpu(), b.cpu(), (pad_h, pad_w)))


def _masked_conv_module(device, gen, **kw):
    m = MaskedConv2d(**{"in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1, **kw}).to(device).double()
    x, mask, _, _ = _edge_inputs(device, gen)
    w, b = m.weight.detach().cpu(), m.bias.detach().cpu()
    edges.close(m(x, mask).detach(), masked_conv2d_reference(x.cpu(), mask.cpu(), w, b, m.padding))


INTEGER_EDGE_ROWS = [
    edges.Row(
        "masked_conv2d-padding", ("padding",), _args.PADDING, lambda d, v, g: _masked_conv(d, g, v), at_bound=(1, 2)
    ),
    # mmcv's masked_conv2d takes only stride 1
    edges.Row("masked_conv2d-stride", ("stride",), (1, 1), lambda d, v, g: _masked_conv(d, g, 1, v), at_bound=(1,)),
    *(edges.kw_row(f"op.masked_conv2d-{arg}", arg, _args.PADDING, _masked_conv_op) for arg in ("pad_h", "pad_w")),
    *(
        edges.kw_row(f"MaskedConv2d-{arg}", arg, b, _masked_conv_module)
        for arg, b in (
            ("in_channels", _args.CHANNELS),
            ("out_channels", _args.CHANNELS),
            ("kernel_size", _args.KERNEL_SIZE),
            ("stride", _args.STRIDE),
            ("padding", _args.PADDING),
            ("dilation", _args.DILATION),
            ("groups", _args.GROUPS),
        )
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)
# The backward op runs the forward's argument checks first (check_args, csrc/ops/masked_conv/masked_conv.cpp).
INTEGER_EDGE_OP_COVERED_OTHERWISE = {
    f"op._masked_conv2d_backward-{arg}": f"the forward's check, row op.masked_conv2d-{arg}"
    for arg in ("pad_h", "pad_w")
}
test_public_functions_name_the_users_argument = edges.public_message_test(
    [
        (
            lambda d: visdet_ops.masked_conv2d(
                *(torch.rand(1, 2, 5, 5, device=d), torch.ones(1, 5, 5, device=d), torch.rand(3, 2, 3, 3, device=d)),
                *(None, 2**63 - 1),
            ),
            "masked_conv2d: padding must be in [0, 65536], got (9223372036854775807, 9223372036854775807)",
        ),
        (  # before any work: nothing is passed but the bad value
            lambda d: visdet_ops.masked_conv2d(None, None, None, None, (2**31, 0)),
            "masked_conv2d: padding must be in [0, 65536], got (2147483648, 0)",
        ),
    ]
)


def test_modules_and_fake_impls_name_the_argument():
    edges.assert_module_message(
        lambda: MaskedConv2d(2, 2, 3, dilation=2**40), "MaskedConv2d: dilation must be in [1, 65536]"
    )
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.masked_conv2d(
            torch.empty(2, 3, 8, 8), torch.empty(1, 8, 8), torch.empty(4, 3, 3, 3), None, 0, -1
        ),
        "masked_conv2d: pad_w must be in",
    )


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_masked_conv(gen, module=False):
    layer = amp.randomize(visdet_ops.MaskedConv2d(8, 6, 3, padding=1), gen, 0.1)
    mask = torch.rand(2, 24, 28, generator=gen) > 0.4

    def body(p, img, mask):
        x = p["stem"](img)
        if module:
            return p["layer"](x, mask)
        return visdet_ops.masked_conv2d(x, mask, p["layer"].weight, p["layer"].bias, 1)

    return amp.Case(body, (amp.img(gen), mask), amp.LOW, gemm=True, stem=amp.Stem(8, gen), layer=layer)


AUTOCAST_CASES = {
    "masked_conv2d": lambda g: case_masked_conv(g),
    "MaskedConv2d": lambda g: case_masked_conv(g, module=True),
}


def _opcheck_masked_conv2d(device, dtype, gen):
    x = amp.features(device, dtype, gen)
    weight = torch.randn(6, 4, 3, 3, generator=gen).to(device).requires_grad_()
    bias = torch.randn(6, generator=gen).to(device).requires_grad_()
    return torch.ops.visdet_ops.masked_conv2d.default, (x, x.detach()[:, 0] > 0, weight, bias, 1, 1)


AUTOCAST_OPCHECKS = {"masked_conv2d": _opcheck_masked_conv2d}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_MASKED_BAD = tuple(
    "stride mask_ndim mask_batch mask_size weight_channels bias_size input_ndim input_dtype padding weight_ndim".split()
)
_MASKED_CTOR_BAD = ("ctor_int", "masked_stride", "masked_dilation", "masked_groups", "same_padding")


@st.composite
def _masked_case(draw, device):
    fn = draw(st.sampled_from(["masked_conv2d", "MaskedConv2d"]))
    module = fn == "MaskedConv2d"
    bad = core.pick_bad(draw, _MASKED_CTOR_BAD if module else _MASKED_BAD)
    main = draw(st.sampled_from(core.FLOATS if not module else ("f32", "f64")))
    n = core.size(draw, 1, 2)
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": n,
        "cin": core.size(draw, 1, 3) if not module else draw(st.integers(1, 3)),
        "cout": draw(st.integers(1, 3)),
        "h": core.size(draw, 1, 6) if not draw(core.one_in(10)) else draw(st.integers(7, 16)),
        "w": core.size(draw, 1, 6) if not draw(core.one_in(10)) else draw(st.integers(7, 16)),
        "k": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "padding": core.pair_or_int(draw, 0, 2),
        "bias": draw(st.booleans()),
        "mask_batch": draw(st.sampled_from([1, n])),
        "mask_dt": draw(st.sampled_from(["bool", "f32", "f64", "i64", "u8", "f16"])),
        "mask_lay": draw(st.sampled_from(["c", "t", "s", "e"])),
        "mask_size": "same" if bad != "mask_size" else draw(st.sampled_from(["bigger", "smaller"])),
        "no_mask": module and draw(core.one_in(4)),
        "bad": bad,
    }
    case["t"], mixed = core.draw_tensors(draw, {"features": 4, "weight": 4, "bias": 1}, main, device)
    if module:
        core.uniform(case, main, device)
        mixed = False
    ph, pw = core.pair(case["padding"])
    oh, ow = case["h"] + 2 * ph - case["k"][0] + 1, case["w"] + 2 * pw - case["k"][1] + 1
    if case["no_mask"] and (oh <= 0 or ow <= 0 or case["h"] * case["w"] == 0):
        case["no_mask"] = False  # the plain nn.Conv2d forward, with torch's own errors for an empty or small map
    if bad in _MASKED_CTOR_BAD[1:]:
        case["no_mask"] = False  # what these mutations break is the masked forward
    if bad == "input_dtype":
        case["t"]["features"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "padding":
        case["padding"] = draw(st.sampled_from([-1, 2**31, 2**17, [0, -1], 1.5]))
    elif bad == "stride":
        case["stride"] = draw(st.sampled_from([2, [1, 2], 0]))
    elif bad == "bias_size":
        case["bias"] = True
    elif bad == "mask_batch":
        case["mask_batch"] = n + 1 if n != 0 else 2
    elif bad == "ctor_int":
        case["arg"] = draw(
            st.sampled_from(["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"])
        )
        case["value"] = draw(core.bad_int())
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    borderline = (bad != "padding" and (oh <= 0 or ow <= 0)) or case["cin"] == 0
    case["expect"] = core.expectation(bad, mixed, borderline)
    return case


def _masked_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "masked_conv")
    n, cin, cout, h, w = case["n"], case["cin"], case["cout"], case["h"], case["w"]
    kh, kw = case["k"]
    ph, pw = core.pair(case["padding"]) if bad != "padding" else (0, 0)
    fshape = [n, cin, h, w] if bad != "input_ndim" else [cin, h, w]
    wshape = [cout, cin + (bad == "weight_channels"), kh, kw] if bad != "weight_ndim" else [cout, cin, kh]
    hm, wm = {"same": (h, w), "bigger": (h + 2, w + 1), "smaller": (h - 1 if h else 1, w)}[case["mask_size"]]
    mshape = [case["mask_batch"], hm, wm] if bad != "mask_ndim" else [hm, wm]
    a_f = run.arg("features", run.randn(*fshape))
    a_w = run.arg("weight", run.randn(*wshape) * 0.5)
    a_b = run.arg("bias", run.randn(cout + (bad == "bias_size")))
    mask = core.Arg(run.randn(*mshape), case["mask_dt"], case["mask_lay"], a_f.device, expand_dim=case["seed"])
    xf, xw = a_f.x(grad=True), a_w.x(grad=True)
    xb = a_b.x(grad=True) if case["bias"] else None
    xm = mask.x()
    used = [("features", a_f), ("weight", a_w)] + ([("bias", a_b)] if case["bias"] else [])
    dt = core.worst(*(a.dt for _, a in used))
    mixed = case["expect"] == "either"
    masked = not case["no_mask"]
    if fn == "MaskedConv2d":
        kwargs = {
            "in_channels": cin,
            "out_channels": cout,
            "kernel_size": (kh, kw),
            "padding": case["padding"],
            "bias": case["bias"],
        }
        if bad == "ctor_int":
            kwargs[case["arg"]] = case["value"]
        elif bad == "masked_stride":
            kwargs["stride"] = 2
        elif bad == "masked_dilation":
            kwargs["dilation"] = 2
        elif bad == "masked_groups":
            kwargs["in_channels"] = kwargs["out_channels"] = cin
            kwargs["groups"] = cin
        elif bad == "same_padding":
            kwargs["padding"] = "same"
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: visdet_ops.MaskedConv2d(**kwargs), expect="error" if bad == "ctor_int" else "ok")
        if mod is None:
            return
        mod = mod.to(run.device, core.DTYPES[a_f.dt])
        if bad == "masked_groups" and kwargs["groups"] == 1:
            run.expect = "either"  # a valid call after all
        xf = a_f.x(grad=True) if kwargs["in_channels"] == cin else xf
        call = lambda: mod(xf, xm) if masked else mod(xf)  # noqa: E731
    else:
        kw_ = {"stride": case["stride"]} if bad == "stride" else {}
        call = lambda: visdet_ops.masked_conv2d(xf, xm, xw, xb, case["padding"], **kw_)  # noqa: E731

    def check(out):
        rfl, rf = a_f.ref(grad=True)
        if out.numel() == 0 or rf.numel() == 0:  # F.conv2d (the reference) takes no empty map
            oh, ow = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
            channels = mod.out_channels if fn == "MaskedConv2d" else cout
            want = torch.zeros(n, channels, max(oh, 0), max(ow, 0), dtype=torch.float64)
            if case["bias"] and fn == "masked_conv2d" and want.numel():  # the bias where the mask is active
                m = mask.r()
                hh, ww = min(m.size(1), oh), min(m.size(2), ow)
                active = torch.zeros(n, oh, ow, dtype=torch.float64)
                active[:, :hh, :ww] = (m[:, :hh, :ww] > 0).double().expand(n, hh, ww)
                want = want + a_b.r().reshape(1, -1, 1, 1) * active[:, None]
            core.assert_close("output", out, want, dt)
            return
        if fn == "MaskedConv2d":
            m64 = copy.deepcopy(mod).cpu().double()
            if masked:
                want = masked_conv2d_reference(rf, mask.r(), m64.weight, m64.bias, m64.padding)
            else:
                want = m64(rf)
            core.assert_close("output", out, want, dt)
            return
        refs = {name: a.ref(grad=True) for name, a in used}
        want = masked_conv2d_reference(
            rf, mask.r(), refs["weight"][1], refs["bias"][1] if case["bias"] else None, (ph, pw)
        )
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, a_f.dt, mixed)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            refs["features"] = (rfl, rf)
            core.check_grads([(name, a, refs[name][0]) for name, a in used], dt)

    run.outcome(call, check)


FUZZ = core.family("masked_conv", ["masked_conv2d", "MaskedConv2d"], ops=("masked_conv2d",))(
    (_masked_case, _masked_run)
)


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "masked_conv2d": lambda rng: (
        lambda f, m, w, b: visdet_ops.masked_conv2d(f, m, w, b, 1),
        tuple(t.float() for t in case(rng, cin=2, cout=3, h=5, w=5)),
        {"pad_h": 1, "pad_w": 1},
    ),
}


# ---------------------------------------------------------------- CUDA graphs (tests/test_cuda_graphs.py)

# The registered ops whose host reads device data, with why: they are not captured in a CUDA graph (the replay test
# leaves them out), and the public functions that call them refuse capture instead (CUDA_GRAPH_REFUSALS).
CUDA_GRAPH_DATA_DEPENDENT = {
    "visdet_ops::masked_conv2d": "where the mask is set",
    "visdet_ops::_masked_conv2d_backward": "where the mask is set",
}


def _refused_masked_conv2d(gen):
    features, mask, weight, _ = (t.float().cuda() for t in case(gen, batch=1, h=8, w=8))
    return lambda: visdet_ops.masked_conv2d(features, mask > 0, weight, None, 1)


# public function -> gen -> its call on CUDA inputs, which raises "<name> cannot be captured in a CUDA graph: ..."
# inside a capture and works before and after it (test_data_dependent_ops_refuse_capture_clearly, CUDA only)
CUDA_GRAPH_REFUSALS = {"masked_conv2d": _refused_masked_conv2d}
