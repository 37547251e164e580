"""The fuzz worker (issue 25, item 6): runs the hypothesis fuzz of op families in this process, one family after the
other. tests/test_fuzz.py starts it in a child process, so that a crash or a hang fails that family (with the case
that caused it) instead of the suite.

    PYTHONPATH=. python tests/fuzz_worker.py --families <module>,<module> --examples 40 --seed 0 [--device cuda]
    python tests/fuzz_worker.py --replay '<case JSON>' [--family F]   # one case, its traceback on failure
    python tests/fuzz_worker.py --known-bug <name>                   # a KNOWN_BUGS entry's reproducer (or all)

Protocol, on stdout: `@@case <family> <case JSON>` (flushed) before every call, and `@@done <result JSON>` after
each family: {"family", "status": "ok" | "fail", "examples", "returned", "raised", "known": {bug: count},
"seconds"; on "fail": "case" (the shrunk failing case), "error", "traceback"}. Anything else on stdout or stderr
is diagnostics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from collections import Counter

# The tree's root, so that the families' test files import as pytest names them (tests.ops.test_<module>).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import fuzz_core as core  # noqa: E402
from tests.conftest import op_modules  # noqa: E402

# The oracle is float64: the cuDNN convolutions and cuBLAS products some modules run around our ops (a module's
# encoder convolution, say) must not round to TF32 on the GPU (torch allows it for convolutions by default: an H200
# run found a module's output off by 6e-4 for that, not for our kernel; runs/gpu/2026-12-02-run27-aarch64-merge.md).
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False

# The grad mode of a case's calls (its grad_mode: fuzz_core.Run.mode): mostly with autograd (and the backward).
MODES = ("grad", "grad", "grad", "no_grad", "inference")


def emit(tag: str, *parts: str) -> None:
    sys.stdout.write(" ".join((tag, *parts)) + "\n")
    sys.stdout.flush()


def family(name: str) -> core.Family:
    """The family `name`, from its test file (imported on first use: a worker imports only its own families)."""
    if name not in core.FAMILIES:
        core.families([name])
    return core.FAMILIES[name]


def run_case(case: dict) -> None:
    fam = family(case["family"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fam.run(case)


def known_bugs_for(case: dict) -> list:
    return [bug for bug in core.families([case["family"]])[1] if bug.matches(case)]


def fuzz_family(name: str, examples: int, seed: int, device: str) -> dict:
    fam = family(name)
    stats: Counter = Counter()
    known: Counter = Counter()
    last_failure: dict = {}

    def tagged(drawn) -> dict:
        case, mode, sync = drawn
        case = {"family": name, **case, "grad_mode": mode}
        if device != "cpu":
            # On CUDA, half the cases with VISDET_OPS_SYNC_CHECKS=1 (bad tensor values raise), half without (they
            # give NaN: fuzz_core.Run.unchecked_values).
            case.update(device=device, sync=sync)
        return case

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @hypothesis_seed(seed)
    @given(st.tuples(fam.strategy(device), st.sampled_from(MODES), st.booleans()).map(tagged))
    def prop(case):
        emit("@@case", name, core.dumps(case))
        bugs = known_bugs_for(case)
        if any(bug.skip for bug in bugs):
            known.update(bug.name for bug in bugs)
            return
        core.STATS.clear()
        try:
            run_case(case)
        except Exception as exc:
            if bugs:
                known.update(bug.name for bug in bugs)
                return
            last_failure.update(case=case, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
            raise
        finally:
            stats.update(core.STATS)
            stats["examples"] += 1

    start = time.monotonic()
    result = {"family": name, "status": "ok", "seed": seed, "device": device}
    try:
        prop()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        result.update(status="fail", error=last_failure.get("error") or f"{type(exc).__name__}: {exc}")
        result["case"] = last_failure.get("case")
        result["traceback"] = last_failure.get("traceback") or traceback.format_exc()
    result.update(
        examples=stats["examples"],
        returned=stats["returned"],
        raised=stats["raised"],
        known=dict(known),
        seconds=round(time.monotonic() - start, 2),
    )
    return result


def _selftest(kind: str) -> None:
    """A family that crashes or hangs on its first case: tests/test_fuzz.py checks that the parent reports it, with
    the case, and goes on with the next family."""
    emit("@@start", f"selftest-{kind}")
    emit("@@case", f"selftest-{kind}", core.dumps({"family": f"selftest-{kind}", "seed": 0}))
    if kind == "crash":
        import signal

        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(3600)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(op_modules()))
    parser.add_argument("--examples", type=int, default=30, help="examples per family (times the family's weight)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (the CPU kernels' own)")
    parser.add_argument("--verbose", action="store_true", help="print every error a call raises (stderr)")
    parser.add_argument("--replay", help="a case (JSON) to run once")
    parser.add_argument("--family", help="the family of --replay's case, where the JSON does not say")
    parser.add_argument("--known-bug", help="run this KNOWN_BUGS entry's reproducer")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    core.VERBOSE = args.verbose
    if args.replay:
        case = json.loads(args.replay)
        if args.family:
            case.setdefault("family", args.family)
        for bug in known_bugs_for(case):
            print(f"known bug {bug.name}: {bug.reason}")
        run_case(case)
        print("ok")
        return 0
    if args.known_bug:
        bugs = core.families()[1]
        if args.known_bug != "all":
            {b.name: b for b in bugs}[args.known_bug].reproduce()
            print("ok")
            return 0
        # Every reproducer in this process (tests/test_fuzz.py's test_known_bug): `@@bug <name> <JSON>` each, with
        # "reproduced" false once a bug is fixed.
        for bug in bugs:
            emit("@@start", bug.name)
            try:
                bug.reproduce()
                outcome = {"reproduced": False}
            except Exception as exc:  # noqa: BLE001 - the bug shows as any exception
                outcome = {"reproduced": True, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            emit("@@bug", bug.name, json.dumps(outcome))
        return 0
    for name in [f for f in args.families.split(",") if f]:
        if name in ("selftest-crash", "selftest-hang"):
            _selftest(name.removeprefix("selftest-"))
            continue
        fam = family(name)
        n = max(1, round(args.examples * fam.weight))
        emit("@@start", name)
        emit("@@done", json.dumps(fuzz_family(name, n, args.seed, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
