from __future__ import annotations

import math

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops.ops._examples import clear_threshold
from visdet_ops.reference.box_iou_rotated import box_iou_rotated_reference
from visdet_ops.reference.nms_rotated import nms_rotated_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import require_cuda
from ._boxes import check_keep, refused_capture
from .test_box_iou_rotated import random_boxes as rotated_boxes


def random_boxes(n: int, rng: torch.Generator, density: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """n rotated boxes (x, y, w, h, angle) of 4-40 px sides, angles in [-2 pi, 2 pi), about `density` neighbours
    each, and scores exact in float32 (a float32 run sorts what the float64 reference sorts)."""
    boxes = rotated_boxes(n, rng, span=30 * math.sqrt(max(n, 1) / density), turns=2, sides=(4.0, 40.0))
    return boxes, torch.rand(n, generator=rng, dtype=torch.float64).float().double()


def clear(boxes: torch.Tensor, iou: float, clockwise: bool = True, margin: float = 1e-5) -> float:
    """iou, or the nearest threshold next to it that no IoU of the boxes lies within `margin` of (such an IoU may
    fall on either side of it in float32: not an error)."""
    ious = box_iou_rotated_reference(boxes, boxes, clockwise=clockwise)
    ious = ious[~torch.eye(len(boxes), dtype=torch.bool)]
    return clear_threshold(ious, [iou + 0.0031 * k * (-1) ** k for k in range(40)], margin)


def keep_of(dets, scores, iou, labels=None, clockwise=True, device="cpu", dtype=torch.float64):
    out, keep = visdet_ops.nms_rotated(dets.to(device, dtype), scores.to(device, dtype), iou, labels, clockwise)
    assert keep.dtype == torch.long and keep.device.type == torch.device(device).type
    assert out.shape == (len(keep), 6)
    return keep.cpu().tolist()


@pytest.mark.parametrize("n", [1, 7, 64, 65, 300, 1000])
@pytest.mark.parametrize("iou", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("clockwise", [True, False])
def test_matches_reference(device, dtype, rng, n, iou, clockwise):
    boxes, scores = random_boxes(n, rng, density=3)
    boxes = boxes.to(dtype).double()
    iou = clear(boxes, iou, clockwise)
    want = nms_rotated_reference(boxes, scores, iou, clockwise=clockwise)
    dets, keep = visdet_ops.nms_rotated(boxes.to(device, dtype), scores.to(device, dtype), iou, clockwise=clockwise)
    assert keep.cpu().tolist() == want.tolist()
    torch.testing.assert_close(dets.cpu(), torch.cat([boxes, scores[:, None]], 1)[want].to(dtype))


@pytest.mark.parametrize("n", [1, 100, 700])
@pytest.mark.parametrize("num_classes", [1, 3, 80])
def test_labels_and_batched_nms_rotated(device, dtype, rng, n, num_classes):
    boxes, scores = random_boxes(n, rng, density=4)
    boxes = boxes.to(dtype).double()
    labels = torch.randint(0, num_classes, (n,), generator=rng)
    iou = clear(boxes, 0.4)
    want = nms_rotated_reference(boxes, scores, iou, labels).tolist()
    assert keep_of(boxes, scores, iou, labels.to(device), device=device, dtype=dtype) == want
    got = visdet_ops.batched_nms_rotated(boxes.to(device, dtype), scores.to(device, dtype), labels.to(device), iou)
    assert got.dtype == torch.long and got.cpu().tolist() == want
    # Classes by value, as mmcv's float labels: floating and bool, and integer labels of any dtype.
    for other in (labels.float() * 2.5 - 1, labels.to(torch.int32), labels.double()):
        assert keep_of(boxes, scores, iou, other.to(device), device=device, dtype=dtype) == want
    two = labels % 2
    want = nms_rotated_reference(boxes, scores, iou, two).tolist()
    assert keep_of(boxes, scores, iou, two.bool().to(device), device=device, dtype=dtype) == want


# The boxes of mmcv's tests (tests/test_ops/test_nms_rotated.py, v2.2.0): (x, y, w, h, angle, score).
MMCV_BOXES = torch.tensor(
    [
        [6.0, 3.0, 8.0, 7.0, 0.5, 0.7],
        [3.0, 6.0, 9.0, 11.0, 0.6, 0.8],
        [3.0, 7.0, 10.0, 12.0, 0.3, 0.5],
        [1.0, 4.0, 13.0, 7.0, 0.6, 0.9],
    ]
)
MMCV_LABELS = torch.tensor([1.0, 0.0, 1.0, 0.0])


def test_mmcv_nms_rotated_case(device):
    boxes = MMCV_BOXES.to(device)
    want = torch.tensor([[1.0, 4.0, 13.0, 7.0, 0.6], [3.0, 6.0, 9.0, 11.0, 0.6], [6.0, 3.0, 8.0, 7.0, 0.5]])
    # clockwise=False on the boxes with negated angles: the same boxes
    for clockwise, flip in ((True, 1.0), (False, torch.tensor([1.0, 1, 1, 1, -1], device=device))):
        dets, keep = visdet_ops.nms_rotated(boxes[:, :5] * flip, boxes[:, -1], 0.5, clockwise=clockwise)
        assert keep.cpu().tolist() == [3, 1, 0]
        torch.testing.assert_close((dets[:, :5] * flip).cpu(), want)


def test_mmcv_labels_case_is_class_aware(device):
    """mmcv's test_ml_nms_rotated expects [3, 1, 0] with labels [1, 0, 1, 0]: mmcv's CPU and CUDA kernels ignore
    the labels (they read the [N, 6] rows with labels but never compare them; only its NPU kernel uses them). Here
    labels are class-aware, as documented: box 2 (label 1) is suppressed only by box 1 (label 0, IoU 0.717), so it
    is kept (docs/migration.md, "Deliberate differences")."""
    boxes = MMCV_BOXES.to(device)
    _, keep = visdet_ops.nms_rotated(boxes[:, :5], boxes[:, -1], 0.5, MMCV_LABELS.to(device))
    assert keep.cpu().tolist() == [3, 1, 0, 2]
    assert keep.cpu().tolist() == nms_rotated_reference(MMCV_BOXES[:, :5], MMCV_BOXES[:, -1], 0.5, MMCV_LABELS).tolist()


def test_mmcv_batched_nms_case(device):
    """mmcv's test_batched_nms (type nms_rotated), through visdet_ops.batched_nms: CPU tensors, float labels."""
    boxes, labels = MMCV_BOXES.to(device), MMCV_LABELS.to(device)
    cfg = dict(type="nms_rotated", iou_threshold=0.5)
    for class_agnostic, want in ((True, [3, 1, 0]), (False, [3, 1, 0, 2])):
        dets, keep = visdet_ops.batched_nms(boxes[:, :5], boxes[:, -1], labels, cfg, class_agnostic=class_agnostic)
        assert keep.cpu().tolist() == want and dets.shape == (len(want), 6)
        torch.testing.assert_close(dets.cpu(), MMCV_BOXES[want])
    assert cfg == dict(type="nms_rotated", iou_threshold=0.5)


def test_ties_are_stable(device, rng):
    boxes, _ = random_boxes(200, rng, density=3)
    scores = (torch.rand(200, generator=rng, dtype=torch.float64) * 4).floor() / 4  # many ties
    iou = clear(boxes, 0.5)
    assert keep_of(boxes, scores, iou, device=device) == nms_rotated_reference(boxes, scores, iou).tolist()


def test_thresholds_at_the_edges(device, dtype, rng):
    """IoU > threshold suppresses, whatever the threshold: below 0 every box behind the first goes (disjoint and
    degenerate ones too: their IoU is 0), at 0 exactly the overlapping ones, at 1 and above none (equal boxes have
    IoU exactly 1, which is not > 1)."""
    boxes, scores = random_boxes(50, rng, density=2)
    boxes = torch.cat([boxes, boxes[:5], torch.tensor([[5.0, 5, 0, 3, 0.1]], dtype=torch.float64)])
    scores = torch.cat([scores, scores[:5] / 2, torch.tensor([0.999], dtype=torch.float64)])
    order = torch.sort(scores, descending=True, stable=True).indices
    assert keep_of(boxes, scores, -0.5, device=device, dtype=dtype) == order[:1].tolist()
    for iou in (0.0, 1.0, 1.5):
        assert (
            keep_of(boxes, scores, iou, device=device, dtype=dtype)
            == nms_rotated_reference(boxes, scores, iou).tolist()
        )
    assert len(keep_of(boxes, scores, 1.0, device=device, dtype=dtype)) == len(boxes)
    assert len(keep_of(boxes, scores, 0.999, device=device, dtype=dtype)) == len(boxes) - 5  # the copies


def test_degenerate_and_nan_boxes(device, dtype):
    """A degenerate box (w * h < 1e-14) has IoU 0: it neither suppresses nor is suppressed for a threshold >= 0.
    A NaN box has IoU NaN, which never suppresses: it is kept and suppresses nothing, for any threshold."""
    boxes = torch.tensor(
        [[10.0, 10, 4, 4, 0.2], [10, 10, 0, 4, 0.2], [10, 10, 4, 4, float("nan")], [10.2, 10, 4, 4, 0.2]],
        dtype=torch.float64,
    )
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6], dtype=torch.float64)
    assert keep_of(boxes, scores, 0.5, device=device, dtype=dtype) == [0, 1, 2]
    assert keep_of(boxes, scores, -1.0, device=device, dtype=dtype) == [0, 2]
    nan_first = torch.tensor([0.5, 0.8, 0.9, 0.6], dtype=torch.float64)
    assert keep_of(boxes, nan_first, 0.5, device=device, dtype=dtype) == [2, 1, 3]  # 3 suppresses 0


def test_large_coordinates_batched_nms_is_exact(device, rng):
    """Small boxes far from the origin, several classes: the class-aware kernel is exact in float32 where mmcv's
    offsets (centres moved by idx * (max coordinate + 1)) round the centres to steps of 1/4 px at 4e6."""
    boxes, scores = random_boxes(300, rng, density=6)
    boxes[:, 2:4] = boxes[:, 2:4] / 8 + 0.5
    boxes[:, :2] = boxes[:, :2] / 8 + 1e6
    boxes = boxes.float().double()
    idxs = torch.randint(0, 4, (300,), generator=rng)
    iou = clear(boxes, 0.3)
    want = nms_rotated_reference(boxes, scores, iou, idxs).tolist()
    cfg = dict(type="nms_rotated", iou_threshold=iou)
    _, keep = visdet_ops.batched_nms(boxes.float().to(device), scores.float().to(device), idxs.to(device), cfg)
    assert keep.cpu().tolist() == want


def test_empty(device, dtype):
    e = torch.empty(0, 5, device=device, dtype=dtype)
    s = torch.empty(0, device=device, dtype=dtype)
    dets, keep = visdet_ops.nms_rotated(e, s, 0.5)
    assert dets.shape == (0, 6) and dets.dtype == dtype and keep.shape == (0,) and keep.dtype == torch.long
    assert visdet_ops.nms_rotated(e, s, 0.5, torch.empty(0, dtype=torch.long, device=device))[1].numel() == 0
    assert visdet_ops.batched_nms_rotated(e, s, torch.empty(0, device=device), 0.5).shape == (0,)
    dets, keep = visdet_ops.batched_nms(
        e, s, torch.empty(0, device=device), dict(type="nms_rotated", iou_threshold=0.5)
    )
    assert dets.shape == (0, 6) and keep.shape == (0,)


def test_non_contiguous(device, rng):
    boxes, scores = random_boxes(150, rng, density=3)
    iou = clear(boxes, 0.5)
    wide = torch.full((150, 10), float("nan"), dtype=torch.float64)
    wide[:, ::2] = boxes
    s = torch.stack([scores, scores], 1)[:, 1]
    _, keep = visdet_ops.nms_rotated(wide[:, ::2].to(device), s.to(device), iou)
    assert keep.cpu().tolist() == nms_rotated_reference(boxes, scores, iou).tolist()


@pytest.mark.parametrize(
    "box_dtype, score_dtype, n, margin",
    [
        (torch.float16, torch.float16, 200, 1e-4),
        (torch.bfloat16, torch.bfloat16, 200, 1e-4),
        # float32 boxes beside 16-bit scores (an AMP step's outputs): the scores may have another dtype.
        (torch.float32, torch.float16, 100, 1e-5),
    ],
    ids=["f16", "bf16", "f32_boxes_f16_scores"],
)
def test_reduced_precision(device, rng, box_dtype, score_dtype, n, margin):
    boxes, scores = random_boxes(n, rng, density=3)
    b, s = boxes.to(box_dtype), scores.to(score_dtype)
    iou = clear(b.double(), 0.5, margin=margin)
    dets, keep = visdet_ops.nms_rotated(b.to(device), s.to(device), iou)
    assert dets.dtype == box_dtype
    # computed in float32 from the rounded values
    assert keep.cpu().tolist() == nms_rotated_reference(b.double(), s.double(), iou).tolist()


def test_cpu_threads_agree(rng):
    """The CPU kernel's parallel tests of later boxes against each block's kept rows give the one-thread result."""
    boxes, scores = random_boxes(3000, rng, density=8)
    iou = 0.3
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = visdet_ops.nms_rotated(boxes, scores, iou)[1]
        torch.set_num_threads(max(saved, 4))
        many = visdet_ops.nms_rotated(boxes, scores, iou)[1]
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(one, many)


def test_no_gradient_of_keep(rng):
    boxes, scores = random_boxes(20, rng)
    boxes.requires_grad_()
    dets, keep = visdet_ops.nms_rotated(boxes, scores, 0.5)
    assert not keep.requires_grad
    dets.sum().backward()  # dets are rows of the input (as mmcv's dets[keep]): the gradient of a gather
    assert boxes.grad is not None and boxes.grad[keep].eq(1).all()


def test_opcheck(device, rng):
    boxes, scores = random_boxes(70, rng, density=3)
    b, s = boxes.to(device), scores.to(device)
    labels = torch.randint(0, 3, (70,), generator=rng).to(device)
    op = torch.ops.visdet_ops.nms_rotated.default
    torch.library.opcheck(op, (b, s, 0.5))
    torch.library.opcheck(op, (b, s, 0.5, labels, False))
    torch.library.opcheck(op, (b.float(), s.float(), 0.3, labels))


def test_compiles_fullgraph(rng):
    """The fake impl's unbacked size lets torch.compile capture the data-dependent output."""
    boxes, scores = random_boxes(60, rng, density=3)
    labels = torch.randint(0, 3, (60,), generator=rng)

    def f(b, s, c):
        keep = torch.ops.visdet_ops.nms_rotated(b, s, 0.5, None, True)
        return b[keep].sum(1), torch.ops.visdet_ops.nms_rotated(b, s, 0.5, c, False)

    # config.patch, not monkeypatch: see tests/ops/test_nms.py's test_nms_family_compiles_fullgraph.
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True)(boxes, scores, labels)
    for g, w in zip(got, f(boxes, scores, labels), strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: (torch.zeros(3, 4, device=d), torch.zeros(3, device=d)), r"dets must have shape \[N, 5\]"),
        (lambda d: (torch.zeros(3, 5, 1, device=d), torch.zeros(3, device=d)), "dets must have 2 dimensions"),
        (lambda d: (torch.zeros(3, 5, device=d), torch.zeros(4, device=d)), r"scores must have shape \[N\]"),
        (lambda d: (torch.zeros(3, 5, device=d), torch.zeros(3, 1, device=d)), "scores must have 1 dimensions"),
        (
            lambda d: (torch.zeros(3, 5, device=d, dtype=torch.int64), torch.zeros(3, device=d)),
            "dets must be a floating",
        ),
        (
            lambda d: (torch.zeros(3, 5, device=d), torch.zeros(3, device=d), 0.5, torch.zeros(4, device=d)),
            r"labels must have shape \[N\]",
        ),
        (
            lambda d: (torch.zeros(3, 5, device=d), torch.zeros(3, device=d), float("nan")),
            "iou_threshold must be a number",
        ),
    ],
)
def test_bad_inputs(device, make, match):
    args = make(device)
    if len(args) == 2:
        args = (*args, 0.5)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.nms_rotated(*args)


def test_op_takes_integer_labels_only(device):
    b, s = torch.zeros(3, 5, device=device), torch.zeros(3, device=device)
    with pytest.raises(RuntimeError, match="nms_rotated: labels must be an integer tensor"):
        torch.ops.visdet_ops.nms_rotated(b, s, 0.5, torch.zeros(3, device=device))


def test_devices_must_match():
    require_cuda()
    with pytest.raises(RuntimeError, match="dets and scores must be on the same device"):
        visdet_ops.nms_rotated(torch.zeros(3, 5).cuda(), torch.zeros(3), 0.5)
    with pytest.raises(RuntimeError, match="dets and labels must be on the same device"):
        torch.ops.visdet_ops.nms_rotated(torch.zeros(3, 5).cuda(), torch.zeros(3).cuda(), 0.5, torch.zeros(3).long())


# ---------------------------------------------------------------- batched_nms(nms_cfg type 'nms_rotated')


def test_batched_nms_class_agnostic_and_max_num(device, rng):
    boxes, scores = random_boxes(300, rng, density=3)
    idxs = torch.randint(0, 5, (300,), generator=rng)
    iou = clear(boxes, 0.5)
    cfg = dict(type="nms_rotated", iou_threshold=iou)
    b, s, i = boxes.to(device), scores.to(device), idxs.to(device)
    _, keep = visdet_ops.batched_nms(b, s, i, cfg, class_agnostic=True)
    assert keep.cpu().tolist() == nms_rotated_reference(boxes, scores, iou).tolist()
    _, keep = visdet_ops.batched_nms(b, s, i, dict(cfg, class_agnostic=True))
    assert keep.cpu().tolist() == nms_rotated_reference(boxes, scores, iou).tolist()
    want = nms_rotated_reference(boxes, scores, iou, idxs)
    dets, keep = visdet_ops.batched_nms(b, s, i, dict(cfg, max_num=7))
    assert keep.cpu().tolist() == want[:7].tolist() and dets.shape == (7, 6)
    torch.testing.assert_close(dets[:, 5].cpu(), scores[want[:7]])
    flip = torch.tensor([1.0, 1, 1, 1, -1], dtype=torch.float64, device=device)
    _, keep = visdet_ops.batched_nms(b * flip, s, i, dict(cfg, clockwise=False))
    assert keep.cpu().tolist() == want.tolist()


def test_batched_nms_none_cfg_keeps_its_box_check(device, rng):
    """nms_cfg=None runs no op and checks [N, 4] boxes, as before rotated boxes came (tests/ops/test_nms.py's
    test_shapes_checked_before_indexing pins that); mmcv sorts any boxes there. Rotated boxes without suppression:
    sort the scores."""
    boxes, scores = random_boxes(30, rng)
    with pytest.raises(RuntimeError, match=r"batched_nms: boxes must have shape \[N, 4\], got \[30, 5\]"):
        visdet_ops.batched_nms(boxes.to(device), scores.to(device), None, None)


@pytest.mark.parametrize(
    "cfg, boxes, error, match",
    [
        (dict(type="nms_rotated"), 5, TypeError, "needs iou_threshold for type='nms_rotated'"),
        (dict(type="nms_rotated", iou_threshold=0.5, score_threshold=0.1), 5, TypeError, "not understood"),
        (dict(type="nms_rotated", iou_threshold=0.5, offset=1), 5, TypeError, "not understood"),
        (dict(type="nms_rotated", iou_threshold=0.5), 4, RuntimeError, r"boxes must have shape \[N, 5\]"),
        (dict(type="nms", iou_threshold=0.5), 5, RuntimeError, r"boxes must have shape \[N, 4\]"),
        (dict(type="rotated_nms", iou_threshold=0.5), 5, ValueError, "'nms', 'soft_nms' or 'nms_rotated'"),
    ],
)
def test_batched_nms_bad_rotated_cfg(cfg, boxes, error, match):
    with pytest.raises(error, match=match):
        visdet_ops.batched_nms(torch.rand(4, boxes) + 1, torch.rand(4), torch.zeros(4, dtype=torch.long), cfg)


@pytest.mark.parametrize("key", ["max_num", "split_thr"])
@pytest.mark.parametrize("value", sorted({*edges.VALUES, -(2**63), 1, 3, 50, 10000}))
def test_batched_nms_rotated_integer_keys(device, rng, key, value):
    """batched_nms' integer keys with type 'nms_rotated' take any value, as type 'nms' (tests/ops/test_nms.py's
    integer-edge rows of batched_nms): max_num <= 0 keeps all, split_thr <= 0 splits every class. Above split_thr,
    CUDA runs chunks of whole classes: the same result (the CPU takes every class at once)."""
    boxes, scores = random_boxes(400, rng, density=4)
    idxs = torch.randint(-2, 6, (400,), generator=rng)
    iou = clear(boxes, 0.4)
    cfg = {"type": "nms_rotated", "iou_threshold": iou, key: value}
    _, keep = visdet_ops.batched_nms(boxes.to(device), scores.to(device), idxs.to(device), cfg)
    want = nms_rotated_reference(boxes, scores, iou, idxs)
    if key == "max_num" and value > 0:
        want = want[:value]
    assert keep.cpu().tolist() == want.tolist()


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)

# nms_rotated and batched_nms_rotated have no integer argument (iou_threshold is a float, clockwise a bool): no
# rows. batched_nms' integer keys with type 'nms_rotated': test_batched_nms_rotated_integer_keys.
INTEGER_EDGE_ROWS: list = []


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


AUTOCAST_DISCRETE = ("nms_rotated", "batched_nms_rotated")


@pytest.mark.parametrize("op", AUTOCAST_DISCRETE)
@pytest.mark.parametrize("device_name, dtype", amp.AMP)
def test_nms_rotated_under_autocast(rng, op, device_name, dtype):
    """float32 boxes beside 16-bit scores (a Linear's output under autocast): the same indices as the float32 op on
    the same score values, float32 dets."""
    device = amp.device_for(device_name)
    boxes, _ = random_boxes(300, rng, density=3)
    boxes = boxes.float().to(device)
    feats = torch.randn(300, 16, generator=rng).to(device)
    head = amp.randomize(torch.nn.Linear(16, 1), rng, 0.5).to(device)
    idxs = torch.randint(0, 4, (300,), generator=rng).to(device)
    iou = clear(boxes.cpu().double(), 0.5)
    with torch.autocast(device.type, dtype=dtype):
        scores = head(feats).sigmoid().squeeze(1)
    assert scores.dtype == dtype and boxes.dtype == torch.float32

    def call(s, autocast_on):
        with torch.autocast(device.type, dtype=dtype, enabled=autocast_on):
            if op == "nms_rotated":
                return visdet_ops.nms_rotated(boxes, s, iou)
            return None, visdet_ops.batched_nms_rotated(boxes, s, idxs, iou)

    (got_dets, got_keep), (want_dets, want_keep) = call(scores, True), call(scores.float(), False)
    assert got_keep.dtype == torch.long and torch.equal(got_keep, want_keep)
    if got_dets is not None:
        assert got_dets.dtype == torch.float32
        torch.testing.assert_close(got_dets, want_dets, rtol=1e-6, atol=1e-6)
    # The raw op promotes under autocast too (boxes never rounded to 16 bits).
    with torch.autocast(device.type, dtype=dtype):
        raw = torch.ops.visdet_ops.nms_rotated(boxes.to(dtype), scores, iou)
    assert raw.dtype == torch.long


AUTOCAST_CASES: dict = {}
# Covered by test_nms_rotated_under_autocast (indices must equal the float32 ones), not by a float32 comparison.
AUTOCAST_COVERED_OTHERWISE = {name: "test_nms_rotated_under_autocast" for name in AUTOCAST_DISCRETE}


def _opcheck_nms_rotated(device, dtype, gen):
    boxes, _ = random_boxes(30, gen, density=3)
    scores = torch.rand(30, generator=gen).to(device, dtype)
    labels = torch.randint(0, 3, (30,), generator=gen).to(device)
    return torch.ops.visdet_ops.nms_rotated.default, (boxes.float().to(device), scores, 0.5, labels, True)


AUTOCAST_OPCHECKS = {"nms_rotated": _opcheck_nms_rotated}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_BAD = ("dets_cols", "dets_ndim", "scores_len", "labels_len", "labels_dtype", "iou_nan", "dets_dtype")
# IoU thresholds (any value is valid: <= 0 and >= 1 too).
_IOU = [0.5, 0.25, 0.75, 0.0, 1.0, -0.5, 0.1]


@st.composite
def _case(draw, device):
    # batched_nms: mmcv's batched_nms with nms_cfg type 'nms_rotated' (visdet_ops/ops/nms.py runs this family's op)
    fn = draw(st.sampled_from(["nms_rotated", "batched_nms_rotated", "batched_nms"]))
    bad = core.pick_bad(draw, _BAD)
    main = draw(st.sampled_from(core.FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": core.size(draw, 1, 70) if not draw(core.one_in(10)) else draw(st.integers(71, 300)),
        "iou": draw(st.sampled_from(_IOU)) if bad != "iou_nan" else float("nan"),
        "clockwise": draw(st.booleans()),
        "labels": fn != "nms_rotated" or draw(st.booleans()),
        "cfg": {
            k: v
            for k, v in (
                ("max_num", draw(st.sampled_from([None, -1, 0, 3]))),
                ("split_thr", draw(st.sampled_from([None, 10000, 5, 0]))),
                ("class_agnostic", draw(st.sampled_from([None, False, True]))),
            )
            if v is not None
        },
        "labels_dt": draw(st.sampled_from(["i64", "i64", "i32", "u8", "f32", "bool"])),
        "classes": draw(st.integers(1, 4)),
        "ties": draw(core.one_in(4)),
        "degenerate": draw(core.one_in(5)),
        "special": draw(core.one_in(10)),
        "density": draw(st.sampled_from([0.5, 2.0, 6.0])),
        "bad": bad,
    }
    if bad in ("labels_len", "labels_dtype"):
        case["labels"] = True
        case["cfg"].pop("class_agnostic", None)  # batched_nms uses (and checks) idxs only when class-aware
    lay = {"dets": ["c", "t", "s", "e"], "scores": ["c", "s", "e"]}
    case["t"], mixed = core.draw_tensors(draw, {"dets": 2, "scores": 1}, main, device, layouts=lay)
    if bad == "dets_dtype":
        case["t"]["dets"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    if bad == "labels_dtype":
        case["labels_dt"] = "c64"
    case["expect"] = core.expectation(bad, mixed, borderline=case["special"])
    return case


def _values(run: core.Run, case: dict, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    span = 30 * math.sqrt(max(n, 1) / case["density"])
    xy = (run.rand(n, 2) * span * 8).round() / 8
    wh = run.rand(n, 2) * 36 + 0.5
    angle = (run.rand(n, 1) * 4 - 2) * math.pi
    snap = run.rand(n, 1) < 0.3
    angle[snap] = (angle[snap] / (math.pi / 4)).round() * (math.pi / 4)
    boxes = torch.cat([xy, wh, angle], 1)
    if n > 3 and run.rand(1).item() < 0.3:
        boxes[n // 2] = boxes[0]  # an exact copy: IoU exactly 1
    if case["degenerate"] and n:
        boxes[::4, 2] = 0.0
    scores = core.f32_scores(run, n, ties=case["ties"])
    if case["special"] and n:
        boxes[n // 2, case["seed"] % 5] = float("nan")
        scores[(n - 1) // 3] = [float("nan"), float("inf"), -float("inf")][case["seed"] % 3]
    return boxes, scores


def _run(case):
    fn, bad, n = case["fn"], case["bad"], case["n"]
    run = core.family_run(case, "nms_rotated")
    boxes, scores = _values(run, case, n)
    if bad == "dets_cols":
        boxes = boxes[:, :4]
    a_b = run.arg("dets", boxes)
    a_s = run.arg("scores", torch.cat([scores, scores[:1] if n else torch.zeros(1)]) if bad == "scores_len" else scores)
    xb, xs = a_b.x(), a_s.x()
    if bad == "dets_ndim":
        xb = xb[None]
    labels = run.randint(0, case["classes"], n + (bad == "labels_len"))
    xl = core.cast(labels, case["labels_dt"]).to(xb.device) if case["labels"] else None
    iou, clockwise = case["iou"], case["clockwise"]
    cfg = dict(case["cfg"], type="nms_rotated", iou_threshold=iou, clockwise=clockwise)
    cfg_in = dict(cfg)
    if fn == "nms_rotated":
        call = lambda: visdet_ops.nms_rotated(xb, xs, iou, xl, clockwise)  # noqa: E731
    elif fn == "batched_nms":
        call = lambda: visdet_ops.batched_nms(xb, xs, xl, cfg_in)  # noqa: E731
    else:
        call = lambda: visdet_ops.batched_nms_rotated(xb, xs, xl, iou, clockwise)  # noqa: E731
    rb, rs = a_b.r(), a_s.r()

    def check(result):
        if cfg_in != cfg:
            raise core.Mismatch(f"batched_nms changed its nms_cfg: {cfg} -> {cfg_in}")
        if fn != "batched_nms_rotated":
            dets, keep = result
            if list(dets.shape) != [keep.numel(), 6]:
                raise core.Mismatch(f"dets shape {list(dets.shape)} for {keep.numel()} kept")
            check_keep(keep, dets[:, :5], rb[:, :4], rs, n)  # the structure of (dets, keep)
            if keep.numel() and not torch.equal(
                dets[:, :5].detach().cpu().double().nan_to_num(-7), rb[keep.cpu()].nan_to_num(-7)
            ):
                raise core.Mismatch("dets[:, :5] are not dets[keep]")
        else:
            keep = result
            if keep.dtype != torch.long or keep.dim() != 1:
                raise core.Mismatch(f"keep: {keep.dtype} with shape {list(keep.shape)}")
        if case["expect"] == "either":
            return
        ious = box_iou_rotated_reference(rb, rb, clockwise=clockwise)
        ious = ious[~torch.eye(n, dtype=torch.bool)]
        if bool(((ious[torch.isfinite(ious)] - iou).abs() < 1e-4).any()):
            return  # an IoU at the threshold may fall on either side of it in float32
        classes = xl.cpu() if xl is not None else None  # the values the call saw (bool: labels > 0)
        if fn == "batched_nms" and cfg.get("class_agnostic"):
            classes = None
        want = nms_rotated_reference(rb, rs, iou, classes, clockwise)
        if fn == "batched_nms" and cfg.get("max_num", -1) > 0:
            want = want[: cfg["max_num"]]
        if keep.cpu().tolist() != want.tolist():
            raise core.Mismatch(f"{fn} kept {keep.tolist()[:30]}, the reference {want.tolist()[:30]}")

    run.outcome(call, check)


FUZZ = core.family("nms_rotated", ["nms_rotated", "batched_nms_rotated", "batched_nms"], ops=("nms_rotated",))(
    (_case, _run)
)


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "nms_rotated": lambda rng: (
        lambda d, s: visdet_ops.nms_rotated(d, s, 0.375, clockwise=False),
        (random_boxes(12, rng, density=3)[0].float(), torch.rand(12, generator=rng)),
        {"iou_threshold": 0.375, "clockwise": 0},
    ),
}


# ---------------------------------------------------------------- CUDA graphs (tests/test_cuda_graphs.py)

# The registered ops whose host reads device data, with why: they are not captured in a CUDA graph (the replay test
# leaves them out), and the public functions that call them refuse capture instead (CUDA_GRAPH_REFUSALS).
CUDA_GRAPH_DATA_DEPENDENT = {"visdet_ops::nms_rotated": "how many boxes survive"}


# public function -> gen -> its call on CUDA inputs, which raises "<name> cannot be captured in a CUDA graph: ..."
# inside a capture and works before and after it (test_data_dependent_ops_refuse_capture_clearly, CUDA only). The
# rotated boxes are the box family's dets (x1, y1, x2, y2, score), built before the capture, read as (x, y, w, h,
# angle): sides x2, y2 > 1, the score as the angle.
CUDA_GRAPH_REFUSALS = {
    "nms_rotated": refused_capture(lambda b, s, i, d: visdet_ops.nms_rotated(d, s, 0.5)),
    "batched_nms_rotated": refused_capture(lambda b, s, i, d: visdet_ops.batched_nms_rotated(d, s, i, 0.5)),
}
