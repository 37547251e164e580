"""Per-kernel GPU time of one forward + backward, from torch.profiler: where
the time of the ops whose goals are tight goes (DCNv2 against torchvision's
deform_conv2d, carafe against carafe_naive), at the shapes of their benchmarks (DCN_BENCH_SHAPES in
benchmarks/op_benchmarks/deform_conv.py; carafe's FPN levels).

  PYTHONPATH=. python3 benchmarks/profile_kernels.py [--steps 10] [--timeline]
  ncu --kernel-name regex:col2im --launch-skip 1 --launch-count 1 \\
      python3 benchmarks/profile_kernels.py --ncu-target CHANNELS SIZE

Prints one table per case: kernel name (shortened), calls per step, GPU
microseconds per step. --timeline instead prints, for DCNv2, where a step's
wall time goes besides kernels: the host lead before the first kernel, the idle
gaps between kernels and the CPU ops running during the largest ones. A
diagnosis tool (profiling slows the host side); bench.py's CUDA-event medians
are the figures of record."""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from op_benchmarks.deform_conv import DCN_BENCH_SHAPES, dcn_bench_case
from torch.profiler import ProfilerActivity, profile, record_function

import visdet_ops


def warm_up(fn) -> None:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()


def kernel_table(fn, steps: int) -> list[tuple[str, float, float]]:
    warm_up(fn)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            key = e.name[:90]
            totals[key][0] += 1
            totals[key][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    rows = [(name, calls / steps, us / steps) for name, (calls, us) in totals.items()]
    return sorted(rows, key=lambda r: -r[2])


def show(title: str, fn, steps: int) -> None:
    rows = kernel_table(fn, steps)
    total = sum(r[2] for r in rows)
    print(f"\n## {title}: {total:.1f} us GPU per step\n")
    print("| kernel | calls | us |")
    print("|---|---|---|")
    for name, calls, us in rows:
        print(f"| `{name}` | {calls:.0f} | {us:.1f} |")


def timeline(title: str, fn, steps: int) -> None:
    """Per step: host lead (step start to first kernel), GPU busy time, idle gaps between kernels;
    then the largest gaps of the median step, each with the kernel after it and the CPU ops open
    during it."""
    warm_up(fn)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with record_function("step"):
                fn()
            torch.cuda.synchronize()
    events = list(prof.events())
    cpu_type, cuda_type = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    marks = sorted(e.time_range.start for e in events if e.name == "step" and e.device_type == cpu_type)
    gpu = sorted(  # kernels and memsets; not the GPU-side copy of the "step" annotation
        (e.time_range.start, e.time_range.end, e.name)
        for e in events
        if e.device_type == cuda_type and e.name != "step" and e.time_range.end > e.time_range.start
    )
    cpu = [e for e in events if e.device_type == cpu_type and e.name != "step"]
    per_step = []
    for i, t0 in enumerate(marks):
        t1 = marks[i + 1] if i + 1 < len(marks) else float("inf")
        ks = [k for k in gpu if t0 <= k[0] < t1]
        if not ks:
            continue
        busy = sum(k[1] - k[0] for k in ks)
        gaps = [(ks[j][0] - ks[j - 1][1], ks[j - 1][1], ks[j][0], ks[j][2]) for j in range(1, len(ks))]
        idle = sum(g[0] for g in gaps if g[0] > 0)
        per_step.append((ks[-1][1] - t0, ks[0][0] - t0, busy, idle, gaps))
    per_step.sort(key=lambda r: r[0])
    wall, lead, busy, idle, gaps = per_step[len(per_step) // 2]
    print(f"\n## {title}: step start to last kernel end {wall:.0f} us (median step)")
    print(f"host lead {lead:.0f} us, kernels {busy:.0f} us, idle gaps between kernels {idle:.0f} us\n")
    print("| gap us | next kernel | CPU ops open during the gap (innermost last) |")
    print("|---:|---|---|")
    for g, a, b, name in sorted(gaps, key=lambda r: -r[0])[:8]:
        if g <= 2:
            break
        mid = (a + b) / 2
        open_ops = sorted(
            (e for e in cpu if e.time_range.start <= mid <= e.time_range.end), key=lambda e: e.time_range.start
        )
        names = " > ".join(e.name[:40] for e in open_ops[-4:])
        print(f"| {g:.0f} | `{name[:60]}` | {names} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeline", action="store_true", help="host lead and idle gaps of DCNv2 steps")
    parser.add_argument(
        "--ncu-target",
        nargs=2,
        type=int,
        metavar=("CHANNELS", "SIZE"),
        help="run two DCNv2 forward + backward steps at that shape and nothing else, unprofiled: a target "
        "for Nsight Compute (the second step's kernels are the warm ones)",
    )
    args = parser.parse_args()
    if args.ncu_target:
        *leaves, grad = dcn_bench_case(*args.ncu_target, torch.Generator().manual_seed(0))
        x, offset, mask, weight, _ = (t.requires_grad_() for t in leaves)
        for _ in range(2):
            visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1, 1, 1, 1).backward(grad)
        torch.cuda.synchronize()
        return
    from torchvision import ops as tv

    gen = torch.Generator().manual_seed(0)
    report = timeline if args.timeline else show
    for channels, size in DCN_BENCH_SHAPES:
        *leaves, g = dcn_bench_case(channels, size, gen)
        x, off, m, w, b = (t.requires_grad_() for t in leaves)

        def ours():
            visdet_ops.modulated_deform_conv2d(x, off, m, w, b, 1, 1, 1, 1, 1).backward(g)

        def peer():
            tv.deform_conv2d(x, off, w, b, padding=(1, 1), mask=m).backward(g)

        report(f"DCNv2 ours, {channels} ch {size}x{size}", ours, args.steps)
        report(f"DCNv2 torchvision, {channels} ch {size}x{size}", peer, args.steps)
    if args.timeline:
        return
    for h, wd in ((100, 168), (50, 84), (25, 42)):
        x = torch.randn(2, 256, h, wd, generator=gen).cuda().requires_grad_()
        masks = torch.randn(2, 25, 2 * h, 2 * wd, generator=gen).softmax(1).cuda().requires_grad_()
        g = torch.randn(2, 256, 2 * h, 2 * wd, generator=gen).cuda()
        for name, fn in (("carafe", visdet_ops.carafe), ("carafe_naive", visdet_ops.carafe_naive)):
            show(f"{name} fwd+bwd, 2 x 256 x {h}x{wd}", lambda fn=fn: fn(x, masks, 5, 1, 2).backward(g), args.steps)


if __name__ == "__main__":
    main()
