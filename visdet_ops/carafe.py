"""mmcv's module path `mmcv.ops.carafe` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.carafe import (
    CARAFE,
    CARAFENaive,
    CARAFEPack,
    carafe,
    carafe_naive,
)

__all__ = ["CARAFE", "CARAFENaive", "CARAFEPack", "carafe", "carafe_naive"]
