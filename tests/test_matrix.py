from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from ci import matrix as variants

try:
    import tomllib
except ImportError:  # Python 3.10 (the release's test step): tomli is in the test extra
    import tomli as tomllib

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


def _row(name: str, torch: list[str], version: str | None = None, arch_list=(), image: str = "y") -> str:
    """One [[cuda]] table, built for x86_64 only (the cpu row has no CUDA version and no archs)."""
    cuda = f'version = "{version}"\narch_list = {json.dumps(list(arch_list))}\n' if version else ""
    return (
        f'[[cuda]]\nname = "{name}"\n{cuda}torch = {json.dumps(torch)}\ntorch_index = "x"\nplatforms = ["x86_64"]\n'
        f'[cuda.x86_64]\nmanylinux_image = "{image}"\n'
    )


BASE = """
schema = 1
version = "0.1.0"
[platforms.x86_64]
runner = "r"
[tests]
torch = "2.13.0"
flavour = "cpu"
""" + _row("cpu", ["2.13.0"])


@pytest.mark.parametrize(
    "extra, match",
    [
        (_row("cpu", ["2.4.0"]), "duplicate name"),
        (_row("cu130", ["2.9.1"], "13.0", ["7.0", "9.0+PTX"]), "cannot target sm_70"),
        (_row("cu121", ["2.4.1"], "12.1", ["8.0", "10.0+PTX"]), "cannot target sm_100"),
        (_row("cu124", ["2.4.1"], "12.4", ["8.0", "9.0"]), r"must carry \+PTX"),
        (_row("cu999", ["2.4.1"], "12.4", ["9.0+PTX"]), "name must be 'cu124'"),
        (_row("cu124", ["2.5.1", "2.4.1"], "12.4", ["9.0+PTX"]), "ascending"),
        (_row("cu121", ["2.3.1", "2.4.1"], "12.1", ["9.0+PTX"]), r"torch 2\.3\.1 is older than visdet-ops' floor 2\.4"),
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
    """A release builds every variant of the matrix on every platform torch ships its row for, not only the newest
    torch of each row, and the stable wheels; each job runs on its platform's runner."""
    m = variants.load()
    rows = variants.github_matrix(m)
    assert all(set(r) == {"flavour", "torch", "variant", "platform", "runner", "image", "session"} for r in rows)
    assert {r["platform"] for r in rows} == {"x86_64", "aarch64"} == set(m.platforms)
    for platform in m.platforms:
        mine = [r for r in rows if r["platform"] == platform]
        assert all(r["runner"] == m.runners[platform] for r in mine)
        views = m.platform_flavours(platform)
        want = {variants.variant_name(t, f.name) for f in views for t in f.build_targets()}
        stable = {sv.name for sv in m.stable if platform in sv.platforms}
        per_minor = [r for r in mine if r["variant"] not in stable]
        assert {r["variant"] for r in per_minor} == want and len(per_minor) == len(want) > 10
        assert all(r["session"] == f"build-{r['flavour']}" for r in per_minor)
        assert all(r["image"] == m.flavour(r["flavour"], platform).manylinux_image for r in per_minor)
        # The stable rows come after the platform's per-minor ones, each built by its own session against the floor.
        for r in mine[len(per_minor) :]:
            sv = m.stable_variant(r["variant"]).on(platform)
            assert r == {
                "flavour": sv.row.name,
                "torch": str(sv.torch),
                "variant": sv.name,
                "platform": platform,
                "runner": m.runners[platform],
                "image": sv.row.manylinux_image,
                "session": f"build-stable-{sv.flavour}",
            }
    assert [r["variant"] for r in rows if r["variant"].startswith("stable")] == [
        "stable211cpu", "stable211cu12", "stable211cu13", "stable211cpu", "stable211cu13"
    ]  # fmt: skip
    newest = variants.github_matrix(m, newest_only=True)
    per_platform = sum(len(m.platform_flavours(p)) for p in m.platforms)
    assert len(newest) == per_platform + sum(len(sv.platforms) for sv in m.stable)


def test_platforms_of_the_matrix():
    """aarch64: the CPU row for every release, CUDA 13.0 from torch 2.11 (PyPI's aarch64 torch), with Thor's sm_110;
    the stable CPU and CUDA 13 wheels; rows torch builds for x86_64 only refuse another platform by name."""
    m = variants.load()
    cpu = m.flavour("cpu", "aarch64")
    assert cpu.platform == "aarch64" and cpu.torch == m.flavour("cpu").torch
    assert cpu.pypi_default[-1] == "2.10" and cpu.manylinux_image.endswith("_aarch64")
    cu130 = m.flavour("cu130", "aarch64")
    assert cu130.torch[0] == Version("2.11.0") and "11.0" in cu130.arch_list and "7.5" not in cu130.arch_list
    assert cu130.torch_from_pypi(Version("2.13.0")) and not m.flavour("cpu", "aarch64").torch_from_pypi(
        Version("2.13.0")
    )
    with pytest.raises(KeyError, match="ships no aarch64 build of the cu118 row"):
        m.flavour("cu118", "aarch64")
    assert {sv.name for sv in m.stable if "aarch64" in sv.platforms} == {"stable211cpu", "stable211cu13"}
    with pytest.raises(KeyError, match="stable211cu12 has no aarch64 build"):
        m.stable_variant("cu12").on("aarch64")
    assert m.stable_variant("cu13").on("aarch64").torch == Version("2.11.0")
    published = m.published()
    assert "stable211cu13" in published["aarch64"]["variants"] and "pt210cpu" in published["aarch64"]["variants"]
    assert "pt25cu124" not in published["aarch64"]["variants"] and "pt25cu124" in published["x86_64"]["variants"]
    assert published["aarch64"]["newest_torch"] == "2.15"


@pytest.mark.parametrize(
    "row, match",
    [
        (
            'platforms = ["x86_64", "aarch64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n',
            r"needs a \[cuda.aarch64\] table",
        ),
        ('platforms = ["x86_64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n[cuda.aarch64]\nmanylinux_image = "z"\n',
         "'aarch64' is not in its platforms"),
        ('platforms = ["x86_64", "riscv64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n', r"\['riscv64'\] are none of"),
        ('platforms = ["x86_64", "aarch64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n[cuda.aarch64]\n'
         'manylinux_image = "z"\nsince = "2.12.0"\n', "is not a release of the row"),
        ('platforms = ["x86_64", "aarch64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n[cuda.aarch64]\n'
         'manylinux_image = "z"\nimage = "w"\n', "unknown keys"),
    ],
)  # fmt: skip
def test_bad_platform_tables_are_rejected(tmp_path, row, match):
    text = BASE.replace('platforms = ["x86_64"]\n[cuda.x86_64]\nmanylinux_image = "y"\n', row)
    text = text.replace(
        '[platforms.x86_64]\nrunner = "r"\n', '[platforms.x86_64]\nrunner = "r"\n[platforms.aarch64]\nrunner = "a"\n'
    )
    with pytest.raises(ValueError, match=match):
        variants.load(_write(tmp_path, text))


def test_stable_variants_of_the_matrix():
    """[stable]: cpu, CUDA 12 from the oldest CUDA 12 row that ships torch 2.11, CUDA 13 from cu130; each built
    against the floor's newest patch in its row, with the row's archs, image and toolchain."""
    m = variants.load()
    by_name = {sv.name: sv for sv in m.stable}
    assert list(by_name) == ["stable211cpu", "stable211cu12", "stable211cu13"]
    assert {n: sv.row.name for n, sv in by_name.items()} == {
        "stable211cpu": "cpu",
        "stable211cu12": "cu126",
        "stable211cu13": "cu130",
    }
    for sv in m.stable:
        assert (sv.torch.major, sv.torch.minor) == variants.rules.STABLE_ABI_FLOOR
        assert sv.torch == sv.floor_patches()[-1] and sv.torch in sv.row.torch
        assert sv.arch_list == sv.row.arch_list and sv.image == sv.row.manylinux_image
        assert sv.toolchain == sv.row.toolchain and sv.is_cuda == sv.row.is_cuda
        assert m.stable_variant(sv.flavour) is sv and m.stable_for_row(sv.row.name) is sv
    # The CUDA 12 wheel is built with the oldest CUDA 12 that ships the floor torch: every CUDA-12 torch loads it.
    cu12_rows = [f for f in m.flavours if f.is_cuda and f.version.major == 12 and f.patches_of("2.11.0")]
    assert by_name["stable211cu12"].row.version == min(f.version for f in cu12_rows)
    assert m.stable_for_row("cu128") is None
    with pytest.raises(KeyError, match="no stable variant 'cu11'"):
        m.stable_variant("cu11")


def test_stable_flavours_agree_with_build_rules():
    """The import check and the doctor recommend the stable variants of _build_rules.STABLE_ABI_CUDA_MAJORS (the
    package ships no matrix): they must be exactly the wheels [stable] builds."""
    m = variants.load()
    assert tuple(sv.flavour for sv in m.stable) == variants.rules.stable_flavours() == ("cpu", "cu12", "cu13")
    for sv in m.stable:
        cuda = f"{sv.row.version.major}.{sv.row.version.minor}" if sv.is_cuda else None
        assert variants.rules.recommended_variant(str(sv.torch), cuda) == sv.name


STABLE_ROWS = _row("cu126", ["2.10.0", "2.11.0", "2.11.1", "2.13.0"], "12.6", ["8.0", "9.0+PTX"], "img126") + _row(
    "cu130", ["2.11.0", "2.13.0"], "13.0", ["9.0", "12.0+PTX"], "img130"
)


def test_a_stable_table_loads(tmp_path):
    text = BASE.replace('torch = ["2.13.0"]', 'torch = ["2.11.0", "2.13.0"]') + STABLE_ROWS
    m = variants.load(_write(tmp_path, text + '[stable]\ncpu = "cpu"\ncu12 = "cu126"\ncu13 = "cu130"\n'))
    cu12 = m.stable_variant("cu12")
    assert (cu12.name, str(cu12.torch), cu12.image) == ("stable211cu12", "2.11.1", "img126")
    assert cu12.floor_patches() == [Version("2.11.0"), Version("2.11.1")]
    # No [stable] table: no stable wheels (and nothing recommends them from this matrix).
    assert variants.load(_write(tmp_path, BASE)).stable == ()


@pytest.mark.parametrize(
    "stable, match",
    [
        # The cpu row of BASE ships torch 2.13.0 only: a stable wheel is built against the floor.
        ('cpu = "cpu"\ncu12 = "cu126"\ncu13 = "cu130"\n', r"lists no torch 2\.11 \(the stable floor"),
        ('cpu = "cpu"\ncu12 = "cu126"\ncu13 = "cu132"\n', "no \\[\\[cuda\\]\\] row of that name"),
        ('cpu = "cpu"\ncu12 = "cu130"\ncu13 = "cu130"\n', "builds the stable flavour 'cu13', not 'cu12'"),
        ('cpu = "cpu"\ncu13 = "cu130"\n', "make them agree"),
    ],
)
def test_bad_stable_tables_are_rejected(tmp_path, stable, match):
    text = BASE + STABLE_ROWS + "[stable]\n" + stable
    if "lists no torch" not in match:
        text = text.replace('torch = ["2.13.0"]', 'torch = ["2.11.0", "2.13.0"]', 1)
    with pytest.raises(ValueError, match=match):
        variants.load(_write(tmp_path, text))


def test_the_floor_is_written_in_build_rules_only():
    """ci/matrix.toml names the [[cuda]] rows of the stable wheels, never the floor (nothing to drift)."""
    table = tomllib.loads(variants.MATRIX_PATH.read_text())["stable"]
    assert all(isinstance(v, str) and not v.startswith("stable") for v in table.values())
    assert set(table) == set(variants.rules.stable_flavours())


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
    floor = variants.rules.MIN_PYTHON
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == f">={floor[0]}.{floor[1]}"
    m = variants.load()
    assert pyproject["tool"]["cibuildwheel"]["build"] == [
        f"{variants.rules.ABI3_TAG}-manylinux_{platform}" for platform in m.platforms
    ]
    assert variants.rules.PY_LIMITED_API == f"0x{floor[0]:02X}{floor[1]:02X}0000"


def test_the_wheels_workflow_runs_the_session_each_row_names():
    """wheels.yml builds every row, stable ones included, through the nox session the row names (the one a person
    runs): `nox -s build-<flavour>` or `nox -s build-stable-<flavour>`, both made by noxfile.py from the matrix."""
    workflow = (ROOT / ".github" / "workflows" / "wheels.yml").read_text()
    assert (
        'run: nox -s "${{ matrix.session }}" -- --torch "${{ matrix.torch }}" --platform "${{ matrix.platform }}"'
        in (workflow)
    )
    assert "runs-on: ${{ matrix.runner }}" in workflow
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'name=f"build-{flavour.name}"' in noxfile and "name=stable.session" in noxfile
    assert "for _stable in MATRIX.stable:" in noxfile
    rows = variants.github_matrix(variants.load())
    assert {r["session"] for r in rows if r["variant"].startswith("stable")} == {
        "build-stable-cpu",
        "build-stable-cu12",
        "build-stable-cu13",
    }


def test_readme_platforms_table_is_up_to_date():
    text = (ROOT / "README.md").read_text()
    assert variants.readme(variants.load(), text) == text, "run: python -m ci.matrix --readme"
    assert "| aarch64 | `stable211cu13` |" in text
