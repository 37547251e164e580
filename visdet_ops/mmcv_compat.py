"""Unmodified MMDetection 3.x (or any mmcv 2.x code) on visdet-ops: `install()` makes `import mmcv.ops` and its
submodules resolve to visdet_ops and registers in mmengine's MODELS registry the classes mmcv.ops registers there
(docs/migration.md, "MMDetection 3.x").

    pip install mmcv-lite visdet-ops        # mmcv's pure-Python part (mmcv.cnn, transforms, ...) and these ops
    import visdet_ops.mmcv_compat; visdet_ops.mmcv_compat.install()   # once, before mmdet is imported

Opt-in, and only this module touches mmcv or mmengine (imported when install() runs): the package itself needs
torch only. install() refuses where a full mmcv with compiled ops (mmcv._ext) is installed: that one is mmcv.ops.
A name mmcv.ops has and visdet_ops lacks is an AttributeError naming it (`from mmcv.ops import box_iou_rotated`:
ImportError "cannot import name 'box_iou_rotated' from 'mmcv.ops'"), a submodule visdet_ops lacks an ImportError
naming it; neither is imported from mmcv-lite's copy (which fails on its missing _ext)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

import torch

import visdet_ops

__all__ = ["MODELS_NAMES", "install", "installed"]


class MMSyncBN(torch.nn.SyncBatchNorm):
    """'MMSyncBN' (mmcv.ops.SyncBatchNorm, compiled in mmcv) as torch.nn.SyncBatchNorm with mmcv's constructor:
    the same parameters and buffers (state-dict keys), the same statistics in training where every process has the
    same batch size (mmcv's stats_mode 'default' averages the processes' means with equal weights, torch weights
    them by batch size, which is mmcv's stats_mode 'N'), running statistics as nn.BatchNorm2d, and a plain batch norm
    in one process (mmcv's needs torch.distributed)."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        group=None,
        stats_mode: str = "default",
    ) -> None:
        if stats_mode not in ("default", "N"):
            raise ValueError(f"MMSyncBN: stats_mode must be 'default' or 'N', got {stats_mode!r}")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, process_group=group)
        self.group = group
        self.stats_mode = stats_mode


def _models_names() -> dict[str, type]:
    """What mmcv 2.2.0's mmcv/ops registers in mmengine's MODELS (each `@MODELS.register_module`) that visdet_ops
    has: registry name -> class. mmcv also registers CrissCrossAttention and the sparse convolutions (SparseConv2d,
    SubMConv3d, ...), which visdet_ops lacks: a config naming them gets mmengine's KeyError."""
    return {
        "DCN": visdet_ops.DeformConv2dPack,
        "DCNv2": visdet_ops.ModulatedDeformConv2dPack,
        "carafe": visdet_ops.CARAFEPack,
        "MultiScaleDeformableAttention": visdet_ops.MultiScaleDeformableAttention,
        "SAC": visdet_ops.SAConv2d,
        "MMSyncBN": MMSyncBN,
    }


MODELS_NAMES = _models_names()

_DOCS = "docs/migration.md of visdet-ops lists what it provides"


class _MmcvOps(types.ModuleType):
    """mmcv.ops as visdet_ops: its exports, and mmcv's submodule paths as attributes where no export has the name
    (as in mmcv, mmcv.ops.nms is the function, sys.modules['mmcv.ops.nms'] the module)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"mmcv.ops is visdet_ops (visdet_ops.mmcv_compat.install()): {name} is not provided; {_DOCS}"
        )


class _MissingSubmodules(importlib.abc.MetaPathFinder):
    """Any mmcv.ops.<name> that install() did not put in sys.modules: an ImportError naming it, before the import
    system would load mmcv-lite's own file (which fails on mmcv._ext, or runs mmcv's registrations twice)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("mmcv.ops.") and fullname not in sys.modules:
            raise ModuleNotFoundError(
                f"{fullname}: mmcv.ops is visdet_ops (visdet_ops.mmcv_compat.install()) and it has no module "
                f"{fullname.rsplit('.', 1)[1]}; {_DOCS}",
                name=fullname,
            )
        return None


def installed() -> bool:
    """Whether install() has run in this process (mmcv.ops is visdet_ops)."""
    return isinstance(sys.modules.get("mmcv.ops"), _MmcvOps)


def install() -> None:
    """Makes `mmcv.ops` and its submodule paths (`mmcv.ops.nms`, `mmcv.ops.point_sample`, ...) visdet_ops and
    registers MODELS_NAMES in mmengine's MODELS (force=True, as mmcv's own re-registrations). Needs mmcv-lite (or
    another mmcv without compiled ops) and mmengine; raises ImportError, saying why, where a full mmcv is installed or
    either is missing. Idempotent."""
    if installed():
        return
    try:
        import mmcv
    except ImportError as e:
        raise ImportError(
            "visdet_ops.mmcv_compat.install(): mmcv is not importable (pip install mmcv-lite: mmcv's pure-Python "
            f"part, whose mmcv.ops visdet_ops then provides): {e}"
        ) from e
    if importlib.util.find_spec("mmcv._ext") is not None:
        raise ImportError(
            f"visdet_ops.mmcv_compat.install(): mmcv {getattr(mmcv, '__version__', '?')} at "
            f"{getattr(mmcv, '__file__', '?')} has its own compiled ops (mmcv._ext): that is mmcv.ops. Use it, or "
            "replace it with mmcv-lite (pip uninstall mmcv; pip install mmcv-lite) to run on visdet_ops"
        )
    present = sys.modules.get("mmcv.ops")
    if present is not None:
        raise ImportError(f"visdet_ops.mmcv_compat.install(): mmcv.ops is already imported from {present!r}")
    try:
        from mmengine.registry import MODELS
    except ImportError as e:
        raise ImportError(
            f"visdet_ops.mmcv_compat.install(): mmengine is not importable (pip install mmengine): {e}"
        ) from e

    ops = _MmcvOps("mmcv.ops", "mmcv.ops provided by visdet_ops (visdet_ops.mmcv_compat.install())")
    ops.__file__ = __file__
    ops.__path__ = []  # a package: mmcv.ops.<name> imports go through sys.modules and the finder below
    ops.__package__ = "mmcv.ops"
    ops.__all__ = [n for n in visdet_ops.__all__ if n != "BUILD_INFO"]
    for name in ops.__all__:
        setattr(ops, name, getattr(visdet_ops, name))
    for name in visdet_ops.MMCV_MODULE_PATHS:
        module = sys.modules[f"visdet_ops.{name}"]
        sys.modules[f"mmcv.ops.{name}"] = module
        if name not in ops.__all__:
            setattr(ops, name, module)
    sys.meta_path.insert(0, _MissingSubmodules())
    sys.modules["mmcv.ops"] = ops
    mmcv.ops = ops
    for name, cls in MODELS_NAMES.items():
        MODELS.register_module(name, module=cls, force=True)
