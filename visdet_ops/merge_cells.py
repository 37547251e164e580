"""mmcv's module path `mmcv.ops.merge_cells` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.composite.merge_cells import (
    BaseMergeCell,
    ConcatCell,
    GlobalPoolingCell,
    SumCell,
)

__all__ = ["BaseMergeCell", "ConcatCell", "GlobalPoolingCell", "SumCell"]
