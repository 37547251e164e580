"""The NMS family with mmcv.ops semantics: nms, batched_nms, nms_match (soft_nms: visdet_ops/ops/soft_nms.py, its
own op folder; batched_nms runs it for nms_cfg type 'soft_nms', and visdet_ops/ops/nms_rotated.py's op for type
'nms_rotated').

Tensors or np.ndarrays in (NumPy in, NumPy out where mmcv does so); float16 and
bfloat16 boxes are accepted on every device (IoUs are computed in float32)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch

from . import _args, example, note_device, refuse_graph_capture, renamed_kwargs
from ._boxes import (
    KEPT_DEPENDS_ON_DATA,
    SOFT_NMS_METHODS,
    as_tensors,
    check_box_inputs,
    check_boxes_fake,
    check_offset,
    class_ids,
    is_exporting,
    is_ndarray,
)
from ._registration import float32_autocast, register_autocast

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["batched_nms", "nms", "nms_match"]


@torch.library.register_fake("visdet_ops::nms")
def _nms_fake(boxes, scores, iou_threshold, offset=0):
    check_boxes_fake("nms", boxes, scores)
    _args.check_fake("nms", "offset", offset, _args.OFFSET)
    # How many boxes survive depends on the data: an unbacked size.
    num_kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((num_kept,), dtype=torch.long)


@torch.library.register_fake("visdet_ops::batched_nms")
def _batched_nms_fake(boxes, scores, idxs, iou_threshold, offset=0):
    check_boxes_fake("batched_nms", boxes, scores)
    _args.check_fake("batched_nms", "offset", offset, _args.OFFSET)
    torch._check(idxs.dim() == 1 and idxs.size(0) == boxes.size(0), lambda: "batched_nms: idxs must have shape [N]")
    num_kept = torch.library.get_ctx().new_dynamic_size()
    return boxes.new_empty((num_kept,), dtype=torch.long)


@torch.library.register_fake("visdet_ops::nms_match")
def _nms_match_fake(dets, iou_threshold):
    torch._check(
        dets.dim() == 2 and dets.size(1) == 5, lambda: f"nms_match: dets must have shape [N, 5], got {list(dets.shape)}"
    )
    return dets.new_empty((dets.size(0),), dtype=torch.long)


# Autocast of nms, batched_nms, nms_match (registered here for the classic and the stable build alike:
# docs/stable-abi.md): boxes and scores go to float32 (float64 stays float64), as torchvision's nms autocast kernel
# does: box coordinates are never rounded to 16 bits, and IoUs are computed in float32 (the kernels' compute dtype
# for 16-bit boxes anyway). The outputs are int64 indices.
register_autocast("nms", float32_autocast("nms", "boxes", "scores"))
register_autocast("batched_nms", float32_autocast("batched_nms", "boxes", "scores"))
register_autocast("nms_match", float32_autocast("nms_match", "dets"))


@renamed_kwargs("nms", {"iou_thr": "iou_threshold"})
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
        score order (ties: lower index first); inds [K] their indices in
        `boxes`. NumPy in, NumPy out.
    """
    boxes, scores, is_numpy = as_tensors("nms", boxes, scores)
    check_box_inputs("nms", boxes, scores)  # before scores index boxes (score_threshold)
    check_offset("nms", offset)
    max_num = _args.as_int("nms", "max_num", max_num)  # any value: <= 0 keeps all
    note_device(boxes)
    refuse_graph_capture("nms", boxes, KEPT_DEPENDS_ON_DATA)
    valid_inds = None
    sel_boxes, sel_scores = boxes, scores
    if score_threshold > 0:
        valid_mask = scores > score_threshold
        sel_boxes, sel_scores = boxes[valid_mask], scores[valid_mask]
        valid_inds = torch.nonzero(valid_mask, as_tuple=False).squeeze(dim=1)
    inds = torch.ops.visdet_ops.nms(sel_boxes, sel_scores, float(iou_threshold), int(offset))
    if max_num > 0:
        # inds[:max_num], written so that torch.export traces it for a data-dependent size (torch 2.9's cannot slice
        # one: it would guard on size < max_num).
        inds = inds.narrow(0, 0, torch.sym_min(inds.size(0), max_num))
    if valid_inds is not None:
        inds = valid_inds.index_select(0, inds)
    # index_select, not boxes[inds]: the same rows with less host work per call (advanced indexing parses its index
    # in Python and runs aten::index).
    dets = torch.cat((boxes.index_select(0, inds), scores.index_select(0, inds).unsqueeze(1)), dim=1)
    if is_numpy:
        return dets.cpu().numpy(), inds.cpu().numpy()
    return dets, inds


_NMS_KEYS = {"iou_threshold", "offset", "score_threshold"}
_SOFT_NMS_KEYS = {"iou_threshold", "sigma", "min_score", "method", "offset"}
# mmcv's nms_rotated(dets, scores, iou_threshold, labels=None, clockwise=True): the keys batched_nms passes on.
_NMS_ROTATED_KEYS = {"iou_threshold", "clockwise"}


def _nms_params(nms_cfg: Mapping, class_agnostic: bool) -> tuple[str, dict, bool, int, int]:
    cfg = dict(nms_cfg)  # the caller's cfg is never changed
    class_agnostic = bool(cfg.pop("class_agnostic", class_agnostic))
    nms_type = cfg.pop("type", "nms")
    # Any value: split_thr <= 0 runs each class on its own, max_num <= 0 keeps all.
    split_thr = _args.as_int("batched_nms", "split_thr", cfg.pop("split_thr", 10000))
    max_num = _args.as_int("batched_nms", "max_num", cfg.pop("max_num", -1))
    if "iou_thr" in cfg:
        if "iou_threshold" in cfg:
            raise _args.ArgumentError("batched_nms: nms_cfg has both iou_thr and its new name iou_threshold; keep one")
        warnings.warn(
            "batched_nms: nms_cfg key 'iou_thr' is deprecated (as in mmcv >= 1.4.4); use 'iou_threshold'",
            DeprecationWarning,
            stacklevel=3,
        )
        cfg["iou_threshold"] = cfg.pop("iou_thr")
    allowed = {"nms": _NMS_KEYS, "soft_nms": _SOFT_NMS_KEYS, "nms_rotated": _NMS_ROTATED_KEYS}.get(nms_type)
    if allowed is None:
        raise _args.ArgumentError(
            f"batched_nms: nms_cfg type must be 'nms', 'soft_nms' or 'nms_rotated', got {nms_type!r}"
        )
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise TypeError(f"batched_nms: nms_cfg keys {unknown} are not understood by type={nms_type!r}")
    if "iou_threshold" not in cfg and nms_type in ("nms", "nms_rotated"):
        raise TypeError(f"batched_nms: nms_cfg needs iou_threshold for type={nms_type!r}")
    return nms_type, cfg, class_agnostic, split_thr, max_num


def _class_chunks(idxs: torch.Tensor, limit: int) -> list[torch.Tensor]:
    """Box indices grouped by class, whole classes per chunk, each chunk at
    most `limit` boxes (or one class, if a class alone is larger)."""
    _, inverse, counts = torch.unique(idxs, return_inverse=True, return_counts=True)
    by_class = torch.argsort(inverse, stable=True)
    chunks, start, size = [], 0, 0
    for count in counts.tolist():
        if size and size + count > limit:
            chunks.append(by_class[start : start + size])
            start, size = start + size, 0
        size += count
    if size:
        chunks.append(by_class[start : start + size])
    return chunks


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, nms_cfg, class_agnostic: bool = False):
    """Class-aware NMS with mmcv's contract.

    Boxes suppress only boxes with the same `idxs` value (unless
    class_agnostic). Unlike mmcv, classes are separated inside the kernel, not
    by shifting coordinates, so the result is exact at any coordinate size.

    Args:
        boxes: [N, 4] (x1, y1, x2, y2), or [N, 5] (x, y, w, h, angle in radians) for type 'nms_rotated';
            scores: [N]; idxs: [N] class of each box, as mmcv's
            `idxs.to(boxes)`: integer, floating point or bool, on any device
            (not used, and may be None, with nms_cfg None or class_agnostic).
            Their shapes are checked first, naming the argument.
        nms_cfg: dict with `type` ('nms', 'soft_nms' or 'nms_rotated', default
            'nms'), `iou_threshold` (alias `iou_thr`), the op's own keys (nms:
            offset, score_threshold; soft_nms: sigma, min_score, method,
            offset; nms_rotated: clockwise),
            `split_thr` (default 10000: above it, CUDA processes classes in
            chunks of at most split_thr boxes, bounding its O(N^2/8) bytes of
            scratch; the CPU kernel needs O(N) and takes all at once),
            `max_num` (keep at most this many, after merging),
            `class_agnostic`. None: no suppression, boxes sorted by score.
            The dict is not modified.
        class_agnostic: ignore idxs (nms_cfg's own key wins).

    Returns:
        (dets [K, 5] boxes with (decayed) scores ([K, 6] for rotated boxes),
        keep [K] indices), in descending score order, ties by index.
    """
    if nms_cfg is None:
        # No op runs: the shapes are checked here (idxs is not used, as in mmcv).
        check_box_inputs("batched_nms", boxes, scores)
        scores, inds = scores.sort(descending=True, stable=True)
        return torch.cat([boxes[inds], scores[:, None]], -1), inds
    nms_type, cfg, class_agnostic, split_thr, max_num = _nms_params(nms_cfg, class_agnostic)
    if not class_agnostic:
        idxs = class_ids(idxs, boxes)  # mmcv's idxs.to(boxes): floating and bool classes, any device
    # Before scores index boxes and idxs (score_threshold); idxs only where it is used, as in mmcv.
    columns = 5 if nms_type == "nms_rotated" else 4
    check_box_inputs("batched_nms", boxes, scores, None if class_agnostic else idxs, columns)
    note_device(boxes)
    refuse_graph_capture("batched_nms", boxes, KEPT_DEPENDS_ON_DATA)
    if nms_type == "nms_rotated":
        keep = _batched_nms_rotated(boxes, scores, idxs, cfg, class_agnostic, split_thr)
        new_scores = scores[keep]
    elif nms_type == "soft_nms":
        method = cfg.get("method", "linear")
        if method not in SOFT_NMS_METHODS:
            raise _args.ArgumentError(
                f"batched_nms: soft_nms method must be one of {sorted(SOFT_NMS_METHODS)}, got {method!r}"
            )
        offset = cfg.get("offset", 0)
        check_offset("batched_nms", offset)
        # O(N) memory per call whatever N: no need to split.
        keep, new_scores = torch.ops.visdet_ops.soft_nms(
            boxes,
            scores,
            float(cfg.get("iou_threshold", 0.3)),
            float(cfg.get("sigma", 0.5)),
            float(cfg.get("min_score", 1e-3)),
            method,
            int(offset),
            None if class_agnostic else idxs,
        )
    else:
        offset = cfg.get("offset", 0)
        check_offset("batched_nms", offset)
        iou = float(cfg["iou_threshold"])
        score_threshold = float(cfg.get("score_threshold", 0))
        candidates = None
        b, s, c = boxes, scores, idxs
        if score_threshold > 0:
            candidates = torch.nonzero(scores > score_threshold, as_tuple=False).squeeze(1)
            b, s = boxes[candidates], scores[candidates]
            c = None if class_agnostic else idxs[candidates]
        if class_agnostic:
            keep = torch.ops.visdet_ops.nms(b, s, iou, int(offset))
        elif b.device.type == "cpu" or is_exporting() or b.size(0) < split_thr:
            # The CPU kernel runs class by class in O(N) memory: splitting would only add calls. (Same result:
            # each class is suppressed on its own either way.) Under torch.export (and so ONNX export) the one op
            # too: the size may be symbolic, and the split reads the classes on the host.
            keep = torch.ops.visdet_ops.batched_nms(b, s, c, iou, int(offset))
        else:
            kept = [
                chunk[torch.ops.visdet_ops.batched_nms(b[chunk], s[chunk], c[chunk], iou, int(offset))]
                for chunk in _class_chunks(c, split_thr)
            ]
            keep = torch.sort(torch.cat(kept)).values  # index order: the tie-break below
            keep = keep[torch.sort(s[keep], descending=True, stable=True).indices]
        if candidates is not None:
            keep = candidates[keep]
        new_scores = scores[keep]
    if max_num > 0:
        count = torch.sym_min(keep.size(0), max_num)  # as nms: [:max_num] for torch.export
        keep, new_scores = keep.narrow(0, 0, count), new_scores.narrow(0, 0, count)
    return torch.cat([boxes[keep], new_scores[:, None].to(boxes.dtype)], -1), keep


def _batched_nms_rotated(boxes, scores, idxs, cfg: dict, class_agnostic: bool, split_thr: int) -> torch.Tensor:
    """batched_nms' type 'nms_rotated': the rotated NMS family's op (visdet_ops/ops/nms_rotated.py) with the classes
    as its labels, one class-aware kernel instead of mmcv's offsets of the centres by idx * (max coordinate + 1),
    which round float32 centres and widths at large coordinates; chunked by class above split_thr on CUDA, as
    type 'nms'."""
    iou = float(cfg["iou_threshold"])
    clockwise = bool(cfg.get("clockwise", True))
    op = torch.ops.visdet_ops.nms_rotated
    if class_agnostic:
        return op(boxes, scores, iou, None, clockwise)
    if boxes.device.type == "cpu" or is_exporting() or boxes.size(0) < split_thr:
        return op(boxes, scores, iou, idxs, clockwise)
    kept = [
        chunk[op(boxes[chunk], scores[chunk], iou, idxs[chunk], clockwise)] for chunk in _class_chunks(idxs, split_thr)
    ]
    keep = torch.sort(torch.cat(kept)).values  # index order: the tie-break below
    return keep[torch.sort(scores[keep], descending=True, stable=True).indices]


def nms_match(dets, iou_threshold: float):
    """Groups of boxes for PISA (mmcv semantics), on CPU and CUDA.

    Greedy in descending score order: each box not yet taken starts a group
    and takes every later untaken box with IoU >= iou_threshold.

    Args:
        dets: [N, 5] (x1, y1, x2, y2, score), Tensor or np.ndarray; an empty
            1-D one (shape [0]) is taken as no boxes, as mmcv does.

    Returns:
        A list with one int64 index tensor (np.ndarray for NumPy input) per
        group, in descending score order of the group's first box; each starts
        with that box, then its members in descending score order.
    """
    is_numpy = is_ndarray(dets)
    dets_t = torch.from_numpy(dets) if is_numpy else dets
    if not isinstance(dets_t, torch.Tensor):
        raise TypeError(f"nms_match: dets must be a Tensor or np.ndarray, got {type(dets).__name__}")
    if dets_t.dim() == 1 and dets_t.numel() == 0:
        # mmcv returns [] for any dets with shape[0] == 0 before looking at
        # the shape; empty selections in mmdet code are often 1-D.
        return []
    # Checked here too (same text as the op's check): mmcv asserts dets' shape, so code written against mmcv
    # expects an AssertionError.
    if dets_t.dim() != 2:
        raise _args.ShapeError(f"nms_match: dets must have 2 dimensions, got shape {list(dets_t.shape)}")
    if dets_t.size(1) != 5:
        raise _args.ShapeError(
            f"nms_match: dets must have shape [N, 5] (x1, y1, x2, y2, score), got {list(dets_t.shape)}"
        )
    if is_exporting():
        # The split below would fail on its data-dependent sizes, with torch's generic message.
        raise RuntimeError(
            "nms_match: its result is a list of groups whose number and sizes depend on the data, which torch.export "
            "and ONNX export cannot trace; torch.ops.visdet_ops.nms_match(dets, iou_threshold) gives each box's group "
            "leader as one tensor (in ONNX a visdet_ops::nms_match node)"
        )
    note_device(dets_t)
    refuse_graph_capture("nms_match", dets_t, "how many groups it forms depends on the data")
    leader = torch.ops.visdet_ops.nms_match(dets_t.detach(), float(iou_threshold))
    n = leader.numel()
    if n == 0:
        groups: list[torch.Tensor] = []
    else:
        order = torch.sort(dets_t[:, 4].detach(), descending=True, stable=True).indices
        rank = torch.empty_like(order)
        rank[order] = torch.arange(n, device=order.device)
        # Group by the leader's rank, then by the member's own rank (the leader
        # has the lowest rank of its group, so it comes first).
        members = torch.argsort(rank[leader] * n + rank)
        counts = torch.unique_consecutive(leader[members], return_counts=True)[1]
        groups = list(torch.split(members, counts.tolist()))
    if is_numpy:
        return [g.cpu().numpy().astype(int) for g in groups]
    return groups


@example("nms", "batched_nms", "nms_match")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """nms, batched_nms and nms_match over several 64-box blocks (the mask and walk kernels cross block
    boundaries)."""
    from ..reference.nms import nms_match_reference, nms_reference
    from ._examples import boxes as draw_boxes

    boxes, scores = draw_boxes(300, gen)
    b, s = boxes.to(dtype), scores.to(dtype)
    bd, sd = b.to(device), s.to(device)
    keep = nms(bd, sd, 0.5)[1]
    if keep.tolist() != nms_reference(b.double(), s.double(), 0.5).tolist():
        return "nms: wrong result"
    idxs = torch.randint(0, 5, (300,), generator=gen)
    keep = batched_nms(bd, sd, idxs.to(device), {"iou_threshold": 0.5})[1]
    if keep.tolist() != nms_reference(b.double(), s.double(), 0.5, idxs=idxs).tolist():
        return "batched_nms: wrong result"
    dets = torch.cat([b, s[:, None]], 1)
    groups = nms_match(dets.to(device), 0.5)
    if [g.tolist() for g in groups] != nms_match_reference(dets.double(), 0.5):
        return "nms_match: wrong result"
    return None
