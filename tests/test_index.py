"""The wheel index builder, on a synthetic wheel (no compiler needed)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci import index


def fake_wheel(
    house: Path,
    variant: str,
    torch_version: str,
    cuda: str | None,
    version: str = "0.1.0",
    stable: bool = False,
    platform: str = "x86_64",
    folder: str | None = None,
) -> Path:
    """A wheel of `variant` in its folder of the wheelhouse `house` (or in `folder`, a wrong one)."""
    dest = house / (folder or variant)
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"visdet_ops-{version}+{variant}-cp310-abi3-manylinux_2_28_{platform}.whl"
    info = f"TORCH_VERSION = {torch_version!r}\nTORCH_CUDA_VERSION = {cuda!r}\nWITH_CUDA = {cuda is not None}\n"
    if stable:
        info += "STABLE_ABI = True\nSTABLE_ABI_FLOOR = '2.11'\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            f"visdet_ops-{version}+{variant}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: visdet-ops\nVersion: {version}+{variant}\nRequires-Python: >=3.10\n",
        )
        zf.writestr("visdet_ops/_build_info.py", info)
    return wheel


def test_index_pages(tmp_path):
    house = tmp_path / "wheelhouse"
    w1 = fake_wheel(house, "pt213cpu", "2.13.0+cpu", None)
    w2 = fake_wheel(house, "pt214cu130", "2.14.1", "13.0")
    out = tmp_path / "index"
    assert index.build(house, out, "https://example.org/whl") == ["pt213cpu", "pt214cu130"]

    for variant, wheel in (("pt213cpu", w1), ("pt214cu130", w2)):
        page = (out / variant / "index.html").read_text()
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f'href="{wheel.name}#sha256={digest}"' in page
        hrefs = re.findall(r'href="([^"]+)"', page)
        assert hrefs and all("#sha256=" in h for h in hrefs)
        assert (out / variant / wheel.name).read_bytes() == wheel.read_bytes()
        meta = (out / variant / f"{wheel.name}.metadata").read_bytes()
        assert f'data-dist-info-metadata="sha256={hashlib.sha256(meta).hexdigest()}"' in page
        simple = (out / variant / "simple" / "visdet-ops" / "index.html").read_text()
        # The page is <variant>/simple/visdet-ops/: its link must lead back to <variant>/<wheel>.
        (href,) = re.findall(r'href="([^"#]+)#', simple)
        assert href == f"../../{wheel.name}" and f"#sha256={digest}" in simple
        resolved = (out / variant / "simple" / "visdet-ops" / href).resolve()
        assert resolved.read_bytes() == wheel.read_bytes()
        assert 'data-requires-python="&gt;=3.10"' in simple
    # Every patch release of a minor in the matrix gets an alias to the minor's wheel.
    names = {p.name for p in out.iterdir()}
    assert {"torch-2.14.0+cu130", "torch-2.14.1+cu130", "torch-2.13.0+cpu"} <= names
    for patch in ("2.14.0", "2.14.1"):
        alias = (out / f"torch-{patch}+cu130" / "index.html").read_text()
        assert f'href="../pt214cu130/{w2.name}#sha256=' in alias
        assert (out / f"torch-{patch}+cu130" / f"../pt214cu130/{w2.name}").resolve().exists()
    top = (out / "index.html").read_text()
    assert "pip install visdet-ops -f https://example.org/whl/pt214cu130/" in top


@pytest.mark.parametrize(
    "variant, torch_version, cuda, options, match",
    [
        ("pt214cu130", "2.14.1", "13.0", {"folder": "pt213cpu"}, "does not match its folder pt213cpu"),
        # A per-minor build labelled as a stable variant (or the reverse) is refused: the folder promises a range of
        # torch releases that the build does not serve.
        ("stable211cpu", "2.11.0+cpu", None, {}, "a per-minor build .* in the folder stable211cpu"),
        ("pt211cpu", "2.11.0+cpu", None, {"stable": True}, "a stable-ABI build .* in the folder pt211cpu"),
        ("pt213cpu", "2.13.0", None, {"platform": "riscv64"}, "platform tags name no machine"),
    ],
)
def test_index_rejects(tmp_path, variant, torch_version, cuda, options, match):
    fake_wheel(tmp_path / "wheelhouse", variant, torch_version, cuda, **options)
    with pytest.raises(ValueError, match=match):
        index.build(tmp_path / "wheelhouse", tmp_path / "index")


def test_releases_accumulate_in_one_index(tmp_path):
    """Two releases, wheels hosted elsewhere (a release's download URL): both versions stay listed."""
    site, assets = tmp_path / "site", tmp_path / "assets"
    w1 = fake_wheel(tmp_path / "r1", "pt213cpu", "2.13.0+cpu", None, "0.1.0")
    index.build(tmp_path / "r1", site, None, str(site), "https://example.org/dl/v0.1.0", assets / "v0.1.0")
    w2 = fake_wheel(tmp_path / "r2", "pt213cpu", "2.13.0+cpu", None, "0.1.1")
    index.build(tmp_path / "r2", site, None, str(site), "https://example.org/dl/v0.1.1", assets / "v0.1.1")
    for tag, wheel in (("v0.1.0", w1), ("v0.1.1", w2)):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        for page in ("pt213cpu/index.html", "pt213cpu/simple/visdet-ops/index.html", "torch-2.13.0+cpu/index.html"):
            assert f'href="https://example.org/dl/{tag}/{wheel.name}#sha256={digest}"' in (site / page).read_text()
        meta = (assets / tag / f"{wheel.name}.metadata").read_bytes()
        assert meta == zipfile.ZipFile(wheel).read(f"{wheel.name.split('-cp310')[0]}.dist-info/METADATA")
        assert (assets / tag / wheel.name).read_bytes() == wheel.read_bytes()
    assert not list(site.rglob("*.whl")), "release mode: the site holds pages only"
    # A published file never changes.
    w1.write_bytes(w1.read_bytes() + b"\0")
    with pytest.raises(ValueError, match="must not replace a published wheel"):
        index.build(tmp_path / "r1", site, None, str(site), "https://example.org/dl/v0.1.0", assets / "v0.1.0")


def test_previous_index_read_over_http(tmp_path):
    from ci import smoke

    site = tmp_path / "site"
    fake_wheel(tmp_path / "r1", "pt213cpu", "2.13.0+cpu", None, "0.1.0")
    index.build(tmp_path / "r1", site, None, None, "https://example.org/dl/v0.1.0", tmp_path / "a")
    server, url = smoke.serve(site)
    try:
        assert [e["version"] for e in index.read_manifest(url)] == ["0.1.0+pt213cpu"]
        assert index.read_manifest(url + "/nothing-here") == []  # the first release: no index yet
    finally:
        server.shutdown()


def test_stable_variant_folders(tmp_path):
    """A stable wheel gets its variant folder (find-links and simple pages, sha256 on every link) and its pip line on
    the top page, but no torch-<X.Y.Z>+<flavour> alias: the per-minor wheel stays alone on the alias pages."""
    house = tmp_path / "wheelhouse"
    per_minor = fake_wheel(house, "pt211cpu", "2.11.0+cpu", None)
    stable_cpu = fake_wheel(house, "stable211cpu", "2.11.0", None, stable=True)
    stable_cu13 = fake_wheel(house, "stable211cu13", "2.11.0", "13.0", stable=True)
    out = tmp_path / "index"
    assert index.build(house, out, "https://example.org/whl") == ["pt211cpu", "stable211cpu", "stable211cu13"]
    for variant, wheel in (("stable211cpu", stable_cpu), ("stable211cu13", stable_cu13)):
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert f'href="{wheel.name}#sha256={digest}"' in (out / variant / "index.html").read_text()
        simple = (out / variant / "simple" / "visdet-ops" / "index.html").read_text()
        assert f'href="../../{wheel.name}#sha256={digest}"' in simple
    manifest = json.loads((out / "manifest.json").read_text())["wheels"]
    assert {e["variant"]: e["aliases"] for e in manifest} == {
        "pt211cpu": ["torch-2.11.0+cpu"],
        "stable211cpu": [],
        "stable211cu13": [],
    }
    alias = (out / "torch-2.11.0+cpu" / "index.html").read_text()
    assert per_minor.name in alias and "stable211" not in alias
    assert not [p.name for p in out.iterdir() if p.name.startswith("torch-") and p.name != "torch-2.11.0+cpu"]
    top = (out / "index.html").read_text()
    lines = [line for line in top.splitlines() if "pip install" in line]
    # The stable variants first, with what they serve.
    assert ["stable211cpu/" in lines[0], "stable211cu13/" in lines[1], "pt211cpu/" in lines[2]] == [True] * 3
    assert "pip install visdet-ops -f https://example.org/whl/stable211cu13/</code> (one build for every torch " in top
    assert "&gt;= 2.11 with CUDA 13)" in lines[1] and "(one CPU build for every torch &gt;= 2.11)" in lines[0]


def test_smoke_treats_stable_folders_as_variants(tmp_path, monkeypatch):
    """ci.smoke checks every variant folder, stable ones included (beside the [tests] torch by default); the
    mismatch check (another torch minor) is for a per-minor CPU wheel, and its fix line is the recommended variant.
    A variant whose code the caller ran the whole suite on (the rehearsal's per-minor wheel) gets the installed-package
    tests only; every other one the whole suite."""
    from ci import matrix, smoke

    for name in ("pt213cpu", "stable211cpu", "stable211cu13", "torch-2.13.0+cpu", "simple-junk"):
        (tmp_path / name).mkdir()
    seen, mismatch = [], []

    def check_variant(variant, url, work, env, versions=None, source=None, stable_torch=None, whole_suite=True):
        seen.append((variant, smoke.smoke_torch_minor(variant, stable_torch), versions, whole_suite))
        return {"variant": variant, "torch": "x", "modes": {}, "tests": "ok"}

    monkeypatch.setattr(smoke, "check_variant", check_variant)
    monkeypatch.setattr(smoke, "check_mismatch", lambda variant, *a: mismatch.append(variant))
    versions = ["0.1.0+pt213cpu", "0.1.1+pt213cpu", "0.1.0+stable211cpu"]
    smoke.run_smoke(
        tmp_path,
        "http://127.0.0.1:1",
        tmp_path / "work",
        versions=versions,
        mismatch_torch="torch==x",
        suite_tested=frozenset({"pt213cpu"}),
    )
    tests = matrix.load().tests_torch
    assert seen == [
        ("pt213cpu", "2.13", ["0.1.0+pt213cpu", "0.1.1+pt213cpu"], False),
        ("stable211cpu", f"{tests.major}.{tests.minor}", ["0.1.0+stable211cpu"], True),
        ("stable211cu13", f"{tests.major}.{tests.minor}", [], True),
    ]
    from ci.scratch import pytest_command

    command = pytest_command(sys.executable, paths=smoke.INSTALLED_PACKAGE_TESTS)
    assert command[3 : 3 + len(smoke.INSTALLED_PACKAGE_TESTS)] == list(smoke.INSTALLED_PACKAGE_TESTS)
    assert "tests" not in command
    assert all((Path(__file__).resolve().parents[1] / path).is_file() for path in smoke.INSTALLED_PACKAGE_TESTS)
    # A deselected node id that no longer exists deselects nothing, silently: each must name a file and a test in it.
    from ci.scratch import EMULATION_DESELECT, SOURCE_TREE_ONLY

    for node in (*EMULATION_DESELECT, *SOURCE_TREE_ONLY):
        path, _, name = node.partition("::")
        source = (Path(__file__).resolve().parents[1] / path).read_text()
        assert not name or f"\ndef {name}(" in source, node
    assert {n.partition("::")[0] for n in EMULATION_DESELECT} <= set(smoke.INSTALLED_PACKAGE_TESTS)
    assert mismatch == ["pt213cpu"]
    assert smoke.smoke_torch_minor("stable211cpu", "2.14") == "2.14"
    assert smoke.is_variant_folder("stable211cu12") and not smoke.is_variant_folder("torch-2.13.0+cpu")


def test_rehearsal_adds_the_stable_cpu_wheel_to_release_1(monkeypatch):
    """ci.release rehearsal: release 1 of the cpu row also holds stable211cpu, built against the floor torch with
    VISDET_OPS_STABLE_ABI=1 (and the same fallback to PyPI's torch where the row's index is unreachable); the
    merged index must list both versions of the per-minor wheel and release 1 of the stable one."""
    from ci import matrix, release

    m = matrix.load()
    stable = m.stable_for_row("cpu")
    assert (stable.name, str(stable.torch)) == ("stable211cpu", "2.11.0")
    monkeypatch.setattr(release, "_reachable", lambda url: False)
    env = release.rehearsal_environment(m.flavour("cpu"), stable.torch, stable=True)
    assert env["VISDET_OPS_STABLE_ABI"] == "1" and env["VISDET_OPS_CUDA"] == "0"
    assert json.loads(env["VISDET_OPS_TORCH_PIP_ARGS"]) == ["torch==2.11.0"]
    assert release.rehearsal_environment(m.flavour("cpu"), m.tests_torch)["VISDET_OPS_STABLE_ABI"] == "0"
    monkeypatch.setattr(release, "_reachable", lambda url: True)
    reachable = release.rehearsal_environment(m.flavour("cpu"), stable.torch, stable=True)
    assert json.loads(reachable["VISDET_OPS_TORCH_PIP_ARGS"]) == m.flavour("cpu").torch_pip_args(stable.torch)
    assert release.expected_listing("pt213cpu", ["0.1.0", "0.1.1"], "stable211cpu") == {
        "pt213cpu": ["0.1.0+pt213cpu", "0.1.1+pt213cpu"],
        "stable211cpu": ["0.1.0+stable211cpu"],
    }
    assert release.expected_listing("pt213cpu", ["0.1.0", "0.1.1"], None) == {
        "pt213cpu": ["0.1.0+pt213cpu", "0.1.1+pt213cpu"]
    }


def test_cibuildwheel_passes_the_stable_switch_into_its_container():
    """build_environment's variables reach the build inside cibuildwheel's container: each one must be passed."""
    from ci import matrix, release

    m = matrix.load()
    env = release.build_environment(m.flavour("cu130"), m.stable_variant("cu13").torch, stable=True)
    assert env["VISDET_OPS_STABLE_ABI"] == "1" and env["TORCH_CUDA_ARCH_LIST"]
    assert set(env) <= set(release.cibw_config()["environment-pass"])


def test_rehearsal_from_an_exported_tree_says_it_needs_a_git_checkout(tmp_path):
    """An exported tree (git archive, a tarball) has no git metadata: the rehearsal stops with one line naming the
    tree and what to do, not with git's CalledProcessError traceback; a git checkout is copied file by file."""
    from ci import release

    exported = tmp_path / "exported"
    (exported / "ci").mkdir(parents=True)
    (exported / "ci" / "matrix.toml").write_text("schema = 1\n")
    with pytest.raises(SystemExit) as stop:
        release._copy_tree(tmp_path / "copy", root=exported)
    message = str(stop.value)
    assert "not a git checkout" in message and str(exported) in message and "\n" not in message

    checkout = tmp_path / "checkout"
    (checkout / "ci").mkdir(parents=True)
    (checkout / "ci" / "matrix.toml").write_text("schema = 1\n")
    (checkout / ".gitignore").write_text("build/\n")
    (checkout / "build").mkdir()
    (checkout / "build" / "junk.o").write_text("")
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    copy = release._copy_tree(tmp_path / "copy", root=checkout)
    assert (copy / "ci" / "matrix.toml").read_text() == "schema = 1\n"
    assert not (copy / "build").exists()


def test_a_variant_lists_its_wheels_for_both_platforms_side_by_side(tmp_path):
    """One variant folder, one find-links page and one PEP 503 page for its x86_64 and aarch64 wheels (pip picks by
    tag); each manifest entry names its platform, and the top page lists the variant's platforms."""
    house = tmp_path / "wheelhouse"
    x86 = fake_wheel(house, "pt210cpu", "2.10.0", None)
    arm = fake_wheel(house, "pt210cpu", "2.10.0", None, platform="aarch64")
    out = tmp_path / "index"
    assert index.build(house, out) == ["pt210cpu"]
    for page in (out / "pt210cpu" / "index.html", out / "pt210cpu" / "simple" / "visdet-ops" / "index.html"):
        text = page.read_text()
        for wheel in (x86, arm):
            assert f"#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}" in text and wheel.name in text
    entries = json.loads((out / "manifest.json").read_text())["wheels"]
    assert sorted(e["platform"] for e in entries) == ["aarch64", "x86_64"]
    assert "[x86_64, aarch64]" in (out / "index.html").read_text()
    # An entry published before the platform field existed still has one, from its file name.
    assert index.entry_platform({"filename": arm.name}) == "aarch64"


def test_smoke_checks_aarch64_wheels_under_qemu_and_native_ones_natively(tmp_path, monkeypatch):
    """A variant with an aarch64 wheel only (the rehearsal's cross-built pt210cpu) is not installed natively; where the
    caller names it for aarch64, it is checked in a venv of the qemu sysroot, with the installed-package tests."""
    from ci import qemu, smoke

    house = tmp_path / "wheelhouse"
    fake_wheel(house, "pt213cpu", "2.13.0", None)
    fake_wheel(house, "pt210cpu", "2.10.0", None, platform="aarch64")
    site = tmp_path / "site"
    index.build(house, site)
    seen = []

    def check_variant(variant, url, work, env, versions=None, source=None, stable_torch=None, whole_suite=True,
                      sysroot=None):  # fmt: skip
        seen.append((variant, versions, whole_suite, sysroot, env.get("QEMU_LD_PREFIX")))
        return {"variant": variant, "torch": "x", "modes": {}, "tests": "ok"}

    monkeypatch.setattr(smoke, "check_variant", check_variant)
    monkeypatch.setattr(smoke, "check_mismatch", lambda *a: None)
    monkeypatch.setattr(qemu, "provision", lambda: (tmp_path / "root", {}))
    smoke.run_smoke(site, "http://127.0.0.1:1", tmp_path / "work", aarch64={"pt210cpu": ["0.1.0+pt210cpu"]})
    assert seen == [
        ("pt213cpu", [], True, None, None),
        ("pt210cpu", ["0.1.0+pt210cpu"], False, tmp_path / "root", str(tmp_path / "root")),
    ]


def test_rehearsal_adds_the_aarch64_cpu_wheel_to_release_1(monkeypatch, tmp_path):
    """Release 1 also holds the cpu row's aarch64 wheel for torch 2.10 (PyPI's newest CPU-only aarch64 torch),
    cross-compiled with this machine's torch of the same release and the target torch's folders; the merged index
    lists it for release 1."""
    from ci import matrix, release, toolchain

    m = matrix.load()
    aarch64 = m.flavour("cpu", "aarch64")
    assert aarch64.torch_for("2.10") == matrix.Version("2.10.0") and aarch64.torch_from_pypi(matrix.Version("2.10.0"))
    assert release.expected_listing("pt213cpu", ["0.1.0", "0.1.1"], "stable211cpu", "pt210cpu") == {
        "pt213cpu": ["0.1.0+pt213cpu", "0.1.1+pt213cpu"],
        "stable211cpu": ["0.1.0+stable211cpu"],
        "pt210cpu": ["0.1.0+pt210cpu"],
    }
    monkeypatch.setattr(release, "_reachable", lambda url: False)
    monkeypatch.setattr(toolchain, "host_platform", lambda: "x86_64")
    monkeypatch.setattr(toolchain, "cross_compilers", lambda target: {"CXX": f"{target}-linux-gnu-g++"})
    fetched = []
    monkeypatch.setattr(
        toolchain,
        "target_torch",
        lambda f, t, cache, pip, python: fetched.append((f.platform, str(t), python)) or tmp_path,
    )
    env = release.cross_environment(aarch64, aarch64.torch_for("2.10"), "3.10")
    assert fetched == [("aarch64", "2.10.0", "3.10")]
    assert env["VISDET_OPS_TARGET_TORCH"] == str(tmp_path) and env["CXX"] == "aarch64-linux-gnu-g++"
    # This machine's torch of the same release: PyPI's (a CUDA build) where the CPU index is unreachable.
    assert json.loads(env["VISDET_OPS_TORCH_PIP_ARGS"]) == ["torch==2.10.0"] and env["VISDET_OPS_CUDA"] == "0"
