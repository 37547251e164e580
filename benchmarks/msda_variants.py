"""Multi-scale deformable attention on CUDA: forward and forward+backward of
ours (level tables on the GPU: the forward validates them with one D2H copy;
and on the CPU: no sync) against mmcv's grid_sample implementation, for the
Deformable DETR encoder and decoders (bs 4, 800x1200, 8 heads x 32, 4 levels x
4 points). CUDA events, warm-up, median. Usage: python benchmarks/msda_variants.py"""

from __future__ import annotations

import statistics

import torch

import visdet_ops  # noqa: F401
from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference


def time_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    gen = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[100, 150], [50, 75], [25, 38], [13, 19]])
    sizes = shapes.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    keys = int(sizes.sum())
    bs, heads, dim, levels, points = 4, 8, 32, 4, 4
    op = torch.ops.visdet_ops.multi_scale_deformable_attn
    print(torch.cuda.get_device_name(), torch.__version__)
    print(
        f"{'case':<16}{'variant':<22}{'fwd ms':>9}{'fwd+bwd ms':>12}{'bwd ms':>9}{'x peer fwd':>12}{'x peer f+b':>12}"
    )
    for name, queries in (("encoder", keys), ("decoder 300", 300), ("decoder 900", 900)):
        value = torch.randn(bs, keys, heads, dim, generator=gen).cuda().requires_grad_()
        loc = torch.rand(bs, queries, heads, levels, points, 2, generator=gen).cuda().requires_grad_()
        attn = torch.rand(bs, queries, heads, levels, points, generator=gen).cuda().softmax(-1).requires_grad_()
        grad = torch.randn(bs, queries, heads * dim, generator=gen).cuda()
        sc, stc = shapes.cuda(), start.cuda()
        want = multi_scale_deformable_attn_reference(value, sc, loc, attn)
        wg = torch.autograd.grad(want, (value, loc, attn), grad)
        for tables in ((sc, stc), (shapes, start)):
            got = op(value, *tables, loc, attn, 64)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            gg = torch.autograd.grad(got, (value, loc, attn), grad)
            for g, w in zip(gg, wg, strict=True):
                torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3)

        def variants():
            yield "peer (grid_sample)", lambda: multi_scale_deformable_attn_reference(value, sc, loc, attn)
            yield "ours, GPU tables", lambda: op(value, sc, stc, loc, attn, 64)
            yield "ours, CPU tables", lambda: op(value, shapes, start, loc, attn, 64)

        peer = None
        for vname, f in variants():
            with torch.no_grad():
                fwd = time_ms(f)
            fb = time_ms(lambda f=f: torch.autograd.grad(f(), (value, loc, attn), grad))
            if peer is None:
                peer = (fwd, fb)
            print(
                f"{name:<16}{vname:<22}{fwd:9.3f}{fb:12.3f}{fb - fwd:9.3f}{peer[0] / fwd:11.2f}x{peer[1] / fb:11.2f}x"
            )
        # backward kernel alone (the op, GPU tables)
        out = op(value, sc, stc, loc, attn, 64)
        bwd_op = torch.ops.visdet_ops._multi_scale_deformable_attn_backward
        t = time_ms(lambda: bwd_op(grad, value.detach(), sc, stc, loc.detach(), attn.detach(), 64))
        print(f"{name:<16}{'backward op alone':<22}{t:9.3f}")
        del out


if __name__ == "__main__":
    main()
