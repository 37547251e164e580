"""Import-time failures, end to end: a copy of the built package with a
doctored _build_info or a broken _C, imported in a fresh interpreter."""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import torch

import visdet_ops
import visdet_ops_doctor
from visdet_ops import _build_rules, _loader

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """The package and the console script's launcher (a top-level module beside it, as in the wheel)."""
    src = Path(visdet_ops.__file__).parent
    shutil.copytree(src, tmp_path / "visdet_ops", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(visdet_ops_doctor.__file__, tmp_path / "visdet_ops_doctor.py")
    return tmp_path


def _python(root: Path, *args: str) -> subprocess.CompletedProcess:
    """A fresh interpreter that imports visdet_ops from `root`."""
    env = dict(os.environ, PYTHONPATH=str(root), VISDET_OPS_INDEX_URL="https://example.invalid/whl")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=root)


@pytest.fixture
def mismatched_copy(package_copy: Path) -> Path:
    """The package copy, built for a torch minor that is not this one (2.99): the import must refuse it."""
    _set_build_info(package_copy, TORCH_VERSION="2.99.0", VERSION="0.1.0+pt299cpu", STABLE_ABI=False)
    return package_copy


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


def test_torch_mismatch_is_one_clear_import_error(mismatched_copy):
    res = _python(mismatched_copy, "-c", "import visdet_ops")
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


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _console_script(root: Path) -> Path:
    """The `visdet-ops` script as pip writes it for pyproject's [project.scripts] entry (its wrapper template)."""
    target = _pyproject()["project"]["scripts"]["visdet-ops"]
    module, func = target.split(":")
    script = root / "bin" / "visdet-ops"
    script.parent.mkdir()
    script.write_text(
        "import re\nimport sys\n"
        f"from {module} import {func}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({func}())\n"
    )
    return script


@pytest.mark.parametrize("doctor", ["console script", "launcher", "python -m"])
def test_doctor_reports_the_mismatch_and_exits_1(mismatched_copy, doctor):
    """A torch mismatch: the console script (its launcher, outside the package) and `python -m visdet_ops doctor`
    report it and exit 1."""
    args = {
        "console script": (str(_console_script(mismatched_copy)),),
        "launcher": ("-c", "import sys, visdet_ops_doctor; sys.exit(visdet_ops_doctor.main())"),
        "python -m": ("-m", "visdet_ops"),
    }[doctor] + ("doctor",)
    res = _python(mismatched_copy, *args)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "[FAIL] torch version: built for torch 2.99" in res.stdout
    assert "Install line for this environment: pip install --force-reinstall --no-deps visdet-ops -f " in res.stdout
    res = _python(mismatched_copy, *args, "--json")
    report = json.loads(res.stdout)
    assert res.returncode == 1 and report["ok"] is False
    assert any(c["name"] == "torch version" and c["status"] == "FAIL" for c in report["checks"])


def test_only_the_doctor_starts_without_the_ops(mismatched_copy):
    """A torch mismatch: only the doctor (test_doctor_reports_the_mismatch_and_exits_1) starts; `python -m
    visdet_ops` with anything else and a plain import raise the ImportError."""
    error = "ImportError: visdet-ops 0.1.0+pt299cpu was built for torch 2.99.0"
    for args in (("-m", "visdet_ops", "--help"), ("-m", "visdet_ops"), ("-c", "import visdet_ops")):
        res = _python(mismatched_copy, *args)
        assert res.returncode != 0 and error in res.stderr, (args, res.stderr)
        assert res.stdout == "" and res.stderr.count("Traceback") == 1, args
    # Importing the launcher changes nothing; only its running main() makes the package keep the error, and then
    # an op looked up by anyone else names it (an op function the package exports here, where it loads).
    res = _python(mismatched_copy, "-c", "import visdet_ops_doctor, visdet_ops")
    assert res.returncode != 0 and error in res.stderr
    op = next(n for n in sorted(visdet_ops.__all__) if inspect.isfunction(getattr(visdet_ops, n)))
    res = _python(
        mismatched_copy, "-c", f"import visdet_ops_doctor as d; d.RUNNING = True; import visdet_ops; visdet_ops.{op}"
    )
    assert f"AttributeError: module 'visdet_ops' has no attribute '{op}': its compiled ops did not load (" in res.stderr
    assert "visdet-ops 0.1.0+pt299cpu was built for torch 2.99.0" in res.stderr


def test_the_import_reads_no_user_arguments():
    """visdet_ops/__init__.py decides whether to keep the load error from interpreter state: the launcher's flag
    and sys.argv[0] == "-m" while `python -m` locates the package; never the user's arguments."""
    source = Path(visdet_ops.__file__).read_text()
    assert "_doctor_invocation" not in source
    names = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.NAME]
    uses = [t.line.strip() for t in names if t.string == "argv"]
    assert uses == ['return _sys.argv[:1] == ["-m"]']
    setuptools = _pyproject()["tool"]["setuptools"]
    assert "visdet_ops_doctor" in setuptools["py-modules"]  # the console script's launcher ships in the wheel


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
    res = _python(Path(visdet_ops.__file__).parent.parent, "-m", "visdet_ops", "doctor", "--json")
    report = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout
    # The smoke run reports every public registered op, and each ran (its example case, on the CPU).
    public = {n.split("::")[1] for n in _loader.op_names() if not n.split("::")[1].startswith("_")}
    assert public and public <= set(report["ops"]), sorted(public - set(report["ops"]))
    failed = {name: row["smoke"] for name, row in report["ops"].items() if row["smoke"].get("cpu") != "OK"}
    assert not failed, failed
    assert report["install"].startswith("pip install --force-reinstall --no-deps visdet-ops -f ")


def test_cpu_only_build_answers_cuda_dispatch_clearly():
    """What a CUDA tensor would reach in a CPU-only build: a message naming the op, not 'no kernel', from every
    registered op (backward ops too), each given the arguments its module's example case passes it."""
    if visdet_ops.BUILD_INFO["WITH_CUDA"]:
        pytest.skip("this build has CUDA kernels")
    from .memory_worker import capture

    calls = capture(torch.device("cpu"))
    assert sorted(calls) == _loader.op_names()
    cuda_keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    for qualname, (func, args, kwargs) in sorted(calls.items()):
        with pytest.raises(
            RuntimeError, match=rf"{re.escape(qualname)}: visdet-ops .* is a CPU-only build and has no CUDA kernels"
        ):
            func.redispatch(cuda_keys, *args, **kwargs)
