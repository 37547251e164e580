"""Float64 reference of deformable convolution (DCNv1 / DCNv2, mmcv semantics):
plain PyTorch bilinear sampling (torch.gather) and an einsum. Differentiable
through autograd: the gradients the kernels are tested against."""

from __future__ import annotations

import torch


def deform_conv2d_reference(
    input: torch.Tensor,
    offset: torch.Tensor,
    mask: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=(1, 1),
    padding=(0, 0),
    dilation=(1, 1),
    groups: int = 1,
    deform_groups: int = 1,
) -> torch.Tensor:
    """out[n, o, oh, ow] = bias[o] + sum_{c, i, j} weight[o, c, i, j] * m * v, where for the
    deform group of channel c and kernel point k = i * KW + j:
      y = oh * stride_h - pad_h + i * dilation_h + offset[n, g * 2KK + 2k, oh, ow]
      x = ow * stride_w - pad_w + j * dilation_w + offset[n, g * 2KK + 2k + 1, oh, ow]
      v = bilinear(input[n, c], y, x), neighbours outside the map count 0, and v = 0
          unless -1 < y < H and -1 < x < W
      m = mask[n, g * KK + k, oh, ow] (1 without a mask)."""
    n, c, h, w = input.shape
    cout, _, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    kk, dg = kh * kw, deform_groups
    cpg = c // dg
    opts = dict(dtype=input.dtype, device=input.device)
    off = offset.reshape(n, dg, kk, 2, oh, ow)
    ki = torch.arange(kh, **opts).repeat_interleave(kw)  # i of kernel point k
    kj = torch.arange(kw, **opts).repeat(kh)
    base_y = (torch.arange(oh, **opts) * sh - ph)[None, :, None] + (ki * dh)[:, None, None]
    base_x = (torch.arange(ow, **opts) * sw - pw)[None, None, :] + (kj * dw)[:, None, None]
    y = base_y + off[:, :, :, 0]  # [n, dg, kk, oh, ow]
    x = base_x + off[:, :, :, 1]
    inside = (y > -1) & (x > -1) & (y < h) & (x < w)
    zero = torch.zeros((), **opts)
    y = torch.where(inside, y, zero)  # keeps NaN/inf out of the index arithmetic
    x = torch.where(inside, x, zero)
    y0, x0 = torch.floor(y).detach(), torch.floor(x).detach()
    ly, lx = y - y0, x - x0
    feats = input.reshape(n, dg, cpg, h * w)

    def corner(yy: torch.Tensor, xx: torch.Tensor) -> torch.Tensor:
        valid = (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1)
        idx = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long()
        idx = idx.reshape(n, dg, 1, kk * oh * ow).expand(n, dg, cpg, kk * oh * ow)
        v = torch.gather(feats, 3, idx).reshape(n, dg, cpg, kk, oh, ow)
        return torch.where(valid.unsqueeze(2), v, zero)

    def wt(t: torch.Tensor) -> torch.Tensor:
        return t.unsqueeze(2)

    val = (
        wt((1 - ly) * (1 - lx)) * corner(y0, x0)
        + wt((1 - ly) * lx) * corner(y0, x0 + 1)
        + wt(ly * (1 - lx)) * corner(y0 + 1, x0)
        + wt(ly * lx) * corner(y0 + 1, x0 + 1)
    )
    val = torch.where(inside.unsqueeze(2), val, zero)
    if mask is not None:
        val = val * mask.reshape(n, dg, 1, kk, oh, ow)
    cols = val.reshape(n, groups, c // groups, kk, oh, ow)
    wg = weight.reshape(groups, cout // groups, c // groups, kk)
    out = torch.einsum("ngckyx,gock->ngoyx", cols, wg).reshape(n, cout, oh, ow)
    if bias is not None:
        out = out + bias.reshape(1, cout, 1, 1)
    return out
