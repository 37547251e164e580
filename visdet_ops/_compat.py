"""Compares what a visdet-ops build was made for with the running environment.

Shared by the import-time check (_loader) and `visdet-ops doctor`. Torch-free:
callers pass the versions in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._build_rules import min_torch, parse_release, torch_is_supported
from ._install import build_from_source_command

Status = Literal["OK", "WARN", "FAIL"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def _minor(v: str) -> str:
    ver = parse_release(v)
    return f"{ver.major}.{ver.minor}"


def describe_torch(version: str, cuda: str | None) -> str:
    return f"torch {version} ({'CUDA ' + cuda if cuda else 'CPU only'})"


def machine_check(info: dict, machine: str) -> Check:
    """Whether the build is for this machine (pip installs a wheel by its platform tag only, but a build copied
    or unpacked by hand can land anywhere)."""
    built = info.get("PLATFORM")
    if built is None:
        return Check("platform", "WARN", f"the build does not say which machine it is for (running on {machine})")
    if built != machine:
        return Check("platform", "FAIL", f"built for {built}, running on {machine}: install the {machine} wheel")
    return Check("platform", "OK", f"built for {built}")


def environment_checks(info: dict, torch_version: str, torch_cuda: str | None, cxx11_abi: bool | None) -> list[Check]:
    """Checks of a build (the _build_info dict) against the running torch."""
    checks: list[Check] = []
    built = parse_release(info["TORCH_VERSION"])
    try:
        found = parse_release(torch_version)
    except ValueError:
        return [Check("torch version", "FAIL", f"cannot parse the running torch version {torch_version!r}")]
    if not torch_is_supported(torch_version):
        checks.append(
            Check(
                "torch",
                "FAIL",
                f"torch {torch_version} is older than {min_torch()}, the oldest torch visdet-ops supports "
                f"(its ops register with torch.library.register_fake / register_autograd, new in {min_torch()})",
            )
        )
    stable = bool(info.get("STABLE_ABI"))
    if stable:
        # A stable-ABI build calls libtorch through its stable C shim only: any torch >= the floor it was compiled
        # for (TORCH_TARGET_VERSION) runs it.
        floor = parse_release(info["STABLE_ABI_FLOOR"])
        if found.major_minor >= floor.major_minor:
            checks.append(
                Check(
                    "torch version", "OK", f"stable-ABI build for torch >= {_minor(str(floor))}, found {torch_version}"
                )
            )
        else:
            checks.append(
                Check(
                    "torch version",
                    "FAIL",
                    f"stable-ABI build for torch >= {_minor(str(floor))}, found torch {torch_version}: older torch "
                    "lacks the stable C functions it calls; install the per-minor build for this torch",
                )
            )
    elif built.major_minor == found.major_minor:
        checks.append(Check("torch version", "OK", f"built for {_minor(str(built))}, found {torch_version}"))
    else:
        checks.append(
            Check(
                "torch version",
                "FAIL",
                f"built for torch {_minor(str(built))}, found torch {torch_version}: the C++ ABI of "
                "torch changes between minor releases",
            )
        )

    built_cuda = info.get("TORCH_CUDA_VERSION")
    if built_cuda is None:
        if torch_cuda is None:
            checks.append(Check("CUDA", "OK", "CPU build on a CPU-only torch"))
        else:
            checks.append(
                Check(
                    "CUDA",
                    "WARN",
                    f"this is a CPU-only build on torch with CUDA {torch_cuda}: CPU tensors work, "
                    "CUDA tensors raise an error; install the CUDA build to run on the GPU",
                )
            )
    elif torch_cuda is None and stable:
        # A stable CUDA build carries its own CUDA runtime and finds torch's CUDA functions at run time only.
        checks.append(
            Check(
                "CUDA",
                "OK",
                f"stable-ABI build for CUDA {parse_release(built_cuda).major}.x on a CPU-only torch: the CPU kernels "
                "run; its CUDA kernels need a torch with CUDA",
            )
        )
    elif torch_cuda is None:
        checks.append(Check("CUDA", "FAIL", f"built for CUDA {built_cuda}, found a CPU-only torch (no CUDA runtime)"))
    else:
        b, f = parse_release(built_cuda), parse_release(torch_cuda)
        if b.major != f.major:
            checks.append(Check("CUDA", "FAIL", f"built for CUDA {built_cuda}, torch uses CUDA {torch_cuda}"))
        elif b.minor != f.minor and stable:
            checks.append(
                Check(
                    "CUDA",
                    "OK",
                    f"stable-ABI build for CUDA {b.major}.x (built with {built_cuda}), torch uses CUDA {torch_cuda}",
                )
            )
        elif b.minor != f.minor:
            checks.append(
                Check(
                    "CUDA",
                    "WARN",
                    f"built for CUDA {built_cuda}, torch uses CUDA {torch_cuda}: compatible within a major "
                    "release, but the matching variant is the tested one",
                )
            )
        else:
            checks.append(Check("CUDA", "OK", f"built for CUDA {built_cuda}, torch uses CUDA {torch_cuda}"))

    built_abi = info.get("CXX11_ABI")
    if stable:
        checks.append(Check("C++ ABI", "OK", "not used: a stable-ABI build calls libtorch through C functions only"))
    elif cxx11_abi is None or built_abi is None:
        checks.append(Check("C++ ABI", "WARN", "could not compare _GLIBCXX_USE_CXX11_ABI"))
    elif bool(built_abi) == bool(cxx11_abi):
        checks.append(Check("C++ ABI", "OK", f"_GLIBCXX_USE_CXX11_ABI={int(built_abi)} on both sides"))
    else:
        checks.append(
            Check(
                "C++ ABI",
                "FAIL",
                f"built with _GLIBCXX_USE_CXX11_ABI={int(built_abi)}, torch uses {int(cxx11_abi)}",
            )
        )
    return checks


# Which GPUs run an arch's machine code (SASS), as torch decides it (torch/cuda/__init__.py, DEVICE_REQUIREMENT, torch
# 2.13): within a major, a GPU runs the code of its own or an older minor (sm_121 runs sm_120 code, sm_103 sm_100
# code, sm_86 sm_80 code), except the integrated (Jetson) GPUs, which run their own code only: sm_53, sm_62, sm_72,
# sm_87 (Orin) and sm_101, Thor's name before CUDA 13, whose code also runs on sm_110 (Thor's name since).
INTEGRATED_GPUS = frozenset({(5, 3), (6, 2), (7, 2), (8, 7), (10, 1)})
_RUNS_ALSO_ON = {(10, 1): frozenset({(11, 0)})}


def sass_runs_on(code: tuple[int, int], device: tuple[int, int]) -> bool:
    """Whether a GPU of compute capability `device` runs SASS built for `code`."""
    if device in _RUNS_ALSO_ON.get(code, ()):
        return True
    if device in INTEGRATED_GPUS or code in INTEGRATED_GPUS:
        return code == device
    return code[0] == device[0] and code[1] <= device[1]


def arch_check(sass: list[str], ptx: list[str], capability: tuple[int, int], gpu: str) -> Check:
    """Whether a GPU of compute capability `capability` can run the build.

    SASS runs as sass_runs_on says; PTX for X.Y is JIT compiled by the driver for any capability >= X.Y."""
    cc = (int(capability[0]), int(capability[1]))
    name = f"GPU arch ({gpu}, sm_{capability[0]}{capability[1]})"
    for a in sass:
        if sass_runs_on(parse_release(a).major_minor, cc):
            return Check(name, "OK", f"runs the sm_{a.replace('.', '')} machine code in the build")
    for a in ptx:
        if parse_release(a).major_minor <= cc:
            return Check(
                name,
                "WARN",
                f"no machine code for it; the driver JIT-compiles the compute_{a.replace('.', '')} PTX "
                "(slow first call, then cached)",
            )
    built = ", ".join(sass) or "none"
    detail = f"compute capability {cc[0]}.{cc[1]} is not covered: SASS for {built}, PTX for {', '.join(ptx) or 'none'}"
    if cc in INTEGRATED_GPUS:
        detail += (
            f". sm_{cc[0]}{cc[1]} is an integrated (Jetson) GPU, which runs code built for itself only, and no "
            "visdet-ops wheel carries it (PyPI's torch has none either: JetPack ships its own torch). Build "
            f"visdet-ops from source against that torch: {build_from_source_command(f'{cc[0]}.{cc[1]}')}"
        )
    return Check(name, "FAIL", detail)
