"""Float64 reference of CARAFE (carafe and carafe_naive compute the same
function): unfold the K x K neighbourhoods of the low-resolution map, repeat
each one over its S x S output positions and weight it by that position's
reassembly kernel (mask channels (g*K + iy)*K + ix, channel groups
contiguous)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def carafe_reference(
    features: torch.Tensor, masks: torch.Tensor, kernel_size: int, group_size: int, scale_factor: int
) -> torch.Tensor:
    n, c, h, w = features.shape
    k, g, s = kernel_size, group_size, scale_factor
    windows = F.unfold(features, k, padding=(k - 1) // 2).view(n, c, k * k, h, w)
    windows = windows.repeat_interleave(s, dim=3).repeat_interleave(s, dim=4)
    windows = windows.view(n, g, c // g, k * k, h * s, w * s)
    out = (windows * masks.view(n, g, 1, k * k, h * s, w * s)).sum(3)
    return out.reshape(n, c, h * s, w * s)
