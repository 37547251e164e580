"""One module per op family. Each registers its fake impl, autograd formula
and a smoke test (a tiny call checked against the float64 reference) that
`visdet-ops doctor` runs on every device."""

from __future__ import annotations

from collections.abc import Callable

import torch

# name -> fn(device) that raises on a wrong result
SMOKE_TESTS: dict[str, Callable[[torch.device], None]] = {}


def smoke_test(name: str):
    def register(fn: Callable[[torch.device], None]):
        SMOKE_TESTS[name] = fn
        return fn

    return register


def note_device(tensor: torch.Tensor) -> None:
    """Per-GPU arch check (warns once); skipped while torch.compile traces."""
    if not torch.compiler.is_compiling():
        from .._loader import note_device as _note

        _note(tensor)
