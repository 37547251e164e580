"""Per-call host overhead of roi_pool on the CPU: forward without grad, forward + backward, on an input small enough
that the kernels cost little, so that what is timed is the dispatch, checks, allocation and autograd bookkeeping.

  python benchmarks/autograd_overhead.py [--repeats N]    prints one JSON line

Run it once per build to compare (docs/stable-abi.md, "Measured"): the classic build with C++ autograd (before the
port), and the classic and stable builds with autograd registered from Python (torch.library.register_autograd)."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import visdet_ops


def median_us(fn, repeats: int, inner: int = 50) -> float:
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 16, 16, generator=gen)
    rois = torch.tensor([[0, 1.0, 1, 9, 9], [0, 3, 2, 14, 12], [0, 0, 0, 15, 15], [0, 5, 5, 8, 11]])
    xg = x.clone().requires_grad_()

    def forward_no_grad():
        with torch.no_grad():
            visdet_ops.roi_pool(x, rois, 7, 1.0)

    def forward_backward():
        out = visdet_ops.roi_pool(xg, rois, 7, 1.0)
        out.backward(torch.ones_like(out))
        xg.grad = None

    # A detector's RoI head: where the host overhead above is a share of real work.
    feat = torch.randn(2, 64, 50, 68, generator=gen).requires_grad_()
    k = 128
    xy = torch.rand(k, 2, generator=gen) * torch.tensor([200.0, 150.0])
    wh = torch.rand(k, 2, generator=gen) * 100 + 4
    head_rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1)

    def detector_head():
        out = visdet_ops.roi_pool(feat, head_rois, 7, 0.25)
        out.backward(torch.ones_like(out))
        feat.grad = None

    result = {
        "variant": visdet_ops.BUILD_INFO["VARIANT"],
        "torch": torch.__version__,
        "forward_no_grad_us": round(median_us(forward_no_grad, args.repeats), 2),
        "forward_backward_us": round(median_us(forward_backward, args.repeats), 2),
        "head_forward_backward_us": round(median_us(detector_head, max(args.repeats // 10, 10), inner=5), 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
