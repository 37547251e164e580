"""The aarch64 cross build (docs/aarch64.md): its device code is the native build's, and setup.py's cross mode refuses
what would give a wrong wheel.

The device-code test compiles every .cu file for one arch (SASS and PTX) twice with the release build's reproducible
flags, natively and for aarch64 (Debian's aarch64 g++ as host compiler, PyPI's sbsa CUDA headers as nvcc's target
folder), and requires the same cubins and PTX. It needs the cross compiler and nvcc: skipped without them, unless
VISDET_OPS_REQUIRE_CROSS=1 (CI sets it), which makes their absence a failure. The wheels themselves are compared by
`nox -s device-code` (ci/device_code.py), recorded in docs/aarch64.md.

The CPU-arithmetic test builds tests/native/fp_probe.cpp (torch-free kernel headers in a program) with the build's
C++ flags natively and for aarch64, runs the second under qemu, and requires the same digests: the CPU kernels of an
aarch64 wheel round as the x86_64 ones the suite ran (no fused multiply-adds: visdet_build.CXX_FLAGS)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from ci import fatbin, toolchain
from ci import matrix as variants

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
CU_SOURCES = sorted(CSRC.rglob("*.cu"))
ARCH = "9.0"  # the GPU the CUDA kernels are tested on (an H200): its SASS and PTX


def _require(what: str) -> None:
    if os.environ.get("VISDET_OPS_REQUIRE_CROSS") == "1":
        pytest.fail(f"VISDET_OPS_REQUIRE_CROSS=1 but {what}")
    pytest.skip(what)


@pytest.fixture(scope="module")
def homes() -> tuple[Path, Path]:
    """(the host CUDA 13 toolkit, the same toolkit with the aarch64 target folder)."""
    host, _ = variants.rules.find_cuda_home()
    if host is None:
        _require("no nvcc on this machine")
    try:
        toolchain.cross_compilers("aarch64")
    except toolchain.ToolchainError as exc:
        _require(str(exc))
    nvcc = toolchain.nvcc_version(host)
    row = variants.load().flavour_for_cuda(f"{nvcc.major}.{nvcc.minor}")
    if row is None or "aarch64" not in row.platforms:
        _require(f"ci/matrix.toml ships no aarch64 build for nvcc {nvcc}")

    def pip(args: list[str]) -> None:
        subprocess.run([sys.executable, "-m", "pip", *args], check=True, capture_output=True)

    return host, toolchain.cross_cuda_home(row.on("aarch64"), host, ROOT / ".nox" / "_cache", pip)


def _compile(home: Path, source: Path, out: Path, cross: bool) -> Path:
    nvcc = toolchain.nvcc_version(home)
    maps = variants.rules.prefix_maps(ROOT, Path(cpp_extension.include_paths()[0]).parent, home)
    sm = ARCH.replace(".", "")
    cmd = [
        str(home / "bin" / "nvcc"),
        "-c",
        "-O3",
        "-std=c++17",
        *cpp_extension.COMMON_NVCC_FLAGS,
        f"-I{CSRC}",
        "-DVISDET_OPS_WITH_CUDA=1",
        f"-gencode=arch=compute_{sm},code=[sm_{sm},compute_{sm}]",
        *variants.rules.reproducible_nvcc_flags(maps, variants.rules.parse_release(str(nvcc))),
        *(["-ccbin", "aarch64-linux-gnu-g++", "--target-directory=sbsa-linux"] if cross else []),
        str(source),
        "-o",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}\n{res.stderr[-3000:]}"
    return out


@pytest.mark.parametrize("source", CU_SOURCES, ids=lambda p: p.name)
def test_cross_compiled_device_code_is_the_native_one(source: Path, homes, tmp_path: Path):
    host, cross = homes
    native = _compile(host, source, tmp_path / f"{source.stem}.o", cross=False)
    (tmp_path / "aarch64").mkdir()
    aarch64 = _compile(cross, source, tmp_path / "aarch64" / f"{source.stem}.o", cross=True)
    assert variants.rules.elf_machine(native) == "x86_64" and variants.rules.elf_machine(aarch64) == "aarch64"
    result = fatbin.compare(native, aarch64)
    assert set(result) == {("sass", ARCH), ("ptx", ARCH)}, result
    assert set(result.values()) == {"same"}, f"{source.name}: the aarch64 build's device code differs: {result}"


def _setup(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """setup.py's decisions alone (--version prints the version after every check). setup.py needs the package's
    sources: an installed wheel's tests (a copy of the tree without the package) have none to build."""
    if not (ROOT / "visdet_ops" / "_build_rules.py").exists():
        pytest.skip("needs the source tree (setup.py builds visdet_ops from it)")
    full = {**os.environ, "VISDET_OPS_CUDA": "0", **env}
    return subprocess.run(
        [sys.executable, str(ROOT / "setup.py"), "--version"], capture_output=True, text=True, env=full, cwd=tmp_path
    )


def test_cross_build_refuses_a_folder_that_is_not_a_torch(tmp_path: Path):
    res = _setup({"VISDET_OPS_TARGET_TORCH": str(tmp_path / "nothing")}, tmp_path)
    assert res.returncode != 0 and "not a torch package folder" in res.stderr


def _fake_target_torch(tmp_path: Path, version: str) -> Path:
    """A torch folder whose libc10.so is an aarch64 ELF header and whose version.py says `version`."""
    torch_dir = tmp_path / "target" / "torch"
    (torch_dir / "include").mkdir(parents=True)
    (torch_dir / "lib").mkdir()
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    (torch_dir / "lib" / "libc10.so").write_bytes(bytes(header))
    (torch_dir / "version.py").write_text(f"__version__ = {version!r}\ncuda = None\n")
    return torch_dir


def test_cross_build_needs_the_same_torch_release_on_both_sides(tmp_path: Path):
    res = _setup({"VISDET_OPS_TARGET_TORCH": str(_fake_target_torch(tmp_path, "2.9.1"))}, tmp_path)
    assert res.returncode != 0 and "the target torch is 2.9.1" in res.stderr and "same release" in res.stderr


def test_cross_build_needs_a_compiler_for_the_target(tmp_path: Path):
    import torch

    if shutil.which("nm") is None:
        pytest.skip("no nm")
    target = _fake_target_torch(tmp_path, torch.__version__)
    # The fake libc10 has no symbols, so the ABI check speaks first where the host torch uses the C++11 ABI.
    res = _setup({"VISDET_OPS_TARGET_TORCH": str(target), "CXX": "g++"}, tmp_path)
    assert res.returncode != 0
    assert "C++ ABI" in res.stderr or "compiles for x86_64" in res.stderr, res.stderr[-2000:]


def test_no_kernel_takes_a_bool_parameter():
    """A __global__ function's bool parameter is loaded by the host ABI's sign of char (ld.param.s8 for an x86_64
    build, .u8 for an aarch64 one), so the two platforms' wheels would carry different cubins for it (two RoI kernels'
    flags did, found by comparing the wheels): kernel flags are ints."""
    import re

    kernel = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)", re.S)
    found = []
    for source in sorted(CSRC.rglob("*.cu")) + sorted(CSRC.rglob("*.cuh")):
        for name, params in kernel.findall(source.read_text()):
            if re.search(r"\bbool\b", params):
                found.append(f"{source.relative_to(ROOT)}: {name}")
    assert not found, f"kernels with a bool parameter: {found}"


def _probe(tmp_path: Path, cross: bool, flags: list[str]) -> str:
    """tests/native/fp_probe.cpp built with `flags` (natively, or statically for aarch64 and run under qemu): its
    digests of the CPU kernels' arithmetic."""
    cxx = toolchain.cross_compilers("aarch64")["CXX"] if cross else os.environ.get("CXX", "c++")
    exe = tmp_path / ("probe-aarch64" if cross else "probe-native")
    cmd = [cxx, *flags, "-std=c++20", f"-I{CSRC}", str(ROOT / "tests" / "native" / "fp_probe.cpp"), "-o", str(exe)]
    res = subprocess.run([*cmd, *(["-static"] if cross else [])], capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr[-3000:]}"
    run = subprocess.run(["qemu-aarch64-static", str(exe)] if cross else [str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.count("\n") == 4, run.stdout + run.stderr
    return run.stdout


def test_cross_compiled_cpu_arithmetic_is_the_native_one(tmp_path: Path):
    """The CPU kernels of an aarch64 wheel compute what the x86_64 build the suite ran computes, bit for bit: with
    the build's C++ flags (visdet_build.CXX_FLAGS, -ffp-contract=off) the probe's digests of rotated-box IoUs and
    rotated bilinear samples are the same natively and for aarch64 under qemu. And the probe can tell: without that
    flag GCC fuses multiply-adds on aarch64 and the digests differ."""
    try:
        toolchain.cross_compilers("aarch64")
    except toolchain.ToolchainError as exc:
        _require(str(exc))
    if shutil.which("qemu-aarch64-static") is None:
        _require("no qemu-aarch64-static (Debian/Ubuntu: apt-get install qemu-user-static)")
    flags = list(variants.rules.CXX_FLAGS)
    native = _probe(tmp_path, cross=False, flags=flags)
    assert _probe(tmp_path, cross=True, flags=flags) == native, "the aarch64 build's CPU arithmetic differs"
    fused = [f for f in flags if f != "-ffp-contract=off"]
    assert _probe(tmp_path, cross=True, flags=fused) != native, (
        "without -ffp-contract=off the aarch64 digests match too: the probe no longer sees fused multiply-adds "
        "(a compiler that stopped contracting by default?); find a probe that does before trusting this test"
    )
