"""Benchmarks of visdet_ops.ops.corner_pool against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.corner_pool import _cummax_pool, corner_pool

from . import Case, benchmark


@benchmark("corner_pool")
def _benchmark(bench) -> None:
    """CornerNet's pooling input: 2 images, 128 channels at 128 x 128 (511 px input, stride 4), every direction.
    Peer: mmcv's CornerPool.forward (torch.cummax, `_cummax_pool`), same values first."""
    from ._helpers import fwd_bwd

    x = torch.randn(2, 128, 128, 128, generator=bench.gen).cuda()
    grad = torch.randn(x.shape, generator=bench.gen).cuda()

    def case(mode: str) -> None:
        assert torch.equal(corner_pool(x, mode), _cummax_pool(x, mode))
        xg = x.clone().requires_grad_()
        row = {"op": "corner_pool fwd+bwd", "case": f"{mode}, 2 x 128 x 128x128"}
        row["ours"] = bench.cuda_time_ms(fwd_bwd(lambda t: corner_pool(t, mode), [xg], grad))
        row["peer"] = bench.cuda_time_ms(fwd_bwd(lambda t: _cummax_pool(t, mode), [xg], grad))
        row["peer_name"] = "torch.cummax (mmcv CornerPool)"
        fwd = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.corner_pool(x, mode))
        bench.forward_traffic(row, fwd["median_ms"], 2 * x.numel() * 4)
        bench.results.append(row)

    for mode in ("top", "bottom", "left", "right"):
        case(mode)


@benchmark("corner_pool", tags=("host_instructions",))
def _host_instructions():
    """fwd+bwd on a 1x4x16x16 map."""
    setup = "x = torch.randn(1, 4, 16, 16, generator=g)"
    yield Case("corner_pool fwd+bwd", "fwd_bwd(lambda t: visdet_ops.corner_pool(t, 'top'), x)", setup=setup)
