"""mmcv's module path `mmcv.ops.box_iou_rotated` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.box_iou_rotated import box_iou_rotated

__all__ = ["box_iou_rotated"]
