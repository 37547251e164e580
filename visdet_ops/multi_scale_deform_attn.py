"""mmcv's module path `mmcv.ops.multi_scale_deform_attn`, where mmcv keeps `multi_scale_deformable_attn_pytorch`
and `MultiScaleDeformableAttnFunction` (not exported from `mmcv.ops`): code that imports from it moves by
swapping `mmcv.ops` for `visdet_ops`, as for the names of `mmcv.ops`. The objects are `visdet_ops`' own
(the op module is visdet_ops/ops/multi_scale_deform_attn.py)."""

from __future__ import annotations

# Absolute: a harness that puts visdet_ops in sys.modules as `mmcv.ops` loads this file as
# `mmcv.ops.multi_scale_deform_attn`, where a relative import would load the op modules a second time.
from visdet_ops.ops.multi_scale_deform_attn import (
    MultiScaleDeformableAttention,
    MultiScaleDeformableAttnFunction,
    multi_scale_deformable_attn,
    multi_scale_deformable_attn_pytorch,
)

__all__ = [
    "MultiScaleDeformableAttention",
    "MultiScaleDeformableAttnFunction",
    "multi_scale_deformable_attn",
    "multi_scale_deformable_attn_pytorch",
]
