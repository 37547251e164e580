"""Multi-scale deformable attention through F.grid_sample: a port of mmcv's
`multi_scale_deformable_attn_pytorch` (mmcv/ops/multi_scale_deform_attn.py),
differentiable by autograd. Computes in value's dtype on value's device; pass
float64 for a reference."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def multi_scale_deformable_attn_reference(
    value: torch.Tensor,
    value_spatial_shapes: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor:
    """value [bs, num_keys, num_heads, head_dim], value_spatial_shapes [num_levels, 2] (H, W),
    sampling_locations [bs, num_queries, num_heads, num_levels, num_points, 2] (x, y) in [0, 1],
    attention_weights [bs, num_queries, num_heads, num_levels, num_points]
    -> [bs, num_queries, num_heads * head_dim]. The levels lie one after the other in value."""
    bs, _, num_heads, head_dim = value.shape
    _, num_queries, _, num_levels, num_points, _ = sampling_locations.shape
    shapes = [(int(h), int(w)) for h, w in torch.as_tensor(value_spatial_shapes).tolist()]
    value_list = value.split([h * w for h, w in shapes], dim=1)
    sampling_grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        # [bs, H*W, heads, dim] -> [bs*heads, dim, H, W]
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(bs * num_heads, head_dim, h, w)
        # [bs, Q, heads, P, 2] -> [bs*heads, Q, P, 2]
        grid_l = sampling_grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        # [bs*heads, dim, Q, P]
        sampled.append(F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros", align_corners=False))
    # [bs, Q, heads, L, P] -> [bs*heads, 1, Q, L*P]
    weights = attention_weights.transpose(1, 2).reshape(bs * num_heads, 1, num_queries, num_levels * num_points)
    output = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(bs, num_heads * head_dim, num_queries)
    return output.transpose(1, 2).contiguous()
