from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

import visdet_ops
from visdet_ops.reference.nms import nms_match_reference, nms_reference, soft_nms_reference

from ..conftest import require_cuda, torchvision_or_skip


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


def test_nms_opcheck(device, rng):
    boxes, scores = random_boxes(100, rng)
    torch.library.opcheck(torch.ops.visdet_ops.nms.default, (boxes.to(device), scores.to(device), 0.5, 0))


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


def random_classes(n: int, num_classes: int, rng: torch.Generator) -> torch.Tensor:
    return torch.randint(0, num_classes, (n,), generator=rng)


def batched_reference(boxes, scores, idxs, iou, offset=0):
    keep = nms_reference(boxes, scores, iou, offset, idxs=idxs)
    return keep


@pytest.mark.parametrize("n", [1, 100, 700])
@pytest.mark.parametrize("num_classes", [1, 3, 80])
def test_batched_nms_matches_reference(device, dtype, rng, n, num_classes):
    boxes, scores = random_boxes(n, rng)
    idxs = random_classes(n, num_classes, rng)
    want = batched_reference(boxes, scores, idxs, 0.5)
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
    """Above split_thr classes go in chunks: same result, cfg untouched."""
    boxes, scores = random_boxes(900, rng)
    idxs = random_classes(900, 7, rng)
    want = batched_reference(boxes, scores, idxs, 0.6)
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
    valid = torch.nonzero(scores > 0.4).squeeze(1)
    want = valid[batched_reference(boxes[valid], scores[valid], idxs[valid], 0.5)]
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
        ({"type": "softer_nms", "iou_threshold": 0.5}, ValueError, "type must be 'nms' or 'soft_nms'"),
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


def test_batched_nms_empty(device, dtype):
    e = torch.empty(0, 4, device=device, dtype=dtype)
    for cfg in ({"iou_threshold": 0.5}, {"type": "soft_nms"}, None):
        dets, keep = visdet_ops.batched_nms(e, e[:, 0], torch.empty(0, dtype=torch.long, device=device), cfg)
        assert dets.shape == (0, 5) and dets.dtype == dtype and keep.shape == (0,) and keep.dtype == torch.long


def test_batched_nms_opcheck(device, rng):
    boxes, scores = random_boxes(100, rng)
    idxs = random_classes(100, 3, rng)
    torch.library.opcheck(
        torch.ops.visdet_ops.batched_nms.default, (boxes.to(device), scores.to(device), idxs.to(device), 0.5, 0)
    )


def test_batched_nms_against_torchvision(device, rng):
    tv = torchvision_or_skip()
    boxes, scores = random_boxes(800, rng)
    idxs = random_classes(800, 10, rng).to(device)
    b, s = boxes.float().to(device), scores.float().to(device)
    _, keep = visdet_ops.batched_nms(b, s, idxs, {"iou_threshold": 0.5})
    assert keep.tolist() == tv.batched_nms(b, s, idxs, 0.5).tolist()


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


def test_nms_match_degenerate_and_nan(device, rng):
    boxes, scores = random_boxes(60, rng)
    boxes[4] = torch.tensor([5.0, 5.0, 5.0, 5.0])  # zero area: 0/0 never matches
    boxes[6] = float("nan")
    dets = torch.cat([boxes, scores[:, None]], 1)
    assert [g.tolist() for g in visdet_ops.nms_match(dets.to(device), 0.0)] == nms_match_reference(dets, 0.0)


def test_nms_match_opcheck(device, rng):
    boxes, scores = random_boxes(80, rng)
    torch.library.opcheck(
        torch.ops.visdet_ops.nms_match.default, (torch.cat([boxes, scores[:, None]], 1).to(device), 0.5)
    )


def test_nms_family_compiles_fullgraph(rng, monkeypatch):
    """The fake impls' unbacked sizes let torch.compile capture the data-dependent outputs."""
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
    boxes, scores = random_boxes(60, rng)
    idxs = random_classes(60, 3, rng)
    dets = torch.cat([boxes, scores[:, None]], 1)

    def f(b, s, c, d):
        keep = torch.ops.visdet_ops.nms(b, s, 0.5, 0)
        keep_batched = torch.ops.visdet_ops.batched_nms(b, s, c, 0.5, 0)
        inds, decayed = torch.ops.visdet_ops.soft_nms(b, s, 0.3, 0.5, 0.001, "linear", 0)
        leader = torch.ops.visdet_ops.nms_match(d, 0.5)
        return b[keep].sum(1), keep_batched, inds, decayed, leader

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(boxes, scores, idxs, dets)
    for g, w in zip(got, f(boxes, scores, idxs, dets), strict=True):
        torch.testing.assert_close(g, w)
