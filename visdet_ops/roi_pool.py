"""mmcv's module path `mmcv.ops.roi_pool` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.roi_pool import (
    RoIPool,
    roi_pool,
)

__all__ = ["RoIPool", "roi_pool"]
