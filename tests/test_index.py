"""The wheel index builder, on a synthetic wheel (no compiler needed)."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from ci import index


def fake_wheel(folder: Path, variant: str, torch_version: str, cuda: str | None, version: str = "0.1.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"visdet_ops-{version}+{variant}-cp310-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            f"visdet_ops-{version}+{variant}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: visdet-ops\nVersion: {version}+{variant}\nRequires-Python: >=3.10\n",
        )
        zf.writestr(
            "visdet_ops/_build_info.py",
            f"TORCH_VERSION = {torch_version!r}\nTORCH_CUDA_VERSION = {cuda!r}\nWITH_CUDA = {cuda is not None}\n",
        )
    return wheel


def test_index_pages(tmp_path):
    house = tmp_path / "wheelhouse"
    w1 = fake_wheel(house / "pt213cpu", "pt213cpu", "2.13.0+cpu", None)
    w2 = fake_wheel(house / "pt214cu130", "pt214cu130", "2.14.1", "13.0")
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


def test_index_rejects_a_wheel_in_the_wrong_folder(tmp_path):
    fake_wheel(tmp_path / "wheelhouse" / "pt213cpu", "pt214cu130", "2.14.1", "13.0")
    with pytest.raises(ValueError, match="does not match its folder pt213cpu"):
        index.build(tmp_path / "wheelhouse", tmp_path / "index")


def test_releases_accumulate_in_one_index(tmp_path):
    """Two releases, wheels hosted elsewhere (a release's download URL): both versions stay listed."""
    site, assets = tmp_path / "site", tmp_path / "assets"
    w1 = fake_wheel(tmp_path / "r1" / "pt213cpu", "pt213cpu", "2.13.0+cpu", None, "0.1.0")
    index.build(tmp_path / "r1", site, None, str(site), "https://example.org/dl/v0.1.0", assets / "v0.1.0")
    w2 = fake_wheel(tmp_path / "r2" / "pt213cpu", "pt213cpu", "2.13.0+cpu", None, "0.1.1")
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
    fake_wheel(tmp_path / "r1" / "pt213cpu", "pt213cpu", "2.13.0+cpu", None, "0.1.0")
    index.build(tmp_path / "r1", site, None, None, "https://example.org/dl/v0.1.0", tmp_path / "a")
    server, url = smoke.serve(site)
    try:
        assert [e["version"] for e in index.read_manifest(url)] == ["0.1.0+pt213cpu"]
        assert index.read_manifest(url + "/nothing-here") == []  # the first release: no index yet
    finally:
        server.shutdown()
