"""The box family's test-side home (as csrc/ops/_boxes for the kernels): what the tests of nms and soft_nms share.
Fuzz: dyadic IoU thresholds, the boxes and scores of a case, the structure of a (dets, inds) answer. CUDA graphs: the
CUDA boxes the NMS family's refused captures are called on (nms_rotated's too) and the calls on them (refused_capture).
"""

from __future__ import annotations

import torch

from .. import fuzz_core as core

# Dyadic thresholds: IoU comparisons of boxes on the 1/8 grid are then exact in float32 and float64 alike.
IOU = [0.5, 0.25, 0.75, 0.0, 1.0, 0.375]


def nms_values(run: core.Run, case: dict, n: int):
    boxes = core.grid_boxes(run, n)
    scores = core.f32_scores(run, n, ties=case["ties"])
    if case["special"] and n:
        boxes[n // 2, case["seed"] % 4] = float("nan")
        scores[(n - 1) // 3] = [float("nan"), float("inf"), -float("inf")][case["seed"] % 3]
    return boxes, scores


def check_keep(inds, dets, boxes, scores, n):
    """The structure of an (dets, inds) answer: int64 indices in range without repeats, dets = [boxes, score]."""
    if inds.dtype != torch.long or inds.dim() != 1:
        raise core.Mismatch(f"indices: {inds.dtype} with shape {list(inds.shape)}")
    lst = inds.tolist()
    if len(set(lst)) != len(lst) or any(not 0 <= i < n for i in lst):
        raise core.Mismatch(f"indices out of range or repeated: {lst[:20]}")
    if list(dets.shape) != [len(lst), 5]:
        raise core.Mismatch(f"dets shape {list(dets.shape)} for {len(lst)} indices")
    if len(lst):
        got_boxes = dets[:, :4].detach().cpu().double()
        want_boxes = boxes.detach().cpu().double()[inds.cpu()]
        if not torch.equal(got_boxes.nan_to_num(-7.0), want_boxes.nan_to_num(-7.0)):
            raise core.Mismatch("dets[:, :4] are not boxes[inds]")


def cuda_graph_boxes(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """20 boxes (x1 < x2, y1 < y2), their scores and class ids in [0, 3), on CUDA: what the NMS family's
    CUDA_GRAPH_REFUSALS calls take (tests/test_cuda_graphs.py)."""
    boxes = torch.rand(20, 4, generator=gen) * 50
    boxes[:, 2:] += boxes[:, :2] + 1
    boxes, scores = boxes.cuda(), torch.rand(20, generator=gen).cuda()
    idxs = torch.randint(0, 3, (20,), generator=gen).cuda()
    return boxes, scores, idxs


def refused_capture(call):
    """gen -> call(boxes, scores, idxs, dets) on cuda_graph_boxes(gen) (dets built before the capture)."""

    def make(gen):
        boxes, scores, idxs = cuda_graph_boxes(gen)
        dets = torch.cat([boxes, scores[:, None]], 1)
        return lambda: call(boxes, scores, idxs, dets)

    return make
