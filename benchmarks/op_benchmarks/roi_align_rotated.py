"""Benchmarks of visdet_ops.ops.roi_align_rotated against mmcv's compiled kernels, each tagged for the reports that
select it (default: benchmarks/bench.py's GPU table; "cpu": benchmarks/cpu.py). Not shipped in the wheel.

The peer is mmcv 2.2.0's roi_align_rotated kernels, built as an importable extension module `mmcv_rotated_ext`
exposing mmcv's `ext_module` functions with mmcv's names and argument order (roi_align_rotated_forward(input, rois,
output, pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned, clockwise) and
roi_align_rotated_backward(grad_output, rois, grad_input, ...)), timed through mmcv's RoIAlignRotatedFunction as
mmcv writes it (_mmcv_roi_align_rotated). torchvision has no rotated RoIAlign: where that module does not import,
the rows have no peer."""

from __future__ import annotations

import math

import torch

from visdet_ops.ops.roi_align_rotated import roi_align_rotated

from . import Case, benchmark


def _mmcv_roi_align_rotated():
    """mmcv.ops.roi_align_rotated (RoIAlignRotatedFunction.apply, mmcv 2.2.0's forward and backward: a new_zeros
    output and the ext call; new_zeros grad_input and the ext call) over mmcv_rotated_ext, or None where that module
    is absent."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("mmcv_rotated_ext") is None:
        return None
    ext = importlib.import_module("mmcv_rotated_ext")
    from torch.nn.modules.utils import _pair

    class RoIAlignRotatedFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, rois, output_size, spatial_scale, sampling_ratio=0, aligned=True, clockwise=False):
            ctx.output_size = _pair(output_size)
            ctx.spatial_scale = spatial_scale
            ctx.sampling_ratio = sampling_ratio
            ctx.aligned = aligned
            ctx.clockwise = clockwise
            ctx.save_for_backward(rois)
            ctx.feature_size = input.size()
            _, num_channels, _, _ = input.size()
            output = input.new_zeros(rois.size(0), num_channels, ctx.output_size[0], ctx.output_size[1])
            ext.roi_align_rotated_forward(
                input, rois, output, ctx.output_size[0], ctx.output_size[1], ctx.spatial_scale, ctx.sampling_ratio,
                ctx.aligned, ctx.clockwise,
            )  # fmt: skip
            return output

        @staticmethod
        def backward(ctx, grad_output):
            batch_size, num_channels, data_height, data_width = ctx.feature_size
            rois = ctx.saved_tensors[0]
            grad_input = None
            if ctx.needs_input_grad[0]:
                grad_input = rois.new_zeros(batch_size, num_channels, data_height, data_width)
                ext.roi_align_rotated_backward(
                    grad_output.contiguous(), rois, grad_input, grad_output.size(2), grad_output.size(3),
                    ctx.spatial_scale, ctx.sampling_ratio, ctx.aligned, ctx.clockwise,
                )  # fmt: skip
            return grad_input, None, None, None, None, None, None

    return RoIAlignRotatedFunction.apply


_PEER_NAME = "mmcv 2.2.0 roi_align_rotated (mmcv_rotated_ext)"

# Oriented R-CNN's RoI head at the levels of an 800x800 image (DOTA crops are 1024; these are the maps):
# (stride, map side). Batch 2, 256 channels, 7x7 output.
_LEVELS = ((4, 200), (8, 100), (16, 50))


def rotated_rois(k: int, batch: int, side: int, stride: int, gen: torch.Generator) -> torch.Tensor:
    """k rotated RoIs (batch_index, x, y, w, h, angle) in image coordinates of a level of `stride`: sides of 2 to 28
    feature pixels (what the level assignment sends there), centres anywhere on the map, angles in [-pi/2, pi/2)
    (the "le90" convention of oriented detectors)."""
    wh = (torch.rand(k, 2, generator=gen) * 26 + 2) * stride
    xy = torch.rand(k, 2, generator=gen) * side * stride
    angle = (torch.rand(k, 1, generator=gen) - 0.5) * math.pi
    idx = torch.randint(0, batch, (k, 1), generator=gen).float()
    return torch.cat([idx, xy, wh, angle], 1)


@benchmark("roi_align_rotated")
def _benchmark(bench) -> None:
    """Forward and forward + backward at each level (200x200, 100x100, 50x50 maps, 256 channels, 7x7), 512 and 2000
    RoIs, sampling_ratio 0 and 2, float32; and float16 at 2000 RoIs (the same float16 map and float16 RoIs for both:
    mmcv's kernels take the RoIs in the map's dtype and compute in it; ours compute in float32). Against mmcv's
    compiled kernels, same values first."""
    mmcv = _mmcv_roi_align_rotated()

    def rows(stride, side, k, sr, dtype, feats, rois, grad) -> None:
        scale = 1.0 / stride
        what = f"stride {stride} ({side}x{side}), {k} rois x 256 ch, 7x7, sampling_ratio={sr}"
        if dtype == torch.float16:
            what += ", float16"
        x = feats.detach().requires_grad_()

        def fwd_bwd(fn):
            return lambda: torch.autograd.grad(fn(x, rois, 7, scale, sr, True, False), x, grad)

        if mmcv is not None:
            got = roi_align_rotated(feats, rois, 7, scale, sr, True, False).float()
            # mmcv's float16 kernel computes the sample positions in float16 (0.5 px steps at x ~ 800): its float16
            # rows are timed, and ours are checked against our float32 run instead.
            if dtype == torch.float16:
                want = roi_align_rotated(feats.float(), rois.float(), 7, scale, sr, True, False)
            else:
                want = mmcv(feats, rois, 7, scale, sr, True, False).float()
            tol = 2e-2 if dtype == torch.float16 else 1e-4
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
        fwd = {"op": "roi_align_rotated forward", "case": what}
        fwd["ours"] = bench.cuda_time_ms(lambda: roi_align_rotated(feats, rois, 7, scale, sr, True, False))
        # Compulsory traffic of the forward: read the feature map once, write the output.
        size = feats.element_size()
        bench.forward_traffic(fwd, fwd["ours"]["median_ms"], feats.numel() * size + k * 256 * 49 * size)
        both = {"op": "roi_align_rotated fwd+bwd", "case": what}
        both["ours"] = bench.cuda_time_ms(fwd_bwd(roi_align_rotated))
        if mmcv is not None:
            fwd["peer"] = bench.cuda_time_ms(lambda: mmcv(feats, rois, 7, scale, sr, True, False))
            both["peer"] = bench.cuda_time_ms(fwd_bwd(mmcv))
            fwd["peer_name"] = both["peer_name"] = _PEER_NAME
        bench.results += [fwd, both]

    for stride, side in _LEVELS:
        feats = torch.randn(2, 256, side, side, generator=bench.gen).cuda()
        for k in (512, 2000):
            rois = rotated_rois(k, 2, side, stride, bench.gen).cuda()
            grad = torch.randn(k, 256, 7, 7, generator=bench.gen).cuda()
            for sr in (0, 2):
                rows(stride, side, k, sr, torch.float32, feats, rois, grad)
        for sr in (0, 2):
            rows(stride, side, 2000, sr, torch.float16, feats.half(), rois.half(), grad.half())


@benchmark("roi_align_rotated", tags=("cpu",))
def _cpu(gen, tv):
    """An oriented detector's RoI head at stride 8 on the CPU (2x256x100x100, 512 RoIs, 7x7), sampling_ratio 2 and 0,
    forward and fwd+bwd. The peer is mmcv's CPU kernels (mmcv_rotated_ext), not torchvision (which has no rotated
    RoIAlign); the report's torchvision column holds mmcv's times for these rows. No peer where mmcv_rotated_ext is
    absent."""
    from ._helpers import ones_backward

    mmcv = _mmcv_roi_align_rotated()
    x = torch.randn(2, 256, 100, 100, generator=gen)
    rois = rotated_rois(512, 2, 100, 8, gen)
    for sr in (2, 0):
        ours = lambda t, s=sr: roi_align_rotated(t, rois, 7, 1 / 8, s, True, False)  # noqa: E731
        peer = (lambda t, s=sr: mmcv(t, rois, 7, 1 / 8, s, True, False)) if mmcv is not None else None
        yield Case(
            f"forward, 2x256x100x100, K=512, 7x7, sr {sr} (peer: mmcv's CPU kernel)",
            lambda o=ours: o(x),
            peer and (lambda p=peer: p(x)),
        )
        yield Case(
            f"fwd+bwd, the same, sr {sr}",
            lambda o=ours: ones_backward(o, x),
            peer and (lambda p=peer: ones_backward(p, x)),
        )
