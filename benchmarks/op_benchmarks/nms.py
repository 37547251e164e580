"""Benchmarks of visdet_ops.ops.nms against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.nms import batched_nms, nms

from . import Case, benchmark


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


def _cpu_boxes(gen: torch.Generator, n: int, size: float = 800.0) -> tuple[torch.Tensor, torch.Tensor]:
    xy = torch.rand(n, 2, generator=gen) * size
    wh = 8 + torch.rand(n, 2, generator=gen) * size * 0.15
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen)


@benchmark("nms", "batched_nms", tags=("cpu",))
def _cpu(gen, tv):
    """A detector's NMS stages on the CPU: nms of 1000 and 5000 boxes, batched_nms of 20000 and 80000 boxes in 80
    classes (mmdet's default split_thr), iou 0.5."""
    for n in (1000, 5000):
        boxes, scores = _cpu_boxes(gen, n)
        yield Case(
            f"nms {n} boxes, iou 0.5",
            lambda b=boxes, s=scores: nms(b, s, 0.5),
            (lambda b=boxes, s=scores: tv.nms(b, s, 0.5)),
        )
    for n, classes in ((20000, 80), (80000, 80)):
        boxes, scores = _cpu_boxes(gen, n)
        idxs = torch.randint(0, classes, (n,), generator=gen)
        cfg = {"type": "nms", "iou_threshold": 0.5}
        yield Case(
            f"batched_nms {n} boxes in {classes} classes",
            (lambda b=boxes, s=scores, i=idxs: batched_nms(b, s, i, dict(cfg))),
            lambda b=boxes, s=scores, i=idxs: tv.batched_nms(b, s, i, 0.5),
        )


@benchmark("nms", tags=("host_time",))
def _host_time(dev, tv):
    """nms of 50 boxes."""
    gen = torch.Generator().manual_seed(0)
    boxes = torch.rand(50, 4, generator=gen) * 40
    boxes[:, 2:] += boxes[:, :2] + 1
    boxes, scores = boxes.to(dev), torch.rand(50, generator=gen).to(dev)
    yield Case("nms", lambda: nms(boxes, scores, 0.5), lambda: tv.nms(boxes, scores, 0.5))


@benchmark("nms", tags=("host_instructions",))
def _host_instructions():
    """nms of 16 boxes."""
    setup = "b = torch.rand(16, 4, generator=g) * 50\nb[:, 2:] += b[:, :2]\ns = torch.rand(16, generator=g)"
    yield Case("nms", "visdet_ops.nms(b, s, 0.5)", setup=setup)
