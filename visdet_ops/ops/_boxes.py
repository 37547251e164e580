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


def check_box_inputs(
    op: str, boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor | None = None, columns: int = 4
) -> None:
    """The op's own checks of boxes, scores and idxs (csrc/ops/nms/nms.cpp check_nms_inputs, the same texts), done
    by the public functions before they touch the tensors: nms(score_threshold > 0) and batched_nms index boxes
    (and idxs) with scores first, where a mismatch gave torch's IndexError naming neither the function nor the
    argument, or a result for the first boxes only; batched_nms(nms_cfg=None) calls no op at all. A ShapeError
    (a RuntimeError, as the op's check, and an AssertionError, as mmcv's asserts) for a shape, dtype or device.
    columns: 5 for rotated boxes (x, y, w, h, angle: batched_nms with nms_cfg type 'nms_rotated')."""
    for arg, t in (("boxes", boxes), ("scores", scores), ("idxs", idxs)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {arg} must be a Tensor, got {type(t).__name__}")
    if boxes.dim() != 2:
        raise _args.ShapeError(f"{op}: boxes must have 2 dimensions, got shape {list(boxes.shape)}")
    if boxes.size(1) != columns:
        shape = "[N, 4]" if columns == 4 else f"[N, {columns}] (x, y, w, h, angle)"
        raise _args.ShapeError(f"{op}: boxes must have shape {shape}, got {list(boxes.shape)}")
    if not boxes.is_floating_point():
        raise _args.ShapeError(f"{op}: boxes must be a floating point tensor, got {boxes.dtype}")
    n = boxes.size(0)
    if scores.dim() != 1:
        raise _args.ShapeError(f"{op}: scores must have 1 dimensions, got shape {list(scores.shape)}")
    if scores.size(0) != n:
        raise _args.ShapeError(
            f"{op}: scores must have shape [N] with N = boxes.size(0) = {n}, got {list(scores.shape)}"
        )
    if not scores.is_floating_point():
        raise _args.ShapeError(f"{op}: scores must be a floating point tensor, got {scores.dtype}")
    if scores.device != boxes.device:
        raise _args.ShapeError(
            f"{op}: boxes and scores must be on the same device, got {boxes.device} and {scores.device}"
        )
    if idxs is None:
        return
    if idxs.dim() != 1 or idxs.size(0) != n:
        raise _args.ShapeError(f"{op}: idxs must have shape [N] with N = boxes.size(0) = {n}, got {list(idxs.shape)}")
    if idxs.is_floating_point() or idxs.is_complex() or idxs.dtype == torch.bool:
        # batched_nms turns floating and bool idxs into class ids first (class_ids): what remains is complex
        raise _args.ShapeError(f"{op}: idxs must be an integer, floating point or bool tensor, got {idxs.dtype}")
    if idxs.device != boxes.device:
        raise _args.ShapeError(f"{op}: boxes and idxs must be on the same device, got {boxes.device} and {idxs.device}")


def class_ids(idxs, boxes):
    """batched_nms' classes as mmcv reads them, `idxs.to(boxes)`: any real dtype, on any device. Integer idxs are
    moved to boxes' device; floating and bool idxs are compared as values of boxes' dtype (boxes of one class are
    those whose idxs are equal there), which become the kernels' int64 class ids through torch.unique (for integral
    values such as DDQ-DETR's torch.ones(...), the classes mmcv's coordinate offsets separate; mmcv offsets
    non-integral values by fractions of the largest coordinate, which only partly separates them: here each value
    is its own class). Anything else (not a tensor, a complex dtype, a wrong shape) is left to the checks, which
    name it."""
    if not isinstance(idxs, torch.Tensor) or not isinstance(boxes, torch.Tensor) or idxs.is_complex():
        return idxs
    if idxs.dtype == torch.bool or idxs.is_floating_point():
        if idxs.dim() != 1 or not boxes.is_floating_point():
            return idxs  # the shape check names it
        return torch.unique(idxs.to(device=boxes.device, dtype=boxes.dtype), return_inverse=True)[1]
    return idxs.to(boxes.device)


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
