"""roi_align / RoIAlign with mmcv.ops semantics (avg and max pool_mode,
`aligned` half-pixel shift, adaptive sampling_ratio=0).

float32, float64, float16 and bfloat16 on CPU and CUDA (16-bit computed in
float32, gradients accumulated in a float32 buffer; rois may be float32 beside a
16-bit input).

The RoI ops' rules apply (docs/ops.md, roi_align): RoI validation (on CUDA a bad RoI gives NaN output and
no gradient, without a host sync, unless VISDET_OPS_SYNC_ROI_CHECKS=1), 16-bit inputs, determinism."""

from __future__ import annotations

import torch
from torch import nn

from . import _args, attributes_repr, example, note_device, renamed_kwargs
from ._registration import (
    compute_dtype,
    register_autocast,
    register_autograd,
    rois_autocast,
    rois_grad_input,
    rois_setup_context,
)

# The public names: visdet_ops exports these (visdet_ops/__init__.py gathers every op module's).
__all__ = ["RoIAlign", "roi_align"]

_POOL_MODES = ("avg", "max")


@torch.library.register_fake("visdet_ops::roi_align")
def _roi_align_fake(input, rois, pooled_height, pooled_width, spatial_scale, sampling_ratio, pool_mode, aligned):
    _args.check_rois_fake("roi_align", input, rois, pooled_height, pooled_width)
    _args.check_fake("roi_align", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    out = input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))
    # Sample positions of max mode are kept in the compute dtype (exact for 16-bit input).
    argmax_shape = out.shape if pool_mode == "max" else (0,)
    argmax_dtype = compute_dtype(input.dtype)
    return out, input.new_empty(argmax_shape, dtype=argmax_dtype), input.new_empty(argmax_shape, dtype=argmax_dtype)


@torch.library.register_fake("visdet_ops::_roi_align_backward")
def _roi_align_backward_fake(
    grad_output,
    rois,
    argmax_y,
    argmax_x,
    batch_size,
    channels,
    height,
    width,
    spatial_scale,
    sampling_ratio,
    pool_mode,
    aligned,
):
    _args.check_fake("roi_align", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    return grad_output.new_empty((batch_size, channels, height, width))


# Autograd, autocast and the determinism alert are registered here, for the classic and the stable build alike
# (the stable ABI has no C++ API for them; one source either way): docs/stable-abi.md.


def _roi_align_setup_context(ctx, inputs, output):
    input, rois, _pooled_height, _pooled_width, spatial_scale, sampling_ratio, pool_mode, aligned = inputs
    _, argmax_y, argmax_x = output
    # The sample positions of max mode are floating outputs, but not differentiable.
    ctx.mark_non_differentiable(argmax_y, argmax_x)
    # Their gradients are never read: no zero-filled tensors of their size for them in every backward.
    ctx.set_materialize_grads(False)
    rois_setup_context(ctx, input, (rois, argmax_y, argmax_x), (spatial_scale, sampling_ratio, pool_mode, aligned))


def _roi_align_backward(ctx, grad_output, _grad_argmax_y, _grad_argmax_x):
    if grad_output is None:  # set_materialize_grads(False): no gradient reached the output
        return (None,) * 8
    return rois_grad_input("roi_align", ctx, grad_output), None, None, None, None, None, None, None


_roi_align = register_autograd("roi_align", _roi_align_backward, _roi_align_setup_context)


# Autocast: the RoI ops' rule (rois_autocast: input in its dtype, rois in the compute dtype).
register_autocast("roi_align", rois_autocast("roi_align"))


def roi_align(
    input: torch.Tensor,
    rois: torch.Tensor,
    output_size,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    pool_mode: str = "avg",
    aligned: bool = True,
) -> torch.Tensor:
    """RoIAlign (mmcv semantics).

    Args:
        input: [N, C, H, W] feature map.
        rois: [K, 5] (batch_index, x1, y1, x2, y2) in input-image coordinates.
        output_size: int or (h, w).
        spatial_scale: feature-map size / image size.
        sampling_ratio: samples per bin side; 0 = ceil(roi size / output size).
        pool_mode: 'avg' or 'max' over the samples of a bin.
        aligned: shift by half a pixel (True matches torchvision aligned=True).
    """
    if pool_mode not in _POOL_MODES:
        raise _args.ArgumentError(f"roi_align: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    out_h, out_w = _args.check_call_pair("roi_align", "output_size", output_size, _args.POOLED_SIZE)
    sampling_ratio = _args.check_call_int("roi_align", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
    note_device(input)
    output, _, _ = _roi_align(input, rois, out_h, out_w, float(spatial_scale), sampling_ratio, pool_mode, bool(aligned))
    return output


class RoIAlign(nn.Module):
    """mmcv.ops.RoIAlign: same constructor arguments (mmcv's old names
    out_size / sample_num work with a DeprecationWarning), no parameters."""

    @renamed_kwargs("RoIAlign", {"out_size": "output_size", "sample_num": "sampling_ratio"})
    def __init__(
        self,
        output_size,
        spatial_scale: float = 1.0,
        sampling_ratio: int = 0,
        pool_mode: str = "avg",
        aligned: bool = True,
        use_torchvision: bool = False,
    ):
        super().__init__()
        if pool_mode not in _POOL_MODES:
            raise _args.ArgumentError(f"RoIAlign: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
        if use_torchvision and pool_mode != "avg":
            raise _args.ArgumentError("RoIAlign: use_torchvision=True supports only pool_mode='avg'")
        self.output_size = _args.check_pair("RoIAlign", "output_size", output_size, _args.POOLED_SIZE)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = _args.check_int("RoIAlign", "sampling_ratio", sampling_ratio, _args.SAMPLING_RATIO)
        self.pool_mode = pool_mode
        self.aligned = aligned
        self.use_torchvision = use_torchvision

    def forward(self, input: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        if self.use_torchvision:
            from torchvision.ops import roi_align as tv_roi_align

            return tv_roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)
        return roi_align(
            input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.pool_mode, self.aligned
        )

    def __repr__(self) -> str:
        return attributes_repr(
            self, "output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned", "use_torchvision"
        )


@example("roi_align")
def _example(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> str | None:
    """Both pool modes, forward and backward; on CUDA invalid RoIs must give NaN (no host check there);
    in a 16-bit dtype also under autocast, a 16-bit map beside float32 RoIs (the AMP path)."""
    from ..reference.roi_align import roi_align_reference
    from ._examples import autocast_forward_backward, exact_rois, invalid_rois_check, synchronize, tolerance

    x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64).to(dtype).double()
    rois = torch.tensor(
        [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
    )
    for mode in _POOL_MODES:
        xd = x.to(device, dtype, copy=True).requires_grad_()
        out = roi_align(xd, rois.to(device, dtype), 3, 1.0, 0, mode, True)
        out.backward(torch.ones_like(out))
        synchronize(device)
        want = roi_align_reference(x, rois, (3, 3), 1.0, 0, mode, True)
        tol = tolerance(dtype)
        if not torch.allclose(out.detach().cpu().double(), want, rtol=tol, atol=tol):
            return f"roi_align {mode}: wrong result"
        if not torch.isfinite(xd.grad).all():
            return f"roi_align {mode}: non-finite gradient"
        error = invalid_rois_check(
            f"roi_align {mode}",
            lambda t, r, m=mode: roi_align(t, r, 3, 1.0, 0, m, True),
            x, rois, want, xd.grad.cpu().double(), device, dtype,
            lambda a, b, tol=tol: torch.allclose(a, b, rtol=tol, atol=tol),
        )  # fmt: skip
        if error is not None:
            return error
    if dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(2, 5, 12, 14, generator=gen, dtype=torch.float64)
        rois = exact_rois(gen, 9)
        for mode, ratio, aligned in (("avg", 2, True), ("max", 0, False)):
            error = autocast_forward_backward(
                lambda t, r, m=mode, s=ratio, a=aligned: roi_align(t, r, 3, 0.25, s, m, a),
                lambda t, r, m=mode, s=ratio, a=aligned: roi_align_reference(t, r, (3, 3), 0.25, s, m, a),
                [x, rois], {1}, {1}, dtype, gen, device,
            )  # fmt: skip
            if error is not None:
                return f"roi_align {mode} under autocast: {error}"
    return None
