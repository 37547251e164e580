"""mmcv's module path `mmcv.ops.nms` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.nms import (
    batched_nms,
    nms,
    nms_match,
)
from visdet_ops.ops.nms_rotated import nms_rotated
from visdet_ops.ops.soft_nms import soft_nms

__all__ = ["batched_nms", "nms", "nms_match", "nms_rotated", "soft_nms"]
