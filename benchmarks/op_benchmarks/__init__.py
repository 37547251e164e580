"""The op benchmarks: one module per op family (benchmarks/op_benchmarks/<family>.py, the family being the op
module visdet_ops/ops/<family>.py), each declaring its `@benchmark`s, every case of every report. Not shipped in the
wheel: benchmarks/bench.py loads them all (load_all) and runs those tagged "bench" on a GPU (tests/test_op_registry.py
requires one per family); the other reports (benchmarks/gpu_targets.py, cpu.py, host_time.py, host_instructions.py,
compare_builds.py's selftest) select theirs by tag through bench.tagged and keep only their format, timing loop and
command line."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Benchmark:
    family: str  # the op module whose ops it times (visdet_ops/ops/<family>.py)
    ops: tuple[str, ...]  # the registered ops whose rows it adds
    run: Callable[..., Any]  # "bench": run(bench) times on a GPU, appends rows to bench.results (benchmarks/bench.py)
    tags: tuple[str, ...] = ("bench",)  # the reports that select it: benchmarks/<tag>.py ("bench": bench.py's table)
    alias: str | None = None  # another name a report's --only accepts for the family (issue 24's: focal, dcn, msda)


class Case(NamedTuple):
    """One row of a report other than bench.py's: ours and peer are the timed calls (peer None: no peer). What a
    tag's function is called with and which fields its report reads: that report's docstring."""

    name: str
    ours: Any
    peer: Any = None
    back_to_back: bool = False  # gpu_targets: time `--calls` calls between one pair of events
    compulsory_bytes: int | None = None  # gpu_targets: the bytes a call must move at least (GB/s, fraction of copy)
    setup: str = ""  # host_instructions: the code that makes the inputs of `ours`, a statement (not counted)
    peer_name: str | None = None  # cpu: who `peer` is, where it is not torchvision (None: torchvision.ops)


# every declared benchmark, in import order of the modules (a module may declare several)
BENCHMARKS: list[Benchmark] = []


def benchmark(*ops: str, tags: tuple[str, ...] = ("bench",), alias: str | None = None):
    """Registers the decorated function as a benchmark of its module's family, for the reports `tags` names. Tag
    "bench" (the default): `benchmarks/bench.py` calls it on a GPU with a `BenchRun` (bench.gen, bench.tv:
    torchvision.ops or None, bench.cuda_time_ms, bench.cpu_time_ms, bench.peak_memory_bytes, bench.forward_traffic)
    and it appends its table rows to bench.results. Any other tag is the report benchmarks/<tag>.py, whose docstring
    says what it calls the function with; the function yields that report's rows as `Case`s. `ops` names the
    registered ops whose rows it adds. Importing a module runs nothing: torchvision and other peers are imported
    inside the function or passed in."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        BENCHMARKS.append(Benchmark(fn.__module__.rsplit(".", 1)[1], ops, fn, tuple(tags), alias))
        return fn

    return register


def load_all() -> list[Benchmark]:
    """Imports every family's module (once) and returns every declared benchmark."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return BENCHMARKS
