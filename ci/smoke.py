"""Installs each variant of a local wheel index the way a user would, with no
compiler in sight, and checks it; plus the mismatch a user must never miss.

  python -m ci.smoke --index index [--variant pt213cpu ...] [--work DIR]

For every variant folder of the index that has a wheel: serve the index on
127.0.0.1, create a fresh venv, `pip install visdet-ops -f
http://127.0.0.1:PORT/<variant>/` with nvcc off PATH and CUDA_HOME unset,
import it, run `visdet-ops doctor` (must exit 0) and the CPU tests.
Then, when a CPU variant and a variant for another torch minor exist: install
the other wheel beside the CPU variant's torch and require one clear
ImportError naming both torch versions, and `visdet-ops doctor` exiting 1
with the pip line."""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci.scratch import tree_without_package  # noqa: E402


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvcc").exists()
    )
    return env


def run(cmd: list, env: dict, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    res = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, text=True, capture_output=True)
    if check and res.returncode != 0:
        raise SystemExit(
            f"FAILED ({res.returncode}): {' '.join(map(str, cmd))}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
        )
    return res


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def venv(path: Path, env: dict) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    run([sys.executable, "-m", "venv", path], env)
    return path / "bin" / "python"


def check_variant(variant: str, url: str, work: Path, tree: Path, env: dict) -> dict:
    py = venv(work / f"venv-{variant}", env)
    run([py, "-m", "pip", "install", "--quiet", "visdet-ops", "-f", f"{url}/{variant}/", "pytest", "numpy"], env)
    version = run([py, "-c", "import visdet_ops; print(visdet_ops.__version__)"], env, cwd=work).stdout.strip()
    if not version.endswith(f"+{variant}"):
        raise SystemExit(f"{variant}: pip installed visdet-ops {version}")
    doctor = run([py.parent / "visdet-ops", "doctor"], env, cwd=work, check=False)
    print(doctor.stdout)
    if doctor.returncode != 0:
        raise SystemExit(f"{variant}: visdet-ops doctor exited {doctor.returncode}")
    res = run(
        [py, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "--deselect", "tests/test_cuda_sources.py"],
        env,
        cwd=tree,
        check=False,
    )
    summary = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-2000:]
    print(f"{variant}: pytest: {summary}")
    if res.returncode != 0:
        raise SystemExit(f"{variant}: tests failed\n{res.stdout[-6000:]}")
    return {"variant": variant, "version": version, "tests": summary}


def torch_minor(variant: str) -> str:
    """pt213cpu -> "2.13" (torch majors are one digit)."""
    m = re.fullmatch(r"pt(\d)(\d+)(cpu|cu\d+)", variant)
    if not m:
        raise ValueError(f"not a variant name: {variant!r}")
    return f"{m.group(1)}.{m.group(2)}"


def check_mismatch(cpu_variant: str, other: str, url: str, work: Path, env: dict) -> None:
    """`other`'s wheel beside `cpu_variant`'s torch: one clear ImportError, doctor exits 1."""
    py = venv(work / "venv-mismatch", env)
    run([py, "-m", "pip", "install", "--quiet", f"torch=={torch_minor(cpu_variant)}.*", "packaging"], env)
    run([py, "-m", "pip", "install", "--quiet", "--no-deps", "visdet-ops", "-f", f"{url}/{other}/"], env)
    found = run([py, "-c", "import torch; print(torch.__version__)"], env, cwd=work).stdout.strip()
    res = run([py, "-c", "import visdet_ops"], env, cwd=work, check=False)
    err = res.stderr
    print(err)
    checks = {
        "import fails": res.returncode != 0,
        "one exception, an ImportError": re.findall(r"^\w+Error: ", err, flags=re.M) == ["ImportError: "],
        f"names the build's torch {torch_minor(other)}": f"built for torch {torch_minor(other)}" in err,
        f"names the running torch {found}": f"found torch {found}" in err,
        "prints the pip line": "pip install --force-reinstall --no-deps visdet-ops -f " in err
        and f"/{cpu_variant}/" in err,
    }
    failed = [k for k, ok in checks.items() if not ok]
    if failed:
        raise SystemExit(f"mismatch {other} beside torch {found}: {failed}\n{err}")
    doctor = run([py.parent / "visdet-ops", "doctor"], env, cwd=work, check=False)
    print(doctor.stdout)
    if doctor.returncode != 1 or "visdet-ops -f " not in doctor.stdout:
        raise SystemExit(f"mismatch: doctor exited {doctor.returncode} (expected 1) or printed no pip line")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, default=ROOT / "index")
    parser.add_argument("--variant", action="append", help="only these variants (default: all in the index)")
    parser.add_argument("--work", type=Path, default=ROOT / ".nox" / "_smoke")
    args = parser.parse_args(argv)
    variants = sorted(p.name for p in args.index.iterdir() if p.is_dir() and re.fullmatch(r"pt\d+(cpu|cu\d+)", p.name))
    if args.variant:
        variants = [v for v in variants if v in args.variant]
    if not variants:
        print(f"no variants in {args.index}/: run nox -s build-cpu and nox -s index first", file=sys.stderr)
        return 1
    env = clean_env()
    server, url = serve(args.index)
    try:
        tree = tree_without_package(args.work / "tree")
        results = [check_variant(v, url, args.work, tree, env) for v in variants]
        cpu = [v for v in variants if v.endswith("cpu")]
        if cpu:
            others = [v for v in variants if torch_minor(v) != torch_minor(cpu[0])]
            if others:
                check_mismatch(cpu[0], others[-1], url, args.work, env)
                print(f"mismatch check: {others[-1]} beside {cpu[0]}'s torch fails clearly: OK")
    finally:
        server.shutdown()
    for r in results:
        print(f"smoke OK: {r['variant']} ({r['version']}): {r['tests']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
