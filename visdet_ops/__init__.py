"""visdet-ops: C++/CUDA detection ops for PyTorch with mmcv.ops names.

Importing checks the compiled ops against the running torch and fails with one
clear ImportError (with the pip line that fixes it) when they do not match.
"""

from __future__ import annotations

import sys as _sys


def _doctor_invocation() -> bool:
    # `visdet-ops doctor` and `python -m visdet_ops doctor` must run even when
    # the ops cannot load: the doctor explains why. (During `-m`, argv[0] is
    # "-m" while the package is imported.)
    argv = _sys.argv
    return len(argv) > 1 and argv[1] == "doctor" and (argv[0] == "-m" or argv[0].endswith("visdet-ops"))


try:
    from ._loader import load_library as _load_library

    BUILD_INFO = _load_library()
except ImportError as _exc:
    if not _doctor_invocation():
        raise
    LOAD_ERROR: ImportError | None = _exc
    BUILD_INFO = None
else:
    LOAD_ERROR = None
    __version__ = BUILD_INFO["VERSION"]

    from .ops.bbox_overlaps import bbox_overlaps  # noqa: E402
    from .ops.carafe import CARAFE, CARAFENaive, CARAFEPack, carafe, carafe_naive  # noqa: E402
    from .ops.corner_pool import CornerPool, bottom_pool, corner_pool, left_pool, right_pool, top_pool  # noqa: E402
    from .ops.deform_conv import (  # noqa: E402
        DeformConv2d,
        DeformConv2dPack,
        ModulatedDeformConv2d,
        ModulatedDeformConv2dPack,
        deform_conv2d,
        modulated_deform_conv2d,
    )
    from .ops.deform_roi_pool import (  # noqa: E402
        DeformRoIPool,
        DeformRoIPoolPack,
        ModulatedDeformRoIPoolPack,
        deform_roi_pool,
    )
    from .ops.focal_loss import (  # noqa: E402
        SigmoidFocalLoss,
        SoftmaxFocalLoss,
        sigmoid_focal_loss,
        softmax_focal_loss,
    )
    from .ops.masked_conv import MaskedConv2d, masked_conv2d  # noqa: E402
    from .ops.multi_scale_deform_attn import (  # noqa: E402
        MultiScaleDeformableAttention,
        MultiScaleDeformableAttnFunction,
        multi_scale_deformable_attn,
        multi_scale_deformable_attn_pytorch,
    )
    from .ops.nms import batched_nms, nms, nms_match, soft_nms  # noqa: E402
    from .ops.roi_align import RoIAlign, roi_align  # noqa: E402
    from .ops.roi_pool import RoIPool, roi_pool  # noqa: E402

    __all__ = [
        "BUILD_INFO",
        "CARAFE",
        "CARAFENaive",
        "CARAFEPack",
        "CornerPool",
        "DeformConv2d",
        "DeformConv2dPack",
        "DeformRoIPool",
        "DeformRoIPoolPack",
        "MaskedConv2d",
        "ModulatedDeformConv2d",
        "ModulatedDeformConv2dPack",
        "ModulatedDeformRoIPoolPack",
        "MultiScaleDeformableAttention",
        "MultiScaleDeformableAttnFunction",
        "RoIAlign",
        "RoIPool",
        "SigmoidFocalLoss",
        "SoftmaxFocalLoss",
        "batched_nms",
        "bbox_overlaps",
        "bottom_pool",
        "carafe",
        "carafe_naive",
        "corner_pool",
        "deform_conv2d",
        "deform_roi_pool",
        "left_pool",
        "masked_conv2d",
        "modulated_deform_conv2d",
        "multi_scale_deformable_attn",
        "multi_scale_deformable_attn_pytorch",
        "nms",
        "nms_match",
        "right_pool",
        "roi_align",
        "roi_pool",
        "sigmoid_focal_loss",
        "soft_nms",
        "softmax_focal_loss",
        "top_pool",
    ]
