"""Integer edge values for every integer argument of every op and module (issue 12, item 5): the harness. Each
op's rows live in its test file, tests/ops/test_<module>.py, as `INTEGER_EDGE_ROWS`, run by
`test_integer_edge = integer_edge_test(INTEGER_EDGE_ROWS)`.

One row per (op or module, integer argument): a small valid call with that argument replaced by the value under
test, and the range the argument accepts. Each row is tried with 0, -1, 2^31, 2^40, 2^63 - 1 and the values just
past its bounds. A value in range must give a sane result (compared with the float64 reference); a value out of
range must raise ValueError, TypeError or RuntimeError whose message names the argument: one of the row's names,
as a whole word (`stride` is not named by `stride_h`, nor `output_size` by `pooled_height`).

A row's id is `<entry>-<argument>`. A public entry point's row (a function or module of visdet_ops) names the
argument as the user wrote it: `<argument>` is a parameter of `<entry>` (a key of its config dict where the row says
so) and the message must name exactly that, never the op's schema name. A registered op's row (`op.<op>-...`,
direct torch.ops.visdet_ops calls) names the schema's argument (pooled_height, pad_w, ...) or the public pair it is
one side of (`names`).
tests/test_integer_edges.py checks that every integer parameter of every public entry point has its row and that
each public row names its parameter.

Every case runs in a worker subprocess (one per device, reused across cases and test files, restarted after a
hang or a crash) with its own timeout, so a runaway kernel or a crash fails that case instead of stalling or
killing the suite. The worker imports the case's test module by name and runs the case registered under its id.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from visdet_ops.ops import _args

VALUES = (0, -1, 2**31, 2**40, 2**63 - 1)
CASE_TIMEOUT_S = 20.0
STARTUP_TIMEOUT_S = 120.0
ANY = (_args.INT64_MIN, _args.INT64_MAX)


@dataclass(frozen=True)
class Row:
    id: str
    names: tuple[str, ...]  # the error message must name one of these (as a whole word)
    bounds: tuple[int, int]
    call: Callable  # call(device, value, gen): runs the op, asserts a sane result
    at_bound: tuple[int, ...] = ()  # in-range values also tried (cheap ones only)
    valid: Callable[[int], bool] = lambda v: True  # further rule inside the bounds

    def values(self) -> list[int]:
        lo, hi = self.bounds
        vals = list(VALUES) + list(self.at_bound)
        if hi < _args.INT64_MAX:
            vals.append(hi + 1)
        if lo > _args.INT64_MIN:
            vals.append(lo - 1)
        return sorted(set(vals))

    def accepts(self, v: int) -> bool:
        return self.bounds[0] <= v <= self.bounds[1] and self.valid(v)


def small(v: int, lo: int, hi: int, default: int) -> int:
    """v where it is a size a test input can have, else a stand-in (the call
    then fails on v's range check before the shape matters)."""
    return v if lo <= v <= hi else default


def close(got, want, **kw):
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-9, atol=1e-10, **kw)


# A registered op's integer arguments that stand for one side of a public pair argument: the op's own check names
# the pair for a value below the range (`<op>: padding must be >= 0, got (1, -1)`, `<op>: output_size must be
# positive, got (0, 3)`), the schema's argument for one above (`pad_w must be in [0, 65536]`).
_PAIR_OF_SCHEMA_ARGUMENT = dict(
    pooled_height="output_size",
    pooled_width="output_size",
    pad_h="padding",
    pad_w="padding",
    stride_h="stride",
    stride_w="stride",
    dilation_h="dilation",
    dilation_w="dilation",
)


def names(arg: str) -> tuple[str, ...]:
    """The names an error about `arg` may use. A public function's or module's argument: `arg` itself, nothing
    else (tests/test_integer_edges.py checks that every public row says so). A registered op's schema argument
    (`op.*` rows, direct torch.ops calls): itself, or the public pair it is one side of."""
    pair = _PAIR_OF_SCHEMA_ARGUMENT.get(arg)
    return (arg,) if pair is None else (arg, pair)


def message_names(message: str, name: str) -> bool:
    """Whether message names the argument `name` as a whole word (also as `name[i]`): `stride_h` does not name
    `stride`, `pooled_height` does not name `output_size`."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message) is not None


def kw_row(id_, arg, bounds, fn, **extra):
    """The row of `arg`, run as fn(device, gen, **{arg: value})."""
    return Row(id_, names(arg), bounds, lambda d, v, g: fn(d, g, **{arg: v}), **extra)


# ---------------------------------------------------------------- the whole messages (each test file's own cases)


def public_message_test(cases: list[tuple[Callable, str]]):
    """The test of a family's public functions' whole messages, in the user's words (issue 25: the op's check named
    pad_w and pooled_height), each case a call(device) and its exact message: an OpArgumentError, a RuntimeError as
    the op's own check raises, a ValueError and an AssertionError as the constructors' (mmcv asserts). Assign it to
    `test_public_functions_name_the_users_argument` in the cases' test file."""

    @pytest.mark.parametrize("case", range(len(cases)))
    def test_public_functions_name_the_users_argument(device, case):
        call, message = cases[case]
        with pytest.raises(_args.OpArgumentError) as info:
            call(device)
        assert str(info.value) == message
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
        assert isinstance(info.value, AssertionError)

    return test_public_functions_name_the_users_argument


def assert_module_message(make: Callable, message: str) -> None:
    """A constructor's error: the class name and the argument as written, an ArgumentError (a ValueError, not a
    RuntimeError)."""
    with pytest.raises(_args.ArgumentError) as info:
        make()
    assert message in str(info.value) and not isinstance(info.value, RuntimeError), str(info.value)


def assert_fake_rejects(call: Callable, match: str) -> None:
    """torch.compile sees the fake impls: call(), run under FakeTensorMode (its tensors made there), raises what the
    op's own check raises."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(RuntimeError, match=match):
        call()


# ---------------------------------------------------------------- inputs several ops' rows share


def roi_inputs(device, gen, c=3, h=8, w=8):
    """A [2, c, h, w] float64 map and two RoIs inside it (the RoI ops' rows)."""
    x = torch.rand(2, c, h, w, generator=gen, dtype=torch.float64)
    base = torch.tensor([[0, 1.0, 1.5, 6.0, 7.0], [1, 0.0, 0.0, 8.0, 4.5]], dtype=torch.float64)
    base[:, 1:] += 0.3 * torch.rand(2, 4, generator=gen, dtype=torch.float64)
    return x.to(device), base.to(device)


def boxes(device, gen, n=30):
    """n float32 boxes in a 30-pixel square, scores and 3 class indices (the box ops' rows)."""
    xy = 20 * torch.rand(n, 2, generator=gen, dtype=torch.float64)
    wh = 1 + 8 * torch.rand(n, 2, generator=gen, dtype=torch.float64)
    b = torch.cat([xy, xy + wh], 1).float()
    scores = torch.rand(n, generator=gen).float()
    idxs = torch.randint(0, 3, (n,), generator=gen)
    return b.to(device), scores.to(device), idxs.to(device)


# ---------------------------------------------------------------- cases and the worker that runs them

# case id -> call(device, value, gen), for the worker: the rows of every imported test module and the cases given
# to register_case
CASES: dict[str, Callable] = {}


def register_case(case_id: str, call: Callable) -> None:
    if case_id in CASES and CASES[case_id] is not call:
        raise RuntimeError(f"integer edge case {case_id!r} is registered twice")
    CASES[case_id] = call


def run_case(case_id: str, device: str, value: int, seed: int) -> None:
    """The worker's entry point: one call, raising what the op raises."""
    CASES[case_id](torch.device(device), value, torch.Generator().manual_seed(seed))


_WORKER = r"""
import importlib, json, os, sys, types
out = sys.stdout
sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
import torch
torch.set_num_threads(1)
harness_name, root = sys.argv[1], sys.argv[2]


def import_test_module(name):
    # The test files form packages only for pytest (no __init__.py): make each parent folder one here.
    parts = name.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [os.path.join(root, *parts[:i])]
            sys.modules[package] = module
    return importlib.import_module(name)


harness = import_test_module(harness_name)
out.write(json.dumps({"ready": True}) + "\n")
out.flush()
for line in sys.stdin:
    message = json.loads(line)
    if isinstance(message, dict):  # {"prepare": [module, device]}: import it and start the device, untimed by a case
        module, device = message["prepare"]
        import_test_module(module)
        x = torch.ones(2, 2, device=device)
        (x @ x).sum().item()  # the device's context and its BLAS handle
        out.write(json.dumps({"prepared": True}) + "\n")
        out.flush()
        continue
    module, case, device, value, seed = message
    try:
        import_test_module(module)  # registers its cases
        harness.run_case(case, device, value, seed)
        result = {"ok": True}
    except BaseException as exc:  # report everything; the parent judges
        # The kind of error it is (a subclass counts: visdet_ops' ArgumentError is a ValueError), else its class.
        kinds = [k.__name__ for k in (ValueError, TypeError, RuntimeError) if isinstance(exc, k)]
        result = {"ok": False, "type": kinds[0] if kinds else type(exc).__name__, "message": str(exc)[:4000]}
    out.write(json.dumps(result) + "\n")
    out.flush()
"""


def _module_root(module_name: str) -> str:
    """The folder that holds the package tree of module_name (the checkout, or ci/scratch.py's copy)."""
    path = Path(sys.modules[module_name].__file__).resolve()
    return str(path.parents[module_name.count(".")])


def pump(stream, lines: queue.Queue) -> None:
    """Every line of a worker's stdout into `lines`, then None (it exited): read with a timeout, a hang shows."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def stderr_tail(stderr) -> str:
    stderr.seek(0)
    return stderr.read()[-3000:]


class _Worker:
    """A persistent interpreter that runs cases one at a time; killed and
    restarted when a case times out or the process dies."""

    proc: subprocess.Popen | None = None  # _start() makes it, its stderr, its lines and its prepared set

    def _start(self) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        # The parent's import path, so the worker imports the same visdet_ops.
        path = os.pathsep.join(p or os.getcwd() for p in sys.path)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", PYTHONPATH=path)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, __name__, _module_root(__name__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
        )
        self.lines: queue.Queue = queue.Queue()
        self.prepared: set[tuple[str, str]] = set()
        threading.Thread(target=pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        ready = self._read(STARTUP_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            raise RuntimeError(f"the case worker did not start: {ready!r}\n{stderr_tail(self.stderr)}")

    def _read(self, timeout: float) -> dict | None:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            return {"timeout": True}
        return None if line is None else json.loads(line)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, module: str, case_id: str, device: str, value: int, seed: int) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        # A case's time limit is for the case: the module's first import and the device's first use (a CUDA
        # context, cuBLAS; seconds, and far more on a loaded machine) come before it, under the startup limit.
        if (module, device) not in self.prepared:
            result = self._send({"prepare": [module, device]}, STARTUP_TIMEOUT_S)
            if not result.get("prepared"):
                return result
            self.prepared.add((module, device))
        return self._send([module, case_id, device, value, seed], CASE_TIMEOUT_S)

    def _send(self, message, timeout: float) -> dict:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        result = self._read(timeout)
        if result is None:  # the worker died: a crash
            rc = self.proc.wait()
            tail = stderr_tail(self.stderr)
            self.proc = None
            return {"crash": rc, "stderr": tail}
        if result.get("timeout"):
            result["timeout_s"] = timeout
            self.kill()
        return result


# One worker per device type for the whole session, ended when the interpreter exits.
_WORKERS: dict[str, _Worker] = {}


@atexit.register
def _kill_workers() -> None:
    for w in _WORKERS.values():
        w.kill()
    _WORKERS.clear()


def seed() -> int:
    replay = os.environ.get("VISDET_OPS_TEST_SEED")
    return int(replay) if replay else int.from_bytes(os.urandom(4), "little")


def run_in_worker(module: str, case_id: str, device: torch.device, value: int, seed: int) -> dict:
    """Runs the case that test module `module` registers as case_id, in the device's worker: {"ok": True},
    {"ok": False, "type", "message"} (what it raised), {"timeout": True} or {"crash": exit status, "stderr": its
    tail}."""
    worker = _WORKERS.setdefault(device.type, _Worker())
    return worker.run(module, case_id, device.type, value, seed)


def integer_edge_test(rows: list[Row]):
    """The test that runs `rows` (each with each of its values, on each device): assign it to a module-level name
    starting with `test_` in the rows' test file."""
    for row in rows:
        register_case(row.id, row.call)
    by_id = {row.id: row for row in rows}
    assert len(by_id) == len(rows), "duplicate row ids"
    params = [pytest.param(row.id, v, id=f"{row.id}={v}") for row in rows for v in row.values()]

    @pytest.mark.parametrize(("row_id", "value"), params)
    def test_integer_edge(request, device, row_id, value):
        row = by_id[row_id]
        case_seed = seed()
        result = run_in_worker(request.module.__name__, row_id, device, value, case_seed)
        where = f"{row_id} = {value} on {device.type} (VISDET_OPS_TEST_SEED={case_seed})"
        if result.get("timeout"):
            pytest.fail(f"{where}: no result within {result['timeout_s']} s (a runaway loop or a hang)")
        if "crash" in result:
            pytest.fail(f"{where}: the process died (exit status {result['crash']})\n{result['stderr']}")
        if row.accepts(value):
            assert result["ok"], f"{where}: a value in range failed: {result['type']}: {result['message']}"
            return
        assert not result["ok"], f"{where}: a value out of range {row.bounds} was accepted"
        assert result["type"] in ("ValueError", "TypeError", "RuntimeError"), (
            f"{where}: expected ValueError, TypeError or RuntimeError, got {result['type']}: {result['message']}"
        )
        assert any(message_names(result["message"], name) for name in row.names), (
            f"{where}: the message does not name {' or '.join(row.names)}: {result['message']}"
        )

    return test_integer_edge
