"""ci/wheel_check.py on synthetic wheels: a per-minor row and a stable row (expected variant, floor torch, build
info STABLE_ABI, Requires-Dist, abi3). No compiler needed: the "extension" is an ELF file without CUDA code."""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from ci import matrix, wheel_check

# Any 64-bit ELF file without a .nv_fatbin section reads as a CPU extension (no SASS, no PTX).
ELF = Path(os.path.realpath(sys.executable)).read_bytes()


def elf_for(platform: str) -> bytes:
    """This interpreter's ELF file, its e_machine field set to `platform`'s (the section table stays readable)."""
    code = {v: k for k, v in matrix.rules.ELF_MACHINES.items()}[platform]
    return ELF[:18] + code.to_bytes(2, "little") + ELF[20:]


def make_wheel(
    tmp_path: Path,
    variant: str,
    torch_version: str,
    requires: str,
    tag: str = "abi3",
    platform: str = "x86_64",
    elf_platform: str | None = None,
    **info,
) -> Path:
    build_info = {
        "PLATFORM": platform,
        "VARIANT": variant,
        "TORCH_VERSION": torch_version,
        "TORCH_CUDA_VERSION": None,
        "WITH_CUDA": False,
        "CUDA_ARCH_SASS": [],
        "CUDA_ARCH_PTX": [],
        "STABLE_ABI": False,
        "STABLE_ABI_FLOOR": None,
        **info,
    }
    tmp_path.mkdir(exist_ok=True)
    wheel = tmp_path / f"visdet_ops-0.1.0+{variant}-cp310-{tag}-manylinux_2_28_{platform}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            f"visdet_ops-0.1.0+{variant}.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: visdet-ops\nVersion: 0.1.0\n"
            f"Requires-Dist: {requires}\nRequires-Dist: pytest>=8; extra == 'test'\n",
        )
        zf.writestr("visdet_ops/_build_info.py", "".join(f"{k} = {v!r}\n" for k, v in build_info.items()))
        zf.writestr("visdet_ops/_C.abi3.so", elf_for(elf_platform or platform))
    return wheel


STABLE = {"STABLE_ABI": True, "STABLE_ABI_FLOOR": "2.11"}


def test_an_aarch64_wheel_passes_its_platform_row_and_only_that(tmp_path):
    """The cpu row's aarch64 view: the tag, the extension's ELF machine and the build info's PLATFORM must all say
    aarch64; an x86_64 ELF in an aarch64-tagged wheel, or an aarch64 wheel checked against the x86_64 row, fails."""
    m = matrix.load()
    arm = m.flavour("cpu", "aarch64")
    wheel = make_wheel(tmp_path, "pt210cpu", "2.10.0+cpu", "torch==2.10.*", platform="aarch64")
    summary = wheel_check.check(wheel, arm, Version("2.10.0"))
    assert summary["platform"] == "aarch64" and "platform  aarch64" in wheel_check.describe(summary)
    with pytest.raises(wheel_check.WheelCheckError, match="platform: built for x86_64"):
        wheel_check.check(wheel, m.flavour("cpu"), Version("2.10.0"))
    lying = make_wheel(tmp_path / "bad", "pt210cpu", "2.10.0+cpu", "torch==2.10.*", platform="aarch64",
                       elf_platform="x86_64")  # fmt: skip
    with pytest.raises(wheel_check.WheelCheckError, match="the extension is an x86_64 ELF"):
        wheel_check.check(lying, arm, Version("2.10.0"))
    unlabelled = make_wheel(tmp_path / "info", "pt210cpu", "2.10.0+cpu", "torch==2.10.*", platform="aarch64",
                            PLATFORM="x86_64")  # fmt: skip
    with pytest.raises(wheel_check.WheelCheckError, match="build info PLATFORM='x86_64'"):
        wheel_check.check(unlabelled, arm, Version("2.10.0"))


def test_a_per_minor_wheel_passes(tmp_path):
    cpu = matrix.load().flavour("cpu")
    wheel = make_wheel(tmp_path, "pt213cpu", "2.13.0+cpu", "torch==2.13.*")
    summary = wheel_check.check(wheel, cpu, Version("2.13.0"))
    assert summary["variant"] == "pt213cpu" and summary["stable_abi"] is False
    assert "stable ABI" not in wheel_check.describe(summary)


def test_a_stable_wheel_passes_its_stable_row(tmp_path):
    """stable211cpu, built against PyPI's torch 2.11.0 (a CUDA build: the stable CPU wheel links no CUDA)."""
    m = matrix.load()
    sv = m.stable_variant("cpu")
    wheel = make_wheel(tmp_path, sv.name, "2.11.0", "torch>=2.11", **STABLE)
    summary = wheel_check.check(wheel, sv.row, sv.torch, stable=True)
    assert summary["variant"] == "stable211cpu" and summary["stable_abi"] is True
    assert "variant   stable211cpu (torch 2.11.0; stable ABI, every torch >= 2.11)" in wheel_check.describe(summary)
    assert wheel_check.expected_variant(m.flavour("cu126"), sv.torch, stable=True) == "stable211cu12"
    assert wheel_check.expected_variant(m.flavour("cu130"), sv.torch, stable=True) == "stable211cu13"


@pytest.mark.parametrize(
    "variant, requires, info, tag, problem",
    [
        ("stable211cpu", "torch>=2.11", {}, "abi3", "stable ABI: build info STABLE_ABI=False"),
        ("stable211cpu", "torch>=2.11", {**STABLE, "STABLE_ABI_FLOOR": "2.10"}, "abi3", "expected True and '2.11'"),
        ("stable211cpu", "torch==2.11.*", STABLE, "abi3", r"Requires-Dist: torch\['==2.11.\*'\]"),
        ("pt211cpu", "torch>=2.11", STABLE, "abi3", "variant: wheel says pt211cpu"),
        ("stable211cpu", "torch>=2.11", STABLE, "cp310", "not an abi3 wheel"),
    ],
)
def test_a_stable_row_rejects(tmp_path, variant, requires, info, tag, problem):
    sv = matrix.load().stable_variant("cpu")
    wheel = make_wheel(tmp_path, variant, "2.11.0", requires, tag, **info)
    with pytest.raises(wheel_check.WheelCheckError, match=problem):
        wheel_check.check(wheel, sv.row, sv.torch, stable=True)


def test_a_stable_wheel_built_against_newer_torch_is_rejected(tmp_path):
    """Newer torch headers compile code that the floor's reject: a stable wheel must be built against the floor."""
    sv = matrix.load().stable_variant("cpu")
    wheel = make_wheel(tmp_path, sv.name, "2.13.0+cpu", "torch>=2.11", **STABLE)
    with pytest.raises(wheel_check.WheelCheckError, match="a stable wheel is built against the floor 2.11"):
        wheel_check.check(wheel, sv.row, Version("2.13.0"), stable=True)


def test_a_stable_build_in_a_per_minor_row_is_rejected(tmp_path):
    cpu = matrix.load().flavour("cpu")
    wheel = make_wheel(tmp_path, "pt213cpu", "2.13.0+cpu", "torch==2.13.*", **STABLE)
    with pytest.raises(wheel_check.WheelCheckError, match="a stable-ABI build where the row is a per-minor one"):
        wheel_check.check(wheel, cpu, Version("2.13.0"))


def test_every_package_of_the_tree_is_in_the_wheel():
    """pyproject.toml lists the packages a wheel ships by hand (setuptools' packages): every folder of visdet_ops/
    with an __init__.py must be there (visdet_ops.composite once was not: the wheel failed to import)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    root = Path(__file__).resolve().parents[1]
    if not (root / "visdet_ops").is_dir():
        pytest.skip("needs the source tree (an installed wheel's tests run from a copy without the package)")
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "visdet_ops").rglob("__init__.py")}
    assert found == listed, f"pyproject.toml [tool.setuptools] packages: missing {sorted(found - listed)}"
    # The top-level modules: the doctor's launcher only, never the build's rules beside setup.py.
    assert {f"{m}.py" for m in setuptools["py-modules"]} == wheel_check.SHIPPED_MODULES


def test_a_wheel_shipping_the_build_rules_is_rejected(tmp_path):
    wheel = make_wheel(tmp_path, "pt213cpu", "2.13.0+cpu", "torch==2.13.*")
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("visdet_build.py", "")
    with pytest.raises(wheel_check.WheelCheckError, match=r"top-level modules that are not shipped: \['visdet_build"):
        wheel_check.check(wheel, matrix.load().flavour("cpu"), Version("2.13.0"))
