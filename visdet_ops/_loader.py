"""Loads visdet_ops._C after checking that it fits the running torch.

Every failure becomes ONE ImportError that says what the build was made for,
what was found, chains the original error and prints the pip line that fixes
it. Nothing is swallowed: the original exception is the __cause__.
"""

from __future__ import annotations

import functools
import importlib
import platform
import warnings

from . import _build_rules, _compat, _install

_DOCTOR_HINT = "Run `visdet-ops doctor` (or `python -m visdet_ops doctor`) for a full report."


def build_info() -> dict | None:
    """The _build_info module as a dict, or None for an unbuilt source tree."""
    try:
        mod = importlib.import_module("visdet_ops._build_info")
    except ImportError:
        return None
    return {k: v for k, v in vars(mod).items() if k.isupper()}


def _fix_lines(torch_version: str, torch_cuda: str | None, published: dict | None = None) -> str:
    # The stable variant where one serves this torch (one wheel for every torch >= the floor), else the per-minor one;
    # where none is published for this machine (the build's PUBLISHED table), the build from source.
    variant, problem = _build_rules.install_advice(torch_version, torch_cuda, platform.machine(), published)
    if problem is not None:
        return (
            f"{problem}. Build visdet-ops from source against this torch instead:\n"
            f"  {_install.build_from_source_command()}"
        )
    if variant is None:
        return (
            f"visdet-ops has builds for torch >= {_build_rules.min_torch()} only; upgrade torch first:\n"
            f"  {_install.upgrade_torch_command()}\n"
            "then run `visdet-ops doctor` for the install line of the build that fits it."
        )
    return (
        f"Install the visdet-ops build for this environment ({_build_rules.variant_note(variant)}):\n"
        f"  {_install.install_command(variant)}"
    )


def _error(
    summary: str, details: list[str], torch_version: str, torch_cuda: str | None, published: dict | None = None
) -> ImportError:
    lines = [summary, *[f"  - {d}" for d in details], _fix_lines(torch_version, torch_cuda, published), _DOCTOR_HINT]
    return ImportError("\n".join(lines))


def load_library() -> dict:
    """Checks the build against torch, then loads _C. Returns the build info."""
    import torch

    info = build_info()
    torch_version, torch_cuda = torch.__version__, torch.version.cuda
    if info is None:
        raise _error(
            "visdet_ops is not built: visdet_ops/_build_info.py is missing (an unbuilt source checkout?).",
            ["build it in place: pip install --no-build-isolation -e .", "or install a wheel:"],
            torch_version,
            torch_cuda,
        )
    built = _compat.describe_torch(info["TORCH_VERSION"], info["TORCH_CUDA_VERSION"])
    found = _compat.describe_torch(torch_version, torch_cuda)
    checks = [_compat.machine_check(info, _build_rules.normalize_machine(platform.machine()))]
    checks += _compat.environment_checks(
        info, torch_version, torch_cuda, getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    )
    failed = [c for c in checks if c.status == "FAIL"]
    if failed:
        raise _error(
            f"visdet-ops {info['VERSION']} was built for {built}, but this environment has {found}.",
            [f"{c.name}: {c.detail}" for c in failed],
            torch_version,
            torch_cuda,
            info.get("PUBLISHED"),
        )
    try:
        importlib.import_module("visdet_ops._C")
    except (ImportError, OSError) as exc:
        raise _error(
            f"visdet-ops {info['VERSION']} (built for {built}) failed to load its compiled ops "
            f"with {found}: {type(exc).__name__}: {exc}",
            [],
            torch_version,
            torch_cuda,
            info.get("PUBLISHED"),
        ) from exc
    if not info["WITH_CUDA"]:
        _register_cuda_errors(info, torch_version, torch_cuda)
    return info


# Keeps the Python CUDA registrations of a CPU-only build alive.
_CUDA_ERROR_LIBRARY = None  # a torch.library.Library once registered


def op_names() -> list[str]:
    """Every visdet_ops:: operator the loaded _C registered."""
    import torch

    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("visdet_ops::"))


def _register_cuda_errors(info: dict, torch_version: str, torch_cuda: str | None) -> None:
    """A CPU-only build answers CUDA tensors with a clear error, not a dispatcher one."""
    global _CUDA_ERROR_LIBRARY
    import torch

    message = f"visdet-ops {info['VERSION']} is a CPU-only build and has no CUDA kernels. "
    if torch_cuda is None:
        message += f"This torch ({torch_version}) has no CUDA either: install a CUDA build of torch, then visdet-ops."
    else:
        message += _fix_lines(torch_version, torch_cuda, info.get("PUBLISHED"))
    lib = torch.library.Library("visdet_ops", "IMPL")  # noqa: TOR901
    for name in op_names():
        op = name.split("::", 1)[1]

        def raise_no_cuda(*args, _op=op, **kwargs):
            raise RuntimeError(f"visdet_ops::{_op}: {message}")

        lib.impl(op, raise_no_cuda, "CUDA")
    _CUDA_ERROR_LIBRARY = lib


@functools.cache
def check_device_arch(device_index: int) -> None:
    """Warns once per GPU whose compute capability the build does not cover."""
    import torch

    info = build_info()
    if not info or not info["WITH_CUDA"]:
        return
    capability = torch.cuda.get_device_capability(device_index)
    check = _compat.arch_check(
        info["CUDA_ARCH_SASS"], info["CUDA_ARCH_PTX"], capability, torch.cuda.get_device_name(device_index)
    )
    if check.status != "OK":
        warnings.warn(f"visdet-ops: {check.name}: {check.detail}", RuntimeWarning, stacklevel=3)
