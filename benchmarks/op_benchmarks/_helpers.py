"""What the op modules' benchmarks share (see `benchmark` in visdet_ops/ops/__init__.py): detector-shaped inputs
on the GPU and the row builders that several families use. Only the benchmark functions import this module, and
only when benchmarks/bench.py calls them on a GPU; the timing itself (CUDA events, warm-up, median, copy
bandwidth) is bench.py's, reached through the `bench` argument."""

from __future__ import annotations

from collections.abc import Callable

import torch

# FPN levels of a 2-image batch at 800x1333: (stride, height, width) for strides 4..32.
FPN_LEVELS = ((4, 200, 336), (8, 100, 168), (16, 50, 84), (32, 25, 42))


def detection_boxes(n: int, gen: torch.Generator, image=(800, 1333)) -> tuple[torch.Tensor, torch.Tensor]:
    """Clustered boxes like a detector's proposals (many overlap their neighbours) and scores, on the GPU. The
    scores are distinct (a shuffled k / n): with tied scores the suppression order, so the keep list, is not
    defined, and the peers' comparison would fail on a tie (run 22: 20,000 uniform float32 scores hold about a
    dozen tied pairs, and batched_nms differed from torchvision's in both builds)."""
    centres = torch.rand(max(n // 20, 1), 2, generator=gen) * torch.tensor([image[1], image[0]])
    which = torch.randint(0, len(centres), (n,), generator=gen)
    xy = centres[which] + torch.randn(n, 2, generator=gen) * 12
    wh = torch.rand(n, 2, generator=gen) * 150 + 16
    boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
    return boxes.cuda(), ((torch.randperm(n, generator=gen) + 0.5) / n).cuda()


def fpn_rois(k: int, stride: int, height: int, width: int, gen: torch.Generator) -> torch.Tensor:
    """k RoIs (batch index 0 or 1, x1, y1, x2, y2) on the GPU, in the image coordinates of an FPN level of
    `stride` and size height x width: corners in the first 80% of the image, sides of 1 to 29 strides."""
    xy = torch.rand(k, 2, generator=gen) * torch.tensor([width * stride * 0.8, height * stride * 0.8])
    wh = torch.rand(k, 2, generator=gen) * (stride * 28) + stride
    return torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1).cuda()


def fwd_bwd(fn, inputs: list, grad: torch.Tensor):
    """A closure running fn forward and backward (input gradients reset)."""

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad)

    return run


def per_call_overhead(bench, op: str, ours: Callable, peer: Callable) -> None:
    """Rows '<op> forward' and '<op> fwd+bwd': the fixed per-call cost against torchvision. 1000 RoIs, 1 channel,
    a 1x1 output, so kernel time is negligible and what remains is launch, validation and autograd overhead.
    ours(x, rois) calls our op, peer(tv, x, rois) torchvision's."""
    x = torch.randn(2, 1, 8, 8, generator=bench.gen).cuda()
    xg = x.clone().requires_grad_()
    rois = torch.tensor([[0, 1, 1, 5, 5.0]] * 1000).cuda()
    tv = bench.tv

    def theirs(t, r):
        return peer(tv, t, r)

    def case(what: str, step: Callable) -> None:
        row = {"op": f"{op} {what}", "case": "per-call overhead: 1000 rois x 1 ch, 1x1 output"}
        row["ours"] = bench.cuda_time_ms(lambda: step(ours), warmup=20, repeat=200)
        if tv is not None:
            row["peer"] = bench.cuda_time_ms(lambda: step(theirs), warmup=20, repeat=200)
            row["peer_name"] = f"torchvision.ops.{op}"
        bench.results.append(row)

    case("forward", lambda f: f(x, rois))
    case("fwd+bwd", lambda f: f(xg, rois).sum().backward())
