"""Central test and benchmark files only discover and iterate: a fact about one op family lives in that family's
files (tests/ops/test_<module>.py, tests/ops/_<family>.py, benchmarks/op_benchmarks/<module>.py), so a file that
spans families names none of them (LAYOUT: "a central file holds the format, the oracle and the loop").

A family name is an op module's name, a public name of its __all__ or a registered op's name, as a whole word.
NAMING_FAMILIES lists the central files that still name one, each with why; the list only shrinks."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import torch

from .conftest import op_modules

ROOT = Path(__file__).resolve().parent.parent

NAMING_FAMILIES = {
    # External facts and what is generated from them.
    "tests/mmcv_snapshot.py": "mmcv 2.2.0's names and signatures: the one snapshot of external facts",
    # Whole-model steps: several families at once, by design.
    "benchmarks/e2e.py": "whole torchvision detector steps with our ops swapped in",
    "tests/test_autocast.py": "small detector models: a step under GradScaler, the head test_cuda_graphs compiles",
}


def _family_names() -> set[str]:
    names = set(op_modules())
    for family in op_modules():
        names |= set(importlib.import_module(f"visdet_ops.ops.{family}").__all__)
    packets = (n for n in dir(torch.ops.visdet_ops) if not n.startswith("__"))
    names |= {
        n.lstrip("_") for n in packets if isinstance(getattr(torch.ops.visdet_ops, n), torch._ops.OpOverloadPacket)
    }
    return names


def _central_files() -> list[Path]:
    return [
        *sorted((ROOT / "tests").glob("*.py")),
        *sorted((ROOT / "benchmarks").glob("*.py")),
        *sorted((ROOT / "benchmarks" / "op_benchmarks").glob("_*.py")),
    ]


def test_central_files_name_no_family():
    pattern = re.compile(
        r"(?<![\w])(" + "|".join(sorted(map(re.escape, _family_names()), key=len, reverse=True)) + r")(?![\w])"
    )
    naming, stale = {}, []
    for path in _central_files():
        rel = str(path.relative_to(ROOT))
        found = sorted(set(pattern.findall(path.read_text())))
        if found and rel not in NAMING_FAMILIES:
            naming[rel] = found[:6]
        elif not found and rel in NAMING_FAMILIES:
            stale.append(rel)
    assert not naming, f"central files naming op families (move the fact to the family's files): {naming}"
    assert not stale, f"NAMING_FAMILIES lists files that name no family any more, remove them: {stale}"
