"""The part of mmcv.cnn's ConvModule that mmcv.ops' merge cells build (conv, norm, activation in a given order),
torch-only: the same submodule names (`conv`, the norm's `bn` / `gn` / `ln` / `in`, `activate`), so mmcv's
state-dict keys, and the same initialisation (mmengine's kaiming_init of the conv: normal, fan_out, bias 0; the norm
weight 1 and bias 0). Layer types: mmcv's own names for torch's layers; a type it does not know is looked up in
mmengine's MODELS registry where mmengine is installed (a custom conv or norm of a config), else it is an error
naming the argument."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from ..ops import _args

# mmcv.cnn's registry names of torch's layers (mmcv/cnn/bricks/{conv,norm,activation}.py).
CONV_LAYERS = {"Conv": nn.Conv2d, "Conv1d": nn.Conv1d, "Conv2d": nn.Conv2d, "Conv3d": nn.Conv3d}
NORM_LAYERS = {
    "BN": nn.BatchNorm2d,
    "BN1d": nn.BatchNorm1d,
    "BN2d": nn.BatchNorm2d,
    "BN3d": nn.BatchNorm3d,
    "SyncBN": nn.SyncBatchNorm,
    "GN": nn.GroupNorm,
    "LN": nn.LayerNorm,
    "IN": nn.InstanceNorm2d,
    "IN1d": nn.InstanceNorm1d,
    "IN2d": nn.InstanceNorm2d,
    "IN3d": nn.InstanceNorm3d,
}
ACTIVATION_LAYERS = {
    "ReLU": nn.ReLU,
    "LeakyReLU": nn.LeakyReLU,
    "PReLU": nn.PReLU,
    "RReLU": nn.RReLU,
    "ReLU6": nn.ReLU6,
    "ELU": nn.ELU,
    "Sigmoid": nn.Sigmoid,
    "Tanh": nn.Tanh,
    "SiLU": nn.SiLU,
    "GELU": nn.GELU,
}
# mmcv's ConvModule passes inplace to every activation but these
_NO_INPLACE = ("Tanh", "PReLU", "Sigmoid", "HSigmoid", "Swish", "GELU")


def _layer(op: str, arg: str, cfg: dict, table: dict):
    if not isinstance(cfg, dict) or "type" not in cfg:
        raise _args.ArgumentError(f"{op}: {arg} must be a dict with a 'type' key, got {cfg!r}")
    kind = cfg["type"]
    if not isinstance(kind, str):
        return kind  # a class, as mmengine's registry also takes
    if kind in table:
        return table[kind]
    try:
        from mmengine.registry import MODELS
    except ImportError:
        MODELS = None
    found = MODELS.get(kind) if MODELS is not None else None
    if found is None:
        raise _args.ArgumentError(
            f"{op}: {arg} type {kind!r} is not one of {sorted(table)}"
            + ("" if MODELS is not None else " (other types are looked up in mmengine's MODELS: not installed)")
        )
    return found


def _norm_abbr(cls) -> str:
    # mmcv.cnn.bricks.norm.infer_abbr
    if hasattr(cls, "_abbr_"):
        return cls._abbr_
    if issubclass(cls, _InstanceNorm):
        return "in"
    if issubclass(cls, _BatchNorm):
        return "bn"
    if issubclass(cls, nn.GroupNorm):
        return "gn"
    if issubclass(cls, nn.LayerNorm):
        return "ln"
    name = cls.__name__.lower()
    for word, abbr in (("batch", "bn"), ("group", "gn"), ("layer", "ln"), ("instance", "in")):
        if word in name:
            return abbr
    return "norm_layer"


class ConvModule(nn.Module):
    """mmcv.cnn.ConvModule's conv / norm / act block (2-D, explicit padding 'zeros' only)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias="auto",
        conv_cfg: dict | None = None,
        norm_cfg: dict | None = None,
        act_cfg: dict | None = {"type": "ReLU"},  # noqa: B006 (mmcv's default, never modified)
        inplace: bool = True,
        order: tuple = ("conv", "norm", "act"),
        owner: str = "ConvModule",
    ) -> None:
        super().__init__()
        if not isinstance(order, tuple) or len(order) != 3 or set(order) != {"conv", "norm", "act"}:
            raise _args.ArgumentError(f"{owner}: order must be a permutation of ('conv', 'norm', 'act'), got {order!r}")
        self.conv_cfg, self.norm_cfg, self.act_cfg = conv_cfg, norm_cfg, act_cfg
        self.inplace, self.order = inplace, order
        self.with_norm = norm_cfg is not None
        self.with_activation = act_cfg is not None
        if bias == "auto":
            bias = not self.with_norm
        self.with_bias = bias
        conv_cfg = dict(conv_cfg) if conv_cfg is not None else {"type": "Conv2d"}
        conv_type = _layer(owner, "conv_cfg", conv_cfg, CONV_LAYERS)
        conv_cfg.pop("type")
        self.conv = conv_type(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=bias,
            **conv_cfg,
        )
        if self.with_norm:
            norm_cfg = dict(norm_cfg)
            norm_type = _layer(owner, "norm_cfg", norm_cfg, NORM_LAYERS)
            norm_cfg.pop("type")
            requires_grad = norm_cfg.pop("requires_grad", True)
            norm_cfg.setdefault("eps", 1e-5)
            channels = out_channels if order.index("norm") > order.index("conv") else in_channels
            if issubclass(norm_type, nn.GroupNorm):
                if "num_groups" not in norm_cfg:
                    raise _args.ArgumentError(f"{owner}: norm_cfg of type GN needs num_groups, got {self.norm_cfg!r}")
                norm = norm_type(num_channels=channels, **norm_cfg)
            else:
                norm = norm_type(channels, **norm_cfg)
            for param in norm.parameters():
                param.requires_grad = requires_grad
            self.norm_name = _norm_abbr(norm_type)
            self.add_module(self.norm_name, norm)
        else:
            self.norm_name = None
        if self.with_activation:
            act_cfg = dict(act_cfg)
            act_type = _layer(owner, "act_cfg", act_cfg, ACTIVATION_LAYERS)
            name = act_cfg.pop("type")
            if name not in _NO_INPLACE:
                act_cfg.setdefault("inplace", inplace)
            self.activate = act_type(**act_cfg)
        self.init_weights()

    @property
    def norm(self):
        return getattr(self, self.norm_name) if self.norm_name else None

    def init_weights(self) -> None:
        # mmcv's: kaiming_init(conv) unless the conv initialises itself, constant_init(norm, 1, bias=0)
        if not hasattr(self.conv, "init_weights"):
            if self.with_activation and self.act_cfg["type"] == "LeakyReLU":
                nonlinearity, a = "leaky_relu", self.act_cfg.get("negative_slope", 0.01)
            else:
                nonlinearity, a = "relu", 0
            nn.init.kaiming_normal_(self.conv.weight, a=a, mode="fan_out", nonlinearity=nonlinearity)
            if self.conv.bias is not None:
                nn.init.constant_(self.conv.bias, 0)
        if self.with_norm:
            norm = self.norm
            if getattr(norm, "weight", None) is not None:
                nn.init.constant_(norm.weight, 1)
            if getattr(norm, "bias", None) is not None:
                nn.init.constant_(norm.bias, 0)

    def forward(self, x: torch.Tensor, activate: bool = True, norm: bool = True) -> torch.Tensor:
        for layer in self.order:
            if layer == "conv":
                x = self.conv(x)
            elif layer == "norm" and norm and self.with_norm:
                x = self.norm(x)
            elif layer == "act" and activate and self.with_activation:
                x = self.activate(x)
        return x
