"""Compiles every CUDA source for one arch, so that machines without a GPU
(CI) still catch a .cu or CUDA host file that no longer builds.

Skipped where no nvcc exists, unless VISDET_OPS_REQUIRE_NVCC=1 (CI sets it):
then a missing nvcc fails. The arch is the newest SASS arch of the matrix row
for this nvcc's CUDA version (VISDET_OPS_TEST_CUDA_ARCH overrides)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from ci import matrix as variants
from ci import toolchain

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
CU_SOURCES = sorted(CSRC.rglob("*.cu"))
HOST_SOURCES = sorted(CSRC.rglob("*_cuda_host.cpp"))


@pytest.fixture(scope="module")
def cuda_home() -> Path:
    home, _ = variants.rules.find_cuda_home()
    if home is None:
        if os.environ.get("VISDET_OPS_REQUIRE_NVCC") == "1":
            pytest.fail("VISDET_OPS_REQUIRE_NVCC=1 but no nvcc was found (set CUDA_HOME)")
        pytest.skip("no nvcc on this machine")
    return home


@pytest.fixture(scope="module")
def arch(cuda_home: Path) -> str:
    if os.environ.get("VISDET_OPS_TEST_CUDA_ARCH"):
        return os.environ["VISDET_OPS_TEST_CUDA_ARCH"]
    version = toolchain.nvcc_version(cuda_home)
    row = variants.load().flavour_for_cuda(f"{version.major}.{version.minor}")
    assert row is not None, f"ci/matrix.toml has no row for nvcc {version}"
    sass, _ = variants.sass_and_ptx(row.arch_list)
    return sass[-1]


def test_every_op_with_cuda_has_both_halves():
    assert CU_SOURCES, "no .cu sources found"
    for cu in CU_SOURCES:
        assert (cu.parent / cu.name.replace("_cuda.cu", "_cuda_host.cpp")).exists(), cu


IMPL = re.compile(r"VISDET_(?:LIBRARY_IMPL|IMPL_WITH_BACKWARD)\((\w+),")
REGISTERED = re.compile(r'm\.impl\(\s*"(\w+)"')
WITH_BACKWARD = re.compile(r"VISDET_IMPL_WITH_BACKWARD\(\s*\w+,\s*(\w+),")


def registered(text: str) -> list[str]:
    """The op names a host file registers: m.impl's, and VISDET_IMPL_WITH_BACKWARD's op and its `_<op>_backward`."""
    pairs = WITH_BACKWARD.findall(text)
    return sorted(REGISTERED.findall(text) + pairs + [f"_{op}_backward" for op in pairs])


def test_each_device_registers_from_its_own_host_file():
    """<op>.cpp holds the schema and what every device shares; the CPU registers from <op>_cpu_host.cpp, CUDA from
    its mirror image <op>_cuda_host.cpp, and the two register the same ops. A family home csrc/ops/_<family> has
    the same pair of host files where it has kernels (_rois), and registers nothing."""
    assert HOST_SOURCES, "no CUDA host sources found"
    for cuda_host in HOST_SOURCES:
        cpu_host = cuda_host.with_name(cuda_host.name.replace("_cuda_host.cpp", "_cpu_host.cpp"))
        assert cpu_host.exists(), f"{cuda_host.name} has no CPU mirror {cpu_host.name}"
        cpu_text, cuda_text = cpu_host.read_text(), cuda_host.read_text()
        assert set(IMPL.findall(cpu_text)) <= {"CPU"} and set(IMPL.findall(cuda_text)) <= {"CUDA"}, cuda_host.name
        assert registered(cpu_text) == registered(cuda_text), cuda_host.name
    for cpu_host in CSRC.rglob("*_cpu_host.cpp"):
        assert cpu_host.with_name(cpu_host.name.replace("_cpu_host.cpp", "_cuda_host.cpp")).exists(), cpu_host
    for folder in sorted((CSRC / "ops").iterdir()):
        if folder.name.startswith("_"):  # a family home: code its ops share, no schema and no registration
            for f in folder.iterdir():
                assert not IMPL.search(f.read_text()) and "VISDET_LIBRARY_FRAGMENT" not in f.read_text(), f
            continue
        shared = folder / f"{folder.name}.cpp"
        assert "VISDET_LIBRARY_FRAGMENT" in shared.read_text(), shared
        assert not IMPL.search(shared.read_text()), f"{shared.name} registers a device: move it to a host file"
        assert registered((folder / f"{folder.name}_cpu_host.cpp").read_text()), folder.name


@pytest.mark.parametrize("source", CU_SOURCES, ids=lambda p: p.name)
def test_cu_compiles(source: Path, cuda_home: Path, arch: str, tmp_path: Path):
    """.cu files are torch-free: only the CUDA toolkit and csrc/ are on the include path.
    torch's own nvcc flags are passed as the real build passes them (they remove
    the implicit float16/bfloat16 conversions, for one)."""
    sm = arch.replace(".", "")
    cmd = [
        str(cuda_home / "bin" / "nvcc"),
        "-c",
        "-O2",
        "-std=c++17",
        *cpp_extension.COMMON_NVCC_FLAGS,
        f"-I{CSRC}",
        "-DVISDET_OPS_WITH_CUDA=1",
        f"-gencode=arch=compute_{sm},code=sm_{sm}",
        str(source),
        "-o",
        str(tmp_path / "out.o"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}\n{res.stderr}"
    text = source.read_text()
    assert not re.search(r"#include\s*[<\"](torch|ATen|c10)/", text), f"{source.name} includes torch headers"


# CMake generates this header for CUDA builds of torch; CPU wheels ship the
# other c10/cuda headers without it. Its whole content is this macro.
CUDA_CMAKE_MACROS = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


@pytest.mark.parametrize("source", HOST_SOURCES, ids=lambda p: p.name)
def test_cuda_host_compiles(source: Path, cuda_home: Path, tmp_path: Path):
    """The torch-facing CUDA layer compiles against this torch's headers (compile only:
    a CPU torch has no libc10_cuda to link against)."""
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{cuda_home / 'include'}", f"-I{CSRC}"]
    torch_include = Path(cpp_extension.include_paths()[0])
    if not (torch_include / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():
        stub = tmp_path / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text(CUDA_CMAKE_MACROS)
        includes.append(f"-I{tmp_path / 'stub'}")
    _compile_host(source, [*includes, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"], tmp_path)


def _compile_host(source: Path, flags: list[str], tmp_path: Path) -> None:
    """Compiles one CUDA host file (no link) with the C++ compiler the build uses."""
    cmd = [os.environ.get("CXX", "c++"), "-c", "-std=c++20", "-fPIC", "-O0", "-g0", *flags, "-DVISDET_OPS_WITH_CUDA=1"]
    cmd += [str(source), "-o", str(tmp_path / "out.o")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr[-4000:]}"


STABLE_HOST_SOURCES = HOST_SOURCES  # every op folder's host layer is written against the adapter


@pytest.mark.parametrize("source", STABLE_HOST_SOURCES, ids=lambda p: p.name)
def test_stable_cuda_host_compiles(source: Path, cuda_home: Path, tmp_path: Path):
    """The ported CUDA host layers compile against the LibTorch stable ABI alone, with the stable build's flags
    (the unstable torch headers are empty there, so an at:: or c10::cuda use fails)."""
    includes = [f"-I{cpp_extension.include_paths()[0]}", f"-I{cuda_home / 'include'}", f"-I{CSRC}"]
    _compile_host(source, [*includes, *variants.rules.stable_abi_flags(with_cuda=True)], tmp_path)
