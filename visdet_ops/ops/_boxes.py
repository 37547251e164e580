"""The box family's home: what nms.py (nms, batched_nms, nms_match) and soft_nms.py share, so that neither op
module imports the other's privates."""

from __future__ import annotations

import sys

import torch

from . import _args

# Why the NMS family cannot be captured in a CUDA graph (refuse_graph_capture's message).
KEPT_DEPENDS_ON_DATA = "how many boxes it keeps depends on the data"

# soft_nms' methods (its schema's `str method`): soft_nms() and batched_nms' nms_cfg type 'soft_nms' check them.
SOFT_NMS_METHODS = ("naive", "linear", "gaussian")


def is_ndarray(x) -> bool:
    # The package needs torch only: numpy is looked up, never imported (an
    # ndarray can exist only once numpy has been imported by its owner).
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def check_boxes_fake(op: str, boxes, scores) -> None:
    """The boxes / scores shape checks of the box ops' fake impls."""
    torch._check(
        boxes.dim() == 2 and boxes.size(1) == 4, lambda: f"{op}: boxes must have shape [N, 4], got {list(boxes.shape)}"
    )
    torch._check(scores.dim() == 1 and scores.size(0) == boxes.size(0), lambda: f"{op}: scores must have shape [N]")


def as_tensors(op: str, boxes, scores):
    """(boxes, scores, is_numpy): np.ndarrays become tensors (NumPy in, NumPy out, as mmcv)."""
    if type(boxes) is torch.Tensor and type(scores) is torch.Tensor:  # the common call, without the lookups below
        return boxes, scores, False
    is_numpy = is_ndarray(boxes)
    if is_numpy:
        boxes = torch.from_numpy(boxes)
    if is_ndarray(scores):
        scores = torch.from_numpy(scores)
    if not isinstance(boxes, torch.Tensor) or not isinstance(scores, torch.Tensor):
        raise TypeError(
            f"{op}: boxes and scores must be Tensors or np.ndarrays, got {type(boxes).__name__} and "
            f"{type(scores).__name__}"
        )
    return boxes, scores, is_numpy


def is_exporting() -> bool:
    """Whether torch.export traces this call (torch.onnx.export's dynamo exporter runs it): sizes may be symbolic
    and values unknown."""
    exporting = getattr(torch.compiler, "is_exporting", None)  # absent in older torch
    return bool(exporting is not None and exporting())


def check_offset(op: str, offset) -> None:
    if offset not in (0, 1):
        raise _args.ArgumentError(f"{op}: offset must be 0 or 1, got {offset!r}")
