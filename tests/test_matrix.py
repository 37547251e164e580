from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from ci import matrix as variants

ROOT = Path(__file__).resolve().parent.parent


def test_matrix_loads_and_is_consistent():
    m = variants.load()
    names = [f.name for f in m.flavours]
    assert names[0] == "cpu" and len(names) == len(set(names))
    for f in m.flavours:
        assert list(f.torch) == sorted(f.torch)
        if f.is_cuda:
            assert f.name == f"cu{f.version.major}{f.version.minor}"
            assert f.arch_list[-1].endswith("+PTX")
    assert m.tests_torch in m.flavour(m.tests_flavour).torch


def test_cuda13_drops_volta():
    cu130 = variants.load().flavour("cu130")
    assert all(Version(a.removesuffix("+PTX")) >= Version("7.5") for a in cu130.arch_list)


def test_variant_names():
    assert variants.variant_name("2.14.1", "cu130") == "pt214cu130"
    assert variants.variant_name(Version("2.13.0+cpu"), "cpu") == "pt213cpu"


def test_torch_for_picks_newest_patch():
    cpu = variants.load().flavour("cpu")
    assert cpu.torch_for("2.13") == Version("2.13.0")
    with pytest.raises(ValueError, match="torch 1.0 has no cpu build"):
        cpu.torch_for("1.0")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "matrix.toml"
    p.write_text(text)
    return p


BASE = """
schema = 1
version = "0.1.0"
[tests]
torch = "2.13.0"
flavour = "cpu"
[[cuda]]
name = "cpu"
torch = ["2.13.0"]
torch_index = "x"
manylinux_image = "y"
"""


@pytest.mark.parametrize(
    "extra, match",
    [
        ('[[cuda]]\nname = "cpu"\ntorch = ["2.1.0"]\ntorch_index = "x"\nmanylinux_image = "y"\n', "duplicate name"),
        (
            '[[cuda]]\nname = "cu130"\nversion = "13.0"\narch_list = ["7.0", "9.0+PTX"]\ntorch = ["2.9.1"]\n'
            'torch_index = "x"\nmanylinux_image = "y"\n',
            "cannot target sm_70",
        ),
        (
            '[[cuda]]\nname = "cu121"\nversion = "12.1"\narch_list = ["8.0", "10.0+PTX"]\ntorch = ["2.1.2"]\n'
            'torch_index = "x"\nmanylinux_image = "y"\n',
            "cannot target sm_100",
        ),
        (
            '[[cuda]]\nname = "cu124"\nversion = "12.4"\narch_list = ["8.0", "9.0"]\ntorch = ["2.4.1"]\n'
            'torch_index = "x"\nmanylinux_image = "y"\n',
            r"must carry \+PTX",
        ),
        (
            '[[cuda]]\nname = "cu999"\nversion = "12.4"\narch_list = ["9.0+PTX"]\ntorch = ["2.4.1"]\n'
            'torch_index = "x"\nmanylinux_image = "y"\n',
            "name must be 'cu124'",
        ),
        (
            '[[cuda]]\nname = "cu124"\nversion = "12.4"\narch_list = ["9.0+PTX"]\ntorch = ["2.5.1", "2.4.1"]\n'
            'torch_index = "x"\nmanylinux_image = "y"\n',
            "ascending",
        ),
    ],
)
def test_bad_matrices_are_rejected(tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        variants.load(_write(tmp_path, BASE + extra))


def test_build_targets_are_the_newest_patch_of_each_minor():
    cu130 = variants.load().flavour("cu130")
    targets = cu130.build_targets()
    assert Version("2.14.1") in targets and Version("2.14.0") not in targets
    assert len({(t.major, t.minor) for t in targets}) == len(targets)
    assert cu130.patches_of("2.14.1") == [Version("2.14.0"), Version("2.14.1")]


def test_github_matrix_rows_are_every_variant():
    """A release builds every variant of the matrix, not only the newest torch of each row."""
    m = variants.load()
    rows = variants.github_matrix(m)
    want = {variants.variant_name(t, f.name) for f in m.flavours for t in f.build_targets()}
    assert [r["variant"] for r in rows] == sorted(want, key=[r["variant"] for r in rows].index)
    assert {r["variant"] for r in rows} == want and len(rows) == len(want) > 40
    assert all(set(r) == {"flavour", "torch", "variant", "image"} for r in rows)
    newest = variants.github_matrix(m, newest_only=True)
    assert len(newest) == len(m.flavours) and {r["variant"] for r in newest} <= want


def test_no_version_outside_the_matrix():
    """Build scripts take versions from ci/matrix.toml, never literals."""
    import re

    # Quoted CUDA flavours or torch releases, or pinned torch requirements.
    pattern = re.compile(r"""["']cu1\d\d["']|["']2\.\d+\.\d+["']|torch\s*==\s*2\.\d""")
    for rel in ("noxfile.py", "setup.py", "pyproject.toml"):
        text = (ROOT / rel).read_text()
        offenders = [line for line in text.splitlines() if pattern.search(line) and "example" not in line.lower()]
        assert offenders == [], f"{rel} names versions: {offenders}"


def test_docs_matrix_is_up_to_date():
    want = variants.markdown(variants.load())
    assert (ROOT / "docs" / "matrix.md").read_text() == want, "run: python -m ci.matrix --markdown > docs/matrix.md"


def test_abi3_floor_has_one_value():
    """visdet_ops/_build_rules.py holds the abi3 floor; pyproject.toml's static fields must agree with it."""
    try:
        import tomllib
    except ImportError:  # Python 3.10 (the release's test step): tomli is in the test extra
        import tomli as tomllib

    floor = variants.rules.MIN_PYTHON
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == f">={floor[0]}.{floor[1]}"
    assert pyproject["tool"]["cibuildwheel"]["build"] == f"{variants.rules.ABI3_TAG}-manylinux_x86_64"
    assert variants.rules.PY_LIMITED_API == f"0x{floor[0]:02X}{floor[1]:02X}0000"
