"""visdet-ops: C++/CUDA detection ops for PyTorch with mmcv.ops names.

Importing checks the compiled ops against the running torch and fails with one
clear ImportError (with the pip line that fixes it) when they do not match.
"""

from __future__ import annotations

import sys as _sys


def _doctor_invocation() -> bool:
    # `visdet-ops doctor` and `python -m visdet_ops doctor` must run even when
    # the ops cannot load: the doctor explains why. (During `-m`, argv[0] is
    # "-m" while the package is imported.)
    argv = _sys.argv
    return len(argv) > 1 and argv[1] == "doctor" and (argv[0] == "-m" or argv[0].endswith("visdet-ops"))


try:
    from ._loader import load_library as _load_library

    BUILD_INFO = _load_library()
except ImportError as _exc:
    if not _doctor_invocation():
        raise
    LOAD_ERROR: ImportError | None = _exc
    BUILD_INFO = None
else:
    LOAD_ERROR = None
    __version__ = BUILD_INFO["VERSION"]

    def _export_op_modules() -> list[str]:
        """Every op module of visdet_ops/ops/ (a module per op family, found by name; `_*.py` are helpers)
        and its __all__: adding an op adds its module, nothing here."""
        import importlib
        import pkgutil

        from . import ops

        exported: dict[str, str] = {}
        for info in sorted(pkgutil.iter_modules(ops.__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{ops.__name__}.{info.name}")
            for name in module.__all__:
                if name in exported:
                    raise ImportError(
                        f"visdet_ops: {name} is exported by both ops.{exported[name]} and ops.{info.name}"
                    )
                exported[name] = info.name
                globals()[name] = getattr(module, name)
        return sorted(exported)

    __all__ = ["BUILD_INFO", *_export_op_modules()]
