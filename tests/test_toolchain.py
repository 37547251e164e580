from __future__ import annotations

from pathlib import Path

import pytest

from ci import matrix as variants
from ci import toolchain


def test_missing_toolkit_stops_with_what_to_install(monkeypatch, tmp_path):
    cu121 = variants.load().flavour("cu121")
    assert cu121.toolchain == {}, "cu121 has no private toolchain recipe: the build must stop"
    monkeypatch.setattr(toolchain, "find_installed", lambda cuda: (None, ["/usr/local/cuda-12.1: no nvcc"]))

    def no_pip(args):
        raise AssertionError("must not install anything")

    with pytest.raises(toolchain.ToolchainError) as err:
        toolchain.provision(cu121, tmp_path, no_pip)
    text = str(err.value)
    assert "build-cu121 needs the CUDA 12.1 toolkit" in text
    assert "looked at /usr/local/cuda-12.1: no nvcc" in text
    assert "CUDA_HOME=/path/to/cuda-12.1" in text
    assert cu121.manylinux_image in text


def test_rows_with_recipes_name_pinned_packages():
    m = variants.load()
    cu124, cu130 = m.flavour("cu124").toolchain, m.flavour("cu130").toolchain
    assert all("=" in p for p in cu124["debian_packages"]) and cu124["debian_suite"]
    assert all("==" in p for p in cu124["pypi"] + cu130["pypi"])


def test_nvcc_version_of_a_missing_toolkit_is_none(tmp_path: Path):
    assert toolchain.nvcc_version(tmp_path) is None
