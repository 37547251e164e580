"""Memory per call of every registered op (tests/test_memory.py runs this in a fresh process).

    python tests/memory_worker.py --device cpu [--calls 20000] [--seconds 0.5] [--ops visdet_ops::<op> ...]

The calls are the ones each op module's example case makes (visdet_ops.ops.EXAMPLES, float32), captured below
autograd by a TorchDispatchMode: the op's own arguments, str ones included, replayed through the dispatcher as a
user's call reaches it. Per op: warm-up calls, then three windows of up to `--calls` calls each (fewer where they
would take more than `--seconds`, but at least MIN_CALLS), each between two readings of
- host RSS (/proc/self/statm), what a user's monitoring sees;
- glibc's bytes in use (mallinfo2: every live malloc block, to the byte), where the C library has it;
- torch.cuda.memory_allocated() on CUDA (every live tensor of the caching allocator, to the byte).
The growth per op is the smallest of its three windows' (measure() says why). Prints one JSON object:
{"ops": {qualname: {...}}, "str_ops": [...]} (an op missing from "ops" was called by no example case).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import visdet_ops  # noqa: F401  (loads _C: registers every op)
from visdet_ops import _loader
from visdet_ops.ops import EXAMPLES

PAGE = os.sysconf("SC_PAGE_SIZE")
MIN_CALLS = 500
# Public training calls (--public) are up to 100 times an op call's cost (a whole forward and backward through
# autograd); 200 still shows a leak of a byte a call in glibc's bytes in use.
MIN_PUBLIC_CALLS = 200


def str_ops() -> list[str]:
    """Every registered op with a str argument, read from its schema."""
    found = []
    for qualname in _loader.op_names():
        packet = getattr(torch.ops.visdet_ops, qualname.split("::")[1])
        for overload in packet.overloads():
            schema = getattr(packet, overload)._schema
            if any(isinstance(a.type, torch._C.StringType) for a in schema.arguments):
                found.append(qualname)
                break
    return found


class _Capture(TorchDispatchMode):
    """The first call of each visdet_ops op, with its arguments detached (replayed below autograd)."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, tuple] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "visdet_ops":
            qualname = f"visdet_ops::{func._schema.name.split('::')[1]}"
            if qualname not in self.calls:

                def keep(x):
                    return x.detach().clone() if isinstance(x, torch.Tensor) else x

                self.calls[qualname] = (func, tree_map(keep, args), tree_map(keep, kwargs))
        return func(*args, **kwargs)


def _run_examples(device: torch.device) -> None:
    gen = torch.Generator().manual_seed(0)
    for example in EXAMPLES.values():
        error = example.run(device, torch.float32, gen)
        if error is not None:
            raise SystemExit(f"{example.family} example failed on {device}: {error}")


def capture(device: torch.device) -> dict[str, tuple]:
    mode = _Capture()
    with mode:
        _run_examples(device)
    return mode.calls


def _public_functions() -> list[tuple[object, str]]:
    """(module, name) of every public function of the op modules (classes call these)."""
    import inspect
    import pkgutil

    from visdet_ops import ops

    found = []
    for info in pkgutil.iter_modules(ops.__path__):
        if info.name.startswith("_"):
            continue
        module = __import__(f"visdet_ops.ops.{info.name}", fromlist=["__all__"])
        found += [(module, name) for name in module.__all__ if inspect.isfunction(getattr(module, name))]
    return found


def _fresh(x):
    """A new leaf per call (fresh .grad, as after zero_grad(set_to_none=True)) on the captured data."""
    if isinstance(x, torch.Tensor):
        return x.detach().requires_grad_(x.requires_grad)
    return x


def capture_public(device: torch.device) -> dict[str, tuple]:
    """Of each public function (by module.name), the smallest call with no empty tensor that the example cases make
    (fewest elements: the most calls in the time), as a user makes it: through the Python wrapper, with autograd.
    Replayed by public_call()."""
    calls: dict[str, tuple] = {}
    sizes: dict[str, int] = {}
    originals = [(module, name, getattr(module, name)) for module, name in _public_functions()]

    def recorder(module, name, fn):
        def record(*args, **kwargs):
            out = fn(*args, **kwargs)
            key = f"{module.__name__.rsplit('.', 1)[1]}.{name}"
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            size = sum(t.numel() for t in tensors)
            if tensors and all(t.numel() > 0 for t in tensors) and size < sizes.get(key, size + 1):

                def keep(x):
                    if isinstance(x, torch.Tensor):
                        return x.detach().clone().requires_grad_(x.requires_grad and x.is_floating_point())
                    return x

                calls[key] = (fn, tree_map(keep, args), tree_map(keep, kwargs))
                sizes[key] = size
            return out

        return record

    for module, name, fn in originals:
        setattr(module, name, recorder(module, name, fn))
    try:
        _run_examples(device)
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)
    return calls


def public_call(call: tuple):
    """One training call of a captured public call: fresh leaves, the function, then backward of the sum of its
    floating outputs that require grad (where any does)."""
    fn, args, kwargs = call

    def run():
        out = fn(*tree_map(_fresh, args), **tree_map(_fresh, kwargs))
        grads = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
        if grads:
            sum(o.sum() for o in grads).backward()

    return run, (), {}


def _mallinfo2():
    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                "keepcost",
            )
        ]  # fmt: skip

    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    fn.restype = MallInfo2
    return fn


MALLINFO2 = _mallinfo2()


def reading(device: torch.device) -> dict[str, int | None]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    gc.collect()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    heap = None
    if MALLINFO2 is not None:
        info = MALLINFO2()
        heap = info.uordblks + info.hblkhd
    cuda = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
    return {"rss": rss, "heap": heap, "cuda": cuda}


WINDOWS = 3


def _window(func, args, kwargs, device: torch.device, calls: int) -> dict[str, int | None]:
    before = reading(device)
    for _ in range(calls):
        func(*args, **kwargs)
    after = reading(device)
    return {k: (None if before[k] is None else after[k] - before[k]) for k in before}


def measure(call: tuple, device: torch.device, max_calls: int, seconds: float, min_calls: int = MIN_CALLS) -> dict:
    """Calls the op at most max_calls times, fewer where that would take longer than `seconds` (the bytes-in-use
    reading is exact, so a few hundred calls show a leak of a byte a call), after a quarter as many warm-up calls;
    WINDOWS times. The growth reported is the smallest of the windows': a leak grows memory in every one, while a
    one-off allocation that outlives the warm-up (a cache filled once, as seen on CUDA: 3 KB once in a thousand calls
    of _deform_roi_pool_backward; 1-3 KB in each of two 200-call windows of public DCN calls, run 22) falls in some
    windows only."""
    func, args, kwargs = call
    func(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(10):
        func(*args, **kwargs)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    per_call = (time.perf_counter() - started) / 10
    calls = max(min_calls, min(max_calls, int(seconds / max(per_call, 1e-9))))
    for _ in range(max(calls // 4, 50)):
        func(*args, **kwargs)
    started = time.perf_counter()
    windows = [_window(func, args, kwargs, device, calls) for _ in range(WINDOWS)]
    took = time.perf_counter() - started
    growth = {k: (None if windows[0][k] is None else min(w[k] for w in windows)) for k in windows[0]}
    return {
        "calls": calls,
        "seconds": took,
        "windows": windows,
        **{f"{k}_growth": v for k, v in growth.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--calls", type=int, default=20000, help="calls per op, at most")
    parser.add_argument("--seconds", type=float, default=0.5, help="time per op, about (at least MIN_CALLS calls)")
    parser.add_argument("--ops", nargs="*", help="qualnames (default: every captured op)")
    parser.add_argument(
        "--public",
        action="store_true",
        help="measure each public function's training call (wrapper + autograd: forward and backward) instead",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    if args.public:
        captured = capture_public(device)
        functions = sorted(f"{m.__name__.rsplit('.', 1)[1]}.{n}" for m, n in _public_functions())
        wanted = args.ops or sorted(captured)
        results = {
            k: measure(public_call(captured[k]), device, args.calls, args.seconds, MIN_PUBLIC_CALLS) for k in wanted
        }
        print(json.dumps({"ops": results, "functions": functions}))
        return
    captured = capture(device)  # with autograd: the examples' backward calls the backward ops
    wanted = args.ops or sorted(captured)
    results = {q: measure(captured[q], device, args.calls, args.seconds) for q in wanted if q in captured}
    print(json.dumps({"ops": results, "str_ops": str_ops()}))


if __name__ == "__main__":
    sys.exit(main())
