"""CornerPool / top_pool / bottom_pool / left_pool / right_pool with
mmcv.ops semantics (CornerNet corner pooling).

A pool is a running maximum along one axis of [N, C, H, W]: 'bottom' scans
from top to bottom along H, 'top' from bottom to top, 'right' from left to
right along W, 'left' from right to left. mmcv computes it with torch.cummax
(flipping for 'top' and 'left'); this is one kernel per direction.

Gradient: all of an output's gradient goes to the position of its maximum.
Ties follow torch.cummax (so mmcv): the maximum nearest the output position
in scan order wins (the element itself when it equals the running maximum),
and a NaN, once met, is the maximum of the rest of the scan. (mmcv's old
pre-cummax CUDA extension sent tied gradients to the farthest maximum
instead.) The backward is deterministic on every device (one thread per scan
lane, no atomics).

Autograd is registered here (torch.library.register_autograd), for the classic and the stable build alike
(docs/stable-abi.md).
"""

from __future__ import annotations

import torch
from torch import nn

from . import _args, example, note_device
from ._registration import register_autograd

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["CornerPool", "bottom_pool", "corner_pool", "left_pool", "right_pool", "top_pool"]

MODES = ("top", "bottom", "left", "right")


def _check_mode(mode: str, who: str) -> None:
    if mode not in MODES:
        raise _args.ArgumentError(f"{who}: mode must be 'top', 'bottom', 'left' or 'right', got {mode!r}")


@torch.library.register_fake("visdet_ops::corner_pool")
def _corner_pool_fake(input, mode):
    torch._check(input.dim() == 4, lambda: f"corner_pool: input must have 4 dimensions, got shape {list(input.shape)}")
    return torch.empty_like(input, memory_format=torch.contiguous_format)


@torch.library.register_fake("visdet_ops::_corner_pool_backward")
def _corner_pool_backward_fake(grad_output, input, mode):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


# Autograd, for the classic and the stable build alike (the stable ABI has no C++ API for it; one source either
# way). The backward is its own op, _corner_pool_backward, so that torch.compile and fake tensors see it. It
# rescans the saved input instead of saving argmax indices: no int64 tensor the size of the input is kept alive.


def _corner_pool_setup_context(ctx, inputs, output):
    input, mode = inputs
    ctx.save_for_backward(input)
    ctx.mode = mode


def _corner_pool_backward(ctx, grad_output):
    (input,) = ctx.saved_tensors
    return torch.ops.visdet_ops._corner_pool_backward(grad_output, input, ctx.mode), None


_corner_pool = register_autograd("corner_pool", _corner_pool_backward, _corner_pool_setup_context)


# mode -> (dim, flip) of mmcv's CornerPool.forward.
_CUMMAX_DIM_FLIP = {"bottom": (2, False), "left": (3, True), "right": (3, False), "top": (2, True)}


def _cummax_pool(input: torch.Tensor, mode: str) -> torch.Tensor:
    # mmcv's forward verbatim. Used for integer and bool maps only: they have
    # no gradient, and torch.cummax takes every such dtype on every device,
    # so a kernel per integer type would buy nothing.
    if input.dim() != 4:
        raise RuntimeError(f"corner_pool: input must have 4 dimensions, got shape {list(input.shape)}")
    dim, flip = _CUMMAX_DIM_FLIP[mode]
    x = input.flip(dim) if flip else input
    out = torch.cummax(x, dim=dim).values
    return out.flip(dim) if flip else out


def corner_pool(input: torch.Tensor, mode: str) -> torch.Tensor:
    """Corner pooling of a [N, C, H, W] map in direction `mode` ('top',
    'bottom', 'left' or 'right'). float32/float64, or float16/bfloat16
    (compared and summed in float32). Integer and bool maps (forward only, as
    they have no gradient) give exactly torch.cummax's result, as mmcv's
    CornerPool (which is torch.cummax) does."""
    _check_mode(mode, "corner_pool")
    if not input.is_floating_point() and not input.is_complex():
        return _cummax_pool(input, mode)
    note_device(input)
    return _corner_pool(input, mode)


def top_pool(input: torch.Tensor) -> torch.Tensor:
    """out[..., h, w] = max(input[..., h:, w]) (running max from the bottom up)."""
    return corner_pool(input, "top")


def bottom_pool(input: torch.Tensor) -> torch.Tensor:
    """out[..., h, w] = max(input[..., :h + 1, w]) (running max from the top down)."""
    return corner_pool(input, "bottom")


def left_pool(input: torch.Tensor) -> torch.Tensor:
    """out[..., h, w] = max(input[..., h, w:]) (running max from the right)."""
    return corner_pool(input, "left")


def right_pool(input: torch.Tensor) -> torch.Tensor:
    """out[..., h, w] = max(input[..., h, :w + 1]) (running max from the left)."""
    return corner_pool(input, "right")


class CornerPool(nn.Module):
    """mmcv.ops.CornerPool(mode): same constructor argument, no parameters."""

    def __init__(self, mode: str):
        super().__init__()
        _check_mode(mode, "CornerPool")
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return corner_pool(x, self.mode)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


@example("corner_pool")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Every mode, forward and backward, on small integers: ties along every scan (the backward's tie
    rule)."""
    from ..reference.corner_pool import corner_pool_reference
    from ._examples import forward_backward

    x = torch.randint(-3, 4, (2, 3, 37, 45), generator=gen).double()
    # Each mode through its mmcv-named function (top_pool, ...), which calls corner_pool(t, mode).
    named = {"top": top_pool, "bottom": bottom_pool, "left": left_pool, "right": right_pool}
    for mode in MODES:
        error = forward_backward(named[mode], lambda t, m=mode: corner_pool_reference(t, m), [x], dtype, gen, device)
        if error is not None:
            return f"corner_pool {mode}: {error}"
    return None
