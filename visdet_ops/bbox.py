"""mmcv's module path `mmcv.ops.bbox` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.bbox_overlaps import bbox_overlaps

__all__ = ["bbox_overlaps"]
