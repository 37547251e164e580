"""ONNX export (visdet_ops.onnx, docs/ops.md "ONNX export"): models that call the public functions and modules go
through torch.onnx.export(dynamo=True, custom_translation_table=...), onnxruntime runs the graph on the CPU on fresh
random inputs of other sizes than the export's (the dimensions are dynamic), and its outputs match eager's. The ops
without an ONNX counterpart become visdet_ops-domain nodes whose attributes are checked with onnx; the calls with no
exact form fail with a message that says so. The harness: tests/onnx_harness.py; each family's cases and its
standard-translation tests: its test file (ONNX_CUSTOM_CASES, ONNX_COVERED_OTHERWISE, test_onnx_*).

onnx, onnxscript and onnxruntime are test dependencies (pyproject's [test] extra, which every session that runs the
suite installs); the package itself needs none of them (test_import_needs_torch_only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import visdet_ops
import visdet_ops.onnx

from . import onnx_harness as ox
from .conftest import op_modules, op_test_module

ROOT = Path(__file__).resolve().parent.parent
MIN_TORCH_TEXT = ox.MIN_TORCH_TEXT


# --------------------------------------------------------------------------------------------------------------
# Without the exporter's packages, on an older torch


def test_import_needs_torch_only():
    """`import visdet_ops.onnx` never imports onnx, onnxscript or onnxruntime (blocked here); the table says what to
    install."""
    code = (
        "import sys\n"
        "for name in ('onnx', 'onnxscript', 'onnxruntime'):\n"
        "    sys.modules[name] = None\n"
        "import torch, visdet_ops, visdet_ops.onnx\n"
        "torch.__version__ = '2.99.0'  # past the torch check, to the import of onnxscript\n"
        "try:\n"
        "    visdet_ops.onnx.custom_translation_table\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    # From the folder that holds the package under test (the source tree's in-place build, or site-packages).
    cwd = Path(visdet_ops.__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pip install onnxscript onnx" in res.stdout, res.stdout


def test_older_torch_is_refused(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.4.1")
    with pytest.raises(ImportError, match=rf"needs torch >= {re.escape(MIN_TORCH_TEXT)}.*this is torch 2\.4\.1"):
        visdet_ops.onnx._build_table()


# --------------------------------------------------------------------------------------------------------------
# Ops with no ONNX counterpart: one visdet_ops-domain node each (each test file's ONNX_CUSTOM_CASES)

CUSTOM_CASES = [
    pytest.param(family, op, id=op)
    for family in op_modules()
    for op in getattr(op_test_module(family), "ONNX_CUSTOM_CASES", {})
]


def test_every_forward_op_has_a_case():
    """Every registered forward op is exported one way or the other: a custom-node case in its family's test file
    (ONNX_CUSTOM_CASES), or the test named in its ONNX_COVERED_OTHERWISE (a standard translation, or none)."""
    covered: dict[str, str] = {}
    for family in op_modules():
        tests = op_test_module(family)
        for op in [*getattr(tests, "ONNX_CUSTOM_CASES", {}), *getattr(tests, "ONNX_COVERED_OTHERWISE", {})]:
            assert op not in covered, f"{op}: ONNX cases in tests/ops/test_{covered[op]}.py and test_{family}.py"
            covered[op] = family
    assert sorted(covered) == _forward_ops()


@ox.needs_exporter
@pytest.mark.parametrize("family, name", CUSTOM_CASES)
def test_custom_nodes(onnx_table, rng, family, name):
    """Each op without an ONNX counterpart is one visdet_ops-domain node: its tensors as inputs, its other arguments
    as attributes under the schema's names, its outputs typed as eager's; onnx's checker accepts the model."""
    import onnx

    fn, args, attributes = op_test_module(family).ONNX_CUSTOM_CASES[name](rng)
    with torch.no_grad():
        onnx_model = ox.export(onnx_table, ox.CallModel(fn), args)
        want = fn(*args)
    onnx.checker.check_model(onnx_model, full_check=True)
    nodes = [n for n in onnx_model.graph.node if n.domain]
    assert [(n.domain, n.op_type) for n in nodes] == [(visdet_ops.onnx.CUSTOM_DOMAIN, name)]
    assert any(o.domain == visdet_ops.onnx.CUSTOM_DOMAIN and o.version == 1 for o in onnx_model.opset_import)
    got = {}
    for a in nodes[0].attribute:
        value = onnx.helper.get_attribute_value(a)
        got[a.name] = value.decode() if isinstance(value, bytes) else value
    assert got.keys() == attributes.keys()
    for key, value in attributes.items():
        # Float attributes are float32 in ONNX.
        assert got[key] == (pytest.approx(value, rel=1e-7) if isinstance(value, float) else value), key
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    assert len([i for i in nodes[0].input if i]) == len(tensors)
    want = want if isinstance(want, tuple) else (want,)
    elem_types = [o.type.tensor_type.elem_type for o in onnx_model.graph.output]
    assert elem_types == [onnx.helper.np_dtype_to_tensor_dtype(w.numpy().dtype) for w in want]


def _forward_ops() -> list[str]:
    from visdet_ops import _onnx_translations

    return _onnx_translations.forward_ops()


@ox.needs_exporter
def test_table_covers_every_op(onnx_table):
    assert sorted(op.name().split("::")[1] for op in onnx_table) == _forward_ops()
    assert all(getattr(torch.ops.visdet_ops, name).default in onnx_table for name in _forward_ops())


def test_docs_name_every_op():
    """docs/ops.md's "ONNX export" table has a row for every registered forward op."""
    text = (ROOT / "docs" / "ops.md").read_text()
    section = text.split("## ONNX export", 1)[1].split("\n## ", 1)[0]
    names = {name for name in dir(torch.ops.visdet_ops) if not name.startswith("_")}
    for name in sorted(names):
        if isinstance(getattr(torch.ops.visdet_ops, name), torch._ops.OpOverloadPacket):
            assert re.search(rf"^\| `{name}`", section, re.M), f"docs/ops.md, ONNX export: no row for {name}"
