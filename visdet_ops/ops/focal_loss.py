"""sigmoid_focal_loss / softmax_focal_loss and their modules, with mmcv.ops semantics.

input [N, C] logits; target [N] int64 class indices; weight: optional per-class weights [C]
(row n is scaled by weight[target[n]], as in mmcv; a constant, no gradient).

sigmoid: target in [0, C]; C (= num_classes, MMDetection's background label) makes every class of
the row a negative. reduction 'none' gives [N, C].
softmax: target < C; a negative target marks an ignored row (loss and gradient 0, as mmcv).
reduction 'none' gives [N].
'mean' divides the sum by N (mmcv's loss.sum() / input.size(0)), so N == 0 gives NaN, like mmcv
and torch.mean of an empty tensor; 'sum' of nothing is 0.

Unlike mmcv, targets outside those ranges never read out of bounds (mmcv does, or silently treats
them as background): CPU targets raise an error naming the argument; on CUDA the host does not
wait for a check, and the rows with such a target get a NaN loss (so a NaN 'mean' / 'sum') and NaN
gradients. VISDET_OPS_SYNC_TARGET_CHECKS=1 makes the CUDA forward raise the same error instead
(its kernel flags the bad target and the host reads the flag: a 4-byte copy, a host sync). The
losses use a stable log-sigmoid / log-sum-exp: mmcv's float kernels saturate (log(max(p,
FLT_MIN)), 1 - p == 0 from logit ~17), ours stay exact for every finite logit and equal mmcv's
elsewhere. The backward is elementwise (no atomics), so deterministic.
"""

from __future__ import annotations

import torch
from torch import nn

from . import note_device, smoke_test

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["SigmoidFocalLoss", "SoftmaxFocalLoss", "sigmoid_focal_loss", "softmax_focal_loss"]

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(name: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{name}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _fake_checks(name: str, input, target, weight) -> None:
    torch._check(input.dim() == 2, lambda: f"{name}: input must have 2 dimensions, got shape {list(input.shape)}")
    torch._check(target.dim() == 1, lambda: f"{name}: target must have 1 dimensions, got shape {list(target.shape)}")
    torch._check(
        target.dtype == torch.int64,
        lambda: f"{name}: target must be an int64 tensor of class indices, got {target.dtype}",
    )
    torch._check(
        target.size(0) == input.size(0),
        lambda: f"{name}: target must have shape [N] with N = input.size(0) = {input.size(0)}",
    )
    if weight is not None:
        torch._check(
            weight.dim() == 1 and weight.size(0) == input.size(1),
            lambda: f"{name}: weight must have shape [C] = [{input.size(1)}] (one weight per class)",
        )


@torch.library.register_fake("visdet_ops::sigmoid_focal_loss")
def _sigmoid_focal_loss_fake(input, target, gamma, alpha, weight, reduction):
    _fake_checks("sigmoid_focal_loss", input, target, weight)
    return input.new_empty(input.shape if reduction == "none" else ())


@torch.library.register_fake("visdet_ops::softmax_focal_loss")
def _softmax_focal_loss_fake(input, target, gamma, alpha, weight, reduction):
    _fake_checks("softmax_focal_loss", input, target, weight)
    return input.new_empty((input.size(0),) if reduction == "none" else ())


@torch.library.register_fake("visdet_ops::_sigmoid_focal_loss_backward")
def _sigmoid_focal_loss_backward_fake(grad_output, input, target, gamma, alpha, weight, reduction):
    return input.new_empty(input.shape)


@torch.library.register_fake("visdet_ops::_softmax_focal_loss_backward")
def _softmax_focal_loss_backward_fake(grad_output, input, target, gamma, alpha, weight, reduction):
    return input.new_empty(input.shape)


# Autograd: C++ (csrc/ops/focal_loss/focal_loss_autograd.cpp).


def sigmoid_focal_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Sigmoid focal loss (mmcv semantics, see the module docstring).

    Args:
        input: [N, C] logits.
        target: [N] int64 class indices in [0, C]; C marks background (all classes negative).
        gamma: focusing parameter (>= 0).
        alpha: weight of the positive class; negatives get 1 - alpha.
        weight: optional [C] per-class weights; row n is scaled by weight[target[n]]
            (background rows by 1).
        reduction: 'none' ([N, C]), 'mean' (sum / N) or 'sum'.
    """
    _check_reduction("sigmoid_focal_loss", reduction)
    note_device(input)
    return torch.ops.visdet_ops.sigmoid_focal_loss(input, target, float(gamma), float(alpha), weight, reduction)


def softmax_focal_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Softmax focal loss (mmcv semantics, see the module docstring).

    Args:
        input: [N, C] logits.
        target: [N] int64 class indices < C; negative values mark ignored rows (loss 0).
        gamma: focusing parameter (>= 0).
        alpha: scale of the loss.
        weight: optional [C] per-class weights; row n is scaled by weight[target[n]].
        reduction: 'none' ([N]), 'mean' (sum / N) or 'sum'.
    """
    _check_reduction("softmax_focal_loss", reduction)
    note_device(input)
    return torch.ops.visdet_ops.softmax_focal_loss(input, target, float(gamma), float(alpha), weight, reduction)


class _FocalLoss(nn.Module):
    """The mmcv focal-loss modules: `weight` is a buffer (a per-class constant, absent from the
    state dict when None). Subclasses name the loss function."""

    _loss = staticmethod(sigmoid_focal_loss)

    def __init__(self, gamma: float, alpha: float, weight: torch.Tensor | None = None, reduction: str = "mean"):
        super().__init__()
        _check_reduction(self.__class__.__name__, reduction)
        self.gamma = gamma
        self.alpha = alpha
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def forward(self, input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """weight, when given, replaces the module's per-class weight for this call."""
        return self._loss(
            input, target, self.gamma, self.alpha, self.weight if weight is None else weight, self.reduction
        )

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(gamma={self.gamma}, alpha={self.alpha}, reduction={self.reduction})"


class SigmoidFocalLoss(_FocalLoss):
    """mmcv.ops.SigmoidFocalLoss: same constructor arguments; `weight` is a buffer (a per-class
    constant, absent from the state dict when None)."""

    _loss = staticmethod(sigmoid_focal_loss)


class SoftmaxFocalLoss(_FocalLoss):
    """mmcv.ops.SoftmaxFocalLoss: same constructor arguments; `weight` is a buffer (a per-class
    constant, absent from the state dict when None)."""

    _loss = staticmethod(softmax_focal_loss)


def _smoke(kind: str, device: torch.device) -> None:
    from ..reference import focal_loss as reference

    fn = sigmoid_focal_loss if kind == "sigmoid" else softmax_focal_loss
    ref = getattr(reference, f"{kind}_focal_loss_reference")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64) * 3
    target = torch.tensor([0, 4, 5, 2, 5, 1])  # 5: background for the sigmoid, ignored (-1) for the softmax
    if kind == "softmax":
        target = torch.where(target == 5, -1, target)
    weight = torch.rand(5, generator=gen, dtype=torch.float64) + 0.5
    for reduction in _REDUCTIONS:
        xd = x.to(device).requires_grad_()
        got = fn(xd, target.to(device), 2.0, 0.25, weight.to(device), reduction)
        (grad,) = torch.autograd.grad(got.sum(), xd)
        xr = x.clone().requires_grad_()
        want = ref(xr, target, 2.0, 0.25, weight, reduction)
        (want_grad,) = torch.autograd.grad(want.sum(), xr)
        for what, a, b in (("loss", got, want), ("grad", grad, want_grad)):
            if not torch.allclose(a.detach().cpu(), b.detach(), rtol=1e-9, atol=1e-12):
                err = (a.detach().cpu() - b.detach()).abs().max().item()
                raise AssertionError(f"{kind}_focal_loss smoke ({reduction}, {what}): max error {err:.3g}")


# Named after the ops, which `visdet-ops doctor` looks up by these names.
smoke_test("sigmoid_focal_loss")(lambda device: _smoke("sigmoid", device))
smoke_test("softmax_focal_loss")(lambda device: _smoke("softmax", device))
