"""Launches every CUDA kernel of visdet-ops once (forward and backward, each
dtype) on small inputs, for compute-sanitizer. Exits non-zero on a wrong result,
so a sanitizer run also checks the answers.

One function per op family in CASES: fn(gen, dtype) returns None when the
result is right, else a message. Every case is called with float32, float64,
float16 and bfloat16; a case returns None at once for a dtype its op rejects
(and its tests pin that rejection)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch

import visdet_ops
from visdet_ops.reference.bbox_overlaps import bbox_overlaps_reference
from visdet_ops.reference.carafe import carafe_reference
from visdet_ops.reference.corner_pool import corner_pool_reference
from visdet_ops.reference.deform_conv import deform_conv2d_reference
from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference
from visdet_ops.reference.focal_loss import sigmoid_focal_loss_reference, softmax_focal_loss_reference
from visdet_ops.reference.masked_conv import masked_conv2d_reference
from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference
from visdet_ops.reference.nms import nms_match_reference, nms_reference, soft_nms_reference
from visdet_ops.reference.roi_align import roi_align_reference
from visdet_ops.reference.roi_pool import roi_pool_reference

CASES: list[Callable[[torch.Generator, torch.dtype], str | None]] = []


def case(fn):
    CASES.append(fn)
    return fn


def _boxes(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    # 1/8-pixel grid below 128 px: exact in float16 too.
    xy = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 96 * 8).round() / 8
    wh = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 * 8 + 4).round() / 8
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen, dtype=torch.float64)


@case
def nms_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # several 64-box blocks, so both the mask and the walk kernel cross block boundaries.
    boxes, scores = _boxes(300, gen)
    scores = scores.to(dtype).double()  # what the kernel sorts
    keep = visdet_ops.nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), 0.5)[1]
    if keep.tolist() != nms_reference(boxes.to(dtype).double(), scores, 0.5).tolist():
        return "nms: wrong result"
    idxs = torch.randint(0, 5, (300,), generator=gen)
    keep = visdet_ops.batched_nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), idxs.cuda(), {"iou_threshold": 0.5})[
        1
    ]
    if keep.tolist() != nms_reference(boxes.to(dtype).double(), scores, 0.5, idxs=idxs).tolist():
        return "batched_nms: wrong result"
    dets = torch.cat([boxes, scores[:, None]], 1)
    groups = visdet_ops.nms_match(dets.cuda().to(dtype), 0.5)
    if [g.tolist() for g in groups] != nms_match_reference(dets.to(dtype).double(), 0.5):
        return "nms_match: wrong result"
    return None


@case
def soft_nms_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    boxes, scores = _boxes(300, gen)
    b, s = boxes.to(dtype), scores.to(dtype)
    idxs = torch.randint(0, 4, (300,), generator=gen)
    for classes in (None, idxs):
        _, want = soft_nms_reference(b.double(), s.double(), 0.3, 0.5, 0.01, "gaussian", idxs=classes)
        _, got = torch.ops.visdet_ops.soft_nms(
            b.cuda(), s.cuda(), 0.3, 0.5, 0.01, 2, 0, None if classes is None else classes.cuda()
        )
        tol = 1e-5 if dtype in (torch.float32, torch.float64) else 2e-2
        if got.shape != want.shape or not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"soft_nms (classes: {classes is not None}): wrong scores"
    if dtype == torch.float64:
        # 30000 float64 scores (240 KB) exceed shared memory: the global-scratch path.
        boxes, scores = _boxes(30000, gen)
        boxes = boxes * 20
        want, _ = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.9, "linear")
        got, _ = torch.ops.visdet_ops.soft_nms(boxes.cuda(), scores.cuda(), 0.3, 0.5, 0.9, 1, 0)
        if got.tolist() != want.tolist():
            return "soft_nms (global scratch): wrong result"
    return None


@case
def bbox_overlaps_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    a, _ = _boxes(70, gen)
    b, _ = _boxes(300, gen)
    a = a.reshape(2, 35, 4)
    b = b.reshape(2, 150, 4)
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 1e-2
    for mode, name in enumerate(("iou", "iof", "giou")):
        got = torch.ops.visdet_ops.bbox_overlaps(a.cuda().to(dtype), b.cuda().to(dtype), mode, False, 0)
        want = bbox_overlaps_reference(a.to(dtype).double(), b.to(dtype).double(), name)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {name}: wrong result"
        got = torch.ops.visdet_ops.bbox_overlaps(a.cuda().to(dtype), a.flip(1).cuda().to(dtype), mode, True, 1)
        want = bbox_overlaps_reference(a.to(dtype).double(), a.flip(1).to(dtype).double(), name, True, 1)
        if not torch.allclose(got.cpu().double(), want, rtol=tol, atol=tol):
            return f"bbox_overlaps {name} aligned: wrong result"
    return None


# Loose enough for bfloat16 outputs of order 1-10 (8 significant bits), far tighter than a
# wrong sample or bin; float32/float64 get 1e-4.
def _tolerance(dtype: torch.dtype) -> float:
    return 3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


# RoIs the kernels must refuse on their own (no host check on CUDA): a batch index outside
# [0, 2) and a NaN coordinate. Their output must be NaN, and memcheck proves nothing is read
# or written out of bounds for them.
_INVALID_ROIS = torch.tensor([[5, 1, 1, 7, 6], [0, float("nan"), 1, 7, 6]], dtype=torch.float64)


@case
def roi_align_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # both pool modes, forward and backward, every float dtype.
    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    all_rois = torch.cat([rois, _INVALID_ROIS]).cuda().to(dtype)
    for mode in ("avg", "max"):
        xc = x.cuda().to(dtype).requires_grad_()
        out = visdet_ops.roi_align(xc, all_rois, 3, 1.0, 0, mode, True)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        want = roi_align_reference(x, rois, (3, 3), 1.0, 0, mode, True)
        got = out.detach().cpu().double()
        tol = _tolerance(dtype)
        if not torch.allclose(got[:4], want, rtol=tol, atol=tol):
            return f"roi_align {mode}: wrong result"
        if not torch.isnan(got[4:]).all():
            return f"roi_align {mode}: an invalid RoI did not give NaN"
        if not torch.isfinite(xc.grad).all():
            return f"roi_align {mode}: non-finite gradient"
    return None


@case
def roi_pool_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # forward and backward, every float dtype; values exact in bfloat16, so results are exact.
    x = (torch.rand(2 * 3, 9 * 11, generator=gen).argsort(1).double() - 50).div(8).reshape(2, 3, 9, 11)
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    all_rois = torch.cat([rois, _INVALID_ROIS]).cuda().to(dtype)
    xc = x.cuda().to(dtype).requires_grad_()
    out = visdet_ops.roi_pool(xc, all_rois, 3, 1.0)
    out.backward(torch.ones_like(out))
    torch.cuda.synchronize()
    want = roi_pool_reference(x.requires_grad_(), rois.to(dtype), (3, 3), 1.0)
    (want_grad,) = torch.autograd.grad(want, x, torch.ones_like(want))
    got = out.detach().cpu().double()
    if not torch.equal(got[:4], want.detach()):
        return "roi_pool: wrong result"
    if not torch.isnan(got[4:]).all():
        return "roi_pool: an invalid RoI did not give NaN"
    if not torch.equal(xc.grad.cpu().double(), want_grad):
        return "roi_pool: wrong gradient"
    return None


# Fixed RoIs and offsets (no sample within 5e-4 px of an integer coordinate,
# where float32 rounding could move the offset gradient by a kink), random
# features. Tolerances: the float64 reference on the same rounded inputs.
_DEFORM_TOL = {
    torch.float32: 1e-4,
    torch.float64: 1e-10,
    torch.float16: 5e-3,
    torch.bfloat16: 3e-2,
}


def deform_roi_pool_check(gen: torch.Generator, dtype: torch.dtype, device: str) -> str | None:
    x = torch.randn(2, 5, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    rois = (
        torch.tensor(
            [[0, 1.3, 1.1, 7.2, 6.4], [1, -2.2, 0.3, 12.6, 9.1], [1, 3.1, 3.3, 3.6, 4.2], [0, 20.2, 20.3, 30.1, 30.4]],
            dtype=torch.float64,
        )
        .to(dtype)
        .double()
    )
    offset = torch.linspace(-0.71, 0.93, 4 * 2 * 3 * 3, dtype=torch.float64).reshape(4, 2, 3, 3).to(dtype).double()
    grad_out = torch.randn(4, 5, 3, 3, generator=gen, dtype=torch.float64).to(dtype).double()
    tol = _DEFORM_TOL[dtype]
    for off in (None, offset):
        xr = x.clone().requires_grad_()
        orr = None if off is None else off.clone().requires_grad_()
        want = deform_roi_pool_reference(xr, rois, orr, (3, 3), 1.0, 0, 0.3)
        wants = torch.autograd.grad(want, (xr,) if orr is None else (xr, orr), grad_out)
        xd = x.to(device, dtype).requires_grad_()
        od = None if off is None else off.to(device, dtype).requires_grad_()
        got = visdet_ops.deform_roi_pool(xd, rois.to(device, dtype), od, 3, 1.0, 0, 0.3)
        gots = torch.autograd.grad(got, (xd,) if od is None else (xd, od), grad_out.to(device, dtype))
        what = "with" if off is not None else "without"
        for name, g, w in zip(("output", "grad_input", "grad_offset"), (got, *gots), (want, *wants), strict=False):
            g = g.detach().cpu().double()
            scale = max(w.abs().max().item(), 1.0)
            if not torch.allclose(g / scale, w.detach() / scale, rtol=tol, atol=tol):
                return f"deform_roi_pool {what} offset: wrong {name} (max error {(g - w).abs().max().item():.3g})"
    return None


@case
def deform_roi_pool_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # forward, input-gradient (atomics) and offset-gradient (shuffle) kernels, all four dtypes.
    return deform_roi_pool_check(gen, dtype, "cuda")


@case
def focal_loss_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Both losses, every reduction (elementwise and block-sum + finalize kernels), every softmax
    # kernel shape (C = 3, 7, 16: lanes = C rounded up; 40: 2 logits a lane; 80: 8; 200: row
    # re-read), forward and backward, and the bad-target paths (NaN rows; the flag and its error
    # with VISDET_OPS_SYNC_TARGET_CHECKS=1).
    rtol = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    kinds = (
        (visdet_ops.sigmoid_focal_loss, sigmoid_focal_loss_reference, "sigmoid"),
        (visdet_ops.softmax_focal_loss, softmax_focal_loss_reference, "softmax"),
    )
    for classes in (3, 7, 16, 40, 80, 200):
        x = (torch.randn(300, classes, generator=gen, dtype=torch.float64) * 3).to(dtype).double()
        target = torch.randint(0, classes + 1, (300,), generator=gen)
        weight = (torch.rand(classes, generator=gen, dtype=torch.float64) + 0.5).to(dtype).double()
        for fn, ref, name in kinds:
            t = target if name == "sigmoid" else torch.where(target == classes, -1, target)
            for reduction in ("none", "mean", "sum"):
                xc = x.cuda().to(dtype).requires_grad_()
                out = fn(xc, t.cuda(), 2.0, 0.25, weight.cuda().to(dtype), reduction)
                out.sum().backward()
                torch.cuda.synchronize()
                xr = x.detach().clone().requires_grad_()
                want = ref(xr, t, 2.0, 0.25, weight, reduction)
                want.sum().backward()
                for what, got, exp in (("loss", out.detach(), want.detach()), ("grad", xc.grad, xr.grad)):
                    atol = rtol * exp.abs().max().item() * 1e-2 + 1e-7
                    if not torch.allclose(got.cpu().double(), exp, rtol=rtol, atol=atol):
                        return f"{name}_focal_loss C={classes} {reduction} {what}: wrong result"
            bad = torch.full((300,), classes + 1).cuda()
            if not fn(x.cuda().to(dtype), bad, 2.0, 0.25, None, "sum").isnan().item():
                return f"{name}_focal_loss: a bad target did not give a NaN loss"
            os.environ["VISDET_OPS_SYNC_TARGET_CHECKS"] = "1"
            try:
                fn(x.cuda().to(dtype), bad, 2.0, 0.25, None, "sum")
            except RuntimeError as exc:
                if "target values must" not in str(exc):
                    return f"{name}_focal_loss: unexpected error for a bad target: {exc}"
            else:
                return f"{name}_focal_loss: a bad target was not reported"
            finally:
                del os.environ["VISDET_OPS_SYNC_TARGET_CHECKS"]
    return None


@case
def deform_conv_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # DCNv2 (mask, bias, 2 groups, 2 deform groups, 2 images in one chunk) and DCNv1
    # (chunks of 1): im2col and the fused col2im, forward and backward, every dtype.
    # A 9x10 map; a 12x40 map (width a multiple of 4: the paired vector atomics of
    # the float backward on sm_90) with 40 channels and offsets up to 7 px; 32
    # channels of a 3x2 kernel on a 3x4 map (the channel-slice path).
    for channels, h, w, (kh, kw), reach in ((8, 9, 10, (3, 3), 2), (40, 12, 40, (3, 3), 6), (32, 3, 4, (3, 2), 2)):
        kk = kh * kw
        pad = (kh // 2, kw // 2)
        oh, ow = h + 2 * pad[0] - kh + 1, w + 2 * pad[1] - kw + 1
        x = torch.randn(2, channels, h, w, generator=gen, dtype=torch.float64).to(dtype).double()
        weight = (torch.randn(6, channels // 2, kh, kw, generator=gen, dtype=torch.float64) * 0.2).to(dtype).double()
        bias = torch.randn(6, generator=gen, dtype=torch.float64).to(dtype).double()
        offset = torch.randint(-reach, reach + 1, (2, 4 * kk, oh, ow), generator=gen)
        offset = offset + 0.1 + 0.8 * torch.rand(2, 4 * kk, oh, ow, generator=gen)
        offset = offset.double().to(dtype).double()
        mask = torch.rand(2, 2 * kk, oh, ow, generator=gen, dtype=torch.float64).to(dtype).double()
        tol = 1e-4 if dtype in (torch.float32, torch.float64) else 5e-2
        for with_mask in (True, False):
            ref = [t.clone().requires_grad_() for t in (x, offset, mask, weight, bias)]
            want = deform_conv2d_reference(
                ref[0], ref[1], ref[2] if with_mask else None, ref[3], ref[4] if with_mask else None,
                (1, 1), pad, (1, 1), 2, 2,
            )  # fmt: skip
            grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
            used = [0, 1, 2, 3, 4] if with_mask else [0, 1, 3]
            want_grads = torch.autograd.grad(want, [ref[i] for i in used], grad)
            dev = [t.cuda().to(dtype).requires_grad_() for t in (x, offset, mask, weight, bias)]
            if with_mask:
                out = visdet_ops.modulated_deform_conv2d(dev[0], dev[1], dev[2], dev[3], dev[4], 1, pad, 1, 2, 2)
            else:
                out = visdet_ops.deform_conv2d(dev[0], dev[1], dev[3], 1, pad, 1, 2, 2, False, 1)
            got_grads = torch.autograd.grad(out, [dev[i] for i in used], grad.cuda().to(dtype))
            torch.cuda.synchronize()
            names = [("input", "offset", "mask", "weight", "bias")[i] for i in used]
            pairs = [("output", out, want), *zip(names, got_grads, want_grads, strict=True)]
            for name, g, r in pairs:
                scale = max(r.abs().max().item(), 1.0)
                if (g.detach().cpu().double() - r.detach()).abs().max().item() > tol * scale:
                    return f"deform_conv2d (mask: {with_mask}, {channels} ch): wrong {name}"
    return None


@case
def multi_scale_deformable_attn_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # head_dim 32: vector loads + warp-shuffle reduction; 3: scalar loads + atomic
    # reduction; 256 (float32: 64 threads per query and head): atomic reduction.
    spatial = torch.tensor([[6, 7], [3, 4], [2, 2]])
    start = torch.tensor([0, 42, 54])
    tol = 1e-4 if dtype in (torch.float32, torch.float64) else 1e-1
    for dim, heads in ((32, 2), (3, 3), (256, 1)):
        value = torch.randn(2, 58, heads, dim, generator=gen, dtype=torch.float64).to(dtype).double()
        loc = (torch.rand(2, 37, heads, 3, 4, 2, generator=gen, dtype=torch.float64) * 1.4 - 0.2).to(dtype).double()
        attn = torch.rand(2, 37, heads, 3, 4, generator=gen, dtype=torch.float64).to(dtype).double()
        inputs = [t.cuda().to(dtype).requires_grad_() for t in (value, loc, attn)]
        out = visdet_ops.multi_scale_deformable_attn(inputs[0], spatial.cuda(), start.cuda(), inputs[1], inputs[2])
        out.sum().backward()
        torch.cuda.synchronize()
        ref_inputs = [t.detach().clone().requires_grad_() for t in (value, loc, attn)]
        want = multi_scale_deformable_attn_reference(ref_inputs[0], spatial, ref_inputs[1], ref_inputs[2])
        want.sum().backward()
        if not torch.allclose(out.detach().cpu().double(), want.detach(), rtol=tol, atol=tol):
            return f"multi_scale_deformable_attn head_dim {dim}: wrong output"
        for name, got, ref in zip(
            ("value", "sampling_locations", "attention_weights"), inputs, ref_inputs, strict=True
        ):
            scale = max(ref.grad.abs().max().item(), 1.0)
            if (got.grad.cpu().double() - ref.grad).abs().max().item() > 4 * tol * scale:
                return f"multi_scale_deformable_attn head_dim {dim}: wrong grad of {name}"
    return None


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-4)
    return torch.allclose(got.detach().cpu().double(), want.detach(), rtol=tol, atol=tol)


def _forward_backward(fn, ref, inputs: list[torch.Tensor], dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Runs fn on CUDA copies of inputs (in dtype) and ref on float64 copies
    (of the dtype-rounded values); compares outputs and input gradients."""
    rounded = [t.to(dtype).double() for t in inputs]
    ref_in = [t.clone().requires_grad_() for t in rounded]
    want = ref(*ref_in)
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    want_grads = torch.autograd.grad(want, ref_in, grad)
    dev_in = [t.cuda().to(dtype).requires_grad_() for t in rounded]
    got = fn(*dev_in)
    got_grads = torch.autograd.grad(got, dev_in, grad.cuda().to(dtype))
    torch.cuda.synchronize()
    if not _close(got, want, dtype):
        return "wrong forward"
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        if not _close(g, w, dtype):
            return f"wrong gradient of input {i}"
    return None


@case
def corner_pool_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Small integers: ties along every scan (the tie rule of the backward).
    x = torch.randint(-3, 4, (2, 3, 37, 45), generator=gen).double()
    for mode in ("top", "bottom", "left", "right"):
        error = _forward_backward(
            lambda t, m=mode: visdet_ops.corner_pool(t, m),
            lambda t, m=mode: corner_pool_reference(t, m),
            [x],
            dtype,
            gen,
        )
        if error is not None:
            return f"corner_pool {mode}: {error}"
    return None


@case
def masked_conv_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    x = torch.randn(2, 6, 17, 19, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 6, 3, 3, generator=gen, dtype=torch.float64) * 0.3
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    mask = torch.rand(2, 17, 19, generator=gen, dtype=torch.float64) > 0.6
    error = _forward_backward(
        lambda f, wt, bs: visdet_ops.masked_conv2d(f, mask.cuda(), wt, bs, 1),
        lambda f, wt, bs: masked_conv2d_reference(f, mask, wt, bs, (1, 1)),
        [x, w, b],
        dtype,
        gen,
    )
    return None if error is None else f"masked_conv2d: {error}"


@case
def carafe_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    # Not a multiple of the 32 x 8 tile, more channels than one chunk (32);
    # k=5 with float64 exercises the tiled path, k=7 float64 the fallback.
    x = torch.randn(2, 40, 11, 21, generator=gen, dtype=torch.float64)
    for k, g in ((5, 2), (7, 1)):
        masks = torch.randn(2, g, k * k, 22, 42, generator=gen, dtype=torch.float64).softmax(2).view(2, -1, 22, 42)
        for name, fn in (("carafe", visdet_ops.carafe), ("carafe_naive", visdet_ops.carafe_naive)):
            error = _forward_backward(
                lambda f, m, fn=fn, k=k, g=g: fn(f, m, k, g, 2),
                lambda f, m, k=k, g=g: carafe_reference(f, m, k, g, 2),
                [x, masks],
                dtype,
                gen,
            )
            if error is not None:
                return f"{name} k={k}: {error}"
    return None


def _autocast_forward_backward(fn, ref, inputs, float32: set[int], constant: set[int], dtype, gen) -> str | None:
    """fn under torch.autocast('cuda', dtype), with the inputs in `float32` kept float32 (RoIs, sampling
    locations: what an AMP step gives the op) and the others 16-bit; ref on float64 copies of the same
    values. The output must come out in the autocast dtype and each gradient (of the inputs not in
    `constant`) in its input's dtype."""
    kinds = [torch.float32 if i in float32 else dtype for i in range(len(inputs))]
    rounded = [t.to(k).double() for t, k in zip(inputs, kinds, strict=True)]
    diff = [i not in constant for i in range(len(inputs))]
    ref_in = [t.clone().requires_grad_(d) for t, d in zip(rounded, diff, strict=True)]
    want = ref(*ref_in)
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    want_grads = torch.autograd.grad(want, [t for t in ref_in if t.requires_grad], grad)
    dev_in = [t.cuda().to(k).requires_grad_(d) for t, k, d in zip(rounded, kinds, diff, strict=True)]
    with torch.autocast("cuda", dtype):
        got = fn(*dev_in)
    if got.dtype != dtype:
        return f"output dtype {got.dtype} under {dtype} autocast"
    wanted = [t for t in dev_in if t.requires_grad]
    got_grads = torch.autograd.grad(got, wanted, grad.cuda().to(dtype))
    torch.cuda.synchronize()
    if not _close(got, want, dtype):
        return "wrong forward"
    for i, (t, g, w) in enumerate(zip(wanted, got_grads, want_grads, strict=True)):
        if g.dtype != t.dtype:
            return f"gradient {i} in {g.dtype}, its input is {t.dtype}"
        if not _close(g, w, dtype):
            return f"wrong gradient of input {i}"
    return None


@case
def autocast_mixed_dtype_case(gen: torch.Generator, dtype: torch.dtype) -> str | None:
    """The kernels that read a 16-bit map beside float32 RoIs / sampling locations (the AMP path)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return None
    x = torch.randn(2, 5, 12, 14, generator=gen, dtype=torch.float64)
    boxes, _ = _boxes(9, gen)
    rois = torch.cat([torch.randint(0, 2, (9, 1), generator=gen).double(), boxes], 1)
    offset = torch.randn(9, 2, 3, 3, generator=gen, dtype=torch.float64) * 0.1
    checks = {
        "roi_align avg": (
            lambda t, r: visdet_ops.roi_align(t, r, 3, 0.1, 2, "avg", True),
            lambda t, r: roi_align_reference(t, r, (3, 3), 0.1, 2, "avg", True),
            [x, rois],
        ),
        "roi_align max": (
            lambda t, r: visdet_ops.roi_align(t, r, 3, 0.1, 0, "max", False),
            lambda t, r: roi_align_reference(t, r, (3, 3), 0.1, 0, "max", False),
            [x, rois],
        ),
        "roi_pool": (
            lambda t, r: visdet_ops.roi_pool(t, r, 3, 0.1),
            lambda t, r: roi_pool_reference(t, r, (3, 3), 0.1),
            [x, rois],
        ),
        "deform_roi_pool": (
            lambda t, r, o: visdet_ops.deform_roi_pool(t, r, o, 3, 0.1, 2, 0.1),
            lambda t, r, o: deform_roi_pool_reference(t, r, o, (3, 3), 0.1, 2, 0.1),
            [x, rois, offset],
        ),
    }
    for name, (fn, ref, inputs) in checks.items():
        error = _autocast_forward_backward(fn, ref, inputs, {1}, {1}, dtype, gen)  # rois: float32, constant
        if error is not None:
            return f"{name} under autocast: {error}"
    spatial, start = torch.tensor([[6, 7], [3, 4]]), torch.tensor([0, 42])
    value = torch.randn(2, 54, 2, 32, generator=gen, dtype=torch.float64)
    loc = torch.rand(2, 17, 2, 2, 4, 2, generator=gen, dtype=torch.float64) * 1.2 - 0.1
    attn = torch.rand(2, 17, 2, 2, 4, generator=gen, dtype=torch.float64)
    error = _autocast_forward_backward(
        lambda v, lo, a: visdet_ops.multi_scale_deformable_attn(v, spatial.cuda(), start.cuda(), lo, a),
        lambda v, lo, a: multi_scale_deformable_attn_reference(v, spatial, lo, a),
        [value, loc, attn],
        {1, 2},
        set(),
        dtype,
        gen,
    )
    return None if error is None else f"multi_scale_deformable_attn under autocast: {error}"


def main(argv: list[str] | None = None) -> int:
    """Every case, or those whose name contains one of the arguments."""
    names = sys.argv[1:] if argv is None else argv
    cases = [fn for fn in CASES if not names or any(n in fn.__name__ for n in names)]
    if not cases:
        print(f"no case matches {names}", file=sys.stderr)
        return 1
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for fn in cases:
            error = fn(gen, dtype)
            torch.cuda.synchronize()
            if error is not None:
                print(f"{fn.__name__} {dtype}: {error}", file=sys.stderr)
                return 1
    print(f"sanitize cases: {len(cases)} op families launched, results correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
