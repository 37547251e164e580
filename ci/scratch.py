"""Runs the test suite against an installed visdet-ops (a wheel), never the source folder.

  python ci/scratch.py [pytest args]     (the release's test-command; ci/smoke.py does the same)

The tests run from a copy of the source tree without the visdet_ops package, so `import visdet_ops` finds
the installed package while the tests' own helpers (tests/, ci/) stay importable. Tests of the source
tree itself (CUDA sources compiling) are left out: an installed wheel has no compiler to offer them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("tests", "ci", "csrc", "benchmarks", "docs", ".github")
FILES = ("pyproject.toml", "setup.py", "visdet_build.py", "noxfile.py", "README.md")
# Tests of the source tree, not of a build: they compile csrc/ themselves (every .cu natively, for aarch64 and twice
# for reproducibility) and ran where the tree is (`nox -s tests`); from a wheel they would only compile it again.
SOURCE_TREE_ONLY = ("tests/test_cuda_sources.py", "tests/test_aarch64.py", "tests/test_reproducible.py")
# What a wheel must pass when the whole suite already ran on a build of the same code and variant: it loads and
# rejects mismatches clearly (the loader), and every op family's example runs in every dtype (the compiled code).
# VISDET_OPS_SCRATCH_SUITE=installed narrows main() to these (the release rehearsal's per-minor wheel).
INSTALLED_PACKAGE_TESTS = ("tests/test_loader.py", "tests/test_examples.py")
# Under emulation (an aarch64 wheel under qemu, every Python start 25 s): the installed-package tests less the loader's
# answers to a torch mismatch from launchers and copies of the package. Those are the loader's Python, the same on every
# platform, and the x86_64 wheels run them; under qemu they were 4 minutes of CI's 8 (2026-12-07). What stays: the
# import, one mismatch, the doctor's report and recommendation, a broken extension, the CPU-only dispatch message, and
# every op's example in every dtype (the compiled code).
EMULATION_DESELECT = (
    "tests/test_loader.py::test_doctor_reports_the_mismatch_and_exits_1",
    "tests/test_loader.py::test_only_the_doctor_starts_without_the_ops",
    "tests/test_loader.py::test_stable_build_below_the_floor_fails_with_the_per_minor_fix",
    "tests/test_loader.py::test_unbuilt_tree_says_how_to_build",
)


def tree_without_package(dest: Path, root: Path = ROOT) -> Path:
    """A copy of the source tree at `root` without its visdet_ops package."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in FOLDERS:
        shutil.copytree(root / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        shutil.copy2(root / name, dest / name)
    return dest


def pytest_command(
    python: str | Path,
    *args: str,
    paths: tuple[str, ...] = ("tests",),
    env: dict | None = None,
    deselect: tuple[str, ...] = (),
) -> list[str]:
    """pytest over `paths` (all of tests/ by default) with `python` (run in `env`, e.g. an aarch64 guest's): one worker
    per core where that interpreter has pytest-xdist (the test extras bring it; a later `-n N` in args wins). Always
    without SOURCE_TREE_ONLY, and without the node ids in `deselect` (EMULATION_DESELECT under qemu)."""
    deselect = [a for t in (*SOURCE_TREE_ONLY, *deselect) for a in ("--deselect", t)]
    has_xdist = subprocess.run([str(python), "-c", "import xdist"], capture_output=True, env=env).returncode == 0
    workers = ["-n", "auto"] if has_xdist else []
    return [str(python), "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", *workers, *deselect, *args]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="visdet-ops-tests-") as tmp:
        tree = tree_without_package(Path(tmp) / "tree")
        installed = os.environ.get("VISDET_OPS_SCRATCH_SUITE") == "installed"
        paths = INSTALLED_PACKAGE_TESTS if installed else ("tests",)
        return subprocess.call(pytest_command(sys.executable, *argv, paths=paths), cwd=tree)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
