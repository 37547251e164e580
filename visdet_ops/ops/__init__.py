"""One module per op family. Each registers its fake impl, autograd formula
and a smoke test (a tiny call checked against the float64 reference) that
`visdet-ops doctor` runs on every device."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch

# name -> fn(device) that raises on a wrong result
SMOKE_TESTS: dict[str, Callable[[torch.device], None]] = {}


def smoke_test(name: str):
    def register(fn: Callable[[torch.device], None]):
        SMOKE_TESTS[name] = fn
        return fn

    return register


def renamed_kwargs(who: str, renames: dict[str, str]):
    """mmcv's `deprecated_api_warning`: old keyword names still work, with a
    DeprecationWarning; old and new given together is a TypeError (mmcv: an
    AssertionError). The wrapped signature is the new one (inspect follows
    __wrapped__)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{who}: got both {old!r} (deprecated) and {new!r}; give {new!r} only")
                    warnings.warn(
                        f"{who}: {old!r} is deprecated, use {new!r}",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return decorate


def op_folder_built(folder: str) -> bool:
    """Whether this build compiled csrc/ops/<folder>. TEMPORARY, while the stable-ABI port is under way: a stable
    build compiles the ported op folders only (docs/stable-abi.md); a classic build compiles every folder."""
    from .._loader import build_info

    folders = (build_info() or {}).get("OP_FOLDERS")
    return folders is None or folder in folders


def note_device(tensor: torch.Tensor) -> None:
    """Per-GPU arch check (warns once); skipped while torch.compile traces."""
    if not torch.compiler.is_compiling():
        from .._loader import note_device as _note

        _note(tensor)
