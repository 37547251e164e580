"""One documented list of VISDET_OPS_* variables (visdet_ops/_environment.py); the doctor prints the ones set."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from visdet_ops import _environment

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("visdet_ops", "csrc", "ci", "tests", "benchmarks", "setup.py", "noxfile.py", "pyproject.toml", ".github")
# Names the build defines for the compiler, not variables of the environment.
NOT_ENVIRONMENT = {"VISDET_OPS_WITH_CUDA"}


def _variables_in_tree() -> set[str]:
    found: set[str] = set()
    for rel in SOURCES:
        path = ROOT / rel
        files = (
            [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        )
        for f in files:
            if f.suffix in (".py", ".cpp", ".h", ".cu", ".cuh", ".toml", ".yml", ".md") or f.name == "run":
                found |= set(re.findall(r"VISDET_OPS_[A-Z0-9_]*[A-Z0-9]", f.read_text(errors="replace")))
    return found - NOT_ENVIRONMENT


def test_every_variable_read_in_the_tree_is_documented():
    # The test's own name for unknown variables is a fixture, not a variable of the product.
    undocumented = _variables_in_tree() - set(_environment.VARIABLES) - {"VISDET_OPS_NO_SUCH_SETTING"}
    assert not undocumented, f"add these to visdet_ops/_environment.py: {sorted(undocumented)}"


def test_docs_environment_is_up_to_date():
    assert (ROOT / "docs" / "environment.md").read_text() == _environment.markdown(), (
        "run: python -m visdet_ops._environment > docs/environment.md"
    )


def test_doctor_prints_the_variables_set():
    env = dict(os.environ, VISDET_OPS_SYNC_ROI_CHECKS="1", VISDET_OPS_NO_SUCH_SETTING="x")
    text = subprocess.run([sys.executable, "-m", "visdet_ops", "doctor"], capture_output=True, text=True, env=env)
    assert "VISDET_OPS_SYNC_ROI_CHECKS=1" in text.stdout
    assert "VISDET_OPS_NO_SUCH_SETTING=x  (unknown" in text.stdout
    report = subprocess.run(
        [sys.executable, "-m", "visdet_ops", "doctor", "--json"], capture_output=True, text=True, env=env
    )
    assert json.loads(report.stdout)["environment"]["VISDET_OPS_SYNC_ROI_CHECKS"] == "1"
