"""GPU benchmarks of visdet_ops.ops.soft_nms against its peers, which benchmarks/bench.py discovers and runs
(not shipped in the wheel)."""

from __future__ import annotations

import torch

from . import benchmark


@benchmark("soft_nms")
def _benchmark_soft_nms(bench) -> None:
    """soft_nms of 1000 and 5000 clustered boxes against our own CPU kernel (mmcv has soft_nms on the CPU only)."""
    from ._helpers import detection_boxes

    def case(n: int, method: str) -> None:
        boxes, scores = detection_boxes(n, bench.gen)
        args = (0.3, 0.5, 1e-3, method, 0)
        ours = torch.ops.visdet_ops.soft_nms(boxes, scores, *args)
        cpu_boxes, cpu_scores = boxes.cpu(), scores.cpu()
        theirs = torch.ops.visdet_ops.soft_nms(cpu_boxes, cpu_scores, *args)
        _check_same_picks(ours, theirs)
        row = {"op": "soft_nms", "case": f"{n} boxes, {method}", "kept": int(ours[0].numel())}
        row["ours"] = bench.cuda_time_ms(
            lambda: torch.ops.visdet_ops.soft_nms(boxes, scores, *args), warmup=3, repeat=20
        )
        row["peer"] = bench.cpu_time_ms(lambda: torch.ops.visdet_ops.soft_nms(cpu_boxes, cpu_scores, *args))
        row["peer_name"] = f"visdet-ops CPU ({torch.get_num_threads()} threads, serial kernel)"
        bench.results.append(row)

    for n, method in ((1000, "linear"), (5000, "linear"), (5000, "gaussian")):
        case(n, method)


def _check_same_picks(ours, theirs) -> None:
    """CUDA's and the CPU's soft_nms keep the same boxes with the same decayed scores, to rounding. The decays round
    differently on the two devices (run 23, H200: 1 ulp on a quarter to most of the kept scores), so where two
    decayed scores are that close the pick order may swap: the boxes are compared as a set, each with its score."""
    keep, scores = ours[0].cpu(), ours[1].cpu()
    keep_cpu, scores_cpu = theirs[0], theirs[1]
    if torch.equal(keep, keep_cpu):
        assert torch.allclose(scores, scores_cpu, rtol=1e-5, atol=1e-6), "soft_nms CUDA and CPU decay differently"
        return
    assert torch.equal(keep.sort().values, keep_cpu.sort().values), "soft_nms CUDA and CPU keep different boxes"
    by_box, by_box_cpu = scores[keep.argsort()], scores_cpu[keep_cpu.argsort()]
    assert torch.allclose(by_box, by_box_cpu, rtol=1e-5, atol=1e-6), "soft_nms CUDA and CPU decay differently"
