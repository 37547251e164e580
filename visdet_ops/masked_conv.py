"""mmcv's module path `mmcv.ops.masked_conv` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.masked_conv import (
    MaskedConv2d,
    masked_conv2d,
)

__all__ = ["MaskedConv2d", "masked_conv2d"]
