"""Finds or provisions the CUDA toolchain a build variant needs.

Order: a toolkit already on the machine whose nvcc has the row's CUDA
major.minor (CUDA_HOME, /usr/local/cuda-X.Y, /usr/local/cuda); for CUDA 13 the
PyPI toolchain (cuda-toolkit[nvcc,cccl]) in a private folder. PyPI has no nvcc
for CUDA 11/12, so for those a missing toolkit stops the build with a message
that says what to install."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from .matrix import CudaFlavour


class ToolchainError(RuntimeError):
    pass


def nvcc_version(cuda_home: Path) -> Version | None:
    nvcc = cuda_home / "bin" / "nvcc"
    if not nvcc.exists():
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    m = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", out)
    return Version(m.group(1)) if m else None


def _same_minor(a: Version, b: Version) -> bool:
    return a.release[:2] == b.release[:2]


def find_installed(cuda: Version) -> tuple[Path | None, list[str]]:
    """A toolkit on this machine with nvcc cuda.major.minor; and what was seen."""
    seen = []
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]))
    candidates += [Path(f"/usr/local/cuda-{cuda.major}.{cuda.minor}"), Path("/usr/local/cuda")]
    for home in candidates:
        found = nvcc_version(home)
        seen.append(f"{home}: {'nvcc ' + str(found) if found else 'no nvcc'}")
        if found is not None and _same_minor(found, cuda):
            return home, seen
    return None, seen


def pypi_cuda13(cuda: Version, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    """CUDA 13.x from PyPI into `cache`; returns its CUDA_HOME."""
    target = cache / f"cuda-{cuda.major}.{cuda.minor}-pypi"
    home = target / "nvidia" / f"cu{cuda.major}"
    if nvcc_version(home) is None:
        pip(["install", "--quiet", "--target", str(target), f"cuda-toolkit[nvcc,cccl]=={cuda.major}.{cuda.minor}.*"])
    lib = home / "lib"
    link = lib / "libcudart.so"
    if not link.exists():
        versioned = sorted(lib.glob("libcudart.so.*"))
        if not versioned:
            raise ToolchainError(f"the PyPI CUDA toolchain in {home} has no libcudart.so.*")
        link.symlink_to(versioned[0].name)  # the linker wants the unversioned name
    found = nvcc_version(home)
    if found is None or not _same_minor(found, cuda):
        raise ToolchainError(f"PyPI toolchain in {home} gave nvcc {found}, expected CUDA {cuda}")
    return home


def provision(flavour: CudaFlavour, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    assert flavour.version is not None
    cuda = flavour.version
    home, seen = find_installed(cuda)
    if home is not None:
        return home
    if cuda.major >= 13:
        return pypi_cuda13(cuda, cache, pip)
    raise ToolchainError(
        f"build-{flavour.name} needs the CUDA {cuda} toolkit (nvcc {cuda.major}.{cuda.minor}) and none was found.\n"
        + "".join(f"  looked at {s}\n" for s in seen)
        + f"PyPI ships no nvcc for CUDA {cuda.major}.x (nvidia-cuda-nvcc-cu{cuda.major} holds only ptxas).\n"
        f"Install the toolkit from https://developer.nvidia.com/cuda-{cuda.major}-{cuda.minor}-0-download-archive "
        f"(or your distribution), then rerun with CUDA_HOME=/path/to/cuda-{cuda.major}.{cuda.minor}, "
        f"or build in the manylinux image {flavour.manylinux_image} with cibuildwheel."
    )


if __name__ == "__main__":
    print(find_installed(Version(sys.argv[1])))
