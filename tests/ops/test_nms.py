from __future__ import annotations

import numpy as np
import pytest
import torch

import visdet_ops
from visdet_ops.reference.nms import nms_reference

from ..conftest import torchvision_or_skip


def random_boxes(n: int, rng: torch.Generator, quantized: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Boxes on a 1/8-pixel grid below 128 px: IoU terms are exact in float32
    and float64, so every device and the reference must agree index for index."""
    xy = torch.rand(n, 2, generator=rng, dtype=torch.float64) * 96
    wh = torch.rand(n, 2, generator=rng, dtype=torch.float64) * 30 + 0.5
    boxes = torch.cat([xy, xy + wh], dim=1)
    if quantized:
        boxes = (boxes * 8).round() / 8
    # Scores representable in float32, so that a float32 run sorts exactly the
    # values the float64 reference sorts (two float64 scores that round to one
    # float32 would otherwise swap places).
    scores = torch.rand(n, generator=rng, dtype=torch.float64).float().double()
    return boxes, scores


@pytest.mark.parametrize("n", [1, 7, 64, 65, 300, 1000])
@pytest.mark.parametrize("iou", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("offset", [0, 1])
def test_nms_matches_reference(device, dtype, rng, n, iou, offset):
    boxes, scores = random_boxes(n, rng)
    want = nms_reference(boxes, scores, iou, offset)
    dets, inds = visdet_ops.nms(boxes.to(device, dtype), scores.to(device, dtype), iou, offset=offset)
    assert inds.dtype == torch.long and inds.device.type == device.type
    assert inds.cpu().tolist() == want.tolist()
    torch.testing.assert_close(dets.cpu(), torch.cat([boxes, scores[:, None]], 1)[want].to(dtype))


def test_nms_unquantized_float64(device, rng):
    boxes, scores = random_boxes(500, rng, quantized=False)
    iou = float(torch.rand(1, generator=rng)) * 0.8 + 0.1
    _, inds = visdet_ops.nms(boxes.to(device), scores.to(device), iou)
    assert inds.cpu().tolist() == nms_reference(boxes, scores, iou).tolist()


def test_nms_ties_are_stable(device, rng):
    boxes, _ = random_boxes(200, rng)
    scores = (torch.rand(200, generator=rng, dtype=torch.float64) * 4).floor() / 4  # many ties
    _, inds = visdet_ops.nms(boxes.to(device), scores.to(device), 0.5)
    assert inds.cpu().tolist() == nms_reference(boxes, scores, 0.5).tolist()


def test_nms_against_torchvision(device, rng):
    tv = torchvision_or_skip()
    boxes, scores = random_boxes(800, rng)
    boxes, scores = boxes.float().to(device), scores.float().to(device)
    _, inds = visdet_ops.nms(boxes, scores, 0.5)
    assert inds.tolist() == tv.nms(boxes, scores, 0.5).tolist()


def test_nms_score_threshold_and_max_num(device, rng):
    boxes, scores = random_boxes(300, rng)
    boxes, scores = boxes.to(device), scores.to(device)
    dets, inds = visdet_ops.nms(boxes, scores, 0.5, score_threshold=0.3, max_num=10)
    valid = torch.nonzero(scores.cpu() > 0.3).squeeze(1)
    want = valid[nms_reference(boxes.cpu()[valid], scores.cpu()[valid], 0.5)][:10]
    assert inds.cpu().tolist() == want.tolist()
    assert dets.shape == (len(want), 5)
    torch.testing.assert_close(dets[:, 4].cpu(), scores.cpu()[want])


def test_nms_numpy_in_numpy_out(rng):
    boxes, scores = random_boxes(50, rng)
    dets, inds = visdet_ops.nms(boxes.float().numpy(), scores.float().numpy(), 0.5)
    assert isinstance(dets, np.ndarray) and isinstance(inds, np.ndarray)
    assert inds.tolist() == nms_reference(boxes, scores, 0.5).tolist()


def test_nms_empty(device, dtype):
    dets, inds = visdet_ops.nms(
        torch.empty(0, 4, device=device, dtype=dtype), torch.empty(0, device=device, dtype=dtype), 0.5
    )
    assert dets.shape == (0, 5) and dets.dtype == dtype
    assert inds.shape == (0,) and inds.dtype == torch.long


def test_nms_non_contiguous(device, rng):
    boxes, scores = random_boxes(200, rng)
    wide = torch.zeros(200, 8, dtype=torch.float64)
    wide[:, ::2] = boxes  # stride-2 columns
    strided_scores = torch.stack([scores, scores], 1)[:, 0]
    b, s = wide[:, ::2].to(device), strided_scores.to(device)
    if device.type == "cpu":
        assert not b.is_contiguous() and not s.is_contiguous()
    _, inds = visdet_ops.nms(b, s, 0.5)
    assert inds.cpu().tolist() == nms_reference(boxes, scores, 0.5).tolist()


def test_nms_nan_and_inf_do_not_crash(device, rng):
    boxes, scores = random_boxes(100, rng)
    boxes[3] = float("nan")
    boxes[5, 2] = float("inf")
    scores[7] = float("nan")
    _, inds = visdet_ops.nms(boxes.to(device), scores.to(device), 0.5)
    assert inds.numel() > 0 and len(set(inds.tolist())) == inds.numel()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: (torch.zeros(5, 3, device=d), torch.zeros(5, device=d)), r"boxes must have shape \[N, 4\]"),
        (lambda d: (torch.zeros(5, 4, device=d), torch.zeros(4, device=d)), r"scores must have shape \[N\]"),
        (
            lambda d: (torch.zeros(5, 4, device=d, dtype=torch.int32), torch.zeros(5, device=d, dtype=torch.int32)),
            "boxes must be a floating point tensor",
        ),
        (
            lambda d: (torch.zeros(5, 4, device=d), torch.zeros(5, device=d, dtype=torch.float64)),
            "boxes and scores must have the same dtype",
        ),
        (lambda d: (torch.zeros(5, 4, device=d), torch.zeros(5, 1, device=d)), "scores must have 1 dimensions"),
    ],
)
def test_nms_bad_inputs(device, make, match):
    boxes, scores = make(device)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.nms(boxes, scores, 0.5)


def test_nms_bad_offset():
    with pytest.raises(ValueError, match="offset must be 0 or 1"):
        visdet_ops.nms(torch.zeros(2, 4), torch.zeros(2), 0.5, offset=2)
    with pytest.raises(RuntimeError, match="offset must be 0 or 1, got 3"):
        torch.ops.visdet_ops.nms(torch.zeros(2, 4), torch.zeros(2), 0.5, 3)


def test_nms_devices_must_match():
    from ..conftest import require_cuda

    require_cuda()
    with pytest.raises(RuntimeError, match="boxes and scores must be on the same device"):
        torch.ops.visdet_ops.nms(torch.zeros(2, 4, device="cuda"), torch.zeros(2), 0.5, 0)


def test_nms_opcheck(device, rng):
    boxes, scores = random_boxes(100, rng)
    torch.library.opcheck(torch.ops.visdet_ops.nms.default, (boxes.to(device), scores.to(device), 0.5, 0))
