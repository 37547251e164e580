"""One module per op family. Each registers its fake impl, autograd formula
and one example case: a small call of every kernel of the family, forward and
backward, checked against the float64 reference, in any float dtype on any
device. `visdet-ops doctor` runs the example cases on each device, the
compute-sanitizer sweep (tests/sanitize_sweep.py) runs them on CUDA in every
dtype, and tests/test_examples.py on the CPU: adding an op adds its example to
all three. Each also declares its `@benchmark`s, which benchmarks/bench.py runs."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# fn(device, dtype, gen) -> None when right, else what is wrong (see _examples.py).
ExampleCase = Callable[[torch.device, torch.dtype, torch.Generator], "str | None"]


@dataclass(frozen=True)
class Example:
    family: str  # the op module's name (visdet_ops/ops/<family>.py)
    ops: tuple[str, ...]  # the registered ops the case calls (the doctor reports each)
    run: ExampleCase


# family -> its example case, in import order of the op modules
EXAMPLES: dict[str, Example] = {}


def example(*ops: str):
    """Registers the decorated function as its module's example case; `ops` names the registered ops
    (torch.ops.visdet_ops.<name>) that it calls. One per module."""

    def register(fn: ExampleCase) -> ExampleCase:
        family = fn.__module__.rsplit(".", 1)[1]
        if family in EXAMPLES:
            raise RuntimeError(f"visdet_ops.ops.{family} registers a second example case")
        EXAMPLES[family] = Example(family, ops, fn)
        return fn

    return register


@dataclass(frozen=True)
class Benchmark:
    family: str  # the op module whose ops it times (visdet_ops/ops/<family>.py)
    ops: tuple[str, ...]  # the registered ops whose rows it adds
    run: Callable[[Any], None]  # run(bench): times on a GPU, appends rows to bench.results (benchmarks/bench.py)


# every declared benchmark, in import order of the op modules (a module may declare several)
BENCHMARKS: list[Benchmark] = []


def benchmark(*ops: str, family: str | None = None):
    """Registers the decorated function as a benchmark of its module's family: `benchmarks/bench.py` calls it on a
    GPU with a `BenchRun` (bench.gen, bench.tv: torchvision.ops or None, bench.cuda_time_ms, bench.cpu_time_ms,
    bench.peak_memory_bytes, bench.forward_traffic) and it appends its table rows to bench.results. `ops` names the
    registered ops whose rows it adds. Importing an op module runs nothing: torchvision and other peers are
    imported inside the function. `family` only for a benchmark declared outside its op module."""

    def register(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        BENCHMARKS.append(Benchmark(family or fn.__module__.rsplit(".", 1)[1], ops, fn))
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


def note_device(tensor: torch.Tensor) -> None:
    """Per-GPU arch check (warns once); skipped while torch.compile traces."""
    if not torch.compiler.is_compiling():
        from .._loader import note_device as _note

        _note(tensor)
