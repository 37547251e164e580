"""soft_nms (its own op folder and module since the stable-ABI port; the other NMS ops are in test_nms.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import visdet_ops
from visdet_ops.reference.nms import soft_nms_reference

from .test_nms import random_boxes, random_classes


def assert_soft_nms(got, want_inds, want_scores, dtype):
    dets, inds = got
    assert inds.dtype == torch.long and dets.dtype == dtype
    assert inds.cpu().tolist() == want_inds.tolist()
    tol = {torch.float64: 1e-10, torch.float32: 1e-5}.get(dtype, 2e-2)
    torch.testing.assert_close(dets[:, 4].cpu().double(), want_scores, rtol=tol, atol=tol)


@pytest.mark.parametrize("method", ["naive", "linear", "gaussian"])
@pytest.mark.parametrize("n", [1, 40, 300])
@pytest.mark.parametrize("offset", [0, 1])
def test_soft_nms_matches_reference(device, rng, method, n, offset):
    boxes, scores = random_boxes(n, rng)
    want = soft_nms_reference(boxes, scores, 0.3, 0.5, 1e-3, method, offset)
    got = visdet_ops.soft_nms(boxes.to(device), scores.to(device), 0.3, 0.5, 1e-3, method, offset)
    assert_soft_nms(got, *want, torch.float64)
    torch.testing.assert_close(got[0][:, :4].cpu(), boxes[want[0]])


@pytest.mark.parametrize("method", ["linear", "gaussian"])
def test_soft_nms_float32(device, rng, method):
    # 60 boxes: two decayed scores within float32 rounding of each other (which
    # could legitimately swap the pick order) are improbable.
    boxes, scores = random_boxes(60, rng)
    want = soft_nms_reference(boxes, scores, 0.4, 0.5, 0.01, method)
    got = visdet_ops.soft_nms(boxes.float().to(device), scores.float().to(device), 0.4, 0.5, 0.01, method)
    assert_soft_nms(got, *want, torch.float32)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_soft_nms_reduced_precision(device, rng, half):
    boxes, scores = random_boxes(30, rng)
    b, s = boxes.to(half), scores.to(half)
    want_inds, want_scores = soft_nms_reference(b.double(), s.double(), 0.3, 0.5, 0.01, "linear")
    dets, inds = visdet_ops.soft_nms(b.to(device), s.to(device), 0.3, 0.5, 0.01, "linear")
    assert dets.dtype == half
    # Scores are computed in float32 and rounded once at the end; the float64 reference rounded
    # to `half` can land on the other side of a rounding boundary: one unit in the last place.
    eps = torch.finfo(half).eps
    torch.testing.assert_close(dets[:, 4].cpu().double(), want_scores.to(half).double(), rtol=eps, atol=0)
    assert sorted(inds.cpu().tolist()) == sorted(want_inds.tolist())


def test_soft_nms_large_single_class(device, rng):
    """More boxes than one CUDA block has threads, and (float64, 6000 boxes)
    more working scores than fit a 48 KiB shared-memory default."""
    boxes, scores = random_boxes(6000, rng)
    boxes = boxes * 8  # spread out: fewer overlaps, a faster reference
    want = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.2, "linear")
    assert_soft_nms(visdet_ops.soft_nms(boxes.to(device), scores.to(device), 0.3, 0.5, 0.2), *want, torch.float64)


def test_soft_nms_min_score_zero_keeps_naive_zeros(device, rng):
    # naive with min_score=0: suppressed boxes stay, with score 0 (mmcv).
    boxes, scores = random_boxes(80, rng)
    want = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.0, "naive")
    got = visdet_ops.soft_nms(boxes.to(device), scores.to(device), 0.3, 0.5, 0.0, "naive")
    assert_soft_nms(got, *want, torch.float64)
    assert got[1].numel() == 80 and (got[0][:, 4] == 0).any()


def test_soft_nms_nan_inf_and_ties(device, rng):
    boxes, scores = random_boxes(100, rng)
    boxes[3] = float("nan")
    boxes[5, 2] = float("inf")
    scores[7] = float("nan")
    scores[10:20] = 0.5  # ties: lower index first
    for method in ("naive", "linear", "gaussian"):
        want = soft_nms_reference(boxes, scores, 0.3, 0.5, 1e-3, method)
        got = visdet_ops.soft_nms(boxes.to(device), scores.to(device), 0.3, 0.5, 1e-3, method)
        assert 7 not in got[1].tolist()
        assert_soft_nms(got, *want, torch.float64)


def test_soft_nms_numpy_and_empty(device, rng):
    boxes, scores = random_boxes(20, rng)
    dets, inds = visdet_ops.soft_nms(boxes.numpy(), scores.numpy())
    assert isinstance(dets, np.ndarray) and isinstance(inds, np.ndarray)
    dets, inds = visdet_ops.soft_nms(torch.empty(0, 4, device=device), torch.empty(0, device=device))
    assert dets.shape == (0, 5) and inds.shape == (0,) and inds.dtype == torch.long


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "cubic"}, "method must be 'naive', 'linear' or 'gaussian', got 'cubic'"),
        ({"offset": 2}, "offset must be 0 or 1"),
        ({"method": "gaussian", "sigma": 0.0}, "sigma must be > 0"),
        ({"min_score": float("nan")}, "min_score must be a number"),
    ],
)
def test_soft_nms_op_bad_args(device, kwargs, match):
    args = {"iou_threshold": 0.3, "sigma": 0.5, "min_score": 0.001, "method": "linear", "offset": 0} | kwargs
    with pytest.raises(RuntimeError, match=match):
        torch.ops.visdet_ops.soft_nms(torch.zeros(3, 4, device=device), torch.zeros(3, device=device), **args)


def test_soft_nms_opcheck(device, rng):
    boxes, scores = random_boxes(60, rng)
    idxs = random_classes(60, 3, rng)
    op = torch.ops.visdet_ops.soft_nms.default
    torch.library.opcheck(op, (boxes.to(device), scores.to(device), 0.3, 0.5, 1e-3, "linear", 0))
    torch.library.opcheck(op, (boxes.to(device), scores.to(device), 0.3, 0.5, 1e-3, "gaussian", 0, idxs.to(device)))


def test_soft_nms_method_is_a_string():
    """The schema's method is `str method` ('naive', 'linear', 'gaussian'), as the Python wrapper's; an unknown
    one, or mmcv's integer numbering, is refused naming the argument, eagerly and by the fake impl."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    boxes, scores = torch.zeros(3, 4), torch.zeros(3)
    with pytest.raises(RuntimeError, match="soft_nms: method must be 'naive', 'linear' or 'gaussian', got ''"):
        torch.ops.visdet_ops.soft_nms(boxes, scores, 0.3, 0.5, 1e-3, "", 0)
    with pytest.raises((RuntimeError, TypeError)):
        torch.ops.visdet_ops.soft_nms(boxes, scores, 0.3, 0.5, 1e-3, 1, 0)
    with FakeTensorMode():
        with pytest.raises(
            RuntimeError, match="soft_nms: method must be 'naive', 'linear' or 'gaussian', got 'Linear'"
        ):
            torch.ops.visdet_ops.soft_nms(torch.empty(3, 4), torch.empty(3), 0.3, 0.5, 1e-3, "Linear", 0)
    with pytest.raises(ValueError, match="soft_nms: method must be one of"):
        visdet_ops.soft_nms(boxes, scores, method="cubic")


# soft_nms under autocast: tests/ops/test_nms.py's test_nms_family_under_autocast (indices equal the float32 ones)
# and its test_opcheck_under_autocast cover it with the other NMS ops, as do its integer-edge rows.
AUTOCAST_COVERED_OTHERWISE = {"soft_nms": "tests/ops/test_nms.py::test_nms_family_under_autocast"}
