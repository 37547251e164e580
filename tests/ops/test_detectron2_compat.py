"""visdet_ops.detectron2_compat against detectron2's own definitions, written here from detectron2's source
(detectron2/layers/csrc/box_iou_rotated/box_iou_rotated_utils.h and ROIAlignRotated/ROIAlignRotated_cpu.cpp): boxes
and RoIs in degrees, counter-clockwise. The corners come from detectron2's formula and the areas from shapely, a
geometry independent of ours; RoIAlignRotated from detectron2's sampling loop in float64. At 0 degrees rotated NMS
is torchvision's NMS (detectron2's own test_nms_rotated_0_degree)."""

from __future__ import annotations

import math

import pytest
import torch
from shapely.geometry import Polygon  # a test dependency (pyproject [test]): its absence fails, never skips

from visdet_ops import detectron2_compat as d2

from ..conftest import torchvision_or_skip


def _corners(box) -> list[tuple[float, float]]:
    """detectron2's get_rotated_vertices: theta = angle in degrees, counter-clockwise in image space."""
    x, y, w, h, a = (float(v) for v in box)
    theta = a * math.pi / 180.0
    c, s = math.cos(theta) * 0.5, math.sin(theta) * 0.5
    p0 = (x + s * h + c * w, y + c * h - s * w)
    p1 = (x - s * h + c * w, y - c * h - s * w)
    return [p0, p1, (2 * x - p0[0], 2 * y - p0[1]), (2 * x - p1[0], 2 * y - p1[1])]


def _iou(b1, b2) -> float:
    p, q = Polygon(_corners(b1)), Polygon(_corners(b2))
    if p.area < 1e-14 or q.area < 1e-14:
        return 0.0
    inter = p.intersection(q).area
    return inter / (p.area + q.area - inter)


def _boxes(n: int, rng: torch.Generator, spread: float = 20.0) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=rng, dtype=torch.float64) * spread
    wh = torch.rand(n, 2, generator=rng, dtype=torch.float64) * 8 + 1
    angle = (torch.rand(n, 1, generator=rng, dtype=torch.float64) - 0.5) * 720
    return torch.cat([xy, wh, angle], 1)


def _greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> list[int]:
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    keep: list[int] = []
    for i in order:
        if all(_iou(boxes[i], boxes[k]) <= threshold for k in keep):
            keep.append(i)
    return keep


def test_pairwise_iou_rotated_is_detectron2s(device, rng):
    b1, b2 = _boxes(12, rng), _boxes(9, rng)
    want = torch.tensor([[_iou(p, q) for q in b2] for p in b1], dtype=torch.float64)
    got = d2.pairwise_iou_rotated(b1.to(device), b2.to(device)).cpu()
    torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-7)
    got32 = d2.pairwise_iou_rotated(b1.float().to(device), b2.float().to(device)).cpu()
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), want, atol=2e-4, rtol=1e-4)


def test_counter_clockwise_is_not_mmcvs_clockwise(device):
    """The same numbers are different boxes in mmcv's default (clockwise) convention: the adapter must not be the
    identity on the angle's sign (a 30-degree box against a -30-degree one overlaps partly, against itself fully)."""
    a = torch.tensor([[0.0, 0.0, 10.0, 2.0, 30.0]], dtype=torch.float64, device=device)
    b = torch.tensor([[3.0, 1.7, 10.0, 2.0, 30.0]], dtype=torch.float64, device=device)
    want = _iou(a[0].cpu(), b[0].cpu())
    assert abs(float(d2.pairwise_iou_rotated(a, b)) - want) < 1e-9
    flipped = _iou(a[0].cpu() * torch.tensor([1, 1, 1, 1, -1.0]), b[0].cpu() * torch.tensor([1, 1, 1, 1, -1.0]))
    assert abs(want - flipped) > 0.1, "the test boxes must tell the two conventions apart"


def test_nms_rotated_is_greedy_nms_on_detectron2s_iou(device, rng):
    boxes = _boxes(40, rng, spread=12.0)
    scores = torch.rand(40, generator=rng, dtype=torch.float64)
    for threshold in (0.1, 0.5):
        keep = d2.nms_rotated(boxes.to(device), scores.to(device), threshold)
        assert keep.dtype == torch.int64
        assert keep.cpu().tolist() == _greedy_nms(boxes, scores, threshold)


def test_nms_rotated_at_0_and_90_degrees_is_torchvisions_nms(device, rng):
    tv_ops = torchvision_or_skip()
    boxes = _boxes(200, rng, spread=30.0).float()
    boxes[:, 4] = 0
    scores = torch.rand(200, generator=rng)
    xyxy = torch.cat([boxes[:, :2] - boxes[:, 2:4] / 2, boxes[:, :2] + boxes[:, 2:4] / 2], 1)
    want = tv_ops.nms(xyxy, scores, 0.5)
    torch.testing.assert_close(d2.nms_rotated(boxes.to(device), scores.to(device), 0.5).cpu(), want)
    turned = boxes[:, [0, 1, 3, 2, 4]].clone()
    turned[:, 4] = 90.0
    torch.testing.assert_close(d2.nms_rotated(turned.to(device), scores.to(device), 0.5).cpu(), want)


def test_batched_nms_rotated_keeps_categories_apart(device, rng):
    boxes = _boxes(30, rng, spread=8.0)
    scores = torch.rand(30, generator=rng, dtype=torch.float64)
    idxs = torch.randint(0, 3, (30,), generator=rng)
    want = []
    for c in range(3):
        members = (idxs == c).nonzero().flatten().tolist()
        want += [members[i] for i in _greedy_nms(boxes[members], scores[members], 0.3)]
    want.sort(key=lambda i: -float(scores[i]))
    got = d2.batched_nms_rotated(boxes.to(device), scores.to(device), idxs.to(device), 0.3)
    assert got.cpu().tolist() == want


def _roi_align_rotated_detectron2(x: torch.Tensor, rois: torch.Tensor, out_hw, scale: float, ratio: int):
    """detectron2's ROIAlignRotated_cpu.cpp forward in float64: offset 0.5, degrees, counter-clockwise."""
    x, rois = x.double(), rois.double()
    ph, pw = out_hw
    n, c, height, width = x.shape
    out = x.new_zeros(len(rois), c, ph, pw)
    for k, roi in enumerate(rois):
        b = int(roi[0])
        cw, ch = float(roi[1]) * scale - 0.5, float(roi[2]) * scale - 0.5
        rw, rh = float(roi[3]) * scale, float(roi[4]) * scale
        theta = float(roi[5]) * math.pi / 180.0
        ct, st = math.cos(theta), math.sin(theta)
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        count = max(gh * gw, 1)
        for i in range(ph):
            for j in range(pw):
                acc = x.new_zeros(c)
                for iy in range(gh):
                    yy = -rh / 2 + i * rh / ph + (iy + 0.5) * rh / ph / gh
                    for ix in range(gw):
                        xx = -rw / 2 + j * rw / pw + (ix + 0.5) * rw / pw / gw
                        y = yy * ct - xx * st + ch
                        xq = yy * st + xx * ct + cw
                        if y < -1.0 or y > height or xq < -1.0 or xq > width:
                            continue
                        y, xq = max(y, 0.0), max(xq, 0.0)
                        y0, x0 = int(y), int(xq)
                        if y0 >= height - 1:
                            y0 = y1 = height - 1
                            y = float(y0)
                        else:
                            y1 = y0 + 1
                        if x0 >= width - 1:
                            x0 = x1 = width - 1
                            xq = float(x0)
                        else:
                            x1 = x0 + 1
                        ly, lx = y - y0, xq - x0
                        hy, hx = 1 - ly, 1 - lx
                        f = x[b]
                        acc += hy * hx * f[:, y0, x0] + hy * lx * f[:, y0, x1] + ly * hx * f[:, y1, x0]
                        acc += ly * lx * f[:, y1, x1]
                out[k, :, i, j] = acc / count
    return out


def test_roi_align_rotated_is_detectron2s(device, rng):
    x = torch.rand(2, 3, 12, 14, generator=rng, dtype=torch.float64)
    rois = torch.tensor(
        [[0, 6.0, 5.0, 6.0, 4.0, 0.0], [1, 7.3, 6.1, 5.5, 3.2, 30.0], [0, 2.0, 3.0, 9.0, 7.0, -135.0]],
        dtype=torch.float64,
    )
    for ratio in (0, 2):
        want = _roi_align_rotated_detectron2(x, rois, (3, 4), 0.75, ratio)
        module = d2.ROIAlignRotated((3, 4), 0.75, ratio)
        torch.testing.assert_close(module(x.to(device), rois.to(device)).cpu(), want, atol=1e-10, rtol=1e-9)
        fn = d2.roi_align_rotated(x.to(device), rois.to(device), (3, 4), 0.75, ratio)
        torch.testing.assert_close(fn.cpu(), want, atol=1e-10, rtol=1e-9)
    assert (
        repr(d2.ROIAlignRotated(7, 0.5, 2))
        == "ROIAlignRotated(output_size=(7, 7), spatial_scale=0.5, sampling_ratio=2)"
    )


def test_roi_align_rotated_gradient(device, rng):
    x = torch.rand(1, 2, 6, 7, generator=rng, dtype=torch.float64).to(device).requires_grad_()
    rois = torch.tensor([[0, 3.0, 3.0, 4.0, 3.0, 20.0]], dtype=torch.float64, device=device)
    # The CUDA backward accumulates with atomics (docs/ops.md): two runs may round differently.
    assert torch.autograd.gradcheck(lambda t: d2.ROIAlignRotated(2, 1.0, 2)(t, rois), (x,), nondet_tol=1e-12)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: d2.pairwise_iou_rotated(torch.zeros(3, 4), torch.zeros(2, 5)), r"boxes1 must have shape \[K, 5\]"),
        (lambda: d2.nms_rotated(torch.zeros(3, 5, dtype=torch.int64), torch.zeros(3), 0.5), "boxes must be a floating"),
        (lambda: d2.ROIAlignRotated(2, 1.0, 0)(torch.zeros(1, 1, 4, 4), torch.zeros(2, 5)), r"rois must have shape"),
        (lambda: d2.ROIAlignRotated(0, 1.0, 0), "output_size"),
        (lambda: d2.pairwise_iou_rotated([1, 2, 3, 4, 5], torch.zeros(2, 5)), "boxes1 must be a torch.Tensor"),
    ],
)
def test_bad_inputs_name_the_argument(call, message):
    with pytest.raises((TypeError, ValueError, RuntimeError), match=message):
        call()
