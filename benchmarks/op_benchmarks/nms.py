"""GPU benchmarks of visdet_ops.ops.nms against its peers, which benchmarks/bench.py discovers and runs
(not shipped in the wheel)."""

from __future__ import annotations

import torch

from visdet_ops.ops.nms import batched_nms, nms

from . import benchmark


@benchmark("nms")
def _benchmark_nms(bench) -> None:
    """nms of 1000 to 20000 clustered boxes, iou 0.5, against torchvision (same keep list first)."""
    from ._helpers import detection_boxes

    def case(n: int) -> None:
        boxes, scores = detection_boxes(n, bench.gen)
        ours_keep = nms(boxes, scores, 0.5)[1]
        row = {"op": "nms", "case": f"{n} boxes, iou 0.5", "kept": int(ours_keep.numel())}
        row["ours"] = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.nms(boxes, scores, 0.5, 0))
        if bench.tv is not None:
            assert torch.equal(bench.tv.nms(boxes, scores, 0.5), ours_keep), "nms differs from torchvision"
            row["peer"] = bench.cuda_time_ms(lambda: bench.tv.nms(boxes, scores, 0.5))
            row["peer_name"] = "torchvision.ops.nms"
        bench.results.append(row)

    for n in (1000, 5000, 20000):
        case(n)


@benchmark("batched_nms")
def _benchmark_batched_nms(bench) -> None:
    """mmdet's test-time config: 80 classes, iou 0.5, default split_thr (10000), against torchvision."""
    from ._helpers import detection_boxes

    cfg = {"type": "nms", "iou_threshold": 0.5}

    def case(n: int) -> None:
        boxes, scores = detection_boxes(n, bench.gen)
        idxs = torch.randint(0, 80, (n,), generator=bench.gen).cuda()
        ours_keep = batched_nms(boxes, scores, idxs, cfg)[1]
        row = {"op": "batched_nms", "case": f"{n} boxes, 80 classes, iou 0.5", "kept": int(ours_keep.numel())}
        row["ours"] = bench.cuda_time_ms(lambda: batched_nms(boxes, scores, idxs, cfg))
        if bench.tv is not None:
            assert torch.equal(bench.tv.batched_nms(boxes, scores, idxs, 0.5), ours_keep), (
                "batched_nms differs from torchvision"
            )
            row["peer"] = bench.cuda_time_ms(lambda: bench.tv.batched_nms(boxes, scores, idxs, 0.5))
            row["peer_name"] = "torchvision.ops.batched_nms"
        bench.results.append(row)

    for n in (1000, 5000, 20000):
        case(n)
