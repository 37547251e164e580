from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops.ops import _args
from visdet_ops.reference.nms import nms_match_reference, nms_reference, soft_nms_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from .. import onnx_harness as ox
from ..conftest import require_cuda, torchvision_or_skip
from ._boxes import IOU, check_keep, nms_values, refused_capture


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


def random_classes(n: int, num_classes: int, rng: torch.Generator) -> torch.Tensor:
    return torch.randint(0, num_classes, (n,), generator=rng)


def reference_keep(boxes, scores, iou, offset=0, idxs=None, score_threshold=0, max_num=-1) -> torch.Tensor:
    """What nms and batched_nms keep: nms_reference of the boxes scored above score_threshold (> 0), cut to max_num
    (> 0)."""
    if score_threshold > 0:
        valid = torch.nonzero(scores > score_threshold).squeeze(1)
        classes = None if idxs is None else idxs[valid]
        want = valid[nms_reference(boxes[valid], scores[valid], iou, offset, classes)]
    else:
        want = nms_reference(boxes, scores, iou, offset, idxs)
    return want[:max_num] if max_num > 0 else want


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


@pytest.mark.parametrize("batched", [False, True], ids=["nms", "batched_nms"])
def test_nms_against_torchvision(device, rng, batched):
    tv = torchvision_or_skip()
    boxes, scores = random_boxes(800, rng)
    b, s = boxes.float().to(device), scores.float().to(device)
    if batched:
        idxs = random_classes(800, 10, rng).to(device)
        _, keep = visdet_ops.batched_nms(b, s, idxs, {"iou_threshold": 0.5})
        assert keep.tolist() == tv.batched_nms(b, s, idxs, 0.5).tolist()
    else:
        _, keep = visdet_ops.nms(b, s, 0.5)
        assert keep.tolist() == tv.nms(b, s, 0.5).tolist()


def test_nms_score_threshold_and_max_num(device, rng):
    boxes, scores = random_boxes(300, rng)
    boxes, scores = boxes.to(device), scores.to(device)
    dets, inds = visdet_ops.nms(boxes, scores, 0.5, score_threshold=0.3, max_num=10)
    want = reference_keep(boxes.cpu(), scores.cpu(), 0.5, score_threshold=0.3, max_num=10)
    assert inds.cpu().tolist() == want.tolist()
    assert dets.shape == (len(want), 5)
    torch.testing.assert_close(dets[:, 4].cpu(), scores.cpu()[want])


def test_nms_numpy_in_numpy_out(rng):
    boxes, scores = random_boxes(50, rng)
    dets, inds = visdet_ops.nms(boxes.float().numpy(), scores.float().numpy(), 0.5)
    assert isinstance(dets, np.ndarray) and isinstance(inds, np.ndarray)
    assert inds.tolist() == nms_reference(boxes, scores, 0.5).tolist()


@pytest.mark.parametrize(
    "cfg", ["nms", {"iou_threshold": 0.5}, {"type": "soft_nms"}, None], ids=["nms", "batched", "batched_soft", "none"]
)
def test_nms_empty(device, dtype, cfg):
    """nms, and batched_nms with each kind of nms_cfg."""
    boxes, scores = torch.empty(0, 4, device=device, dtype=dtype), torch.empty(0, device=device, dtype=dtype)
    if cfg == "nms":
        dets, inds = visdet_ops.nms(boxes, scores, 0.5)
    else:
        dets, inds = visdet_ops.batched_nms(boxes, scores, torch.empty(0, dtype=torch.long, device=device), cfg)
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
            lambda d: (torch.zeros(5, 4, device=d), torch.zeros(5, device=d, dtype=torch.int64)),
            "scores must be a floating point tensor",
        ),
        (lambda d: (torch.zeros(5, 4, device=d), torch.zeros(5, 1, device=d)), "scores must have 1 dimensions"),
    ],
)
def test_nms_bad_inputs(device, make, match):
    boxes, scores = make(device)
    with pytest.raises(RuntimeError, match=match):
        visdet_ops.nms(boxes, scores, 0.5)


def test_shapes_checked_before_indexing(device):
    """Regression (fuzzing): nms(score_threshold > 0) and batched_nms indexed boxes (and idxs) with scores before
    any shape check (torch's IndexError, naming neither the function nor the argument, or a result for the first
    boxes only), and batched_nms(nms_cfg=None) checked nothing. Each is now a ShapeError naming the argument."""
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 2, 2], [5, 5, 6, 6]], dtype=torch.float32, device=device)
    scores = torch.tensor([0.9, 0.8, 0.7], device=device)
    idxs = torch.zeros(3, dtype=torch.long, device=device)
    cfgs = (None, {"iou_threshold": 0.5, "score_threshold": 0.1}, {"iou_threshold": 0.5}, {"type": "soft_nms"})
    calls = [
        *((f"nms-{thr}", lambda b, s, i, thr=thr: visdet_ops.nms(b, s, 0.5, score_threshold=thr)) for thr in (0, 0.1)),
        *((f"batched_nms-{cfg}", lambda b, s, i, cfg=cfg: visdet_ops.batched_nms(b, s, i, cfg)) for cfg in cfgs),
    ]
    bad = [
        (
            "scores",
            r"scores must have shape \[N\] with N = boxes.size\(0\) = 3, got \[4\]",
            boxes,
            scores[[0, 1, 2, 0]],
            idxs,
        ),
        (
            "scores",
            r"scores must have shape \[N\] with N = boxes.size\(0\) = 3, got \[2\]",
            boxes,
            scores[:2] + 1,
            idxs,
        ),
        ("scores", r"scores must have 1 dimensions, got shape \[3, 1\]", boxes, scores[:, None], idxs),
        ("boxes", r"boxes must have shape \[N, 4\], got \[3, 5\]", torch.cat([boxes, boxes[:, :1]], 1), scores, idxs),
        ("boxes", r"boxes must have 2 dimensions, got shape \[12\]", boxes.flatten(), scores, idxs),
        ("scores", "scores must be a floating point tensor", boxes, idxs, idxs),
    ]
    for name, call in calls:
        op = name.split("-")[0]
        for arg, match, b, s, i in bad:
            with pytest.raises(_args.ShapeError, match=f"{op}: {match}") as caught:
                call(b, s, i)
            assert str(caught.value).startswith(f"{op}: {arg} ")
        # A ShapeError is a RuntimeError (the op's own check raises one) and an AssertionError (mmcv asserts).
        with pytest.raises(RuntimeError, match=f"{op}: scores") as caught:
            call(boxes, scores[:2], idxs)
        assert isinstance(caught.value, AssertionError)
    for cfg in cfgs[1:]:  # idxs: checked where it is used, as in mmcv (not with nms_cfg None or class_agnostic)
        with pytest.raises(
            _args.ShapeError, match=r"batched_nms: idxs must have shape \[N\] with N = boxes.size\(0\) = 3"
        ):
            visdet_ops.batched_nms(boxes, scores, idxs[:2], cfg)
        with pytest.raises(_args.ShapeError, match="batched_nms: idxs must be an integer, floating point or bool"):
            visdet_ops.batched_nms(boxes, scores, scores.to(torch.complex64), cfg)
        want = visdet_ops.batched_nms(boxes, scores, idxs, cfg, class_agnostic=True)
        got = visdet_ops.batched_nms(boxes, scores, None, cfg, class_agnostic=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    dets, keep = visdet_ops.batched_nms(boxes, scores, None, None)
    assert keep.tolist() == [0, 1, 2] and torch.equal(dets[:, :4], boxes)


def test_nms_bad_offset():
    with pytest.raises(ValueError, match="offset must be 0 or 1"):
        visdet_ops.nms(torch.zeros(2, 4), torch.zeros(2), 0.5, offset=2)
    with pytest.raises(RuntimeError, match="offset must be 0 or 1, got 3"):
        torch.ops.visdet_ops.nms(torch.zeros(2, 4), torch.zeros(2), 0.5, 3)


def test_iou_thr_is_mmcvs_deprecated_alias(rng):
    """mmcv's nms/soft_nms take iou_thr= with a deprecation warning (deprecated_api_warning)."""
    boxes, scores = random_boxes(50, rng)
    for fn, kwargs in ((visdet_ops.nms, {}), (visdet_ops.soft_nms, {"method": "gaussian"})):
        want = fn(boxes, scores, iou_threshold=0.4, **kwargs)
        with pytest.warns(DeprecationWarning, match=f"{fn.__name__}: 'iou_thr' is deprecated, use 'iou_threshold'"):
            got = fn(boxes, scores, iou_thr=0.4, **kwargs)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        with pytest.raises(TypeError, match=f"{fn.__name__}: got both 'iou_thr' .* and 'iou_threshold'"):
            fn(boxes, scores, iou_thr=0.4, iou_threshold=0.4)


def test_the_package_needs_no_numpy():
    """numpy is a test dependency only: with it unimportable, visdet_ops imports
    and the NMS family (which accepts ndarrays when numpy is there) works on tensors."""
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "import torch, visdet_ops\n"
        "b = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]]); s = torch.tensor([0.9, 0.8, 0.7])\n"
        "assert visdet_ops.nms(b, s, 0.5)[1].tolist() == [0, 2]\n"
        "assert visdet_ops.soft_nms(b, s, 0.5, method='naive')[1].tolist() == [0, 2]\n"
        "assert [g.tolist() for g in visdet_ops.nms_match(torch.cat([b, s[:, None]], 1), 0.5)] == [[0, 1], [2]]\n"
        "assert 'numpy' not in sys.modules or sys.modules['numpy'] is None\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_nms_devices_must_match():
    require_cuda()
    with pytest.raises(RuntimeError, match="boxes and scores must be on the same device"):
        torch.ops.visdet_ops.nms(torch.zeros(2, 4, device="cuda"), torch.zeros(2), 0.5, 0)


# float16 / bfloat16 ---------------------------------------------------------


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_nms_reduced_precision(device, rng, half):
    # Boxes on a 1/8 grid below 128 px are exact in float16 (not all in
    # bfloat16: the reference sees the rounded values).
    boxes, scores = random_boxes(500, rng)
    b, s = boxes.to(half), scores.to(half)
    dets, inds = visdet_ops.nms(b.to(device), s.to(device), 0.5)
    assert dets.dtype == half and inds.dtype == torch.long
    assert inds.cpu().tolist() == nms_reference(b.double(), s.double(), 0.5).tolist()


# batched_nms ------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 100, 700])
@pytest.mark.parametrize("num_classes", [1, 3, 80])
def test_batched_nms_matches_reference(device, dtype, rng, n, num_classes):
    boxes, scores = random_boxes(n, rng)
    idxs = random_classes(n, num_classes, rng)
    want = nms_reference(boxes, scores, 0.5, idxs=idxs)
    dets, keep = visdet_ops.batched_nms(
        boxes.to(device, dtype), scores.to(device, dtype), idxs.to(device), {"iou_threshold": 0.5}
    )
    assert keep.cpu().tolist() == want.tolist()
    torch.testing.assert_close(dets.cpu(), torch.cat([boxes, scores[:, None]], 1)[want].to(dtype))


def test_batched_nms_is_exact_at_large_coordinates(device, rng):
    """mmcv shifts each class by (max coordinate + 1) * class: at 80 classes of
    20000-px boxes that is 1.6M px, where float32 rounds coordinates to 1/8 px
    and IoUs near the threshold flip. The class-aware kernel never shifts."""
    boxes, scores = random_boxes(600, rng)
    boxes = boxes * 150 + 1000.0 / 3  # large, not on any binary grid
    idxs = random_classes(600, 80, rng)
    idxs[:300] = 79
    want = nms_reference(boxes.float().double(), scores, 0.5, idxs=idxs)
    _, keep = visdet_ops.batched_nms(
        boxes.float().to(device), scores.float().to(device), idxs.to(device), {"iou_threshold": 0.5}
    )
    assert keep.cpu().tolist() == want.tolist()


def test_batched_nms_class_agnostic(device, rng):
    boxes, scores = random_boxes(300, rng)
    idxs = random_classes(300, 5, rng).to(device)
    b, s = boxes.to(device), scores.to(device)
    want = nms_reference(boxes, scores, 0.5).tolist()
    assert visdet_ops.batched_nms(b, s, idxs, {"iou_threshold": 0.5}, class_agnostic=True)[1].cpu().tolist() == want
    cfg = {"iou_threshold": 0.5, "class_agnostic": True}
    assert visdet_ops.batched_nms(b, s, idxs, cfg)[1].cpu().tolist() == want
    assert cfg == {"iou_threshold": 0.5, "class_agnostic": True}


def test_batched_nms_split_thr_and_max_num(device, rng):
    """Above split_thr classes go in chunks on CUDA (the CPU kernel takes them all at once, class by class): same
    result, cfg untouched."""
    boxes, scores = random_boxes(900, rng)
    idxs = random_classes(900, 7, rng)
    want = nms_reference(boxes, scores, 0.6, idxs=idxs)
    b, s, c = boxes.to(device), scores.to(device), idxs.to(device)
    cfg = {"type": "nms", "iou_threshold": 0.6, "split_thr": 200, "max_num": 25}
    frozen = dict(cfg)
    dets, keep = visdet_ops.batched_nms(b, s, c, cfg)
    assert cfg == frozen
    assert keep.cpu().tolist() == want[:25].tolist()
    assert dets.shape == (25, 5)
    _, keep_all = visdet_ops.batched_nms(b, s, c, {"iou_threshold": 0.6, "split_thr": 200})
    assert keep_all.cpu().tolist() == want.tolist()


def test_batched_nms_iou_thr_alias_and_score_threshold(device, rng):
    boxes, scores = random_boxes(200, rng)
    idxs = random_classes(200, 3, rng)
    want = reference_keep(boxes, scores, 0.5, idxs=idxs, score_threshold=0.4)
    with pytest.warns(DeprecationWarning, match="iou_thr"):
        _, keep = visdet_ops.batched_nms(
            boxes.to(device), scores.to(device), idxs.to(device), {"iou_thr": 0.5, "score_threshold": 0.4}
        )
    assert keep.cpu().tolist() == want.tolist()


def test_batched_nms_none_cfg(device, rng):
    boxes, scores = random_boxes(50, rng)
    dets, inds = visdet_ops.batched_nms(boxes.to(device), scores.to(device), random_classes(50, 3, rng), None)
    assert inds.cpu().tolist() == torch.sort(scores, descending=True, stable=True).indices.tolist()
    assert dets.shape == (50, 5)


def test_batched_nms_soft_nms(device, rng):
    """type='soft_nms' (crashes in mmcv when max_num is set): per class decay,
    merged by score, max_num after merging."""
    boxes, scores = random_boxes(300, rng)
    idxs = random_classes(300, 4, rng)
    want_inds, want_scores = soft_nms_reference(boxes, scores, 0.3, 0.5, 0.05, "gaussian", idxs=idxs)
    cfg = {"type": "soft_nms", "iou_threshold": 0.3, "min_score": 0.05, "method": "gaussian", "max_num": 40}
    dets, keep = visdet_ops.batched_nms(boxes.to(device), scores.to(device), idxs.to(device), cfg)
    assert keep.cpu().tolist() == want_inds[:40].tolist()
    torch.testing.assert_close(dets[:, 4].cpu(), want_scores[:40])
    torch.testing.assert_close(dets[:, :4].cpu(), boxes[want_inds[:40]])


@pytest.mark.parametrize(
    "cfg, error, match",
    [
        ({"type": "softer_nms", "iou_threshold": 0.5}, ValueError, "type must be 'nms', 'soft_nms' or 'nms_rotated'"),
        ({"iou_threshold": 0.5, "sigma": 0.5}, TypeError, r"keys \['sigma'\] are not understood"),
        ({"offset": 0}, TypeError, "needs iou_threshold"),
        ({"iou_thr": 0.5, "iou_threshold": 0.5}, ValueError, "both iou_thr"),
        ({"type": "soft_nms", "method": "cubic"}, ValueError, "method must be one of"),
    ],
)
def test_batched_nms_bad_cfg(cfg, error, match):
    with pytest.raises(error, match=match):
        visdet_ops.batched_nms(torch.zeros(3, 4), torch.zeros(3), torch.zeros(3, dtype=torch.long), cfg)


def test_batched_nms_op_checks_idxs(device):
    boxes, scores = torch.zeros(4, 4, device=device), torch.zeros(4, device=device)
    with pytest.raises(RuntimeError, match=r"batched_nms: idxs must have shape \[N\]"):
        torch.ops.visdet_ops.batched_nms(boxes, scores, torch.zeros(3, dtype=torch.long, device=device), 0.5, 0)
    with pytest.raises(RuntimeError, match="batched_nms: idxs must be an integer tensor"):
        torch.ops.visdet_ops.batched_nms(boxes, scores, torch.zeros(4, device=device), 0.5, 0)


# soft_nms ---------------------------------------------------------------------


# nms_match --------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 50, 130, 700])
@pytest.mark.parametrize("iou", [0.0, 0.25, 0.5, 0.75])
def test_nms_match_matches_reference(device, dtype, rng, n, iou):
    boxes, scores = random_boxes(n, rng)
    dets = torch.cat([boxes, scores[:, None]], 1)
    groups = visdet_ops.nms_match(dets.to(device, dtype), iou)
    assert all(g.dtype == torch.long and g.device.type == device.type for g in groups)
    assert [g.tolist() for g in groups] == nms_match_reference(dets, iou)


def test_nms_match_numpy_empty_and_bad(device, rng):
    boxes, scores = random_boxes(40, rng)
    dets = torch.cat([boxes, scores[:, None]], 1)
    groups = visdet_ops.nms_match(dets.numpy(), 0.5)
    assert all(isinstance(g, np.ndarray) for g in groups)
    assert [g.tolist() for g in groups] == nms_match_reference(dets, 0.5)
    assert visdet_ops.nms_match(torch.empty(0, 5, device=device), 0.5) == []
    # mmcv returns [] for any dets with shape[0] == 0; empty selections are often 1-D.
    for empty in (torch.empty(0, device=device), np.zeros(0), np.zeros((0, 5), dtype=np.float32)):
        got = visdet_ops.nms_match(empty, 0.5)
        assert isinstance(got, list) and got == []
    with pytest.raises(RuntimeError, match=r"nms_match: dets must have 2 dimensions, got shape \[3\]"):
        visdet_ops.nms_match(torch.zeros(3, device=device), 0.5)
    with pytest.raises(RuntimeError, match=r"nms_match: dets must have shape \[N, 5\]"):
        visdet_ops.nms_match(torch.zeros(3, 4, device=device), 0.5)
    # mmcv asserts the shape: code (and mmcv's tests) catching AssertionError keeps working, NumPy input too.
    with pytest.raises(
        AssertionError, match=r"nms_match: dets must have shape \[N, 5\] \(x1, y1, x2, y2, score\), got \[2, 3\]"
    ):
        visdet_ops.nms_match(np.zeros((2, 3)), 0.5)
    # The op itself (a direct torch.ops call) gives the same text.
    with pytest.raises(
        RuntimeError, match=r"nms_match: dets must have shape \[N, 5\] \(x1, y1, x2, y2, score\), got \[2, 3\]"
    ):
        torch.ops.visdet_ops.nms_match(torch.zeros(2, 3, device=device), 0.5)


def test_nms_match_degenerate_and_nan(device, rng):
    boxes, scores = random_boxes(60, rng)
    boxes[4] = torch.tensor([5.0, 5.0, 5.0, 5.0])  # zero area: 0/0 never matches
    boxes[6] = float("nan")
    dets = torch.cat([boxes, scores[:, None]], 1)
    assert [g.tolist() for g in visdet_ops.nms_match(dets.to(device), 0.0)] == nms_match_reference(dets, 0.0)


def _op_args(op, boxes, scores, classes, dets):
    """The registered op `op` and its arguments: the opcheck tests' (here and under autocast)."""
    return getattr(torch.ops.visdet_ops, op).default, {
        "nms": (boxes, scores, 0.5, 0),
        "batched_nms": (boxes, scores, classes, 0.5, 0),
        "soft_nms": (boxes, scores, 0.3, 0.5, 1e-3, "linear", 0, classes),
        "nms_match": (dets, 0.5),
    }[op]


@pytest.mark.parametrize("op", ["nms", "batched_nms", "nms_match"])
def test_nms_family_opcheck(device, rng, op):
    boxes, scores = (t.to(device) for t in random_boxes(100, rng))
    classes = random_classes(100, 3, rng).to(device)
    torch.library.opcheck(*_op_args(op, boxes, scores, classes, torch.cat([boxes, scores[:, None]], 1)))


def test_nms_family_compiles_fullgraph(rng):
    """The fake impls' unbacked sizes let torch.compile capture the data-dependent outputs."""
    boxes, scores = random_boxes(60, rng)
    idxs = random_classes(60, 3, rng)
    dets = torch.cat([boxes, scores[:, None]], 1)

    def f(b, s, c, d):
        keep = torch.ops.visdet_ops.nms(b, s, 0.5, 0)
        keep_batched = torch.ops.visdet_ops.batched_nms(b, s, c, 0.5, 0)
        inds, decayed = torch.ops.visdet_ops.soft_nms(b, s, 0.3, 0.5, 0.001, "linear", 0)
        leader = torch.ops.visdet_ops.nms_match(d, 0.5)
        return b[keep].sum(1), keep_batched, inds, decayed, leader

    # config.patch, not monkeypatch: on torch 2.4 monkeypatch's undo deletes the key from dynamo's config, and every
    # later torch.compile in the process fails on the missing option.
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True)(boxes, scores, idxs, dets)
        for g, w in zip(got, f(boxes, scores, idxs, dets), strict=True):
            torch.testing.assert_close(g, w)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _edge_row(row_id, bounds, at_bound=()):
    """The row `<fn>-<arg>` (a public function) or `op.<fn>-<arg>` (the registered op): fn with the integer argument
    arg (a key of nms_cfg for batched_nms) set to the value under test, checked against the reference."""
    fn, arg = row_id.split("-")
    return edges.Row(row_id, (arg,), bounds, lambda d, v, g: _edge_nms(d, g, fn, **{arg: v}), at_bound=at_bound)


def _edge_nms(device, gen, fn, **kw):
    boxes, scores, idxs = edges.boxes(device, gen)
    name, offset = fn.removeprefix("op."), kw.get("offset", 0)
    classes = idxs if name == "batched_nms" else None
    inputs = (boxes, scores) if classes is None else (boxes, scores, classes)
    soft = (0.5, 1e-3, "linear") if name == "soft_nms" else ()  # sigma, min_score, method
    if fn.startswith("op."):
        inds = getattr(torch.ops.visdet_ops, name)(*inputs, 0.3, *soft, offset)
        inds = inds[0] if soft else inds  # the soft_nms op returns (inds, scores)
    elif classes is not None:
        _, inds = visdet_ops.batched_nms(*inputs, dict(iou_threshold=0.3, **kw))
    else:
        _, inds = getattr(visdet_ops, name)(*inputs, 0.3, *soft, **kw)
    if soft:
        want, _ = soft_nms_reference(boxes, scores, 0.3, *soft, offset)
    else:
        want = reference_keep(boxes, scores, 0.3, offset, classes, max_num=kw.get("max_num", -1))
    assert inds.cpu().tolist() == want.tolist()


INTEGER_EDGE_ROWS = [
    _edge_row("nms-offset", _args.OFFSET, at_bound=(1,)),
    _edge_row("nms-max_num", edges.ANY, at_bound=(3,)),
    _edge_row("op.nms-offset", _args.OFFSET, at_bound=(1,)),
    _edge_row("op.batched_nms-offset", _args.OFFSET),
    _edge_row("batched_nms-split_thr", edges.ANY, at_bound=(5,)),
    _edge_row("batched_nms-max_num", edges.ANY, at_bound=(3,)),
    _edge_row("batched_nms-offset", _args.OFFSET, at_bound=(1,)),
    _edge_row("soft_nms-offset", _args.OFFSET, at_bound=(1,)),
    _edge_row("op.soft_nms-offset", _args.OFFSET),
    # soft_nms' method is a string ('naive', 'linear', 'gaussian'): tests/ops/test_soft_nms.py checks unknown ones.
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)
# Rows whose argument is not a parameter of the entry point itself (row id -> where the user writes it):
# tests/test_integer_edges.py's test_public_rows_name_the_users_argument.
INTEGER_EDGE_NOT_A_PARAMETER = {
    "batched_nms-split_thr": "a key of nms_cfg",
    "batched_nms-max_num": "a key of nms_cfg",
    "batched_nms-offset": "a key of nms_cfg",
}


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


AUTOCAST_DISCRETE = ("nms", "batched_nms", "soft_nms", "nms_match")


def _boxes_and_scores(gen, n=300, classes=4):
    xy = torch.rand(n, 2, generator=gen) * 1200
    wh = torch.rand(n, 2, generator=gen) * 120 + 8
    boxes = torch.cat([xy, xy + wh], 1)
    feats = torch.randn(n, 16, generator=gen)
    head = amp.randomize(torch.nn.Linear(16, 1), gen, 0.5)
    idxs = torch.randint(0, classes, (n,), generator=gen)
    return boxes, feats, head, idxs


@pytest.mark.parametrize("op", AUTOCAST_DISCRETE)
@pytest.mark.parametrize("device_name, dtype", amp.AMP)
def test_nms_family_under_autocast(rng, op, device_name, dtype):
    """float32 boxes beside 16-bit scores (a Linear's output under autocast): the same
    indices as the float32 op on the same score values, float32 outputs."""
    device = amp.device_for(device_name)
    boxes, feats, head, idxs = (t.to(device) for t in _boxes_and_scores(rng))
    with torch.autocast(device.type, dtype=dtype):
        scores = head(feats).sigmoid().squeeze(1)
    assert scores.dtype == dtype and boxes.dtype == torch.float32
    exact = scores.float()

    def call(s, autocast_on):
        with torch.autocast(device.type, dtype=dtype, enabled=autocast_on):
            if op == "nms":
                return visdet_ops.nms(boxes, s, 0.5)
            if op == "soft_nms":
                return visdet_ops.soft_nms(boxes, s, 0.3, 0.5, 0.05, "linear")
            if op == "batched_nms":
                return visdet_ops.batched_nms(boxes, s, idxs, dict(iou_threshold=0.5))
            return torch.ops.visdet_ops.nms_match(torch.cat([boxes, s[:, None].to(boxes.dtype)], 1), 0.5), None

    (got_dets, got_inds), (want_dets, want_inds) = call(scores, True), call(exact, False)
    assert got_inds is None or got_inds.dtype == torch.long
    if op == "nms_match":
        assert torch.equal(got_dets, want_dets)
        return
    assert torch.equal(got_inds, want_inds)
    assert got_dets.dtype == torch.float32
    torch.testing.assert_close(got_dets, want_dets, rtol=1e-6, atol=1e-6)
    # The raw ops promote under autocast too (boxes never rounded to 16 bits).
    with torch.autocast(device.type, dtype=dtype):
        raw = torch.ops.visdet_ops.nms(boxes.to(dtype), scores, 0.5)
    assert raw.dtype == torch.long


def _opcheck_under_autocast(op):
    def inputs(device, dtype, gen):
        """float32 boxes, 16-bit scores and class indices."""
        boxes = amp.rois(gen, 30, 1, 200)[:, 1:].to(device)
        scores = torch.rand(30, generator=gen).to(device, dtype)
        classes = torch.randint(0, 3, (30,), generator=gen).to(device)
        return _op_args(op, boxes, scores, classes, torch.cat([boxes, scores[:, None].float()], 1).to(dtype))

    return inputs


AUTOCAST_OPCHECKS = {op: _opcheck_under_autocast(op) for op in AUTOCAST_DISCRETE}


# Covered by test_nms_family_under_autocast (indices must equal the float32 ones), not by a float32 comparison.
AUTOCAST_COVERED_OTHERWISE = {name: "test_nms_family_under_autocast" for name in AUTOCAST_DISCRETE}


@pytest.mark.parametrize("kind", ["nms", "soft_nms"])
def test_batched_nms_takes_floating_and_bool_idxs_as_mmcv(device, kind, rng):
    """mmcv's batched_nms uses idxs.to(boxes): DDQ-DETR passes torch.ones(...). Floating and bool classes are
    compared by value, integer ones on another device are moved (issue 39)."""
    n = 60
    boxes = torch.rand(n, 2, generator=rng) * 40
    boxes = torch.cat([boxes, boxes + torch.rand(n, 2, generator=rng) * 30 + 5], 1).to(device)
    scores = torch.rand(n, generator=rng).to(device)
    classes = torch.randint(0, 4, (n,), generator=rng)
    cfg = {"type": kind, "iou_threshold": 0.4}
    want = visdet_ops.batched_nms(boxes, scores, classes.to(device), cfg)
    for idxs in (classes.float(), classes.double(), classes.to(device, torch.float16), classes.float() * 2.5 - 1):
        got = visdet_ops.batched_nms(boxes, scores, idxs.to(device), cfg)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]), idxs.dtype
    got = visdet_ops.batched_nms(boxes, scores, classes, cfg)  # integer idxs on the CPU beside CUDA boxes
    assert torch.equal(got[1], want[1])
    two = classes.to(device) % 2
    want = visdet_ops.batched_nms(boxes, scores, two, cfg)
    assert torch.equal(visdet_ops.batched_nms(boxes, scores, two.bool(), cfg)[1], want[1])
    ones = visdet_ops.batched_nms(boxes, scores, torch.ones(n, device=device), cfg)
    assert torch.equal(ones[1], visdet_ops.batched_nms(boxes, scores, None, cfg, class_agnostic=True)[1])


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_NMS_BAD = tuple("boxes_cols scores_len scores_ndim offset boxes_dtype max_num boxes_list both_names iou_nan".split())
_BATCHED_BAD = tuple(
    "cfg_type cfg_unknown cfg_missing cfg_both idxs_len cfg_method cfg_offset cfg_int boxes_cols scores_len".split()
)
_MATCH_BAD = ("dets_cols", "dets_ndim", "dets_dtype", "iou_nan")


@st.composite
def _nms_case(draw, device):
    fn = draw(st.sampled_from(["nms", "batched_nms", "nms_match"]))
    bad = core.pick_bad(draw, {"nms": _NMS_BAD, "batched_nms": _BATCHED_BAD, "nms_match": _MATCH_BAD}[fn])
    main = draw(st.sampled_from(core.FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": core.size(draw, 1, 70) if not draw(core.one_in(10)) else draw(st.integers(71, 300)),
        "iou": draw(st.sampled_from(IOU)) if bad != "iou_nan" else float("nan"),
        "ties": draw(core.one_in(4)),
        "special": draw(core.one_in(10)),
        "numpy": core.HAS_NUMPY and fn != "batched_nms" and draw(core.one_in(6)),
        "bad": bad,
    }
    lay = {
        "boxes": ["c", "t", "p", "s", "e"],
        "scores": ["c", "s", "e"],
        "idxs": ["c", "s", "e"],
        "dets": ["c", "t", "s", "e"],
    }
    names = {
        "nms": {"boxes": 2, "scores": 1},
        "batched_nms": {"boxes": 2, "scores": 1, "idxs": 1},
        "nms_match": {"dets": 2},
    }[fn]
    case["t"], mixed = core.draw_tensors(draw, names, main, device, floating={"boxes", "scores", "dets"}, layouts=lay)
    if case["numpy"]:  # NumPy has no bfloat16
        for o in case["t"].values():
            o["dt"] = (main if main != "bf16" else "f32") if o["dt"] in core.FLOATS else o["dt"]
            o.pop("dev", None)
        mixed = False
    if fn == "nms":
        case.update(
            offset=draw(st.sampled_from([0, 1])),
            score_threshold=draw(st.sampled_from([0, 0, 0.25, 0.5, 0.875])),
            max_num=draw(st.sampled_from([-1, -1, 0, 1, 5, 100])),
            alias=draw(core.one_in(5)),
        )
        if bad == "offset":
            case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
        elif bad == "max_num":
            case["max_num"] = draw(st.sampled_from([1.5, "2", None]))
        elif bad == "boxes_dtype":
            case["t"]["boxes"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif fn == "batched_nms":
        # floating idxs are classes by value, as mmcv's idxs.to(boxes) (issue 39)
        case["idxs_dt"] = draw(st.sampled_from(["i64", "i64", "i32", "i16", "u8", "f32", "f64"]))
        case["classes"] = draw(st.integers(1, 4))
        case["class_agnostic"] = draw(st.booleans())
        kind = draw(st.sampled_from(["nms", "nms", "soft_nms", "none"]))
        if kind == "none":
            cfg = None
        elif kind == "nms":
            cfg = {"iou_threshold": case["iou"]}
            for key, values in (
                ("offset", [0, 1]),
                ("score_threshold", [0, 0.25, 0.5]),
                ("max_num", [-1, 0, 3, 50]),
                ("split_thr", [10000, 1, 5, 0]),
                ("class_agnostic", [False, True]),
                ("type", ["nms"]),
            ):
                if draw(core.one_in(3)):
                    cfg[key] = draw(st.sampled_from(values))
            if draw(core.one_in(6)):
                cfg["iou_thr"] = cfg.pop("iou_threshold")
        else:
            cfg = {"type": "soft_nms"}
            for key, values in (
                ("iou_threshold", IOU),
                ("sigma", [0.5, 1.0]),
                ("min_score", [1e-3, 0.0, 0.25]),
                ("method", ["linear", "naive", "gaussian"]),
                ("offset", [0, 1]),
                ("max_num", [-1, 3]),
            ):
                if draw(core.one_in(2)):
                    cfg[key] = draw(st.sampled_from(values))
        if bad and bad.startswith("cfg") and cfg is None:
            cfg = {"iou_threshold": case["iou"]}
        if bad == "cfg_type":
            cfg["type"] = draw(st.sampled_from(["softer_nms", "NMS", ""]))
        elif bad == "cfg_unknown":
            cfg[draw(st.sampled_from(["sigma", "iou", "thr"] if cfg.get("type") != "soft_nms" else ["thr"]))] = 0.5
        elif bad == "cfg_missing":
            cfg.pop("iou_threshold", None), cfg.pop("iou_thr", None), cfg.pop("type", None)
        elif bad == "cfg_both":
            cfg["iou_thr"], cfg["iou_threshold"] = case["iou"], case["iou"]
        elif bad == "cfg_method":
            cfg["type"], cfg["method"] = "soft_nms", draw(st.sampled_from(["cubic", "", "Linear"]))
            cfg.pop("iou_thr", None), cfg.pop("split_thr", None), cfg.pop("score_threshold", None)
            cfg.pop("class_agnostic", None)
        elif bad == "cfg_offset":
            cfg["offset"] = draw(st.sampled_from([2, -1, 0.5]))
        elif bad == "cfg_int":
            cfg[draw(st.sampled_from(["max_num", "split_thr"]))] = draw(st.sampled_from([1.5, "2"]))
        case["cfg"] = cfg
        agnostic = cfg is None or cfg.get("class_agnostic", case["class_agnostic"])
        if bad == "idxs_len" and agnostic:
            case["expect"] = "either"  # idxs is not used then
    else:
        if bad == "dets_dtype":
            case["t"]["dets"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
        case["empty1d"] = bad is None and draw(core.one_in(10))
    if case.get("expect") != "either":
        case["expect"] = core.expectation(bad, mixed, borderline=case["special"])
    return case


def _nms_run(case):
    fn, bad = case["fn"], case["bad"]
    run = core.family_run(case, "nms", "iou_thr", "split_thr", "method")
    n = case["n"]
    boxes, scores = nms_values(run, case, n)
    if fn == "nms_match":
        return _nms_match_run(case, run, boxes, scores)
    if bad == "boxes_cols":
        boxes = torch.cat([boxes, scores[:, None]], 1)
    a_b = run.arg("boxes", boxes)
    sshape_scores = scores
    if bad == "scores_len":
        sshape_scores = torch.cat([scores, scores[:1] if n else torch.zeros(1)])
    elif bad == "scores_ndim":
        sshape_scores = scores[:, None]
    a_s = run.arg("scores", sshape_scores)
    xb, xs = a_b.x(), a_s.x()
    if case["numpy"]:
        xb, xs = xb.numpy(), xs.numpy()
    if bad == "boxes_list":
        xb = xb.tolist()
    rb, rs = a_b.r(), a_s.r()
    structural = case["special"] or case["expect"] == "either"
    if fn == "nms":
        kwargs = {
            "iou_thr" if case["alias"] else "iou_threshold": case["iou"],
            "offset": case["offset"],
            "score_threshold": case["score_threshold"],
            "max_num": case["max_num"],
        }
        if bad == "both_names":
            kwargs["iou_thr"] = kwargs["iou_threshold"] = case["iou"]
        call = lambda: visdet_ops.nms(xb, xs, **kwargs)  # noqa: E731

        def check(result):
            dets, inds = result
            if case["numpy"]:
                import numpy as np

                if not isinstance(dets, np.ndarray) or not isinstance(inds, np.ndarray):
                    raise core.Mismatch(f"NumPy in, {type(dets).__name__} out")
                dets, inds = torch.from_numpy(dets), torch.from_numpy(inds)
            check_keep(inds, dets, rb, rs, n)
            if structural:
                return
            want = reference_keep(rb, rs, case["iou"], case["offset"], None, case["score_threshold"], case["max_num"])
            if inds.tolist() != want.tolist():
                raise core.Mismatch(f"nms kept {inds.tolist()[:30]}, the reference {want.tolist()[:30]}")
            if not torch.equal(dets[:, 4].detach().cpu().double(), rs[want]):
                raise core.Mismatch("dets[:, 4] are not the kept scores")

        run.outcome(call, check)
        return
    # batched_nms
    cfg = case["cfg"]
    idxs = run.randint(0, case["classes"], n + (bad == "idxs_len"))
    a_i = core.Arg(
        idxs,
        case["idxs_dt"],
        case["t"]["idxs"]["lay"],
        case["t"]["idxs"].get("dev", "cpu"),
        case["t"]["idxs"].get("ed", 0),
    )
    xi = a_i.x()
    cfg_in = None if cfg is None else dict(cfg)
    call = lambda: visdet_ops.batched_nms(xb, xs, xi, cfg_in, case["class_agnostic"])  # noqa: E731

    def check(result):
        dets, keep = result
        if cfg_in != cfg:
            raise core.Mismatch(f"batched_nms changed its nms_cfg: {cfg} -> {cfg_in}")
        check_keep(keep, dets, rb, rs, n)
        if structural:
            return
        agnostic = cfg is None or cfg.get("class_agnostic", case["class_agnostic"])
        classes = None if agnostic else xi.detach().cpu()
        if cfg is None:
            want = torch.sort(rs, descending=True, stable=True).indices
            want_scores = rs[want]
        elif cfg.get("type") == "soft_nms":
            want, want_scores = soft_nms_reference(
                rb,
                rs,
                cfg.get("iou_threshold", 0.3),
                cfg.get("sigma", 0.5),
                cfg.get("min_score", 1e-3),
                cfg.get("method", "linear"),
                cfg.get("offset", 0),
                classes,
            )
            if a_b.dt != "f64" or a_s.dt != "f64":
                return  # decayed scores in float32: near ties may take another order (soft_nms family's rule)
        else:
            iou = cfg.get("iou_threshold", cfg.get("iou_thr"))
            want = reference_keep(rb, rs, iou, cfg.get("offset", 0), classes, cfg.get("score_threshold", 0))
            want_scores = rs[want]
        if cfg is not None and cfg.get("max_num", -1) > 0:
            want, want_scores = want[: cfg["max_num"]], want_scores[: cfg["max_num"]]
        if keep.tolist() != want.tolist():
            raise core.Mismatch(f"batched_nms kept {keep.tolist()[:30]}, the reference {want.tolist()[:30]}")
        core.assert_close("dets[:, 4]", dets[:, 4], want_scores, core.worst(a_b.dt, a_s.dt))

    run.outcome(call, check)


def _nms_match_run(case, run, boxes, scores):
    bad = case["bad"]
    dets = torch.cat([boxes, scores[:, None]], 1)
    if bad == "dets_cols":
        dets = dets[:, :4]
    elif bad == "dets_ndim":
        dets = dets[None]
    a_d = run.arg("dets", dets)
    xd = a_d.x()
    if case["empty1d"]:
        xd = torch.empty(0, dtype=xd.dtype, device=xd.device)
    if case["numpy"]:
        xd = xd.numpy()

    def check(groups):
        if not isinstance(groups, list):
            raise core.Mismatch(f"nms_match returned a {type(groups).__name__}, not a list")
        got = [list(map(int, g.tolist())) for g in groups]
        if case["empty1d"]:
            if got:
                raise core.Mismatch(f"empty 1-D dets gave {got}")
            return
        members = sorted(i for g in got for i in g)
        if members != list(range(case["n"])):
            raise core.Mismatch("nms_match groups are not a partition of the boxes")
        if case["special"] or case["expect"] == "either":
            return
        want = nms_match_reference(a_d.r(), case["iou"])
        if got != want:
            raise core.Mismatch(f"nms_match gave {got[:10]}, the reference {want[:10]}")

    run.outcome(lambda: visdet_ops.nms_match(xd, case["iou"]), check)


FUZZ = core.family("nms", ["nms", "batched_nms", "nms_match"], ops=("nms", "batched_nms", "nms_match", "soft_nms"))(
    (_nms_case, _nms_run)
)


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# registered forward op -> the test of its standard ONNX translation (tests/test_onnx.py's
# test_every_forward_op_has_a_case)
ONNX_COVERED_OTHERWISE = {
    "nms": "test_onnx_nms (NonMaxSuppression)",
    "batched_nms": "test_onnx_batched_nms (NonMaxSuppression)",
    "nms_match": "test_onnx_nms_match_fails_clearly (a list of groups: no ONNX form)",
}


def onnx_inputs(n: int, rng: torch.Generator, classes: tuple[int, int] | None = None) -> tuple[torch.Tensor, ...]:
    """Grid boxes, scores and, with classes = (low, high), class indices in [low, high)."""
    # 17 score values: ties, which both sides must break towards the lower index.
    inputs = (ox.grid_boxes(n, rng), torch.randint(0, 17, (n,), generator=rng).float() / 16)
    return inputs if classes is None else (*inputs, torch.randint(*classes, (n,), generator=rng))


def check_onnx(onnx_table, model, rng, sizes, classes=None):
    """Exports `model` for any number of boxes (traced on 12, classes in [0, 3)); on each of `sizes` boxes the ONNX
    model gives eager's results."""
    n = torch.export.Dim("n")
    args = onnx_inputs(12, rng, None if classes is None else (0, 3))
    onnx_model = ox.export(onnx_table, model, args, tuple({0: n} for _ in args))
    for n_boxes in sizes:
        args = onnx_inputs(n_boxes, rng, classes)
        for g, w in zip(ox.run(onnx_model, *args), model(*args), strict=True):
            assert torch.equal(g, w), (n_boxes, g, w)
    return onnx_model


class NmsModel(torch.nn.Module):
    def forward(self, boxes, scores):
        return (
            *visdet_ops.nms(boxes, scores, 0.5),
            *visdet_ops.nms(boxes, scores, 0.375, offset=1, score_threshold=0.3, max_num=7),
        )


@ox.needs_exporter
def test_onnx_nms(onnx_table, rng):
    onnx_model = check_onnx(onnx_table, NmsModel(), rng, (0, 1, 300))
    assert ox.op_types(onnx_model) >= {"NonMaxSuppression"}
    assert not any(node.domain for node in onnx_model.graph.node)


class BatchedNmsModel(torch.nn.Module):
    def forward(self, boxes, scores, idxs):
        return (
            *visdet_ops.batched_nms(boxes, scores, idxs, {"iou_threshold": 0.5}),
            *visdet_ops.batched_nms(
                boxes, scores, idxs, {"iou_threshold": 0.625, "offset": 1, "score_threshold": 0.2, "max_num": 9}
            ),
            *visdet_ops.batched_nms(boxes, scores, idxs, {"iou_threshold": 0.5}, class_agnostic=True),
        )


@ox.needs_exporter
def test_onnx_batched_nms(onnx_table, rng):
    # Classes from -3 to 7 (batched_nms takes any integers), coordinates that overlap across classes.
    check_onnx(onnx_table, BatchedNmsModel(), rng, (0, 1, 400), classes=(-3, 8))


@ox.needs_exporter
def test_onnx_negative_iou_threshold_fails_clearly(onnx_table):
    model = ox.CallModel(lambda b, s: visdet_ops.nms(b, s, -0.5))
    message = ox.conversion_message(onnx_table, model, (torch.tensor([[0, 0, 4, 4.0]]), torch.tensor([0.5])))
    assert "nms: iou_threshold=-0.5 has no ONNX form" in message


@ox.needs_exporter
def test_onnx_nms_match_fails_clearly(onnx_table):
    model = ox.CallModel(lambda d: visdet_ops.nms_match(d, 0.5))
    message = ox.conversion_message(onnx_table, model, (torch.tensor([[0, 0, 4, 4, 0.5], [1, 1, 4, 4, 0.25]]),))
    assert "nms_match: its result is a list of groups" in message


# ---------------------------------------------------------------- CUDA graphs (tests/test_cuda_graphs.py)

# The registered ops whose host reads device data, with why: they are not captured in a CUDA graph (the replay test
# leaves them out), and the public functions that call them refuse capture instead (CUDA_GRAPH_REFUSALS).
CUDA_GRAPH_DATA_DEPENDENT = {
    "visdet_ops::nms": "how many boxes survive",
    "visdet_ops::batched_nms": "how many boxes survive",
    "visdet_ops::nms_match": "how many boxes survive",
}


# public function -> gen -> its call on CUDA inputs, which raises "<name> cannot be captured in a CUDA graph: ..."
# inside a capture and works before and after it (test_data_dependent_ops_refuse_capture_clearly, CUDA only)
CUDA_GRAPH_REFUSALS = {
    "nms": refused_capture(lambda b, s, i, d: visdet_ops.nms(b, s, 0.5)),
    "batched_nms": refused_capture(lambda b, s, i, d: visdet_ops.batched_nms(b, s, i, dict(iou_threshold=0.5))),
    "nms_match": refused_capture(lambda b, s, i, d: visdet_ops.nms_match(d, 0.5)),
}
