"""nms with mmcv.ops semantics: nms(boxes, scores, iou_threshold, offset=0,
score_threshold=0, max_num=-1) -> (dets [N, 5], inds)."""

from __future__ import annotations

import numpy as np
import torch

from . import note_device, smoke_test


@torch.library.register_fake("visdet_ops::nms")
def _nms_fake(boxes, scores, iou_threshold, offset=0):
    torch._check(
        boxes.dim() == 2 and boxes.size(1) == 4, lambda: f"nms: boxes must have shape [N, 4], got {list(boxes.shape)}"
    )
    torch._check(scores.dim() == 1 and scores.size(0) == boxes.size(0), lambda: "nms: scores must have shape [N]")
    # How many boxes survive depends on the data: an unbacked size.
    num_kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((num_kept,), dtype=torch.long)


def nms(boxes, scores, iou_threshold: float, offset: int = 0, score_threshold: float = 0, max_num: int = -1):
    """Non-maximum suppression (mmcv semantics).

    Args:
        boxes: [N, 4] boxes (x1, y1, x2, y2), Tensor or np.ndarray.
        scores: [N] scores.
        iou_threshold: boxes overlapping a kept box with IoU > this are dropped.
        offset: 0, or 1 for the legacy "+1 pixel" box size.
        score_threshold: boxes with score <= this are dropped first (when > 0).
        max_num: keep at most this many boxes (when > 0).

    Returns:
        (dets, inds): dets [K, 5] kept boxes with their score, in descending
        score order; inds [K] their indices in `boxes`. NumPy in, NumPy out.
    """
    is_numpy = isinstance(boxes, np.ndarray)
    if is_numpy:
        boxes = torch.from_numpy(boxes)
    if isinstance(scores, np.ndarray):
        scores = torch.from_numpy(scores)
    if not isinstance(boxes, torch.Tensor) or not isinstance(scores, torch.Tensor):
        raise TypeError(
            f"nms: boxes and scores must be Tensors or np.ndarrays, got {type(boxes).__name__} and "
            f"{type(scores).__name__}"
        )
    if offset not in (0, 1):
        raise ValueError(f"nms: offset must be 0 or 1, got {offset!r}")
    note_device(boxes)
    valid_inds = None
    sel_boxes, sel_scores = boxes, scores
    if score_threshold > 0:
        valid_mask = scores > score_threshold
        sel_boxes, sel_scores = boxes[valid_mask], scores[valid_mask]
        valid_inds = torch.nonzero(valid_mask, as_tuple=False).squeeze(dim=1)
    inds = torch.ops.visdet_ops.nms(sel_boxes, sel_scores, float(iou_threshold), int(offset))
    if max_num > 0:
        inds = inds[:max_num]
    if valid_inds is not None:
        inds = valid_inds[inds]
    dets = torch.cat((boxes[inds], scores[inds].reshape(-1, 1)), dim=1)
    if is_numpy:
        return dets.cpu().numpy(), inds.cpu().numpy()
    return dets, inds


@smoke_test("nms")
def _smoke(device: torch.device) -> None:
    boxes = torch.tensor(
        [[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 9]], dtype=torch.float32, device=device
    )
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95], device=device)
    _, inds = nms(boxes, scores, 0.5)
    got = inds.cpu().tolist()
    if got != [3, 2]:
        raise AssertionError(f"nms smoke: expected kept indices [3, 2], got {got}")
