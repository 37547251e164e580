"""Finds or provisions the CUDA toolchain a build variant needs.

Order: a toolkit already on the machine whose nvcc has the row's CUDA
major.minor (CUDA_HOME, /usr/local/cuda-X.Y, /usr/local/cuda); else what the
row's [cuda.toolchain] in ci/matrix.toml names, assembled in a private folder
(nothing installed system-wide): Debian packages + PyPI headers (CUDA 12.4),
or a complete PyPI toolchain (CUDA 13). PyPI has no nvcc for CUDA 11/12, so a
row without Debian packages stops the build with a message that says what to
install."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from .matrix import CudaFlavour, rules


class ToolchainError(RuntimeError):
    pass


def nvcc_version(cuda_home: Path) -> Version | None:
    found = rules.nvcc_version(cuda_home)
    return None if found is None else Version(str(found))


def find_installed(cuda: Version) -> tuple[Path | None, list[str]]:
    """A toolkit on this machine with nvcc cuda.major.minor; and what was seen (visdet_ops/_build_rules.py)."""
    return rules.find_cuda_home(rules.parse_release(str(cuda)))


def pypi_full_toolchain(flavour: CudaFlavour, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    """A complete toolchain from PyPI (CUDA 13: nvcc included); returns its CUDA_HOME."""
    cuda = flavour.version
    target = cache / f"cuda-{cuda.major}.{cuda.minor}-pypi"
    home = target / "nvidia" / f"cu{cuda.major}"
    if nvcc_version(home) is None:
        pip(["install", "--quiet", "--target", str(target), *flavour.toolchain["pypi"]])
    _link_unversioned_cudart(home / "lib")
    _check_home(home, cuda)
    return home


def debian_toolchain(flavour: CudaFlavour, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    """CUDA from Debian's non-free archive plus PyPI headers, unpacked under
    `cache` (apt-get download + dpkg-deb -x with a private apt state: nothing
    is installed system-wide). Returns the assembled CUDA_HOME."""
    cuda = flavour.version
    tc = flavour.toolchain
    # Keyed by the recipe, so that changing a pin in the matrix re-provisions.
    recipe = hashlib.sha256(json.dumps(tc, sort_keys=True).encode()).hexdigest()[:12]
    work = cache / f"cuda-{cuda.major}.{cuda.minor}-debian-{recipe}"
    home = work / "cuda"
    if nvcc_version(home) is not None:
        return home
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ToolchainError(
                f"build-{flavour.name}: assembling CUDA {cuda} from Debian packages needs {tool} (a Debian or "
                f"Ubuntu machine); elsewhere install CUDA {cuda} and set CUDA_HOME"
            )
    apt = work / "apt"
    for sub in ("lists/partial", "archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb http://deb.debian.org/debian {tc['debian_suite']} main contrib non-free\n")
    (apt / "status").touch()
    (apt / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{apt / "sources.list"}";\nDir::Etc::SourceParts "/nonexistent";\n'
        f'Dir::State::Lists "{apt / "lists"}";\nDir::State::status "{apt / "status"}";\n'
        f'Dir::Cache::Archives "{apt / "archives"}";\nAPT::Architecture "amd64";\nDebug::NoLocking "true";\n'
    )
    env = dict(os.environ, APT_CONFIG=str(apt / "apt.conf"))
    _run(["apt-get", "update", "-q"], env)
    _run(["apt-get", "download", "-q", *tc["debian_packages"]], env, cwd=apt / "debs")
    root = work / "root"
    shutil.rmtree(root, ignore_errors=True)
    for deb in sorted((apt / "debs").glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(root)], env)
    wheels = work / "wheels"
    pip(["install", "--quiet", "--no-deps", "--target", str(wheels), *tc["pypi"]])

    shutil.rmtree(home, ignore_errors=True)
    (home / "bin").mkdir(parents=True)
    (home / "nvvm").mkdir()
    (home / "lib64").mkdir()
    kit = root / "usr" / "lib" / "nvidia-cuda-toolkit"
    # Debian's /usr/bin/nvcc is a wrapper; the real driver, cicc and the crt
    # stubs live in /usr/lib/nvidia-cuda-toolkit/bin, the other tools in /usr/bin.
    for name in ("nvcc", "cicc", "crt"):
        _copy(kit / "bin" / name, home / "bin" / name)
    for name in ("ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c", "nvprune", "cuobjdump", "cu++filt"):
        _copy(root / "usr" / "bin" / name, home / "bin" / name)
    _copy(kit / "libdevice", home / "nvvm" / "libdevice")
    nvidia = wheels / "nvidia"
    for pkg in ("cuda_runtime", "cuda_nvcc", "cuda_cccl"):
        shutil.copytree(nvidia / pkg / "include", home / "include", dirs_exist_ok=True)
    # <nv/target> and the rest of libcu++ that the CUDA 12.x cccl wheel lacks.
    shutil.copytree(root / "usr" / "include" / "nv", home / "include" / "nv", dirs_exist_ok=True)
    shutil.copytree(root / "usr" / "include" / "cuda", home / "include" / "cuda", dirs_exist_ok=True)
    shutil.copytree(nvidia / "cuda_runtime" / "lib", home / "lib64", dirs_exist_ok=True)
    _link_unversioned_cudart(home / "lib64")
    (home / "bin" / "nvcc.profile").write_text(
        "TOP = $(_HERE_)/..\n"
        "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n"
        "PATH += $(_HERE_):\n"
        'INCLUDES += "-I$(TOP)/include" $(_SPACE_)\n'
        'LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64"\n'
    )
    _check_home(home, cuda)
    return home


def _run(cmd: list[str], env: dict, cwd: Path | None = None) -> None:
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ToolchainError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


def _copy(src: Path, dest: Path) -> None:
    if not src.exists():
        raise ToolchainError(f"expected {src} in the unpacked CUDA packages")
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)


def _link_unversioned_cudart(lib: Path) -> None:
    link = lib / "libcudart.so"
    if link.exists():
        return
    versioned = sorted(lib.glob("libcudart.so.*"))
    if not versioned:
        raise ToolchainError(f"no libcudart.so.* in {lib}")
    link.symlink_to(versioned[0].name)  # the linker wants the unversioned name


def _check_home(home: Path, cuda: Version) -> None:
    found = nvcc_version(home)
    if found is None or found.release[:2] != cuda.release[:2]:
        raise ToolchainError(f"the toolchain assembled in {home} gave nvcc {found}, expected CUDA {cuda}")


def provision(flavour: CudaFlavour, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    """CUDA_HOME for building `flavour`: installed, or provisioned as the matrix row says."""
    assert flavour.version is not None
    cuda = flavour.version
    home, seen = find_installed(cuda)
    if home is not None:
        return home
    if "debian_packages" in flavour.toolchain:
        return debian_toolchain(flavour, cache, pip)
    if "pypi" in flavour.toolchain:
        return pypi_full_toolchain(flavour, cache, pip)
    raise ToolchainError(
        f"build-{flavour.name} needs the CUDA {cuda} toolkit (nvcc {cuda.major}.{cuda.minor}) and none was found.\n"
        + "".join(f"  looked at {s}\n" for s in seen)
        + f"PyPI ships no nvcc for CUDA {cuda.major}.x (nvidia-cuda-nvcc-cu{cuda.major} holds only ptxas), and "
        "ci/matrix.toml names no Debian packages for it.\n"
        f"Install the toolkit from https://developer.nvidia.com/cuda-{cuda.major}-{cuda.minor}-0-download-archive "
        f"(or your distribution), then rerun with CUDA_HOME=/path/to/cuda-{cuda.major}.{cuda.minor}, "
        f"or build in the manylinux image {flavour.manylinux_image} with cibuildwheel."
    )


if __name__ == "__main__":
    print(find_installed(Version(sys.argv[1])))
