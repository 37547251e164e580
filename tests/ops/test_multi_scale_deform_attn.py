from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import MultiScaleDeformableAttention, multi_scale_deformable_attn
from visdet_ops.ops import _args
from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import assert_uniform_init, require_cuda

OP = torch.ops.visdet_ops.multi_scale_deformable_attn.default
BACKWARD_OP = torch.ops.visdet_ops._multi_scale_deformable_attn_backward.default


def level_tables(shapes: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    spatial = torch.tensor(shapes, dtype=torch.int64)
    sizes = spatial.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    return spatial, start


def case(rng, bs=2, shapes=((6, 7), (3, 4), (2, 2)), heads=3, dim=4, queries=9, points=3, spread=0.2):
    """float64 inputs; sampling locations reach `spread` outside [0, 1] (zero padding, partial corners)."""
    spatial, start = level_tables(list(shapes))
    keys = int(spatial.prod(1).sum())
    value = torch.randn(bs, keys, heads, dim, generator=rng, dtype=torch.float64)
    loc = torch.rand(bs, queries, heads, len(shapes), points, 2, generator=rng, dtype=torch.float64)
    loc = loc * (1 + 2 * spread) - spread
    attn = torch.rand(bs, queries, heads, len(shapes), points, generator=rng, dtype=torch.float64)
    return value, spatial, start, loc, attn


def reference_with_grads(value, spatial, loc, attn, grad_out):
    inputs = [t.detach().clone().requires_grad_() for t in (value, loc, attn)]
    out = multi_scale_deformable_attn_reference(inputs[0], spatial, inputs[1], inputs[2])
    grads = torch.autograd.grad(out, inputs, grad_out)
    return out.detach(), grads


def ours_with_grads(value, spatial, start, loc, attn, grad_out, device, dtype):
    inputs = [t.detach().to(device, dtype).requires_grad_() for t in (value, loc, attn)]
    out = multi_scale_deformable_attn(inputs[0], spatial.to(device), start.to(device), inputs[1], inputs[2])
    grads = torch.autograd.grad(out, inputs, grad_out.to(device, dtype))
    return out.detach(), grads


# float32: a location rounds to ~1e-7 relative, which moves a bilinear value by
# ~1e-6 on randn data times the map size; a logic error moves it by O(0.1).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float64: dict(rtol=1e-10, atol=1e-10)}

CONFIGS = {
    "mixed": dict(),
    # head_dim 32: the vectorised CUDA path (and one warp-shuffle group per 8 threads)
    "dim32": dict(dim=32, heads=2, queries=5),
    # odd head_dim: scalar path, atomic reduction of the location/weight grads on CUDA
    "dim3": dict(dim=3, heads=2),
    # head_dim 256 float32 on CUDA: 64 threads per (query, head), the atomic reduction
    "dim256": dict(dim=256, heads=1, queries=4, points=2),
    "one_level": dict(shapes=((5, 1),), points=4),
    "far_outside": dict(spread=1.0),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_forward_backward_match_reference(device, dtype, rng, config):
    value, spatial, start, loc, attn = case(rng, **CONFIGS[config])
    grad_out = torch.randn(*loc.shape[:2], value.shape[2] * value.shape[3], generator=rng, dtype=torch.float64)
    want, want_grads = reference_with_grads(value, spatial, loc, attn, grad_out)
    got, got_grads = ours_with_grads(value, spatial, start, loc, attn, grad_out, device, dtype)
    assert got.dtype == dtype and got.device.type == device.type
    assert got.shape == (value.shape[0], loc.shape[1], value.shape[2] * value.shape[3])
    torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])
    tol = TOL[dtype]
    if dtype == torch.float32:
        # location grads scale with the map size (d/dx of x * W).
        tol = dict(rtol=1e-3, atol=1e-3)
    for name, g, w in zip(("value", "sampling_locations", "attention_weights"), got_grads, want_grads, strict=True):
        torch.testing.assert_close(g.cpu().double(), w, **tol, msg=lambda m, n=name: f"grad of {n}: {m}")


@pytest.mark.parametrize("dtype16", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("dim", [32, 6])
def test_half(device, rng, dtype16, dim):
    value, spatial, start, loc, attn = case(rng, dim=dim, heads=2, queries=16)
    # Compare with the reference on the inputs rounded to the 16-bit type.
    value, loc, attn = (t.to(dtype16).double() for t in (value, loc, attn))
    grad_out = torch.randn(value.shape[0], loc.shape[1], value.shape[2] * dim, generator=rng, dtype=torch.float64)
    want, want_grads = reference_with_grads(value, spatial, loc, attn, grad_out.to(dtype16).double())
    got, got_grads = ours_with_grads(value, spatial, start, loc, attn, grad_out, device, dtype16)
    assert got.dtype == dtype16
    # float32 accumulation; the error is the output's rounding plus the
    # locations' 16-bit rounding amplified by the map size.
    tol = 2e-2 if dtype16 == torch.float16 else 1e-1
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert g.dtype == dtype16
        scale = max(w.abs().max().item(), 1.0)
        assert (g.cpu().double() - w).abs().max().item() <= 4 * tol * scale


def test_mixed_precision_inputs_are_cast_to_value_dtype(device, rng):
    """mmcv casts sampling_locations/attention_weights to value's dtype (AMP)."""
    value, spatial, start, loc, attn = case(rng)
    loc32 = loc.float().requires_grad_()
    got = multi_scale_deformable_attn(
        value.to(device), spatial.to(device), start.to(device), loc32.to(device), attn.to(device)
    )
    assert got.dtype == torch.float64
    want = multi_scale_deformable_attn_reference(value, spatial, loc32.double(), attn)
    torch.testing.assert_close(got.cpu(), want.detach())
    got.sum().backward()
    assert loc32.grad is not None and loc32.grad.dtype == torch.float32


def test_gradcheck(device, rng):
    value, spatial, start, loc, attn = case(rng, shapes=((3, 4), (2, 2)), heads=2, dim=3, queries=3, points=2)
    # random samples sit on a pixel-grid line (where the bilinear has a kink) with probability 0
    inputs = [t.to(device).requires_grad_() for t in (value, loc, attn)]
    spatial, start = spatial.to(device), start.to(device)

    def fn(v, sl, aw):
        return multi_scale_deformable_attn(v, spatial, start, sl, aw)

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5)


def test_opcheck(device, rng):
    value, spatial, start, loc, attn = case(rng, heads=2, dim=4, queries=3, points=2)
    args = (
        value.to(device).requires_grad_(),
        spatial.to(device),
        start.to(device),
        loc.to(device).requires_grad_(),
        attn.to(device).requires_grad_(),
        64,
    )
    torch.library.opcheck(OP, args)
    grad_out = torch.randn(2, 3, 8, generator=rng, dtype=torch.float64).to(device)
    torch.library.opcheck(BACKWARD_OP, (grad_out, *[a.detach() if isinstance(a, torch.Tensor) else a for a in args]))


def test_double_backward_raises(rng):
    value, spatial, start, loc, attn = case(rng)
    v = value.requires_grad_()
    out = multi_scale_deformable_attn(v, spatial, start, loc, attn)
    (g,) = torch.autograd.grad(out.sum(), v, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


@pytest.mark.parametrize("what", ["bs", "queries", "heads", "dim", "points"])
def test_empty(device, rng, what):
    sizes = dict(bs=2, queries=5, heads=2, dim=4, points=3)
    sizes[what] = 0
    value, spatial, start, loc, attn = case(rng, shapes=((3, 4), (2, 2)), spread=0, **sizes)
    value, loc, attn = (t.float().to(device).requires_grad_() for t in (value, loc, attn))
    out = multi_scale_deformable_attn(value, spatial.to(device), start.to(device), loc, attn)
    assert out.shape == (sizes["bs"], sizes["queries"], sizes["heads"] * sizes["dim"])
    if what == "points":
        assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    for t in (value, loc, attn):
        assert t.grad.shape == t.shape
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_non_contiguous(device, dtype, rng):
    value, spatial, start, loc, attn = case(rng, dim=4)
    want = multi_scale_deformable_attn_reference(value, spatial, loc, attn)
    v_nc = value.transpose(2, 3).contiguous().transpose(2, 3).to(device, dtype)
    loc_nc = torch.cat([loc, loc], -1).to(device, dtype)[..., ::2]
    loc_nc[:] = loc.to(device, dtype)
    attn_nc = attn.transpose(0, 1).contiguous().transpose(0, 1).to(device, dtype)
    # Strided views built on the device (.to() would make them contiguous).
    spatial_nc = torch.cat([spatial, spatial], 1).to(device)[:, ::2]
    spatial_nc[:] = spatial
    start_nc = torch.stack([start, start], 1).to(device)[:, 0]
    for t in (v_nc, loc_nc, attn_nc, spatial_nc, start_nc):
        assert not t.is_contiguous()
    got = multi_scale_deformable_attn(v_nc, spatial_nc, start_nc, loc_nc, attn_nc)
    torch.testing.assert_close(got.cpu().double(), want, **TOL[dtype])


def test_level_tables_int32_and_lists(rng):
    value, spatial, start, loc, attn = case(rng)
    want = multi_scale_deformable_attn(value, spatial, start, loc, attn)
    torch.testing.assert_close(multi_scale_deformable_attn(value, spatial.int(), start.int(), loc, attn), want)
    torch.testing.assert_close(multi_scale_deformable_attn(value, spatial.tolist(), start.tolist(), loc, attn), want)


def test_boundary_semantics(device):
    """(x, y) -> (x W - 0.5, y H - 0.5) with zero padding: 0 and 1 are the
    outer edges (half a pixel beyond the outer centres); a sample is dropped at
    -1 and at H (W) in pixel coordinates."""
    value = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(1, 6, 1, 1)  # one 2x3 level
    spatial, start = level_tables([(2, 3)])
    pts = [(0.5 / 3, 0.25), (0.0, 0.25), (1.0, 0.75), (-1 / 6, 0.25), (0.5, 1.0), (1.2, 0.5), (0.5, 0.5)]
    loc = torch.tensor(pts, dtype=torch.float64).reshape(1, len(pts), 1, 1, 1, 2)
    attn = torch.ones(1, len(pts), 1, 1, 1, dtype=torch.float64)
    got = multi_scale_deformable_attn(
        value.to(device), spatial.to(device), start.to(device), loc.to(device), attn.to(device)
    )
    # pixel centre (0, 0): 1; left edge: half of 1; right edge of row 1: half of 6;
    # x = -1 px: dropped; bottom edge at x = 1.0 px: half of 5; x beyond W: 0;
    # centre of the map (y 0.5, x 1.0): mean of 2 and 5.
    want = torch.tensor([1.0, 0.5, 3.0, 0.0, 2.5, 0.0, 3.5], dtype=torch.float64)
    torch.testing.assert_close(got.cpu().reshape(-1), want)
    torch.testing.assert_close(want, multi_scale_deformable_attn_reference(value, spatial, loc, attn).reshape(-1))


def test_im2col_step_rule(rng):
    value, spatial, start, loc, attn = case(rng, bs=4)
    want = multi_scale_deformable_attn(value, spatial, start, loc, attn, 64)
    for step in (1, 2, 4, 64):
        torch.testing.assert_close(multi_scale_deformable_attn(value, spatial, start, loc, attn, step), want)
    with pytest.raises(RuntimeError, match=r"batch size \(4\) must be divisible by min\(im2col_step, batch size\) = 3"):
        multi_scale_deformable_attn(value, spatial, start, loc, attn, 3)
    with pytest.raises(RuntimeError, match="im2col_step must be positive, got 0"):
        multi_scale_deformable_attn(value, spatial, start, loc, attn, 0)


def test_large_random_float32_matches_reference(device, rng):
    value, spatial, start, loc, attn = case(
        rng, bs=2, shapes=((25, 38), (13, 19), (7, 10), (4, 5)), heads=8, dim=32, queries=100, points=4, spread=0.05
    )
    want = multi_scale_deformable_attn_reference(value, spatial, loc, attn)
    got = multi_scale_deformable_attn(
        value.float().to(device), spatial.to(device), start.to(device), loc.float().to(device), attn.float().to(device)
    )
    assert ((got.cpu().double() - want).norm() / want.norm()).item() < 1e-5


def bad_case():
    spatial, start = level_tables([(2, 3), (1, 2)])
    return dict(
        value=torch.zeros(2, 8, 2, 4),
        value_spatial_shapes=spatial,
        value_level_start_index=start,
        sampling_locations=torch.zeros(2, 5, 2, 2, 3, 2),
        attention_weights=torch.zeros(2, 5, 2, 2, 3),
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(value=torch.zeros(2, 8, 8)), "value must have 4 dimensions"),
        (dict(value=torch.zeros(2, 9, 2, 4)), r"sum\(H \* W\) = 8 but value has 9 keys"),
        (dict(value=torch.zeros(2, 7, 2, 4)), r"level 1 \(1x2\) outside the keys of value \[0, 7\)"),
        (dict(value=torch.zeros(3, 8, 2, 4)), r"sampling_locations must have shape \[bs, num_queries"),
        (dict(value=torch.zeros(2, 8, 3, 4)), r"sampling_locations must have shape"),
        (dict(value_spatial_shapes=torch.tensor([[2, 3], [1, 2], [1, 1]])), "value_level_start_index must have shape"),
        (dict(value_spatial_shapes=torch.tensor([2, 3])), "value_spatial_shapes must have 2 dimensions"),
        (dict(value_spatial_shapes=torch.tensor([[2, 3, 1], [1, 2, 1]])), r"\[num_levels, 2\] \(H, W\)"),
        (dict(value_spatial_shapes=torch.tensor([[2.0, 3], [1, 2]])), "value_spatial_shapes must be an integer"),
        (dict(value_spatial_shapes=torch.tensor([[-2, 3], [1, 2]])), "must be non-negative, got \\(-2, 3\\)"),
        (
            dict(value_spatial_shapes=torch.tensor([[2, 3], [2, 2]]), value_level_start_index=torch.tensor([0, 4])),
            "value_spatial_shapes cover more positions than value has keys",
        ),
        (dict(value_spatial_shapes=torch.tensor([[1 << 40, 1 << 40], [1, 2]])), "more positions than value"),
        (dict(value_level_start_index=torch.tensor([0, 7])), r"value_level_start_index\[1\] = 7 puts level 1"),
        (dict(value_level_start_index=torch.tensor([-1, 6])), r"value_level_start_index\[0\] = -1"),
        (dict(value_level_start_index=torch.tensor([0.0, 6.0])), "value_level_start_index must be an integer"),
        (dict(sampling_locations=torch.zeros(2, 5, 2, 2, 3)), "sampling_locations must have 6 dimensions"),
        (dict(sampling_locations=torch.zeros(2, 5, 2, 2, 3, 3)), "sampling_locations must have shape"),
        (dict(attention_weights=torch.zeros(2, 5, 2, 2, 4)), r"attention_weights must have shape .*\[2, 5, 2, 2, 3\]"),
        (dict(attention_weights=torch.zeros(2, 5, 2, 2)), "attention_weights must have 5 dimensions"),
        (
            dict(value=torch.zeros(2, 8, 2, 4, dtype=torch.int32)),
            "value must be a floating point tensor",
        ),
    ],
)
def test_bad_inputs(kwargs, match):
    args = bad_case()
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=match):
        multi_scale_deformable_attn(**args)


def test_bad_inputs_raw_op():
    args = bad_case()
    args["sampling_locations"] = args["sampling_locations"].double()
    with pytest.raises(RuntimeError, match=r"sampling_locations must have the dtype of value \(Float\) or Float"):
        OP(*args.values(), 64)
    grad_out = torch.zeros(2, 5, 7)
    with pytest.raises(RuntimeError, match=r"grad_output must have shape \[2, 5, 8\]"):
        BACKWARD_OP(grad_out, *bad_case().values(), 64)


def test_bad_inputs_cuda(monkeypatch):
    require_cuda()
    args = {k: v.cuda() for k, v in bad_case().items()}
    # Level tables on the GPU are not read on the host by default (no sync): a level past value's
    # keys gives NaN, tables short of the keys are used as they are.
    short = torch.ones(2, 7, 2, 4, device="cuda")
    out = multi_scale_deformable_attn(**{**args, "value": short, "attention_weights": args["attention_weights"] + 1})
    assert out.isnan().all()
    wide = torch.zeros(2, 9, 2, 4, device="cuda")
    assert not multi_scale_deformable_attn(**{**args, "value": wide}).isnan().any()
    for variable in ("VISDET_OPS_SYNC_LEVEL_CHECKS", "VISDET_OPS_SYNC_CHECKS"):
        with monkeypatch.context() as m:
            m.setenv(variable, "1")
            with pytest.raises(RuntimeError, match=r"sum\(H \* W\) = 8 but value has 9 keys"):
                multi_scale_deformable_attn(**{**args, "value": wide})
            with pytest.raises(RuntimeError, match=r"puts level 1 \(1x2\) outside the keys of value \[0, 7\)"):
                multi_scale_deformable_attn(**{**args, "value": short})
    with pytest.raises(RuntimeError, match="value and sampling_locations must be on the same device"):
        OP(args["value"], args["value_spatial_shapes"], args["value_level_start_index"],
           torch.zeros(2, 5, 2, 2, 3, 2), args["attention_weights"], 64)  # fmt: skip
    # level tables on the CPU are fine with a CUDA value
    out = multi_scale_deformable_attn(**{**args, "value_spatial_shapes": bad_case()["value_spatial_shapes"]})
    assert out.is_cuda
    out = multi_scale_deformable_attn(**{**args, "value_level_start_index": bad_case()["value_level_start_index"]})
    assert out.is_cuda


def test_backward_bad_device_tables_stay_in_bounds(rng):
    """The CUDA backward does not read level tables that live on the GPU on the
    host (no sync): the kernel bounds-checks each level, so a level outside
    the keys contributes nothing instead of touching memory out of bounds."""
    require_cuda()
    value, spatial, start, loc, attn = case(rng, shapes=((2, 3), (1, 2)), heads=2, dim=4, queries=5, spread=0)  # 8 keys
    value, loc, attn = value.cuda(), loc.cuda(), attn.cuda()
    grad_out = torch.randn(2, 5, 8, generator=rng, dtype=torch.float64).cuda()
    good = BACKWARD_OP(grad_out, value, spatial.cuda(), start.cuda(), loc, attn, 64)
    for bad_start in ([0, 7], [0, -3], [0, 1 << 40]):
        got = BACKWARD_OP(grad_out, value, spatial.cuda(), torch.tensor(bad_start).cuda(), loc, attn, 64)
        torch.cuda.synchronize()
        # level 0 as with good tables; level 1 dropped.
        for i in (1, 2):  # the sampling_locations and attention_weights gradients
            torch.testing.assert_close(got[i][:, :, :, 0], good[i][:, :, :, 0])
            assert torch.equal(got[i][:, :, :, 1], torch.zeros_like(got[i][:, :, :, 1]))
        torch.testing.assert_close(got[0][:, :6], good[0][:, :6])
        assert torch.equal(got[0][:, 6:], torch.zeros_like(got[0][:, 6:]))
    # tables on the CPU are still validated
    with pytest.raises(RuntimeError, match=r"value_level_start_index\[1\] = 7"):
        BACKWARD_OP(grad_out, value, spatial, torch.tensor([0, 7]), loc, attn, 64)


def test_cpu_backward_is_deterministic(rng):
    value, spatial, start, loc, attn = case(rng, bs=2, heads=4, queries=50)
    grad_out = torch.randn(2, 50, 16, generator=rng, dtype=torch.float64)
    previous = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        a = ours_with_grads(value, spatial, start, loc, attn, grad_out, torch.device("cpu"), torch.float32)[1]
        b = ours_with_grads(value, spatial, start, loc, attn, grad_out, torch.device("cpu"), torch.float32)[1]
    finally:
        torch.use_deterministic_algorithms(previous)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


# ---------------------------------------------------------------- the module

# mmcv/ops/multi_scale_deform_attn.py (MultiScaleDeformableAttention.__init__):
# sampling_offsets = Linear(embed_dims, num_heads * num_levels * num_points * 2),
# attention_weights = Linear(embed_dims, num_heads * num_levels * num_points),
# value_proj = Linear(embed_dims, int(embed_dims * value_proj_ratio)),
# output_proj = Linear(value_proj_size, embed_dims). Defaults 256/8/4/4, as in
# the encoder and decoder layers of mmdet's Deformable DETR checkpoints.
MMCV_STATE_DICT = {
    "sampling_offsets.weight": (256, 256),
    "sampling_offsets.bias": (256,),
    "attention_weights.weight": (128, 256),
    "attention_weights.bias": (128,),
    "value_proj.weight": (256, 256),
    "value_proj.bias": (256,),
    "output_proj.weight": (256, 256),
    "output_proj.bias": (256,),
}


def test_module_state_dict_matches_mmcv():
    m = MultiScaleDeformableAttention()
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == MMCV_STATE_DICT
    checkpoint = {k: torch.randn(shape) for k, shape in MMCV_STATE_DICT.items()}
    m.load_state_dict(checkpoint, strict=True)
    assert torch.equal(m.sampling_offsets.bias, checkpoint["sampling_offsets.bias"])
    half = MultiScaleDeformableAttention(embed_dims=64, num_heads=4, num_levels=3, num_points=2, value_proj_ratio=0.5)
    shapes = {k: tuple(v.shape) for k, v in half.state_dict().items()}
    assert shapes["sampling_offsets.weight"] == (4 * 3 * 2 * 2, 64)
    assert shapes["value_proj.weight"] == (32, 64) and shapes["output_proj.weight"] == (64, 32)
    assert isinstance(m.dropout, torch.nn.Dropout) and m.dropout.p == 0.1


def test_module_init_weights_match_mmcv():
    m = MultiScaleDeformableAttention(embed_dims=32, num_heads=8, num_levels=2, num_points=3)
    assert torch.equal(m.sampling_offsets.weight, torch.zeros_like(m.sampling_offsets.weight))
    assert torch.equal(m.attention_weights.weight, torch.zeros_like(m.attention_weights.weight))
    assert torch.equal(m.attention_weights.bias, torch.zeros_like(m.attention_weights.bias))
    assert torch.equal(m.value_proj.bias, torch.zeros(32)) and torch.equal(m.output_proj.bias, torch.zeros(32))
    bias = m.sampling_offsets.bias.view(8, 2, 3, 2)
    for h in range(8):
        theta = 2 * math.pi * h / 8
        d = torch.tensor([math.cos(theta), math.sin(theta)])
        d = d / d.abs().max()
        for p in range(3):
            for lvl in range(2):
                torch.testing.assert_close(bias[h, lvl, p], d * (p + 1))
    # value_proj/output_proj: mmengine's xavier_init(distribution='uniform',
    # bias=0) = xavier_uniform_(gain=1), bound sqrt(6 / (fan_in + fan_out)).
    wide = MultiScaleDeformableAttention(embed_dims=64, num_heads=8, value_proj_ratio=2.0)
    assert_uniform_init(wide.value_proj.weight, math.sqrt(6 / (64 + 128)), "value_proj.weight")
    assert_uniform_init(wide.output_proj.weight, math.sqrt(6 / (128 + 64)), "output_proj.weight")
    assert torch.equal(wide.value_proj.bias, torch.zeros(128)) and torch.equal(wide.output_proj.bias, torch.zeros(64))


def module_reference(m, query, value, identity, reference_points, spatial, key_padding_mask=None):
    """mmcv's forward on the CPU path (multi_scale_deformable_attn_pytorch), batch-first, eval mode. A level with
    no keys (H or W 0) samples nothing: it is left out of the sampling (grid_sample takes no empty map), and so of
    the locations (mmcv divides its offsets by 0)."""
    bs, nq, _ = query.shape
    v = m.value_proj(value)
    if key_padding_mask is not None:
        v = v.masked_fill(key_padding_mask[..., None], 0.0)
    v = v.view(bs, value.shape[1], m.num_heads, v.shape[-1] // m.num_heads)
    off = m.sampling_offsets(query).view(bs, nq, m.num_heads, m.num_levels, m.num_points, 2)
    aw = m.attention_weights(query).view(bs, nq, m.num_heads, m.num_levels * m.num_points).softmax(-1)
    aw = aw.view(bs, nq, m.num_heads, m.num_levels, m.num_points)
    keep = [level for level, (h, w) in enumerate(spatial.tolist()) if h * w]
    spatial, reference_points, off, aw = (
        spatial[keep],
        reference_points[:, :, keep],
        off[:, :, :, keep],
        aw[:, :, :, keep],
    )
    if reference_points.shape[-1] == 2:
        norm = torch.stack([spatial[..., 1], spatial[..., 0]], -1)
        loc = reference_points[:, :, None, :, None, :] + off / norm[None, None, None, :, None, :]
    else:
        loc = (
            reference_points[:, :, None, :, None, :2]
            + off / m.num_points * reference_points[:, :, None, :, None, 2:] * 0.5
        )
    if not keep:
        return m.output_proj(v.new_zeros(bs, nq, m.value_proj.out_features)) + identity
    out = multi_scale_deformable_attn_reference(v, spatial, loc, aw)
    return m.output_proj(out) + identity


def make_module_inputs(rng, bs=2, nq=7, embed=32, shapes=((6, 5), (3, 3)), ref_dim=2):
    spatial, start = level_tables(list(shapes))
    keys = int(spatial.prod(1).sum())
    query = torch.randn(bs, nq, embed, generator=rng, dtype=torch.float64)
    value = torch.randn(bs, keys, embed, generator=rng, dtype=torch.float64)
    ref = torch.rand(bs, nq, len(shapes), ref_dim, generator=rng, dtype=torch.float64)
    return query, value, ref, spatial, start


def random_module(rng, batch_first=True):
    m = MultiScaleDeformableAttention(32, 4, 2, 3, batch_first=batch_first).double().eval()
    with torch.no_grad():
        for p in m.parameters():  # non-trivial offsets and weights
            p.add_(torch.randn(p.shape, generator=rng, dtype=p.dtype) * 0.3)
    return m


def layout(t, device, batch_first):
    """A batch-first tensor in the module's layout, on device."""
    return t.to(device) if batch_first else t.transpose(0, 1).to(device)


@pytest.mark.parametrize("ref_dim", [2, 4])
@pytest.mark.parametrize("batch_first", [True, False])
def test_module_matches_mmcv_forward(device, rng, ref_dim, batch_first):
    m = random_module(rng, batch_first)
    query, value, ref, spatial, start = make_module_inputs(rng, ref_dim=ref_dim)
    mask = torch.rand(value.shape[:2], generator=rng) < 0.2
    query_pos = torch.randn(query.shape, generator=rng, dtype=torch.float64)
    want = module_reference(m, query + query_pos, value, query, ref, spatial, mask)
    got = m.to(device)(
        layout(query, device, batch_first),
        value=layout(value, device, batch_first),
        query_pos=layout(query_pos, device, batch_first),
        key_padding_mask=mask.to(device),
        reference_points=ref.to(device),
        spatial_shapes=spatial.to(device),
        level_start_index=start.to(device),
    )
    if not batch_first:
        got = got.transpose(0, 1)
    torch.testing.assert_close(got.cpu(), want.detach())


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("ref_dim", [2, 4])
@pytest.mark.parametrize(
    "bs, nq, shapes",
    [(0, 7, ((6, 5), (3, 3))), (0, 0, ((6, 5), (3, 3))), (0, 7, ((0, 2), (0, 0))), (2, 7, ((6, 5), (0, 3))),
     (2, 7, ((0, 5), (0, 0))), (2, 0, ((6, 5), (3, 3)))],
    ids=["empty-batch", "empty-batch-no-queries", "empty-batch-no-keys", "empty-level", "no-keys", "no-queries"],
)  # fmt: skip
def test_module_empty_batch_queries_or_levels(device, rng, batch_first, ref_dim, bs, nq, shapes):
    """Regression (fuzzing): the module's forward failed on a batch of 0 (or a value with 0 keys) with torch's
    'cannot reshape tensor of 0 elements ... ambiguous' (mmcv's value.view(bs, num_value, num_heads, -1)). Output
    and gradients (query, value, every parameter) match the float64 reference, empty or not; a level without keys
    gives no NaN gradient (mmcv divides its offsets by its 0 side)."""
    m = random_module(rng, batch_first)
    query, value, ref, spatial, start = make_module_inputs(rng, bs=bs, nq=nq, shapes=shapes, ref_dim=ref_dim)
    grad = torch.randn(query.shape, generator=rng, dtype=torch.float64)
    leaves = [query.clone().requires_grad_(), value.clone().requires_grad_()]
    want = module_reference(m, leaves[0], leaves[1], leaves[0], ref, spatial)
    want_grads = torch.autograd.grad(want, [*leaves, *m.parameters()], grad, allow_unused=True)
    md = m.to(device)
    dev = [layout(t, device, batch_first).detach().requires_grad_() for t in (query, value)]
    got = md(dev[0], value=dev[1], reference_points=ref.to(device), spatial_shapes=spatial.to(device),
             level_start_index=start.to(device))  # fmt: skip
    assert got.shape == dev[0].shape
    got_grads = torch.autograd.grad(got, [*dev, *md.parameters()], layout(grad, device, batch_first))
    if not batch_first:
        got, got_grads = got.transpose(0, 1), [g.transpose(0, 1) for g in got_grads[:2]] + list(got_grads[2:])
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    names = ["query", "value"] + [name for name, _ in m.named_parameters()]
    for name, g, w in zip(names, got_grads, want_grads, strict=True):
        w = torch.zeros_like(g.cpu()) if w is None else w
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g.cpu(), w, msg=name)


def test_module_identity_residual_and_errors(rng):
    m = random_module(rng)
    query, value, ref, spatial, start = make_module_inputs(rng)
    identity = torch.randn(query.shape, generator=rng, dtype=torch.float64)
    kwargs = dict(value=value, reference_points=ref, spatial_shapes=spatial, level_start_index=start)
    got = m(query, identity=identity, **kwargs)
    torch.testing.assert_close(got, module_reference(m, query, value, identity, ref, spatial).detach())
    with pytest.warns(DeprecationWarning, match="residual"):
        torch.testing.assert_close(m(query, residual=identity, **kwargs), got)
    with pytest.raises(ValueError, match="Last dim of reference_points must be 2 or 4"):
        m(query, **{**kwargs, "reference_points": torch.rand(2, 7, 2, 3, dtype=torch.float64)})
    with pytest.raises(RuntimeError, match=r"puts level 1 \(3x3\) outside the keys of value \[0, 38\)"):
        m(query, **{**kwargs, "value": value[:, :-1]})
    with pytest.raises(ValueError, match="embed_dims must be divisible by num_heads"):
        MultiScaleDeformableAttention(embed_dims=30, num_heads=8)
    # value_proj's 9 outputs (int(32 * 0.3)) do not split into 4 heads: mmcv's view fails with torch's message
    odd = MultiScaleDeformableAttention(embed_dims=32, num_heads=4, num_levels=2, value_proj_ratio=0.3).double()
    with pytest.raises(ValueError, match=r"value_proj's output size 9 .* must be divisible by num_heads \(4\)"):
        odd(query, **kwargs)
    with pytest.warns(UserWarning, match="power-of-2"):
        MultiScaleDeformableAttention(embed_dims=48, num_heads=8)


def test_module_default_init_value_is_query_and_grads(rng):
    m = MultiScaleDeformableAttention(embed_dims=32, num_heads=4, num_levels=1, num_points=2, dropout=0.0)
    spatial, start = level_tables([(4, 5)])
    query = torch.randn(20, 2, 32, generator=rng, requires_grad=True)  # encoder: value = query
    ref = torch.rand(2, 20, 1, 2, generator=rng)
    out = m(query, reference_points=ref, spatial_shapes=spatial, level_start_index=start)
    assert out.shape == (20, 2, 32)
    out.square().sum().backward()
    assert query.grad is not None and torch.isfinite(query.grad).all()
    assert m.sampling_offsets.weight.grad.abs().sum() > 0


def test_exports():
    assert visdet_ops.MultiScaleDeformableAttnFunction.apply is not None
    assert visdet_ops.multi_scale_deformable_attn_pytorch is not None


def test_mmcv_module_path_imports():
    """mmcv's `from mmcv.ops.multi_scale_deform_attn import ...` (its tests, Deformable DETR code) moves by
    swapping `mmcv.ops` for `visdet_ops`: the same objects as the top-level names."""
    from visdet_ops.multi_scale_deform_attn import (
        MultiScaleDeformableAttention,
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn_pytorch,
    )

    assert MultiScaleDeformableAttention is visdet_ops.MultiScaleDeformableAttention
    assert MultiScaleDeformableAttnFunction is visdet_ops.MultiScaleDeformableAttnFunction
    assert multi_scale_deformable_attn_pytorch is visdet_ops.multi_scale_deformable_attn_pytorch
    # importing the module shadows no exported name of the package
    assert "multi_scale_deform_attn" not in visdet_ops.__all__


def test_default_cuda_path_does_not_sync(rng):
    """Forward and backward with the level tables on the GPU make the host wait for nothing (the
    decoder of Deformable DETR calls the op with small inputs, where a sync per call dominated)."""
    require_cuda()
    value, spatial, start, loc, attn = case(
        rng, shapes=((6, 7), (3, 4)), heads=2, dim=32, queries=30, points=4, spread=0
    )
    value, loc, attn = (t.float().cuda().requires_grad_() for t in (value, loc, attn))
    tables = (spatial.cuda(), start.cuda())
    multi_scale_deformable_attn(value, *tables, loc, attn).sum().backward()  # warm: lazy inits may sync
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = multi_scale_deformable_attn(value, *tables, loc, attn)
        torch.autograd.grad(out, (value, loc, attn), torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode(previous)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _msda(device, gen, fn_name, step):
    cpu = case(gen, shapes=((4, 5), (2, 3)), heads=2, dim=4, queries=3, points=2, spread=0)
    value, shapes, start, loc, attn = (t.to(device) for t in cpu)
    if fn_name == "op._multi_scale_deformable_attn_backward":
        go = torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
        got = BACKWARD_OP(go.to(device), value, shapes, start, loc, attn, step)
        _, want = reference_with_grads(cpu[0], cpu[1], cpu[3], cpu[4], go)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.cpu(), w, rtol=1e-7, atol=1e-9)
        return
    fn = OP if fn_name == "op.multi_scale_deformable_attn" else multi_scale_deformable_attn
    got = fn(value, shapes, start, loc, attn, step)
    edges.close(got, multi_scale_deformable_attn_reference(cpu[0], cpu[1], cpu[3], cpu[4]))


def _msda_module(device, gen, **kw):
    args = dict(embed_dims=8, num_heads=2, num_levels=2, num_points=2, im2col_step=64, dropout=0.0, batch_first=True)
    args.update(kw)
    m = MultiScaleDeformableAttention(**args).to(device).double()
    shapes = ([(4, 5), (2, 3)] * m.num_levels)[: m.num_levels]
    inputs = make_module_inputs(gen, nq=3, embed=m.embed_dims, shapes=shapes)
    query, value, ref, spatial, start = (t.to(device) for t in inputs)
    out = m(query, value=value, reference_points=ref, spatial_shapes=spatial, level_start_index=start)
    assert out.shape == query.shape and torch.isfinite(out).all()


INTEGER_EDGE_ROWS = [
    *(
        edges.Row(
            f"{fn}-im2col_step",
            ("im2col_step",),
            _args.IM2COL_STEP_MSDA,
            lambda d, v, g, fn=fn: _msda(d, g, fn, v),
            at_bound=(1, 2) if fn == "multi_scale_deformable_attn" else (),
        )
        for fn in (
            "multi_scale_deformable_attn",
            "op.multi_scale_deformable_attn",
            "op._multi_scale_deformable_attn_backward",
        )
    ),
    *(
        edges.Row(
            f"MultiScaleDeformableAttention-{arg}",
            (arg,),
            b,
            lambda d, v, g, arg=arg: _msda_module(d, g, **{arg: v}),
            at_bound=at,
        )
        for arg, b, at in (
            ("embed_dims", _args.CHANNELS, (8,)),
            ("num_heads", _args.NUM_HEADS, (1, 2)),
            ("num_levels", _args.NUM_LEVELS, (1, 2)),
            ("num_points", _args.NUM_POINTS, (1, 3)),
            ("im2col_step", _args.IM2COL_STEP_MSDA, (1,)),
        )
    ),
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)


def test_fake_impl_rejects_like_eager():
    edges.assert_fake_rejects(
        lambda: torch.ops.visdet_ops.multi_scale_deformable_attn(
            *(torch.empty(2, 20, 2, 4), torch.empty(1, 2, dtype=torch.long), torch.empty(1, dtype=torch.long)),
            *(torch.empty(2, 3, 2, 1, 2, 2), torch.empty(2, 3, 2, 1, 2), 0),
        ),
        "multi_scale_deformable_attn: im2col_step must be in",
    )


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


AMP_LEVELS = [(12, 14), (6, 7)]


def case_msda(gen, module=False):
    shapes, start = level_tables(AMP_LEVELS)
    keys = int(shapes.prod(1).sum())
    embed, heads, levels, points, queries = 32, 4, 2, 3, 20
    if module:
        layer = visdet_ops.MultiScaleDeformableAttention(embed, heads, levels, points, dropout=0.0, batch_first=True)
        parts = {"layer": amp.randomize(layer, gen, 0.1)}
    else:
        parts = {
            "proj": amp.randomize(torch.nn.Linear(embed, embed), gen, 0.2),
            "loc": amp.randomize(torch.nn.Linear(embed, heads * levels * points * 2), gen, 0.2),
            "attn": amp.randomize(torch.nn.Linear(embed, heads * levels * points), gen, 0.2),
        }
    value_src = torch.randn(2, keys, embed, generator=gen)
    query = torch.randn(2, queries, embed, generator=gen)
    if module:
        ref = torch.rand(2, queries, levels, 2, generator=gen)

        def body(p, query, value_src, ref, shapes, start):
            return p["layer"](
                query,
                value=value_src,
                reference_points=ref,
                spatial_shapes=shapes,
                level_start_index=start,
            )

        return amp.Case(body, (query, value_src, ref, shapes, start), amp.F32, **parts)
    ref = torch.rand(2, queries, 1, levels, 1, 2, generator=gen) * 0.8 + 0.1

    def body(p, query, value_src, ref, shapes, start):
        value = p["proj"](value_src).view(2, keys, heads, embed // heads)  # 16-bit under autocast
        # Deformable DETR: float32 reference points + 16-bit offsets -> float32 locations.
        offsets = p["loc"](query).view(2, queries, heads, levels, points, 2)
        loc = ref + offsets / shapes.flip(-1).view(1, 1, 1, levels, 1, 2).float()
        attn = p["attn"](query).view(2, queries, heads, levels * points).softmax(-1)  # float32
        attn = attn.view(2, queries, heads, levels, points)
        return visdet_ops.multi_scale_deformable_attn(value, shapes, start, loc, attn, 64)

    return amp.Case(body, (query, value_src, ref, shapes, start), amp.LOW, **parts)


AUTOCAST_CASES = {
    "multi_scale_deformable_attn": lambda g: case_msda(g),
    "MultiScaleDeformableAttention": lambda g: case_msda(g, module=True),
}


def _opcheck_msda(device, dtype, gen):
    value, shapes, start, loc, attn = case(gen, shapes=AMP_LEVELS, heads=2, dim=8, queries=5, spread=0)
    value, loc = (t.to(device, dtype).requires_grad_() for t in (value, loc))
    attn = attn.to(device, torch.float32).requires_grad_()  # float32 weights beside 16-bit value and locations
    return OP, (value, shapes.to(device), start.to(device), loc, attn, 64)


AUTOCAST_OPCHECKS = {"multi_scale_deformable_attn": _opcheck_msda}


AUTOCAST_COVERED_OTHERWISE = {
    "MultiScaleDeformableAttnFunction": "its .apply is multi_scale_deformable_attn",
    "multi_scale_deformable_attn_pytorch": "plain PyTorch (grid_sample): autocast's own",
}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_MSDA_FNS = ("multi_scale_deformable_attn", "MultiScaleDeformableAttnFunction", "multi_scale_deformable_attn_pytorch")
_MSDA_BAD = tuple(
    "keys_mismatch start_len start_out shapes_dtype shapes_negative loc_ndim attn_shape heads_mismatch "
    "step step_divide value_dtype value_ndim".split()
)
_MSDA_MOD_BAD = ("ctor_int", "ctor_divide", "ref_dim", "missing")


@st.composite
def _msda_case(draw, device):
    fn = draw(st.sampled_from((*_MSDA_FNS, "MultiScaleDeformableAttention")))
    module = fn == "MultiScaleDeformableAttention"
    if fn == "multi_scale_deformable_attn_pytorch":  # the reference itself: no level_start_index, no im2col_step
        bad = core.pick_bad(draw, ("loc_ndim", "heads_mismatch", "keys_mismatch"))
    else:
        bad = core.pick_bad(draw, _MSDA_MOD_BAD if module else _MSDA_BAD + ("start_shift",))
    main = draw(st.sampled_from(core.FLOATS if not module else ("f32", "f64")))
    levels = draw(st.integers(1, 3 if not module else 2))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "bs": core.size(draw, 1, 2),
        "shapes": [[core.size(draw, 1, 4), core.size(draw, 1, 4)] for _ in range(levels)],
        "heads": draw(st.integers(1, 3)),
        "dim": core.size(draw, 1, 4) if not module else draw(st.integers(1, 3)),
        "q": core.size(draw, 1, 4) if not draw(core.one_in(10)) else draw(st.integers(5, 20)),
        "points": draw(st.integers(1, 3)),
        "im2col_step": draw(st.sampled_from([64, 1, 2])),
        "shapes_dt": draw(st.sampled_from(["i64", "i64", "i32"])),
        "tables_as": draw(st.sampled_from(["tensor", "tensor", "list"]))
        if fn != "multi_scale_deformable_attn_pytorch"
        else "tensor",
        "bad": bad,
    }
    if not module and draw(core.one_in(10)):  # the CUDA kernels' vector paths: head_dim 32, 64 (and 33)
        case["dim"] = draw(st.sampled_from([32, 33, 64]))
        case["shapes"] = [[draw(st.integers(1, 8)), draw(st.integers(1, 8))] for _ in range(levels)]
    names = {"value": 4, "sampling_locations": 6, "attention_weights": 5}
    case["t"], mixed = core.draw_tensors(draw, names, main, device)
    # sampling_locations and attention_weights of another float dtype are cast (documented): not a mixed call.
    mixed = any(o.get("dev", "cpu") != case["t"]["value"].get("dev", "cpu") for o in case["t"].values())
    if module:
        core.uniform(case, main, device)
        case.update(
            batch_first=draw(st.booleans()),
            ref_dim=draw(st.sampled_from([2, 4])),
            value_proj_ratio=draw(st.sampled_from([1.0, 0.5])),
            key_padding_mask=draw(st.booleans()),
            identity=draw(st.booleans()),
            query_pos=draw(st.booleans()),
            num_value_same=draw(st.booleans()),
        )
        if case["value_proj_ratio"] != 1.0 and (case["heads"] * case["dim"]) % (2 * case["heads"]):
            case["value_proj_ratio"] = 1.0
        if bad == "ctor_int":
            case["arg"] = draw(st.sampled_from(["embed_dims", "num_heads", "num_levels", "num_points", "im2col_step"]))
            # im2col_step takes any positive int64
            case["value"] = draw(core.bad_int() if case["arg"] != "im2col_step" else st.sampled_from([0, -1, 1.5, "2"]))
        elif bad == "ref_dim":
            case["ref_dim"] = 3
    if bad == "step":
        case["im2col_step"] = draw(st.sampled_from([0, -1, 1.5, "2"]))
    elif bad == "step_divide":
        case["bs"], case["im2col_step"] = 3, 2
    elif bad == "value_dtype":
        case["t"]["value"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "shapes_dtype":
        case["shapes_dt"] = draw(st.sampled_from(["f32", "f64"]))
        case["tables_as"] = "tensor"
    elif bad in ("shapes_negative", "start_len", "start_out", "start_shift"):
        case["tables_as"] = "tensor"
    if bad == "start_shift" and levels < 2:
        case["shapes"].append([1, 1])
    empty = any(h * w == 0 for h, w in case["shapes"])
    # start_shift: levels whose start index is in range but not where the level lies: the op reads the keys there
    # (no error is promised); its result must then be the reference's for those starts.
    case["expect"] = core.expectation(bad if bad != "start_shift" else None, mixed, borderline=empty or bool(bad))
    return case


def _msda_tables(case):
    shapes, starts = level_tables(case["shapes"])
    return shapes, starts, shapes.prod(1).tolist()


def _msda_reference(value, shapes, starts, loc, attn):
    """mmcv's grid_sample function, with each level read from its start index (the op's semantics)."""
    parts = [value[:, s_ : s_ + h * w] for s_, (h, w) in zip(starts.tolist(), shapes.tolist(), strict=True)]
    if any(h * w == 0 for h, w in shapes.tolist()):  # grid_sample takes no empty map: such a level samples zeros
        keep = [i for i, (h, w) in enumerate(shapes.tolist()) if h * w]
        if not keep:
            bs, _, heads, dim = value.shape
            return (value.sum() + loc.sum() + attn.sum()) * torch.zeros(
                bs, loc.size(1), heads * dim, dtype=torch.float64
            )
        shapes, parts = shapes[keep], [parts[i] for i in keep]
        loc, attn = loc[:, :, :, keep], attn[:, :, :, keep]
    return multi_scale_deformable_attn_reference(torch.cat(parts, 1), shapes, loc, attn)


def _msda_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "multi_scale_deform_attn")
    if fn == "MultiScaleDeformableAttention":
        return _msda_module_run(case, run)
    bs, heads, dim, q, points = case["bs"], case["heads"], case["dim"], case["q"], case["points"]
    shapes, starts, sizes = _msda_tables(case)
    levels = len(sizes)
    keys = sum(sizes) + (1 if bad == "keys_mismatch" else 0)
    vshape = [bs, keys, heads, dim] if bad != "value_ndim" else [bs, keys, heads * dim]
    lshape = [bs, q, heads + (bad == "heads_mismatch"), levels, points, 2]
    if bad == "loc_ndim":
        lshape = lshape[:-1]
    ashape = [bs, q, heads, levels, points + (bad == "attn_shape")]
    a_v = run.arg("value", run.randn(*vshape))
    a_l = run.arg("sampling_locations", run.rand(*lshape) * 1.4 - 0.2)
    a_a = run.arg("attention_weights", run.rand(*ashape))
    if bad == "shapes_negative":
        shapes[0] = torch.tensor([-shapes[0, 0] - 1, shapes[0, 1]])
    elif bad == "start_len":
        starts = torch.cat([starts, starts[-1:]])
    elif bad == "start_out":
        starts[-1] = keys + 1
    elif bad == "start_shift":
        starts[-1] = 0  # in range, but the last level now reads the first level's keys
    dev = case["t"]["value"].get("dev", "cpu")
    if bad in ("start_out", "shapes_negative", "keys_mismatch", "shapes_dtype") and run.unchecked_values:
        if case["tables_as"] == "tensor" and dev != "cpu":
            # Level tables on the GPU are not read on the host (documented): a level outside value's keys gives NaN.
            run.expect, run.unchecked_check = "either", lambda out: None
    if case["tables_as"] == "list":
        xs, xst = shapes.tolist(), starts.tolist()
    else:
        xs = core.cast(shapes.double(), case["shapes_dt"]).to(dev)
        xst = core.cast(starts.double(), case["shapes_dt"] if case["shapes_dt"].startswith("i") else "i64").to(dev)
    xv, xl, xa = a_v.x(grad=True), a_l.x(grad=True), a_a.x(grad=True)
    dt = a_v.dt
    if fn == "multi_scale_deformable_attn_pytorch":
        # mmcv's pure-PyTorch function: its errors are torch's (grid_sample's), and it casts nothing.
        run.any_message = True
        if len({a_v.dt, a_l.dt, a_a.dt}) > 1 or any(h * w == 0 for h, w in case["shapes"]):
            run.expect = "either"
        if bad:  # it checks no shapes (mmcv's code): torch may or may not notice; a result is not judged
            run.expect = "either"
        call = lambda: visdet_ops.multi_scale_deformable_attn_pytorch(xv, xs, xl, xa)  # noqa: E731
    elif fn == "MultiScaleDeformableAttnFunction":
        call = lambda: visdet_ops.MultiScaleDeformableAttnFunction.apply(  # noqa: E731
            xv, xs, xst, xl, xa, case["im2col_step"]
        )
    else:
        call = lambda: visdet_ops.multi_scale_deformable_attn(xv, xs, xst, xl, xa, case["im2col_step"])  # noqa: E731

    def check(out):
        if fn == "multi_scale_deformable_attn_pytorch" and bad:
            return
        refs = [a.ref(grad=True) for a in (a_v, a_l, a_a)]
        want = _msda_reference(refs[0][1], shapes, starts, refs[1][1], refs[2][1])
        core.assert_close("output", out, want, core.worst(dt, a_l.dt, a_a.dt))
        core.out_dtype_ok(out, dt, run.expect == "either")
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            pairs = [
                (name, a, r[0])
                for name, a, r in zip(
                    ("value", "sampling_locations", "attention_weights"), (a_v, a_l, a_a), refs, strict=True
                )
            ]
            core.check_grads(pairs, core.worst(dt, a_l.dt, a_a.dt))

    run.outcome(call, check)


def _msda_module_run(case, run):
    from visdet_ops.ops import multi_scale_deform_attn as msda_module

    bad = case["bad"]
    bs, heads, q, points = case["bs"], case["heads"], case["q"], case["points"]
    embed = heads * case["dim"] if bad != "ctor_divide" else heads * case["dim"] + 1
    if bad == "ctor_divide" and heads == 1:
        heads = case["heads"] = 2
        embed = 2 * case["dim"] + 1
    shapes, starts, sizes = _msda_tables(case)
    levels = len(sizes)
    kwargs = {
        "embed_dims": embed,
        "num_heads": heads,
        "num_levels": levels,
        "num_points": points,
        "im2col_step": case["im2col_step"],
        "dropout": 0.0,
        "batch_first": case["batch_first"],
        "value_proj_ratio": case["value_proj_ratio"],
    }
    if bad == "ctor_int":
        kwargs[case["arg"]] = case["value"]
    torch.manual_seed(case["seed"])
    ctor_bad = bad in ("ctor_int", "ctor_divide")
    mod = run.construct(
        lambda: visdet_ops.MultiScaleDeformableAttention(**kwargs), expect="error" if ctor_bad else "ok"
    )
    if mod is None:
        return
    dt = case["t"]["value"]["dt"]
    mod = mod.to(run.device, core.DTYPES[dt]).eval()
    with torch.no_grad():
        mod.sampling_offsets.weight.normal_(0, 0.2)
        mod.attention_weights.weight.normal_(0, 0.2)
    nv = sum(sizes)
    qshape = [bs, q, embed] if case["batch_first"] else [q, bs, embed]
    vshape = [bs, nv, embed] if case["batch_first"] else [nv, bs, embed]
    dev = run.device
    a_q = core.Arg(run.randn(*qshape), dt, case["t"]["value"]["lay"], dev)
    a_v = core.Arg(run.randn(*vshape), dt, "c", dev)
    a_pos = core.Arg(run.randn(*qshape), dt, "c", dev)
    a_ref = core.Arg(run.rand(bs, q, levels, case["ref_dim"]), dt, "c", dev)
    mask = (run.rand(bs, nv) > 0.7).to(dev)
    kwargs = {
        "value": a_v.x(),
        "reference_points": a_ref.x(),
        "spatial_shapes": shapes.to(dev),
        "level_start_index": starts.to(dev),
    }
    if bad == "missing":
        kwargs["spatial_shapes"] = None
    if case["query_pos"]:
        kwargs["query_pos"] = a_pos.x()
    if case["key_padding_mask"]:
        kwargs["key_padding_mask"] = mask
    if case["identity"]:
        kwargs["identity"] = a_pos.x()
    xq = a_q.x(grad=True)

    def check(out):
        m64 = copy.deepcopy(mod).cpu().double()
        ref_kwargs = {
            k: (
                v.detach().cpu().double()
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v.cpu()
                if isinstance(v, torch.Tensor)
                else v
            )
            for k, v in kwargs.items()
        }
        rql, rq = a_q.ref(grad=True)
        original = msda_module.multi_scale_deformable_attn
        msda_module.multi_scale_deformable_attn = lambda v, s, st_, lo, at, step: _msda_reference(v, s, st_, lo, at)
        try:
            want = m64(rq, **ref_kwargs)
        finally:
            msda_module.multi_scale_deformable_attn = original
        core.assert_close("output", out, want, dt)
        if run.grads and out.numel():
            core.backward_both(run, out, want)
            core.check_grads([("query", a_q, rql)], dt)

    run.outcome(lambda: mod(xq, **kwargs), check)


FUZZ = core.family("multi_scale_deform_attn", (*_MSDA_FNS, "MultiScaleDeformableAttention"))((_msda_case, _msda_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "multi_scale_deformable_attn": lambda rng: (
        lambda v, s, i, loc, w: visdet_ops.multi_scale_deformable_attn(v, s, i, loc, w, 64),
        (
            torch.randn(1, 20, 2, 4, generator=rng),
            torch.tensor([[4, 4], [2, 2]]),
            torch.tensor([0, 16]),
            torch.rand(1, 3, 2, 2, 2, 2, generator=rng),
            torch.rand(1, 3, 2, 2, 2, generator=rng),
        ),
        {"im2col_step": 64},
    ),
}
