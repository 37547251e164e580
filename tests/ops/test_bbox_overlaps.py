from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops.ops import _args
from visdet_ops.reference.bbox_overlaps import bbox_overlaps_reference

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from .. import onnx_harness as ox
from ..conftest import torchvision_or_skip


def random_boxes(
    shape: tuple[int, ...], rng: torch.Generator, span: float = 96, side: float = 40, degenerate: bool = False
) -> torch.Tensor:
    """Corners x1, y1 below `span`, sides below `side`; with `degenerate`, about a fifth of zero width. Small boxes
    (span 6, side 3: the eps tests') have unions and enclosing areas often below the eps under test, so the clamp
    decides many results."""
    xy = torch.rand(*shape, 2, generator=rng, dtype=torch.float64) * span
    wh = torch.rand(*shape, 2, generator=rng, dtype=torch.float64) * side
    if degenerate:
        wh[torch.rand(shape, generator=rng) < 0.2, 0] = 0
    return torch.cat([xy, xy + wh], -1)


MODES = ["iou", "iof", "giou"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("shape", [(1, 1), (7, 7), (33, 300), (300, 33)])
def test_matches_reference(device, dtype, rng, mode, aligned, offset, shape):
    m, n = shape
    if aligned:
        n = m
    # Boxes rounded to `dtype` first: a 0.2 px high box at y=93 loses 4e-5 of its height to float32
    # rounding of its corners, which no float32 kernel can get back; what is checked is the arithmetic.
    a, b = random_boxes((m,), rng).to(dtype).double(), random_boxes((n,), rng).to(dtype).double()
    want = bbox_overlaps_reference(a, b, mode, aligned, offset)
    got = visdet_ops.bbox_overlaps(a.to(device, dtype), b.to(device, dtype), mode, aligned, offset)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want.to(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
def test_batch_dims(device, rng, mode, aligned):
    a, b = random_boxes((2, 3, 17), rng), random_boxes((2, 3, 17 if aligned else 70), rng)
    got = visdet_ops.bbox_overlaps(a.to(device), b.to(device), mode, aligned)
    torch.testing.assert_close(got.cpu(), bbox_overlaps_reference(a, b, mode, aligned))


def test_many_rows_cross_image_groups(device, rng):
    # 11 rows per image: a group of 8 rows in the CUDA kernel spans two images.
    a, b = random_boxes((5, 11), rng), random_boxes((5, 300), rng)
    got = visdet_ops.bbox_overlaps(a.to(device), b.to(device))
    torch.testing.assert_close(got.cpu(), bbox_overlaps_reference(a, b))


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
def test_reduced_precision(device, rng, half, mode):
    a, b = random_boxes((50,), rng).to(half), random_boxes((70,), rng).to(half)
    got = visdet_ops.bbox_overlaps(a.to(device), b.to(device), mode)
    assert got.dtype == half
    # computed in float32 from the rounded boxes, rounded once
    want = bbox_overlaps_reference(a.double(), b.double(), mode)
    tol = 1e-3 if half == torch.float16 else 8e-3
    torch.testing.assert_close(got.cpu().double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
def test_reduced_precision_grad_of_degenerate_boxes(device, rng, half, mode, aligned):
    """Regression (fuzzing): float16 gradients were NaN for pairs whose union is clamped to eps (two zero-area
    boxes, mmdet's [0, 0, 0, 0] padding; boxes with x2 < x1): the backward recomputed the formula in float16, where
    1 / eps overflows (0 * inf). 16-bit boxes are differentiated in float32 and each gradient rounded once: exactly
    0 where the float64 reference's is 0, that reference's value (rounded to 16 bits) elsewhere."""
    odd = torch.tensor([[0.0, 0, 0, 0], [0, 0, 0, 0], [5, 5, 5, 5], [9, 9, 3, 3]], dtype=torch.float64)
    a = torch.cat([random_boxes((6,), rng), odd]).to(half)
    b = torch.cat([random_boxes((6,), rng), odd.flip(0)]).to(half)
    ref = [t.double().requires_grad_() for t in (a, b)]
    want = bbox_overlaps_reference(ref[0], ref[1], mode, aligned)
    grad = torch.randn(want.shape, generator=rng, dtype=torch.float64).to(half)
    want.backward(grad.double())
    # The same reference differentiated in float32: how far float32 rounding of terms that cancel moves a gradient of
    # these boxes (a thin box's terms are ~1 / its height, far larger than the gradient they cancel to).
    ref32 = [t.float().requires_grad_() for t in (a, b)]
    bbox_overlaps_reference(ref32[0], ref32[1], mode, aligned).backward(grad.float())
    got = [t.to(device).requires_grad_() for t in (a, b)]
    visdet_ops.bbox_overlaps(got[0], got[1], mode, aligned).backward(grad.to(device))
    tol = 2e-3 if half == torch.float16 else 1e-2
    for name, g, r, r32 in zip(("bboxes1", "bboxes2"), got, ref, ref32, strict=True):
        g, r, r32 = g.grad.cpu(), r.grad, r32.grad.double()
        assert g.dtype == half, name
        # The degenerate rows: each pair's gradient is exactly 0, so is their sum (in float32 too).
        assert (g[6:][r[6:] == 0] == 0).all(), (name, g, r)
        # A true gradient beyond the 16-bit range (giou of two equal boxes with x2 < x1 and y2 < y1: an enclosing
        # area clamped to eps, ~1e6 per coordinate) rounds to inf of its sign; every other one is finite.
        big = ~torch.isfinite(r.to(half))
        assert torch.equal(g[big], r[big].to(half)), (name, g, r)
        assert torch.isfinite(g[~big]).all(), (name, g)
        # atol: float32 rounding of terms that cancel (at least the float32 reference's, with a margin), and the 16-bit
        # subnormal step
        float32_error = (r32 - r)[~big & torch.isfinite(r32)].abs().max().item()
        atol = max(1e-2 * tol * r[~big].abs().max().item(), 4 * float32_error)
        atol += torch.finfo(half).tiny * torch.finfo(half).eps
        torch.testing.assert_close(g[~big].double(), r[~big], rtol=tol, atol=atol, msg=name)


def test_against_torchvision(device, rng):
    tv = torchvision_or_skip()
    a, b = random_boxes((200,), rng).float().to(device), random_boxes((150,), rng).float().to(device)
    torch.testing.assert_close(visdet_ops.bbox_overlaps(a, b), tv.box_iou(a, b))
    torch.testing.assert_close(visdet_ops.bbox_overlaps(a, b, "giou"), tv.generalized_box_iou(a, b))


def test_degenerate_nan_inf(device):
    a = torch.tensor([[0.0, 0, 0, 0], [0, 0, 10, 10], [float("nan"), 0, 1, 1], [0, 0, float("inf"), 1]])
    b = torch.tensor([[0.0, 0, 0, 0], [0, 0, 10, 10]])
    for mode in MODES:
        got = visdet_ops.bbox_overlaps(a.to(device), b.to(device), mode).cpu()
        want = bbox_overlaps_reference(a.double(), b.double(), mode).float()
        torch.testing.assert_close(got, want, equal_nan=True)
        assert torch.isfinite(got[:2]).all() and torch.isnan(got[2:]).all()


def test_empty(device, dtype):
    e = torch.empty(0, 4, device=device, dtype=dtype)
    b = torch.zeros(3, 4, device=device, dtype=dtype)
    assert visdet_ops.bbox_overlaps(e, b).shape == (0, 3)
    assert visdet_ops.bbox_overlaps(b, e).shape == (3, 0)
    assert visdet_ops.bbox_overlaps(e, e, aligned=True).shape == (0,)
    assert visdet_ops.bbox_overlaps(e, b).dtype == dtype
    # mmcv's docstring example: an empty 1-D tensor is "no boxes".
    e1 = torch.empty(0, device=device, dtype=dtype)
    assert visdet_ops.bbox_overlaps(e1, b).shape == (0, 3)
    assert visdet_ops.bbox_overlaps(b, e1).shape == (3, 0)
    assert visdet_ops.bbox_overlaps(e1, e1).shape == (0, 0)
    assert visdet_ops.bbox_overlaps(e1, e1, aligned=True).shape == (0,)


def test_non_contiguous(device, rng):
    a, b = random_boxes((40,), rng), random_boxes((30,), rng)
    wide_a = torch.zeros(40, 8, dtype=torch.float64)
    wide_a[:, ::2] = a
    got = visdet_ops.bbox_overlaps(wide_a[:, ::2].to(device), b.t().contiguous().t().to(device))
    torch.testing.assert_close(got.cpu(), bbox_overlaps_reference(a, b))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
def test_gradcheck(device, rng, mode, aligned):
    a = random_boxes((6,), rng).to(device).requires_grad_()
    b = random_boxes((6,), rng).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: visdet_ops.bbox_overlaps(x, y, mode, aligned), (a, b))


def test_grad_of_one_input(device, rng):
    a = random_boxes((5,), rng).to(device).requires_grad_()
    b = random_boxes((4,), rng).to(device)
    visdet_ops.bbox_overlaps(a, b).sum().backward()
    assert a.grad is not None and a.grad.shape == a.shape


def test_opcheck(device, rng):
    a, b = random_boxes((9,), rng).to(device), random_boxes((12,), rng).to(device)
    for mode in MODES:
        torch.library.opcheck(torch.ops.visdet_ops.bbox_overlaps.default, (a, b, mode, False, 0))
        torch.library.opcheck(torch.ops.visdet_ops.bbox_overlaps.default, (a, a.flip(0), mode, True, 1))
        torch.library.opcheck(torch.ops.visdet_ops.bbox_overlaps.default, (a, b, mode, False, 1, 3.0))


@pytest.mark.parametrize("aligned", [False, True])
def test_op_string_modes(device, rng, aligned):
    """The registered op takes mode by name (`str mode`, default "iou"); an integer is refused by the schema."""
    a = random_boxes((7,), rng).to(device)
    b = random_boxes((7,), rng).to(device)
    for mode in MODES:
        got = torch.ops.visdet_ops.bbox_overlaps(a, b, mode, aligned, 1)
        torch.testing.assert_close(got.cpu(), bbox_overlaps_reference(a.cpu(), b.cpu(), mode, aligned, 1))
    torch.testing.assert_close(
        torch.ops.visdet_ops.bbox_overlaps(a, b).cpu(), bbox_overlaps_reference(a.cpu(), b.cpu(), "iou")
    )
    for mode in (0, 1, 2):
        with pytest.raises((TypeError, RuntimeError)):
            torch.ops.visdet_ops.bbox_overlaps(a, b, mode, aligned, 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
def test_mmdet_keywords_eps(device, dtype, rng, mode, aligned):
    """mmdet's call (is_aligned=, eps=) against the float64 reference with the same eps."""
    a, b = random_boxes((40,), rng, 6, 3, degenerate=True), random_boxes((40,), rng, 6, 3, degenerate=True)
    if aligned:  # pairs that overlap, or the clamp would rarely matter
        b = a + torch.rand(40, 4, generator=rng, dtype=torch.float64)
    a, b = a.to(dtype).double(), b.to(dtype).double()
    eps = 8.0
    want = bbox_overlaps_reference(a, b, mode, aligned, 0, eps)
    default = bbox_overlaps_reference(a, b, mode, aligned, 0)
    assert not torch.allclose(want, default), "eps does not change these boxes' result: the test would be blind"
    got = visdet_ops.bbox_overlaps(a.to(device, dtype), b.to(device, dtype), mode, is_aligned=aligned, eps=eps)
    torch.testing.assert_close(got.cpu(), want.to(dtype))
    # mmcv's names with the same eps, and offset=1 with it.
    got = visdet_ops.bbox_overlaps(a.to(device, dtype), b.to(device, dtype), mode, aligned, 1, eps=eps)
    torch.testing.assert_close(got.cpu(), bbox_overlaps_reference(a, b, mode, aligned, 1, eps).to(dtype))


def test_eps_zero_gives_nan_for_degenerate_pairs_as_mmdet(device):
    a = torch.tensor([[1.0, 1, 1, 1], [0, 0, 2, 2]], device=device)
    got = visdet_ops.bbox_overlaps(a, a, eps=0).cpu()
    assert torch.isnan(got[0, 0]) and got[1, 1] == 1 and got[0, 1] == 0
    assert visdet_ops.bbox_overlaps(a, a)[0, 0] == 0


def test_eps_gradcheck(device, rng):
    # No zero-width boxes: their intersections sit on max(w, 0)'s kink.
    a = random_boxes((6,), rng, 6, 3).to(device).requires_grad_()
    b = random_boxes((5,), rng, 6, 3).to(device).requires_grad_()
    for mode in MODES:
        assert torch.autograd.gradcheck(lambda x, y, m=mode: visdet_ops.bbox_overlaps(x, y, m, eps=0.5), (a, b))


def test_aligned_aliases():
    a, b = torch.rand(3, 4), torch.rand(3, 4)
    a[:, 2:] += a[:, :2]
    b[:, 2:] += b[:, :2]
    aligned = visdet_ops.bbox_overlaps(a, b, aligned=True)
    assert aligned.shape == (3,)
    assert torch.equal(visdet_ops.bbox_overlaps(a, b, is_aligned=True), aligned)
    assert torch.equal(visdet_ops.bbox_overlaps(a, b, "iou", True, is_aligned=True), aligned)
    assert visdet_ops.bbox_overlaps(a, b, aligned=False, is_aligned=False).shape == (3, 3)
    for kwargs in (dict(aligned=True, is_aligned=False), dict(aligned=False, is_aligned=True)):
        with pytest.raises(ValueError, match="bbox_overlaps: aligned=.* and is_aligned=.* disagree"):
            visdet_ops.bbox_overlaps(a, b, **kwargs)


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((torch.zeros(3, 5), torch.zeros(3, 4)), RuntimeError, r"bboxes1 must have shape \[\.\.\., M, 4\]"),
        ((torch.zeros(3, 4), torch.zeros(4)), RuntimeError, r"bboxes2 must have shape \[\.\.\., N, 4\]"),
        ((torch.zeros(2, 3, 4), torch.zeros(3, 3, 4)), RuntimeError, "same batch dimensions"),
        ((torch.zeros(3, 4, dtype=torch.int32), torch.zeros(3, 4, dtype=torch.int32)), RuntimeError, "floating point"),
        ((torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.float64)), RuntimeError, "same dtype"),
    ],
)
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        visdet_ops.bbox_overlaps(*args)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode must be one of"):
        visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), "dice")
    with pytest.raises(ValueError, match="offset must be 0 or 1"):
        visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), offset=2)
    with pytest.raises(RuntimeError, match="aligned=True needs as many"):
        visdet_ops.bbox_overlaps(torch.zeros(2, 4), torch.zeros(3, 4), aligned=True)
    # The op's `str mode`: an unknown name is refused by the C++ check, naming the argument and the modes.
    for mode in ("dice", "IoU", ""):
        with pytest.raises(RuntimeError, match=f"bbox_overlaps: mode must be 'iou', 'iof' or 'giou', got '{mode}'"):
            torch.ops.visdet_ops.bbox_overlaps(torch.zeros(2, 4), torch.zeros(3, 4), mode)
    for eps in (-1e-6, float("nan"), float("inf"), "1e-6", True):
        with pytest.raises(ValueError, match="bbox_overlaps: eps must be a finite number >= 0"):
            visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), eps=eps)
    with pytest.raises(RuntimeError, match="bbox_overlaps: eps must be a finite number >= 0, got -1"):
        torch.ops.visdet_ops.bbox_overlaps(torch.zeros(2, 4), torch.zeros(3, 4), "iou", False, 0, -1.0)
    # mmdet's positional call bbox_overlaps(a, b, mode, is_aligned, eps) lands eps on offset.
    with pytest.raises(ValueError, match="offset must be 0 or 1, got 1e-06; mmdet's eps is a keyword here"):
        visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), "iou", False, 1e-6)


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)


def _bbox_overlaps(device, gen, offset=0, op=False):
    a, b = (edges.boxes(device, gen, n)[0].double() for n in (5, 4))
    fn = torch.ops.visdet_ops.bbox_overlaps if op else visdet_ops.bbox_overlaps
    edges.close(fn(a, b, "iou", False, offset), bbox_overlaps_reference(a.cpu(), b.cpu(), "iou", False, offset))


INTEGER_EDGE_ROWS = [
    edges.Row(
        "bbox_overlaps-offset", ("offset",), _args.OFFSET, lambda d, v, g: _bbox_overlaps(d, g, offset=v), at_bound=(1,)
    ),
    edges.Row(
        "op.bbox_overlaps-offset", ("offset",), _args.OFFSET, lambda d, v, g: _bbox_overlaps(d, g, offset=v, op=True)
    ),
    # mode is a `str` in the schema (issue 13: string modes in every schema), no longer an integer: the tests above
    # check every name through the op and refuse unknown names and integers.
]
test_integer_edge = edges.integer_edge_test(INTEGER_EDGE_ROWS)


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


class BoxHead(amp.Producer):
    """A DETR-style head: normalised (x1, y1, x2, y2) boxes in the autocast dtype."""

    def __init__(self, gen: torch.Generator):
        super().__init__()
        self.fc = amp.randomize(torch.nn.Linear(16, 4), gen, 0.5)

    def forward(self, feats):
        c = self.fc(feats).sigmoid()
        return torch.cat([c[:, :2] - c[:, 2:] / 4, c[:, :2] + c[:, 2:] / 4], 1)


def case_bbox_overlaps(gen, mode):
    # 16-bit predicted boxes against float32 ground truth in the same [0, 1] frame.
    feats = torch.randn(30, 16, generator=gen)
    target = amp.rois(gen, 20, 1, 1.0)[:, 1:] * 0.8

    def body(p, feats, target):
        return visdet_ops.bbox_overlaps(p["head"](feats), target, mode)

    return amp.Case(body, (feats, target), amp.F32, head=BoxHead(gen))


AUTOCAST_CASES = {
    "bbox_overlaps": lambda g: case_bbox_overlaps(g, "iou"),
    "bbox_overlaps_giou": lambda g: case_bbox_overlaps(g, "giou"),
}


def _opcheck_bbox_overlaps(device, dtype, gen):
    boxes = amp.rois(gen, 30, 1, 200)[:, 1:].to(device)
    return torch.ops.visdet_ops.bbox_overlaps.default, (boxes.to(dtype), boxes, "iou", False, 0)


AUTOCAST_OPCHECKS = {"bbox_overlaps": _opcheck_bbox_overlaps}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_BBOX_BAD = ("last5", "batch", "aligned_mn", "mode", "offset", "eps", "dtype", "conflict", "ndim1")


@st.composite
def _bbox_case(draw, device):
    bad = core.pick_bad(draw, _BBOX_BAD)
    main = draw(st.sampled_from(core.FLOATS))
    batch = draw(st.lists(st.integers(0, 3), max_size=2))
    top = 300 if draw(core.one_in(10)) else 7  # now and then many boxes (the kernels' vector loops)
    m, n = draw(st.integers(0, top)), draw(st.integers(0, top))
    aligned = draw(st.sampled_from([None, False, True]))
    if aligned:
        n = m
    case = {
        "fn": "bbox_overlaps",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "batch": batch,
        "m": m,
        "n": n,
        "mode": draw(st.sampled_from(["iou", "iof", "giou"])),
        "aligned": aligned,
        "is_aligned": draw(st.sampled_from([None, None, False, True])),
        "offset": draw(st.sampled_from([0, 1])),
        "eps": draw(st.sampled_from([None, 0.0, 1e-6, 0.5])),
        "degenerate": draw(core.one_in(5)),
        "special": draw(core.one_in(8)),
        "empty1d": bad is None and not batch and m == 0 and draw(core.one_in(3)),
        "bad": bad,
    }
    if case["is_aligned"] is not None and case["aligned"] is not None:
        case["is_aligned"] = case["aligned"]  # agreeing; "conflict" makes them disagree
    if case["is_aligned"] and not case["aligned"]:
        case["n"] = m
    nd = len(batch) + 2
    case["t"], mixed = core.draw_tensors(draw, {"bboxes1": nd, "bboxes2": nd}, main, device)
    if bad == "dtype":
        case["t"]["bboxes1"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "mode":
        case["mode"] = draw(st.sampled_from(["diou", "IoU", ""]))
    elif bad == "offset":
        case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
    elif bad == "eps":
        case["eps"] = draw(st.sampled_from([-1.0, float("nan"), float("inf"), True, "1e-6"]))
    elif bad == "conflict":
        case["aligned"], case["is_aligned"] = True, False
        case["n"] = m
    elif bad == "aligned_mn":
        case["aligned"], case["is_aligned"], case["n"] = True, None, m + 1
    elif bad == "batch" and not batch:
        case["batch"] = [draw(st.integers(1, 3))]  # bboxes1 batched, bboxes2 not (set in run)
    case["expect"] = core.expectation(bad, mixed)
    return case


def _bbox_run(case):
    run = core.family_run(case, "bbox_overlaps")
    bad, batch, m, n = case["bad"], list(case["batch"]), case["m"], case["n"]
    shape1, shape2 = [*batch, m, 4], [*batch, n, 4]
    if bad == "batch":
        shape2 = [*batch[1:], n, 4] if len(batch) == 1 else [batch[0] + 1, *batch[1:], n, 4]
    if bad == "last5":
        shape1[-1] = 5
    if bad == "ndim1":
        shape1 = [4]

    def boxes(shape):
        count = 1
        for s in shape[:-1]:
            count *= s
        b = core.grid_boxes(run, count, span=40, size=20)
        if shape[-1] == 5:
            b = torch.cat([b, run.rand(count, 1)], 1)
        if case["degenerate"] and count:
            b[::3, [0, 2]] = b[::3, [2, 0]]  # negative widths
        if case["special"] and count:
            b[count // 2, count % 4] = [float("nan"), float("inf"), -float("inf")][count % 3]
        return b.reshape(shape)

    a1, a2 = run.arg("bboxes1", boxes(shape1)), run.arg("bboxes2", boxes(shape2))
    kwargs = {}
    if case["is_aligned"] is not None:
        kwargs["is_aligned"] = case["is_aligned"]
    if case["eps"] is not None:
        kwargs["eps"] = case["eps"]
    mixed = case["expect"] == "either"
    dt = core.worst(a1.dt, a2.dt)
    x1, x2 = a1.x(grad=True), a2.x(grad=True)
    if case["empty1d"]:
        x1 = torch.empty(0, dtype=x1.dtype, device=x1.device)
    aligned = bool(case["aligned"] if case["aligned"] is not None else case["is_aligned"])
    eps = 1e-6 if case["eps"] is None else case["eps"]

    def check(out):
        r1l, r1 = a1.ref(grad=True)
        r2l, r2 = a2.ref(grad=True)
        if case["empty1d"]:
            r1 = torch.empty(0, 4, dtype=torch.float64)
        want = bbox_overlaps_reference(r1, r2, case["mode"], aligned, case["offset"], eps)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, a1.dt, mixed)
        if run.grads and out.numel() and not case["special"] and not case["empty1d"]:
            core.backward_both(run, out, want)
            core.check_grads([("bboxes1", a1, r1l), ("bboxes2", a2, r2l)], dt)

    run.outcome(
        lambda: visdet_ops.bbox_overlaps(x1, x2, case["mode"], case["aligned"], case["offset"], **kwargs), check
    )


FUZZ = core.family("bbox_overlaps", ["bbox_overlaps"])((_bbox_case, _bbox_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "bbox_overlaps": lambda rng: (
        lambda a, b: visdet_ops.bbox_overlaps(a, b, "giou", offset=1),
        (ox.grid_boxes(3, rng), ox.grid_boxes(2, rng)),
        {"mode": "giou", "aligned": 0, "offset": 1, "eps": 1e-6},
    ),
}


# ---------------------------------------------------------------- mmcv's names (tests/test_mmcv_names.py)

# Where visdet_ops' default is written differently from mmcv's on purpose: (name, parameter) -> (ours, mmcv's)
# (test_positional_parameters_and_defaults_match_mmcv).
MMCV_SAME_MEANING_DEFAULTS = {
    # None means mmcv's False; it lets an explicit aligned=False be told apart
    # from the default when mmdet's is_aligned= is given too.
    ("bbox_overlaps", "aligned"): (None, False),
}

# Arguments mmcv checks with `assert`: each call raises our ValueError, which is also an AssertionError
# (test_argument_errors_are_also_assertion_errors)
MMCV_ASSERTION_ERRORS = {
    "bbox_overlaps-mode": lambda: visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), mode="dice")
}
