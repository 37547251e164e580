"""mmcv's module path `mmcv.ops.modulated_deform_conv` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.deform_conv import (
    ModulatedDeformConv2d,
    ModulatedDeformConv2dPack,
    modulated_deform_conv2d,
)

__all__ = ["ModulatedDeformConv2d", "ModulatedDeformConv2dPack", "modulated_deform_conv2d"]
