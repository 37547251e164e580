"""Float64 references of the focal losses (visdet_ops.ops.focal_loss states the semantics), plus
literal transcriptions of mmcv's kernels and MMDetection's pure-PyTorch sigmoid focal loss, which
the tests use to show that the definitions agree where mmcv's float arithmetic does not saturate.
Differentiable with autograd."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _reduce(loss: torch.Tensor, reduction: str, rows: int) -> torch.Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / rows
    raise ValueError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _row_weight(weight: torch.Tensor | None, target: torch.Tensor, classes: int, dtype) -> torch.Tensor:
    """weight[target] for class rows, 1 for the others (background / ignored)."""
    if weight is None or classes == 0:
        return torch.ones(target.shape, dtype=dtype, device=target.device)
    has_class = (target >= 0) & (target < classes)
    w = weight.to(target.device, dtype)[target.clamp(0, classes - 1)]
    return torch.where(has_class, w, 1.0)


def sigmoid_focal_loss_reference(
    input: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Per logit: -alpha (1-p)^gamma log p for the target class, -(1-alpha) p^gamma log(1-p) for
    the others (target == C: all others), p = sigmoid(x), logs from logsigmoid; times
    weight[target] (1 for background)."""
    x = input.double()
    rows, classes = x.shape
    t = target.to(x.device)
    if ((t < 0) | (t > classes)).any():
        raise ValueError(f"target must lie in [0, {classes}]")
    positive = t[:, None] == torch.arange(classes, device=x.device)[None, :]
    p, q = torch.sigmoid(x), torch.sigmoid(-x)
    log_p, log_q = F.logsigmoid(x), F.logsigmoid(-x)
    loss = torch.where(positive, -alpha * q**gamma * log_p, -(1 - alpha) * p**gamma * log_q)
    loss = loss * _row_weight(weight, t, classes, x.dtype)[:, None]
    return _reduce(loss, reduction, rows)


def softmax_focal_loss_reference(
    input: torch.Tensor,
    target: torch.Tensor,
    gamma: float = 2.0,
    alpha: float = 0.25,
    weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Per row: -alpha (1 - p_t)^gamma log p_t, p_t = softmax(x)[target], log p_t from
    log_softmax, 1 - p_t = -expm1(log p_t); rows with a negative target give 0; times
    weight[target]."""
    x = input.double()
    rows, classes = x.shape
    t = target.to(x.device)
    if (t >= classes).any():
        raise ValueError(f"target must be < {classes}")
    ignored = t < 0
    if classes == 0:
        return _reduce(x.new_zeros(rows), reduction, rows)
    log_pt = F.log_softmax(x, dim=1).gather(1, t.clamp(min=0)[:, None])[:, 0]
    one_minus_pt = -torch.expm1(log_pt)
    # (1 - p_t)^gamma with the derivative of its limit at 1 - p_t == 0 (C == 1, or a row whose
    # other logits are -inf), where autograd's gamma * u^(gamma - 1) * 0 would be NaN.
    at_one = one_minus_pt == 0
    focal = torch.where(at_one, float(gamma == 0), torch.where(at_one, 1.0, one_minus_pt) ** gamma)
    loss = -alpha * focal * log_pt * _row_weight(weight, t, classes, x.dtype)
    loss = torch.where(ignored, 0.0, loss)
    return _reduce(loss, reduction, rows)


# ---------------------------------------------------------------- mmcv / MMDetection, literally


def sigmoid_focal_loss_mmcv_formula(input, target, gamma, alpha, weight=None, reduction="mean"):
    """mmcv's sigmoid_focal_loss_forward_cuda_kernel in PyTorch: p = 1 / (1 + exp(-x)),
    log(max(p, FLT_MIN)), log(max(1 - p, FLT_MIN)); weight[t] (only for t < C here: mmcv reads
    out of bounds for the background label)."""
    x = input
    rows, classes = x.shape
    flt_min = torch.finfo(torch.float32).tiny
    p = 1 / (1 + torch.exp(-x))
    flag_p = (target[:, None] == torch.arange(classes, device=x.device)[None, :]).to(x.dtype)
    term_p = (1 - p) ** gamma * torch.log(p.clamp(min=flt_min))
    term_n = p**gamma * torch.log((1 - p).clamp(min=flt_min))
    loss = -flag_p * alpha * term_p - (1 - flag_p) * (1 - alpha) * term_n
    if weight is not None:
        loss = loss * _row_weight(weight, target, classes, x.dtype)[:, None]
    return _reduce(loss, reduction, rows)


def softmax_focal_loss_mmcv_formula(input, target, gamma, alpha, weight=None, reduction="mean"):
    """mmcv's SoftmaxFocalLossFunction + softmax_focal_loss_forward_cuda_kernel in PyTorch."""
    x = input
    rows = x.size(0)
    softmax = torch.exp(x - x.max(dim=1, keepdim=True).values)
    softmax = softmax / softmax.sum(dim=1, keepdim=True)
    flt_min = torch.finfo(torch.float32).tiny
    pred = softmax.gather(1, target.clamp(min=0)[:, None])[:, 0]
    loss = -alpha * (1 - pred) ** gamma * torch.log(pred.clamp(min=flt_min))
    if weight is not None:
        loss = loss * weight[target.clamp(min=0)]
    loss = torch.where(target >= 0, loss, 0.0)
    return _reduce(loss, reduction, rows)


def py_sigmoid_focal_loss(pred, target, gamma=2.0, alpha=0.25, reduction="mean"):
    """MMDetection's py_sigmoid_focal_loss with its FocalLoss one-hot step (label num_classes is
    background): the pure-PyTorch peer of the benchmark."""
    num_classes = pred.size(1)
    target = F.one_hot(target, num_classes=num_classes + 1)[:, :num_classes].type_as(pred)
    pred_sigmoid = pred.sigmoid()
    pt = (1 - pred_sigmoid) * target + pred_sigmoid * (1 - target)
    focal_weight = (alpha * target + (1 - alpha) * (1 - target)) * pt.pow(gamma)
    loss = F.binary_cross_entropy_with_logits(pred, target, reduction="none") * focal_weight
    return _reduce(loss, reduction, pred.size(0))


def py_softmax_focal_loss(pred, target, gamma=2.0, alpha=0.25, reduction="mean"):
    """The softmax focal loss in plain PyTorch (log_softmax, one-hot via F.one_hot): the
    benchmark's pure-PyTorch peer of softmax_focal_loss."""
    one_hot = F.one_hot(target, num_classes=pred.size(1)).type_as(pred)
    log_prob = F.log_softmax(pred, dim=1)
    log_pt = (log_prob * one_hot).sum(dim=1)
    loss = -alpha * (1 - log_pt.exp()).pow(gamma) * log_pt
    return _reduce(loss, reduction, pred.size(0))
