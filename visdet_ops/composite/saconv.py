"""mmcv.ops.saconv's SAConv2d, DetectoRS' switchable atrous convolution (registered in mmcv as 'SAC'), with
mmcv 2.2.0's constructor, forward, parameters and buffers (mmcv's state-dict keys: weight, bias, weight_gamma,
weight_beta, weight_diff, switch.*, pre_context.*, post_context.*, offset_s.*, offset_l.*), initialisation and
checkpoint loading (docs/ops.md, "saconv"). A module over torch's conv2d and visdet_ops' deform_conv2d."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import _args
from ..ops.deform_conv import deform_conv2d

__all__ = ["SAConv2d"]


def _standardise(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # mmcv.cnn.ConvAWS2d: each output channel's mean and sqrt(unbiased variance + 1e-5)
    flat = weight.view(weight.size(0), -1)
    mean = flat.mean(dim=1).view(-1, 1, 1, 1)
    std = torch.sqrt(flat.var(dim=1) + 1e-5).view(-1, 1, 1, 1)
    return mean, std


class ConvAWS2d(nn.Conv2d):
    """mmcv.cnn.ConvAWS2d (adaptive weight standardisation), SAConv2d's base: the weight standardised per output
    channel, then scaled by the buffer weight_gamma and shifted by weight_beta; a checkpoint without those buffers
    (a plain conv's) gets its weights' own mean and std there, so it computes what it did."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, groups=groups,
            bias=bias,
        )  # fmt: skip
        self.register_buffer("weight_gamma", torch.ones(self.out_channels, 1, 1, 1))
        self.register_buffer("weight_beta", torch.zeros(self.out_channels, 1, 1, 1))

    def _get_weight(self, weight: torch.Tensor) -> torch.Tensor:
        mean, std = _standardise(weight)
        return self.weight_gamma * ((weight - mean) / std) + self.weight_beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(
            x, self._get_weight(self.weight), self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # mmcv's: weight_gamma is set to -1 first; still negative after loading means the checkpoint had none
        self.weight_gamma.data.fill_(-1)
        local_missing_keys: list = []
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, local_missing_keys, unexpected_keys, error_msgs
        )
        if self.weight_gamma.data.mean() > 0:
            missing_keys.extend(local_missing_keys)
            return
        mean, std = _standardise(self.weight.data)
        self.weight_beta.data.copy_(mean)
        self.weight_gamma.data.copy_(std)
        missing_keys.extend(k for k in local_missing_keys if not k.endswith(("weight_gamma", "weight_beta")))


class SAConv2d(ConvAWS2d):
    """Switchable atrous convolution (mmcv.ops.SAConv2d, config type 'SAC').

    out = s * conv(x, W) + (1 - s) * conv(x, W + weight_diff) with 3x the padding and dilation, where W is the
    standardised weight and s = switch(avg_pool5x5(x)), between a global-context add before (pre_context) and after
    (post_context); use_deform: both convolutions deformable (deform_conv2d, offsets from offset_s / offset_l).
    As in mmcv, the convolutions add no bias (`bias` is a parameter that forward does not use).
    """

    def __init__(
        self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
        use_deform=False,
    ):  # fmt: skip
        _args.check_conv("SAConv2d", in_channels, out_channels, kernel_size, stride, padding, dilation, groups)
        super().__init__(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, groups=groups,
            bias=bias,
        )  # fmt: skip
        self.use_deform = use_deform
        self.switch = nn.Conv2d(self.in_channels, 1, kernel_size=1, stride=stride, bias=True)
        self.weight_diff = nn.Parameter(torch.empty(self.weight.size()))
        self.pre_context = nn.Conv2d(self.in_channels, self.in_channels, kernel_size=1, bias=True)
        self.post_context = nn.Conv2d(self.out_channels, self.out_channels, kernel_size=1, bias=True)
        if self.use_deform:
            self.offset_s = nn.Conv2d(self.in_channels, 18, kernel_size=3, padding=1, stride=stride, bias=True)
            self.offset_l = nn.Conv2d(self.in_channels, 18, kernel_size=3, padding=1, stride=stride, bias=True)
        self.init_weights()

    def init_weights(self) -> None:
        # mmcv's: constant_init(switch, 0, bias=1), weight_diff 0, the context and offset convs 0
        for conv, bias in ((self.switch, 1.0), (self.pre_context, 0.0), (self.post_context, 0.0)):
            nn.init.constant_(conv.weight, 0)
            nn.init.constant_(conv.bias, bias)
        self.weight_diff.data.zero_()
        if self.use_deform:
            for conv in (self.offset_s, self.offset_l):
                nn.init.constant_(conv.weight, 0)
                nn.init.constant_(conv.bias, 0)

    def _branch(self, x, avg_x, weight, offset_conv, padding, dilation):
        if self.use_deform:
            return deform_conv2d(x, offset_conv(avg_x), weight, self.stride, padding, dilation, self.groups, 1)
        return F.conv2d(x, weight, None, self.stride, padding, dilation, self.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # pre-context
        avg_x = self.pre_context(F.adaptive_avg_pool2d(x, output_size=1))
        x = x + avg_x.expand_as(x)
        # switch
        avg_x = F.avg_pool2d(F.pad(x, pad=(2, 2, 2, 2), mode="reflect"), kernel_size=5, stride=1, padding=0)
        switch = self.switch(avg_x)
        # sac: the small and the large (3x padding and dilation) convolution
        weight = self._get_weight(self.weight)
        out_s = self._branch(x, avg_x, weight, getattr(self, "offset_s", None), self.padding, self.dilation)
        large_padding = tuple(3 * p for p in self.padding)
        large_dilation = tuple(3 * d for d in self.dilation)
        out_l = self._branch(
            x, avg_x, weight + self.weight_diff, getattr(self, "offset_l", None), large_padding, large_dilation
        )
        out = switch * out_s + (1 - switch) * out_l
        # post-context
        avg_x = self.post_context(F.adaptive_avg_pool2d(out, output_size=1))
        return out + avg_x.expand_as(out)
