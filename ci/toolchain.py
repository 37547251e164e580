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
    """A toolkit on this machine with nvcc cuda.major.minor; and what was seen (visdet_build.py)."""
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


# --- Cross builds (docs/aarch64.md) -----------------------------------------------------------------------------
#
# An aarch64 wheel is built here, on x86_64, by the same setup.py and the same nvcc as an x86_64 one: Debian's cross
# compilers for the host code, the target's torch (its headers and libraries, unpacked from its wheel) and, for CUDA,
# the target's CUDA headers and libcudart from PyPI's wheels for that machine, as nvcc's target folder.

# The GNU triplet of each platform's cross compilers (Debian: g++-<triplet>) and nvcc's target folder name.
CROSS_TRIPLETS = {"aarch64": "aarch64-linux-gnu", "x86_64": "x86_64-linux-gnu"}
NVCC_TARGET_DIRS = {"aarch64": "sbsa-linux", "x86_64": "x86_64-linux"}


def host_platform() -> str:
    import platform

    return rules.normalize_machine(platform.machine())


def cross_compilers(target: str) -> dict[str, str]:
    """CC, CXX and LDSHARED for building `target` code on this machine; ToolchainError naming the package."""
    triplet = CROSS_TRIPLETS[target]
    missing = [f"{triplet}-{tool}" for tool in ("gcc", "g++") if shutil.which(f"{triplet}-{tool}") is None]
    if missing:
        raise ToolchainError(
            f"cross-compiling for {target} needs {' and '.join(missing)} (Debian/Ubuntu: apt-get install g++-{triplet})"
        )
    return {"CC": f"{triplet}-gcc", "CXX": f"{triplet}-g++", "LDSHARED": f"{triplet}-g++ -shared"}


def wheel_platform_args(target: str, python: str) -> list[str]:
    """pip download arguments that select wheels for `target` and CPython `python` ("3.11") from any machine."""
    tags = [f"manylinux_2_{minor}_{target}" for minor in (34, 28, 27, 17)] + [f"manylinux2014_{target}"]
    return [
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        python,
        *(a for tag in tags for a in ("--platform", tag)),
    ]


def _unpack(wheel: Path, dest: Path, keep: Callable[[str], bool], fresh: bool = True) -> None:
    """The members of `wheel` that `keep` accepts, into `dest` (emptied first unless fresh=False)."""
    import zipfile

    if fresh:
        shutil.rmtree(dest, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.infolist():
            if keep(member.filename):
                zf.extract(member, dest)
    (dest / ".complete").touch()


def target_torch(
    flavour: CudaFlavour, torch_version, cache: Path, pip: Callable[[list[str]], None], python: str
) -> Path:
    """target_torch_unlocked under the cache's lock for it."""
    with _locked(cache, f"torch-{flavour.platform}"):
        return target_torch_unlocked(flavour, torch_version, cache, pip, python)


def target_torch_unlocked(
    flavour: CudaFlavour, torch_version, cache: Path, pip: Callable[[list[str]], None], python: str
) -> Path:
    """The `torch` package folder of flavour.platform's torch `torch_version` (its wheel from the row's index, or
    PyPI's build of that release where the index is unreachable): the headers, the libraries a build links and
    version.py, unpacked once into the cache. libtorch_cuda is left out: no build links it (a stable CUDA build
    finds torch's CUDA functions at run time, a classic one would need a native build)."""
    downloads = cache / "downloads" / flavour.platform
    downloads.mkdir(parents=True, exist_ok=True)
    version = Version(str(torch_version))

    def found() -> list[Path]:
        return sorted(
            w
            for w in downloads.glob(f"torch-{version}*.whl")
            if w.name.endswith(f"_{flavour.platform}.whl") and Version(w.name.split("-")[1]).release == version.release
        )

    if not found():
        pip(["download", "--no-deps", "--dest", str(downloads), *flavour.torch_pip_args(version),
             *wheel_platform_args(flavour.platform, python), "--retries", "1"])  # fmt: skip
    wheels = found()
    if not wheels:
        raise ToolchainError(f"pip downloaded no {flavour.platform} wheel of torch {version} into {downloads}")
    wheel = wheels[-1]
    dest = cache / "target-torch" / wheel.stem
    if not (dest / ".complete").exists():

        def keep(name: str) -> bool:
            if name == "torch/version.py" or name.startswith("torch/include/"):
                return True
            return name.startswith("torch/lib/") and not Path(name).name.startswith("libtorch_cuda")

        _unpack(wheel, dest, keep)
    return dest / "torch"


def _locked(cache: Path, name: str):
    """An exclusive lock on cache/.lock-<name>: two processes provisioning one folder (pytest-xdist's workers, two nox
    sessions) take turns instead of unpacking over each other."""
    import contextlib
    import fcntl

    @contextlib.contextmanager
    def hold():
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / f".lock-{name}", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    return hold()


def cross_cuda_home(flavour: CudaFlavour, host_home: Path, cache: Path, pip: Callable[[list[str]], None]) -> Path:
    """cross_cuda_home_unlocked under the cache's lock for it."""
    with _locked(cache, f"cuda-{flavour.name}-{flavour.platform}"):
        return cross_cuda_home_unlocked(flavour, host_home, cache, pip)


def cross_cuda_home_unlocked(
    flavour: CudaFlavour, host_home: Path, cache: Path, pip: Callable[[list[str]], None]
) -> Path:
    """A CUDA_HOME whose nvcc, cicc, ptxas and libdevice are the host toolkit's own (so the device code is what a
    native build of the host gives) and whose target folder targets/<dir> (and include/, lib64/) holds the target
    platform's CUDA headers and libraries, from PyPI's wheels of the row's [cuda.toolchain] pypi requirements for
    that platform."""
    cuda = flavour.version
    assert cuda is not None
    if "pypi" not in flavour.toolchain:
        raise ToolchainError(
            f"cross-compiling build-{flavour.name} for {flavour.platform} needs the target's CUDA {cuda} headers and "
            "libraries from PyPI, which the row's [cuda.toolchain] does not name (pypi = [...])"
        )
    target_dir = NVCC_TARGET_DIRS[flavour.platform]
    recipe = hashlib.sha256(json.dumps([flavour.toolchain["pypi"], str(host_home)]).encode()).hexdigest()[:12]
    home = cache / f"cuda-{cuda.major}.{cuda.minor}-{flavour.platform}-cross-{recipe}"
    if (home / ".complete").exists() and nvcc_version(home) is not None:
        return home
    wheels = cache / "downloads" / f"cuda-{cuda.major}.{cuda.minor}-{flavour.platform}"
    shutil.rmtree(wheels, ignore_errors=True)
    pip(["download", "--dest", str(wheels), *flavour.toolchain["pypi"],
         *wheel_platform_args(flavour.platform, f"{sys.version_info.major}.{sys.version_info.minor}"),
         "--platform", "any", "--retries", "1"])  # fmt: skip
    shutil.rmtree(home, ignore_errors=True)
    target = home / "targets" / target_dir
    unpacked = home / "_wheels"
    for wheel in sorted(wheels.glob("nvidia_*.whl")):
        _unpack(wheel, unpacked, lambda name: "/include/" in name or "/lib/" in name, fresh=False)
    roots = [d for d in unpacked.glob("nvidia/cu*") if d.is_dir()]
    if len(roots) != 1 or not (roots[0] / "include" / "cuda_runtime.h").exists():
        raise ToolchainError(
            f"the {flavour.platform} CUDA wheels in {wheels} gave no nvidia/cu*/include/cuda_runtime.h"
        )
    shutil.copytree(roots[0] / "include", target / "include")
    shutil.copytree(roots[0] / "lib", target / "lib")
    _link_unversioned_cudart(target / "lib")
    shutil.rmtree(unpacked)
    # The host's compiler driver and tools, copied (nvcc finds its profile and tools beside its real path).
    (home / "bin").mkdir()
    for tool in (host_home / "bin").iterdir():
        if tool.is_file():
            shutil.copy2(tool.resolve(), home / "bin" / tool.name)
    (home / "nvvm").symlink_to((host_home / "nvvm").resolve())
    host_target = home / "targets" / NVCC_TARGET_DIRS[host_platform()]
    host_target.mkdir()
    for sub in ("include", "lib"):
        (host_target / sub).symlink_to((host_home / sub).resolve())
    (home / "include").symlink_to(Path("targets") / target_dir / "include")
    (home / "lib64").symlink_to(Path("targets") / target_dir / "lib")
    (home / "bin" / "nvcc.profile").write_text(
        "TOP = $(_HERE_)/..\n"
        "CICC_PATH = $(TOP)/nvvm/bin\n"
        "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n"
        "PATH += $(CICC_PATH):$(_HERE_):\n"
        'INCLUDES += "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)\n'
        'SYSTEM_INCLUDES += "-isystem" "$(TOP)/$(_TARGET_DIR_)/include/cccl" $(_SPACE_)\n'
        'LIBRARIES =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib"\n'
    )
    _check_home(home, cuda)
    (home / ".complete").touch()
    return home


if __name__ == "__main__":
    print(find_installed(Version(sys.argv[1])))
