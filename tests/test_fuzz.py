"""Fuzzing of every public function and module (issue 25, item 6).

Hypothesis draws calls of every name in each op module's __all__ (the `FUZZ` family at the end of each op's test
file, tests/ops/test_<module>.py, collected by families() of tests/fuzz_core.py) with random shapes, 0-sized dimensions
included, every float dtype, non-contiguous, channels_last and expanded (stride 0) layouts, mixed dtypes, on CUDA
mixed devices, and now and then an invalid argument (a wrong number of dims, a mismatched size, a non-float dtype,
an out-of-range integer, a wrong string). Each call must either match the float64 reference (visdet_ops/reference/,
forward and, where it applies, backward) or raise a clear error (tests/fuzz_core.py says what that is); an invalid
call must raise one.

The families run in worker processes (tests/fuzz_worker.py), so a crash or a hang fails its family, with the case
that was running, instead of the suite: each case has CASE_TIMEOUT_S seconds. Every case is a JSON dict, which
replays it alone:

    PYTHONPATH=. python tests/fuzz_worker.py --replay '<case JSON from the failure message>'

CI runs a fixed budget, the same cases every run: EXAMPLES = 500 examples per family (times the family's weight: about
5,500 calls in all), hypothesis seed 0, no example database, JOBS workers in parallel (one
per core, at most 4): about 30 s for the families and 50 s for this file on 2 cores. On demand, a longer run (or
other cases):

    VISDET_OPS_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py          # more examples per family
    VISDET_OPS_FUZZ_SEED=7 (or =random) pytest tests/test_fuzz.py    # other cases (the seed is in every message)
    pytest tests/test_fuzz.py -k "<module> or <module>"               # some families only
    VISDET_OPS_FUZZ_EXAMPLES=2000 nox -s tests -- tests/test_fuzz.py  # the same in the tests session's venv
    PYTHONPATH=. python tests/fuzz_worker.py --families <module> --examples 5000 --seed 3 --threads 2 --verbose

Bugs the fuzzing found and that are not fixed yet are listed in the family's FUZZ_KNOWN_BUGS: the cases they spoil
are skipped (crash, hang) or allowed to fail, and counted; test_known_bug runs each one's reproducer as a strict xfail,
so the fix of one shows up as an XPASS failure until its entry is removed.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import visdet_ops

from . import fuzz_core as core
from .conftest import op_modules
from .integer_edge_harness import pump, stderr_tail

WORKER = Path(__file__).with_name("fuzz_worker.py")
EXAMPLES = int(os.environ.get("VISDET_OPS_FUZZ_EXAMPLES", "500"))
_SEED = os.environ.get("VISDET_OPS_FUZZ_SEED", "0")
SEED = random.randrange(2**31) if _SEED == "random" else int(_SEED)
JOBS = max(1, min(4, os.cpu_count() or 1))
FAMILIES, KNOWN_BUGS = core.families()
CASE_TIMEOUT_S = 60.0  # a case (one drawn call, its reference and backward) takes well under a second
STARTUP_TIMEOUT_S = 180.0


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(visdet_ops.__file__).resolve().parent.parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["OMP_NUM_THREADS"] = "1"
    return env


def _worker(*args: str) -> list[str]:
    """The command line of a fuzz worker (tests/fuzz_worker.py) with these arguments."""
    return [sys.executable, str(WORKER), *args]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _failure(status: str, error: str, case, stderr) -> dict:
    """The record of a family that failed outside a case's own check (the worker hung or died), with the last case
    it started and the end of the worker's stderr."""
    return {"status": status, "error": error, "case": case, "stderr": stderr_tail(stderr)}


def _run_group(names: list[str], device: str) -> dict[str, dict]:
    """Runs the families `names` in a worker, restarting it after a crash or a hang (that family is reported, the
    worker goes on with the next)."""
    results: dict[str, dict] = {}
    remaining = list(names)
    while remaining:
        with tempfile.TemporaryFile("w+") as stderr:
            cmd = _worker(
                "--families", ",".join(remaining), "--examples", str(EXAMPLES), "--seed", str(SEED), "--device", device
            )
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=_env(), start_new_session=True
            )
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
            current, last_case, timeout = None, None, STARTUP_TIMEOUT_S
            while True:
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    _kill(proc)
                    results[current or remaining[0]] = _failure(
                        "hang", f"no progress for {timeout:.0f} s", last_case, stderr
                    )
                    break
                if line is None:
                    rc = proc.wait()
                    if current is not None or not results.keys() & set(remaining):
                        error = f"the worker exited with {rc} ({_signal_name(rc)})"
                        results[current or remaining[0]] = _failure("crash", error, last_case, stderr)
                    break
                timeout = CASE_TIMEOUT_S
                tag, _, rest = line.rstrip("\n").partition(" ")
                if tag == "@@start":
                    current, last_case = rest, None
                elif tag == "@@case":
                    last_case = json.loads(rest.partition(" ")[2])
                elif tag == "@@done":
                    result = json.loads(rest)
                    results[result["family"]] = result
                    current = None
        left = [f for f in remaining if f not in results]
        if len(left) == len(remaining):  # no progress at all: report the rest rather than loop
            for f in left:
                results[f] = {"status": "crash", "error": "the worker ran none of its families", "case": None}
        remaining = [f for f in left if f not in results]
    return results


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return "exit status"


_RESULTS: dict[str, dict[str, dict]] = {}


def _results(device: str, wanted: list[str]) -> dict[str, dict]:
    """The results of the families `wanted` (those of the selected tests) on `device`, from JOBS workers run in
    parallel (once per session)."""
    if device not in _RESULTS:
        # Greedy split by the families' weights (their share of the time).
        groups: list[list[str]] = [[] for _ in range(min(JOBS, len(wanted)))]
        loads = [0.0] * len(groups)
        for name in sorted(wanted, key=lambda f: -FAMILIES[f].weight):
            i = loads.index(min(loads))
            groups[i].append(name)
            loads[i] += FAMILIES[name].weight
        merged: dict[str, dict] = {}
        threads = [
            threading.Thread(target=lambda g=g: merged.update(_run_group(g, device)), daemon=True) for g in groups
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _RESULTS[device] = merged
    return _RESULTS[device]


def _report(result: dict, device: str) -> str:
    family = result.get("family")
    lines = [
        f"fuzz family {family} on {device}: {result['status']} (VISDET_OPS_FUZZ_SEED={SEED}, "
        f"VISDET_OPS_FUZZ_EXAMPLES={EXAMPLES}, {result.get('examples', '?')} examples run)",
        f"error: {result.get('error')}",
    ]
    case = result.get("case")
    if case is not None:
        lines.append(f"case: {json.dumps(case)}")
        lines.append(f"replay: PYTHONPATH=. python tests/fuzz_worker.py --replay '{json.dumps(case)}'")
    for key in ("traceback", "stderr"):
        if result.get(key):
            lines.append(f"{key}:\n{result[key][-4000:]}")
    return "\n".join(lines)


@pytest.fixture(scope="session")
def selected(request) -> dict[str, list[str]]:
    """The families of the selected test_fuzz tests (pytest -k picks families), per device."""
    chosen: dict[str, list[str]] = {"cpu": [], "cuda": []}
    for item in request.session.items:
        if getattr(item, "originalname", "") == "test_fuzz" and hasattr(item, "callspec"):
            chosen[item.callspec.params["device"]].append(item.callspec.params["family"])
    return chosen


@pytest.mark.parametrize("family", FAMILIES)
def test_fuzz(device, family, selected):
    """On CUDA, also with mixed devices (an argument now and then on the CPU)."""
    result = _results(device.type, selected[device.type] or [family]).get(family)
    assert result is not None, f"fuzz family {family} on {device}: no result"
    result.setdefault("family", family)
    assert result["status"] == "ok", _report(result, device.type)
    print(
        f"{family} on {device}: {result['examples']} examples in {result['seconds']} s, {result['returned']} calls "
        f"returned, {result['raised']} raised; known bugs hit: {result['known'] or 'none'}"
    )


def test_crash_and_hang_are_reported(monkeypatch):
    """The worker's own test families: one dies of SIGSEGV, one hangs; each is reported with its case, and the
    worker is restarted for the next family."""
    # Long enough for a healthy case on a loaded machine: at 3 s, the GPU machine's whole suite (16 test processes,
    # run 23) timed the family after the restart out ("no progress for 3 s" on a healthy case).
    monkeypatch.setattr(sys.modules[__name__], "CASE_TIMEOUT_S", 20.0)
    monkeypatch.setattr(sys.modules[__name__], "EXAMPLES", 3)
    healthy = min(FAMILIES)  # any family: the first by name
    results = _run_group(["selftest-crash", "selftest-hang", healthy], "cpu")
    crash, hang = results["selftest-crash"], results["selftest-hang"]
    assert crash["status"] == "crash" and "SIGSEGV" in crash["error"], crash
    assert crash["case"] == {"family": "selftest-crash", "seed": 0}
    assert hang["status"] == "hang" and hang["case"] == {"family": "selftest-hang", "seed": 0}, hang
    assert results[healthy]["status"] == "ok", results[healthy]


def test_every_public_name_is_fuzzed():
    """Every op module of visdet_ops/ops/ has a family, and its strategy draws every name of the module's __all__."""
    import importlib

    modules = op_modules()
    assert sorted(FAMILIES) == modules, f"no FUZZ family in the test files of {sorted(set(modules) - set(FAMILIES))}"
    for name in modules:
        public = set(importlib.import_module(f"visdet_ops.ops.{name}").__all__)
        missing = public - set(FAMILIES[name].fns)
        assert not missing, f"fuzz family {name} does not call {sorted(missing)}"


_KNOWN: dict[str, dict] = {}


def _known_bug_outcome(name: str) -> dict:
    """Runs every reproducer in one worker (once per session); one that kills the worker, and those after it, run
    alone."""

    def reproduce(bug: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(_worker("--known-bug", bug), capture_output=True, text=True, env=_env(), timeout=timeout)

    if not _KNOWN:
        done = reproduce("all", 300)
        for line in done.stdout.splitlines():
            tag, _, rest = line.partition(" ")
            if tag == "@@bug":
                bug, _, outcome = rest.partition(" ")
                _KNOWN[bug] = json.loads(outcome)
    if name not in _KNOWN:
        try:
            done = reproduce(name, 120)
            _KNOWN[name] = {"reproduced": done.returncode != 0, "error": (done.stdout + done.stderr)[-2000:]}
        except subprocess.TimeoutExpired:
            _KNOWN[name] = {"reproduced": True, "error": "no result within 120 s (a hang)"}
    return _KNOWN[name]


@pytest.mark.parametrize(
    "bug",
    [pytest.param(b, id=b.name, marks=pytest.mark.xfail(strict=True, reason=b.reason)) for b in KNOWN_BUGS],
)
def test_known_bug(bug):
    """The reproducer of a bug the fuzzing found (its test file's FUZZ_KNOWN_BUGS): fails while the bug is there. A pass
    (XPASS, strict) means it is fixed: remove its FUZZ_KNOWN_BUGS entry, so the fuzzing covers those cases again."""
    outcome = _known_bug_outcome(bug.name)
    assert not outcome["reproduced"], f"{bug.name}: {bug.reason}\n{outcome.get('error')}"
