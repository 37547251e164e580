"""The op benchmarks: one module per op family (benchmarks/op_benchmarks/<family>.py, the family being the op
module visdet_ops/ops/<family>.py), each declaring its `@benchmark`s. Not shipped in the wheel: benchmarks/bench.py
loads them all (load_all) and runs them on a GPU; tests/test_op_registry.py requires one per family."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Benchmark:
    family: str  # the op module whose ops it times (visdet_ops/ops/<family>.py)
    ops: tuple[str, ...]  # the registered ops whose rows it adds
    run: Callable[[Any], None]  # run(bench): times on a GPU, appends rows to bench.results (benchmarks/bench.py)


# every declared benchmark, in import order of the modules (a module may declare several)
BENCHMARKS: list[Benchmark] = []


def benchmark(*ops: str):
    """Registers the decorated function as a benchmark of its module's family: `benchmarks/bench.py` calls it on a
    GPU with a `BenchRun` (bench.gen, bench.tv: torchvision.ops or None, bench.cuda_time_ms, bench.cpu_time_ms,
    bench.peak_memory_bytes, bench.forward_traffic) and it appends its table rows to bench.results. `ops` names the
    registered ops whose rows it adds. Importing a module runs nothing: torchvision and other peers are imported
    inside the function."""

    def register(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        BENCHMARKS.append(Benchmark(fn.__module__.rsplit(".", 1)[1], ops, fn))
        return fn

    return register


def load_all() -> list[Benchmark]:
    """Imports every family's module (once) and returns every declared benchmark."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return BENCHMARKS
