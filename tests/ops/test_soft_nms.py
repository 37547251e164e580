"""soft_nms (its own op folder and module since the stable-ABI port; the other NMS ops are in test_nms.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops.reference.nms import soft_nms_reference

from .. import fuzz_core as core
from .. import onnx_harness as ox
from ._boxes import check_keep, nms_values, refused_capture
from .test_nms import random_boxes, random_classes


def check_soft_nms(device, dtype, boxes, scores, *args):
    """soft_nms(*args) of the float64 boxes and scores, on `device` in `dtype`, against the float64 reference: the
    same indices, the same scores. Returns (dets, inds) and the reference's (inds, scores)."""
    want = soft_nms_reference(boxes, scores, *args)
    dets, inds = visdet_ops.soft_nms(boxes.to(device, dtype), scores.to(device, dtype), *args)
    assert inds.dtype == torch.long and dets.dtype == dtype
    assert inds.cpu().tolist() == want[0].tolist()
    tol = {torch.float64: 1e-10, torch.float32: 1e-5}.get(dtype, 2e-2)
    torch.testing.assert_close(dets[:, 4].cpu().double(), want[1], rtol=tol, atol=tol)
    return (dets, inds), want


@pytest.mark.parametrize("method", ["naive", "linear", "gaussian"])
@pytest.mark.parametrize("n", [1, 40, 300])
@pytest.mark.parametrize("offset", [0, 1])
def test_soft_nms_matches_reference(device, rng, method, n, offset):
    boxes, scores = random_boxes(n, rng)
    got, want = check_soft_nms(device, torch.float64, boxes, scores, 0.3, 0.5, 1e-3, method, offset)
    torch.testing.assert_close(got[0][:, :4].cpu(), boxes[want[0]])


@pytest.mark.parametrize("method", ["linear", "gaussian"])
def test_soft_nms_float32(device, rng, method):
    # 60 boxes: two decayed scores within float32 rounding of each other (which
    # could legitimately swap the pick order) are improbable.
    boxes, scores = random_boxes(60, rng)
    check_soft_nms(device, torch.float32, boxes, scores, 0.4, 0.5, 0.01, method)


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
    check_soft_nms(device, torch.float64, boxes, scores, 0.3, 0.5, 0.2)  # the default method: linear


def test_soft_nms_min_score_zero_keeps_naive_zeros(device, rng):
    # naive with min_score=0: suppressed boxes stay, with score 0 (mmcv).
    boxes, scores = random_boxes(80, rng)
    got, _ = check_soft_nms(device, torch.float64, boxes, scores, 0.3, 0.5, 0.0, "naive")
    assert got[1].numel() == 80 and (got[0][:, 4] == 0).any()


def test_soft_nms_nan_inf_and_ties(device, rng):
    boxes, scores = random_boxes(100, rng)
    boxes[3] = float("nan")
    boxes[5, 2] = float("inf")
    scores[7] = float("nan")
    scores[10:20] = 0.5  # ties: lower index first
    for method in ("naive", "linear", "gaussian"):
        got, _ = check_soft_nms(device, torch.float64, boxes, scores, 0.3, 0.5, 1e-3, method)
        assert 7 not in got[1].tolist()


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


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_SOFT_BAD = tuple("method offset sigma0 min_score_nan boxes_cols scores_len both_names boxes_dtype iou_nan".split())


@st.composite
def _soft_case(draw, device):
    bad = core.pick_bad(draw, _SOFT_BAD)
    main = draw(st.sampled_from(core.FLOATS))
    case = {
        "fn": "soft_nms",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": core.size(draw, 1, 40) if not draw(core.one_in(10)) else draw(st.integers(41, 200)),
        "iou": draw(st.sampled_from([0.3, 0.5, 0.0, 0.75])),
        "sigma": draw(st.sampled_from([0.5, 1.0, 0.1])),
        "min_score": draw(st.sampled_from([1e-3, 0.01, 0.0, 0.3])),
        "method": draw(st.sampled_from(["linear", "naive", "gaussian"])),
        "offset": draw(st.sampled_from([0, 1])),
        "ties": draw(core.one_in(4)),
        "special": draw(core.one_in(10)),
        "numpy": core.HAS_NUMPY and draw(core.one_in(6)),
        "alias": draw(core.one_in(5)),
        "bad": bad,
    }
    lay = {"boxes": ["c", "t", "p", "s", "e"], "scores": ["c", "s", "e"]}
    case["t"], mixed = core.draw_tensors(draw, {"boxes": 2, "scores": 1}, main, device, layouts=lay)
    if case["numpy"]:  # NumPy has no bfloat16
        for o in case["t"].values():
            o["dt"] = (main if main != "bf16" else "f32") if o["dt"] in core.FLOATS else o["dt"]
            o.pop("dev", None)
        mixed = False
    if bad == "method":
        case["method"] = draw(st.sampled_from(["cubic", "", 1]))
    elif bad == "offset":
        case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
    elif bad == "sigma0":
        case["method"], case["sigma"] = "gaussian", draw(st.sampled_from([0.0, -1.0]))
    elif bad == "min_score_nan":
        case["min_score"] = float("nan")
    elif bad == "iou_nan":
        case["iou"] = float("nan")
    elif bad == "boxes_dtype":
        case["t"]["boxes"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    case["expect"] = core.expectation(bad, mixed, borderline=case["special"])
    return case


def _soft_run(case):
    bad, n = case["bad"], case["n"]
    run = core.family_run(case, "soft_nms", "iou_thr")
    boxes, scores = nms_values(run, case, n)
    if bad == "boxes_cols":
        boxes = torch.cat([boxes, scores[:, None]], 1)
    elif bad == "scores_len":
        scores = torch.cat([scores, scores[:1] if n else torch.zeros(1)])
    a_b, a_s = run.arg("boxes", boxes), run.arg("scores", scores)
    xb, xs = a_b.x(), a_s.x()
    if case["numpy"]:
        xb, xs = xb.numpy(), xs.numpy()
    rb, rs = a_b.r(), a_s.r()
    kwargs = {
        "iou_thr" if case["alias"] else "iou_threshold": case["iou"],
        "sigma": case["sigma"],
        "min_score": case["min_score"],
        "method": case["method"],
        "offset": case["offset"],
    }
    if bad == "both_names":
        kwargs["iou_thr"] = kwargs["iou_threshold"] = case["iou"]
    exact = a_b.dt == "f64" and a_s.dt == "f64" and not case["special"] and case["expect"] == "ok"

    def check(result):
        dets, inds = result
        if case["numpy"]:
            dets, inds = torch.from_numpy(dets), torch.from_numpy(inds)
        check_keep(inds, dets, rb, rs, n)
        got_scores = dets[:, 4].detach().cpu().double()
        if not exact:
            # Decayed scores are computed in float32 (below float64): a near tie may take another pick order, so
            # only the structure is checked: descending scores, none above its box's own score, none below
            # min_score (bar rounding).
            if case["special"]:
                return
            slack = 1e-2 if {a_b.dt, a_s.dt} & {"f16", "bf16"} else 1e-5
            if len(got_scores) > 1 and not (got_scores[1:] <= got_scores[:-1] + slack).all():
                raise core.Mismatch(f"soft_nms scores are not descending: {got_scores.tolist()[:20]}")
            if not (got_scores <= rs[inds.cpu()] + slack).all():
                raise core.Mismatch("a soft_nms score grew above its box's own score")
            # (the first pick is not held to min_score: mmcv filters only the scores after each pick)
            if not (got_scores[1:] >= case["min_score"] - slack).all():
                raise core.Mismatch(f"a soft_nms score below min_score {case['min_score']}")
            return
        want, want_scores = soft_nms_reference(
            rb, rs, case["iou"], case["sigma"], case["min_score"], case["method"], case["offset"]
        )
        if inds.tolist() != want.tolist():
            raise core.Mismatch(f"soft_nms kept {inds.tolist()[:30]}, the reference {want.tolist()[:30]}")
        core.assert_close("dets[:, 4]", got_scores, want_scores, "f64", tol=1e-10)

    run.outcome(lambda: visdet_ops.soft_nms(xb, xs, **kwargs), check)


FUZZ = core.family("soft_nms", ["soft_nms"])((_soft_case, _soft_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "soft_nms": lambda rng: (
        lambda b, s: visdet_ops.soft_nms(b, s, 0.25, 0.5, 0.125, "gaussian"),
        (ox.grid_boxes(5, rng), torch.rand(5, generator=rng)),
        {"iou_threshold": 0.25, "sigma": 0.5, "min_score": 0.125, "method": "gaussian", "offset": 0},
    ),
}


# ---------------------------------------------------------------- CUDA graphs (tests/test_cuda_graphs.py)

# The registered ops whose host reads device data, with why: they are not captured in a CUDA graph (the replay test
# leaves them out), and the public functions that call them refuse capture instead (CUDA_GRAPH_REFUSALS).
CUDA_GRAPH_DATA_DEPENDENT = {"visdet_ops::soft_nms": "how many boxes survive"}


# public function -> gen -> its call on CUDA inputs, which raises "<name> cannot be captured in a CUDA graph: ..."
# inside a capture and works before and after it (test_data_dependent_ops_refuse_capture_clearly, CUDA only)
CUDA_GRAPH_REFUSALS = {"soft_nms": refused_capture(lambda b, s, i, d: visdet_ops.soft_nms(b, s))}
