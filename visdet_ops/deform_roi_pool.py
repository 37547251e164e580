"""mmcv's module path `mmcv.ops.deform_roi_pool` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.deform_roi_pool import (
    DeformRoIPool,
    DeformRoIPoolPack,
    ModulatedDeformRoIPoolPack,
    deform_roi_pool,
)

__all__ = ["DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack", "deform_roi_pool"]
