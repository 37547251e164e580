"""The import-time checks, as pure functions (no build needed for the logic)."""

from __future__ import annotations

import pytest

import visdet_build
from visdet_ops import _build_rules, _compat, _install

INFO_CU130 = {"TORCH_VERSION": "2.14.1", "TORCH_CUDA_VERSION": "13.0", "CXX11_ABI": True}
INFO_CPU = {"TORCH_VERSION": "2.13.0+cpu", "TORCH_CUDA_VERSION": None, "CXX11_ABI": True}
INFO_STABLE_CU13 = dict(INFO_CU130, STABLE_ABI=True, STABLE_ABI_FLOOR="2.11")


@pytest.mark.parametrize(
    "info, torch_version, cuda, abi, want",
    [
        # want: the statuses of the torch version, CUDA and C++ ABI checks.
        (INFO_CU130, "2.14.0+cu130", "13.0", True, ("OK", "OK", "OK")),
        (INFO_CPU, "2.13.0+cpu", None, True, ("OK", "OK", "OK")),
        (INFO_CU130, "2.13.0+cpu", None, True, ("FAIL", "FAIL", "OK")),  # a torch minor mismatch fails
        (INFO_CPU, "2.13.0+cu130", "13.0", True, ("OK", "WARN", "OK")),  # a CPU build on a CUDA torch warns only
        (INFO_CU130, "2.14.1", "12.8", True, ("OK", "FAIL", "OK")),  # a CUDA major mismatch fails, a minor warns
        (INFO_CU130, "2.14.1", "13.1", True, ("OK", "WARN", "OK")),
        (INFO_CU130, "2.14.1", "13.0", False, ("OK", "OK", "FAIL")),
        # The version comparison is numeric, not a string's.
        (dict(INFO_CU130, TORCH_VERSION="2.1.0"), "2.10.0", "13.0", True, ("FAIL", "OK", "OK")),
        (dict(INFO_CU130, TORCH_VERSION="2.10.2"), "2.10.0", "13.0", True, ("OK", "OK", "OK")),
        # A stable build runs on every torch from the floor.
        (INFO_STABLE_CU13, "2.11.0+cu130", "13.0", True, ("OK", "OK", "OK")),
        (INFO_STABLE_CU13, "2.14.1", "13.0", True, ("OK", "OK", "OK")),
        (INFO_STABLE_CU13, "2.20.0", "13.0", True, ("OK", "OK", "OK")),
        (INFO_STABLE_CU13, "3.0.0", "13.0", True, ("OK", "OK", "OK")),
        # A CUDA minor other than the build's is expected (one wheel per CUDA major); the major still splits wheels.
        (INFO_STABLE_CU13, "2.12.0", "13.2", True, ("OK", "OK", "OK")),
        (INFO_STABLE_CU13, "2.12.0", "12.8", True, ("OK", "FAIL", "OK")),
        # The C++ ABI flag does not matter: the stable ABI is a C interface.
        (INFO_STABLE_CU13, "2.12.0", "13.0", False, ("OK", "OK", "OK")),
        # The stable CUDA extension links no libtorch_cuda/libcudart (host_cuda.h, setup.py): the CPU kernels run.
        (INFO_STABLE_CU13, "2.13.0+cpu", None, True, ("OK", "OK", "OK")),
        # A classic CUDA build needs torch's CUDA runtime.
        (INFO_CU130, "2.14.1+cpu", None, True, ("OK", "FAIL", "OK")),
        # A stable build refuses a torch below its floor.
        (INFO_STABLE_CU13, "2.10.0+cu130", "13.0", True, ("FAIL", "OK", "OK")),
        (INFO_STABLE_CU13, "2.9.1", "13.0", True, ("FAIL", "OK", "OK")),
    ],
)
def test_environment_checks(info, torch_version, cuda, abi, want):
    got = {c.name: c.status for c in _compat.environment_checks(info, torch_version, cuda, abi)}
    assert got == dict(zip(("torch version", "CUDA", "C++ ABI"), want, strict=True))


def test_stable_target_version_macro():
    """TORCH_TARGET_VERSION as torch/headeronly/version.h encodes a release: major in bits 56-63, minor 48-55."""
    assert visdet_build.stable_target_version((2, 11)) == "0x020B000000000000"
    assert int(visdet_build.stable_target_version((2, 10)), 16) == (2 << 56) | (10 << 48)
    assert _build_rules.stable_variant_name(_build_rules.stable_flavour_for("13.0")) == "stable211cu13"
    assert _build_rules.stable_variant_name(_build_rules.stable_flavour_for(None)) == "stable211cpu"
    assert _build_rules.is_stable_variant("stable211cu12") and not _build_rules.is_variant("stable211cu12")


@pytest.mark.parametrize(
    "torch_version, cuda, variant",
    [
        # From the floor on: one stable wheel per CUDA major serves every torch and every CUDA minor.
        ("2.11.0+cpu", None, "stable211cpu"),
        ("2.13.0+cpu", None, "stable211cpu"),
        ("2.14.1", "13.0", "stable211cu13"),
        ("2.15.0", "13.2", "stable211cu13"),
        ("2.11.0+cu126", "12.6", "stable211cu12"),
        ("2.14.1+cu128", "12.8", "stable211cu12"),
        ("3.0.0", "13.0", "stable211cu13"),
        ("2.12.0.dev20260101+cu130", "13.0", "stable211cu13"),
        # Below the floor, or a CUDA major without a stable build: the per-minor variant.
        ("2.10.0+cpu", None, "pt210cpu"),
        ("2.9.1", "12.8", "pt29cu128"),
        ("2.12.0", "11.8", "pt212cu118"),
        ("2.12.0", "14.0", "pt212cu140"),
    ],
)
def test_recommended_variant(torch_version, cuda, variant):
    assert _build_rules.recommended_variant(torch_version, cuda) == variant
    stable = variant.startswith("stable")
    assert _build_rules.has_stable_build(torch_version, cuda) is stable
    # variant_for stays the exact per-minor name.
    assert _build_rules.is_variant(_build_rules.variant_for(torch_version, cuda))
    if not stable:
        assert variant == _build_rules.variant_for(torch_version, cuda)


def test_stable_flavours_come_from_one_place():
    assert _build_rules.stable_flavours() == ("cpu", *(f"cu{m}" for m in _build_rules.STABLE_ABI_CUDA_MAJORS))
    for flavour in _build_rules.stable_flavours():
        assert _build_rules.is_stable_variant(_build_rules.stable_variant_name(flavour))


def test_variant_note_says_why_in_one_clause():
    assert _build_rules.variant_note("stable211cu13") == "stable211cu13: one build for every torch >= 2.11 with CUDA 13"
    assert _build_rules.variant_note("stable211cu12") == "stable211cu12: one build for every torch >= 2.11 with CUDA 12"
    assert _build_rules.variant_note("stable211cpu") == "stable211cpu: one CPU build for every torch >= 2.11"
    assert _build_rules.variant_note("pt213cpu") == "pt213cpu"


@pytest.mark.parametrize(
    "cap, status",
    [
        ((9, 0), "OK"),
        ((8, 6), "OK"),
        ((8, 9), "OK"),
        ((12, 1), "OK"),
        ((10, 3), "OK"),
        ((11, 0), "FAIL"),
        ((13, 0), "WARN"),
        ((7, 0), "FAIL"),
        ((6, 1), "FAIL"),
    ],
)
def test_arch_check(cap, status):
    sass = ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert _compat.arch_check(sass, ["12.0"], cap, "GPU").status == status


def test_install_line(monkeypatch):
    monkeypatch.delenv("VISDET_OPS_INDEX_URL", raising=False)
    assert _build_rules.variant_for("2.13.0+cpu", None) == "pt213cpu"
    assert _build_rules.variant_for("2.11.0+cu130", "13.0") == "pt211cu130"
    line = _install.install_command("pt213cpu")
    assert line == f"pip install --force-reinstall --no-deps visdet-ops -f {_install.DEFAULT_INDEX_URL}/pt213cpu/"
    monkeypatch.setenv("VISDET_OPS_INDEX_URL", "http://127.0.0.1:8000/")
    assert _install.install_command("pt214cu130").endswith("-f http://127.0.0.1:8000/pt214cu130/")


@pytest.mark.parametrize(
    "text, parts, local",
    [
        ("2.13.0+cpu", (2, 13, 0), "cpu"),
        ("2.14.1", (2, 14, 1), None),
        ("2.10.0.dev20251001+cu130", (2, 10, 0), "cu130"),
        ("2.6.0a0+git1234abc", (2, 6, 0), "git1234abc"),
        ("13.0.88", (13, 0, 88), None),
        ("13.0", (13, 0), None),
        ("9.0", (9, 0), None),
    ],
)
def test_parse_release(text, parts, local):
    r = _build_rules.parse_release(text)
    assert (r.parts, r.local) == (parts, local)


@pytest.mark.parametrize("text", ["", "cpu", "2.x", "latest", "2.13.0+"])
def test_parse_release_rejects(text):
    with pytest.raises(ValueError, match="not a version number"):
        _build_rules.parse_release(text)


def test_variant_grammar_round_trips():
    for torch_version, cuda, name in [("2.13.0+cpu", None, "pt213cpu"), ("2.6.0", "12.4", "pt26cu124")]:
        assert _build_rules.variant_for(torch_version, cuda) == name
        assert _build_rules.is_variant(name)
    assert _build_rules.parse_variant("pt214cu130") == ((2, 14), "cu130")
    assert _build_rules.parse_variant("pt26cu124") == ((2, 6), "cu124")
    for bad in ("pt2cpu", "torch213cpu", "pt213cuda", "pt213"):
        with pytest.raises(ValueError, match="not a variant name"):
            _build_rules.parse_variant(bad)


@pytest.mark.parametrize(
    "cuda, entry, ok",
    [
        ("13.0", "7.0", False),
        ("13.0", "7.5", True),
        ("12.4", "10.0", False),
        ("12.8", "10.0", True),
        ("12.8", "12.0+PTX", True),
        ("12.4", "9.0+PTX", True),
        ("12.4", "sm_90", False),
    ],
)
def test_arch_rules(cuda, entry, ok):
    assert (visdet_build.arch_problem(cuda, entry) is None) == ok


def test_runtime_modules_need_only_the_standard_library(tmp_path):
    """The import check and the doctor must work where only torch is installed: no packaging, no numpy."""
    import subprocess
    import sys

    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('packaging', 'numpy'):\n"
        "            raise ModuleNotFoundError('blocked: ' + name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import visdet_ops, visdet_ops.doctor\n"
        "from visdet_ops import _compat, _install, _build_rules\n"
        "report = visdet_ops.doctor.collect()\n"
        "print([c for c in report['checks'] if c.status == 'FAIL'])\n"
        "print(_build_rules.variant_for('2.13.0+cpu', None))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    failed, variant = res.stdout.strip().splitlines()[-2:]
    assert (failed, variant) == ("[]", "pt213cpu"), res.stdout


@pytest.mark.parametrize("torch_version, cuda", [("2.3.1", "12.1"), ("2.1.0+cpu", None), ("1.13.1", "11.7")])
def test_torch_older_than_the_floor_is_named_with_the_upgrade(torch_version, cuda):
    """No build serves a torch older than MIN_TORCH (its Python API lacks torch.library.register_fake /
    register_autograd): the checks say so, no variant is recommended, and the fix line upgrades torch."""
    from visdet_ops import _loader

    assert not _build_rules.torch_is_supported(torch_version)
    assert _build_rules.recommended_variant(torch_version, cuda) is None
    checks = {c.name: c for c in _compat.environment_checks(INFO_CU130, torch_version, cuda, True)}
    assert checks["torch"].status == "FAIL"
    assert f"older than {_build_rules.min_torch()}" in checks["torch"].detail
    fix = _loader._fix_lines(torch_version, cuda)
    assert _install.upgrade_torch_command() in fix and "pip install 'torch>=2.4'" in fix
    assert _build_rules.torch_is_supported("2.4.0") and _build_rules.recommended_variant("2.4.1", "12.1") == "pt24cu121"


@pytest.mark.parametrize(
    "code, device, runs",
    [
        ((12, 0), (12, 1), True),  # DGX Spark's GB10 runs sm_120 code
        ((10, 0), (10, 3), True),  # B300/GB300 run sm_100 code
        ((8, 0), (8, 6), True),
        ((8, 0), (8, 7), False),  # Jetson Orin runs its own code only
        ((8, 6), (8, 7), False),
        ((8, 7), (8, 7), True),
        ((10, 0), (10, 1), False),  # Thor under its pre-CUDA-13 name
        ((10, 1), (11, 0), True),  # ... whose code runs on Thor's CUDA 13 name
        ((11, 0), (11, 0), True),
        ((10, 0), (11, 0), False),
        ((12, 0), (11, 0), False),
        ((9, 0), (10, 0), False),
        ((8, 6), (8, 0), False),
    ],
)
def test_sass_runs_as_torch_decides(code, device, runs):
    assert _compat.sass_runs_on(code, device) is runs


def test_jetson_orin_is_told_to_build_from_source():
    """The aarch64 CUDA 13 wheel's archs: Orin (sm_87) is covered by neither SASS nor PTX and gets the build line."""
    sass = ["8.0", "9.0", "10.0", "11.0", "12.0"]
    check = _compat.arch_check(sass, ["12.0"], (8, 7), "Orin")
    assert check.status == "FAIL"
    assert "integrated (Jetson) GPU" in check.detail and "TORCH_CUDA_ARCH_LIST=8.7 pip install" in check.detail
    assert _compat.arch_check(sass, ["12.0"], (11, 0), "Thor").status == "OK"
    assert _compat.arch_check(sass, ["12.0"], (12, 1), "GB10").status == "OK"


PUBLISHED = {
    "x86_64": {"variants": ["pt25cu124", "pt210cpu", "stable211cpu", "stable211cu13"], "newest_torch": "2.15"},
    "aarch64": {"variants": ["pt210cpu", "stable211cpu", "stable211cu13"], "newest_torch": "2.15"},
}


@pytest.mark.parametrize(
    "torch_version, cuda, machine, variant, problem",
    [
        ("2.13.0", "13.0", "aarch64", "stable211cu13", None),  # PyPI's aarch64 torch on a GH200
        ("2.10.0", None, "aarch64", "pt210cpu", None),  # PyPI's aarch64 torch 2.10 on Graviton
        ("2.10.0", None, "arm64", "pt210cpu", None),
        ("2.5.0a0+872d972e41.nv24.08", "12.6", "aarch64", None, "no visdet-ops wheel is published for torch 2.5.0"),
        ("2.5.1", "12.4", "x86_64", "pt25cu124", None),
        ("2.5.1", "12.4", "aarch64", None, "variant pt25cu124 has no aarch64 build"),
        ("2.16.0", None, "aarch64", "stable211cpu", None),  # newer than the table knows: trusted
        ("2.10.0", None, "riscv64", None, "publishes no wheels for riscv64"),
        ("2.3.1", None, "aarch64", None, None),  # older than MIN_TORCH: the caller says to upgrade
    ],
)
def test_install_advice_knows_which_wheels_exist_per_machine(torch_version, cuda, machine, variant, problem):
    got, why = _build_rules.install_advice(torch_version, cuda, machine, PUBLISHED)
    assert got == variant
    assert (why is None) if problem is None else (problem in why)
    # Without a table (an unbuilt tree) the recommendation stands.
    assert _build_rules.install_advice(torch_version, cuda, machine, None) == (
        _build_rules.recommended_variant(torch_version, cuda),
        None,
    )


def test_machine_check():
    assert _compat.machine_check({"PLATFORM": "aarch64"}, "aarch64").status == "OK"
    wrong = _compat.machine_check({"PLATFORM": "aarch64"}, "x86_64")
    assert wrong.status == "FAIL" and "install the x86_64 wheel" in wrong.detail
    assert _compat.machine_check({}, "x86_64").status == "WARN"


def test_gencode_flags_are_torchs(monkeypatch):
    """setup.py writes the -gencode flags torch.utils.cpp_extension would (a flag naming 'arch', such as -ccbin
    aarch64-linux-gnu-gcc, makes cpp_extension add none)."""
    from torch.utils import cpp_extension

    archs = ["7.5", "8.0", "9.0", "10.0", "12.0+PTX"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", ";".join(archs))
    assert visdet_build.gencode_flags(archs) == cpp_extension._get_cuda_arch_flags()
    assert cpp_extension._get_cuda_arch_flags(["-ccbin", "aarch64-linux-gnu-gcc"]) == []  # why setup.py writes them
