"""visdet-ops: C++/CUDA detection ops for PyTorch with mmcv.ops names.

Importing checks the compiled ops against the running torch and fails with one
clear ImportError (with the pip line that fixes it) when they do not match.

Except where the import starts the doctor, which must run exactly then to
explain why: the `visdet-ops` console script (visdet_ops_doctor.py, outside
this package) and `python -m visdet_ops` (__main__.py). There the error is
kept in LOAD_ERROR (BUILD_INFO is None, no ops are exported) instead of
raised; __main__.py raises it again for anything but `doctor`.
"""

from __future__ import annotations

import sys as _sys


def _started_as_program() -> bool:
    """Whether this import starts the doctor program rather than being a library import (decided from the
    interpreter's state, never from the user's arguments)."""
    # The console script: visdet_ops_doctor.main() sets its RUNNING flag before it imports this package (a module
    # outside the package, since importing any module of the package runs this file first).
    launcher = _sys.modules.get("visdet_ops_doctor")
    if getattr(launcher, "RUNNING", False):
        return True
    # `python -m visdet_ops`: runpy imports this package to locate visdet_ops.__main__, and while it does, CPython
    # sets sys.argv[0] to "-m" (documented under the -m option; later it is the path of __main__.py).
    return _sys.argv[:1] == ["-m"]


try:
    from ._loader import load_library as _load_library

    BUILD_INFO = _load_library()
except ImportError as _exc:
    if not _started_as_program():
        raise
    LOAD_ERROR: ImportError | None = _exc
    BUILD_INFO = None

    def __getattr__(name: str):
        # The ops are missing because the load error was kept for the doctor: whoever else looks one up (another
        # `python -m` target whose package imports visdet_ops while being located) is told why.
        why = str(LOAD_ERROR).partition("\n")[0]
        raise AttributeError(
            f"module 'visdet_ops' has no attribute {name!r}: its compiled ops did not load ({why})"
        ) from LOAD_ERROR
else:
    LOAD_ERROR = None
    __version__ = BUILD_INFO["VERSION"]

    def _export_op_modules() -> list[str]:
        """Every op module of visdet_ops/ops/ (a module per op family, found by name; `_*.py` are helpers)
        and of visdet_ops/composite/ (mmcv's names that are compositions, no kernels of their own), and its
        __all__: adding an op adds its module, nothing here."""
        import importlib
        import pkgutil

        from . import composite, ops

        exported: dict[str, str] = {}
        for package in (ops, composite):
            home = package.__name__.rsplit(".", 1)[1]
            for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
                if info.name.startswith("_"):
                    continue
                module = importlib.import_module(f"{package.__name__}.{info.name}")
                for name in module.__all__:
                    if name in exported:
                        raise ImportError(
                            f"visdet_ops: {name} is exported by both {exported[name]} and {home}.{info.name}"
                        )
                    exported[name] = f"{home}.{info.name}"
                    globals()[name] = getattr(module, name)
        return sorted(exported)

    # mmcv's submodule paths (`from mmcv.ops.nms import batched_nms` becomes `from visdet_ops.nms import
    # batched_nms`): modules of this package, imported before the ops are exported, as mmcv's own __init__ does.
    # Nine share a name with an op function (box_iou_rotated, carafe, corner_pool, deform_roi_pool, nms,
    # point_sample, roi_align, roi_align_rotated, roi_pool):
    # importing a submodule sets the package's attribute of that name to the module, so the export below must come
    # after, and later imports find them in sys.modules and leave the attribute alone: visdet_ops.nms stays the
    # function.
    # The package's public modules that are ours (every other public module of visdet_ops/, not a subpackage, is an
    # mmcv submodule path; tests/test_mmcv_names.py checks each against mmcv 2.2.0's submodules). mmcv_compat is
    # opt-in and imported only by its user (it touches mmcv and mmengine when install() runs).
    _OWN_MODULES = ("detectron2_compat", "doctor", "mmcv_compat", "onnx")

    def _import_mmcv_module_paths() -> tuple[str, ...]:
        import importlib
        import pkgutil

        paths = tuple(
            sorted(
                m.name
                for m in pkgutil.iter_modules(__path__)
                if not m.ispkg and not m.name.startswith("_") and m.name not in _OWN_MODULES
            )
        )
        for name in paths:
            importlib.import_module(f"{__name__}.{name}")
        return paths

    MMCV_MODULE_PATHS = _import_mmcv_module_paths()
    __all__ = ["BUILD_INFO", *_export_op_modules()]
