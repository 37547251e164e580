"""mmcv.ops.merge_cells' cells of NAS-FPN and NAS-FCOS: BaseMergeCell, SumCell, ConcatCell and GlobalPoolingCell,
with mmcv 2.2.0's constructors, forward, submodule names (`out_conv`, `input1_conv`, `input2_conv`: mmcv's
state-dict keys) and initialisation (docs/ops.md, "merge_cells"). Pure PyTorch, as in mmcv; the convolutions are
mmcv.cnn.ConvModule's (composite/_conv_module.py, torch-only)."""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import _args
from ._conv_module import ConvModule

__all__ = ["BaseMergeCell", "ConcatCell", "GlobalPoolingCell", "SumCell"]

UPSAMPLE_MODES = ("nearest", "bilinear")


class BaseMergeCell(nn.Module):
    """Two inputs, each through an optional 3x3 ConvModule (input1_conv, input2_conv), resized to out_size
    (interpolated up, max-pooled down after a centred zero pad to a multiple), combined by _binary_op, then through
    the optional out_conv (a ConvModule with out_conv_cfg's groups, kernel_size, padding and bias, out_norm_cfg,
    order out_conv_order)."""

    def __init__(
        self,
        fused_channels: int | None = 256,
        out_channels: int | None = 256,
        with_out_conv: bool = True,
        out_conv_cfg: dict = {"groups": 1, "kernel_size": 3, "padding": 1, "bias": True},  # noqa: B006 (mmcv's)
        out_norm_cfg: dict | None = None,
        out_conv_order: tuple = ("act", "conv", "norm"),
        with_input1_conv: bool = False,
        with_input2_conv: bool = False,
        input_conv_cfg: dict | None = None,
        input_norm_cfg: dict | None = None,
        upsample_mode: str = "nearest",
    ):
        super().__init__()
        owner = type(self).__name__
        if upsample_mode not in UPSAMPLE_MODES:
            raise _args.ArgumentError(
                f"{owner}: upsample_mode must be one of {list(UPSAMPLE_MODES)}, got {upsample_mode!r}"
            )
        self.with_out_conv = with_out_conv
        self.with_input1_conv = with_input1_conv
        self.with_input2_conv = with_input2_conv
        self.upsample_mode = upsample_mode
        if self.with_out_conv:
            self.out_conv = ConvModule(
                fused_channels, out_channels, **out_conv_cfg, norm_cfg=out_norm_cfg, order=out_conv_order, owner=owner
            )
        self.input1_conv = (
            self._build_input_conv(out_channels, input_conv_cfg, input_norm_cfg)
            if with_input1_conv
            else nn.Sequential()
        )
        self.input2_conv = (
            self._build_input_conv(out_channels, input_conv_cfg, input_norm_cfg)
            if with_input2_conv
            else nn.Sequential()
        )

    def _build_input_conv(self, channel, conv_cfg, norm_cfg):
        return ConvModule(
            channel, channel, 3, padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg, bias=True, owner=type(self).__name__
        )

    @abstractmethod
    def _binary_op(self, x1, x2):
        pass

    def _resize(self, x: torch.Tensor, size) -> torch.Tensor:
        # mmcv's, including its tuple comparison of (h, w) sizes (lexicographic: a map taller but narrower than
        # size is interpolated, as there)
        if x.shape[-2:] == size:
            return x
        if tuple(x.shape[-2:]) < tuple(size):
            return F.interpolate(x, size=size, mode=self.upsample_mode)
        if x.shape[-2] % size[-2] != 0 or x.shape[-1] % size[-1] != 0:
            h, w = x.shape[-2:]
            target_h, target_w = size
            pad_h = math.ceil(h / target_h) * target_h - h
            pad_w = math.ceil(w / target_w) * target_w - w
            pad_l = pad_w // 2
            pad_t = pad_h // 2
            x = F.pad(x, (pad_l, pad_w - pad_l, pad_t, pad_h - pad_t), mode="constant", value=0.0)
        kernel_size = (x.shape[-2] // size[-2], x.shape[-1] // size[-1])
        return F.max_pool2d(x, kernel_size=kernel_size, stride=kernel_size)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, out_size: tuple | None = None) -> torch.Tensor:
        owner = type(self).__name__
        if x1.dim() != 4 or x2.dim() != 4 or x1.shape[:2] != x2.shape[:2]:
            raise _args.ShapeError(
                f"{owner}: x1 and x2 must be [N, C, H, W] with the same N and C, got {list(x1.shape)} and "
                f"{list(x2.shape)}"
            )
        if out_size is not None and len(out_size) != 2:
            raise _args.ArgumentError(f"{owner}: out_size must be None or (h, w), got {out_size!r}")
        if out_size is None:  # resize to the larger one
            out_size = max(x1.size()[2:], x2.size()[2:])
        x1 = self.input1_conv(x1)
        x2 = self.input2_conv(x2)
        x1 = self._resize(x1, out_size)
        x2 = self._resize(x2, out_size)
        x = self._binary_op(x1, x2)
        if self.with_out_conv:
            x = self.out_conv(x)
        return x


class SumCell(BaseMergeCell):
    """x1 + x2."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)

    def _binary_op(self, x1, x2):
        return x1 + x2


class ConcatCell(BaseMergeCell):
    """torch.cat([x1, x2], 1); out_conv takes 2 * in_channels."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs):
        super().__init__(in_channels * 2, out_channels, **kwargs)

    def _binary_op(self, x1, x2):
        return torch.cat([x1, x2], dim=1)


class GlobalPoolingCell(BaseMergeCell):
    """x2 + sigmoid(global average of x2) * x1."""

    def __init__(self, in_channels: int | None = None, out_channels: int | None = None, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self.global_pool = nn.AdaptiveAvgPool2d((1, 1))

    def _binary_op(self, x1, x2):
        x2_att = self.global_pool(x2).sigmoid()
        return x2 + x2_att * x1
