"""Float64 reference of corner pooling: exactly mmcv's CornerPool.forward
(torch.cummax, flipped for 'top' and 'left'), so values and gradients (ties
included) are torch.cummax's."""

from __future__ import annotations

import torch

_DIM_FLIP = {"bottom": (2, False), "left": (3, True), "right": (3, False), "top": (2, True)}


def corner_pool_reference(x: torch.Tensor, mode: str) -> torch.Tensor:
    dim, flip = _DIM_FLIP[mode]
    if flip:
        x = x.flip(dim)
    out, _ = torch.cummax(x, dim=dim)
    if flip:
        out = out.flip(dim)
    return out
