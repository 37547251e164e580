from __future__ import annotations

import math

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops.reference.box_iou_rotated import box_iou_rotated_reference, rotated_corners

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import onnx_harness as ox

MODES = ["iou", "iof"]
# Tolerance of a kernel's IoU against the float64 reference on the same (rounded) boxes: the polygon clipping in
# the compute dtype (16-bit: computed in float32 from the rounded boxes, rounded once).
TOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 1e-3, torch.bfloat16: 4e-3}


def random_boxes(
    n: int, rng: torch.Generator, span: float = 96.0, turns: float = 1.0, sides: tuple[float, float] = (2.0, 42.0)
) -> torch.Tensor:
    """n boxes (x, y, w, h, angle) of sides in [sides[0], sides[1]), centres in [0, span), angles in
    [-turns pi, turns pi). tests/ops/test_nms_rotated.py draws its boxes here too."""
    xy = torch.rand(n, 2, generator=rng, dtype=torch.float64) * span
    wh = torch.rand(n, 2, generator=rng, dtype=torch.float64) * (sides[1] - sides[0]) + sides[0]
    angle = (torch.rand(n, 1, generator=rng, dtype=torch.float64) * 2 - 1) * math.pi * turns
    return torch.cat([xy, wh, angle], 1)


def iou(a, b, mode="iou", aligned=False, clockwise=True, device="cpu", dtype=torch.float64):
    """box_iou_rotated on `device` in `dtype`, as float64 on the CPU."""
    return visdet_ops.box_iou_rotated(a.to(device, dtype), b.to(device, dtype), mode, aligned, clockwise).cpu().double()


def check_reference(a, b, device, dtype, mode="iou", aligned=False, clockwise=True, atol=None) -> torch.Tensor:
    """box_iou_rotated on `device` in `dtype` against the float64 reference (returned), within `atol` (TOL[dtype]
    unless given). The boxes are rounded to `dtype` first: what is checked is the arithmetic, not the rounding of
    the inputs."""
    a, b = a.to(dtype).double(), b.to(dtype).double()
    want = box_iou_rotated_reference(a, b, mode, aligned, clockwise)
    got = visdet_ops.box_iou_rotated(a.to(device, dtype), b.to(device, dtype), mode, aligned, clockwise)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == want.shape
    torch.testing.assert_close(got.cpu().double(), want, rtol=0, atol=TOL[dtype] if atol is None else atol)
    return want


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("clockwise", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (7, 7), (33, 300), (300, 33)])
def test_matches_reference(device, dtype, rng, mode, aligned, clockwise, shape):
    m, n = shape
    check_reference(
        random_boxes(m, rng), random_boxes(m if aligned else n, rng), device, dtype, mode, aligned, clockwise
    )


def test_mmcv_cases(device):
    """mmcv's own tests (tests/test_ops/test_box_iou_rotated.py, v2.2.0): both modes, both angle conventions."""
    b1 = torch.tensor([[1.0, 1.0, 3.0, 4.0, 0.5], [2.0, 2.0, 3.0, 4.0, 0.6], [7.0, 7.0, 8.0, 8.0, 0.4]])
    b2 = torch.tensor([[0.0, 2.0, 2.0, 5.0, 0.3], [2.0, 1.0, 3.0, 3.0, 0.5], [5.0, 5.0, 6.0, 7.0, 0.4]])
    want = {
        "iou": torch.tensor([[0.3708, 0.4351, 0.0000], [0.1104, 0.4487, 0.0424], [0.0000, 0.0000, 0.3622]]),
        "iof": torch.tensor([[0.4959, 0.5306, 0.0000], [0.1823, 0.5420, 0.1832], [0.0000, 0.0000, 0.4404]]),
    }
    flip = torch.tensor([1.0, 1, 1, 1, -1])
    for mode in MODES:
        for clockwise, (x, y) in ((True, (b1, b2)), (False, (b1 * flip, b2 * flip))):
            got = visdet_ops.box_iou_rotated(x.to(device), y.to(device), mode=mode, clockwise=clockwise).cpu()
            torch.testing.assert_close(got, want[mode], rtol=0, atol=1e-4)
            got = visdet_ops.box_iou_rotated(x.to(device), y.to(device), mode=mode, aligned=True, clockwise=clockwise)
            torch.testing.assert_close(got.cpu(), want[mode].diagonal(), rtol=0, atol=1e-4)


def _shapely_overlaps(a: torch.Tensor, b: torch.Tensor, mode: str) -> torch.Tensor:
    # shapely is a required test dependency (pyproject's [test] extra): imported here, so that a missing one fails
    # these tests (an ImportError), never skips them.
    from shapely.geometry import Polygon

    pa = [Polygon(c.tolist()) for c in rotated_corners(a)]
    pb = [Polygon(c.tolist()) for c in rotated_corners(b)]
    out = torch.zeros(len(pa), len(pb), dtype=torch.float64)
    for i, p in enumerate(pa):
        for j, q in enumerate(pb):
            inter = p.intersection(q).area
            out[i, j] = inter / (p.area if mode == "iof" else p.union(q).area)
    return out


def hard_boxes(rng: torch.Generator) -> torch.Tensor:
    """Boxes that stress the intersection: near-parallel edges, nested and equal boxes, thin ones, touching and
    crossing ones, angles past +-pi."""
    base = torch.tensor([[40.0, 40, 30, 10, 0.3]], dtype=torch.float64)
    rows = [base]
    for d in (1e-9, 1e-7, 1e-5, 1e-3):  # near-parallel: the same box turned a little, and shifted along its axis
        rows.append(base + torch.tensor([[0, 0, 0, 0, d]], dtype=torch.float64))
        rows.append(base + torch.tensor([[3 * math.cos(0.3), 3 * math.sin(0.3), 0, 0, d]], dtype=torch.float64))
    rows.append(torch.tensor([[40.0, 40, 5, 3, 1.1], [41, 40.5, 2, 1, -0.4]], dtype=torch.float64))  # nested
    rows.append(torch.tensor([[40.0, 40, 60, 0.05, 0.3], [40, 40, 0.05, 60, 0.3]], dtype=torch.float64))  # thin
    rows.append(torch.tensor([[40.0, 40, 30, 10, 0.3 + math.pi], [40, 40, 10, 30, 0.3 + math.pi / 2]]).double())
    rows.append(torch.tensor([[55.0, 40, 30, 10, 0.0], [40, 35, 30, 10, 0.0]], dtype=torch.float64))  # touching
    rows.append(random_boxes(12, rng, span=60, turns=2))
    return torch.cat(rows)


@pytest.mark.parametrize("mode", MODES)
def test_reference_matches_shapely(rng, mode):
    """The float64 reference against an independent polygon intersection (shapely's), on random boxes and the hard
    cases."""
    for a in (random_boxes(40, rng, turns=2), hard_boxes(rng)):
        got = box_iou_rotated_reference(a, a, mode)
        torch.testing.assert_close(got, _shapely_overlaps(a, a, mode), rtol=0, atol=1e-9)


@pytest.mark.parametrize("mode", MODES)
def test_hard_cases_match_reference(device, dtype, rng, mode):
    a = hard_boxes(rng)
    check_reference(a, a, device, dtype, mode, atol=10 * TOL[dtype])


def test_thin_boxes_keep_float32_precision(device, rng):
    """A pair is clipped in the frame of the box with the shorter side, so a thin box's width stays exact: a 60 x 0.05
    box against large boxes tens of pixels away keeps float32's precision in its IoF (clipped in the large box's
    frame it was off by up to 4e-5), and the matrix of a set of boxes with distinct short sides is symmetric to the
    bit."""
    thin = torch.tensor([[40.0, 40, 60, 0.05, 0.3], [40, 40, 0.05, 60, 0.3], [20, 50, 0.02, 45, -1.2]]).double()
    large = random_boxes(200, rng, span=80, turns=2)
    large[:, 2:4] += 20  # short sides of at least 22 px: never a tie with the thin ones
    want = check_reference(thin, large, device, torch.float32, "iof", atol=5e-6)
    assert (want > 0.05).sum() > 20, "too few overlapping pairs to measure"
    boxes = torch.cat([thin, large[:40]])
    m = iou(boxes, boxes, device=device, dtype=torch.float32)
    assert torch.equal(m, m.T)


# ---------------------------------------------------------------- exact where the geometry is exact


def test_identical_boxes_are_exactly_one(device, dtype, rng):
    a = random_boxes(100, rng, turns=3).to(dtype)
    for mode in MODES:
        assert (iou(a, a, mode, True, device=device, dtype=dtype) == 1).all()
        assert (iou(a, a, mode, device=device, dtype=dtype).diagonal() == 1).all()
        assert (iou(a, a, mode, True, False, device=device, dtype=dtype) == 1).all()


def test_disjoint_and_touching_boxes_are_zero(device, dtype, rng):
    # An axis-aligned grid of 2 x 2 squares that touch their neighbours along edges and corners: exactly 0.
    xy = torch.cartesian_prod(torch.arange(4.0), torch.arange(4.0)) * 2 + 1
    grid = torch.cat([xy, torch.full((16, 2), 2.0), torch.zeros(16, 1)], 1)
    got = iou(grid, grid, device=device, dtype=dtype)
    assert torch.equal(got, torch.eye(16, dtype=torch.float64))
    # Far apart, any angle: exactly 0 (the circumscribed circles are apart).
    a, b = random_boxes(30, rng, turns=2), random_boxes(30, rng, turns=2)
    b[:, 0] += 500
    for mode in MODES:
        assert (iou(a, b, mode, device=device, dtype=dtype) == 0).all()
    # Rotated boxes sharing an edge (the second one moved by its width along its axis): 0 up to rounding of the
    # corners in the box's frame.
    t = rng.initial_seed() % 1000 / 1000 * math.pi
    one = torch.tensor([[10.0, 20.0, 4.0, 2.0, t]], dtype=torch.float64)
    two = one + torch.tensor([[4 * math.cos(t), 4 * math.sin(t), 0, 0, 0]], dtype=torch.float64)
    assert iou(one, two, device=device, dtype=dtype).abs().max() < 10 * TOL[dtype]


@pytest.mark.parametrize("inner_first", [True, False])
def test_nested_boxes_are_the_area_ratio(device, dtype, rng, inner_first):
    """A box inside another, at any angles: IoU is exactly area_small / (area_small + area_big - area_small) in the
    dtype's arithmetic, IoF 1 or the ratio."""
    big = torch.tensor([[50.0, 50.0, 40.0, 30.0, 0.0]]).repeat(20, 1)
    big[:, 4] = (torch.rand(20, generator=rng) * 2 - 1) * math.pi
    small = big.clone()
    small[:, 2:4] = torch.rand(20, 2, generator=rng) * 8 + 1  # at most 9 x 9 around the centre: inside 30 x 40
    small[:, :2] += torch.rand(20, 2, generator=rng) * 4 - 2
    small[:, 4] = (torch.rand(20, generator=rng) * 2 - 1) * math.pi
    big, small = big.to(dtype), small.to(dtype)
    a_small = small[:, 2] * small[:, 3]
    a_big = big[:, 2] * big[:, 3]
    want = (a_small / (a_small + a_big - a_small)).double()
    first, second = (small, big) if inner_first else (big, small)
    assert torch.equal(iou(first, second, "iou", True, device=device, dtype=dtype), want)
    iof = iou(first, second, "iof", True, device=device, dtype=dtype)
    assert torch.equal(iof, torch.ones_like(want) if inner_first else (a_small / a_big).double())


@pytest.mark.parametrize("delta", [1e-7, 1e-5, 1e-3])
def test_near_parallel_edges(device, dtype, rng, delta):
    """Boxes turned by a hair against each other (no parallel-edge threshold to trip on, unlike the segment
    intersection tests of detectron2 and mmcv)."""
    a = random_boxes(50, rng, turns=2)
    b = a.clone()
    b[:, 4] += delta
    b[:, :2] += torch.rand(50, 2, generator=rng, dtype=torch.float64) * 4 - 2
    for mode in MODES:
        check_reference(a, b, device, dtype, mode, True, atol=10 * TOL[dtype])


def test_angles_beyond_pi_are_the_same_box(device, dtype, rng):
    """angle + pi and angle + 2 pi (and - pi, + 3 pi) give the same box: IoU 1 up to the rounding of the angle."""
    a = random_boxes(60, rng)
    for turn in (math.pi, 2 * math.pi, -math.pi, 3 * math.pi):
        b = a.clone()
        b[:, 4] += turn
        got = iou(a, b, "iou", True, device=device, dtype=dtype)
        # A rounded angle of size ~10 moves corners of 40 px boxes by 40 * 10 * eps.
        tol = 1e-11 if dtype == torch.float64 else 1e-4
        torch.testing.assert_close(got, torch.ones_like(got), rtol=0, atol=tol)
        c = random_boxes(60, rng)
        torch.testing.assert_close(
            iou(a, c, device=device, dtype=dtype), iou(b, c, device=device, dtype=dtype), rtol=0, atol=tol
        )


def test_degenerate_and_non_finite_boxes(device, dtype):
    """mmcv's rule: w * h < 1e-14 has IoU 0 with every box (zero width, zero area, one negative side); both sides
    negative is the same box as both positive. A NaN or infinite parameter gives NaN."""
    good = torch.tensor([[10.0, 10, 4, 4, 0.2]], dtype=torch.float64)
    odd = torch.tensor(
        [
            [10.0, 10, 0, 4, 0.2],  # zero width
            [10.0, 10, 4, 0, 0.2],  # zero height
            [10.0, 10, 1e-8, 1e-7, 0.2],  # area 1e-15
            [10.0, 10, -4, 4, 0.2],  # negative area
            [10.0, 10, -4, -4, 0.2],  # the same box as `good`
            [float("nan"), 10, 4, 4, 0.2],
            [10.0, 10, float("inf"), 4, 0.2],
            [10.0, 10, 4, 4, float("inf")],
        ],
        dtype=torch.float64,
    )
    for mode in MODES:
        got = iou(odd, good, mode, device=device, dtype=dtype)[:, 0]
        want = box_iou_rotated_reference(odd.to(dtype).double(), good, mode)[:, 0]
        torch.testing.assert_close(got, want, equal_nan=True)
        assert torch.equal(got[:4], torch.zeros(4, dtype=torch.float64)) and got[4] == 1 and got[5:].isnan().all()
        assert (iou(good, odd, mode, device=device, dtype=dtype)[0, :4] == 0).all()
        assert (iou(odd[:4], odd[:4], mode, device=device, dtype=dtype) == 0).all()  # even with itself


def test_large_coordinates_small_boxes(device, dtype, rng):
    """Centres at 1e6 px (a float32 step of 1/16 there), boxes of a few pixels: the offset between the two centres is
    exact, so float32 keeps its precision where absolute corners would have 1/16 px steps."""
    a = random_boxes(40, rng, span=8)
    a[:, 2:4] = a[:, 2:4] / 10 + 1
    b = a.clone()
    b[:, :2] += torch.rand(40, 2, generator=rng, dtype=torch.float64) * 2 - 1
    b[:, 4] += torch.rand(40, generator=rng, dtype=torch.float64)
    shift = 1e6
    a[:, :2] += shift
    b[:, :2] += shift
    want = check_reference(a, b, device, dtype, atol=10 * TOL[dtype])
    assert want.max() > 0.5  # the pairs overlap: a precision loss would show


def test_clockwise_false_negates_the_angle(device, dtype, rng):
    a, b = random_boxes(30, rng), random_boxes(20, rng)
    flip = torch.tensor([1.0, 1, 1, 1, -1], dtype=torch.float64)
    for mode in MODES:
        assert torch.equal(
            iou(a, b, mode, False, False, device=device, dtype=dtype),
            iou(a * flip, b * flip, mode, device=device, dtype=dtype),
        )


def test_iou_is_symmetric_and_iof_is_over_bboxes1(device, rng):
    a, b = random_boxes(30, rng), random_boxes(20, rng)
    torch.testing.assert_close(iou(a, b, device=device), iou(b, a, device=device).t(), rtol=0, atol=1e-12)
    inter = iou(a, b, "iof", device=device) * (a[:, 2] * a[:, 3])[:, None]
    torch.testing.assert_close(
        inter, iou(b, a, "iof", device=device).t() * (b[:, 2] * b[:, 3])[None], atol=1e-9, rtol=0
    )


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("aligned", [False, True])
def test_reduced_precision(device, rng, half, aligned):
    a, b = random_boxes(70, rng), random_boxes(70 if aligned else 40, rng)
    for mode in MODES:
        check_reference(a, b, device, half, mode, aligned)


def test_empty(device, dtype):
    e = torch.empty(0, 5, device=device, dtype=dtype)
    b = torch.rand(3, 5, device=device, dtype=dtype) + 1
    assert visdet_ops.box_iou_rotated(e, b).shape == (0, 3)
    assert visdet_ops.box_iou_rotated(b, e).shape == (3, 0)
    assert visdet_ops.box_iou_rotated(e, e, aligned=True).shape == (0,)
    assert visdet_ops.box_iou_rotated(e, b, "iof").dtype == dtype


def test_non_contiguous(device, rng):
    a, b = random_boxes(40, rng), random_boxes(30, rng)
    wide = torch.full((40, 10), float("nan"), dtype=torch.float64)
    wide[:, ::2] = a
    got = visdet_ops.box_iou_rotated(wide[:, ::2].to(device), b.t().contiguous().t().to(device))
    torch.testing.assert_close(got.cpu(), box_iou_rotated_reference(a, b), rtol=0, atol=1e-12)
    got = visdet_ops.box_iou_rotated(b[:1].expand(5, 5).to(device), b.to(device))
    torch.testing.assert_close(got.cpu(), box_iou_rotated_reference(b[:1], b).expand(5, -1), rtol=0, atol=1e-12)


def test_no_gradient(rng):
    """No backward, as mmcv: the output does not require grad, so a backward raises instead of silently giving
    the boxes no gradient."""
    a = random_boxes(4, rng).requires_grad_()
    out = visdet_ops.box_iou_rotated(a, a)
    assert not out.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.sum().backward()


def test_opcheck(device, rng):
    a, b = random_boxes(9, rng).to(device), random_boxes(12, rng).to(device)
    op = torch.ops.visdet_ops.box_iou_rotated.default
    for mode in MODES:
        torch.library.opcheck(op, (a, b, mode, False, True))
        torch.library.opcheck(op, (a, a.flip(0), mode, True, False))
    torch.library.opcheck(op, (a.float(), b.float()))


def test_compiles_fullgraph(rng):
    a, b = random_boxes(9, rng), random_boxes(12, rng)

    def f(x, y):
        return visdet_ops.box_iou_rotated(x, y).sum(1) + visdet_ops.box_iou_rotated(x, x, "iof", True, False)

    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(a, b), f(a, b))


def test_op_takes_mode_by_name(device, rng):
    a = random_boxes(7, rng).to(device)
    for mode in MODES:
        got = torch.ops.visdet_ops.box_iou_rotated(a, a.flip(0), mode, True, True)
        torch.testing.assert_close(got.cpu(), box_iou_rotated_reference(a.cpu(), a.flip(0).cpu(), mode, True))
    for mode in ("giou", "IoU", ""):
        with pytest.raises(RuntimeError, match=f"box_iou_rotated: mode must be 'iou' or 'iof', got '{mode}'"):
            torch.ops.visdet_ops.box_iou_rotated(a, a, mode)
    with pytest.raises((TypeError, RuntimeError)):
        torch.ops.visdet_ops.box_iou_rotated(a, a, 0)


@pytest.mark.parametrize(
    "args, error, match",
    [
        (
            (torch.zeros(3, 4), torch.zeros(3, 5)),
            RuntimeError,
            r"bboxes1 must have shape \[M, 5\] \(x, y, w, h, angle\)",
        ),
        ((torch.zeros(3, 5), torch.zeros(5)), RuntimeError, r"bboxes2 must have 2 dimensions"),
        ((torch.zeros(2, 3, 5), torch.zeros(3, 5)), RuntimeError, r"bboxes1 must have 2 dimensions"),
        ((torch.zeros(3, 5, dtype=torch.int32), torch.zeros(3, 5)), RuntimeError, "bboxes1 must be a floating point"),
        ((torch.zeros(3, 5), torch.zeros(3, 5, dtype=torch.float64)), RuntimeError, "same dtype"),
        ((torch.zeros(2, 5), torch.zeros(3, 5), "iou", True), RuntimeError, "aligned=True needs as many bboxes1"),
        ((torch.zeros(2, 5), torch.zeros(3, 5), "giou"), ValueError, r"mode must be one of \['iou', 'iof'\]"),
        # mmcv asserts the mode: code that catches AssertionError keeps working.
        ((torch.zeros(1, 5), torch.zeros(1, 5), "giou"), AssertionError, r"mode must be one of \['iou', 'iof'\]"),
        (([[0.0] * 5], torch.zeros(3, 5)), TypeError, "bboxes1 must be a Tensor"),
    ],
)
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match=match):
        visdet_ops.box_iou_rotated(*args)


def test_devices_must_match():
    from ..conftest import require_cuda

    require_cuda()
    with pytest.raises(RuntimeError, match="bboxes1 and bboxes2 must be on the same device"):
        visdet_ops.box_iou_rotated(torch.zeros(2, 5).cuda(), torch.zeros(2, 5))


# ---------------------------------------------------------------- integer edge values (tests/integer_edge_harness.py)

# box_iou_rotated has no integer argument (mode is a `str`, aligned and clockwise are bools): no rows.
INTEGER_EDGE_ROWS: list = []


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


class RotatedBoxHead(amp.Producer):
    """An oriented detector's box branch: (x, y, w, h, angle) in the autocast dtype."""

    def __init__(self, gen: torch.Generator):
        super().__init__()
        self.fc = amp.randomize(torch.nn.Linear(16, 5), gen, 0.5)

    def forward(self, feats):
        out = self.fc(feats)
        return torch.cat([out[:, :2] * 40 + 50, out[:, 2:4].sigmoid() * 30 + 2, out[:, 4:] * 2], 1)


@pytest.mark.parametrize("device_name, dtype", amp.AMP)
@pytest.mark.parametrize("mode", MODES)
def test_box_iou_rotated_under_autocast(rng, device_name, dtype, mode):
    """16-bit predicted boxes (a Linear's output under autocast) against float32 targets: a float32 output equal to
    the float32 op on the same (upcast) values. No gradient to compare (the op has none), so this is its autocast
    case rather than an AUTOCAST_CASES entry."""
    device = amp.device_for(device_name)
    feats = torch.randn(30, 16, generator=rng).to(device)
    head = RotatedBoxHead(rng).to(device)
    target = random_boxes(20, rng, span=100).float().to(device)
    with torch.autocast(device.type, dtype=dtype):
        pred = head(feats)
        got = visdet_ops.box_iou_rotated(pred, target, mode)
        raw = torch.ops.visdet_ops.box_iou_rotated(pred, target.to(dtype), mode)
    assert pred.dtype == dtype and got.dtype == torch.float32 and raw.dtype == torch.float32
    assert torch.equal(got, visdet_ops.box_iou_rotated(pred.float(), target, mode))
    assert torch.equal(raw, visdet_ops.box_iou_rotated(pred.float(), target.to(dtype).float(), mode))


AUTOCAST_CASES: dict = {}
AUTOCAST_COVERED_OTHERWISE = {"box_iou_rotated": "test_box_iou_rotated_under_autocast"}


def _opcheck_box_iou_rotated(device, dtype, gen):
    boxes = random_boxes(30, gen).float().to(device)
    return torch.ops.visdet_ops.box_iou_rotated.default, (boxes.to(dtype), boxes, "iou", False, True)


AUTOCAST_OPCHECKS = {"box_iou_rotated": _opcheck_box_iou_rotated}


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_BAD = ("cols4", "ndim3", "ndim1", "aligned_mn", "mode", "dtype", "list")


def rotated_values(run: core.Run, n: int, degenerate: bool, special: bool) -> torch.Tensor:
    """n boxes: centres on a 1/8 grid in [0, 60), sides 1/8 to 25 px (a third of the time on that grid), angles
    on a grid of pi/8 now and then (parallel and perpendicular edges), else anywhere in [-2 pi, 2 pi)."""
    xy = (run.rand(n, 2) * 60 * 8).round() / 8
    wh = run.rand(n, 2) * 25 + 0.125
    grid = run.rand(n, 2) < 0.33
    wh[grid] = (wh[grid] * 8).round() / 8
    angle = (run.rand(n, 1) * 4 - 2) * math.pi
    snap = run.rand(n, 1) < 0.3
    angle[snap] = (angle[snap] / (math.pi / 8)).round() * (math.pi / 8)
    boxes = torch.cat([xy, wh, angle], 1)
    if degenerate and n:
        boxes[::3, 2 + n % 2] = [0.0, -1.5][n % 2]
    if special and n:
        boxes[n // 2, n % 5] = [float("nan"), float("inf"), -float("inf")][n % 3]
    return boxes


@st.composite
def _case(draw, device):
    bad = core.pick_bad(draw, _BAD)
    main = draw(st.sampled_from(core.FLOATS))
    top = 300 if draw(core.one_in(10)) else 9  # now and then more than one 32 x 32 CUDA tile
    m, n = draw(st.integers(0, top)), draw(st.integers(0, top))
    aligned = draw(st.booleans())
    if aligned:
        n = m
    case = {
        "fn": "box_iou_rotated",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "m": m,
        "n": n,
        "mode": draw(st.sampled_from(MODES)),
        "aligned": aligned,
        "clockwise": draw(st.booleans()),
        "positional": draw(st.booleans()),
        "degenerate": draw(core.one_in(5)),
        "special": draw(core.one_in(8)),
        "bad": bad,
    }
    case["t"], mixed = core.draw_tensors(draw, {"bboxes1": 2, "bboxes2": 2}, main, device)
    if bad == "dtype":
        case["t"]["bboxes1"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "mode":
        case["mode"] = draw(st.sampled_from(["giou", "IoU", ""]))
    elif bad == "aligned_mn":
        case["aligned"], case["n"] = True, m + 1
    case["expect"] = core.expectation(bad, mixed)
    return case


def _run(case):
    run = core.family_run(case, "box_iou_rotated")
    bad, m, n = case["bad"], case["m"], case["n"]
    b1 = rotated_values(run, m, case["degenerate"], case["special"])
    b2 = rotated_values(run, n, case["degenerate"], False)
    if bad == "cols4":
        b1 = b1[:, :4]
    a1, a2 = run.arg("bboxes1", b1), run.arg("bboxes2", b2)
    x1, x2 = a1.x(), a2.x()
    if bad == "ndim3":
        x1 = x1[None]
    elif bad == "ndim1":
        x1 = x1.reshape(-1)
    elif bad == "list":
        x1 = x1.tolist()
    mixed = case["expect"] == "either"
    dt = core.worst(a1.dt, a2.dt)
    mode, aligned, clockwise = case["mode"], case["aligned"], case["clockwise"]

    def check(out):
        want = box_iou_rotated_reference(a1.r(), a2.r(), mode, aligned, clockwise)
        core.assert_close("output", out, want, dt)
        core.out_dtype_ok(out, a1.dt, mixed)
        if out.requires_grad:
            raise core.Mismatch("the output requires grad (box_iou_rotated has no gradient)")

    if case["positional"]:
        call = lambda: visdet_ops.box_iou_rotated(x1, x2, mode, aligned, clockwise)  # noqa: E731
    else:
        call = lambda: visdet_ops.box_iou_rotated(x1, x2, mode=mode, aligned=aligned, clockwise=clockwise)  # noqa: E731
    run.outcome(call, check)


FUZZ = core.family("box_iou_rotated", ["box_iou_rotated"])((_case, _run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)


# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "box_iou_rotated": lambda rng: (
        lambda a, b: visdet_ops.box_iou_rotated(a, b, "iof", clockwise=False),
        (random_boxes(3, rng).float(), random_boxes(2, rng).float()),
        {"mode": "iof", "aligned": 0, "clockwise": 0},
    ),
}


@ox.needs_exporter
def test_onnx_node_runs_nothing_else(onnx_table, rng):
    """The exported graph is the one custom node and its inputs (the wrapper's detach leaves nothing behind)."""
    model = ox.CallModel(lambda a, b: visdet_ops.box_iou_rotated(a, b))
    onnx_model = ox.export(onnx_table, model, (random_boxes(3, rng).float(), random_boxes(2, rng).float()))
    assert [n.op_type for n in onnx_model.graph.node if n.domain] == ["box_iou_rotated"]
