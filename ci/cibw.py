"""cibuildwheel hooks, run inside the build environment (the manylinux container, or a fresh CPython 3.10 venv
in `nox -s release-rehearsal`): a bare Python with pip, so standard library only (plus tomli on 3.10, which the
before-build command installs first).

  python ci/cibw.py before-build    the [build-system] requirements of pyproject.toml, then the variant's torch
  python ci/cibw.py install-torch   the variant's torch (before-test)

The variant's torch comes as pip arguments in VISDET_OPS_TORCH_PIP_ARGS (a JSON list), computed on the host from
ci/matrix.toml by ci.release.build_environment: nothing here reads the matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pip(args: list[str]) -> int:
    cmd = [sys.executable, "-m", "pip", "install", *args]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def build_requirements() -> list[str]:
    """[build-system] requires of pyproject.toml, the one list of what the build needs besides torch."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]


def torch_pip_args() -> list[str]:
    raw = os.environ.get("VISDET_OPS_TORCH_PIP_ARGS")
    if not raw:
        sys.exit("ci/cibw.py: VISDET_OPS_TORCH_PIP_ARGS is not set (the host passes the variant's torch)")
    return json.loads(raw)


def main(argv: list[str]) -> int:
    if argv == ["before-build"]:
        return _pip(build_requirements()) or _pip(torch_pip_args())
    if argv == ["install-torch"]:
        return _pip(torch_pip_args())
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
