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
    from .ops.masked_conv import MaskedConv2d, masked_conv2d  # noqa: E402
    from .ops.nms import batched_nms, nms, nms_match, soft_nms  # noqa: E402
    from .ops.roi_align import RoIAlign, roi_align  # noqa: E402

    __all__ = [
        "BUILD_INFO",
        "CARAFE",
        "CARAFENaive",
        "CARAFEPack",
        "CornerPool",
        "MaskedConv2d",
        "RoIAlign",
        "batched_nms",
        "bbox_overlaps",
        "bottom_pool",
        "carafe",
        "carafe_naive",
        "corner_pool",
        "left_pool",
        "masked_conv2d",
        "nms",
        "nms_match",
        "right_pool",
        "roi_align",
        "soft_nms",
        "top_pool",
    ]
