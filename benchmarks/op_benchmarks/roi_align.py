"""Benchmarks of visdet_ops.ops.roi_align against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.roi_align import roi_align

from . import Case, benchmark


@benchmark("roi_align")
def _benchmark(bench) -> None:
    """Forward + backward at the FPN levels of a 2-image batch at 800x1333 (1000 RoIs, 256 channels, 7x7),
    adaptive and fixed sampling, against torchvision (same values first)."""
    from ._helpers import FPN_LEVELS, fpn_rois

    tv, k = bench.tv, 1000

    def case(stride, h, w, feats, rois, grad, mode_name, sr) -> None:
        scale = 1.0 / stride
        x = feats.clone().requires_grad_()

        def ours():
            out = roi_align(x, rois, 7, scale, sr, "avg", True)
            out.backward(grad)

        row = {"op": "roi_align fwd+bwd", "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, {mode_name}"}
        row["ours"] = bench.cuda_time_ms(ours)
        x.grad = None
        fwd = bench.cuda_time_ms(lambda: roi_align(feats, rois, 7, scale, sr, "avg", True))
        # Compulsory traffic of the forward: read the feature map once, write the output.
        bench.forward_traffic(row, fwd["median_ms"], feats.numel() * 4 + k * 256 * 49 * 4)
        if tv is not None:
            xt = feats.clone().requires_grad_()
            got = roi_align(feats, rois, 7, scale, sr, "avg", True)
            want = tv.roi_align(feats, rois, 7, scale, sr, True)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

            def peer():
                out = tv.roi_align(xt, rois, 7, scale, sr, True)
                out.backward(grad)

            row["peer"] = bench.cuda_time_ms(peer)
            row["peer_name"] = "torchvision.ops.roi_align"
        bench.results.append(row)

    for stride, h, w in FPN_LEVELS:
        feats = torch.randn(2, 256, h, w, generator=bench.gen).cuda()
        rois = fpn_rois(k, stride, h, w, bench.gen)
        grad = torch.randn(k, 256, 7, 7, generator=bench.gen).cuda()
        for mode_name, sr in (("sampling_ratio=0", 0), ("sampling_ratio=2", 2)):
            case(stride, h, w, feats, rois, grad, mode_name, sr)


@benchmark("roi_align")
def _benchmark_overhead(bench) -> None:
    from ._helpers import per_call_overhead

    per_call_overhead(
        bench,
        "roi_align",
        lambda t, rois: roi_align(t, rois, 1, 1.0, 1),
        lambda tv, t, rois: tv.roi_align(t, rois, 1, 1.0, 1, True),
    )


@benchmark("roi_align")
def _benchmark_amp(bench) -> None:
    """The AMP path: inside torch.autocast("cuda", float16), with what an AMP step hands the op (a 16-bit feature
    map from a conv, float32 RoIs). Ours keeps the 16-bit map (the kernels read it; RoIs stay float32);
    torchvision's autocast kernel casts every argument to float32 and the output back."""
    from ._helpers import FPN_LEVELS, fpn_rois

    amp, tv, k = torch.float16, bench.tv, 1000

    def case(stride, h, w) -> None:
        feats = torch.randn(2, 256, h, w, generator=bench.gen).cuda().to(amp)
        rois = fpn_rois(k, stride, h, w, bench.gen)
        grad = torch.randn(k, 256, 7, 7, generator=bench.gen).cuda().to(amp)
        x, scale = feats.clone().requires_grad_(), 1.0 / stride

        def ours():
            x.grad = None
            with torch.autocast("cuda", dtype=amp):
                out = roi_align(x, rois, 7, scale, 2, "avg", True)
            out.backward(grad.to(out.dtype))

        row = {
            "op": "roi_align fwd+bwd, AMP",
            "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, f16 autocast",
        }
        row["ours"] = bench.cuda_time_ms(ours)
        if tv is not None:
            xt = feats.clone().requires_grad_()
            with torch.autocast("cuda", dtype=amp):
                got = roi_align(feats, rois, 7, scale, 2, "avg", True)
                want = tv.roi_align(feats, rois, 7, scale, 2, True)
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)

            def peer():
                xt.grad = None
                with torch.autocast("cuda", dtype=amp):
                    out = tv.roi_align(xt, rois, 7, scale, 2, True)
                out.backward(grad.to(out.dtype))

            row["peer"] = bench.cuda_time_ms(peer)
            row["peer_name"] = "torchvision.ops.roi_align under autocast"
        bench.results.append(row)

    for stride, h, w in FPN_LEVELS[:2]:
        case(stride, h, w)


@benchmark("roi_align", tags=("gpu_targets",))
def _gpu_targets(gen, tv):
    """Issue 24's rows: fwd+bwd (float32 and under float16 autocast) and forward, sr 2, at each RoI head level;
    peer torchvision's roi_align."""
    from ._helpers import fresh_leaves, roi_head_inputs

    for shape, feats, rois, grad, scale in roi_head_inputs(gen):
        for amp in (False, True):
            x0 = feats.half() if amp else feats
            g0 = grad.half() if amp else grad

            def step(fn, x0=x0, g0=g0, amp=amp):
                def run():
                    (x,) = fresh_leaves(x0)
                    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                        out = fn(x)
                    out.backward(g0.to(out.dtype))

                return run

            tag = ", AMP f16" if amp else ""
            yield Case(
                f"roi_align fwd+bwd {shape}, sr 2{tag}",
                step(lambda x, s=scale, r=rois: roi_align(x, r, 7, s, 2, "avg", True)),
                step(lambda x, s=scale, r=rois: tv.roi_align(x, r, 7, s, 2, True)),
            )
        yield Case(
            f"roi_align forward {shape}, sr 2",
            lambda s=scale, f=feats, r=rois: roi_align(f, r, 7, s, 2, "avg", True),
            lambda s=scale, f=feats, r=rois: tv.roi_align(f, r, 7, s, 2, True),
        )


@benchmark("roi_align", tags=("cpu",))
def _cpu(gen, tv):
    """A detector's RoI head at stride 8 on the CPU, avg and max mode (torchvision has avg only)."""
    from ._helpers import image_rois, ones_backward

    x = torch.randn(2, 256, 100, 152, generator=gen)
    rois = image_rois(gen, 512, 2, 100, 152, 1 / 8)
    for mode in ("avg", "max"):
        ours = lambda t, m=mode: roi_align(t, rois, 7, 1 / 8, 2, m, True)  # noqa: E731
        peer = (lambda t: tv.roi_align(t, rois, 7, 1 / 8, 2, True)) if mode == "avg" else None
        yield Case(f"forward {mode}, 2x256x100x152, K=512, 7x7, sr 2", lambda o=ours: o(x), peer and (lambda: peer(x)))
        yield Case(
            f"fwd+bwd {mode}, the same",
            lambda o=ours: ones_backward(o, x),
            peer and (lambda: ones_backward(peer, x)),
        )


@benchmark("roi_align", tags=("host_time",))
def _host_time(dev, tv):
    """fwd+bwd of 4 RoIs on a 1x4x16x16 map."""
    from ._helpers import tiny_roi_fwd_bwd

    yield tiny_roi_fwd_bwd(
        dev,
        "roi_align fwd+bwd",
        lambda t, r: roi_align(t, r, 7, 1.0, 2, "avg", True),
        lambda t, r: tv.roi_align(t, r, 7, 1.0, 2, True),
    )


_TINY_MAP = "x = torch.randn(1, 4, 16, 16, generator=g)\nrois = torch.tensor([[0, 1.0, 1, 9, 9]] * 4)"


@benchmark("roi_align", tags=("host_instructions",))
def _host_instructions():
    """The bare registered op and the public call's fwd+bwd: 4 RoIs on a 1x4x16x16 map."""
    yield Case("roi_align op", "ops.roi_align(x, rois, 7, 7, 1.0, 2, 'avg', True)", setup=_TINY_MAP)
    yield Case(
        "roi_align fwd+bwd",
        "fwd_bwd(lambda t: visdet_ops.roi_align(t, rois, 7, 1.0, 2, 'avg', True), x)",
        setup=_TINY_MAP,
    )


@benchmark("roi_align", tags=("compare_builds",))
def _compare_builds_selftest(gen):
    """benchmarks/compare_builds.py's CPU selftest row: a tiny call against the pure-PyTorch reference (the peer:
    the same code in both builds, the row's control)."""
    from visdet_ops.reference.roi_align import roi_align_reference

    x = torch.randn(1, 4, 16, 16, generator=gen)
    rois = torch.tensor([[0, 1.0, 1.0, 9.0, 9.0], [0, 0.0, 2.0, 12.0, 7.0]])
    args = ((3, 3), 0.5, 2, "avg", True)
    yield Case(
        "selftest 1x4x16x16, 2 RoIs",
        lambda: roi_align(x, rois, *args),
        lambda: roi_align_reference(x, rois, *args),
        peer_name="reference",
    )
