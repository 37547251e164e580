"""Benchmarks of visdet_ops.ops.bbox_overlaps against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.bbox_overlaps import bbox_overlaps

from . import Case, benchmark


@benchmark("bbox_overlaps")
def _benchmark(bench) -> None:
    """IoU of clustered boxes, float32 (against torchvision's box_iou, same values first) and float16."""
    from ._helpers import detection_boxes

    tv = bench.tv

    def case(m: int, n: int) -> None:
        a, _ = detection_boxes(m, bench.gen)
        b, _ = detection_boxes(n, bench.gen)
        ours = bbox_overlaps(a, b)
        row = {"op": "bbox_overlaps", "case": f"{m} x {n} iou, float32"}
        row["ours"] = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.bbox_overlaps(a, b, "iou", False, 0))
        bench.forward_traffic(row, row["ours"]["median_ms"], ours.numel() * 4 + (m + n) * 16)
        if tv is not None:
            torch.testing.assert_close(tv.box_iou(a, b), ours)
            row["peer"] = bench.cuda_time_ms(lambda: tv.box_iou(a, b))
            row["peer_name"] = "torchvision.ops.box_iou"
        bench.results.append(row)

    for m, n in ((1000, 1000), (5000, 5000), (20000, 20000), (20000, 100)):
        case(m, n)
    a, _ = detection_boxes(5000, bench.gen)
    b, _ = detection_boxes(5000, bench.gen)
    ah, bh = a.half(), b.half()
    row = {"op": "bbox_overlaps", "case": "5000 x 5000 iou, float16"}
    row["ours"] = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.bbox_overlaps(ah, bh, "iou", False, 0))
    if tv is not None:
        row["peer"] = bench.cuda_time_ms(lambda: tv.box_iou(ah, bh))
        row["peer_name"] = "torchvision.ops.box_iou"
    bench.results.append(row)


@benchmark("bbox_overlaps", tags=("host_instructions",))
def _host_instructions():
    """16 boxes against themselves."""
    setup = "b = torch.rand(16, 4, generator=g) * 50\nb[:, 2:] += b[:, :2]"
    yield Case("bbox_overlaps", "visdet_ops.bbox_overlaps(b, b)", setup=setup)
