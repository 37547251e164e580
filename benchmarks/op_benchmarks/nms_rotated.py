"""Benchmarks of visdet_ops.ops.nms_rotated against mmcv's compiled kernels (the module mmcv_rotated_ext, built from
mmcv's sources on the benchmark machine: _helpers.mmcv_rotated_ext), each tagged for the reports that select it
(default: benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel.
Where mmcv_rotated_ext is not installed the rows have no peer."""

from __future__ import annotations

import torch

from visdet_ops.ops.nms_rotated import nms_rotated

from . import Case, benchmark


def mmcv_nms_rotated(ext, dets, scores, iou_threshold, labels=None, clockwise=True):
    """mmcv 2.2.0's mmcv.ops.nms_rotated as mmcv writes it (its CUDA/CPU path), around `ext`, its compiled kernel:
    the angle flip, the labels column, the sort, the sorted copy, the kernel (the mask, its copy to the host and the
    sweep there, on CUDA), the gather and cat of the kept rows."""
    if dets.shape[0] == 0:
        return dets, None
    if not clockwise:
        flip_mat = dets.new_ones(dets.shape[-1])
        flip_mat[-1] = -1
        dets_cw = dets * flip_mat
    else:
        dets_cw = dets
    multi_label = labels is not None
    input_labels = scores.new_empty(0, dtype=torch.int) if labels is None else labels
    dets_wl = torch.cat((dets_cw, labels.unsqueeze(1)), 1) if multi_label else dets_cw
    _, order = scores.sort(0, descending=True)
    dets_sorted = dets_wl.index_select(0, order)
    keep_inds = ext.nms_rotated(dets_wl, scores, order, dets_sorted, input_labels, iou_threshold, multi_label)
    dets = torch.cat((dets[keep_inds], scores[keep_inds].reshape(-1, 1)), dim=1)
    return dets, keep_inds


def _note(ours: torch.Tensor, theirs: torch.Tensor, labelled: bool) -> str:
    if labelled:
        # mmcv's kernels ignore the labels (docs/ops.md, nms_rotated): the keep lists are not comparable.
        return f"{ours.numel()} kept (mmcv: {theirs.numel()}, its kernel ignores labels)"
    same = torch.equal(ours, theirs)
    return f"{ours.numel()} kept, {'same keep list as mmcv' if same else f'mmcv keeps {theirs.numel()}, lists differ'}"


@benchmark("nms_rotated")
def _benchmark(bench) -> None:
    """nms_rotated of 2000 and 10000 clustered rotated boxes at mmrotate's test-time threshold (0.1) and at 0.5, and
    with DOTA's 15 classes as labels, public call against public call (mmcv's wrapper around its CUDA kernel)."""
    from ._helpers import mmcv_rotated_ext, rotated_detection_boxes

    ext = mmcv_rotated_ext()

    def case(n: int, iou: float, classes: int) -> None:
        boxes, scores = rotated_detection_boxes(n, bench.gen)
        labels = torch.randint(0, classes, (n,), generator=bench.gen).cuda() if classes else None
        ours = nms_rotated(boxes, scores, iou, labels)[1]
        what = f", {classes} classes" if classes else ""
        row = {"op": "nms_rotated", "case": f"{n} boxes, iou {iou}{what}", "kept": int(ours.numel())}
        row["ours"] = bench.cuda_time_ms(lambda: nms_rotated(boxes, scores, iou, labels))
        if ext is not None:
            mmcv_labels = None if labels is None else labels.float()
            theirs = mmcv_nms_rotated(ext, boxes, scores, iou, mmcv_labels)[1]
            row["note"] = _note(ours, theirs, labels is not None)
            row["peer"] = bench.cuda_time_ms(lambda: mmcv_nms_rotated(ext, boxes, scores, iou, mmcv_labels))
            row["peer_name"] = "mmcv nms_rotated (CUDA)"
        bench.results.append(row)

    for n in (2000, 10000):
        for iou, classes in ((0.1, 0), (0.5, 0), (0.1, 15)):
            case(n, iou, classes)


@benchmark("nms_rotated", tags=("cpu",))
def _cpu(gen, tv):
    """nms_rotated of 2000 and 5000 clustered rotated boxes on the CPU, iou 0.1, against mmcv's CPU kernel."""
    from ._helpers import mmcv_rotated_ext, rotated_detection_boxes

    ext = mmcv_rotated_ext()
    for n in (2000, 5000):
        boxes, scores = rotated_detection_boxes(n, gen, device="cpu")
        peer = None if ext is None else (lambda b=boxes, s=scores: mmcv_nms_rotated(ext, b, s, 0.1))
        yield Case(
            f"nms_rotated {n} boxes, iou 0.1",
            lambda b=boxes, s=scores: nms_rotated(b, s, 0.1),
            peer,
            peer_name="mmcv nms_rotated (CPU)",
        )


@benchmark("nms_rotated", tags=("host_instructions",))
def _host_instructions():
    """nms_rotated of 16 rotated boxes."""
    setup = "b = torch.rand(16, 5, generator=g) * 50\nb[:, 2:4] += 1\ns = torch.rand(16, generator=g)"
    yield Case("nms_rotated", "visdet_ops.nms_rotated(b, s, 0.5)", setup=setup)
