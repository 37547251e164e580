"""mmcv's module path `mmcv.ops.corner_pool` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.corner_pool import CornerPool

__all__ = ["CornerPool"]
