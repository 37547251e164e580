"""Import-time failures, end to end: a copy of the built package with a
doctored _build_info or a broken _C, imported in a fresh interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import visdet_ops
from visdet_ops import _build_rules


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    src = Path(visdet_ops.__file__).parent
    shutil.copytree(src, tmp_path / "visdet_ops", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _python(root: Path, *args: str) -> subprocess.CompletedProcess:
    """A fresh interpreter that imports visdet_ops from `root`."""
    env = dict(os.environ, PYTHONPATH=str(root), VISDET_OPS_INDEX_URL="https://example.invalid/whl")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=root)


def _set_build_info(root: Path, **changes) -> None:
    path = root / "visdet_ops" / "_build_info.py"
    lines = []
    for line in path.read_text().splitlines():
        key = line.split(" = ")[0]
        lines.append(f"{key} = {changes[key]!r}" if key in changes else line)
    path.write_text("\n".join(lines) + "\n")


def test_import_succeeds_here():
    assert visdet_ops.LOAD_ERROR is None
    assert visdet_ops.__version__ == visdet_ops.BUILD_INFO["VERSION"]


def test_torch_mismatch_is_one_clear_import_error(package_copy):
    _set_build_info(package_copy, TORCH_VERSION="2.99.0", VERSION="0.1.0+pt299cpu", STABLE_ABI=False)
    res = _python(package_copy, "-c", "import visdet_ops")
    assert res.returncode != 0
    err = res.stderr
    found = torch.__version__
    assert "ImportError: visdet-ops 0.1.0+pt299cpu was built for torch 2.99.0" in err
    assert f"but this environment has torch {found}" in err
    assert "built for torch 2.99, found torch " + found in err
    # The fix line names the recommended variant (the stable one for torch >= the floor) and says why.
    fix = _build_rules.recommended_variant(found, torch.version.cuda)
    assert f"Install the visdet-ops build for this environment ({_build_rules.variant_note(fix)}):" in err
    assert f"pip install --force-reinstall --no-deps visdet-ops -f https://example.invalid/whl/{fix}/" in err
    assert err.count("Traceback") == 1  # one error, not a cascade


def test_fix_line_recommends_the_stable_variant_from_the_floor():
    """The loader's fix line: the stable variant for torch >= the floor (and why, in one clause), the per-minor
    variant below the floor or for a CUDA major without a stable build; the rest of the text unchanged."""
    from visdet_ops import _loader

    assert _loader._fix_lines("2.14.1", "13.0") == (
        "Install the visdet-ops build for this environment (stable211cu13: one build for every torch >= 2.11 with "
        "CUDA 13):\n  pip install --force-reinstall --no-deps visdet-ops -f https://example.invalid/whl/stable211cu13/"
    )
    assert "(stable211cpu: one CPU build for every torch >= 2.11):" in _loader._fix_lines("2.13.0+cpu", None)
    assert _loader._fix_lines("2.10.0+cpu", None) == (
        "Install the visdet-ops build for this environment (pt210cpu):\n"
        "  pip install --force-reinstall --no-deps visdet-ops -f https://example.invalid/whl/pt210cpu/"
    )
    assert "(pt212cu118):" in _loader._fix_lines("2.12.0", "11.8")


@pytest.fixture(autouse=True)
def _index_url(monkeypatch):
    monkeypatch.setenv("VISDET_OPS_INDEX_URL", "https://example.invalid/whl")


def test_stable_build_below_the_floor_fails_with_the_per_minor_fix(package_copy):
    """A stable wheel beside a torch older than its floor: one ImportError; the fix is the per-minor variant of
    the running torch when that is below the floor too."""
    floor = f"{torch.__version__.split('.')[0]}.99"  # a floor above the running torch
    _set_build_info(package_copy, STABLE_ABI=True, STABLE_ABI_FLOOR=floor, VERSION="0.1.0+stable299cpu")
    res = _python(package_copy, "-c", "import visdet_ops")
    assert res.returncode != 0 and res.stderr.count("Traceback") == 1
    assert f"stable-ABI build for torch >= {floor}, found torch {torch.__version__}" in res.stderr
    fix = _build_rules.recommended_variant(torch.__version__, torch.version.cuda)
    assert f"-f https://example.invalid/whl/{fix}/" in res.stderr


def test_doctor_reports_the_mismatch_and_exits_1(package_copy):
    _set_build_info(package_copy, TORCH_VERSION="2.99.0", STABLE_ABI=False)
    res = _python(package_copy, "-m", "visdet_ops", "doctor")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "[FAIL] torch version: built for torch 2.99" in res.stdout
    assert "Install line for this environment: pip install --force-reinstall --no-deps visdet-ops -f " in res.stdout
    res = _python(package_copy, "-m", "visdet_ops", "doctor", "--json")
    report = json.loads(res.stdout)
    assert res.returncode == 1 and report["ok"] is False
    assert any(c["name"] == "torch version" and c["status"] == "FAIL" for c in report["checks"])


def test_doctor_recommends_a_variant_and_keeps_the_per_minor_name(package_copy):
    """install: the recommended variant (stable for torch >= the floor); variant_exact: this torch minor's own."""
    res = _python(package_copy, "-m", "visdet_ops", "doctor", "--json")
    report = json.loads(res.stdout)
    recommended = _build_rules.recommended_variant(torch.__version__, torch.version.cuda)
    exact = _build_rules.variant_for(torch.__version__, torch.version.cuda)
    assert (report["variant"], report["variant_exact"]) == (recommended, exact)
    assert report["variant_note"] == _build_rules.variant_note(recommended)
    assert report["install"].endswith(f"-f https://example.invalid/whl/{recommended}/")
    text = _python(package_copy, "-m", "visdet_ops", "doctor").stdout
    assert f"Install line for this environment: {report['install']}" in text
    if recommended != exact:
        assert f"  ({report['variant_note']}; the build for this torch minor alone: {exact})" in text


def test_broken_extension_chains_the_original_error(package_copy):
    for so in (package_copy / "visdet_ops").glob("_C*.so"):
        so.write_bytes(b"not an ELF file")
    res = _python(package_copy, "-c", "import visdet_ops")
    assert res.returncode != 0
    assert "failed to load its compiled ops" in res.stderr
    assert "The above exception was the direct cause" in res.stderr
    res = _python(package_copy, "-m", "visdet_ops", "doctor")
    assert res.returncode == 1 and "[FAIL] load _C" in res.stdout


def test_unbuilt_tree_says_how_to_build(package_copy):
    (package_copy / "visdet_ops" / "_build_info.py").unlink()
    res = _python(package_copy, "-c", "import visdet_ops")
    assert "visdet_ops is not built" in res.stderr and "pip install --no-build-isolation -e ." in res.stderr


def test_doctor_passes_here():
    res = subprocess.run(
        [sys.executable, "-m", "visdet_ops", "doctor", "--json"],
        capture_output=True,
        text=True,
        cwd=Path(visdet_ops.__file__).parent.parent,
    )
    report = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout
    assert report["ops"]["nms"]["smoke"]["cpu"] == "OK"
    assert report["ops"]["roi_align"]["smoke"]["cpu"] == "OK"
    assert report["install"].startswith("pip install --force-reinstall --no-deps visdet-ops -f ")


def test_cpu_only_build_answers_cuda_dispatch_clearly():
    """What a CUDA tensor would reach in a CPU-only build: a message, not 'no kernel'."""
    if visdet_ops.BUILD_INFO["WITH_CUDA"]:
        pytest.skip("this build has CUDA kernels")
    boxes, scores = torch.zeros(2, 4), torch.zeros(2)
    cuda_keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with pytest.raises(
        RuntimeError, match=r"visdet_ops::nms: visdet-ops .* is a CPU-only build and has no CUDA kernels"
    ):
        torch.ops.visdet_ops.nms.default.redispatch(cuda_keys, boxes, scores, 0.5, 0)
