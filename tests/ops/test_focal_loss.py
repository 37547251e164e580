from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st

import visdet_ops
from visdet_ops import SigmoidFocalLoss, SoftmaxFocalLoss, sigmoid_focal_loss, softmax_focal_loss
from visdet_ops.reference.focal_loss import (
    py_sigmoid_focal_loss,
    py_softmax_focal_loss,
    sigmoid_focal_loss_mmcv_formula,
    sigmoid_focal_loss_reference,
    softmax_focal_loss_mmcv_formula,
    softmax_focal_loss_reference,
)

from .. import autocast_harness as amp
from .. import fuzz_core as core
from ..conftest import require_cuda, torchvision_or_skip

KINDS = {
    "sigmoid": (sigmoid_focal_loss, sigmoid_focal_loss_reference),
    "softmax": (softmax_focal_loss, softmax_focal_loss_reference),
}
MODULES = {"sigmoid": SigmoidFocalLoss, "softmax": SoftmaxFocalLoss}
REDUCTIONS = ("none", "mean", "sum")

# float32: libm-accurate exp/log1p (a few ulps per logit) and float sums of up to a few hundred
# terms; a wrong formula is off by O(1) relative.
TOL = {torch.float32: dict(rtol=2e-5, atol=1e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def case(kind: str, rng: torch.Generator, rows: int = 37, classes: int = 5, scale: float = 3.0):
    """Logits and targets: sigmoid: classes and background (== classes); softmax: classes and ignored rows (-1)."""
    x = torch.randn(rows, classes, generator=rng, dtype=torch.float64) * scale
    t = torch.randint(0, classes + 1, (rows,), generator=rng)
    return x, torch.where(t == classes, -1, t) if kind == "softmax" else t


def reference_and_grad(kind, x, target, gamma, alpha, weight, reduction, grad_out):
    ref = KINDS[kind][1]
    xr = x.detach().double().cpu().requires_grad_()
    want = ref(xr, target.cpu(), gamma, alpha, None if weight is None else weight.double().cpu(), reduction)
    (want_grad,) = torch.autograd.grad(want, xr, grad_out.double().cpu())
    return want.detach(), want_grad


def check_against_formula(formula, kind, device, dtype, x, target, weight, reduction, tol, grad_tol):
    """Our loss (gamma 2, alpha 0.25) of x in dtype on device against formula(float64 x), a transcription of another
    library's loss, and the gradients of their sums."""
    xr = x.clone().requires_grad_()
    want = formula(xr)
    xd = x.to(device, dtype).requires_grad_()
    got = KINDS[kind][0](
        xd, target.to(device), 2.0, 0.25, None if weight is None else weight.to(device, dtype), reduction
    )
    torch.testing.assert_close(got.detach().cpu().double(), want.detach(), **tol)
    (want_grad,) = torch.autograd.grad(want.sum(), xr)
    (got_grad,) = torch.autograd.grad(got.sum(), xd)
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **grad_tol)


def random_grad_out(kind, reduction, rows, classes, rng, dtype=torch.float64):
    if reduction != "none":
        shape = ()
    elif kind == "sigmoid":
        shape = (rows, classes)
    else:
        shape = (rows,)
    return torch.randn(shape, generator=rng, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
@pytest.mark.parametrize("gamma, alpha", [(2.0, 0.25), (0.0, 0.5), (0.5, 0.75), (1.5, -0.3)])
@pytest.mark.parametrize("classes", [1, 5, 17, 80])
def test_forward_backward_match_reference(device, dtype, rng, kind, reduction, with_weight, gamma, alpha, classes):
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=41, classes=classes)
    weight = torch.rand(classes, generator=rng, dtype=torch.float64) + 0.5 if with_weight else None
    grad_out = random_grad_out(kind, reduction, 41, classes, rng)
    want, want_grad = reference_and_grad(kind, x, target, gamma, alpha, weight, reduction, grad_out)

    xd = x.to(device, dtype).requires_grad_()
    wd = None if weight is None else weight.to(device, dtype)
    got = fn(xd, target.to(device), gamma, alpha, wd, reduction)
    assert got.dtype == dtype and got.device.type == device.type and got.shape == want.shape
    torch.testing.assert_close(got.detach().cpu().double(), want, **TOL[dtype])
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, dtype))
    assert got_grad.shape == x.shape and got_grad.dtype == dtype
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **TOL[dtype])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("low_dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_precision(device, rng, kind, reduction, low_dtype):
    """Computed in float: the error is the rounding of inputs and results to the low dtype,
    so compare against the float64 reference of the rounded inputs."""
    fn = KINDS[kind][0]
    rows, classes = 300, 80
    x, target = case(kind, rng, rows=rows, classes=classes)
    x = x.to(low_dtype).double()
    weight = (torch.rand(classes, generator=rng, dtype=torch.float64) + 0.5).to(low_dtype).double()
    grad_out = random_grad_out(kind, reduction, rows, classes, rng, dtype=low_dtype).double()
    want, want_grad = reference_and_grad(kind, x, target, 2.0, 0.25, weight, reduction, grad_out)

    xd = x.to(device, low_dtype).requires_grad_()
    got = fn(xd, target.to(device), 2.0, 0.25, weight.to(device, low_dtype), reduction)
    assert got.dtype == low_dtype
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, low_dtype))
    assert got_grad.dtype == low_dtype
    # One rounding of the result (2^-11 for f16, 2^-8 for bf16), plus slack; float16's
    # subnormals (spacing 6e-8) are exact only to that absolute step.
    rtol = 2e-3 if low_dtype == torch.float16 else 1.6e-2
    floor = 6e-8 if low_dtype == torch.float16 else 0.0
    for have, expect in ((got.detach(), want), (got_grad, want_grad)):
        atol = 1e-2 * rtol * expect.abs().max().item() + floor
        torch.testing.assert_close(have.cpu().double(), expect, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_matches_mmcv_kernels_where_they_do_not_saturate(device, rng, kind, reduction):
    """mmcv's kernels, transcribed literally (reference/focal_loss.py), agree with ours for
    moderate logits in float64, weight semantics included (class rows). Moderate: |x| <= 8, since
    the literal log(1 - p) loses eps / (1 - p) to cancellation (1e-9 relative at x = 16, where it
    failed a GPU run), which the kernels' stable form does not."""
    x = (torch.randn(50, 7, generator=rng, dtype=torch.float64) * 4).clamp(-8, 8)
    target = torch.randint(0, 7, (50,), generator=rng)
    if kind == "sigmoid":
        target[::5] = 7  # background: no class weight read
    else:
        target[::5] = -1  # ignored
    weight = torch.rand(7, generator=rng, dtype=torch.float64) + 0.5
    mmcv = sigmoid_focal_loss_mmcv_formula if kind == "sigmoid" else softmax_focal_loss_mmcv_formula
    formula = lambda xr: mmcv(xr, target, 2.0, 0.25, weight, reduction)  # noqa: E731
    tol, grad_tol = dict(rtol=1e-10, atol=1e-12), dict(rtol=1e-9, atol=1e-12)
    check_against_formula(formula, kind, device, torch.float64, x, target, weight, reduction, tol, grad_tol)


@pytest.mark.parametrize(
    "kind, reduction",
    [*(("sigmoid", reduction) for reduction in REDUCTIONS), ("softmax", "none")],
    ids=["sigmoid_mmdet-none", "sigmoid_mmdet-mean", "sigmoid_mmdet-sum", "softmax_plain_pytorch-none"],
)
def test_matches_mmdet_and_plain_pytorch(device, dtype, rng, kind, reduction):
    """mmdet's py_sigmoid_focal_loss, and the softmax focal loss written in plain PyTorch."""
    x = torch.randn(64, 10, generator=rng, dtype=torch.float64) * 3
    target = torch.randint(0, 11 if kind == "sigmoid" else 10, (64,), generator=rng)  # sigmoid: 10 = background
    py = py_sigmoid_focal_loss if kind == "sigmoid" else py_softmax_focal_loss
    formula = lambda xr: py(xr, target, 2.0, 0.25, reduction)  # noqa: E731
    check_against_formula(formula, kind, device, dtype, x, target, None, reduction, TOL[dtype], TOL[dtype])


def test_sigmoid_against_torchvision(device, dtype, rng):
    """torchvision's sigmoid_focal_loss takes one-hot float targets; 'none' and 'sum' coincide
    with mmcv's ('mean' there averages over N * C)."""
    tv = torchvision_or_skip()
    x = torch.randn(40, 6, generator=rng, dtype=torch.float64).to(device, dtype) * 3
    target = torch.randint(0, 7, (40,), generator=rng).to(device)
    one_hot = torch.nn.functional.one_hot(target, 7)[:, :6].to(dtype)
    for reduction in ("none", "sum"):
        want = tv.sigmoid_focal_loss(x, one_hot, alpha=0.25, gamma=2.0, reduction=reduction)
        got = sigmoid_focal_loss(x, target, 2.0, 0.25, None, reduction)
        torch.testing.assert_close(got, want, rtol=1e-5 if dtype == torch.float32 else 1e-10, atol=1e-6)


def test_sigmoid_large_logits_stay_exact(device):
    """Confidently wrong and confidently right logits up to |x| = 80 in float32. mmcv's float
    formula saturates there (1 - p == 0, log clamped at FLT_MIN); ours matches float64."""
    x = torch.tensor([[-80.0, 80.0, 30.0, -30.0, 17.5, -17.5, 0.0]], dtype=torch.float64).repeat(2, 1)
    target = torch.tensor([0, 7])  # row 0: class 0 positive; row 1: background
    want, want_grad = reference_and_grad("sigmoid", x, target, 2.0, 0.25, None, "none", torch.ones(2, 7))
    xd = x.to(device, torch.float32).requires_grad_()
    got = sigmoid_focal_loss(xd, target.to(device), 2.0, 0.25, None, "none")
    got.sum().backward()
    assert torch.isfinite(got).all() and torch.isfinite(xd.grad).all()
    torch.testing.assert_close(got.detach().cpu().double(), want, rtol=1e-5, atol=1e-30)
    torch.testing.assert_close(xd.grad.cpu().double(), want_grad, rtol=1e-5, atol=1e-30)
    # The claim about mmcv: at x = 30 for a negative class its float32 loss is
    # (1 - alpha) * 87.3, the true value (1 - alpha) * 30.
    mmcv32 = sigmoid_focal_loss_mmcv_formula(x.float(), target, 2.0, 0.25, None, "none")
    assert abs(mmcv32[1, 2].item() - 0.75 * 87.3365) < 1e-2
    assert abs(got[1, 2].item() - 0.75 * 30.0) < 1e-4


def _softmax_focal_mp(row: list[float], t: int, gamma: float, alpha: float):
    """One row's softmax focal loss and its gradient at 60 significant digits (mpmath; the
    gradient by mpmath's numerical differentiation, independent of our closed form)."""
    mpmath = pytest.importorskip("mpmath")
    mp = mpmath.mp
    mp.dps = 60

    def loss(*xs):
        top = max(xs)
        exps = [mpmath.exp(v - top) for v in xs]
        total = mpmath.fsum(exps)
        u = mpmath.fsum(e for j, e in enumerate(exps) if j != t) / total
        return -alpha * (u**gamma if u > 0 else mpmath.mpf(gamma == 0)) * mpmath.log(exps[t] / total)

    xs = [mpmath.mpf(v) for v in row]
    grad = [float(mpmath.diff(lambda v, c=c: loss(*(xs[:c] + [v] + xs[c + 1 :])), xs[c])) for c in range(len(xs))]
    return float(loss(*xs)), grad


def test_softmax_confident_rows_stay_exact(device):
    """In float32: p_t within 1e-11 of 1 (1 - p_t computed as such would be 0), p_t ~ e^-70
    (log p_t far below mmcv's log(FLT_MIN) clamp), and an ordinary row; against mpmath at 60
    digits (float64 autograd through log_softmax itself loses ~1e-4 on the first row)."""
    x = torch.zeros(3, 12, dtype=torch.float64)
    x[0, 3] = 25.0  # target 3: p_t = 1 - 1.5e-10
    x[1, 5] = 70.0  # target 0: p_t ~ e^-70
    x[2] = torch.linspace(-5, 5, 12, dtype=torch.float64)
    target = [3, 0, 11]
    for gamma in (2.0, 0.5, 0.0):
        xd = x.to(device, torch.float32).requires_grad_()
        got = softmax_focal_loss(xd, torch.tensor(target, device=device), gamma, 0.25, None, "none")
        got.sum().backward()
        assert torch.isfinite(got).all() and torch.isfinite(xd.grad).all()
        for n in range(3):
            row = x[n].float().double().tolist()
            want, want_grad = _softmax_focal_mp(row, target[n], gamma, 0.25)
            assert got[n].item() == pytest.approx(want, rel=1e-5, abs=1e-37)
            torch.testing.assert_close(
                xd.grad[n].cpu().double(), torch.tensor(want_grad, dtype=torch.float64), rtol=1e-4, atol=1e-37
            )
    # p_t == 1 - 1.5e-42 (1 - p_t is a float32 subnormal): finite, no NaN from 0 * inf.
    x = torch.zeros(1, 80, device=device)
    x[0, 0] = 100.0
    for gamma in (2.0, 0.5, 0.0):
        xd = x.clone().requires_grad_()
        softmax_focal_loss(xd, torch.tensor([0], device=device), gamma, 0.25, None, "sum").backward()
        assert torch.isfinite(xd.grad).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("gamma", [2.0, 0.5])
def test_gradcheck(device, rng, kind, reduction, gamma):
    x, target = case(kind, rng, rows=6, classes=4, scale=2.0)
    weight = (torch.rand(4, generator=rng, dtype=torch.float64) + 0.5).to(device)
    x = x.to(device).requires_grad_()
    target = target.to(device)
    fn = KINDS[kind][0]
    assert torch.autograd.gradcheck(lambda inp: fn(inp, target, gamma, 0.25, weight, reduction), (x,))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_weight", [False, True], ids=["no_weight", "weight"])
def test_opcheck(device, rng, kind, reduction, with_weight):
    x, target = case(kind, rng, rows=6, classes=4)
    weight = (torch.rand(4, generator=rng, dtype=torch.float64) + 0.5).to(device) if with_weight else None
    op = getattr(torch.ops.visdet_ops, f"{kind}_focal_loss").default
    args = (x.to(device).requires_grad_(), target.to(device), 2.0, 0.25, weight, reduction)
    torch.library.opcheck(op, args)
    backward = getattr(torch.ops.visdet_ops, f"_{kind}_focal_loss_backward").default
    grad_out = random_grad_out(kind, reduction, 6, 4, rng).to(device)
    # Inputs without requires_grad: the backward op refuses a second derivative (tested below).
    torch.library.opcheck(backward, (grad_out, x.detach().to(device), target.to(device), 2.0, 0.25, weight, reduction))


@pytest.mark.parametrize("kind", KINDS)
def test_empty_rows(device, dtype, kind):
    fn = KINDS[kind][0]
    x = torch.empty(0, 5, device=device, dtype=dtype, requires_grad=True)
    target = torch.empty(0, dtype=torch.long, device=device)
    none = fn(x, target, 2.0, 0.25, None, "none")
    assert none.shape == ((0, 5) if kind == "sigmoid" else (0,)) and none.dtype == dtype
    total = fn(x, target, 2.0, 0.25, None, "sum")
    assert total.shape == () and total.item() == 0.0
    # mean of nothing: 0 / 0 = NaN, like mmcv (loss.sum() / input.size(0)) and torch.mean.
    mean = fn(x, target, 2.0, 0.25, None, "mean")
    assert mean.shape == () and mean.dtype == dtype and torch.isnan(mean)
    (grad,) = torch.autograd.grad(total, x)
    assert grad.shape == (0, 5) and grad.dtype == dtype


def test_empty_classes(device, dtype):
    """C == 0: the sigmoid's only valid target is 0 (background); the softmax's only valid
    targets are ignored rows."""
    x = torch.empty(3, 0, device=device, dtype=dtype, requires_grad=True)
    assert sigmoid_focal_loss(x, torch.zeros(3, dtype=torch.long, device=device), reduction="none").shape == (3, 0)
    assert sigmoid_focal_loss(x, torch.zeros(3, dtype=torch.long, device=device)).item() == 0.0
    ignored = torch.full((3,), -1, dtype=torch.long, device=device)
    none = softmax_focal_loss(x, ignored, reduction="none")
    assert none.shape == (3,) and torch.equal(none.cpu(), torch.zeros(3, dtype=dtype))
    assert softmax_focal_loss(x, ignored, reduction="mean").item() == 0.0
    with pytest.raises(RuntimeError, match=r"sigmoid_focal_loss: target values must lie in \[0, num_classes\]"):
        sigmoid_focal_loss(x, torch.ones(3, dtype=torch.long, device=device))
    with pytest.raises(RuntimeError, match="softmax_focal_loss: target values must be < num_classes = 0"):
        softmax_focal_loss(x, torch.zeros(3, dtype=torch.long, device=device))


@pytest.mark.parametrize("kind", KINDS)
def test_non_contiguous(device, dtype, rng, kind):
    """Transposed input, strided target and weight, and non-contiguous / expanded grad_output
    (the expanded one is read in place, the result must not change)."""
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=23, classes=9)
    weight = torch.rand(9, generator=rng, dtype=torch.float64) + 0.5
    x_nc = x.t().contiguous().to(device, dtype).t().requires_grad_()
    t_nc = torch.stack([target, target], 1).to(device)[:, 0]
    w_nc = torch.stack([weight, weight], 1).to(device, dtype)[:, 1]
    assert not x_nc.is_contiguous() and not t_nc.is_contiguous() and not w_nc.is_contiguous()
    grad_out = random_grad_out(kind, "none", 23, 9, rng)
    want, want_grad = reference_and_grad(kind, x, target, 2.0, 0.25, weight, "none", grad_out)
    got = fn(x_nc, t_nc, 2.0, 0.25, w_nc, "none")
    torch.testing.assert_close(got.detach().cpu().double(), want, **TOL[dtype])
    go = grad_out.to(device, dtype)
    go_nc = go.t().contiguous().t() if go.dim() == 2 else torch.stack([go, go], 1)[:, 0]
    assert not go_nc.is_contiguous()
    (got_grad,) = torch.autograd.grad(got, x_nc, go_nc)
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **TOL[dtype])
    # loss.sum(): autograd hands the backward an expanded (stride 0) grad_output.
    _, want_sum_grad = reference_and_grad(kind, x, target, 2.0, 0.25, weight, "sum", torch.tensor(1.0))
    (sum_grad,) = torch.autograd.grad(fn(x_nc, t_nc, 2.0, 0.25, w_nc, "none").sum(), x_nc)
    torch.testing.assert_close(sum_grad.cpu().double(), want_sum_grad, **TOL[dtype])


def _bad_input_cases():
    x = torch.zeros(4, 3)
    t = torch.tensor([0, 1, 2, 0])
    cases = []
    for kind in KINDS:
        cases += [
            (kind, dict(input=torch.zeros(4, 3, 1)), f"{kind}_focal_loss: input must have 2 dimensions"),
            (kind, dict(target=t[:, None]), f"{kind}_focal_loss: target must have 1 dimensions"),
            (kind, dict(target=t.int()), "target must be an int64 tensor of class indices, got Int"),
            (kind, dict(target=t.float()), "target must be an int64 tensor of class indices, got Float"),
            (kind, dict(target=t[:3]), r"target must have shape \[N\] with N = input.size\(0\) = 4, got \[3\]"),
            (kind, dict(weight=torch.ones(4)), r"weight must have shape \[C\] = \[3\] \(one weight per class\)"),
            (kind, dict(weight=torch.ones(3, 1)), r"weight must have shape \[C\] = \[3\]"),
            (kind, dict(weight=torch.ones(3, dtype=torch.float64)), "input and weight must have the same dtype"),
            (kind, dict(input=x.long()), "input must be a floating point tensor"),
            (kind, dict(gamma=-1.0), "gamma must be a non-negative finite number, got -1"),
            (kind, dict(gamma=float("nan")), "gamma must be a non-negative finite number"),
            (kind, dict(alpha=float("inf")), "alpha must be a finite number"),
        ]
    cases += [
        (
            "sigmoid",
            dict(target=torch.tensor([0, 1, 4, 0])),
            r"target values must lie in \[0, num_classes\] = \[0, 3\]",
        ),
        ("sigmoid", dict(target=torch.tensor([0, -1, 2, 0])), r"got values in \[-1, 2\]"),
        ("softmax", dict(target=torch.tensor([0, 1, 3, -1])), "target values must be < num_classes = 3"),
    ]
    return cases


@pytest.mark.parametrize("kind, kwargs, match", _bad_input_cases())
def test_bad_inputs(kind, kwargs, match):
    args = dict(input=torch.zeros(4, 3), target=torch.tensor([0, 1, 2, 0]), gamma=2.0, alpha=0.25, weight=None)
    args.update(kwargs)
    with pytest.raises(RuntimeError, match=match):
        KINDS[kind][0](**args)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_reduction(kind):
    fn = KINDS[kind][0]
    with pytest.raises(ValueError, match=f"{kind}_focal_loss: reduction must be 'none', 'mean' or 'sum', got 'avg'"):
        fn(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), reduction="avg")
    op = getattr(torch.ops.visdet_ops, f"{kind}_focal_loss")
    with pytest.raises(RuntimeError, match=f"{kind}_focal_loss: reduction must be 'none', 'mean' or 'sum'"):
        op(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), 2.0, 0.25, None, "avg")
    with pytest.raises(ValueError, match="reduction"):
        MODULES[kind](2.0, 0.25, reduction="elementwise_mean")


@pytest.mark.parametrize("kind", KINDS)
def test_bad_backward_inputs(kind):
    backward = getattr(torch.ops.visdet_ops, f"_{kind}_focal_loss_backward")
    x, t = torch.zeros(4, 3), torch.tensor([0, 1, 2, 0])
    with pytest.raises(RuntimeError, match="grad_output of a reduced loss must be a scalar tensor"):
        backward(torch.ones(4), x, t, 2.0, 0.25, None, "mean")
    with pytest.raises(RuntimeError, match="grad_output must have"):
        backward(torch.ones(5, 3), x, t, 2.0, 0.25, None, "none")
    with pytest.raises(RuntimeError, match="input and grad_output must have the same dtype"):
        backward(torch.ones((), dtype=torch.float64), x, t, 2.0, 0.25, None, "sum")


def test_bad_targets_cuda_give_nan_without_sync():
    """By default the CUDA forward does not make the host wait for a target check: a row with an
    out-of-range target gets a NaN loss (a NaN 'mean' / 'sum') and NaN gradients, the other rows
    their values; nothing is read out of bounds and the device stays usable."""
    require_cuda()
    x = torch.randn(4, 3, device="cuda")
    cases = (
        (sigmoid_focal_loss, torch.tensor([0, 9, 1, 3], device="cuda")),
        (sigmoid_focal_loss, torch.tensor([0, -2, 1, 3], device="cuda")),
        (softmax_focal_loss, torch.tensor([0, 3, -1, 2], device="cuda")),
    )
    for fn, t in cases:
        xg = x.clone().requires_grad_()
        loss = fn(xg, t, reduction="none")
        (grad,) = torch.autograd.grad(loss.sum(), xg)
        row_loss = loss if loss.dim() == 1 else loss.sum(1)
        assert torch.isnan(row_loss[1]) and torch.isfinite(row_loss[[0, 2, 3]]).all()
        assert torch.isnan(grad[1]).all() and torch.isfinite(grad[[0, 2, 3]]).all()
        for reduction in ("mean", "sum"):
            assert torch.isnan(fn(x, t, reduction=reduction))
    assert sigmoid_focal_loss(x, torch.tensor([0, 3, 1, 2], device="cuda")).isfinite().item()


@pytest.mark.parametrize("variable", ["VISDET_OPS_SYNC_TARGET_CHECKS", "VISDET_OPS_SYNC_CHECKS"])
def test_bad_inputs_cuda(monkeypatch, variable):
    """VISDET_OPS_SYNC_TARGET_CHECKS=1 (or VISDET_OPS_SYNC_CHECKS=1, every op): an out-of-range
    target is flagged by the kernel and raised on the host (a 4-byte copy, the host waits)."""
    require_cuda()
    monkeypatch.setenv(variable, "1")
    x = torch.zeros(4, 3, device="cuda")
    for reduction in REDUCTIONS:
        with pytest.raises(
            RuntimeError, match=r"sigmoid_focal_loss: target values must lie in .* got values in \[0, 9\]"
        ):
            sigmoid_focal_loss(x, torch.tensor([0, 9, 1, 2], device="cuda"), reduction=reduction)
        with pytest.raises(RuntimeError, match=r"got values in \[-2, 2\]"):
            sigmoid_focal_loss(x, torch.tensor([0, -2, 1, 2], device="cuda"), reduction=reduction)
        with pytest.raises(RuntimeError, match="softmax_focal_loss: target values must be < num_classes = 3"):
            softmax_focal_loss(x, torch.tensor([0, 3, -1, 2], device="cuda"), reduction=reduction)
    with pytest.raises(RuntimeError, match="input and target must be on the same device"):
        sigmoid_focal_loss(x, torch.tensor([0, 1, 1, 2]))
    with pytest.raises(RuntimeError, match="input and weight must be on the same device"):
        softmax_focal_loss(x, torch.tensor([0, 1, 1, 2], device="cuda"), weight=torch.ones(3))
    with pytest.raises(RuntimeError, match="input and target must be on the same device"):
        softmax_focal_loss(x.cpu(), torch.tensor([0, 1, 1, 2], device="cuda"))
    # The device is still usable afterwards (no device-side assert).
    assert sigmoid_focal_loss(x, torch.tensor([0, 3, 1, 2], device="cuda")).isfinite().item()


def test_cuda_backward_op_marks_invalid_rows_nan():
    """Called directly (not through autograd, whose forward validated the targets), the CUDA
    backward does not sync to validate: rows with an invalid target get NaN, never a wild read."""
    require_cuda()
    x = torch.randn(3, 4, device="cuda")
    t = torch.tensor([0, 9, -1], device="cuda")
    g = torch.ops.visdet_ops._sigmoid_focal_loss_backward(
        torch.ones(3, 4, device="cuda"), x, t, 2.0, 0.25, None, "none"
    )
    assert torch.isfinite(g[0]).all() and torch.isnan(g[1:]).all()
    g = torch.ops.visdet_ops._softmax_focal_loss_backward(torch.ones(3, device="cuda"), x, t, 2.0, 0.25, None, "none")
    assert torch.isfinite(g[0]).all() and torch.isnan(g[1]).all() and torch.equal(g[2], torch.zeros(4, device="cuda"))


@pytest.mark.parametrize("kind", KINDS)
def test_deterministic(device, rng, kind):
    """The backward is elementwise (one write per gradient, no atomics) and the CUDA reductions
    are fixed-order trees: allowed under use_deterministic_algorithms, bitwise repeatable."""
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=3000, classes=80)
    x, target = x.to(device, torch.float32), target.to(device)
    torch.use_deterministic_algorithms(True)
    try:
        results = []
        for _ in range(2):
            xd = x.clone().requires_grad_()
            loss = fn(xd, target, 2.0, 0.25, None, "mean")
            loss.backward()
            results.append((loss.detach(), xd.grad))
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


def test_large_random_float32_matches_reference(device, rng):
    for kind, (fn, ref) in KINDS.items():
        x, target = case(kind, rng, rows=3000, classes=80)
        want = ref(x, target, 2.0, 0.25, None, "none")
        got = fn(x.float().to(device), target.to(device), 2.0, 0.25, None, "none").cpu().double()
        torch.testing.assert_close(got, want, rtol=2e-5, atol=1e-6)
        mean = fn(x.float().to(device), target.to(device), 2.0, 0.25, None, "mean").cpu().double()
        torch.testing.assert_close(mean, want.sum() / 3000, rtol=1e-5, atol=0)


@pytest.mark.parametrize("classes", [3, 7, 16, 31, 33, 64, 65, 80, 128, 129, 300])
def test_softmax_every_kernel_shape(device, dtype, rng, classes):
    """Each softmax kernel shape of the CUDA dispatch (4-32 lanes, 1, 2 or 8 logits per lane in
    registers, or the row re-read for C > 128), at its edges: loss and gradient (with a per-row
    grad_output and a per-class weight) against the float64 reference."""
    x, target = case("softmax", rng, rows=301, classes=classes)
    weight = torch.rand(classes, generator=rng, dtype=torch.float64) + 0.5
    grad_out = random_grad_out("softmax", "none", 301, classes, rng)
    xd = x.to(device, dtype).requires_grad_()
    got = softmax_focal_loss(xd, target.to(device), 2.0, 0.25, weight.to(device, dtype), "none")
    (got_grad,) = torch.autograd.grad(got, xd, grad_out.to(device, dtype))
    want, want_grad = reference_and_grad("softmax", x, target, 2.0, 0.25, weight, "none", grad_out)
    torch.testing.assert_close(got.detach().cpu().double(), want, **TOL[dtype])
    torch.testing.assert_close(got_grad.cpu().double(), want_grad, **TOL[dtype])


def test_cuda_64bit_indexing():
    """More logits than a 32-bit grid-stride loop can index (int64 path), float16 to fit:
    the whole equals the sum of its chunks (each on the 32-bit path)."""
    require_cuda()
    free, _ = torch.cuda.mem_get_info()
    if free < 16 * 2**30:
        pytest.skip("needs 16 GiB of free GPU memory")
    classes, rows = 80, 26_000_000  # 2.08e9 logits > kMaxInt32LoopSize (~2.01e9)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, classes, device="cuda", dtype=torch.float16, generator=gen)
    target = torch.randint(0, classes + 1, (rows,), device="cuda", generator=gen)
    # 'mean' (a sum of 2e9 losses overflows float16): the whole vs the mean of 4 equal chunks.
    whole = sigmoid_focal_loss(x, target, 2.0, 0.25, None, "mean").float().item()
    chunk = rows // 4
    parts = [
        sigmoid_focal_loss(x[i : i + chunk], target[i : i + chunk], 2.0, 0.25, None, "mean").float().item()
        for i in range(0, rows, chunk)
    ]
    assert abs(whole - sum(parts) / 4) <= 2e-3 * abs(whole)
    x.requires_grad_()
    grad = torch.autograd.grad(sigmoid_focal_loss(x, target, 2.0, 0.25, None, "sum"), x)[0]
    tail = slice(rows - 1000, rows)
    xt = x.detach()[tail].clone().requires_grad_()
    want = torch.autograd.grad(sigmoid_focal_loss(xt, target[tail], 2.0, 0.25, None, "sum"), xt)[0]
    assert torch.equal(grad[tail], want)


@pytest.mark.parametrize("kind", KINDS)
def test_module_matches_functional(device, rng, kind):
    module_cls, fn = MODULES[kind], KINDS[kind][0]
    x, target = case(kind, rng, rows=10, classes=6)
    x, target = x.to(device), target.to(device)
    m = module_cls(2.0, 0.25, reduction="sum")
    assert repr(m) == f"{module_cls.__name__}(gamma=2.0, alpha=0.25, reduction=sum)"
    assert list(m.state_dict()) == []
    torch.testing.assert_close(m(x, target), fn(x, target, 2.0, 0.25, None, "sum"))
    weight = torch.rand(6, generator=rng, dtype=torch.float64).to(device) + 0.5
    mw = module_cls(1.5, 0.5, weight, "none")
    assert list(mw.state_dict()) == ["weight"]
    torch.testing.assert_close(mw(x, target), fn(x, target, 1.5, 0.5, weight, "none"))
    other = weight.flip(0)
    torch.testing.assert_close(mw(x, target, other), fn(x, target, 1.5, 0.5, other, "none"))


@pytest.mark.parametrize("kind", KINDS)
def test_weight_with_grad_is_refused(kind):
    fn = KINDS[kind][0]
    weight = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="weight does not support gradients"):
        fn(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), weight=weight)
    with torch.no_grad():
        fn(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), weight=weight)


@pytest.mark.parametrize("kind", KINDS)
def test_double_backward_is_refused(kind):
    fn = KINDS[kind][0]
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(fn(x, torch.tensor([0, 1, 2, 0])), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward .* is not supported"):
        grad.sum().backward()


def test_exported_names():
    for name in ("sigmoid_focal_loss", "softmax_focal_loss", "SigmoidFocalLoss", "SoftmaxFocalLoss"):
        assert name in visdet_ops.__all__ and hasattr(visdet_ops, name)


# ---------------------------------------------------------------- under autocast (tests/autocast_harness.py)


def case_focal(gen, kind, module=False):
    classes = 6
    head = amp.randomize(torch.nn.Linear(8, classes), gen, 0.5)
    weight = torch.rand(classes, generator=gen) + 0.5
    rows = 2 * 24 * 28
    target = torch.randint(0, classes + 1 if kind == "sigmoid" else classes, (rows,), generator=gen)

    def body(p, img, target, weight):
        x = p["stem"](img).permute(0, 2, 3, 1).reshape(rows, 8)
        logits = p["head"](x)
        if module:
            return MODULES[kind](2.0, 0.25, weight, "mean")(logits, target)
        return KINDS[kind][0](logits, target, 2.0, 0.25, weight, "none")

    return amp.Case(body, (amp.img(gen), target, weight), amp.F32, stem=amp.Stem(8, gen), head=head)


AUTOCAST_CASES = {
    "sigmoid_focal_loss": lambda g: case_focal(g, "sigmoid"),
    "SigmoidFocalLoss": lambda g: case_focal(g, "sigmoid", module=True),
    "softmax_focal_loss": lambda g: case_focal(g, "softmax"),
    "SoftmaxFocalLoss": lambda g: case_focal(g, "softmax", module=True),
}


def _opcheck_focal_loss(kind: str, reduction: str):
    def case(device, dtype, gen):
        logits = torch.randn(20, 5, generator=gen).to(device, dtype).requires_grad_()
        target = torch.randint(0, 5, (20,), generator=gen).to(device)
        op = getattr(torch.ops.visdet_ops, f"{kind}_focal_loss").default
        return op, (logits, target, 2.0, 0.25, None, reduction)

    return case


AUTOCAST_OPCHECKS = {
    "sigmoid_focal_loss": _opcheck_focal_loss("sigmoid", "mean"),
    "softmax_focal_loss": _opcheck_focal_loss("softmax", "none"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("grad_scale", [1.0, -2.5], ids=["grad_output_1", "grad_output_scaled"])
@pytest.mark.parametrize("classes", [5, 80])
def test_training_forward_matches_the_registered_formula(device, dtype, rng, kind, reduction, grad_scale, classes):
    """A reduced loss whose input requires grad runs the training path (one forward kernel writes the loss and the
    gradient; the backward scales that gradient in place, or leaves it for a grad_output of 1). It gives what the
    registered formula (the forward op, then the backward op) gives. C = 80: CUDA's vector path, 5: the scalar."""
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=300, classes=classes)
    x, target = x.to(device, dtype), target.to(device)
    weight = (torch.rand(classes, generator=rng, dtype=torch.float64) + 0.5).to(device, dtype)
    got_x, want_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = fn(got_x, target, 2.0, 0.25, weight, reduction)
    assert type(got.grad_fn).__name__ == f"{kind}_focal_loss_trainingBackward"
    (got * grad_scale).backward()
    want = getattr(torch.ops.visdet_ops, f"{kind}_focal_loss")(want_x, target, 2.0, 0.25, weight, reduction)
    (want * grad_scale).backward()
    torch.testing.assert_close(got, want, **TOL[dtype])
    torch.testing.assert_close(got_x.grad, want_x.grad, **TOL[dtype])
    # The gradient against the float64 reference too (not only against our other path).
    _, ref_grad = reference_and_grad(kind, x, target, 2.0, 0.25, weight, reduction, torch.tensor(grad_scale))
    torch.testing.assert_close(got_x.grad.cpu().double(), ref_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_training_forward_backward_twice(device, rng, kind):
    """retain_graph: the second backward recomputes the gradient (the first handed its buffer over)."""
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=64, classes=8)
    x = x.to(device, torch.float32).requires_grad_()
    loss = fn(x, target.to(device), 2.0, 0.25, None, "sum")
    (first,) = torch.autograd.grad(loss, x, retain_graph=True)
    first = first.clone()
    (second,) = torch.autograd.grad(loss * 3.0, x)
    torch.testing.assert_close(second, 3.0 * first, rtol=1e-6, atol=1e-7)
    _, ref_grad = reference_and_grad(kind, x, target, 2.0, 0.25, None, "sum", torch.tensor(1.0))
    torch.testing.assert_close(first.cpu().double(), ref_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
def test_training_forward_under_autocast(device, rng, kind):
    """Under autocast a 16-bit input is cast to float32 first (as the op's autocast kernel does) and takes the
    training path; the loss is float32, the input's gradient comes back in its own dtype, equal to the registered
    op's under the same autocast."""
    fn = KINDS[kind][0]
    x, target = case(kind, rng, rows=64, classes=16)
    x, target = x.to(device, torch.bfloat16), target.to(device)
    results = []
    for call in (fn, getattr(torch.ops.visdet_ops, f"{kind}_focal_loss")):
        xd = x.clone().requires_grad_()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = call(xd, target, 2.0, 0.25, None, "mean")
        assert loss.dtype == torch.float32
        if call is fn:
            assert type(loss.grad_fn).__name__ == f"{kind}_focal_loss_trainingBackward"
        (loss * 4.0).backward()
        assert xd.grad.dtype == torch.bfloat16
        results.append((loss, xd.grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)


def test_training_ops_check_their_arguments():
    g = torch.ones(2, 3)
    scale = torch.ops.visdet_ops._focal_loss_scale_grad_
    with pytest.raises(RuntimeError, match="grad_output of a reduced loss must be a scalar tensor"):
        scale(g, torch.ones(2))
    with pytest.raises(RuntimeError, match="grad_output"):
        scale(g, torch.tensor(1.0, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="grad_input must be contiguous"):
        scale(torch.ones(3, 2).t(), torch.tensor(2.0))
    with pytest.raises(RuntimeError, match="reduction must be 'mean' or 'sum'"):
        torch.ops.visdet_ops._sigmoid_focal_loss_forward_with_grad(g, torch.zeros(2, dtype=torch.long), 2.0, 0.25,
                                                                   None, "none")  # fmt: skip
    scale(g, torch.tensor(1.0))
    assert torch.equal(g, torch.ones(2, 3))
    scale(g, torch.tensor(-0.5))
    assert torch.equal(g, torch.full((2, 3), -0.5))


# ---------------------------------------------------------------- fuzz (tests/test_fuzz.py, tests/fuzz_core.py)


_FOCAL_FNS = ("sigmoid_focal_loss", "softmax_focal_loss")
_FOCAL_MODS = ("SigmoidFocalLoss", "SoftmaxFocalLoss")
_FOCAL_BAD = tuple(
    "gamma alpha target_range target_dtype target_ndim target_len weight_size input_ndim reduction "
    "input_dtype weight_grad".split()
)


@st.composite
def _focal_case(draw, device):
    fn = draw(st.sampled_from(_FOCAL_FNS + _FOCAL_MODS))
    bad = core.pick_bad(draw, _FOCAL_BAD)
    main = draw(st.sampled_from(core.FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": core.size(draw, 1, 8) if not draw(core.one_in(10)) else draw(st.integers(9, 64)),
        "c": core.size(draw, 1, 5) if not draw(core.one_in(10)) else draw(st.integers(6, 100)),
        "gamma": draw(st.sampled_from([2.0, 0.0, 0.5, 1.0, 3.5])),
        "alpha": draw(st.sampled_from([0.25, 0.0, 0.5, 1.0])),
        "weight": draw(st.booleans()),
        "reduction": draw(st.sampled_from(["mean", "none", "sum"])),
        "values": draw(st.sampled_from(["randn", "large", "special"])),
        "override": fn in _FOCAL_MODS and draw(core.one_in(3)),
        "bad": bad,
    }
    case["t"], mixed = core.draw_tensors(
        draw, {"input": 2, "target": 1, "weight": 1}, main, device, floating=("input", "weight")
    )
    if bad == "target_dtype":
        case["t"]["target"]["dt"] = draw(st.sampled_from(["i32", "f32", "u8", "bool"]))
    elif bad == "input_dtype":
        case["t"]["input"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad in ("weight_size", "weight_grad"):
        case["weight"] = True
    elif bad == "reduction":
        case["reduction"] = draw(st.sampled_from(["avg", "Mean", ""]))
    elif bad == "gamma":
        case["gamma"] = draw(st.sampled_from([-1.0, float("nan"), float("inf")]))
    elif bad == "alpha":
        case["alpha"] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    elif bad == "target_range":
        case["n"] = max(case["n"], 1)
        case["t"]["target"]["lay"] = "c"  # expanded, every target would be target[0]
    case["expect"] = core.expectation(bad, mixed, borderline=case["c"] == 0)
    return case


def _focal_run(case):
    fn, bad = case["fn"], case["bad"]
    softmax = "oftmax" in fn
    run = core.family_run(case, "focal_loss")
    n, c = case["n"], case["c"]
    ishape = [n, c]
    if bad == "input_ndim":
        ishape = [n * c] if case["seed"] % 2 else [n, c, 1]
    base = run.randn(*ishape) * (3 if case["values"] == "randn" else 30)
    if case["values"] == "special" and base.numel():
        base.view(-1)[:: max(1, base.numel() // 2)] = [float("nan"), float("inf"), -float("inf")][case["seed"] % 3]
    lo, hi = (-1, c) if softmax else (0, c + 1)
    target = run.randint(lo, max(hi, lo + 1), n)
    if bad == "target_range" and n:
        target[n // 2] = c if softmax else (c + 1 if case["seed"] % 2 else -1)  # softmax: < 0 means ignored
    elif bad == "target_ndim":
        target = target[:, None]
    elif bad == "target_len":
        target = torch.cat([target, target[:1] if n else torch.zeros(1)])
    wshape = [c + 1] if bad == "weight_size" else [c]
    a_in, a_t, a_w = run.arg("input", base), run.arg("target", target), run.arg("weight", run.rand(*wshape) + 0.5)
    xi, xt = a_in.x(grad=True), a_t.x()
    xw = a_w.x(grad=bad == "weight_grad") if case["weight"] else None
    dt = core.worst(a_in.dt, a_w.dt) if case["weight"] else a_in.dt
    mixed = case["expect"] == "either"
    if bad == "weight_grad" and not run.grads:
        run.expect = "either"  # no gradient is recorded, so none is lost
    if bad == "target_range" and run.unchecked_values and core.on_gpu(case, "target"):
        run.expect = "either"  # CUDA without sync checks: NaN rows (documented)

        def nan_rows(out):
            row = out[n // 2] if case["reduction"] == "none" else out
            if not torch.isnan(row).all():
                raise core.Mismatch("a bad target on CUDA did not give a NaN loss")

        run.unchecked_check = nan_rows
    if fn in _FOCAL_FNS:
        call = lambda: getattr(visdet_ops, fn)(xi, xt, case["gamma"], case["alpha"], xw, case["reduction"])  # noqa: E731
    else:
        ctor_bad = bad == "reduction"
        ctor_weight = None if case["override"] else xw
        mod = run.construct(
            lambda: getattr(visdet_ops, fn)(case["gamma"], case["alpha"], ctor_weight, case["reduction"]),
            expect="error" if ctor_bad else "ok",
        )
        if mod is None:
            return
        call = lambda: mod(xi, xt, xw) if case["override"] else mod(xi, xt)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        ref = softmax_focal_loss_reference if softmax else sigmoid_focal_loss_reference
        want = ref(
            r, xt.detach().cpu(), case["gamma"], case["alpha"], a_w.r() if case["weight"] else None, case["reduction"]
        )
        core.assert_close("loss", out, want, dt)
        core.out_dtype_ok(out, a_in.dt, mixed, "loss")
        # Gradients at infinite logits are limits the reference's autograd gives as NaN: compared for finite ones.
        if run.grads and out.numel() and case["values"] != "special":
            core.backward_both(run, out, want)
            core.check_grads([("input", a_in, rl)], dt)

    run.outcome(call, check)


FUZZ = core.family("focal_loss", _FOCAL_FNS + _FOCAL_MODS, ops=_FOCAL_FNS)((_focal_case, _focal_run))


# ---------------------------------------------------------------- ONNX export (tests/onnx_harness.py)

# op -> rng -> (the public call, its inputs, the visdet_ops-domain node's attributes): tests/test_onnx.py's
# test_custom_nodes
ONNX_CUSTOM_CASES = {
    "sigmoid_focal_loss": lambda rng: (
        lambda x, t: visdet_ops.sigmoid_focal_loss(x, t, 2.0, 0.25, None, "mean"),
        (torch.randn(4, 3, generator=rng), torch.randint(0, 3, (4,), generator=rng)),
        {"gamma": 2.0, "alpha": 0.25, "reduction": "mean"},
    ),
    "softmax_focal_loss": lambda rng: (
        lambda x, t, w: visdet_ops.softmax_focal_loss(x, t, 1.5, 0.5, w, "none"),
        (torch.randn(4, 3, generator=rng), torch.randint(0, 3, (4,), generator=rng), torch.rand(3, generator=rng)),
        {"gamma": 1.5, "alpha": 0.5, "reduction": "none"},
    ),
}


# ---------------------------------------------------------------- mmcv's names (tests/test_mmcv_names.py)

# Arguments mmcv checks with `assert`: each call raises our ValueError, which is also an AssertionError
# (test_argument_errors_are_also_assertion_errors)
MMCV_ASSERTION_ERRORS = {
    "sigmoid_focal_loss-reduction": lambda: visdet_ops.sigmoid_focal_loss(
        torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), reduction="all"
    ),
}
