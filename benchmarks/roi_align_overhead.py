"""Fixed per-call cost of roi_align (and roi_pool) against torchvision: a tiny input (1000 RoIs,
1 channel, 1x1 output) where kernel time is negligible, so what remains is launch, validation and
autograd overhead. CUDA events, 20 warm-up calls, median of 200.

  python benchmarks/roi_align_overhead.py
"""

import statistics

import torch
from torchvision.ops import roi_align as tv_roi_align
from torchvision.ops import roi_pool as tv_roi_pool

import visdet_ops


def median_us(fn, repeat: int = 200) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times) * 1000


def main() -> None:
    x = torch.randn(2, 1, 8, 8, device="cuda")
    rois = torch.tensor([[0, 1, 1, 5, 5.0]] * 1000, device="cuda")
    ours = median_us(lambda: visdet_ops.roi_align(x, rois, 1, 1.0, 1))
    peer = median_us(lambda: tv_roi_align(x, rois, 1, 1.0, 1, True))
    print(f"tiny forward: visdet-ops {ours:.1f} us, torchvision {peer:.1f} us")
    xg = x.clone().requires_grad_()
    ours = median_us(lambda: visdet_ops.roi_align(xg, rois, 1, 1.0, 1).sum().backward())
    peer = median_us(lambda: tv_roi_align(xg, rois, 1, 1.0, 1, True).sum().backward())
    print(f"tiny forward+backward: visdet-ops {ours:.1f} us, torchvision {peer:.1f} us")
    ours = median_us(lambda: visdet_ops.roi_pool(x, rois, 1, 1.0))
    peer = median_us(lambda: tv_roi_pool(x, rois, 1, 1.0))
    print(f"roi_pool tiny forward: visdet-ops {ours:.1f} us, torchvision {peer:.1f} us")
    ours = median_us(lambda: visdet_ops.roi_pool(xg, rois, 1, 1.0).sum().backward())
    peer = median_us(lambda: tv_roi_pool(xg, rois, 1, 1.0).sum().backward())
    print(f"roi_pool tiny forward+backward: visdet-ops {ours:.1f} us, torchvision {peer:.1f} us")


if __name__ == "__main__":
    main()
