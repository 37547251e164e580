"""What the test files of visdet_ops/composite/'s modules share: the docs check an op module gets from
tests/test_op_registry.py (a composite module registers no op, so that test does not see it)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "ops.md").read_text()


def docs_section_names_every_public_name(module: str) -> None:
    """docs/ops.md has a `## <module>` section that names every name of visdet_ops.composite.<module>.__all__."""
    match = re.search(rf"^## {re.escape(module)}\b.*?(?=^## |\Z)", DOCS, re.M | re.S)
    assert match, f"docs/ops.md has no '## {module}' section"
    names = importlib.import_module(f"visdet_ops.composite.{module}").__all__
    missing = [n for n in names if f"`{n}" not in match.group(0)]
    assert not missing, f"the '## {module}' section of docs/ops.md does not name {missing}"
