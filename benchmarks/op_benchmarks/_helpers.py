"""What the op modules' benchmarks share (see `benchmark` in benchmarks/op_benchmarks/__init__.py): detector-shaped
inputs and the row builders and training-call closures that several families use. Only the benchmark functions
import this module, and only when a report calls them; the timing itself (CUDA events, warm-up, median, copy
bandwidth, rounds) is the reports' (benchmarks/bench.py and the scripts beside it)."""

from __future__ import annotations

from collections.abc import Callable

import torch

# FPN levels of a 2-image batch at 800x1333: (stride, height, width) for strides 4..32.
FPN_LEVELS = ((4, 200, 336), (8, 100, 168), (16, 50, 84), (32, 25, 42))


def detection_boxes(n: int, gen: torch.Generator, image=(800, 1333)) -> tuple[torch.Tensor, torch.Tensor]:
    """Clustered boxes like a detector's proposals (many overlap their neighbours) and scores, on the GPU. The
    scores are distinct (a shuffled k / n): with tied scores the suppression order, so the keep list, is not
    defined, and the peers' comparison would fail on a tie (run 22: 20,000 uniform float32 scores hold about a
    dozen tied pairs, and the batched NMS differed from torchvision's in both builds)."""
    centres = torch.rand(max(n // 20, 1), 2, generator=gen) * torch.tensor([image[1], image[0]])
    which = torch.randint(0, len(centres), (n,), generator=gen)
    xy = centres[which] + torch.randn(n, 2, generator=gen) * 12
    wh = torch.rand(n, 2, generator=gen) * 150 + 16
    boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
    return boxes.cuda(), ((torch.randperm(n, generator=gen) + 0.5) / n).cuda()


def rotated_detection_boxes(
    n: int, gen: torch.Generator, image: int = 1024, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clustered rotated boxes (x, y, w, h, angle in radians) like an oriented detector's proposals on a 1024 px
    DOTA crop (many overlap their neighbours at nearby angles), and distinct scores (a shuffled k / n, as
    detection_boxes' for the same reason)."""
    centres = torch.rand(max(n // 20, 1), 2, generator=gen) * image
    angles = (torch.rand(len(centres), generator=gen) - 0.5) * torch.pi
    which = torch.randint(0, len(centres), (n,), generator=gen)
    xy = centres[which] + torch.randn(n, 2, generator=gen) * 6
    wh = torch.rand(n, 2, generator=gen) * 100 + 10
    angle = angles[which] + torch.randn(n, generator=gen) * 0.1
    boxes = torch.cat([xy, wh, angle[:, None]], 1)
    return boxes.to(device), ((torch.randperm(n, generator=gen) + 0.5) / n).to(device)


def mmcv_rotated_ext():
    """mmcv's compiled kernels as the importable module `mmcv_rotated_ext` (`python -m ci.mmcv_peer` builds it from
    mmcv 2.2.0's sdist: mmcv's `ext_module` functions with mmcv's names and argument order), or None where it is
    not built: those rows then have no peer."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("mmcv_rotated_ext") is None:
        return None
    return importlib.import_module("mmcv_rotated_ext")


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


def fresh_leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Fresh leaves for one call: no .grad to accumulate into (zero_grad(set_to_none=True))."""
    return [t.detach().requires_grad_() for t in tensors]


def fresh_fwd_bwd(fn, tensors: tuple[torch.Tensor, ...], grad: torch.Tensor | None = None) -> Callable[[], None]:
    """One training call: fn on fresh leaves of `tensors`, then backward (grad None: a scalar loss)."""

    def run():
        fn(*fresh_leaves(*tensors)).backward(grad)

    return run


def ones_backward(fn, x: torch.Tensor, *args):
    """fn(fresh leaf of x, *args) (its first output where it returns several), backward of ones; the leaf's grad."""
    leaf = x.detach().requires_grad_()  # a fresh leaf: its .grad is written, not accumulated into
    out = fn(leaf, *args)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.ones_like(out))
    return leaf.grad


def level_rois(k: int, batch: int, height: int, width: int, stride: int, gen: torch.Generator) -> torch.Tensor:
    """k RoIs on the GPU in image coordinates of a level of `stride`: sides of 1 to 28 feature pixels (the sizes
    the FPN assignment sends to a level), corners anywhere the box fits."""
    wh = (torch.rand(k, 2, generator=gen) * 27 + 1) * stride
    room = torch.tensor([width * stride, height * stride]) - wh
    xy = torch.rand(k, 2, generator=gen) * room.clamp(min=0)
    idx = torch.randint(0, batch, (k, 1), generator=gen).float()
    return torch.cat([idx, xy, xy + wh], 1).cuda()


# Issue 24's RoI head levels, batch 2: (channels, height, width, stride, RoIs).
ROI_HEAD_LEVELS = ((256, 200, 304, 4, 1000), (256, 50, 76, 16, 512))


def roi_head_inputs(gen: torch.Generator):
    """Per level of ROI_HEAD_LEVELS, drawn from gen in this order: (its label, the features, the RoIs, a gradient
    of a 7x7 output, the spatial scale), on the GPU."""
    for c, h, w, stride, k in ROI_HEAD_LEVELS:
        feats = torch.randn(2, c, h, w, generator=gen).cuda()
        rois = level_rois(k, 2, h, w, stride, gen)
        grad = torch.randn(k, c, 7, 7, generator=gen).cuda()
        yield f"{c}x{h}x{w}, K={k}, 7x7", feats, rois, grad, 1.0 / stride


def image_rois(gen: torch.Generator, k: int, batch: int, height: float, width: float, scale: float) -> torch.Tensor:
    """k RoIs in image coordinates (feature map size / scale), random corners, at least 2 pixels wide (CPU)."""
    x1 = torch.rand(k, generator=gen) * (width / scale) * 0.8
    y1 = torch.rand(k, generator=gen) * (height / scale) * 0.8
    w = 2 + torch.rand(k, generator=gen) * (width / scale) * 0.3
    h = 2 + torch.rand(k, generator=gen) * (height / scale) * 0.3
    b = torch.randint(0, batch, (k,), generator=gen).float()
    return torch.stack([b, x1, y1, x1 + w, y1 + h], 1)


def tiny_roi_fwd_bwd(dev: str, name: str, ours: Callable, peer: Callable):
    """A host-cost Case: fwd+bwd of ours(x, rois) and of peer(x, rois), fresh leaves, on a 1x4x16x16 map x (a
    generator seeded 0) and 4 RoIs, on `dev` (the kernels do next to nothing)."""
    from . import Case

    x = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(0)).to(dev)
    rois = torch.tensor([[0, 1.0, 1, 9, 9], [0, 2, 3, 12, 14], [0, 0, 0, 15, 15], [0, 4, 4, 8, 10]]).to(dev)
    return Case(name, *(fresh_fwd_bwd(lambda t, f=f: f(t, rois).sum(), (x,)) for f in (ours, peer)))
