"""A copy of the source tree without the visdet_ops package, for testing an
installed visdet-ops (a wheel, or an in-place build on PYTHONPATH): run
pytest from it and the package under test is never the source folder picked
up through the current directory."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("tests", "ci", "csrc", "benchmarks", "docs")
FILES = ("pyproject.toml", "setup.py", "noxfile.py", "README.md")


def tree_without_package(dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in FOLDERS:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in FILES:
        shutil.copy2(ROOT / name, dest / name)
    return dest
