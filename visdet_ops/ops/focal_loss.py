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

from . import _args, attributes_repr, example, note_device
from ._registration import autocast_to, float32_autocast, register_autocast, register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["SigmoidFocalLoss", "SoftmaxFocalLoss", "sigmoid_focal_loss", "softmax_focal_loss"]

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(name: str, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise _args.ArgumentError(f"{name}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


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


@torch.library.register_fake("visdet_ops::_sigmoid_focal_loss_forward_with_grad")
def _sigmoid_focal_loss_forward_with_grad_fake(input, target, gamma, alpha, weight, reduction):
    _fake_checks("sigmoid_focal_loss", input, target, weight)
    return input.new_empty(()), input.new_empty(input.shape)


@torch.library.register_fake("visdet_ops::_softmax_focal_loss_forward_with_grad")
def _softmax_focal_loss_forward_with_grad_fake(input, target, gamma, alpha, weight, reduction):
    _fake_checks("softmax_focal_loss", input, target, weight)
    return input.new_empty(()), input.new_empty(input.shape)


@torch.library.register_fake("visdet_ops::_focal_loss_scale_grad_")
def _focal_loss_scale_grad_fake(grad_input, grad_output):
    return None


# Autograd and autocast are registered here, for the classic and the stable build alike (the stable ABI has no C++
# API for them; one source either way): docs/stable-abi.md.


def _focal_loss_setup_context(name: str):
    def setup_context(ctx, inputs, output):
        input, target, gamma, alpha, weight, reduction = inputs
        # As in mmcv the per-class weight is a constant; a weight that asks for a gradient would silently get none.
        if weight is not None and weight.requires_grad:
            raise RuntimeError(
                f"{name}: weight does not support gradients (it is a per-class constant, as in mmcv); "
                "pass weight.detach()"
            )
        ctx.save_for_backward(input, target, weight)
        ctx.gamma, ctx.alpha, ctx.reduction = gamma, alpha, reduction

    return setup_context


def _focal_loss_backward(backward_op):
    def backward(ctx, grad_output):
        input, target, weight = ctx.saved_tensors
        grad_input = backward_op(grad_output, input, target, ctx.gamma, ctx.alpha, weight, ctx.reduction)
        # input, target, gamma, alpha, weight, reduction
        return grad_input, None, None, None, None, None

    return backward


# op name -> its eager entry point (register_autograd)
_EAGER = {
    name: register_autograd(
        name,
        _focal_loss_backward(getattr(torch.ops.visdet_ops, f"_{name}_backward")),
        _focal_loss_setup_context(name),
    )
    for name in ("sigmoid_focal_loss", "softmax_focal_loss")
}
# Autocast: input and weight go to float32 (float64 stays float64), as torch's own losses
# (binary_cross_entropy_with_logits, nll_loss) run in float32 under autocast: log-probabilities of confident logits
# and the sum over many anchors need float32. The loss is float32; the input's gradient comes back in its own dtype
# through the cast.
for _name in _EAGER:
    register_autocast(_name, float32_autocast(_name, "input", "weight"))
del _name


def _training_function(name: str) -> type[torch.autograd.Function]:
    """The eager autograd function of a reduced loss in a training step: one forward kernel writes the loss and the
    gradient of the reduced loss (`_<name>_forward_with_grad`), so the logits are read once, and the backward
    multiplies that gradient by grad_output in place (`_focal_loss_scale_grad_`: grad_output read on the device, no
    host sync; nothing to do for the usual 1 of loss.backward()) and hands it over without a copy.

    The gradient is kept until the first backward. A second backward (retain_graph=True) or one that records a graph
    (create_graph=True: the registered backward op, which refuses double backward) computes it again from the saved
    input, like the registered formula."""
    with_grad = getattr(torch.ops.visdet_ops, f"_{name}_forward_with_grad").default
    backward_op = getattr(torch.ops.visdet_ops, f"_{name}_backward").default
    scale_grad = torch.ops.visdet_ops._focal_loss_scale_grad_.default
    setup_context = _focal_loss_setup_context(name)
    recompute = _focal_loss_backward(backward_op)

    def forward(ctx, input, target, gamma, alpha, weight, reduction):
        with torch._C._AutoDispatchBelowAutograd():
            loss, grad = with_grad(input, target, gamma, alpha, weight, reduction)
        setup_context(ctx, (input, target, gamma, alpha, weight, reduction), loss)
        ctx.grad = grad
        return loss

    def backward(ctx, grad_output):
        grad, ctx.grad = ctx.grad, None
        if grad is None or torch.is_grad_enabled():
            return recompute(ctx, grad_output)
        with torch._C._AutoDispatchBelowAutograd():
            scale_grad(grad, grad_output)
        return grad, None, None, None, None, None

    return type(
        f"{name}_training",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


_TRAINING = {name: _training_function(name) for name in _EAGER}
_TRAINING_DTYPES = (torch.float32, torch.float64)


def _focal_loss(name: str, input, target, gamma, alpha, weight, reduction: str) -> torch.Tensor:
    """What sigmoid_focal_loss and softmax_focal_loss do with their (mmcv) arguments."""
    _check_reduction(name, reduction)
    note_device(input)
    gamma, alpha = float(gamma), float(alpha)
    if (
        reduction != "none"
        and type(input) in (torch.Tensor, torch.nn.Parameter)
        and input.requires_grad
        and torch.is_grad_enabled()
        and not torch.compiler.is_compiling()
        and not torch._C._are_functorch_transforms_active()
    ):
        # A training step's reduced loss: the fused forward. Under autocast the inputs are cast to float32 here, as
        # the op's autocast kernel would (float32_autocast: float64 stays), and the cast records its own backward.
        device_type = input.device.type
        if device_type in ("cpu", "cuda") and torch.is_autocast_enabled(device_type):
            input = autocast_to(torch.float32, input, device_type)
            weight = autocast_to(torch.float32, weight, device_type)
        if input.dtype in _TRAINING_DTYPES and (weight is None or type(weight) in (torch.Tensor, torch.nn.Parameter)):
            return _TRAINING[name].apply(input, target, gamma, alpha, weight, reduction)
    return _EAGER[name](input, target, gamma, alpha, weight, reduction)


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
    return _focal_loss("sigmoid_focal_loss", input, target, gamma, alpha, weight, reduction)


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
    return _focal_loss("softmax_focal_loss", input, target, gamma, alpha, weight, reduction)


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
        return attributes_repr(self, "gamma", "alpha", "reduction")


class SigmoidFocalLoss(_FocalLoss):
    """mmcv.ops.SigmoidFocalLoss: same constructor arguments; `weight` is a buffer (a per-class
    constant, absent from the state dict when None)."""

    _loss = staticmethod(sigmoid_focal_loss)


class SoftmaxFocalLoss(_FocalLoss):
    """mmcv.ops.SoftmaxFocalLoss: same constructor arguments; `weight` is a buffer (a per-class
    constant, absent from the state dict when None)."""

    _loss = staticmethod(softmax_focal_loss)


@example("sigmoid_focal_loss", "softmax_focal_loss")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Both losses, every reduction (on CUDA: the elementwise and the block-sum + finalize kernels),
    every softmax kernel shape (C = 3, 7, 16: lanes = C rounded up; 40: 2 logits a lane; 80: 8; 200:
    row re-read), forward and backward; on CUDA the bad-target paths (a NaN loss by default, an error
    naming the argument with VISDET_OPS_SYNC_TARGET_CHECKS=1; the CPU always raises)."""
    import os

    from ..reference.focal_loss import sigmoid_focal_loss_reference, softmax_focal_loss_reference
    from ._examples import synchronize

    rtol = {torch.float32: 1e-4, torch.float64: 1e-9, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    kinds = (
        (sigmoid_focal_loss, sigmoid_focal_loss_reference, "sigmoid"),
        (softmax_focal_loss, softmax_focal_loss_reference, "softmax"),
    )
    for classes in (3, 7, 16, 40, 80, 200):
        x = (torch.randn(300, classes, generator=gen, dtype=torch.float64) * 3).to(dtype).double()
        target = torch.randint(0, classes + 1, (300,), generator=gen)
        weight = (torch.rand(classes, generator=gen, dtype=torch.float64) + 0.5).to(dtype).double()
        for fn, ref, name in kinds:
            t = target if name == "sigmoid" else torch.where(target == classes, -1, target)
            for reduction in _REDUCTIONS:
                # A grad_output of 1 ('mean': the fused training forward's gradient as is) and of 0.75 ('sum':
                # scaled in place by the backward).
                k = 0.75 if reduction == "sum" else 1.0
                xd = x.to(device, dtype, copy=True).requires_grad_()
                out = fn(xd, t.to(device), 2.0, 0.25, weight.to(device, dtype), reduction)
                (out.sum() * k).backward()
                synchronize(device)
                xr = x.detach().clone().requires_grad_()
                want = ref(xr, t, 2.0, 0.25, weight, reduction)
                (want.sum() * k).backward()
                for what, got, exp in (("loss", out.detach(), want.detach()), ("grad", xd.grad, xr.grad)):
                    atol = rtol * exp.abs().max().item() * 1e-2 + 1e-7
                    if not torch.allclose(got.cpu().double(), exp, rtol=rtol, atol=atol):
                        return f"{name}_focal_loss C={classes} {reduction} {what}: wrong result"
            if device.type != "cuda":
                continue
            bad = torch.full((300,), classes + 1, device=device)
            if not fn(x.to(device, dtype), bad, 2.0, 0.25, None, "sum").isnan().item():
                return f"{name}_focal_loss: a bad target did not give a NaN loss"
            os.environ["VISDET_OPS_SYNC_TARGET_CHECKS"] = "1"
            try:
                fn(x.to(device, dtype), bad, 2.0, 0.25, None, "sum")
            except RuntimeError as exc:
                if "target values must" not in str(exc):
                    return f"{name}_focal_loss: unexpected error for a bad target: {exc}"
            else:
                return f"{name}_focal_loss: a bad target was not reported"
            finally:
                del os.environ["VISDET_OPS_SYNC_TARGET_CHECKS"]
    return None
