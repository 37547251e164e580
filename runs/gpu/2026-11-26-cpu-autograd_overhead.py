"""Per-call host overhead of roi_pool on the CPU: forward without grad, forward + backward, on an input small enough
that the kernels cost little, so that what is timed is the dispatch, checks, allocation and autograd bookkeeping.

  python runs/gpu/2026-11-26-cpu-autograd_overhead.py [--repeats N]    prints one JSON line
  python runs/gpu/2026-11-26-cpu-autograd_overhead.py --eager-vs-registered    the public functions' eager
      autograd entry point
      (ops/_registration.register_autograd) against the same op called through its registered formula
      (torch.ops.visdet_ops.<op>: torch.library.register_autograd's wrapper), interleaved in one process

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


def eager_vs_registered(repeats: int) -> dict:
    """Small forward + backward per op family, the eager entry point and the registered formula interleaved (the
    machine's drift hits both): median µs per call of each, and what the entry point saves."""
    gen = torch.Generator().manual_seed(0)
    ops = torch.ops.visdet_ops

    def grad(*shape):
        return torch.randn(*shape, generator=gen).requires_grad_()

    x, rois = grad(1, 4, 16, 16), torch.tensor([[0, 1.0, 1, 9, 9]] * 4)
    xd, off, mask, w, b = grad(1, 4, 6, 6), grad(1, 18, 6, 6), grad(1, 9, 6, 6), grad(4, 4, 3, 3), grad(4)
    logits, target = grad(64, 8), torch.randint(0, 9, (64,), generator=gen)
    cases = {
        "roi_pool": (
            lambda: visdet_ops.roi_pool(x, rois, 7).sum().backward(),
            lambda: ops.roi_pool(x, rois, 7, 7, 1.0)[0].sum().backward(),
        ),
        "roi_align": (
            lambda: visdet_ops.roi_align(x, rois, 7, 1.0, 2).sum().backward(),
            lambda: ops.roi_align(x, rois, 7, 7, 1.0, 2, "avg", True)[0].sum().backward(),
        ),
        "modulated_deform_conv2d": (
            lambda: visdet_ops.modulated_deform_conv2d(xd, off, mask, w, b, 1, 1, 1, 1, 1).sum().backward(),
            lambda: ops.deform_conv2d(xd, off, mask, w, b, 1, 1, 1, 1, 1, 1, 1, 1, 0).sum().backward(),
        ),
        "sigmoid_focal_loss": (
            lambda: visdet_ops.sigmoid_focal_loss(logits, target).backward(),
            lambda: ops.sigmoid_focal_loss(logits, target, 2.0, 0.25, None, "mean").backward(),
        ),
    }
    result = {}
    for name, (eager, registered) in cases.items():
        for _ in range(20):
            eager(), registered()
        e, r = [], []
        for _ in range(repeats):
            e.append(median_us(eager, 1, inner=50))
            r.append(median_us(registered, 1, inner=50))
        e_us, r_us = statistics.median(e), statistics.median(r)
        result[name] = {"eager_us": round(e_us, 1), "registered_us": round(r_us, 1), "saved_us": round(r_us - e_us, 1)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--eager-vs-registered", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.eager_vs_registered:
        info = {"variant": visdet_ops.BUILD_INFO["VARIANT"], "torch": torch.__version__}
        print(json.dumps({**info, **eager_vs_registered(max(args.repeats // 10, 5))}))
        return
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
