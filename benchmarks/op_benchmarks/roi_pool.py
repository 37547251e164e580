"""Benchmarks of visdet_ops.ops.roi_pool against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.roi_pool import roi_pool

from . import Case, benchmark


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


@benchmark("roi_pool", tags=("gpu_targets",))
def _gpu_targets(gen, tv):
    """Issue 24's rows: fwd+bwd at each RoI head level; peer torchvision's roi_pool."""
    from ._helpers import fresh_fwd_bwd, roi_head_inputs

    for shape, feats, rois, grad, scale in roi_head_inputs(gen):
        yield Case(
            f"roi_pool fwd+bwd {shape}",
            fresh_fwd_bwd(lambda x, s=scale, r=rois: roi_pool(x, r, 7, s), (feats,), grad),
            fresh_fwd_bwd(lambda x, s=scale, r=rois: tv.roi_pool(x, r, 7, s), (feats,), grad),
        )


@benchmark("roi_pool", tags=("cpu",))
def _cpu(gen, tv):
    """A detector's RoI head at stride 8 on the CPU."""
    from ._helpers import image_rois, ones_backward

    x = torch.randn(2, 256, 100, 152, generator=gen)
    rois = image_rois(gen, 512, 2, 100, 152, 1 / 8)
    ours = lambda t: roi_pool(t, rois, 7, 1 / 8)  # noqa: E731
    peer = lambda t: tv.roi_pool(t, rois, 7, 1 / 8)  # noqa: E731
    yield Case("forward, 2x256x100x152, K=512, 7x7", lambda: ours(x), lambda: peer(x))
    yield Case("fwd+bwd, the same", lambda: ones_backward(ours, x), lambda: ones_backward(peer, x))


@benchmark("roi_pool", tags=("host_time",))
def _host_time(dev, tv):
    """fwd+bwd of 4 RoIs on a 1x4x16x16 map."""
    from ._helpers import tiny_roi_fwd_bwd

    yield tiny_roi_fwd_bwd(
        dev, "roi_pool fwd+bwd", lambda t, r: roi_pool(t, r, 7, 1.0), lambda t, r: tv.roi_pool(t, r, 7, 1.0)
    )


@benchmark("roi_pool", tags=("host_instructions",))
def _host_instructions():
    """fwd+bwd of 4 RoIs on a 1x4x16x16 map."""
    setup = "x = torch.randn(1, 4, 16, 16, generator=g)\nrois = torch.tensor([[0, 1.0, 1, 9, 9]] * 4)"
    yield Case("roi_pool fwd+bwd", "fwd_bwd(lambda t: visdet_ops.roi_pool(t, rois, 7, 1.0), x)", setup=setup)
