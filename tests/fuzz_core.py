"""The fuzzing's format, oracle and family registry (driven by tests/fuzz_worker.py, run by tests/test_fuzz.py).

Each op module's family lives at the end of its test file, tests/ops/test_<module>.py (what two families share in
the test-side family homes tests/ops/_rois.py and tests/ops/_boxes.py): `FUZZ = family(name, fns, ...)((strategy,
run))`, a hypothesis strategy drawing cases for every public name of the module's __all__ and the runner that makes
the call and judges it against the float64 reference, and `FUZZ_KNOWN_BUGS` (optional), the bugs the fuzzing found
that are not fixed yet (KnownBug). `families()` collects them by those names.

A fuzz case is a JSON-able dict drawn by a family's hypothesis strategy: which public function or module it calls
(`fn`), every shape, dtype, layout and device of its tensor arguments, every non-tensor argument, an optional
`bad` mutation that makes the call invalid, and `seed`, from which the tensor values are drawn (torch.Generator).
The dict alone replays the call: `python tests/fuzz_worker.py --replay '<case>'`.

Oracle (`Run.outcome`): each case has an expectation, `ok` (a valid call: it must succeed and match the float64
reference), `error` (an invalid call: it must raise a clear error) or `either` (mixed dtypes or devices, borderline
shapes: an error must be clear, a result must match the reference). A *clear error* (`check_clear`) is
- an exception of type TypeError, ValueError, RuntimeError, IndexError or NotImplementedError (the library's own
  ArgumentError / ShapeError are ValueError / RuntimeError subclasses; a bare AssertionError, a SystemError, a
  KeyError ... are not);
- whose message names the call: the public function, the module class or a registered op of the family, or one of
  the call's argument names (only distinctive ones: `rois`, `bboxes1`, `sampling_locations`, ..., not `input` or
  `value`), as a whole word;
- and holds none of the markers of a failure below the API (`CUDA error`, `invalid configuration`, `INTERNAL
  ASSERT`, `illegal memory access`, `device-side assert`, ...).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .integer_edge_harness import message_names

# Outcomes of the calls of the current case (the worker sums them per family): "returned" and "raised".
STATS: Counter = Counter()
# fuzz_worker.py --verbose: every error a call raises goes to stderr (to see what the fuzz reaches).
VERBOSE = False

DTYPES = {
    "f32": torch.float32,
    "f64": torch.float64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i32": torch.int32,
    "i64": torch.int64,
    "i16": torch.int16,
    "u8": torch.uint8,
    "bool": torch.bool,
    "c64": torch.complex64,
}
FLOATS = ("f32", "f64", "f16", "bf16")
NON_FLOATS = ("i32", "i64", "bool", "c64")
# Scale-relative tolerance of a result computed from inputs of this dtype (the worst dtype of a call counts).
TOLERANCE = {"f64": 1e-7, "f32": 1e-4, "f16": 2e-2, "bf16": 6e-2}
# Layouts of a tensor argument: contiguous, transposed (last two dims), permuted (dim 0 last), sliced (every other
# element of a wider tensor, with a storage offset; the gaps hold NaN), channels_last (4-D), expanded (stride 0).
LAYOUTS = ("c", "t", "p", "s", "cl", "e")

ALLOWED_ERRORS = (TypeError, ValueError, RuntimeError, IndexError, NotImplementedError)
BAD_MARKERS = (
    "CUDA error",
    "cudaError",
    "invalid configuration",
    "INTERNAL ASSERT",
    "illegal memory access",
    "device-side assert",
    "Please report a bug",
    "unspecified launch failure",
    "CUBLAS_STATUS",
    "misaligned address",
)
# Argument names too common in torch's own messages to count as naming the call.
GENERIC_WORDS = {
    *("input", "value", "weight", "mask", "target", "offset", "bias", "output", "features", "x", "query"),
    *("key", "identity"),  # a transformer layer's forward arguments: words any message may use
}


class Mismatch(AssertionError):
    """A fuzz finding: a wrong result, an unclear error, an accepted invalid call."""


def check_clear(exc: BaseException, names: set[str], args: set[str], any_message: bool = False) -> None:
    """Raises Mismatch unless exc is a clear error (module docstring) for a call named by `names` with argument
    names `args`. any_message: a pure-PyTorch function (mmcv's grid_sample formulation of an op), whose errors
    are torch's own: only the type and the markers are checked."""
    message = str(exc)
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    if not isinstance(exc, ALLOWED_ERRORS):
        raise Mismatch(f"unclear error: {kind} is not a TypeError/ValueError/RuntimeError/IndexError: {message[:300]}")
    for marker in BAD_MARKERS:
        if marker in message:
            raise Mismatch(f"unclear error: {kind} with {marker!r}: {message[:300]}")
    if not message.strip():
        raise Mismatch(f"unclear error: {kind} with an empty message")
    if any_message:
        return
    named = any(message_names(message, n) for n in names)
    named = named or any(message_names(message, a) for a in args if a not in GENERIC_WORDS)
    if not named:
        raise Mismatch(
            f"unclear error: {kind} names neither the call ({sorted(names)}) nor a distinctive argument "
            f"({sorted(a for a in args if a not in GENERIC_WORDS)}): {message[:300]}"
        )


def cast(base: torch.Tensor, dt: str) -> torch.Tensor:
    """base (float64 values) in dtype dt; integer dtypes get the rounded values, bool base > 0."""
    dtype = DTYPES[dt]
    if dtype == torch.bool:
        return base > 0
    if not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        return base.nan_to_num(0.0).round().clamp(info.min, info.max).to(dtype)
    return base.to(dtype)


class Arg:
    """A tensor argument: `leaf` (what gradients land on, on its device) and `view(leaf)` (the argument, in the
    drawn layout). `ref()` gives the same view of a float64 CPU copy of the leaf: the reference sees exactly the
    values the call sees."""

    def __init__(self, base: torch.Tensor, dt: str, layout: str, device: str = "cpu", expand_dim: int = 0):
        self.dt, self.layout, self.device = dt, layout, device
        self.shape = tuple(base.shape)
        shape, nd = self.shape, base.dim()
        if layout == "t" and nd >= 2:
            leaf, self._view = cast(base.transpose(-1, -2).contiguous(), dt), lambda t: t.transpose(-1, -2)
        elif layout == "p" and nd >= 2:
            leaf, self._view = cast(base.movedim(0, -1).contiguous(), dt), lambda t: t.movedim(-1, 0)
        elif layout == "s" and nd >= 1:
            wide = torch.full((*shape[:-1], 2 * shape[-1] + 1), math.nan, dtype=torch.float64)
            wide[..., 1::2] = base
            leaf, self._view = cast(wide, dt), lambda t: t[..., 1::2]
        elif layout == "cl" and nd == 4:
            leaf, self._view = cast(base, dt).contiguous(memory_format=torch.channels_last), lambda t: t
        elif layout == "e" and nd >= 1:
            d = expand_dim % nd
            small = base.narrow(d, 0, 1) if shape[d] > 0 else torch.zeros((*shape[:d], 1, *shape[d + 1 :]))
            leaf, self._view = cast(small.contiguous(), dt), lambda t: t.expand(shape)
        else:
            leaf, self._view = cast(base, dt).contiguous(), lambda t: t
        self.leaf = leaf.to(device)

    @property
    def floating(self) -> bool:
        return self.leaf.is_floating_point()

    def x(self, grad: bool = False) -> torch.Tensor:
        if grad and self.floating:
            self.leaf.requires_grad_(True)
        return self._view(self.leaf)

    def ref(self, grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(float64 leaf, its view): the reference's input. Complex and bool leaves go through float64 too."""
        leaf = self.leaf.detach().cpu()
        leaf = (leaf.real if leaf.is_complex() else leaf).to(torch.float64)
        if grad:
            leaf.requires_grad_(True)
        return leaf, self._view(leaf)

    def r(self) -> torch.Tensor:
        return self.ref()[1]

    def grad(self) -> torch.Tensor | None:
        return self.leaf.grad


def worst(*dts: str) -> str:
    """The least precise float dtype among dts (the tolerance of a result computed from them)."""
    floats = [d for d in dts if d in TOLERANCE] or ["f64"]
    return max(floats, key=lambda d: TOLERANCE[d])


def assert_close(what: str, got, want, dt: str, scale: float | None = None, tol: float | None = None) -> None:
    """got ~ want within TOLERANCE[dt] (or tol) of max(1, max |want|) (or scale); NaN and infinities in the same
    places."""
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what}: got a {type(got).__name__}, not a Tensor")
    got = got.detach().cpu()
    got = (got.real if got.is_complex() else got).to(torch.float64)
    want = want.detach().cpu().to(torch.float64)
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(f"{what}: shape {list(got.shape)}, the reference's is {list(want.shape)}")
    if got.numel() == 0:
        return
    gnan, wnan = got.isnan(), want.isnan()
    if not torch.equal(gnan, wnan):
        raise Mismatch(f"{what}: NaN in {int(gnan.sum())} places, the reference in {int(wnan.sum())}")
    finite = torch.isfinite(want)
    winf = want.isinf()
    if not torch.equal(got[winf], want[winf]) or not torch.isfinite(got[finite]).all():
        raise Mismatch(f"{what}: infinities differ from the reference's")
    if not finite.any():
        return
    if scale is None:
        scale = max(1.0, want[finite].abs().max().item())
    tol = TOLERANCE[dt] if tol is None else tol
    err = (got[finite] - want[finite]).abs().max().item()
    if not err <= tol * scale:
        raise Mismatch(f"{what}: max error {err:.3g} > {tol:g} * {scale:.3g} ({dt})")


def dumps(case: dict) -> str:
    return json.dumps(case, sort_keys=True, separators=(",", ":"))


class Run:
    """One case's call: its expectation, the names a clear error may use, its random generator and device."""

    def __init__(self, case: dict, names: set[str], args: set[str]):
        self.case = case
        self.expect = case.get("expect", "ok")
        self.names = set(names)
        self.args = set(args)
        self.gen = torch.Generator().manual_seed(int(case["seed"]))
        self.any_message = False
        # Replaces the check of a call whose bad values go unchecked on CUDA (unchecked_values): what it must
        # give instead (NaN rows).
        self.unchecked_check = None
        self.device = case.get("device", "cpu")  # the case's device (its tensors' own may differ: mixed devices)
        # The grad mode the calls run in (the worker draws it for every case): "grad" (and backward), "no_grad" or
        # "inference" (torch.inference_mode: forward only).
        self.mode = case.get("grad_mode", "grad")

    @property
    def grads(self) -> bool:
        """Whether the case runs the backward too."""
        return self.mode == "grad"

    @property
    def unchecked_values(self) -> bool:
        """Whether the call runs on CUDA without VISDET_OPS_SYNC_CHECKS: tensor values (RoIs, targets, level tables
        on the GPU) are then not checked on the host, and a bad one gives NaN instead of an error (documented)."""
        return self.device != "cpu" and not self.case.get("sync")

    @contextlib.contextmanager
    def context(self):
        """The case's grad mode, and on CUDA its VISDET_OPS_SYNC_CHECKS (the worker draws both)."""
        grad_mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode}.get(self.mode, contextlib.nullcontext)
        saved = os.environ.get("VISDET_OPS_SYNC_CHECKS")
        if self.case.get("sync"):
            os.environ["VISDET_OPS_SYNC_CHECKS"] = "1"
        try:
            with grad_mode():
                yield
        finally:
            if saved is None:
                os.environ.pop("VISDET_OPS_SYNC_CHECKS", None)
            else:
                os.environ["VISDET_OPS_SYNC_CHECKS"] = saved

    # ------------------------------------------------------------- values

    def rand(self, *shape) -> torch.Tensor:
        return torch.rand(shape, generator=self.gen, dtype=torch.float64)

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, dtype=torch.float64)

    def randint(self, lo: int, hi: int, *shape) -> torch.Tensor:
        return torch.randint(lo, hi, shape, generator=self.gen).to(torch.float64)

    def arg(self, name: str, base: torch.Tensor) -> Arg:
        """base as the tensor argument `name`, in the case's drawn dtype/layout/device for it."""
        opts = self.case["t"][name]
        return Arg(base, opts["dt"], opts["lay"], opts.get("dev", "cpu"), opts.get("ed", 0))

    # ------------------------------------------------------------- the oracle

    def construct(self, call, check=None, expect: str | None = None):
        """outcome() for a module's constructor: outside the case's grad mode (parameters made in inference mode
        would be inference tensors)."""
        mode, self.mode = self.mode, "grad"
        try:
            return self.outcome(call, check, expect)
        finally:
            self.mode = mode

    def outcome(self, call, check=None, expect: str | None = None):
        """Runs call(); an exception must be a clear error (and the case not a valid one); a result must come from
        a case that may succeed, and then passes check(result). Returns the result, or None after an error.
        expect: this call's expectation where it is not the case's (a module's constructor, then its forward)."""
        expect = expect or self.expect
        try:
            with self.context():
                got = call()
        except Mismatch:
            raise
        except Exception as exc:  # noqa: BLE001 - every exception is judged here
            STATS["raised"] += 1
            if VERBOSE:
                print(f"  [{expect}/{self.case.get('bad')}] {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
            check_clear(exc, self.names, self.args, self.any_message)
            if expect == "ok":
                raise Mismatch(f"a valid call raised {type(exc).__name__}: {str(exc)[:400]}") from exc
            return None
        STATS["returned"] += 1
        if self.mode != "grad" and isinstance(got, torch.Tensor) and got.requires_grad:
            raise Mismatch(f"the output of a call in {self.mode} mode requires grad")
        if expect == "error":
            raise Mismatch(f"an invalid call ({self.case.get('bad')}) was accepted: {describe(got)}")
        if check is not None:
            (self.unchecked_check or check)(got)
        return got

    def backward(self, out: torch.Tensor, grad: torch.Tensor) -> None:
        """out.backward(grad): any exception there is a finding (its forward succeeded)."""
        try:
            out.backward(grad)
        except Exception as exc:  # noqa: BLE001
            raise Mismatch(f"backward raised {type(exc).__name__}: {str(exc)[:400]}") from exc


def describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor{list(x.shape)} {x.dtype}"
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(describe(t) for t in x[:4]) + (", ..." if len(x) > 4 else "") + ")"
    return type(x).__name__


def grad_tol(dt: str) -> float:
    return {"f64": 1e-7, "f32": 1e-3}.get(dt, 1e-1)


def check_grads(pairs, dt: str, check_values: bool = True) -> None:
    """pairs: (name, Arg, reference float64 leaf). Each arg's gradient must exist (when the reference has one),
    have its leaf's shape and dtype, and (check_values, float32/float64) match the reference's."""
    for name, arg, rleaf in pairs:
        g, w = arg.grad(), rleaf.grad
        if w is None:
            continue
        if g is None:
            if torch.count_nonzero(w) == 0:
                continue
            raise Mismatch(f"grad of {name}: none, the reference's is nonzero")
        if g.shape != arg.leaf.shape or g.dtype != arg.leaf.dtype:
            raise Mismatch(
                f"grad of {name}: {list(g.shape)} {g.dtype} for a leaf {list(arg.leaf.shape)} {arg.leaf.dtype}"
            )
        # Gradients are compared with the reference in float64 and float32 only (16-bit ones are checked for shape,
        # dtype and finiteness).
        if check_values and dt in ("f64", "f32"):
            assert_close(f"grad of {name}", g, w, dt, tol=grad_tol(dt))
        elif not torch.isfinite(g).all() and torch.isfinite(w).all():
            raise Mismatch(f"grad of {name}: non-finite values, the reference's are finite")


# ----------------------------------------------------------------- strategy helpers

from hypothesis import strategies as st  # noqa: E402


def one_in(n: int):
    """True about once in n draws; shrinks to False."""
    return st.integers(0, n - 1).map(lambda i: i == n - 1)


def draw_tensors(draw, args: dict[str, int], main: str, device: str, floating=None, layouts=None) -> tuple[dict, bool]:
    """Options for each tensor argument (name -> its number of dims): dtype (the main float dtype; now and then
    another: a mixed-dtype call), layout (LAYOUTS that fit its dims, or `layouts[name]`), expanded dim, device
    (on CUDA now and then the CPU: a mixed-device call). `floating`: the names that take floats (default all; the
    others keep dtype i64). Returns (options, whether dtypes or devices are mixed)."""
    floating = set(args) if floating is None else set(floating)
    layouts = layouts or {}
    opts, mixed = {}, False
    for name, nd in args.items():
        if name in floating:
            dt = main
            if draw(one_in(8)):
                dt = draw(st.sampled_from([d for d in FLOATS if d != main]))
                mixed = True
        else:
            dt = "i64"
        allowed = layouts.get(name, LAYOUTS)
        allowed = [lay for lay in allowed if (lay != "cl" or nd == 4) and (lay not in ("t", "p") or nd >= 2)]
        lay = draw(st.sampled_from(["c", *[lay for lay in allowed if lay != "c"]]))
        o = {"dt": dt, "lay": lay}
        if lay == "e":
            o["ed"] = draw(st.integers(0, max(nd - 1, 0)))
        if device != "cpu":
            o["dev"] = device
            if draw(one_in(10)):
                o["dev"] = "cpu"
                mixed = True
        opts[name] = o
    return opts, mixed


def bad_int():
    """An integer argument far outside any range (or not an integer at all)."""
    return st.sampled_from([-1, 0, 2**31, 2**63 - 1, -(2**63), 2**40, 1.5, "2"])


def grid_boxes(run: Run, n: int, span: float = 96.0, size: float = 30.0) -> torch.Tensor:
    """n boxes (x1, y1, x2, y2) on a 1/8-pixel grid (exact in float16; IoU terms exact in float32)."""
    xy = (run.rand(n, 2) * span * 8).round() / 8
    wh = ((run.rand(n, 2) * size + 0.5) * 8).round() / 8
    return torch.cat([xy, xy + wh], 1)


def f32_scores(run: Run, n: int, ties: bool = False) -> torch.Tensor:
    """Scores exact in float32 (a float32 run sorts what the float64 reference sorts); ties: few distinct values."""
    if ties:
        return (run.rand(n) * 4).floor() / 4
    return run.rand(n).float().double()


# ----------------------------------------------------------------- families


@dataclass(frozen=True)
class Family:
    name: str  # the op module: visdet_ops/ops/<name>.py
    fns: tuple[str, ...]  # the public names its cases call (must cover the module's __all__)
    strategy: Callable  # strategy(device) -> a hypothesis strategy of cases
    run: Callable  # run(case) -> None, raising Mismatch on a finding
    ops: tuple[str, ...] = ()  # registered op names its errors may name
    weight: float = 1.0  # share of the example budget (slow references get less)


# Every family declared so far (family() fills it as the test modules are imported; families() imports them).
FAMILIES: dict[str, Family] = {}


def _numpy_works() -> bool:
    """NumPy in and out (the NMS family's mmcv behaviour) is drawn only where torch can use NumPy: the package needs
    torch only, and a venv without numpy, or with one torch was not built against, must not fail the fuzz."""
    try:
        import numpy  # noqa: F401

        torch.zeros(1).numpy()
    except Exception:
        return False
    return True


HAS_NUMPY = _numpy_works()


def family(name: str, fns, ops=(), weight: float = 1.0):
    def register(pair):
        strategy, run = pair
        FAMILIES[name] = Family(name, tuple(fns), strategy, run, tuple(ops) or (name,), weight)
        return FAMILIES[name]

    return register


def expectation(bad, mixed: bool, borderline: bool = False) -> str:
    if bad:
        return "error"
    return "either" if mixed or borderline else "ok"


def size(draw, lo: int, hi: int) -> int:
    """A size in [lo, hi], or 0 about one time in eight."""
    return 0 if draw(one_in(8)) else draw(st.integers(lo, hi))


def pick_bad(draw, mutations) -> str | None:
    """A mutation about one case in four (None shrinks first: a failing invalid case shrinks to a valid one
    when that fails too)."""
    if not mutations or not draw(one_in(4)):
        return None
    return draw(st.sampled_from(list(mutations)))


@functools.cache
def public_parameters(fam: str) -> frozenset[str]:
    """Every parameter name of the family's public names, from their signatures: a function's, a class's own
    __init__, forward and apply (mmcv's autograd Function names), and the old keyword names a renamed_kwargs
    wrapper still takes (mmcv's out_size, ...). Read once per family: every case's Run asks for it."""
    import importlib

    import visdet_ops

    module = importlib.import_module(f"visdet_ops.ops.{fam}")
    found: set[str] = set()
    for name in FAMILIES[fam].fns:
        obj = getattr(module, name, None) or getattr(visdet_ops, name)
        if isinstance(obj, type):  # the methods the package defines: __init__, forward, a Function's apply
            own = [vars(k) for k in obj.__mro__ if k.__module__.startswith("visdet_ops")]
            targets = [next((d[m] for d in own if m in d), None) for m in ("__init__", "forward", "apply")]
            targets = [getattr(f, "__func__", f) for f in targets if f is not None]
        else:
            targets = [obj]
        for target in targets:
            found.update(getattr(target, "renamed_kwargs", {}))
            for p in inspect.signature(target).parameters.values():
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "ctx"):
                    found.add(p.name)
    return frozenset(found)


def family_run(case: dict, fam: str, *extra_args: str) -> Run:
    """The Run of a case of family `fam`: a clear error names the call (the case's public name, any public name or
    registered op of the family) or one of its arguments (public_parameters, and `extra_args`: the keys of a
    config dict argument, or an old keyword name read from **kwargs, which no signature shows)."""
    family = FAMILIES[fam]
    return Run(case, {case["fn"], *family.fns, *family.ops}, public_parameters(fam) | set(extra_args))


def rand_grad(run: Run, out: torch.Tensor) -> torch.Tensor:
    return run.randn(*out.shape).to(out.dtype).to(out.device)


def backward_both(run: Run, out: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """A random gradient of `out`, backpropagated through the call (run.backward) and through the reference."""
    grad = rand_grad(run, out)
    run.backward(out, grad)
    ref_backward(want, grad)
    return grad


def ref_backward(want: torch.Tensor, grad: torch.Tensor) -> None:
    """The reference's backward (a reference output built of constants alone, e.g. only empty bins, has none)."""
    if want.requires_grad:
        want.backward(grad.detach().cpu().double())


def out_dtype_ok(got: torch.Tensor, dt: str, mixed: bool, what: str = "output") -> None:
    if not mixed and got.dtype != DTYPES[dt]:
        raise Mismatch(f"{what} dtype {got.dtype}, the input's is {DTYPES[dt]}")


def pair_or_int(draw, lo, hi):
    a = draw(st.integers(lo, hi))
    if draw(st.booleans()):
        return a
    return [a, draw(st.integers(lo, hi))]


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_out(size, pad, dil, k, stride):
    return (size + 2 * pad - (dil * (k - 1) + 1)) // stride + 1


def uniform(case: dict, main: str, device: str) -> None:
    """Every tensor of the case in the main dtype on the device (a module's call: its parameters decide both)."""
    for o in case["t"].values():
        o["dt"] = main
        if device != "cpu":
            o["dev"] = device


def on_gpu(case: dict, name: str) -> bool:
    return case["t"][name].get("dev", "cpu") != "cpu"


@dataclass(frozen=True)
class KnownBug:
    """A bug the fuzzing found, not fixed yet (a test file's FUZZ_KNOWN_BUGS). `matches(case)` picks the cases it
    spoils; skip: do not run them (a crash or a hang), else run them and let them fail. `repro` is a minimal
    reproducer (Python source, run by `fuzz_worker.py --known-bug <name>`), which must raise or crash while the bug
    is there."""

    name: str
    family: str
    reason: str
    repro: str
    matches: Callable[[dict], bool] = field(compare=False)
    skip: bool = False

    def reproduce(self) -> None:
        import visdet_ops

        exec(compile(self.repro, f"<known bug {self.name}>", "exec"), {"torch": torch, "visdet_ops": visdet_ops})


def families(names=None) -> tuple[dict[str, Family], list[KnownBug]]:
    """The FUZZ family and FUZZ_KNOWN_BUGS of each op module's test file (of `names` only, when given), imported as
    pytest names it: tests.ops.test_<module>. A module whose test file declares no FUZZ is missing from the dict
    (test_every_public_name_is_fuzzed names it)."""
    from .conftest import op_modules, op_test_module

    found, bugs = {}, []
    for module in op_modules() if names is None else names:
        tests = op_test_module(module)
        if hasattr(tests, "FUZZ"):
            found[module] = tests.FUZZ
        bugs += getattr(tests, "FUZZ_KNOWN_BUGS", [])
    return found, bugs
