"""Benchmarks of visdet_ops.ops.masked_conv against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.masked_conv import masked_conv2d

from . import Case, benchmark


@benchmark("masked_conv2d")
def _benchmark(bench) -> None:
    """Guided-anchoring style: 256 -> 256 channels, 3x3, one FPN level, a sparse location mask. Peer: the dense
    F.conv2d times the mask (same values first)."""
    import torch.nn.functional as F

    from ._helpers import fwd_bwd

    gen = bench.gen
    x = torch.randn(1, 256, 100, 168, generator=gen).cuda()
    w = (torch.randn(256, 256, 3, 3, generator=gen) * 0.02).cuda()
    b = torch.randn(256, generator=gen).cuda()
    grad = torch.randn(1, 256, 100, 168, generator=gen).cuda()

    def case(density: float) -> None:
        mask = (torch.rand(1, 100, 168, generator=gen) < density).float().cuda()

        def dense(a, c, d):
            return F.conv2d(a, c, d, padding=1) * mask[:, None]

        torch.testing.assert_close(masked_conv2d(x, mask, w, b, 1), dense(x, w, b), rtol=1e-3, atol=1e-3)
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        row = {"op": "masked_conv2d fwd+bwd", "case": f"1 x 256 -> 256, 100x168, 3x3, {density:.0%} active"}
        row["ours"] = bench.cuda_time_ms(fwd_bwd(lambda a, c, d: masked_conv2d(a, mask, c, d, 1), leaves, grad))
        row["peer"] = bench.cuda_time_ms(fwd_bwd(dense, leaves, grad))
        row["peer_name"] = "F.conv2d * mask (cuDNN, TF32 off)"
        bench.results.append(row)
        row = {"op": "masked_conv2d fwd", "case": f"1 x 256 -> 256, 100x168, 3x3, {density:.0%} active"}
        row["ours"] = bench.cuda_time_ms(lambda: torch.ops.visdet_ops.masked_conv2d(x, mask, w, b, 1, 1))
        row["peer"] = bench.cuda_time_ms(lambda: dense(x, w, b))
        row["peer_name"] = "F.conv2d * mask (cuDNN, TF32 off)"
        bench.results.append(row)

    # cuDNN convolutions use TF32 by default, our masked_conv2d's matmuls do not
    # (torch's matmul default): compare and time both in full float32.
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        for density in (0.05, 0.3):
            case(density)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


@benchmark("masked_conv2d", tags=("host_instructions",))
def _host_instructions():
    """Forward on a 1x4x8x8 map, about half of it masked in."""
    setup = (
        "mx = torch.randn(1, 4, 8, 8, generator=g)\nmmask = (torch.rand(1, 8, 8, generator=g) > 0.5).float()\n"
        "mw = torch.randn(4, 4, 3, 3, generator=g)\nmb = torch.randn(4, generator=g)"
    )
    yield Case("masked_conv2d fwd", "visdet_ops.masked_conv2d(mx, mmask, mw, mb, 1)", setup=setup)
