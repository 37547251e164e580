"""mmcv's module path `mmcv.ops.saconv` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.composite.saconv import SAConv2d

__all__ = ["SAConv2d"]
