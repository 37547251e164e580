"""GPU benchmarks of visdet_ops.ops.deform_roi_pool against its peers, which benchmarks/bench.py discovers and runs
(not shipped in the wheel)."""

from __future__ import annotations

import torch

from visdet_ops.ops.deform_roi_pool import deform_roi_pool

from . import benchmark


@benchmark("deform_roi_pool")
def _benchmark(bench) -> None:
    """Forward + backward at one FPN level (1000 RoIs, 256 channels, 7x7, offsets 0.5 * randn). No peer:
    torchvision has no deform_roi_pool and mmcv is not installed on the GPU machine. roi_align (aligned=True, avg)
    on the same input and RoIs, without offsets, is timed as a reference point only: it is a different, cheaper op
    (no offset read, no offset gradient)."""
    from visdet_ops.ops.roi_align import roi_align

    from ._helpers import fpn_rois

    stride, h, w = 8, 100, 168
    feats = torch.randn(2, 256, h, w, generator=bench.gen).cuda()
    k = 1000
    rois = fpn_rois(k, stride, h, w, bench.gen)
    offset = (torch.randn(k, 2, 7, 7, generator=bench.gen) * 0.5).cuda()
    scale = 1.0 / stride
    grad = torch.randn(k, 256, 7, 7, generator=bench.gen).cuda()

    def case(sr: int) -> None:
        x = feats.clone().requires_grad_()
        off = offset.clone().requires_grad_()

        def ours():
            out = deform_roi_pool(x, rois, off, 7, scale, sr, 0.1)
            out.backward(grad)

        row = {
            "op": "deform_roi_pool fwd+bwd",
            "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, sampling_ratio={sr}, offsets 0.5*randn",
        }
        row["ours"] = bench.cuda_time_ms(ours)
        fwd = bench.cuda_time_ms(lambda: deform_roi_pool(feats, rois, offset, 7, scale, sr, 0.1))
        bench.forward_traffic(row, fwd["median_ms"], feats.numel() * 4 + k * 256 * 49 * 4)
        xr = feats.clone().requires_grad_()

        def roi_align_fwd_bwd():
            out = roi_align(xr, rois, 7, scale, sr, "avg", True)
            out.backward(grad)

        row["reference_point"] = bench.cuda_time_ms(roi_align_fwd_bwd)
        row["note"] = (
            "reference point, not a peer: visdet_ops.roi_align fwd+bwd on the same input and RoIs, "
            f"no offsets: {row['reference_point']['median_ms']:.3f} ms"
        )
        bench.results.append(row)

    for sr in (0, 2):
        case(sr)
