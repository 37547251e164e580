"""mmcv's module path `mmcv.ops.deform_conv` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.deform_conv import (
    DeformConv2d,
    DeformConv2dPack,
    deform_conv2d,
)

__all__ = ["DeformConv2d", "DeformConv2dPack", "deform_conv2d"]
