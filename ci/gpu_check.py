"""The GPU proof in one command, for a machine with a GPU and torch:

  python ci/gpu_check.py --out DIR [--wheel visdet_ops-...whl | --build-stable] [--compare-stable WHEEL]

1. gets visdet-ops: installs --wheel into DIR/site (no dependencies), or builds
   in place against the local torch for the local GPU's arch, or (--build-stable)
   builds the stable-ABI wheel (the local torch must be the stable floor) for the
   local GPU's arch into DIR/wheel and tests that file as --wheel would;
2. runs the whole test suite with VISDET_OPS_REQUIRE_CUDA=1 (a skipped CUDA
   test is a failure there): the test files in one shard per visible GPU, each
   shard on its own GPU with pytest-xdist workers of one CPU thread each (run 25:
   with torch's default threads per worker the suite did not finish in 500 s on
   4 GPUs; with one, 4 x 1.5-3.5 minutes);
3. runs compute-sanitizer memcheck, racecheck and initcheck over
   tests/sanitize_sweep.py, which launches every kernel forward and backward;
4. runs benchmarks/bench.py; with --compare-stable WHEEL also with that stable
   wheel installed, then benchmarks/compare.py on the two runs (issue 13: every
   row within 3% of this build's, and still ahead of its peer where this is);
   with --cpu-bench also benchmarks/cpu.py on this machine's cores;
5. writes DIR/gpu-report.md and DIR/gpu-report.json.
--families NAME... narrows steps 2-4 to those op families (the tests whose ids name one, the sweep's and the
benchmarks' cases of those families): the proof of the kernels a change touched, in a few minutes.
--mmcv-peer SDIST first builds mmcv's own kernels from mmcv's sdist (ci/mmcv_peer.py) as the benchmarks' peer.
Standard library + torch only (nox may be absent there). Exit 0 only if every
step passed."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import sanitizer_report  # noqa: E402
from ci.scratch import tree_without_package  # noqa: E402


def run(cmd: list[str], log: Path, env: dict, cwd: Path, timeout: int) -> tuple[int, float]:
    print(f"$ {' '.join(cmd)}", flush=True)
    started = time.monotonic()
    with log.open("w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    took = time.monotonic() - started
    print(f"  -> rc {rc} in {took:.0f} s (log {log.name})", flush=True)
    return rc, took


def junit_counts(path: Path) -> dict:
    if not path.exists():
        return {}
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def shard_files(files: list[Path], shards: int) -> list[list[Path]]:
    """Test files into `shards` groups of about equal size in lines (largest first, each to the lightest group):
    every file in exactly one group, no group empty while files remain."""
    lines = {f: len(f.read_text(errors="replace").splitlines()) for f in files}
    groups: list[list[Path]] = [[] for _ in range(max(1, min(shards, len(files))))]
    load = [0] * len(groups)
    for f in sorted(files, key=lambda f: (-lines[f], str(f))):
        i = load.index(min(load))
        groups[i].append(f)
        load[i] += lines[f]
    return groups


def suite_files(tree: Path) -> list[Path]:
    """The suite's test files (every tests/**/test_*.py), relative to the tree, without those that test the source
    tree itself (ci.scratch.SOURCE_TREE_ONLY)."""
    from ci.scratch import SOURCE_TREE_ONLY  # noqa: PLC0415

    found = sorted((tree / "tests").rglob("test_*.py"))
    return [f.relative_to(tree) for f in found if str(f.relative_to(tree)) not in SOURCE_TREE_ONLY]


def run_sharded_suite(
    tree: Path, out: Path, env: dict, gpus: int, workers: int, extra: list[str], timeout: int
) -> dict:
    """The suite in one shard per GPU, at once: shard i sees GPU i only (CUDA_VISIBLE_DEVICES), runs `workers`
    pytest-xdist workers, each with one CPU thread (OMP/MKL), and writes out/shard<i>.xml and out/pytest-<i>.log.
    Returns rc (0 only if every shard passed), seconds and the summed junit counts."""
    started = time.monotonic()
    # GPU i of this process: the i-th of CUDA_VISIBLE_DEVICES where the caller narrowed it, else device i; never
    # more shards than those.
    narrowed = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    visible = narrowed or [str(i) for i in range(gpus)]
    groups = shard_files([tree / f for f in suite_files(tree)], min(gpus, len(visible)))
    procs = []
    for i, group in enumerate(groups):
        junit = out / f"shard{i}.xml"
        cmd = [sys.executable, "-m", "pytest", *[str(f.relative_to(tree)) for f in group], "-q", "-p",
               "no:cacheprovider", "-rfEs", f"--junitxml={junit}", *(["-n", str(workers)] if workers > 1 else []),
               *extra]  # fmt: skip
        shard_env = dict(env, CUDA_VISIBLE_DEVICES=visible[i], OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        print(f"$ [GPU {i}] {' '.join(cmd)}", flush=True)
        log = (out / f"pytest-{i}.log").open("w")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=shard_env, cwd=tree), log, junit))
    rc = 0
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for proc, log, junit in procs:
        try:
            code = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = 124
        log.close()
        rc = rc or code
        for key, value in junit_counts(junit).items():
            counts[key] += value
    took = time.monotonic() - started
    print(f"  -> rc {rc} in {took:.0f} s ({len(groups)} shards; logs pytest-<i>.log)", flush=True)
    return {"rc": rc, "seconds": round(took, 1), "shards": len(groups), **counts}


def install_wheel(wheel: Path, site: Path, log: Path, env: dict, cwd: Path) -> tuple[int, float]:
    """pip install --no-deps --target site: the wheel alone, no compiler, no index."""
    shutil.rmtree(site, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)]
    return run(cmd, log, env, cwd, 300)


def build_stable_wheel(out: Path, env: dict, cap: tuple[int, int], compiler_dir: Path | None):
    """The stable-ABI wheel for this GPU's arch, built against the local torch (which must be the floor: setup.py
    builds against newer torch too, but a released stable wheel is built against the floor, docs/stable-abi.md)."""
    import torch  # noqa: PLC0415

    from ci.matrix import rules  # noqa: PLC0415 - visdet_build.py

    found = rules.parse_release(torch.__version__).major_minor
    if found != rules.STABLE_ABI_FLOOR:
        print(f"gpu_check: --build-stable needs torch {rules.STABLE_ABI_FLOOR}, found {torch.__version__}", flush=True)
        return 1, 0.0, None
    dest = out / "wheel"
    shutil.rmtree(dest, ignore_errors=True)
    build_env = dict(
        env,
        VISDET_OPS_STABLE_ABI="1",
        VISDET_OPS_CUDA="1",
        TORCH_CUDA_ARCH_LIST=f"{cap[0]}.{cap[1]}",
        MAX_JOBS=str(os.cpu_count()),
    )
    if compiler_dir:
        build_env.update(CC=str(compiler_dir / "gcc"), CXX=str(compiler_dir / "g++"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dest), "."]
    rc, took = run(cmd, out / "build-stable.log", build_env, ROOT, 600)
    wheels = sorted(dest.glob("visdet_ops-*.whl"))
    return (rc, took, wheels[0]) if rc == 0 and wheels else (rc or 1, took, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wheel", type=Path, help="test this wheel instead of building in place")
    parser.add_argument(
        "--build-stable",
        action="store_true",
        help="build the stable-ABI wheel against the local torch (the floor) into OUT/wheel and test it",
    )
    parser.add_argument(
        "--compare-stable",
        type=Path,
        metavar="WHEEL",
        help="after the benchmarks, run them again with this stable wheel and compare (benchmarks/compare.py)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --compare-stable: alternating benchmark rounds of each build"
    )
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--skip-sanitizer", action="store_true")
    parser.add_argument("--skip-tests", action="store_true", help="sanitize and bench only")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments")
    parser.add_argument(
        "--families", nargs="+", metavar="NAME", help="only these op families' tests, sweep, benchmarks"
    )
    parser.add_argument(
        "--mmcv-peer", type=Path, metavar="SDIST", help="build mmcv's kernels from this sdist as a peer"
    )
    parser.add_argument(
        "--test-keywords", nargs="+", metavar="WORD", help="with --families: also the tests whose ids name these"
    )
    parser.add_argument("--cpu-bench", action="store_true", help="also run benchmarks/cpu.py")
    parser.add_argument("--gpus", type=int, default=0, help="test shards, one per GPU (default: every visible GPU)")
    parser.add_argument("--test-timeout", type=int, default=900, help="seconds for the whole suite, all shards")
    parser.add_argument(
        "--compiler-dir",
        type=Path,
        help="build with <dir>/gcc and <dir>/g++ instead of $CC/$CXX (the device image's /opt/gcc wrapper "
        "links libstdc++ statically, which setup.py refuses)",
    )
    args = parser.parse_args(argv)
    if args.wheel and args.build_stable:
        parser.error("--wheel and --build-stable both name the build to test: give one")
    out = args.out.resolve()
    wheel = args.wheel.resolve() if args.wheel else None
    out.mkdir(parents=True, exist_ok=True)

    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device visible", file=sys.stderr)
        return 1
    cap = torch.cuda.get_device_capability(0)
    env = dict(os.environ, VISDET_OPS_REQUIRE_CUDA="1", PYTHONUNBUFFERED="1")
    report: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "capability": f"{cap[0]}.{cap[1]}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "steps": {},
    }
    # Tests run from a scratch copy of the tree without visdet_ops/, so the
    # package under test is the one on PYTHONPATH (the wheel, or the in-place
    # build), never the source folder through the current directory.
    scratch = tree_without_package(out / "run")

    if args.build_stable:
        rc, took, wheel = build_stable_wheel(out, env, cap, args.compiler_dir)
        report["steps"]["build stable wheel"] = {
            "rc": rc, "seconds": round(took, 1), "wheel": wheel.name if wheel else None, "arch": f"{cap[0]}.{cap[1]}"
        }  # fmt: skip
        if rc != 0:
            (out / "gpu-report.json").write_text(json.dumps(report, indent=2))
            return 1
        rc, took = run([sys.executable, "-m", "ci.abi_audit", str(wheel)], out / "abi-audit.log", env, ROOT, 300)
        report["steps"]["abi audit"] = {"rc": rc, "seconds": round(took, 1)}
    if wheel:
        site = Path("/tmp/visdet_ops_site")
        rc, took = install_wheel(wheel, site, out / "install.log", env, scratch)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        report["steps"]["install wheel"] = {"rc": rc, "seconds": round(took, 1), "wheel": wheel.name}
    else:
        build_env = dict(
            env, VISDET_OPS_CUDA="1", TORCH_CUDA_ARCH_LIST=f"{cap[0]}.{cap[1]}", MAX_JOBS=str(os.cpu_count())
        )
        if args.compiler_dir:
            build_env.update(CC=str(args.compiler_dir / "gcc"), CXX=str(args.compiler_dir / "g++"))
        rc, took = run([sys.executable, "setup.py", "build_ext", "--inplace"], out / "build.log", build_env, ROOT, 600)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        report["steps"]["build in place"] = {"rc": rc, "seconds": round(took, 1), "arch": f"{cap[0]}.{cap[1]}"}
    if rc != 0:
        (out / "gpu-report.json").write_text(json.dumps(report, indent=2))
        return 1

    rc, took = run([sys.executable, "-m", "visdet_ops", "doctor"], out / "doctor.log", env, scratch, 300)
    report["steps"]["doctor"] = {"rc": rc, "seconds": round(took, 1)}
    bench_env = env
    if args.mmcv_peer:
        peer = out / "mmcv-peer"
        build = [sys.executable, "-m", "ci.mmcv_peer", "--sdist", str(args.mmcv_peer.resolve()), "--out", str(peer)]
        rc, took = run(build, out / "mmcv-peer.log", dict(env, MAX_JOBS=str(os.cpu_count())), ROOT, 900)
        report["steps"]["mmcv peer build"] = {"rc": rc, "seconds": round(took, 1)}
        bench_env = dict(env, PYTHONPATH=os.pathsep.join([str(peer), env["PYTHONPATH"]]))
    families = args.families or []
    keywords = [*families, *(args.test_keywords or [])]
    pytest_extra = args.pytest_args.split() + (["-k", " or ".join(keywords)] if keywords else [])

    if not args.skip_tests:
        gpus = min(args.gpus or torch.cuda.device_count(), torch.cuda.device_count())
        has_xdist = importlib.util.find_spec("xdist") is not None
        workers = max(1, (os.cpu_count() or 1) // gpus - 1) if has_xdist else 1
        report["steps"]["pytest"] = run_sharded_suite(scratch, out, env, gpus, workers, pytest_extra, args.test_timeout)

    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    for tool in () if args.skip_sanitizer else ("memcheck", "racecheck", "initcheck"):
        log = out / f"sanitizer-{tool}.log"
        # Every report printed, one line each, so that ci/sanitizer_report.py can attribute it: reports inside
        # NVIDIA's libraries' own kernels (cuBLAS, cuDNN) are listed and do not count, everything else does.
        cmd = [sanitizer, "--tool", tool, "--error-exitcode", "99", "--target-processes", "all"]
        cmd += ["--print-limit", "0", "--show-backtrace", "no"]
        if tool == "memcheck":
            cmd += ["--leak-check", "no"]
        sweep = ["tests/sanitize_sweep.py", *families]
        if tool == "initcheck":  # initcheck cannot see Hopper cuBLAS stores (sanitize_sweep.initialise_products)
            sweep.append("--initialized-products")
        rc, took = run([*cmd, sys.executable, *sweep], log, env, scratch, 900)
        found = sanitizer_report.parse(log.read_text(errors="replace"), log.name)
        report["steps"][f"sanitizer {tool}"] = {
            # 99: the tool found reports; they fail the step only where they count (or cannot be attributed).
            "rc": 0 if rc in (0, 99) and not found.problems() else (rc or 1),
            "seconds": round(took, 1),
            "reported": found.summarised,
            "counted": dict(found.counted),
            "not counted (NVIDIA library kernels)": dict(found.vendor),
        }

    if not args.skip_bench:
        only = ["--only", *families] if families else []
        rc, took = run([sys.executable, "benchmarks/bench.py", "--out", str(out), *only], out / "bench.log", bench_env,
                       scratch, 600)  # fmt: skip
        report["steps"]["benchmarks"] = {"rc": rc, "seconds": round(took, 1)}
        if args.cpu_bench:
            cpu_out = out / "cpu"
            rc, took = run([sys.executable, "benchmarks/cpu.py", "--threads", "0", "--out", str(cpu_out), *only],
                           out / "cpu-bench.log", bench_env, scratch, 600)  # fmt: skip
            report["steps"]["CPU benchmarks"] = {"rc": rc, "seconds": round(took, 1)}
    if args.compare_stable and not args.skip_bench:
        # Alternating rounds (this build, the stable wheel, this build, ...): a drift of the GPU's clocks or of the
        # machine over the minutes of the runs falls on both builds alike; compare.py merges the rounds per row.
        stable_site = Path("/tmp/visdet_ops_stable_site")
        rc, took = install_wheel(args.compare_stable.resolve(), stable_site, out / "install-stable.log", env, scratch)
        stable_env = dict(env, PYTHONPATH=str(stable_site))
        runs = {"classic": [out / "bench.json"], "stable": []}  # this build's first round ran above
        seconds = 0.0
        for n in range(args.rounds):
            suffix = "" if n == 0 else f"-{n + 1}"
            for build, build_env in (("classic", env), ("stable", stable_env)):
                if rc != 0 or (build == "classic" and n == 0):
                    continue
                dest = out / f"{build}{suffix}"
                rc, took = run(
                    [sys.executable, "benchmarks/bench.py", "--out", str(dest)],
                    out / f"bench-{build}{suffix}.log", build_env, scratch, 600,
                )  # fmt: skip
                runs[build].append(dest / "bench.json")
                seconds += took
        report["steps"]["benchmarks, stable wheel"] = {"rc": rc, "seconds": round(seconds, 1), "rounds": args.rounds}
        if rc == 0:
            rc, took = run(
                [sys.executable, "benchmarks/compare.py", "--classic", *map(str, runs["classic"]),
                 "--stable", *map(str, runs["stable"]), "--out", str(out / "compare.md")],
                out / "compare.log", env, scratch, 60,
            )  # fmt: skip
            report["steps"]["stable vs this build (3%)"] = {"rc": rc, "seconds": round(took, 1)}

    ok = all(step["rc"] == 0 for step in report["steps"].values())
    report["ok"] = ok
    (out / "gpu-report.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# GPU check: {'PASS' if ok else 'FAIL'}",
        "",
        f"{report['gpu']} (sm {report['capability']}), torch {report['torch']} (CUDA {report['torch_cuda']}), "
        f"Python {report['python']}",
        "",
        "| step | rc | seconds | detail |",
        "|---|---:|---:|---|",
    ]
    for name, step in report["steps"].items():
        detail = {k: v for k, v in step.items() if k not in ("rc", "seconds")}
        lines.append(f"| {name} | {step['rc']} | {step['seconds']} | {detail or ''} |")
    bench_md = out / "bench.md"
    if bench_md.exists():
        lines += ["", "## Benchmarks", "", bench_md.read_text()]
    compare_md = out / "compare.md"
    if compare_md.exists():
        lines += ["", "## Stable wheel against this build", "", compare_md.read_text()]
    (out / "gpu-report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
