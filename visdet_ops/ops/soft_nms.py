"""soft_nms with mmcv.ops semantics, on CPU and CUDA (its own op folder, csrc/ops/soft_nms; the rest of the NMS
family is in nms.py, whose batched_nms runs soft_nms for nms_cfg type 'soft_nms').

Tensors or np.ndarrays in (NumPy in, NumPy out, as mmcv); float16 and bfloat16 boxes are accepted on every device
(IoUs and the score decay are computed in float32)."""

from __future__ import annotations

import torch

from . import _args, example, note_device, refuse_graph_capture, renamed_kwargs
from ._boxes import KEPT_DEPENDS_ON_DATA, SOFT_NMS_METHODS, as_tensors, check_boxes_fake, check_offset
from ._registration import float32_autocast, register_autocast

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["soft_nms"]


@torch.library.register_fake("visdet_ops::soft_nms")
def _soft_nms_fake(boxes, scores, iou_threshold, sigma, min_score, method, offset=0, idxs=None):
    check_boxes_fake("soft_nms", boxes, scores)
    torch._check(
        method in SOFT_NMS_METHODS,
        lambda: f"soft_nms: method must be 'naive', 'linear' or 'gaussian', got '{method}'",
    )
    _args.check_fake("soft_nms", "offset", offset, _args.OFFSET)
    # How many boxes survive depends on the data: an unbacked size.
    num_kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((num_kept,), dtype=torch.long), boxes.new_empty((num_kept,))


# Autocast (registered here for the classic and the stable build alike: docs/stable-abi.md): boxes and scores go to
# float32 (float64 stays float64): coordinates are never rounded to 16 bits, IoUs and score decay are computed in
# float32. Returns int64 indices and float32 scores.
register_autocast("soft_nms", float32_autocast("soft_nms", "boxes", "scores"))


@renamed_kwargs("soft_nms", {"iou_thr": "iou_threshold"})
def soft_nms(
    boxes,
    scores,
    iou_threshold: float = 0.3,
    sigma: float = 0.5,
    min_score: float = 1e-3,
    method: str = "linear",
    offset: int = 0,
):
    """Soft-NMS (mmcv semantics), on CPU and CUDA.

    Repeatedly takes the highest-scored remaining box, then multiplies every
    other remaining score by a weight of its IoU with that box: 'naive'
    0 if IoU >= iou_threshold, 'linear' (1 - IoU) if IoU >= iou_threshold,
    'gaussian' exp(-IoU^2 / sigma); boxes whose score falls below min_score
    are dropped.

    Returns:
        (dets, inds): dets [K, 5] the kept boxes with their decayed scores, in
        descending score order; inds [K] their indices. NumPy in, NumPy out.
        Equal scores are taken in index order; NaN scores are dropped.
    """
    boxes, scores, is_numpy = as_tensors("soft_nms", boxes, scores)
    check_offset("soft_nms", offset)
    if method not in SOFT_NMS_METHODS:
        raise _args.ArgumentError(f"soft_nms: method must be one of {sorted(SOFT_NMS_METHODS)}, got {method!r}")
    note_device(boxes)
    refuse_graph_capture("soft_nms", boxes, KEPT_DEPENDS_ON_DATA)
    inds, new_scores = torch.ops.visdet_ops.soft_nms(
        boxes, scores, float(iou_threshold), float(sigma), float(min_score), method, int(offset)
    )
    dets = torch.cat((boxes[inds], new_scores.reshape(-1, 1)), dim=1)
    if is_numpy:
        return dets.cpu().numpy(), inds.cpu().numpy()
    return dets, inds


@example("soft_nms")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """soft_nms with and without classes, and on CUDA in float64 30,000 scores (240 KB, more than shared memory:
    the global-scratch path)."""
    from ..reference.nms import soft_nms_reference
    from ._examples import boxes as draw_boxes

    boxes, scores = draw_boxes(300, gen)
    b, s = boxes.to(dtype), scores.to(dtype)
    bd, sd = b.to(device), s.to(device)
    classes = torch.randint(0, 4, (300,), generator=gen)
    for cls in (None, classes):
        _, want = soft_nms_reference(b.double(), s.double(), 0.3, 0.5, 0.01, "gaussian", idxs=cls)
        _, got = torch.ops.visdet_ops.soft_nms(
            bd, sd, 0.3, 0.5, 0.01, "gaussian", 0, None if cls is None else cls.to(device)
        )
        tol = 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2
        if got.shape != want.shape or not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"soft_nms (classes: {cls is not None}): wrong scores"
    # The public function (mmcv's (dets, inds)): the same boxes and scores as the op.
    inds, scores_kept = torch.ops.visdet_ops.soft_nms(bd, sd, 0.3, 0.5, 0.01, "linear", 0)
    dets, public_inds = soft_nms(bd, sd, 0.3, 0.5, 0.01, "linear", 0)
    if not torch.equal(public_inds, inds) or not torch.equal(dets, torch.cat((bd[inds], scores_kept[:, None]), 1)):
        return "soft_nms: the public function's (dets, inds) differ from the op's"
    if dtype == torch.float64 and device.type == "cuda":
        boxes, scores = draw_boxes(30000, gen)
        boxes = boxes * 20
        want, _ = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.9, "linear")
        got, _ = torch.ops.visdet_ops.soft_nms(boxes.to(device), scores.to(device), 0.3, 0.5, 0.9, "linear", 0)
        if got.tolist() != want.tolist():
            return "soft_nms (global scratch): wrong result"
    return None
