"""GPU benchmarks of visdet_ops.ops.roi_pool against its peers, which benchmarks/bench.py discovers and runs
(not shipped in the wheel)."""

from __future__ import annotations

import torch

from visdet_ops.ops.roi_pool import roi_pool

from . import benchmark


@benchmark("roi_pool")
def _benchmark(bench) -> None:
    """Forward + backward at roi_align's FPN levels (1000 RoIs, 256 channels, 7x7) against torchvision."""
    from ._helpers import FPN_LEVELS, fpn_rois

    tv, k = bench.tv, 1000

    def case(stride, h, w) -> None:
        feats = torch.randn(2, 256, h, w, generator=bench.gen).cuda()
        rois = fpn_rois(k, stride, h, w, bench.gen)
        scale = 1.0 / stride
        grad = torch.randn(k, 256, 7, 7, generator=bench.gen).cuda()
        x = feats.clone().requires_grad_()

        def ours():
            out = roi_pool(x, rois, 7, scale)
            out.backward(grad)

        row = {"op": "roi_pool fwd+bwd", "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7"}
        row["ours"] = bench.cuda_time_ms(ours)
        x.grad = None
        fwd = bench.cuda_time_ms(lambda: roi_pool(feats, rois, 7, scale))
        # Compulsory traffic of the forward: read the feature map once, write output and argmax.
        bench.forward_traffic(row, fwd["median_ms"], feats.numel() * 4 + k * 256 * 49 * (4 + 4))
        if tv is not None:
            # Not compared: torchvision rounds the scaled RoI corners to integers, mmcv (and
            # visdet-ops) does not, so bins differ by a pixel here and there. The work per bin
            # is the same (tests/ops/test_roi_pool.py compares the two where the rules agree).
            xt = feats.clone().requires_grad_()

            def peer():
                out = tv.roi_pool(xt, rois, 7, scale)
                out.backward(grad)

            row["peer"] = bench.cuda_time_ms(peer)
            row["peer_name"] = "torchvision.ops.roi_pool"
        bench.results.append(row)

    for stride, h, w in FPN_LEVELS:
        case(stride, h, w)


@benchmark("roi_pool")
def _benchmark_overhead(bench) -> None:
    from ._helpers import per_call_overhead

    per_call_overhead(
        bench, "roi_pool", lambda t, rois: roi_pool(t, rois, 1, 1.0), lambda tv, t, rois: tv.roi_pool(t, rois, 1, 1.0)
    )
