"""mmcv's module path `mmcv.ops.roi_align` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.roi_align import (
    RoIAlign,
    roi_align,
)

__all__ = ["RoIAlign", "roi_align"]
