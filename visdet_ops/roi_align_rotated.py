"""mmcv's module path `mmcv.ops.roi_align_rotated` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.roi_align_rotated import (
    RoIAlignRotated,
    roi_align_rotated,
)

__all__ = ["RoIAlignRotated", "roi_align_rotated"]
