"""mmcv's module path `mmcv.ops.focal_loss` (docs/migration.md, "Module paths")."""

from __future__ import annotations

from visdet_ops.ops.focal_loss import (
    SigmoidFocalLoss,
    SoftmaxFocalLoss,
    sigmoid_focal_loss,
    softmax_focal_loss,
)

__all__ = ["SigmoidFocalLoss", "SoftmaxFocalLoss", "sigmoid_focal_loss", "softmax_focal_loss"]
