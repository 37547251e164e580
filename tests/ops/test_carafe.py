from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import CARAFE, CARAFENaive, CARAFEPack
from visdet_ops.ops import _args
from visdet_ops.reference.carafe import carafe_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import assert_normal_init, assert_uniform_init, assert_zero, require_cuda

FNS = {"carafe": visdet_ops.carafe, "carafe_naive": visdet_ops.carafe_naive}
NAMES = (*FNS, "CARAFE", "CARAFENaive")  # the public names that take (features, masks)
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),  # up to 7*7*4*4 randn products per element
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float16: dict(rtol=1e-2, atol=2e-2),
    torch.bfloat16: dict(rtol=5e-2, atol=1e-1),
}


def case(rng, n=2, c=4, h=5, w=7, k=3, g=2, s=2, softmax=False):
    x = torch.randn(n, c, h, w, generator=rng, dtype=torch.float64)
    masks = torch.randn(n, g * k * k, h * s, w * s, generator=rng, dtype=torch.float64)
    if softmax:
        masks = masks.view(n, g, k * k, h * s, w * s).softmax(2).view_as(masks)
    return x, masks


def check(fn, device, dtype, rng, x, masks, k, g, s):
    xr, mr = x.clone().requires_grad_(), masks.clone().requires_grad_()
    want = carafe_reference(xr, mr, k, g, s)
    grad_out = torch.randn(want.shape, generator=rng, dtype=torch.float64)
    want_gx, want_gm = torch.autograd.grad(want, (xr, mr), grad_out)
    xd, md = x.to(device, dtype).requires_grad_(), masks.to(device, dtype).requires_grad_()
    got = fn(xd, md, k, g, s)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **TOL[dtype])
    gx, gm = torch.autograd.grad(got, (xd, md), grad_out.to(device, dtype))
    torch.testing.assert_close(gx.cpu().double(), want_gx, **TOL[dtype])
    torch.testing.assert_close(gm.cpu().double(), want_gm, **TOL[dtype])


@pytest.mark.parametrize("op", list(FNS))
@pytest.mark.parametrize("k, g, s", [(3, 2, 2), (5, 1, 2), (1, 1, 1), (3, 4, 3), (5, 2, 1), (7, 1, 4)])
def test_forward_backward_match_reference(device, dtype, rng, op, k, g, s):
    x, masks = case(rng, c=8, h=6, w=9, k=k, g=g, s=s)
    check(FNS[op], device, dtype, rng, x, masks, k, g, s)


@pytest.mark.parametrize("op", list(FNS))
def test_tile_edges(device, dtype, rng, op):
    # Output sizes that are not multiples of the CUDA kernel's 32 x 8 tile,
    # more than one tile in each direction, more channels than one chunk (32).
    x, masks = case(rng, n=1, c=40, h=13, w=37, k=5, g=2, s=2, softmax=True)
    check(FNS[op], device, dtype, rng, x, masks, 5, 2, 2)


def test_carafe_and_naive_agree(device, rng):
    x, masks = case(rng, n=2, c=16, h=11, w=19, k=5, g=4, s=2, softmax=True)
    x, masks = x.to(device), masks.to(device)
    torch.testing.assert_close(visdet_ops.carafe(x, masks, 5, 4, 2), visdet_ops.carafe_naive(x, masks, 5, 4, 2))


@pytest.mark.parametrize("op", list(FNS))
def test_gradcheck(device, rng, op):
    x, masks = case(rng, h=3, w=4)
    args = (x.to(device).requires_grad_(), masks.to(device).requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: FNS[op](a, b, 3, 2, 2), args, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(FNS))
def test_opcheck(device, rng, op):
    x, masks = case(rng, h=3, w=4)
    x, masks = x.to(device), masks.to(device)
    fwd = getattr(torch.ops.visdet_ops, op).default
    bwd = getattr(torch.ops.visdet_ops, f"_{op}_backward").default
    torch.library.opcheck(fwd, (x.clone().requires_grad_(), masks.clone().requires_grad_(), 3, 2, 2))
    g = torch.randn(2, 4, 6, 8, generator=rng, dtype=torch.float64).to(device)
    torch.library.opcheck(bwd, (g, x, masks, 3, 2, 2))


@pytest.mark.parametrize("op", list(FNS))
@pytest.mark.parametrize("n, c, h, w", [(0, 4, 3, 4), (2, 0, 3, 4), (2, 4, 0, 4), (2, 4, 3, 0)])
def test_empty(device, dtype, op, n, c, h, w):
    x = torch.randn(n, c, h, w, device=device, dtype=dtype, requires_grad=True)
    masks = torch.randn(n, 2 * 9, h * 2, w * 2, device=device, dtype=dtype, requires_grad=True)
    out = FNS[op](x, masks, 3, 2, 2) if c else FNS[op](x, masks[:, :9], 3, 1, 2)
    assert out.shape == (n, c, 2 * h, 2 * w)
    out.sum().backward()
    assert x.grad.shape == x.shape


@pytest.mark.parametrize("op", list(FNS))
def test_non_contiguous(device, dtype, rng, op):
    x, masks = case(rng, c=4, h=6, w=5, k=3, g=2, s=2)
    want = carafe_reference(x, masks, 3, 2, 2)
    xd = x.to(device, dtype).contiguous(memory_format=torch.channels_last)
    md = masks.transpose(2, 3).contiguous().transpose(2, 3).to(device, dtype)
    assert not xd.is_contiguous() and not md.is_contiguous()
    torch.testing.assert_close(FNS[op](xd, md, 3, 2, 2).cpu().double(), want, **TOL[dtype])


@pytest.mark.parametrize("op", list(FNS))
def test_bad_inputs(op):
    fn = FNS[op]
    x, m = torch.zeros(1, 4, 3, 3), torch.zeros(1, 18, 6, 6)
    cases = [
        ((torch.zeros(4, 3, 3), m, 3, 2, 2), f"{op}: features must have 4 dimensions"),
        ((x, torch.zeros(18, 6, 6), 3, 2, 2), f"{op}: masks must have 4 dimensions"),
        ((x, m, 2, 2, 2), f"{op}: kernel_size must be a positive odd number, got 2"),
        ((x, m, 3, 0, 2), f"{op}: group_size must be positive, got 0"),
        ((x, m, 3, 2, 0), f"{op}: scale_factor must be positive, got 0"),
        ((x, torch.zeros(1, 27, 6, 6), 3, 3, 2), r"features' channels \(4\) must be divisible by group_size \(3\)"),
        ((x, torch.zeros(1, 18, 6, 7), 3, 2, 2), r"masks must have shape \[N, kernel_size\^2 \* group_size"),
        ((x, torch.zeros(1, 9, 6, 6), 3, 2, 2), r"= \[1, 18, 6, 6\] for features"),
        ((x, m.double(), 3, 2, 2), "features and masks must have the same dtype"),
        ((x.long(), m.long(), 3, 2, 2), "features must be a floating point tensor"),
    ]
    for args, match in cases:
        with pytest.raises(RuntimeError, match=match):
            fn(*args)
    bwd = getattr(torch.ops.visdet_ops, f"_{op}_backward")
    with pytest.raises(RuntimeError, match=r"grad_output must have shape \[1, 4, 6, 6\]"):
        bwd(torch.zeros(1, 4, 6, 5), x, m, 3, 2, 2)


def test_double_backward_is_refused():
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    m = torch.randn(1, 9, 6, 6, dtype=torch.float64)
    (g,) = torch.autograd.grad(visdet_ops.carafe(x, m, 3, 1, 2).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="carafe: double backward"):
        g.sum().backward()


def test_modules(device, rng):
    x, masks = case(rng, c=4, h=5, w=6, k=3, g=2, s=2)
    x, masks = x.to(device), masks.to(device)
    want = carafe_reference(x.cpu(), masks.cpu(), 3, 2, 2)
    for cls in (CARAFE, CARAFENaive):
        m = cls(3, 2, 2)
        assert list(m.state_dict()) == []
        assert "kernel_size=3, group_size=2, scale_factor=2" in repr(m)
        torch.testing.assert_close(m(x, masks).cpu(), want)
    with pytest.raises(TypeError, match="CARAFE: scale_factor must be an int"):
        CARAFE(3, 1, 2.0)


def test_carafe_pack_state_dict_matches_mmcv():
    # mmcv/ops/carafe.py (CARAFEPack.__init__): channel_compressor =
    # Conv2d(channels, compressed_channels, 1); content_encoder =
    # Conv2d(compressed_channels, up_kernel**2 * up_group * scale_factor**2,
    # encoder_kernel, padding=(encoder_kernel - 1) * encoder_dilation // 2,
    # dilation=encoder_dilation). mmdet's CARAFE-FPN (configs/carafe,
    # upsample_cfg=dict(type='carafe', up_kernel=5, up_group=1,
    # encoder_kernel=3, encoder_dilation=1, compressed_channels=64)) with 256
    # channels and scale 2 has exactly these keys and shapes:
    mmcv_keys = {
        "channel_compressor.weight": (64, 256, 1, 1),
        "channel_compressor.bias": (64,),
        "content_encoder.weight": (100, 64, 3, 3),
        "content_encoder.bias": (100,),
    }
    pack = CARAFEPack(256, 2, up_kernel=5, up_group=1, encoder_kernel=3, encoder_dilation=1, compressed_channels=64)
    assert {k: tuple(v.shape) for k, v in pack.state_dict().items()} == mmcv_keys
    checkpoint = {k: torch.randn(shape) for k, shape in mmcv_keys.items()}
    pack.load_state_dict(checkpoint, strict=True)
    # mmcv's init: zero biases, content encoder normal(std=0.001).
    fresh = CARAFEPack(256, 2)
    assert torch.equal(fresh.channel_compressor.bias, torch.zeros(64))
    assert torch.equal(fresh.content_encoder.bias, torch.zeros(100))
    assert fresh.content_encoder.weight.std().item() < 0.002
    assert fresh.content_encoder.padding == (1, 1)
    dilated = CARAFEPack(16, 2, up_kernel=3, up_group=2, encoder_kernel=5, encoder_dilation=2, compressed_channels=8)
    assert dilated.content_encoder.weight.shape == (72, 8, 5, 5) and dilated.content_encoder.padding == (4, 4)


def test_carafe_pack_init_matches_mmcv_formula():
    # mmcv 2.2.0, mmcv/ops/carafe.py, CARAFEPack.init_weights: every Conv2d
    # xavier_init(m, distribution='uniform') (mmengine: xavier_uniform_(gain=1),
    # bias 0), then normal_init(content_encoder, std=0.001) (normal_(0, 0.001), bias 0).
    pack = CARAFEPack(256, 2, compressed_channels=64)
    cc, ce = pack.channel_compressor, pack.content_encoder
    assert_uniform_init(cc.weight, (6 / (256 + 64)) ** 0.5, "channel_compressor.weight")
    assert_zero(cc.bias, "channel_compressor.bias")
    assert_normal_init(ce.weight, 0.001, "content_encoder.weight")
    assert_zero(ce.bias, "content_encoder.bias")


def seeded_pack():
    """A float64 CARAFEPack (8 channels, x2) whose content encoder is far from its near-zero init: masks that are not
    close to a uniform average."""
    torch.manual_seed(0)
    pack = CARAFEPack(8, 2, up_kernel=3, up_group=2, compressed_channels=4).double()
    with torch.no_grad():
        pack.content_encoder.weight.normal_(0, 0.3)
    return pack


def pack_masks(pack, x):
    """CARAFEPack's normalised reassembly kernels for x (its forward up to the carafe call)."""
    return pack.kernel_normalizer(pack.content_encoder(pack.channel_compressor(x)))


def test_carafe_pack_forward(device, rng):
    pack = seeded_pack().to(device)
    x = torch.randn(2, 8, 6, 7, generator=rng, dtype=torch.float64).to(device)
    out = pack(x)
    assert out.shape == (2, 8, 12, 14)
    mask = pack_masks(pack, x)
    torch.testing.assert_close(
        mask.view(2, 2, 9, 12, 14).sum(2), torch.ones(2, 2, 12, 14, dtype=torch.float64, device=device)
    )
    torch.testing.assert_close(out.cpu(), carafe_reference(x.cpu(), mask.detach().cpu(), 3, 2, 2))
    out.sum().backward()
    assert pack.content_encoder.weight.grad is not None and pack.channel_compressor.weight.grad is not None


@pytest.mark.parametrize("n", [0, 2])
def test_carafe_pack_empty_batch(device, dtype, rng, n):
    """Regression (fuzzing): CARAFEPack's forward failed on a batch of 0 images with torch's 'cannot reshape tensor
    of 0 elements ... ambiguous' (kernel_normalizer's mask.view(n, mask_channel, -1, h, w), mmcv's code), and its
    backward with torch's CPU pixel_unshuffle returning an empty input unchanged. An empty batch is a valid input of
    the convolutions around it: an empty output and empty (input) or zero (parameter) gradients, as the float64
    reference (the same module, with carafe_reference for the op); a batch of 2 checks that reference."""
    pack = seeded_pack()
    x = torch.randn(n, 8, 6, 7, generator=rng, dtype=torch.float64)
    grad = torch.randn(n, 8, 12, 14, generator=rng, dtype=torch.float64)
    leaf = x.clone().requires_grad_()
    want = carafe_reference(leaf, pack_masks(pack, leaf), 3, 2, 2)
    want_grads = torch.autograd.grad(want, [leaf, *pack.parameters()], grad)
    dev_pack = pack.to(device, dtype)
    xd = x.to(device, dtype).requires_grad_()
    got = dev_pack(xd)
    assert got.shape == (n, 8, 12, 14) and got.dtype == dtype
    got_grads = torch.autograd.grad(got, [xd, *dev_pack.parameters()], grad.to(device, dtype))
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **tol)
    for name, g, w in zip(["input"] + [k for k, _ in pack.named_parameters()], got_grads, want_grads, strict=True):
        assert g.shape == w.shape, name
        if n == 0:
            assert torch.equal(g.cpu().double(), torch.zeros_like(w)), name
        torch.testing.assert_close(g.cpu().double(), w, **tol, msg=name)


@pytest.mark.parametrize("op", list(FNS))
@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16])
def test_16bit(device, rng, op, dtype16):
    x, masks = case(rng, n=2, c=40, h=13, w=37, k=5, g=2, s=2, softmax=True)
    x, masks = x.to(dtype16).double(), masks.to(dtype16).double()
    check(FNS[op], device, dtype16, rng, x, masks, 5, 2, 2)


def test_cuda_float64_large_kernel_falls_back(rng):
    # float64 with K=7 needs more shared memory than the tiled kernel takes:
    # carafe falls back to the direct kernels and must still be right.
    require_cuda()
    x, masks = case(rng, n=1, c=8, h=9, w=40, k=7, g=1, s=2)
    check(visdet_ops.carafe, torch.device("cuda"), torch.float64, rng, x, masks, 7, 1, 2)


def test_cuda_backward_is_deterministic(rng):
    require_cuda()
    x, masks = case(rng, n=2, c=64, h=20, w=33, k=5, g=1, s=2, softmax=True)
    for fn in FNS.values():
        xd, md = x.float().cuda().requires_grad_(), masks.float().cuda().requires_grad_()
        torch.use_deterministic_algorithms(True)
        try:
            grads = []
            for _ in range(2):
                xd.grad = md.grad = None
                fn(xd, md, 5, 1, 2).backward(torch.ones(2, 64, 40, 66, device="cuda"))
                grads.append((xd.grad.clone(), md.grad.clone()))
            assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
        finally:
            torch.use_deterministic_algorithms(False)


def test_cuda_fpn_shape_matches_cpu(rng):
    # CARAFE-FPN's largest upsampling: 256 channels, 100 x 168 -> 200 x 336.
    require_cuda()
    x = torch.randn(1, 256, 100, 168, generator=rng)
    masks = torch.randn(1, 25, 200, 336, generator=rng).softmax(1)
    want = carafe_reference(x.double(), masks.double(), 5, 1, 2)
    for fn in FNS.values():
        got = fn(x.cuda(), masks.cuda(), 5, 1, 2)
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "n, c, h, w",
    [
        # On a 132-SM H100, carafe's features gradient takes 8, 4, 2 and 1
        # (the direct kernel) channels a thread at these sizes, in this order.
        (1, 256, 100, 168),
        (2, 256, 50, 84),
        (4, 16, 100, 168),
        (2, 256, 25, 42),
    ],
)
def test_cuda_backward_at_fpn_sizes(rng, n, c, h, w):
    # carafe's CUDA backward picks its features-gradient kernel by size (how
    # many channels a thread handles); CARAFE-FPN sizes cover every choice.
    require_cuda()
    x, masks = (t.cuda() for t in case(rng, n, c, h, w, k=5, g=1, s=2, softmax=True))
    grad = torch.randn(n, c, 2 * h, 2 * w, generator=rng, dtype=torch.float64).cuda()
    xr, mr = x.clone().requires_grad_(), masks.clone().requires_grad_()
    want_gx, want_gm = torch.autograd.grad(carafe_reference(xr, mr, 5, 1, 2), (xr, mr), grad)
    xd, md = x.float().requires_grad_(), masks.float().requires_grad_()
    gx, gm = torch.autograd.grad(visdet_ops.carafe(xd, md, 5, 1, 2), (xd, md), grad.float())
    torch.testing.assert_close(gx.double(), want_gx, rtol=1e-4, atol=1e-4)
    # A masks gradient sums c products: its scale grows with sqrt(c).
    torch.testing.assert_close(gm.double(), want_gm, rtol=1e-4, atol=1e-4 * c**0.5)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _carafe(device, gen, fn_name, k=3, g=2, s=2):
    kk, gg, ss = edges.small(k, 1, 63, 3), edges.small(g, 1, 4, 2), edges.small(s, 1, 64, 2)
    gg = gg if 4 % gg == 0 else 2
    kk = kk if kk % 2 == 1 else 3
    x = torch.randn(1, 4, 2, 3, generator=gen, dtype=torch.float64)
    masks = torch.rand(1, kk * kk * gg, 2 * ss, 3 * ss, generator=gen, dtype=torch.float64)
    x, masks = x.to(device), masks.to(device)
    if fn_name in FNS:
        got = FNS[fn_name](x, masks, k, g, s)
    elif fn_name in NAMES:
        got = getattr(visdet_ops, fn_name)(k, g, s)(x, masks)
    elif fn_name.startswith("op._"):
        go = torch.randn(1, 4, 2 * ss, 3 * ss, generator=gen, dtype=torch.float64).to(device)
        gx, gm = getattr(torch.ops.visdet_ops, fn_name[3:])(go, x, masks, k, g, s)
        xr, mr = x.cpu().requires_grad_(), masks.cpu().requires_grad_()
        wx, wm = torch.autograd.grad((carafe_reference(xr, mr, kk, gg, ss) * go.cpu()).sum(), (xr, mr))
        edges.close(gx, wx)
        edges.close(gm, wm)
        return
    else:
        got = getattr(torch.ops.visdet_ops, fn_name[3:])(x, masks, k, g, s)
    edges.close(got, carafe_reference(x.cpu(), masks.cpu(), kk, gg, ss))


def _carafe_pack(device, gen, **kw):
    args = dict(channels=4, scale_factor=2, up_kernel=3, up_group=1, encoder_kernel=3, compressed_channels=8)
    args.update(kw)
    m = CARAFEPack(**args).to(device).double()
    x = torch.randn(1, m.channels, 3, 4, generator=gen, dtype=torch.float64).to(device)
    got = m(x)
    # The content encoder starts near zero: every kernel is close to a uniform average.
    assert got.shape == (1, m.channels, 3 * m.scale_factor, 4 * m.scale_factor)
    assert torch.isfinite(got).all()


INTEGER_EDGE_ROWS = [
    *(
        edges.Row(
            f"{fn}-{arg}",
            (arg,),
            b,
            lambda d, v, g, fn=fn, key=key: _carafe(d, g, fn, **{key: v}),
            at_bound=at,
            valid=ok,
        )
        for fn in (*NAMES, *(f"op.{op}" for op in FNS), *(f"op._{op}_backward" for op in FNS))
        for arg, key, b, at, ok in (
            ("kernel_size", "k", _args.CARAFE_KERNEL, (1, 5, 2), lambda v: v % 2 == 1),
            ("group_size", "g", _args.CARAFE_GROUPS, (1, 4), lambda v: True),
            ("scale_factor", "s", _args.CARAFE_SCALE, (1, 3), lambda v: True),
        )
    ),
    *(
        edges.Row(
            f"CARAFEPack-{arg}",
            (arg,),
            b,
            lambda d, v, g, arg=arg: _carafe_pack(d, g, **{arg: v}),
            # An even up_kernel is rejected (carafe needs odd); an even encoder_kernel
            # changes the mask size (as in mmcv), so only odd ones are tried.
            at_bound={"up_kernel": (1, 2, 3), "encoder_kernel": (1, 3), "up_group": (1, 2)}.get(arg, (1, 3)),
            valid=(lambda v: v % 2 == 1) if arg == "up_kernel" else (lambda v: True),
        )
        for arg, b in (
            ("channels", _args.CHANNELS),
            ("scale_factor", _args.CARAFE_SCALE),
            ("up_kernel", _args.CARAFE_KERNEL),
            ("up_group", _args.CARAFE_GROUPS),
            ("encoder_kernel", _args.KERNEL_SIZE),
            ("encoder_dilation", _args.DILATION),
            ("compressed_channels", _args.CHANNELS),
        )
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)


def test_fake_impl_rejects_like_eager():
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.carafe(torch.empty(2, 3, 8, 8), torch.empty(2, 9, 16, 16), 3, 1, 2**31),
        "carafe: scale_factor must be in",
    )


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_carafe(gen, name):
    if name == "CARAFEPack":
        layer = amp.randomize(visdet_ops.CARAFEPack(8, 2, up_kernel=3, up_group=1, encoder_kernel=3), gen, 0.1)

        def body(p, img):
            return p["layer"](p["stem"](img))

        return amp.Case(body, (amp.img(gen, h=12, w=14),), amp.LOW, stem=amp.Stem(8, gen), layer=layer)
    k, g, s = 3, 2, 2
    encoder = amp.randomize(torch.nn.Conv2d(8, k * k * g * s * s, 3, padding=1), gen, 0.1)

    def body(p, img):
        x = p["stem"](img)
        m = torch.nn.functional.pixel_shuffle(p["encoder"](x), s)
        n, _, h, w = m.shape
        # softmax under autocast gives float32 masks beside 16-bit features.
        m = m.view(n, g, k * k, h, w).softmax(2).view(n, g * k * k, h, w)
        return FNS[name](x, m, k, g, s) if name in FNS else getattr(visdet_ops, name)(k, g, s)(x, m)

    return amp.Case(body, (amp.img(gen, h=12, w=14),), amp.LOW, stem=amp.Stem(8, gen), encoder=encoder)


AUTOCAST_CASES = {name: lambda g, name=name: case_carafe(g, name) for name in (*NAMES, "CARAFEPack")}


def _opcheck_carafe(name: str):
    def case(device, dtype, gen):
        masks = torch.rand(2, 18, 20, 24, generator=gen).to(device).requires_grad_()
        return getattr(torch.ops.visdet_ops, name).default, (amp.features(device, dtype, gen), masks, 3, 2, 2)

    return case


AUTOCAST_OPCHECKS = {op: _opcheck_carafe(op) for op in FNS}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_CARAFE_FN_BAD = ("even_k", "groups", "mask_channels", "mask_size", "ndim", "dtype", "kernel_int", "scale_int")
_CARAFE_CTOR_BAD = ("ctor_int", "ctor_float", "ctor_even")


@st.composite
def _carafe_case(draw, device):
    fn = draw(st.sampled_from([*NAMES, "CARAFEPack"]))
    main = draw(st.sampled_from(core.FLOATS))
    case = {"fn": fn, "seed": draw(st.integers(0, 2**31 - 1))}
    g = draw(st.sampled_from([1, 2, 3]))
    case.update(
        n=draw(st.integers(0, 2)),
        g=g,
        c=g * draw(st.integers(0 if fn != "CARAFEPack" else 1, 3)),
        h=draw(st.integers(0, 5)),
        w=draw(st.integers(0, 5)),
        big=draw(core.one_in(10)),
        k=draw(st.sampled_from([1, 3, 5])),
        s=draw(st.sampled_from([1, 2, 3])),
    )
    if case["big"]:  # more channels than one CUDA chunk (32), maps larger than a tile side
        case.update(c=g * draw(st.integers(1, 14)), h=draw(st.integers(6, 12)), w=draw(st.integers(6, 12)))
    if fn == "CARAFEPack":
        bad = core.pick_bad(draw, ("ctor_int", "ctor_even", "ctor_float"))
        case["ctor"] = {
            "channels": case["c"],
            "scale_factor": case["s"],
            "up_kernel": case["k"],
            "up_group": g,
            "encoder_kernel": draw(st.sampled_from([1, 3])),
            "encoder_dilation": draw(st.sampled_from([1, 2])),
            "compressed_channels": draw(st.integers(1, 4)),
        }
        main = draw(st.sampled_from(["f32", "f64"]))
        case["t"], mixed = {"x": {"dt": main, "lay": draw(st.sampled_from(["c", "cl", "t"])), "dev": device}}, False
    else:
        bad = core.pick_bad(draw, _CARAFE_FN_BAD + (_CARAFE_CTOR_BAD if fn in ("CARAFE", "CARAFENaive") else ()))
        case["t"], mixed = core.draw_tensors(draw, {"features": 4, "masks": 4}, main, device)
    if bad == "dtype":
        case["t"][draw(st.sampled_from(["features", "masks"]))]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "even_k":
        case["k"] = draw(st.sampled_from([2, 4]))
    elif bad == "groups":
        case["g"] = g = max(g, 2)
        case["c"] = g * draw(st.integers(0, 2)) + draw(st.integers(1, g - 1))
    elif bad in ("kernel_int", "scale_int", "ctor_int", "ctor_float"):
        args = sorted(case["ctor"]) if fn == "CARAFEPack" else ["kernel_size", "group_size", "scale_factor"]
        case["arg"] = draw(st.sampled_from(args))
        case["value"] = draw(core.bad_int() if bad != "ctor_float" else st.sampled_from([1.5, "3", None]))
    elif bad == "ctor_even":
        case["arg"], case["value"] = "up_kernel" if fn == "CARAFEPack" else "kernel_size", 4
    elif bad == "ndim":
        case["arg"] = draw(st.sampled_from(["features", "masks"]))
    case["bad"] = bad
    # An int that happens to be valid (bad_int's 0 for a non-negative one, ...) is checked by its range in run().
    case["expect"] = core.expectation(bad, mixed)
    return case


def _carafe_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "carafe")
    n, c, h, w, k, g, s = (case[key] for key in "nchwkgs")
    if fn == "CARAFEPack":
        kwargs = dict(case["ctor"])
        if bad:
            kwargs[case["arg"]] = case["value"]
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: visdet_ops.CARAFEPack(**kwargs))
        if mod is None:
            return
        dt = case["t"]["x"]["dt"]
        mod = mod.to(run.device, core.DTYPES[dt])
        with torch.no_grad():
            mod.content_encoder.weight.normal_(0, 0.3)
        h, w = max(h, 1), max(w, 1)
        a = run.arg("x", run.randn(n, c, h, w))
        x = a.x(grad=True)

        def check(out):
            rl, r = a.ref(grad=True)
            m64 = copy.deepcopy(mod).cpu().double()
            if r.numel():
                want = carafe_reference(r, pack_masks(m64, r), m64.up_kernel, m64.up_group, m64.scale_factor)
            else:
                want = torch.zeros(n, c, h * s, w * s, dtype=torch.float64)
            core.assert_close("output", out, want, dt)

        run.outcome(lambda: mod(x), check, expect="ok")
        return
    fshape = [n, c, h, w]
    mshape = [n, k * k * g, h * s, w * s]
    if bad == "mask_channels":
        mshape[1] += 1
    elif bad == "mask_size":
        mshape[2 + case["seed"] % 2] += 1
    elif bad == "ndim":
        if case["arg"] == "features":
            fshape = fshape[1:]
        else:
            mshape = mshape[1:]
    feats = run.arg("features", run.randn(*fshape))
    masks = run.arg("masks", run.rand(*mshape) + 0.1)
    ints = {"kernel_size": k, "group_size": g, "scale_factor": s}
    if bad in ("kernel_int", "scale_int", "ctor_int", "ctor_float", "ctor_even"):
        ints[case["arg"]] = case["value"]
    mixed = case["expect"] == "either"
    dt = core.worst(feats.dt, masks.dt)
    xf, xm = feats.x(grad=True), masks.x(grad=True)

    if fn in ("CARAFE", "CARAFENaive"):
        # The constructor checks the three ints (type and range); an even kernel_size fails at the forward.
        ctor_bad = bad in ("kernel_int", "scale_int", "ctor_int", "ctor_float")
        mod = run.construct(lambda: getattr(visdet_ops, fn)(*ints.values()), expect="error" if ctor_bad else "ok")
        if mod is None:
            return
        call = lambda: mod(xf, xm)  # noqa: E731
    else:
        call = lambda: getattr(visdet_ops, fn)(xf, xm, *ints.values())  # noqa: E731

    def check(out):
        rfl, rf = feats.ref(grad=True)
        rml, rm = masks.ref(grad=True)
        if rf.numel():
            want = carafe_reference(rf, rm, k, g, s)
        else:  # F.unfold (the reference) takes no empty map
            want = (rf.sum() + rm.sum()) * torch.zeros(n, c, h * s, w * s, dtype=torch.float64)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, feats.dt, mixed)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            core.check_grads([("features", feats, rfl), ("masks", masks, rml)], dt)

    run.outcome(call, check)


FUZZ = core.family("carafe", [*NAMES, "CARAFEPack"], ops=tuple(FNS))((_carafe_case, _carafe_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    op: lambda rng, fn=fn: (
        lambda f, m: fn(f, m, 3, 1, 2),
        (torch.randn(1, 2, 4, 4, generator=rng), torch.rand(1, 9, 8, 8, generator=rng)),
        {"kernel_size": 3, "group_size": 1, "scale_factor": 2},
    )
    for op, fn in FNS.items()
}
