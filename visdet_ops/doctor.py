"""`visdet-ops doctor`: explains whether visdet-ops can run here and why not.

Works even when `import visdet_ops` fails: started as the `visdet-ops` console
script (visdet_ops_doctor.py) or as `python -m visdet_ops doctor`, the package
import keeps the error in visdet_ops.LOAD_ERROR instead of raising it (see
visdet_ops/__init__.py), and the report says why. Exit status: 0 when
no check FAILs, 1 otherwise. Always ends with the install line for this
environment's recommended variant (the stable one where it serves this torch,
else the per-minor one; the per-minor name is reported too).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import shutil
import subprocess
import sys
import traceback

from . import _build_rules, _compat, _environment, _install
from ._compat import Check


def _driver() -> dict:
    """Driver version (nvidia-smi) and the CUDA version the driver supports."""
    out: dict = {"driver_version": None, "driver_cuda_version": None}
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
            out["driver_cuda_version"] = f"{version.value // 1000}.{(version.value % 1000) // 10}"
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            out["driver_version"] = res.stdout.strip().splitlines()[0] if res.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _empty_report() -> dict:
    """What is known before looking at torch: the interpreter and the platform."""
    return {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": _build_rules.normalize_machine(platform.machine()),
        "torch": None,
        "torch_cuda": None,
        "cxx11_abi": None,
        "gpus": [],
        "build_info": None,
        "checks": [],
        "ops": {},
        "environment": _environment.set_variables(),
        "install": "unknown",
    }


def collect() -> dict:
    report = _empty_report()
    checks: list[Check] = []

    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report any import failure
        checks.append(Check("torch", "FAIL", f"import torch failed: {type(exc).__name__}: {exc}"))
        report["checks"] = checks
        report["install"] = "pip install torch  # then: visdet-ops doctor"
        return report

    report["torch"] = torch.__version__
    report["torch_cuda"] = torch.version.cuda
    report["cxx11_abi"] = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False))
    report.update(_driver())
    checks.append(Check("torch", "OK", _compat.describe_torch(torch.__version__, torch.version.cuda)))
    cuda_ok = torch.cuda.is_available()
    if cuda_ok:
        for i in range(torch.cuda.device_count()):
            cap = torch.cuda.get_device_capability(i)
            report["gpus"].append(
                {"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{cap[0]}.{cap[1]}"}
            )
    elif torch.version.cuda:
        checks.append(
            Check("GPU", "WARN", "torch is a CUDA build but no GPU is visible (torch.cuda.is_available() is False)")
        )

    import visdet_ops  # keeps LOAD_ERROR instead of raising when started as the doctor (visdet_ops/__init__.py)
    from visdet_ops import _loader

    info = _loader.build_info()
    report["build_info"] = info
    if info is None:
        checks.append(Check("build info", "FAIL", "visdet_ops/_build_info.py is missing: visdet-ops is not built"))
    else:
        checks.append(_compat.machine_check(info, report["machine"]))
        checks += _compat.environment_checks(info, torch.__version__, torch.version.cuda, report["cxx11_abi"])
        if info["WITH_CUDA"]:
            for gpu in report["gpus"]:
                major, minor = (int(p) for p in gpu["capability"].split("."))
                checks.append(
                    _compat.arch_check(info["CUDA_ARCH_SASS"], info["CUDA_ARCH_PTX"], (major, minor), gpu["name"])
                )

    load_error = getattr(visdet_ops, "LOAD_ERROR", None)
    if load_error is not None:
        cause = load_error.__cause__
        detail = str(load_error).splitlines()[0]
        if cause is not None:
            detail += f" [cause: {type(cause).__name__}: {cause}]"
        checks.append(Check("load _C", "FAIL", detail))
    else:
        checks.append(Check("load _C", "OK", f"{len(_loader.op_names())} operators registered"))
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if cuda_ok else [])
        report["ops"] = _ops_report(torch, info, devices)
        for name, row in report["ops"].items():
            for dev, result in row["smoke"].items():
                if result == "OK":
                    continue
                if dev != "cpu" and not info["WITH_CUDA"]:
                    continue  # reported by the CUDA check already
                checks.append(Check(f"smoke {name} ({dev})", "FAIL", result))

    report["checks"] = checks
    # What to install: the stable variant where one serves this torch, else the per-minor one (variant_exact, the
    # build for exactly this torch minor, is reported either way).
    variant, problem = _build_rules.install_advice(
        torch.__version__, torch.version.cuda, report["machine"], (info or {}).get("PUBLISHED")
    )
    report["variant"] = variant
    if problem is not None:  # no wheel of the recommended variant for this machine (JetPack's torch, say)
        report["variant_exact"] = None
        report["variant_note"] = problem
        report["install"] = _install.build_from_source_command()
        checks.append(Check("wheel for this machine", "WARN", f"{problem}: build from source"))
    elif variant is None:  # a torch older than every build (MIN_TORCH): the environment check says so
        report["variant_exact"] = None
        report["variant_note"] = f"no visdet-ops build for torch < {_build_rules.min_torch()}"
        report["install"] = _install.upgrade_torch_command()
    else:
        report["variant_exact"] = _build_rules.variant_for(torch.__version__, torch.version.cuda)
        report["variant_note"] = _build_rules.variant_note(variant)
        report["install"] = _install.install_command(variant)
    return report


def _ops_report(torch, info: dict, devices) -> dict:
    """Each registered op that an op module's example case calls: its kernels, and the example's
    result (float32) on each device. An example case runs once per device for all the ops it calls."""
    from visdet_ops import _loader
    from visdet_ops.ops import EXAMPLES

    registered = _loader.op_names()
    ops: dict = {}
    for example in EXAMPLES.values():
        results: dict[str, str] = {}
        for device in devices:
            if device.type == "cuda" and not info["WITH_CUDA"]:
                results[device.type] = "skipped: CPU-only build"
                continue
            try:
                error = example.run(device, torch.float32, torch.Generator().manual_seed(0))
                results[device.type] = "OK" if error is None else f"wrong result: {error}"
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                results[device.type] = f"{type(exc).__name__}: {exc}"
        for name in example.ops:
            qual = f"visdet_ops::{name}"
            ops[name] = {
                "family": example.family,
                "cpu_kernel": qual in registered and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CPU"),
                "cuda_kernel": bool(info["WITH_CUDA"]) and torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CUDA"),
                "smoke": dict(results),
            }
    return ops


def _exit_code(report: dict) -> int:
    return 1 if any(c.status == "FAIL" for c in report["checks"]) else 0


def _print_text(report: dict) -> None:
    w = 12
    print("visdet-ops doctor")
    print(f"  {'python':<{w}} {report['python']} ({report['python_executable']})")
    print(f"  {'platform':<{w}} {report['platform']} ({report['machine']})")
    print(f"  {'torch':<{w}} {report['torch']}  CUDA {report['torch_cuda'] or 'none'}  cxx11abi={report['cxx11_abi']}")
    driver, driver_cuda = report.get("driver_version") or "none", report.get("driver_cuda_version") or "none"
    print(f"  {'driver':<{w}} {driver} (CUDA {driver_cuda})")
    for name, value in report["environment"].items():
        known = "" if name in _environment.VARIABLES else "  (unknown: see docs/environment.md)"
        print(f"  {'env':<{w}} {name}={value}{known}")
    for gpu in report["gpus"]:
        print(f"  {'gpu ' + str(gpu['index']):<{w}} {gpu['name']} (sm {gpu['capability']})")
    info = report["build_info"]
    if info:
        print("  build")
        for key in (
            "VERSION",
            "PLATFORM",
            "TORCH_VERSION",
            "TORCH_CUDA_VERSION",
            "NVCC_VERSION",
            "CUDA_ARCH_SASS",
            "CUDA_ARCH_PTX",
            "CXX11_ABI",
            "STABLE_ABI",
            "STABLE_ABI_FLOOR",
            "COMPILER",
            "GIT_COMMIT",
            "BUILD_TIME",
        ):
            print(f"    {key.lower():<{w + 6}} {info.get(key)}")
    if report["ops"]:
        width = max(len(name) for name in report["ops"])
        print(f"  {'ops':<{width + 2}} CPU   CUDA  smoke")
        for name, row in report["ops"].items():
            smoke = ", ".join(f"{d}: {r}" for d, r in row["smoke"].items())
            cpu, cuda = ("yes" if row[k] else "no" for k in ("cpu_kernel", "cuda_kernel"))
            print(f"    {name:<{width}} {cpu:<5} {cuda:<5} {smoke}")
    print("  checks")
    for c in report["checks"]:
        print(f"    [{c.status:<4}] {c.name}: {c.detail}")
    status = "FAIL" if _exit_code(report) else "OK"
    print(f"  result: {status}")
    print(f"Install line for this environment: {report['install']}")
    if report.get("variant") and report["variant"] != report.get("variant_exact"):
        print(f"  ({report['variant_note']}; the build for this torch minor alone: {report['variant_exact']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="visdet-ops", description="visdet-ops tools")
    sub = parser.add_subparsers(dest="command", required=True)
    doc = sub.add_parser("doctor", help="explain whether visdet-ops can run in this environment")
    doc.add_argument("--json", action="store_true", help="machine-readable report")
    args = parser.parse_args(argv)
    try:
        report = collect()
    except Exception:  # noqa: BLE001 - the doctor must not die without a report
        report = _empty_report()
        report["checks"] = [Check("doctor", "FAIL", traceback.format_exc())]
    if args.json:
        out = dict(report)
        out["checks"] = [c.__dict__ for c in report["checks"]]
        out["ok"] = _exit_code(report) == 0
        print(json.dumps(out, indent=2, default=str))
    else:
        _print_text(report)
    return _exit_code(report)
