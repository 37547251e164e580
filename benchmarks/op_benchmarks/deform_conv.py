"""Benchmarks of visdet_ops.ops.deform_conv against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.deform_conv import modulated_deform_conv2d

from . import Case, benchmark

# The 3x3 convs where mmdet places DCN (ResNet-50 stages 2-4, dcn stage_with_dcn): (channels, H = W), batch
# DCN_BENCH_BATCH, deform_groups 1.
DCN_BENCH_SHAPES = ((128, 64), (256, 32), (512, 16))
DCN_BENCH_BATCH = 8


def dcn_bench_case(
    channels: int, size: int, gen: torch.Generator, n: int = DCN_BENCH_BATCH
) -> tuple[torch.Tensor, ...]:
    """DCNv2 inputs on the GPU, float32, batch n: x, offset, mask, weight, bias and a grad_output."""
    x = torch.randn(n, channels, size, size, generator=gen).cuda()
    weight = (torch.randn(channels, channels, 3, 3, generator=gen) / (channels * 9) ** 0.5).cuda()
    bias = torch.randn(channels, generator=gen).cuda()
    offset = (torch.randn(n, 18, size, size, generator=gen) * 2).cuda()
    mask = torch.rand(n, 9, size, size, generator=gen).cuda()
    grad = torch.randn(n, channels, size, size, generator=gen).cuda()
    return x, offset, mask, weight, bias, grad


@benchmark("deform_conv2d")
def _benchmark(bench) -> None:
    """DCNv2 forward + backward (all five gradients) at DCN_BENCH_SHAPES. Peer: torchvision's deform_conv2d with
    mask and bias, same inputs (same values first), same backward."""
    tv = bench.tv

    def case(channels: int, size: int) -> None:
        x, offset, mask, weight, bias, grad = dcn_bench_case(channels, size, bench.gen)
        leaves = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]

        def ours():
            out = modulated_deform_conv2d(*leaves, 1, 1, 1, 1, 1)
            out.backward(grad)

        row = {
            "op": "modulated_deform_conv2d fwd+bwd",
            "case": f"batch {DCN_BENCH_BATCH}, {channels} ch, {size}x{size}, 3x3, f32",
        }
        row["ours"] = bench.cuda_time_ms(ours, warmup=3, repeat=20)
        fwd = bench.cuda_time_ms(
            lambda: modulated_deform_conv2d(x, offset, mask, weight, bias, 1, 1, 1, 1, 1), warmup=3, repeat=20
        )
        row["ours_forward_ms"] = fwd["median_ms"]
        if tv is not None:
            got = modulated_deform_conv2d(x, offset, mask, weight, bias, 1, 1, 1, 1, 1)
            want = tv.deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask)
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
            tv_leaves = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]

            def peer():
                xi, oi, mi, wi, bi = tv_leaves
                out = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
                out.backward(grad)

            row["peer"] = bench.cuda_time_ms(peer, warmup=3, repeat=20)
            row["peer_name"] = "torchvision.ops.deform_conv2d (mask)"
            peer_fwd = bench.cuda_time_ms(
                lambda: tv.deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask), warmup=3, repeat=20
            )
            row["peer_forward_ms"] = peer_fwd["median_ms"]
        bench.results.append(row)

    for channels, size in DCN_BENCH_SHAPES:
        case(channels, size)


@benchmark("deform_conv2d")
def _benchmark_amp(bench) -> None:
    """The AMP path at DCN_BENCH_SHAPES: inside torch.autocast("cuda", float16), 16-bit activations (conv outputs
    under autocast) and float32 parameters, against torchvision's deform_conv2d under autocast."""
    amp, tv = torch.float16, bench.tv

    def case(channels: int, size: int) -> None:
        x, offset, mask, weight, bias, grad = dcn_bench_case(channels, size, bench.gen)
        leaves = [t.clone().requires_grad_() for t in (x.to(amp), offset.to(amp), mask.to(amp), weight, bias)]
        grad = grad.to(amp)

        def ours():
            for t in leaves:
                t.grad = None
            with torch.autocast("cuda", dtype=amp):
                out = modulated_deform_conv2d(*leaves, 1, 1, 1, 1, 1)
            out.backward(grad.to(out.dtype))

        row = {
            "op": "modulated_deform_conv2d fwd+bwd, AMP",
            "case": f"batch {DCN_BENCH_BATCH}, {channels} ch, {size}x{size}, 3x3, f16 autocast",
        }
        row["ours"] = bench.cuda_time_ms(ours, warmup=3, repeat=20)
        if tv is not None:
            xi, oi, mi, wi, bi = (t.detach() for t in leaves)
            with torch.autocast("cuda", dtype=amp):
                got = modulated_deform_conv2d(xi, oi, mi, wi, bi, 1, 1, 1, 1, 1)
                want = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
            scale = want.float().abs().max().item()
            assert (got.float() - want.float()).abs().max().item() <= 2e-2 * scale, "DCNv2 AMP differs from torchvision"
            tv_leaves = [t.detach().clone().requires_grad_() for t in leaves]

            def peer():
                for t in tv_leaves:
                    t.grad = None
                xi, oi, mi, wi, bi = tv_leaves
                with torch.autocast("cuda", dtype=amp):
                    out = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
                out.backward(grad.to(out.dtype))

            row["peer"] = bench.cuda_time_ms(peer, warmup=3, repeat=20)
            row["peer_name"] = "torchvision.ops.deform_conv2d (mask) under autocast"
        bench.results.append(row)

    for channels, size in DCN_BENCH_SHAPES:
        case(channels, size)


@benchmark("deform_conv2d", tags=("gpu_targets",), alias="dcn")
def _gpu_targets(gen, tv):
    """Issue 24's rows: DCNv2 fwd+bwd (all five gradients) at mmdet's DCN convs, batch 1, and a batch of 2 at
    100x100; peer torchvision's deform_conv2d with mask."""
    from ._helpers import fresh_fwd_bwd

    for batch, c, size in ((1, 128, 64), (1, 256, 32), (1, 512, 16), (2, 256, 100)):
        x, offset, mask, weight, bias, grad = dcn_bench_case(c, size, gen, batch)
        tensors = (x, offset, mask, weight, bias)
        yield Case(
            f"DCNv2 fwd+bwd batch {batch}, {c}ch {size}x{size}, 3x3",
            fresh_fwd_bwd(lambda x, o, m, w, b: modulated_deform_conv2d(x, o, m, w, b, 1, 1, 1, 1, 1), tensors, grad),
            fresh_fwd_bwd(lambda x, o, m, w, b: tv.deform_conv2d(x, o, w, b, 1, 1, 1, m), tensors, grad),
        )


@benchmark("deform_conv2d", tags=("cpu",))
def _cpu(gen, tv):
    """DCNv2 forward on the CPU, 2x64x32x32, 3x3."""
    x = torch.randn(2, 64, 32, 32, generator=gen)
    weight = torch.randn(64, 64, 3, 3, generator=gen) * 0.05
    offset = torch.randn(2, 18, 32, 32, generator=gen)
    mask = torch.rand(2, 9, 32, 32, generator=gen)
    yield Case(
        "DCNv2 forward, 2x64x32x32, 3x3",
        (lambda: modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1, 1, 1, 1)),
        lambda: tv.deform_conv2d(x, offset, weight, None, padding=(1, 1), mask=mask),
    )


@benchmark("deform_conv2d", tags=("host_time",))
def _host_time(dev, tv):
    """DCNv2 fwd+bwd, 4 channels, 8x8."""
    from ._helpers import fresh_fwd_bwd

    gen = torch.Generator().manual_seed(0)
    dx = torch.randn(1, 4, 8, 8, generator=gen).to(dev)
    weight = torch.randn(4, 4, 3, 3, generator=gen).to(dev)
    offset = (0.5 * torch.randn(1, 18, 8, 8, generator=gen)).to(dev)
    mask = torch.rand(1, 9, 8, 8, generator=gen).to(dev)
    ours = lambda t, w, o, m: modulated_deform_conv2d(t, o, m, w, None, 1, 1, 1, 1, 1).sum()  # noqa: E731
    peer = lambda t, w, o, m: tv.deform_conv2d(t, o, w, None, 1, 1, 1, m).sum()  # noqa: E731
    yield Case("DCNv2 fwd+bwd", *(fresh_fwd_bwd(f, (dx, weight, offset, mask)) for f in (ours, peer)))


@benchmark("deform_conv2d", tags=("host_instructions",))
def _host_instructions():
    """DCNv2 fwd+bwd, 2x4x8x8."""
    setup = (
        "dx = torch.randn(2, 4, 8, 8, generator=g)\ndw = torch.randn(4, 4, 3, 3, generator=g)\n"
        "doff = 0.5 * torch.randn(2, 18, 8, 8, generator=g)\ndmask = torch.rand(2, 9, 8, 8, generator=g)"
    )
    call = "visdet_ops.modulated_deform_conv2d(t, o, m, w, None, 1, 1, 1, 1, 1)"
    yield Case("DCNv2 fwd+bwd", f"fwd_bwd(lambda t, w, o, m: {call}, dx, dw, doff, dmask)", setup=setup)
