"""mmcv's module path `mmcv.ops.point_sample` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.composite.point_sample import (
    SimpleRoIAlign,
    point_sample,
    rel_roi_point_to_rel_img_point,
)

__all__ = ["SimpleRoIAlign", "point_sample", "rel_roi_point_to_rel_img_point"]
