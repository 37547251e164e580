"""GPU benchmarks of visdet_ops.ops.carafe against its peers, which benchmarks/bench.py discovers and runs
(not shipped in the wheel)."""

from __future__ import annotations

import torch

from visdet_ops.ops.carafe import carafe, carafe_naive

from . import benchmark


@benchmark("carafe", "carafe_naive")
def _benchmark(bench) -> None:
    """CARAFE-FPN (mmdet configs/carafe): 256 channels, kernel 5, group 1, x2 upsampling of each FPN level of a
    2-image batch at 800 x 1333. Peer: carafe_naive (the direct kernels), as mmcv's carafe vs carafe_naive."""
    from ._helpers import fwd_bwd

    def case(h: int, w: int) -> None:
        x = torch.randn(2, 256, h, w, generator=bench.gen).cuda()
        masks = torch.randn(2, 25, 2 * h, 2 * w, generator=bench.gen).softmax(1).cuda()
        torch.testing.assert_close(carafe(x, masks, 5, 1, 2), carafe_naive(x, masks, 5, 1, 2))
        grad = torch.randn(2, 256, 2 * h, 2 * w, generator=bench.gen).cuda()
        xg, mg = x.clone().requires_grad_(), masks.clone().requires_grad_()
        row = {"op": "carafe fwd+bwd", "case": f"2 x 256 x {h}x{w} -> x2, k5 g1"}
        row["ours"] = bench.cuda_time_ms(fwd_bwd(lambda a, b: carafe(a, b, 5, 1, 2), [xg, mg], grad))
        row["peer"] = bench.cuda_time_ms(fwd_bwd(lambda a, b: carafe_naive(a, b, 5, 1, 2), [xg, mg], grad))
        row["peer_name"] = "visdet_ops.carafe_naive"
        fwd = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.carafe(x, masks, 5, 1, 2))
        # Compulsory traffic: read features and masks once, write the output.
        bench.forward_traffic(row, fwd["median_ms"], (x.numel() + masks.numel() + grad.numel()) * 4)
        bench.results.append(row)
        row = {"op": "carafe fwd", "case": f"2 x 256 x {h}x{w} -> x2, k5 g1"}
        row["ours"] = fwd
        row["peer"] = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.carafe_naive(x, masks, 5, 1, 2))
        row["peer_name"] = "visdet_ops.carafe_naive"
        bench.results.append(row)

    for h, w in ((100, 168), (50, 84), (25, 42)):
        case(h, w)
