"""One module per op family. Each registers its fake impl, autograd formula
and one example case: a small call of every kernel of the family, forward and
backward, checked against the float64 reference, in any float dtype on any
device. `visdet-ops doctor` runs the example cases on each device, the
compute-sanitizer sweep (tests/sanitize_sweep.py) runs them on CUDA in every
dtype, and tests/test_examples.py on the CPU: adding an op adds its example to
all three. Their GPU benchmarks live outside the package, in benchmarks/op_benchmarks/<family>.py."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import _loader

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


def renamed_kwargs(who: str, renames: dict[str, str]):
    """mmcv's `deprecated_api_warning`: old keyword names still work, with a
    DeprecationWarning; old and new given together is a TypeError (mmcv: an
    AssertionError). The wrapped signature is the new one (inspect follows
    __wrapped__)."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not kwargs:  # the common call: positional arguments only
                return fn(*args)
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

        wrapper.renamed_kwargs = dict(renames)  # old name -> new (tests/fuzz_core.public_parameters reads it)
        return wrapper

    return decorate


def attributes_repr(module, *names: str) -> str:
    """The repr that mmcv's modules (and detectron2's) write by hand: the class name and the named attributes as
    name=value, in order, e.g. `RoIPool(output_size=(7, 7), spatial_scale=0.25)`."""
    return f"{type(module).__name__}(" + ", ".join(f"{name}={getattr(module, name)}" for name in names) + ")"


def refuse_graph_capture(op: str, tensor: torch.Tensor, why: str) -> None:
    """A clear error for an op whose host reads device data (why) when a CUDA graph is being captured on the current
    stream: the read would invalidate the capture with a CUDA error that names neither the op nor the cause."""
    if tensor.is_cuda and not torch.compiler.is_compiling() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{op} cannot be captured in a CUDA graph: {why}, which makes the host wait for the GPU. Call it outside "
            "torch.cuda.graph(...) capture (torch.compile(mode='reduce-overhead') runs the graph parts around it)"
        )


def note_device(tensor: torch.Tensor) -> None:
    """Per-GPU arch check (warns once per GPU); nothing for CPU tensors or while torch.compile traces. Every public
    call runs this, so the CPU path is one attribute read."""
    if tensor.is_cuda and not torch.compiler.is_compiling():
        _loader.check_device_arch(tensor.get_device())
