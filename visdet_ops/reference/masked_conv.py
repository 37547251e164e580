"""Float64 reference of masked_conv2d: the full F.conv2d times the active
mask (mask > 0, indexed by output position; positions outside either map are
inactive)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_conv2d_reference(
    features: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    padding: tuple[int, int],
) -> torch.Tensor:
    out = F.conv2d(features, weight, bias, padding=padding)
    active = torch.zeros(features.size(0), out.size(2), out.size(3), dtype=torch.bool, device=out.device)
    h = min(mask.size(1), out.size(2))
    w = min(mask.size(2), out.size(3))
    active[:, :h, :w] = (mask[:, :h, :w] > 0).expand(features.size(0), h, w)
    return out * active[:, None].to(out.dtype)
