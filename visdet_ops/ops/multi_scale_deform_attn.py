"""multi_scale_deformable_attn / MultiScaleDeformableAttention with mmcv.ops
semantics (Deformable DETR). Host code: csrc/ops/multi_scale_deform_attn; autograd, autocast and the CUDA
backward's determinism alert are registered here (for the classic and the stable build alike)."""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ..reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference
from . import _args, example, note_device
from ._registration import alert_not_deterministic, compute_dtype, floating_to, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = [
    "MultiScaleDeformableAttention",
    "MultiScaleDeformableAttnFunction",
    "multi_scale_deformable_attn",
    "multi_scale_deformable_attn_pytorch",
]

_OP = "multi_scale_deformable_attn"


@torch.library.register_fake("visdet_ops::multi_scale_deformable_attn")
def _msda_fake(
    value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, im2col_step
):
    torch._check(value.dim() == 4, lambda: f"{_OP}: value must have 4 dimensions, got shape {list(value.shape)}")
    torch._check(
        sampling_locations.dim() == 6,
        lambda: f"{_OP}: sampling_locations must have 6 dimensions, got shape {list(sampling_locations.shape)}",
    )
    torch._check(
        attention_weights.dim() == 5,
        lambda: f"{_OP}: attention_weights must have 5 dimensions, got shape {list(attention_weights.shape)}",
    )
    _args.check_fake(_OP, "im2col_step", im2col_step, _args.IM2COL_STEP_MSDA)
    bs, _, num_heads, head_dim = value.shape
    return value.new_empty((bs, sampling_locations.size(1), num_heads * head_dim))


@torch.library.register_fake("visdet_ops::_multi_scale_deformable_attn_backward")
def _msda_backward_fake(
    grad_output,
    value,
    value_spatial_shapes,
    value_level_start_index,
    sampling_locations,
    attention_weights,
    im2col_step,
):
    _args.check_fake(_OP, "im2col_step", im2col_step, _args.IM2COL_STEP_MSDA)
    return (
        value.new_empty(value.shape),
        sampling_locations.new_empty(sampling_locations.shape),
        attention_weights.new_empty(attention_weights.shape),
    )


# Autograd, autocast and the determinism alert are registered here, for the classic and the stable build alike
# (the stable ABI has no C++ API for them; one source either way): docs/stable-abi.md. Gradients flow to value,
# sampling_locations and attention_weights (never to the integer level tables).


def _msda_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5])
    ctx.im2col_step = inputs[5]


def _msda_backward(ctx, grad_output):
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights = ctx.saved_tensors
    if value.is_cuda:
        # grad_value accumulates with atomicAdd: the summation order, and so the last bits, vary from run to run.
        alert_not_deterministic("multi_scale_deformable_attn_backward_cuda")
    grad_value, grad_loc, grad_attn = torch.ops.visdet_ops._multi_scale_deformable_attn_backward(
        grad_output, value, spatial_shapes, level_start_index, sampling_locations, attention_weights, ctx.im2col_step
    )
    # One entry per forward argument.
    return grad_value, None, None, grad_loc, grad_attn, None


_multi_scale_deformable_attn = register_autograd(_OP, _msda_backward, _msda_setup_context)


def _msda_autocast(device_type: str):
    # value keeps its dtype (the kernels read float16/bfloat16 directly: no float32 copy of the value tensor);
    # sampling_locations and attention_weights go to value's compute dtype (float32 beside 16-bit value), which the
    # kernels read them in, so a location is never rounded to 16 bits. Sampling and accumulation are float32; the
    # output has value's dtype, each gradient its argument's dtype.
    def kernel(value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, step):
        compute = compute_dtype(value.dtype)
        if compute.is_floating_point:
            sampling_locations = floating_to(compute, sampling_locations)
            attention_weights = floating_to(compute, attention_weights)
        return torch.ops.visdet_ops.multi_scale_deformable_attn(
            value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, step
        )

    return kernel


register_autocast("multi_scale_deformable_attn", _msda_autocast)


def multi_scale_deformable_attn(
    value: torch.Tensor,
    value_spatial_shapes: torch.Tensor,
    value_level_start_index: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
    im2col_step: int = 64,
) -> torch.Tensor:
    """Multi-scale deformable attention (mmcv's ms_deform_attn CUDA op, on every device).

    Args:
        value: [bs, num_keys, num_heads, head_dim]; the levels lie one after
            the other along num_keys.
        value_spatial_shapes: [num_levels, 2] integer (H, W) of each level;
            sum(H * W) must equal num_keys. On value's device or the CPU.
        value_level_start_index: [num_levels] integer start of each level in
            num_keys ([0, H0*W0, H0*W0 + H1*W1, ...]).
        sampling_locations: [bs, num_queries, num_heads, num_levels,
            num_points, 2] (x, y), normalised to [0, 1] per level (0 and 1 are
            the outer edges of the map, as grid_sample with
            align_corners=False; zero padding outside).
        attention_weights: [bs, num_queries, num_heads, num_levels, num_points].
        im2col_step: mmcv's batch chunk; only its rule is kept: the batch
            size must be divisible by min(im2col_step, batch size).

    Returns:
        [bs, num_queries, num_heads * head_dim].

    sampling_locations and attention_weights are used in value's compute
    dtype (float32 for float16/bfloat16 value, else value's dtype): float32
    ones beside 16-bit value are read as they are (never rounded to 16 bits),
    others are cast to it (mmcv casts them to value's dtype).

    Level tables on the CPU are checked against value's keys on the host
    (no sync). Tables that live on a GPU are not read on the host (that would
    be a device-to-host wait every call, which cost the Deformable DETR
    decoder most of its time): the CUDA kernels bounds-check every level, and
    a level outside value's keys gives NaN output and no gradient from it.
    VISDET_OPS_SYNC_LEVEL_CHECKS=1 (or VISDET_OPS_SYNC_CHECKS=1) checks GPU
    tables on the host instead and raises an error naming the table.
    """
    if not isinstance(value_spatial_shapes, torch.Tensor):
        value_spatial_shapes = torch.as_tensor(value_spatial_shapes, dtype=torch.int64)
    if not isinstance(value_level_start_index, torch.Tensor):
        value_level_start_index = torch.as_tensor(value_level_start_index, dtype=torch.int64)
    im2col_step = _args.check_call_int(_OP, "im2col_step", im2col_step, _args.IM2COL_STEP_MSDA)
    note_device(value)
    compute = compute_dtype(value.dtype)
    if sampling_locations.dtype not in (value.dtype, compute):
        sampling_locations = sampling_locations.to(compute)
    if attention_weights.dtype not in (value.dtype, compute):
        attention_weights = attention_weights.to(compute)
    return _multi_scale_deformable_attn(
        value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, int(im2col_step)
    )


class MultiScaleDeformableAttnFunction:
    """mmcv's autograd Function name, for code that calls `.apply` directly."""

    @staticmethod
    def apply(value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, im2col_step):
        return multi_scale_deformable_attn(
            value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, im2col_step
        )


def multi_scale_deformable_attn_pytorch(
    value: torch.Tensor,
    value_spatial_shapes: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor:
    """mmcv's grid_sample implementation (same name and arguments)."""
    return multi_scale_deformable_attn_reference(value, value_spatial_shapes, sampling_locations, attention_weights)


class MultiScaleDeformableAttention(nn.Module):
    """mmcv.ops.MultiScaleDeformableAttention (Deformable DETR): same
    constructor, forward signature, submodules (sampling_offsets,
    attention_weights, value_proj, output_proj, dropout) and initialisation,
    so mmdet checkpoints load with strict=True.

    A plain nn.Module: `init_cfg` is accepted and stored but not applied
    (there is no mmengine initialiser here; `init_weights()` is mmcv's
    default initialisation and runs in the constructor). `norm_cfg` is stored
    and unused, as in mmcv. mmcv's check sum(H * W) == num_keys is done by the
    op itself (in C++), which keeps the module free of data-dependent Python
    branches, so torch.compile(fullgraph=True) captures it whole.
    """

    def __init__(
        self,
        embed_dims: int = 256,
        num_heads: int = 8,
        num_levels: int = 4,
        num_points: int = 4,
        im2col_step: int = 64,
        dropout: float = 0.1,
        batch_first: bool = False,
        norm_cfg: dict | None = None,
        init_cfg: dict | None = None,
        value_proj_ratio: float = 1.0,
    ):
        super().__init__()
        name = type(self).__name__
        embed_dims = _args.check_int(name, "embed_dims", embed_dims, _args.CHANNELS)
        num_heads = _args.check_int(name, "num_heads", num_heads, _args.NUM_HEADS)
        num_levels = _args.check_int(name, "num_levels", num_levels, _args.NUM_LEVELS)
        num_points = _args.check_int(name, "num_points", num_points, _args.NUM_POINTS)
        im2col_step = _args.check_int(name, "im2col_step", im2col_step, _args.IM2COL_STEP_MSDA)
        if embed_dims % num_heads != 0:
            raise _args.ArgumentError(
                f"embed_dims must be divisible by num_heads, but got {embed_dims} and {num_heads}"
            )
        dim_per_head = embed_dims // num_heads
        if dim_per_head & (dim_per_head - 1) != 0 or dim_per_head == 0:
            warnings.warn(
                "MultiScaleDeformableAttention: a power-of-2 size per attention head "
                f"(embed_dims / num_heads, here {dim_per_head}) is faster in the CUDA kernel",
                stacklevel=2,
            )
        self.norm_cfg = norm_cfg
        self.init_cfg = init_cfg
        self.dropout = nn.Dropout(dropout)
        self.batch_first = batch_first
        self.im2col_step = im2col_step
        self.embed_dims = embed_dims
        self.num_levels = num_levels
        self.num_heads = num_heads
        self.num_points = num_points
        self.sampling_offsets = nn.Linear(embed_dims, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(embed_dims, num_heads * num_levels * num_points)
        value_proj_size = int(embed_dims * value_proj_ratio)
        self.value_proj = nn.Linear(embed_dims, value_proj_size)
        self.output_proj = nn.Linear(value_proj_size, embed_dims)
        self.init_weights()

    def init_weights(self) -> None:
        """mmcv's default initialisation: sampling_offsets weight 0 and its bias
        pointing each head in its own direction (point i at distance i + 1),
        attention_weights 0, value_proj/output_proj xavier-uniform with zero bias."""
        nn.init.constant_(self.sampling_offsets.weight, 0.0)
        device = self.sampling_offsets.weight.device
        thetas = torch.arange(self.num_heads, dtype=torch.float32, device=device) * (2.0 * math.pi / self.num_heads)
        grid_init = torch.stack([thetas.cos(), thetas.sin()], -1)
        grid_init = (grid_init / grid_init.abs().max(-1, keepdim=True)[0]).view(self.num_heads, 1, 1, 2)
        grid_init = grid_init.repeat(1, self.num_levels, self.num_points, 1)
        for i in range(self.num_points):
            grid_init[:, :, i, :] *= i + 1
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid_init.view(-1))
        nn.init.constant_(self.attention_weights.weight, 0.0)
        nn.init.constant_(self.attention_weights.bias, 0.0)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight, gain=1)
            nn.init.constant_(proj.bias, 0.0)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        identity: torch.Tensor | None = None,
        query_pos: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        reference_points: torch.Tensor | None = None,
        spatial_shapes: torch.Tensor | None = None,
        level_start_index: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """mmcv's forward: query [num_query, bs, embed_dims] ([bs, num_query,
        embed_dims] with batch_first), value likewise with num_key (default:
        query), reference_points [bs, num_query, num_levels, 2 or 4]
        normalised (x, y[, w, h]), spatial_shapes [num_levels, 2] (H, W),
        level_start_index [num_levels]. key is unused, as in mmcv.
        Returns dropout(output_proj(attention)) + identity."""
        if "residual" in kwargs:
            # mmcv's deprecated name for identity.
            warnings.warn(
                "MultiScaleDeformableAttention: 'residual' is deprecated, use 'identity'",
                DeprecationWarning,
                stacklevel=2,
            )
            residual = kwargs.pop("residual")
            if identity is None:
                identity = residual
        if reference_points is None or spatial_shapes is None or level_start_index is None:
            raise _args.ArgumentError(
                "MultiScaleDeformableAttention: reference_points, spatial_shapes and level_start_index are required"
            )
        if value is None:
            value = query
        if identity is None:
            identity = query
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query = query.permute(1, 0, 2)
            value = value.permute(1, 0, 2)

        bs, num_query, _ = query.shape
        bs, num_value, _ = value.shape

        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        # The size per head, not mmcv's -1: a view of 0 elements (an empty batch, no keys) cannot infer it.
        value_dims = value.size(-1)
        if value_dims % self.num_heads:
            raise _args.ArgumentError(
                f"MultiScaleDeformableAttention: value_proj's output size {value_dims} (embed_dims * "
                f"value_proj_ratio) must be divisible by num_heads ({self.num_heads})"
            )
        value = value.view(bs, num_value, self.num_heads, value_dims // self.num_heads)
        sampling_offsets = self.sampling_offsets(query).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points, 2
        )
        attention_weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_levels * self.num_points
        )
        attention_weights = attention_weights.softmax(-1).view(
            bs, num_query, self.num_heads, self.num_levels, self.num_points
        )
        if reference_points.shape[-1] == 2:
            # In reference_points' dtype: 16-bit offsets (a Linear under autocast) divided by
            # an integer tensor would stay 16-bit and round the sampling locations. A side of 0 (a level
            # without keys, whose samples read nothing) divides by 1, not mmcv's 0: the same output, and a
            # gradient of 0 where 0 * inf made it NaN.
            offset_normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1).clamp(min=1)
            offset_normalizer = offset_normalizer.to(reference_points.dtype)
            sampling_locations = (
                reference_points[:, :, None, :, None, :]
                + sampling_offsets / offset_normalizer[None, None, None, :, None, :]
            )
        elif reference_points.shape[-1] == 4:
            sampling_locations = (
                reference_points[:, :, None, :, None, :2]
                + sampling_offsets / self.num_points * reference_points[:, :, None, :, None, 2:] * 0.5
            )
        else:
            raise _args.ArgumentError(
                f"Last dim of reference_points must be 2 or 4, but get {reference_points.shape[-1]} instead."
            )
        output = multi_scale_deformable_attn(
            value, spatial_shapes, level_start_index, sampling_locations, attention_weights, self.im2col_step
        )
        output = self.output_proj(output)
        if not self.batch_first:
            output = output.permute(1, 0, 2)
        return self.dropout(output) + identity


def _draw_off_kinks(shape, spatial: torch.Tensor, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Sampling locations in [-0.2, 1.2), rounded to dtype, none of them where the bilinear sample has a
    kink: a pixel position `loc * size - 0.5` that is a whole number. There the gradient of the location
    has no one value (at -1 and at size the kernel counts the point as outside, grid_sample takes one
    side), and 16-bit rounding lands on such positions often (x = -0.125 at width 4)."""
    size = spatial.flip(-1).to(torch.float64)[:, None, :]  # [levels, 1, (W, H)] against [..., levels, points, 2]
    loc = torch.empty(shape, dtype=torch.float64)
    redraw = torch.ones(shape, dtype=torch.bool)
    while redraw.any():
        fresh = (torch.rand(shape, generator=gen, dtype=torch.float64) * 1.4 - 0.2).to(dtype).double()
        loc = torch.where(redraw, fresh, loc)
        position = loc * size - 0.5
        redraw = (position - position.round()).abs() < 1e-9
    return loc


@example("multi_scale_deformable_attn")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """head_dim 32 (on CUDA: vector loads + warp-shuffle reduction), 3 (scalar loads + atomic reduction)
    and 256 (float32: 64 threads per query and head; atomic reduction), forward and backward; in a
    16-bit dtype also under autocast, float32 sampling locations and weights beside a 16-bit value."""
    from ._examples import autocast_forward_backward, synchronize

    spatial = torch.tensor([[6, 7], [3, 4], [2, 2]])
    start = torch.tensor([0, 42, 54])
    tol = 1e-4 if dtype in (torch.float32, torch.float64) else 1e-1
    for dim, heads in ((32, 2), (3, 3), (256, 1)):
        value = torch.randn(2, 58, heads, dim, generator=gen, dtype=torch.float64).to(dtype).double()
        loc = _draw_off_kinks((2, 37, heads, 3, 4, 2), spatial, dtype, gen)
        attn = torch.rand(2, 37, heads, 3, 4, generator=gen, dtype=torch.float64).to(dtype).double()
        inputs = [t.to(device, dtype, copy=True).requires_grad_() for t in (value, loc, attn)]
        out = multi_scale_deformable_attn(inputs[0], spatial.to(device), start.to(device), inputs[1], inputs[2])
        out.sum().backward()
        synchronize(device)
        ref_inputs = [t.detach().clone().requires_grad_() for t in (value, loc, attn)]
        # mmcv's public grid_sample function (multi_scale_deformable_attn_pytorch: the float64 reference).
        want = multi_scale_deformable_attn_pytorch(ref_inputs[0], spatial, ref_inputs[1], ref_inputs[2])
        want.sum().backward()
        if not torch.allclose(out.detach().cpu().double(), want.detach(), rtol=tol, atol=tol):
            return f"multi_scale_deformable_attn head_dim {dim}: wrong output"
        for name, got, ref in zip(
            ("value", "sampling_locations", "attention_weights"), inputs, ref_inputs, strict=True
        ):
            scale = max(ref.grad.abs().max().item(), 1.0)
            if (got.grad.cpu().double() - ref.grad).abs().max().item() > 4 * tol * scale:
                return f"multi_scale_deformable_attn head_dim {dim}: wrong grad of {name}"
    if dtype in (torch.float16, torch.bfloat16):
        spatial, start = torch.tensor([[6, 7], [3, 4]]), torch.tensor([0, 42])
        error = autocast_forward_backward(
            lambda v, lo, a: multi_scale_deformable_attn(v, spatial.to(device), start.to(device), lo, a),
            lambda v, lo, a: multi_scale_deformable_attn_reference(v, spatial, lo, a),
            [
                torch.randn(2, 54, 2, 32, generator=gen, dtype=torch.float64),
                torch.rand(2, 17, 2, 2, 4, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1,
                torch.rand(2, 17, 2, 2, 4, generator=gen, dtype=torch.float64),
            ],
            {1, 2}, set(), dtype, gen, device,
        )  # fmt: skip
        if error is not None:
            return f"multi_scale_deformable_attn under autocast: {error}"
    return None
