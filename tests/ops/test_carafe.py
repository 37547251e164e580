from __future__ import annotations

import pytest
import torch

import visdet_ops
from visdet_ops import CARAFE, CARAFENaive, CARAFEPack
from visdet_ops.reference.carafe import carafe_reference

from ..conftest import assert_normal_init, assert_uniform_init, assert_zero, require_cuda

FNS = {"carafe": visdet_ops.carafe, "carafe_naive": visdet_ops.carafe_naive}
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
    x, masks = case(rng, n=2, c=4, h=3, w=4, k=3, g=2, s=2)
    args = (x.to(device).requires_grad_(), masks.to(device).requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: FNS[op](a, b, 3, 2, 2), args, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(FNS))
def test_opcheck(device, rng, op):
    x, masks = case(rng, n=2, c=4, h=3, w=4, k=3, g=2, s=2)
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
    out = FNS[op](x, masks, 3, 2 if c else 1, 2) if c else FNS[op](x, masks[:, :9], 3, 1, 2)
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
        ((x, m, 3, 0, 2), f"{op}: group_size must be >= 1, got 0"),
        ((x, m, 3, 2, 0), f"{op}: scale_factor must be >= 1, got 0"),
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


def test_carafe_pack_forward(device, rng):
    torch.manual_seed(0)
    pack = CARAFEPack(8, 2, up_kernel=3, up_group=2, compressed_channels=4).double().to(device)
    with torch.no_grad():
        pack.content_encoder.weight.normal_(0, 0.3)
    x = torch.randn(2, 8, 6, 7, generator=rng, dtype=torch.float64).to(device)
    out = pack(x)
    assert out.shape == (2, 8, 12, 14)
    mask = pack.kernel_normalizer(pack.content_encoder(pack.channel_compressor(x)))
    torch.testing.assert_close(
        mask.view(2, 2, 9, 12, 14).sum(2), torch.ones(2, 2, 12, 14, dtype=torch.float64, device=device)
    )
    torch.testing.assert_close(out.cpu(), carafe_reference(x.cpu(), mask.detach().cpu(), 3, 2, 2))
    out.sum().backward()
    assert pack.content_encoder.weight.grad is not None and pack.channel_compressor.weight.grad is not None


def test_torch_compile_fullgraph(rng):
    pack = CARAFEPack(8, 2, up_kernel=3, compressed_channels=4)
    x = torch.randn(2, 8, 5, 6, generator=rng)

    def f(inp):
        return pack(inp).relu().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    xg = x.clone().requires_grad_()
    out = compiled(xg)
    out.backward()
    gw = pack.content_encoder.weight.grad.clone()
    pack.zero_grad()
    xr = x.clone().requires_grad_()
    want = f(xr)
    want.backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(xg.grad, xr.grad)
    torch.testing.assert_close(gw, pack.content_encoder.weight.grad)


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
    dev = torch.device("cuda")
    x = torch.randn(n, c, h, w, generator=rng, dtype=torch.float64).to(dev)
    masks = torch.randn(n, 25, 2 * h, 2 * w, generator=rng, dtype=torch.float64).softmax(1).to(dev)
    grad = torch.randn(n, c, 2 * h, 2 * w, generator=rng, dtype=torch.float64).to(dev)
    xr, mr = x.clone().requires_grad_(), masks.clone().requires_grad_()
    want_gx, want_gm = torch.autograd.grad(carafe_reference(xr, mr, 5, 1, 2), (xr, mr), grad)
    xd, md = x.float().requires_grad_(), masks.float().requires_grad_()
    gx, gm = torch.autograd.grad(visdet_ops.carafe(xd, md, 5, 1, 2), (xd, md), grad.float())
    torch.testing.assert_close(gx.double(), want_gx, rtol=1e-4, atol=1e-4)
    # A masks gradient sums c products: its scale grows with sqrt(c).
    torch.testing.assert_close(gm.double(), want_gm, rtol=1e-4, atol=1e-4 * c**0.5)
