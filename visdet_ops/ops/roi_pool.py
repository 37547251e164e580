"""roi_pool / RoIPool with mmcv.ops semantics: max over the input pixels of each
bin, RoI corners scaled but not rounded, far corner inclusive (x2 + 1, y2 + 1),
bin edges floor/ceil, empty bin -> 0.

float32, float64, float16 and bfloat16 on CPU and CUDA (16-bit: bin edges in
float32, gradients accumulated in a float32 buffer; rois may be float32 beside a
16-bit input).

The RoI ops' rules apply (docs/ops.md, roi_align): RoI validation (on CUDA a bad RoI gives NaN output and
no gradient, without a host sync, unless VISDET_OPS_SYNC_ROI_CHECKS=1), 16-bit inputs, determinism."""

from __future__ import annotations

import torch
from torch import nn

from . import _args, attributes_repr, example, note_device
from ._registration import register_autocast, register_autograd, rois_autocast, rois_grad_input, rois_setup_context

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["RoIPool", "roi_pool"]


@torch.library.register_fake("visdet_ops::roi_pool")
def _roi_pool_fake(input, rois, pooled_height, pooled_width, spatial_scale):
    _args.check_rois_fake("roi_pool", input, rois, pooled_height, pooled_width)
    out = input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))
    return out, input.new_empty(out.shape, dtype=torch.int32)


@torch.library.register_fake("visdet_ops::_roi_pool_backward")
def _roi_pool_backward_fake(grad_output, rois, argmax, batch_size, channels, height, width):
    return grad_output.new_empty((batch_size, channels, height, width))


# Autograd, autocast and the determinism alert are registered here, for the classic and the stable build alike
# (the stable ABI has no C++ API for them; one source either way): docs/stable-abi.md.


def _roi_pool_setup_context(ctx, inputs, output):
    input, rois, _pooled_height, _pooled_width, _spatial_scale = inputs
    _, argmax = output
    # argmax (int32, the size of the output) has no gradient: without this, autograd would allocate and zero-fill a
    # tensor of its size for it in every backward (a fill kernel of K * C * PH * PW elements).
    ctx.set_materialize_grads(False)
    rois_setup_context(ctx, input, (rois, argmax), ())


def _roi_pool_backward(ctx, grad_output, _grad_argmax):
    if grad_output is None:  # set_materialize_grads(False): no gradient reached the output
        return (None,) * 5
    # On CUDA not deterministic where bins of overlapping RoIs share their maximum (rois_grad_input's alert).
    return rois_grad_input("roi_pool", ctx, grad_output), None, None, None, None


_roi_pool = register_autograd("roi_pool", _roi_pool_backward, _roi_pool_setup_context)


# Autocast: the RoI ops' rule (rois_autocast); a max over input values is exact in any dtype.
register_autocast("roi_pool", rois_autocast("roi_pool"))


def roi_pool(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size,
    spatial_scale: float = 1.0,
) -> torch.Tensor:
    """RoIPool (mmcv semantics).

    Args:
        input: [N, C, H, W] feature map.
        rois: [K, 5] (batch_index, x1, y1, x2, y2) in input-image coordinates;
            x2, y2 are inclusive (the RoI spans (x2 + 1 - x1) * spatial_scale).
        output_size: int or (h, w).
        spatial_scale: feature-map size / image size.

    Returns:
        [K, C, h, w]: the largest input value in each bin (0 for an empty bin).
    """
    out_h, out_w = _args.check_call_pair("roi_pool", "output_size", output_size, _args.POOLED_SIZE)
    note_device(input)
    output, _ = _roi_pool(input, rois, out_h, out_w, float(spatial_scale))
    return output


class RoIPool(nn.Module):
    """mmcv.ops.RoIPool: same constructor arguments, no parameters."""

    def __init__(self, output_size, spatial_scale: float = 1.0):
        super().__init__()
        self.output_size = _args.check_pair("RoIPool", "output_size", output_size, _args.POOLED_SIZE)
        self.spatial_scale = float(spatial_scale)

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return attributes_repr(self, "output_size", "spatial_scale")


@example("roi_pool")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Forward and backward with values exact in bfloat16 (so results are exact); on CUDA invalid RoIs
    must give NaN; in a 16-bit dtype also under autocast beside float32 RoIs."""
    from ..reference.roi_pool import roi_pool_reference
    from ._examples import autocast_forward_backward, exact_rois, invalid_rois_check, synchronize

    x = (torch.rand(2 * 3, 9 * 11, generator=gen).argsort(1).double() - 50).div(8).reshape(2, 3, 9, 11)
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    xd = x.to(device, dtype, copy=True).requires_grad_()
    out = roi_pool(xd, rois.to(device, dtype), 3, 1.0)
    out.backward(torch.ones_like(out))
    synchronize(device)
    xr = x.clone().requires_grad_()
    want = roi_pool_reference(xr, rois.to(dtype), (3, 3), 1.0)
    (want_grad,) = torch.autograd.grad(want, xr, torch.ones_like(want))
    if not torch.equal(out.detach().cpu().double(), want.detach()):
        return "roi_pool: wrong result"
    if not torch.equal(xd.grad.cpu().double(), want_grad):
        return "roi_pool: wrong gradient"
    error = invalid_rois_check(
        "roi_pool", lambda t, r: roi_pool(t, r, 3, 1.0), x, rois, want.detach(), want_grad, device, dtype, torch.equal
    )
    if error is not None:
        return error
    if dtype in (torch.float16, torch.bfloat16):
        error = autocast_forward_backward(
            lambda t, r: roi_pool(t, r, 3, 0.25),
            lambda t, r: roi_pool_reference(t, r, (3, 3), 0.25),
            [torch.randn(2, 5, 12, 14, generator=gen, dtype=torch.float64), exact_rois(gen, 9)],
            {1}, {1}, dtype, gen, device,
        )  # fmt: skip
        if error is not None:
            return f"roi_pool under autocast: {error}"
    return None
