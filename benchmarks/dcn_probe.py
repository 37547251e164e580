"""Probe for deform_conv on CUDA: timings vs torchvision (same process), backward
check against torchvision on both col2im paths, a torch.profiler kernel breakdown of
the 128-channel case (--profile), GEMM variants, and a sweep of the tuning knobs
VISDET_DCN_NHWC / VISDET_DCN_TARGET / VISDET_DCN_IM2COL_TARGET and im2col_step
(--sweep).

  python3 benchmarks/dcn_probe.py --profile --sweep
"""

import os
import statistics
import sys
from pathlib import Path

import torch
import torchvision.ops as tv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a source tree
import visdet_ops  # noqa: E402


def t_ms(fn, warmup=5, repeat=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def make(c, s, gen):
    n = 8
    x = torch.randn(n, c, s, s, generator=gen).cuda()
    w = (torch.randn(c, c, 3, 3, generator=gen) / (c * 9) ** 0.5).cuda()
    bias = torch.randn(c, generator=gen).cuda()
    off = (torch.randn(n, 18, s, s, generator=gen) * 2).cuda()
    m = torch.rand(n, 9, s, s, generator=gen).cuda()
    g = torch.randn(n, c, s, s, generator=gen).cuda()
    return x, off, m, w, bias, g


def runners(x, off, m, w, bias, g):
    lo = [t.clone().requires_grad_() for t in (x, off, m, w, bias)]
    lt = [t.clone().requires_grad_() for t in (x, off, m, w, bias)]

    def ours():
        for t in lo:
            t.grad = None
        xi, oi, mi, wi, bi = lo
        visdet_ops.modulated_deform_conv2d(xi, oi, mi, wi, bi, 1, 1, 1, 1, 1).backward(g)

    def peer():
        for t in lt:
            t.grad = None
        xi, oi, mi, wi, bi = lt
        tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi).backward(g)

    def ours_f():
        return visdet_ops.modulated_deform_conv2d(x, off, m, w, bias, 1, 1, 1, 1, 1)

    def peer_f():
        return tv.deform_conv2d(x, off, w, bias, padding=(1, 1), mask=m)

    return ours, peer, ours_f, peer_f


def main():
    gen = torch.Generator().manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__, "allow_tf32 mm:", torch.backends.cuda.matmul.allow_tf32)
    cases = [(128, 64), (256, 32), (512, 16)]
    data = {cs: make(*cs, gen) for cs in cases}
    for cs in cases:
        x, off, m, w, bias, g = data[cs]
        ours, peer, ours_f, peer_f = runners(*data[cs])
        torch.testing.assert_close(ours_f(), peer_f(), rtol=1e-3, atol=1e-3)
        a, b, c, d = t_ms(ours), t_ms(peer), t_ms(ours_f), t_ms(peer_f)
        print(f"{cs}: fwd+bwd ours {a:.3f} tv {b:.3f} = {b / a:.2f}x | fwd ours {c:.3f} tv {d:.3f} = {d / c:.2f}x")
    sys.stdout.flush()
    # Backward check against torchvision, both col2im paths.
    for nhwc in ("1", "0"):
        os.environ["VISDET_DCN_NHWC"] = nhwc
        for cs in cases:
            x, off, m, w, bias, g = data[cs]
            lo = [t.clone().requires_grad_() for t in (x, off, m, w, bias)]
            lt = [t.clone().requires_grad_() for t in (x, off, m, w, bias)]
            visdet_ops.modulated_deform_conv2d(*lo, 1, 1, 1, 1, 1).backward(g)
            tv.deform_conv2d(lt[0], lt[1], lt[3], lt[4], padding=(1, 1), mask=lt[2]).backward(g)
            errs = []
            for name, a, b in zip("x offset mask weight bias".split(), lo, lt, strict=True):
                err = ((a.grad - b.grad).abs().max() / b.grad.abs().max()).item()
                errs.append(f"{name} {err:.1e}")
                assert err < 1e-4, (nhwc, cs, name, err)
            print("grad check nhwc", nhwc, cs, " ".join(errs))
    del os.environ["VISDET_DCN_NHWC"]
    sys.stdout.flush()
    if "--profile" in sys.argv:
        from torch.profiler import ProfilerActivity, profile

        for cs in cases[:1]:
            ours, peer, _, _ = runners(*data[cs])
            for name, fn in (("ours", ours), ("tv", peer)):
                fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        fn()
                    torch.cuda.synchronize()
                print(f"== {name} {cs} (5 iterations, times are totals)")
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=90))
        # GEMM variants for the 128 case.
        c, s = 128, 64
        n, p, rows = 8, s * s, c * 9
        W = torch.randn(c, rows, device="cuda")
        cols = torch.randn(rows, n * p, device="cuda")
        cols3 = torch.randn(n, rows, p, device="cuda")
        go = torch.randn(n, c, p, device="cuda")
        got = torch.randn(c, n * p, device="cuda")
        out = torch.empty(n, c, p, device="cuda")
        print("gemm fwd mm [128x1152]@[1152x32768]", t_ms(lambda: torch.mm(W, cols)))
        print("gemm fwd bmm expandW -> NCHW", t_ms(lambda: torch.bmm(W.expand(n, c, rows), cols3, out=out)))
        cs3 = cols.view(rows, n, p).transpose(0, 1)
        print("gemm fwd bmm expandW strided cols -> NCHW", t_ms(lambda: torch.bmm(W.expand(n, c, rows), cs3, out=out)))
        print("gemm gradcol bmm -> strided cols", t_ms(lambda: torch.bmm(W.t().expand(n, rows, c), go, out=cs3)))
        print("gemm gradcol mm W^T@go_t", t_ms(lambda: torch.mm(W.t(), got)))
        print("gemm gradcol bmm W^T@go (NCHW)", t_ms(lambda: torch.bmm(W.t().expand(n, rows, c), go)))
        print("gemm gradW mm go_t@cols^T", t_ms(lambda: torch.mm(got, cols.t())))
        print("gemm gradW bmm+sum", t_ms(lambda: torch.bmm(go, cols3.transpose(1, 2)).sum(0)))
        print("transpose copy 128ch", t_ms(lambda: out.copy_(got.view(c, n, p).transpose(0, 1))))
    if "--sweep" in sys.argv:
        for env, values in (
            ("VISDET_DCN_NHWC", ("0", "1")),
            ("VISDET_DCN_TARGET", ("18", "19", "20", "21", "22")),
            ("VISDET_DCN_IM2COL_TARGET", ("18", "19", "20", "21", "22")),
        ):
            for v in values:
                os.environ[env] = v
                line = []
                for cs in cases:
                    ours, _, ours_f, _ = runners(*data[cs])
                    line.append(f"{cs} fb {t_ms(ours):.3f} f {t_ms(ours_f):.3f}")
                print(env, v, " | ".join(line))
                sys.stdout.flush()
            del os.environ[env]
        op = torch.ops.visdet_ops.deform_conv2d
        for step in (1, 2, 4, 8):
            line = []
            for cs in cases:
                x, off, m, w, bias, g = data[cs]
                lo = [t.clone().requires_grad_() for t in (x, off, m, w, bias)]

                def fb(lo=lo, g=g, step=step):
                    for t in lo:
                        t.grad = None
                    op(*lo, 1, 1, 1, 1, 1, 1, 1, 1, step).backward(g)

                def f(x=x, off=off, m=m, w=w, bias=bias, step=step):
                    return op(x, off, m, w, bias, 1, 1, 1, 1, 1, 1, 1, 1, step)

                line.append(f"{cs} fb {t_ms(fb):.3f} f {t_ms(f):.3f}")
            print("im2col_step", step, " | ".join(line))
            sys.stdout.flush()


main()
