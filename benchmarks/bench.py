"""Times every visdet-ops op against its peer in the same process.

Peer: torchvision where it has the op, else a pure-PyTorch implementation.
CUDA events around each call, warm-up first, the median of many runs. Memory
traffic is reported against a measured device-to-device copy.

  python benchmarks/bench.py --out DIR      (writes bench.json and bench.md)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import visdet_ops

# (families, fn) in file order; fn(gen, tv, results, copy_gbs) appends result rows; tv is
# torchvision.ops or None. families: the op modules (visdet_ops/ops/<family>.py) whose ops fn times.
BENCHES: list[tuple[tuple[str, ...], object]] = []


def bench(*families: str):
    def register(fn):
        BENCHES.append((families, fn))
        return fn

    return register


def op_families() -> list[str]:
    """What must be benchmarked: every op module of visdet_ops/ops/ (each declares an example case)."""
    from visdet_ops.ops import EXAMPLES

    return sorted(EXAMPLES)


def unbenchmarked_families() -> list[str]:
    covered = {f for families, _ in BENCHES for f in families}
    return [f for f in op_families() if f not in covered]


def cuda_time_ms(fn, warmup: int = 10, repeat: int = 50) -> dict:
    """Median (and spread) of `repeat` timed calls, each between CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p10_ms": times[len(times) // 10],
        "p90_ms": times[(len(times) * 9) // 10],
    }


def copy_bandwidth_gbs() -> float:
    """Device-to-device copy of 1 GiB, counting bytes read plus bytes written."""
    src = torch.empty(1 << 28, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = cuda_time_ms(lambda: dst.copy_(src), warmup=3, repeat=20)["median_ms"]
    return 2 * src.numel() * 4 / (t * 1e-3) / 1e9


def detection_boxes(n: int, gen: torch.Generator, image=(800, 1333)) -> tuple[torch.Tensor, torch.Tensor]:
    """Clustered boxes like a detector's proposals: many overlap their neighbours."""
    centres = torch.rand(max(n // 20, 1), 2, generator=gen) * torch.tensor([image[1], image[0]])
    which = torch.randint(0, len(centres), (n,), generator=gen)
    xy = centres[which] + torch.randn(n, 2, generator=gen) * 12
    wh = torch.rand(n, 2, generator=gen) * 150 + 16
    boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1)
    return boxes.cuda(), torch.rand(n, generator=gen).cuda()


@bench("nms")
def bench_nms(gen, tv, results: list, copy_gbs: float) -> None:
    for n in (1000, 5000, 20000):
        boxes, scores = detection_boxes(n, gen)
        ours_keep = visdet_ops.nms(boxes, scores, 0.5)[1]
        row = {"op": "nms", "case": f"{n} boxes, iou 0.5", "kept": int(ours_keep.numel())}
        row["ours"] = cuda_time_ms(lambda: torch.ops.visdet_ops.nms(boxes, scores, 0.5, 0))
        if tv is not None:
            assert torch.equal(tv.nms(boxes, scores, 0.5), ours_keep), "nms differs from torchvision"
            row["peer"] = cuda_time_ms(lambda: tv.nms(boxes, scores, 0.5))
            row["peer_name"] = "torchvision.ops.nms"
        results.append(row)


@bench("nms")
def bench_batched_nms(gen, tv, results: list, copy_gbs: float) -> None:
    # mmdet's test-time config: 80 classes, iou 0.5, default split_thr (10000).
    cfg = {"type": "nms", "iou_threshold": 0.5}
    for n in (1000, 5000, 20000):
        boxes, scores = detection_boxes(n, gen)
        idxs = torch.randint(0, 80, (n,), generator=gen).cuda()
        ours_keep = visdet_ops.batched_nms(boxes, scores, idxs, cfg)[1]
        row = {"op": "batched_nms", "case": f"{n} boxes, 80 classes, iou 0.5", "kept": int(ours_keep.numel())}
        row["ours"] = cuda_time_ms(lambda: visdet_ops.batched_nms(boxes, scores, idxs, cfg))
        if tv is not None:
            assert torch.equal(tv.batched_nms(boxes, scores, idxs, 0.5), ours_keep), (
                "batched_nms differs from torchvision"
            )
            row["peer"] = cuda_time_ms(lambda: tv.batched_nms(boxes, scores, idxs, 0.5))
            row["peer_name"] = "torchvision.ops.batched_nms"
        results.append(row)


def cpu_time_ms(fn, warmup: int = 1, repeat: int = 5) -> dict:
    """Median wall time of `repeat` calls of a CPU function."""
    import time

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[0], "p90_ms": times[-1]}


@bench("soft_nms")
def bench_soft_nms(gen, tv, results: list, copy_gbs: float) -> None:
    # Peer: our own CPU kernel (mmcv has soft_nms on the CPU only).
    for n, method in ((1000, "linear"), (5000, "linear"), (5000, "gaussian")):
        boxes, scores = detection_boxes(n, gen)
        args = (0.3, 0.5, 1e-3, method, 0)
        ours = torch.ops.visdet_ops.soft_nms(boxes, scores, *args)
        cpu_boxes, cpu_scores = boxes.cpu(), scores.cpu()
        theirs = torch.ops.visdet_ops.soft_nms(cpu_boxes, cpu_scores, *args)
        assert torch.equal(ours[0].cpu(), theirs[0]), "soft_nms CUDA and CPU pick differently"
        row = {"op": "soft_nms", "case": f"{n} boxes, {method}", "kept": int(ours[0].numel())}
        row["ours"] = cuda_time_ms(lambda: torch.ops.visdet_ops.soft_nms(boxes, scores, *args), warmup=3, repeat=20)
        row["peer"] = cpu_time_ms(lambda: torch.ops.visdet_ops.soft_nms(cpu_boxes, cpu_scores, *args))
        row["peer_name"] = f"visdet-ops CPU ({torch.get_num_threads()} threads, serial kernel)"
        results.append(row)


@bench("bbox_overlaps")
def bench_bbox_overlaps(gen, tv, results: list, copy_gbs: float) -> None:
    for m, n in ((1000, 1000), (5000, 5000), (20000, 20000), (20000, 100)):
        a, _ = detection_boxes(m, gen)
        b, _ = detection_boxes(n, gen)
        ours = visdet_ops.bbox_overlaps(a, b)
        row = {"op": "bbox_overlaps", "case": f"{m} x {n} iou, float32"}
        row["ours"] = cuda_time_ms(lambda: torch.ops.visdet_ops.bbox_overlaps(a, b, 0, False, 0))
        gbs = (ours.numel() * 4 + (m + n) * 16) / (row["ours"]["median_ms"] * 1e-3) / 1e9
        row["forward_gbs"], row["ours_forward_ms"] = gbs, row["ours"]["median_ms"]
        row["forward_fraction_of_copy"] = gbs / copy_gbs
        if tv is not None:
            torch.testing.assert_close(tv.box_iou(a, b), ours)
            row["peer"] = cuda_time_ms(lambda: tv.box_iou(a, b))
            row["peer_name"] = "torchvision.ops.box_iou"
        del ours
        results.append(row)
    a, _ = detection_boxes(5000, gen)
    b, _ = detection_boxes(5000, gen)
    ah, bh = a.half(), b.half()
    row = {"op": "bbox_overlaps", "case": "5000 x 5000 iou, float16"}
    row["ours"] = cuda_time_ms(lambda: torch.ops.visdet_ops.bbox_overlaps(ah, bh, 0, False, 0))
    if tv is not None:
        row["peer"] = cuda_time_ms(lambda: tv.box_iou(ah, bh))
        row["peer_name"] = "torchvision.ops.box_iou"
    results.append(row)


@bench("roi_align")
def bench_roi_align(gen, tv, results: list, copy_gbs: float) -> None:
    # FPN levels of a 2-image batch at 800x1333: strides 4..32, 256 channels.
    levels = [(4, 200, 336), (8, 100, 168), (16, 50, 84), (32, 25, 42)]
    for stride, h, w in levels:
        feats = torch.randn(2, 256, h, w, generator=gen).cuda()
        k = 1000
        img_h, img_w = h * stride, w * stride
        xy = torch.rand(k, 2, generator=gen) * torch.tensor([img_w * 0.8, img_h * 0.8])
        wh = torch.rand(k, 2, generator=gen) * (stride * 28) + stride
        rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1).cuda()
        scale = 1.0 / stride
        grad = torch.randn(k, 256, 7, 7, generator=gen).cuda()
        for mode_name, sr in (("sampling_ratio=0", 0), ("sampling_ratio=2", 2)):
            x = feats.clone().requires_grad_()

            def ours():
                out = visdet_ops.roi_align(x, rois, 7, scale, sr, "avg", True)
                out.backward(grad)

            row = {
                "op": "roi_align fwd+bwd",
                "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, {mode_name}",
            }
            row["ours"] = cuda_time_ms(ours)
            x.grad = None
            fwd = cuda_time_ms(lambda: visdet_ops.roi_align(feats, rois, 7, scale, sr, "avg", True))
            row["ours_forward_ms"] = fwd["median_ms"]
            # Compulsory traffic of the forward: read the feature map once, write the output.
            moved = feats.numel() * 4 + k * 256 * 49 * 4
            row["forward_gbs"] = moved / (fwd["median_ms"] * 1e-3) / 1e9
            row["forward_fraction_of_copy"] = row["forward_gbs"] / copy_gbs
            if tv is not None:
                xt = feats.clone().requires_grad_()
                got = visdet_ops.roi_align(feats, rois, 7, scale, sr, "avg", True)
                want = tv.roi_align(feats, rois, 7, scale, sr, True)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

                def peer():
                    out = tv.roi_align(xt, rois, 7, scale, sr, True)
                    out.backward(grad)

                row["peer"] = cuda_time_ms(peer)
                row["peer_name"] = "torchvision.ops.roi_align"
            results.append(row)


@bench("roi_align", "roi_pool")
def bench_roi_overhead(gen, tv, results: list, copy_gbs: float) -> None:
    # The fixed per-call cost against torchvision: 1000 RoIs, 1 channel, a 1x1 output, so kernel
    # time is negligible and what remains is launch, validation and autograd overhead.
    x = torch.randn(2, 1, 8, 8, generator=gen).cuda()
    xg = x.clone().requires_grad_()
    rois = torch.tensor([[0, 1, 1, 5, 5.0]] * 1000).cuda()
    cases = (
        (
            "roi_align",
            lambda t: visdet_ops.roi_align(t, rois, 1, 1.0, 1),
            lambda t: tv.roi_align(t, rois, 1, 1.0, 1, True),
        ),
        ("roi_pool", lambda t: visdet_ops.roi_pool(t, rois, 1, 1.0), lambda t: tv.roi_pool(t, rois, 1, 1.0)),
    )
    for op, ours, peer in cases:
        for what, inp, step in (
            ("forward", x, lambda f, t: f(t)),
            ("fwd+bwd", xg, lambda f, t: f(t).sum().backward()),
        ):
            row = {"op": f"{op} {what}", "case": "per-call overhead: 1000 rois x 1 ch, 1x1 output"}
            row["ours"] = cuda_time_ms(lambda s=step, f=ours, t=inp: s(f, t), warmup=20, repeat=200)
            if tv is not None:
                row["peer"] = cuda_time_ms(lambda s=step, f=peer, t=inp: s(f, t), warmup=20, repeat=200)
                row["peer_name"] = f"torchvision.ops.{op}"
            results.append(row)


@bench("deform_roi_pool")
def bench_deform_roi_pool(gen, tv, results: list, copy_gbs: float) -> None:
    # No peer: torchvision has no deform_roi_pool and mmcv is not installed on the
    # GPU machine. visdet_ops.roi_align (aligned=True, avg) on the same input and
    # RoIs, without offsets, is timed as a reference point only: it is a
    # different, cheaper op (no offset read, no offset gradient).
    stride, h, w = 8, 100, 168
    feats = torch.randn(2, 256, h, w, generator=gen).cuda()
    k = 1000
    xy = torch.rand(k, 2, generator=gen) * torch.tensor([w * stride * 0.8, h * stride * 0.8])
    wh = torch.rand(k, 2, generator=gen) * (stride * 28) + stride
    rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1).cuda()
    offset = (torch.randn(k, 2, 7, 7, generator=gen) * 0.5).cuda()
    scale = 1.0 / stride
    grad = torch.randn(k, 256, 7, 7, generator=gen).cuda()
    for sr in (0, 2):
        x = feats.clone().requires_grad_()
        off = offset.clone().requires_grad_()

        def ours():
            out = visdet_ops.deform_roi_pool(x, rois, off, 7, scale, sr, 0.1)
            out.backward(grad)

        row = {
            "op": "deform_roi_pool fwd+bwd",
            "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, sampling_ratio={sr}, offsets 0.5*randn",
        }
        row["ours"] = cuda_time_ms(ours)
        fwd = cuda_time_ms(lambda: visdet_ops.deform_roi_pool(feats, rois, offset, 7, scale, sr, 0.1))
        row["ours_forward_ms"] = fwd["median_ms"]
        moved = feats.numel() * 4 + k * 256 * 49 * 4
        row["forward_gbs"] = moved / (fwd["median_ms"] * 1e-3) / 1e9
        row["forward_fraction_of_copy"] = row["forward_gbs"] / copy_gbs
        xr = feats.clone().requires_grad_()

        def roi_align_fwd_bwd():
            out = visdet_ops.roi_align(xr, rois, 7, scale, sr, "avg", True)
            out.backward(grad)

        row["reference_point"] = cuda_time_ms(roi_align_fwd_bwd)
        row["note"] = (
            "reference point, not a peer: visdet_ops.roi_align fwd+bwd on the same input and RoIs, "
            f"no offsets: {row['reference_point']['median_ms']:.3f} ms"
        )
        results.append(row)


def peak_memory_bytes(fn) -> int:
    """Peak allocated bytes during fn() above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


@bench("focal_loss")
def bench_focal_loss(gen, tv, results: list, copy_gbs: float) -> None:
    # RetinaNet-sized: 100k anchors x 80 classes; forward + backward (torch.autograd.grad).
    from visdet_ops.reference.focal_loss import py_sigmoid_focal_loss, py_softmax_focal_loss

    n, c = 100000, 80
    cases = (
        ("sigmoid", torch.float32, "mean"),
        ("sigmoid", torch.float32, "none"),
        ("sigmoid", torch.bfloat16, "mean"),
        ("softmax", torch.float32, "mean"),
        ("softmax", torch.float32, "none"),
        ("softmax", torch.bfloat16, "mean"),
    )
    for kind, dtype, reduction in cases:
        x = (torch.randn(n, c, generator=gen) * 3).cuda().to(dtype).requires_grad_()
        if kind == "sigmoid":
            target = torch.randint(0, c + 1, (n,), generator=gen).cuda()  # c = background
            ours_fn, peer_fn = visdet_ops.sigmoid_focal_loss, py_sigmoid_focal_loss
            peer_name = "pure PyTorch (mmdet py_sigmoid_focal_loss, F.one_hot)"
        else:
            target = torch.randint(0, c, (n,), generator=gen).cuda()
            ours_fn, peer_fn = visdet_ops.softmax_focal_loss, py_softmax_focal_loss
            peer_name = "pure PyTorch (log_softmax, F.one_hot)"

        # 'none' is summed afterwards, as a detector reduces it: the backward then gets an
        # expanded grad_output, which the fused kernel reads in place.
        def ours():
            loss = ours_fn(x, target, 2.0, 0.25, None, reduction)
            return torch.autograd.grad(loss if reduction != "none" else loss.sum(), x)[0]

        def peer():
            loss = peer_fn(x, target, 2.0, 0.25, reduction)
            return torch.autograd.grad(loss if reduction != "none" else loss.sum(), x)[0]

        # Checked against the peer in float32 (for bfloat16: ours rounds once, the peer at every op).
        x32 = x.detach().float().requires_grad_()
        want = peer_fn(x32, target, 2.0, 0.25, reduction)
        (want_grad,) = torch.autograd.grad(want if reduction != "none" else want.sum(), x32)
        rtol = 1e-2 if dtype == torch.bfloat16 else 1e-4
        got = ours_fn(x, target, 2.0, 0.25, None, reduction).float()
        torch.testing.assert_close(got, want.detach(), rtol=rtol, atol=rtol * want.abs().max().item())
        got_grad = ours().float()
        torch.testing.assert_close(got_grad, want_grad, rtol=rtol, atol=rtol * want_grad.abs().max().item())
        del x32, want, want_grad, got, got_grad
        row = {
            "op": f"{kind}_focal_loss fwd+bwd",
            "case": f"{n} x {c}, {str(dtype).removeprefix('torch.')}, reduction={reduction}",
            "ours": cuda_time_ms(ours),
            "peer": cuda_time_ms(peer),
            "peer_name": peer_name,
            "ours_peak_mib": peak_memory_bytes(ours) / 2**20,
            "peer_peak_mib": peak_memory_bytes(peer) / 2**20,
        }
        with torch.no_grad():
            row["ours_forward_ms"] = cuda_time_ms(lambda: ours_fn(x, target, 2.0, 0.25, None, reduction))["median_ms"]
            row["peer_forward_ms"] = cuda_time_ms(lambda: peer_fn(x, target, 2.0, 0.25, reduction))["median_ms"]
        # Compulsory traffic of the fused pair: the forward reads input and target (and writes
        # the [N, C] loss for 'none'), the backward reads them again and writes grad_input.
        logits = n * c * x.element_size()
        moved = 3 * logits + 2 * n * 8 + (logits if reduction == "none" else 0)
        row["fused_gbs"] = moved / (row["ours"]["median_ms"] * 1e-3) / 1e9
        row["fused_fraction_of_copy"] = row["fused_gbs"] / copy_gbs
        results.append(row)


@bench("roi_pool")
def bench_roi_pool(gen, tv, results: list, copy_gbs: float) -> None:
    # The roi_align setup: FPN levels of a 2-image batch at 800x1333, strides 4..32, 256 channels.
    levels = [(4, 200, 336), (8, 100, 168), (16, 50, 84), (32, 25, 42)]
    for stride, h, w in levels:
        feats = torch.randn(2, 256, h, w, generator=gen).cuda()
        k = 1000
        img_h, img_w = h * stride, w * stride
        xy = torch.rand(k, 2, generator=gen) * torch.tensor([img_w * 0.8, img_h * 0.8])
        wh = torch.rand(k, 2, generator=gen) * (stride * 28) + stride
        rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1).cuda()
        scale = 1.0 / stride
        grad = torch.randn(k, 256, 7, 7, generator=gen).cuda()
        x = feats.clone().requires_grad_()

        def ours():
            out = visdet_ops.roi_pool(x, rois, 7, scale)
            out.backward(grad)

        row = {"op": "roi_pool fwd+bwd", "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7"}
        row["ours"] = cuda_time_ms(ours)
        x.grad = None
        fwd = cuda_time_ms(lambda: visdet_ops.roi_pool(feats, rois, 7, scale))
        row["ours_forward_ms"] = fwd["median_ms"]
        # Compulsory traffic of the forward: read the feature map once, write output and argmax.
        moved = feats.numel() * 4 + k * 256 * 49 * (4 + 4)
        row["forward_gbs"] = moved / (fwd["median_ms"] * 1e-3) / 1e9
        row["forward_fraction_of_copy"] = row["forward_gbs"] / copy_gbs
        if tv is not None:
            # Not compared: torchvision rounds the scaled RoI corners to integers, mmcv (and
            # visdet-ops) does not, so bins differ by a pixel here and there. The work per bin
            # is the same (tests/ops/test_roi_pool.py compares the two where the rules agree).
            xt = feats.clone().requires_grad_()

            def peer():
                out = tv.roi_pool(xt, rois, 7, scale)
                out.backward(grad)

            row["peer"] = cuda_time_ms(peer)
            row["peer_name"] = "torchvision.ops.roi_pool"
        results.append(row)


# The 3x3 convs where mmdet places DCN (ResNet-50 stages 2-4, dcn stage_with_dcn):
# (channels, H = W), batch DCN_BATCH, float32, deform_groups 1.
DCN_SHAPES = ((128, 64), (256, 32), (512, 16))
DCN_BATCH = 8


def dcn_case(channels: int, size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """DCNv2 inputs on the GPU: x, offset, mask, weight, bias and a grad_output."""
    n = DCN_BATCH
    x = torch.randn(n, channels, size, size, generator=gen).cuda()
    weight = (torch.randn(channels, channels, 3, 3, generator=gen) / (channels * 9) ** 0.5).cuda()
    bias = torch.randn(channels, generator=gen).cuda()
    offset = (torch.randn(n, 18, size, size, generator=gen) * 2).cuda()
    mask = torch.rand(n, 9, size, size, generator=gen).cuda()
    grad = torch.randn(n, channels, size, size, generator=gen).cuda()
    return x, offset, mask, weight, bias, grad


@bench("deform_conv")
def bench_deform_conv(gen, tv, results: list, copy_gbs: float) -> None:
    # DCNv2 forward + backward (all five gradients) at DCN_SHAPES. Peer: torchvision's
    # deform_conv2d with mask and bias, same inputs, same backward.
    for channels, size in DCN_SHAPES:
        n = DCN_BATCH
        x, offset, mask, weight, bias, grad = dcn_case(channels, size, gen)
        leaves = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]

        def ours(leaves=leaves, grad=grad):
            xi, oi, mi, wi, bi = leaves
            out = visdet_ops.modulated_deform_conv2d(xi, oi, mi, wi, bi, 1, 1, 1, 1, 1)
            out.backward(grad)

        row = {"op": "modulated_deform_conv2d fwd+bwd", "case": f"batch {n}, {channels} ch, {size}x{size}, 3x3, f32"}
        row["ours"] = cuda_time_ms(ours, warmup=3, repeat=20)
        fwd = cuda_time_ms(
            lambda x=x, offset=offset, mask=mask, weight=weight, bias=bias: visdet_ops.modulated_deform_conv2d(
                x, offset, mask, weight, bias, 1, 1, 1, 1, 1
            ),
            warmup=3,
            repeat=20,
        )
        row["ours_forward_ms"] = fwd["median_ms"]
        if tv is not None:
            got = visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, bias, 1, 1, 1, 1, 1)
            want = tv.deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask)
            torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
            tv_leaves = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]

            def peer(tv_leaves=tv_leaves, grad=grad):
                xi, oi, mi, wi, bi = tv_leaves
                out = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
                out.backward(grad)

            row["peer"] = cuda_time_ms(peer, warmup=3, repeat=20)
            row["peer_name"] = "torchvision.ops.deform_conv2d (mask)"
            peer_fwd = cuda_time_ms(
                lambda: tv.deform_conv2d(x, offset, weight, bias, padding=(1, 1), mask=mask), warmup=3, repeat=20
            )
            row["peer_forward_ms"] = peer_fwd["median_ms"]
        results.append(row)


@bench("roi_align", "deform_conv")
def bench_amp(gen, tv, results: list, copy_gbs: float) -> None:
    # The AMP path: inside torch.autocast("cuda", float16), with what an AMP step hands
    # the ops (16-bit features/offsets/masks from convs, float32 RoIs and weights).
    # Ours keeps the 16-bit feature map (the kernels read it; RoIs stay float32);
    # torchvision's autocast kernels cast every argument to float32 and the output back.
    amp = torch.float16
    for stride, h, w in ((4, 200, 336), (8, 100, 168)):
        feats = torch.randn(2, 256, h, w, generator=gen).cuda().to(amp)
        k = 1000
        xy = torch.rand(k, 2, generator=gen) * torch.tensor([w * stride * 0.8, h * stride * 0.8])
        wh = torch.rand(k, 2, generator=gen) * (stride * 28) + stride
        rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), xy, xy + wh], 1).cuda()
        grad = torch.randn(k, 256, 7, 7, generator=gen).cuda().to(amp)
        x = feats.clone().requires_grad_()

        def ours(x=x, rois=rois, grad=grad, scale=1.0 / stride):
            x.grad = None
            with torch.autocast("cuda", dtype=amp):
                out = visdet_ops.roi_align(x, rois, 7, scale, 2, "avg", True)
            out.backward(grad.to(out.dtype))

        row = {
            "op": "roi_align fwd+bwd, AMP",
            "case": f"stride {stride} ({h}x{w}), 1000 rois x 256 ch, 7x7, f16 autocast",
        }
        row["ours"] = cuda_time_ms(ours)
        if tv is not None:
            xt = feats.clone().requires_grad_()
            with torch.autocast("cuda", dtype=amp):
                got = visdet_ops.roi_align(feats, rois, 7, 1.0 / stride, 2, "avg", True)
                want = tv.roi_align(feats, rois, 7, 1.0 / stride, 2, True)
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)

            def peer(xt=xt, rois=rois, grad=grad, scale=1.0 / stride):
                xt.grad = None
                with torch.autocast("cuda", dtype=amp):
                    out = tv.roi_align(xt, rois, 7, scale, 2, True)
                out.backward(grad.to(out.dtype))

            row["peer"] = cuda_time_ms(peer)
            row["peer_name"] = "torchvision.ops.roi_align under autocast"
        results.append(row)
    for channels, size in DCN_SHAPES:
        x, offset, mask, weight, bias, grad = dcn_case(channels, size, gen)
        # 16-bit activations (conv outputs under autocast), float32 parameters.
        leaves = [x.to(amp), offset.to(amp), mask.to(amp), weight, bias]
        leaves = [t.clone().requires_grad_() for t in leaves]
        grad = grad.to(amp)

        def ours(leaves=leaves, grad=grad):
            for t in leaves:
                t.grad = None
            xi, oi, mi, wi, bi = leaves
            with torch.autocast("cuda", dtype=amp):
                out = visdet_ops.modulated_deform_conv2d(xi, oi, mi, wi, bi, 1, 1, 1, 1, 1)
            out.backward(grad.to(out.dtype))

        row = {
            "op": "modulated_deform_conv2d fwd+bwd, AMP",
            "case": f"batch {DCN_BATCH}, {channels} ch, {size}x{size}, 3x3, f16 autocast",
        }
        row["ours"] = cuda_time_ms(ours, warmup=3, repeat=20)
        if tv is not None:
            xi, oi, mi, wi, bi = (t.detach() for t in leaves)
            with torch.autocast("cuda", dtype=amp):
                got = visdet_ops.modulated_deform_conv2d(xi, oi, mi, wi, bi, 1, 1, 1, 1, 1)
                want = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
            scale = want.float().abs().max().item()
            assert (got.float() - want.float()).abs().max().item() <= 2e-2 * scale, "DCNv2 AMP differs from torchvision"
            tv_leaves = [t.detach().clone().requires_grad_() for t in leaves]

            def peer(tv_leaves=tv_leaves, grad=grad):
                for t in tv_leaves:
                    t.grad = None
                xi, oi, mi, wi, bi = tv_leaves
                with torch.autocast("cuda", dtype=amp):
                    out = tv.deform_conv2d(xi, oi, wi, bi, padding=(1, 1), mask=mi)
                out.backward(grad.to(out.dtype))

            row["peer"] = cuda_time_ms(peer, warmup=3, repeat=20)
            row["peer_name"] = "torchvision.ops.deform_conv2d (mask) under autocast"
        results.append(row)


def _fwd_bwd(fn, inputs: list, grad: torch.Tensor):
    """A closure running fn forward and backward (input gradients reset)."""

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(grad)

    return run


@bench("carafe")
def bench_carafe(gen, tv, results: list, copy_gbs: float) -> None:
    # CARAFE-FPN (mmdet configs/carafe): 256 channels, kernel 5, group 1,
    # x2 upsampling of each FPN level of a 2-image batch at 800 x 1333.
    # Peer: carafe_naive (the direct kernels), as mmcv's carafe vs carafe_naive.
    for h, w in ((100, 168), (50, 84), (25, 42)):
        x = torch.randn(2, 256, h, w, generator=gen).cuda()
        masks = torch.randn(2, 25, 2 * h, 2 * w, generator=gen).softmax(1).cuda()
        torch.testing.assert_close(visdet_ops.carafe(x, masks, 5, 1, 2), visdet_ops.carafe_naive(x, masks, 5, 1, 2))
        grad = torch.randn(2, 256, 2 * h, 2 * w, generator=gen).cuda()
        xg, mg = x.clone().requires_grad_(), masks.clone().requires_grad_()
        row = {"op": "carafe fwd+bwd", "case": f"2 x 256 x {h}x{w} -> x2, k5 g1"}
        row["ours"] = cuda_time_ms(_fwd_bwd(lambda a, b: visdet_ops.carafe(a, b, 5, 1, 2), [xg, mg], grad))
        row["peer"] = cuda_time_ms(_fwd_bwd(lambda a, b: visdet_ops.carafe_naive(a, b, 5, 1, 2), [xg, mg], grad))
        row["peer_name"] = "visdet_ops.carafe_naive"
        fwd = cuda_time_ms(lambda: torch.ops.visdet_ops.carafe(x, masks, 5, 1, 2))
        row["ours_forward_ms"] = fwd["median_ms"]
        # Compulsory traffic: read features and masks once, write the output.
        moved = (x.numel() + masks.numel() + grad.numel()) * 4
        row["forward_gbs"] = moved / (fwd["median_ms"] * 1e-3) / 1e9
        row["forward_fraction_of_copy"] = row["forward_gbs"] / copy_gbs
        results.append(row)
        row = {"op": "carafe fwd", "case": f"2 x 256 x {h}x{w} -> x2, k5 g1"}
        row["ours"] = fwd
        row["peer"] = cuda_time_ms(lambda: torch.ops.visdet_ops.carafe_naive(x, masks, 5, 1, 2))
        row["peer_name"] = "visdet_ops.carafe_naive"
        results.append(row)


def _cummax_corner_pool(x: torch.Tensor, mode: str) -> torch.Tensor:
    # mmcv's CornerPool.forward.
    dim, flip = {"bottom": (2, False), "left": (3, True), "right": (3, False), "top": (2, True)}[mode]
    if flip:
        x = x.flip(dim)
    out, _ = torch.cummax(x, dim=dim)
    return out.flip(dim) if flip else out


@bench("corner_pool")
def bench_corner_pool(gen, tv, results: list, copy_gbs: float) -> None:
    # CornerNet's pooling input: 2 images, 128 channels at 128 x 128 (511 px input, stride 4).
    x = torch.randn(2, 128, 128, 128, generator=gen).cuda()
    grad = torch.randn(x.shape, generator=gen).cuda()
    for mode in ("top", "bottom", "left", "right"):
        assert torch.equal(visdet_ops.corner_pool(x, mode), _cummax_corner_pool(x, mode))
        xg = x.clone().requires_grad_()
        row = {"op": "corner_pool fwd+bwd", "case": f"{mode}, 2 x 128 x 128x128"}
        row["ours"] = cuda_time_ms(_fwd_bwd(lambda t, m=mode: visdet_ops.corner_pool(t, m), [xg], grad))
        row["peer"] = cuda_time_ms(_fwd_bwd(lambda t, m=mode: _cummax_corner_pool(t, m), [xg], grad))
        row["peer_name"] = "torch.cummax (mmcv CornerPool)"
        fwd = cuda_time_ms(lambda m=mode: torch.ops.visdet_ops.corner_pool(x, m))
        row["ours_forward_ms"] = fwd["median_ms"]
        row["forward_gbs"] = 2 * x.numel() * 4 / (fwd["median_ms"] * 1e-3) / 1e9
        row["forward_fraction_of_copy"] = row["forward_gbs"] / copy_gbs
        results.append(row)


@bench("multi_scale_deform_attn")
def bench_multi_scale_deformable_attn(gen, tv, results: list, copy_gbs: float) -> None:
    # Deformable DETR at 800x1200: 4 levels (strides 8..64), 8 heads, head_dim 32, 4 points; the
    # encoder (queries = keys, batch 2) and decoders of 300 and 900 queries (batch 8). Level tables
    # on the GPU, as the model keeps them.
    # Peer: mmcv's multi_scale_deformable_attn_pytorch (F.grid_sample), ported verbatim
    # in visdet_ops.reference (one .tolist() of the level shapes instead of mmcv's per-level reads).
    from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

    shapes = torch.tensor([[100, 150], [50, 75], [25, 38], [13, 19]])
    sizes = shapes.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).cuda()
    keys = int(sizes.sum())
    heads, dim, levels, points = 8, 32, 4, 4
    shapes_cuda = shapes.cuda()
    for name, bs, queries in (("encoder", 2, keys), ("decoder", 8, 300), ("decoder", 8, 900)):
        value = torch.randn(bs, keys, heads, dim, generator=gen).cuda().requires_grad_()
        loc = torch.rand(bs, queries, heads, levels, points, 2, generator=gen).cuda().requires_grad_()
        attn = torch.rand(bs, queries, heads, levels, points, generator=gen).cuda().softmax(-1).requires_grad_()
        grad = torch.randn(bs, queries, heads * dim, generator=gen).cuda()
        got = visdet_ops.multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn)
        want = multi_scale_deformable_attn_reference(value, shapes_cuda, loc, attn)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

        def ours():
            out = torch.ops.visdet_ops.multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn, 64)
            torch.autograd.grad(out, (value, loc, attn), grad)

        def peer():
            out = multi_scale_deformable_attn_reference(value, shapes_cuda, loc, attn)
            torch.autograd.grad(out, (value, loc, attn), grad)

        row = {
            "op": "multi_scale_deformable_attn fwd+bwd",
            "case": f"{name}: bs {bs}, {queries} queries, {keys} keys, 8 heads x 32, 4 levels x 4 points, float32",
        }
        row["ours"] = cuda_time_ms(ours)
        with torch.no_grad():
            row["ours_forward_ms"] = cuda_time_ms(
                lambda: torch.ops.visdet_ops.multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn, 64)
            )["median_ms"]
        row["peer"] = cuda_time_ms(peer)
        row["peer_name"] = "mmcv multi_scale_deformable_attn_pytorch (grid_sample)"
        results.append(row)


@bench("masked_conv")
def bench_masked_conv(gen, tv, results: list, copy_gbs: float) -> None:
    # Guided-anchoring style: 256 -> 256 channels, 3x3, one FPN level, a
    # sparse location mask. Peer: the dense F.conv2d times the mask.

    x = torch.randn(1, 256, 100, 168, generator=gen).cuda()
    w = (torch.randn(256, 256, 3, 3, generator=gen) * 0.02).cuda()
    b = torch.randn(256, generator=gen).cuda()
    grad = torch.randn(1, 256, 100, 168, generator=gen).cuda()
    # cuDNN convolutions use TF32 by default, our masked_conv2d's matmuls do not
    # (torch's matmul default): compare and time both in full float32.
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        _bench_masked_conv(x, w, b, grad, gen, results)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def _bench_masked_conv(x, w, b, grad, gen, results: list) -> None:
    import torch.nn.functional as F

    for density in (0.05, 0.3):
        mask = (torch.rand(1, 100, 168, generator=gen) < density).float().cuda()
        torch.testing.assert_close(
            visdet_ops.masked_conv2d(x, mask, w, b, 1),
            F.conv2d(x, w, b, padding=1) * mask[:, None],
            rtol=1e-3,
            atol=1e-3,
        )
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        row = {"op": "masked_conv2d fwd+bwd", "case": f"1 x 256 -> 256, 100x168, 3x3, {density:.0%} active"}
        row["ours"] = cuda_time_ms(_fwd_bwd(lambda a, c, d: visdet_ops.masked_conv2d(a, mask, c, d, 1), leaves, grad))
        row["peer"] = cuda_time_ms(_fwd_bwd(lambda a, c, d: F.conv2d(a, c, d, padding=1) * mask[:, None], leaves, grad))
        row["peer_name"] = "F.conv2d * mask (cuDNN, TF32 off)"
        results.append(row)
        row = {"op": "masked_conv2d fwd", "case": f"1 x 256 -> 256, 100x168, 3x3, {density:.0%} active"}
        row["ours"] = cuda_time_ms(lambda: torch.ops.visdet_ops.masked_conv2d(x, mask, w, b, 1, 1))
        row["peer"] = cuda_time_ms(lambda: F.conv2d(x, w, b, padding=1) * mask[:, None])
        row["peer_name"] = "F.conv2d * mask (cuDNN, TF32 off)"
        results.append(row)


def markdown(results: list, env: dict) -> str:
    lines = [
        f"GPU: {env['gpu']} (driver CUDA {env['cuda_runtime']}); torch {env['torch']}; visdet-ops {env['visdet_ops']}; "
        f"device-to-device copy {env['copy_gbs']:.0f} GB/s (read + write).",
        "",
        "| op | case | visdet-ops ms | peer | peer ms | speed-up | note |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results:
        ours = r["ours"]["median_ms"]
        peer = r.get("peer", {}).get("median_ms")
        ratio = f"{peer / ours:.2f}x" if peer else "-"
        note = []
        if "kept" in r:
            note.append(f"{r['kept']} kept")
        if "forward_gbs" in r:
            note.append(
                f"fwd {r['ours_forward_ms']:.3f} ms, {r['forward_gbs']:.0f} GB/s compulsory "
                f"({100 * r['forward_fraction_of_copy']:.0f}% of copy)"
            )
        if "note" in r:
            note.append(r["note"])
        if "ours_peak_mib" in r:
            note.append(
                f"peak memory {r['ours_peak_mib']:.0f} MiB vs {r['peer_peak_mib']:.0f} MiB "
                f"({r['ours_peak_mib'] / r['peer_peak_mib']:.2f}x)"
            )
        if "fused_gbs" in r:
            note.append(f"{r['fused_gbs']:.0f} GB/s compulsory ({100 * r['fused_fraction_of_copy']:.0f}% of copy)")
        if "peer_forward_ms" in r:
            note.append(f"forward alone {r['ours_forward_ms']:.3f} ms vs {r['peer_forward_ms']:.3f} ms")
        lines.append(
            f"| {r['op']} | {r['case']} | {ours:.3f} | {r.get('peer_name', '-')} | "
            f"{peer if peer is None else f'{peer:.3f}'} | {ratio} | {'; '.join(note)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only the benchmarks of the op families named (op module names)"
    )
    args = parser.parse_args(argv)
    missing = unbenchmarked_families()
    if missing:
        print(f"op families without a benchmark: {missing} (add a @bench(family) function)", file=sys.stderr)
        return 1
    unknown = set(args.only or ()) - set(op_families())
    if unknown:
        parser.error(f"--only: {sorted(unknown)} are not op families; families: {op_families()}")
    benches = [fn for families, fn in BENCHES if not args.only or set(families) & set(args.only)]
    if not torch.cuda.is_available():
        print("benchmarks need a CUDA device", file=sys.stderr)
        return 1
    try:
        from torchvision import ops as tv
    except Exception as exc:  # noqa: BLE001
        print(f"torchvision unavailable ({exc}): peers that need it are left out", file=sys.stderr)
        tv = None
    gen = torch.Generator().manual_seed(0)
    copy_gbs = copy_bandwidth_gbs()
    env = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "visdet_ops": visdet_ops.BUILD_INFO["VERSION"],
        "copy_gbs": copy_gbs,
    }
    results: list = []
    failed = []
    for fn in benches:
        # One family's failure (a wrong result, say) must not hide the others'
        # figures; it still fails the run.
        try:
            fn(gen, tv, results, copy_gbs)
        except Exception as exc:  # noqa: BLE001
            failed.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")
            print(f"FAILED {failed[-1]}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps({"env": env, "results": results, "failed": failed}, indent=2))
    md = markdown(results, env)
    if failed:
        md += "\nFailed benchmark families (no figures):\n\n" + "\n".join(f"- {f}" for f in failed) + "\n"
    (args.out / "bench.md").write_text(md)
    print(md)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
