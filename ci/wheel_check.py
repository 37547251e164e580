"""Checks a built wheel against its matrix row and prints what is inside:
path, size, platform tag, variant, SASS/PTX archs actually embedded."""

from __future__ import annotations

import ast
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from . import fatbin
from .matrix import CudaFlavour, floor_text, rules, sass_and_ptx, variant_name


class WheelCheckError(RuntimeError):
    pass


def build_info(wheel: Path) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("visdet_ops/_build_info.py").decode()
    info = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign):
            info[node.targets[0].id] = ast.literal_eval(node.value)
    return info


def embedded_archs(wheel: Path) -> tuple[list[str], list[str]]:
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        names = [n for n in zf.namelist() if n.startswith("visdet_ops/_C") and n.endswith(".so")]
        if len(names) != 1:
            raise WheelCheckError(f"{wheel.name}: expected one visdet_ops/_C*.so, found {names}")
        so = Path(zf.extract(names[0], tmp))
        return fatbin.archs(so)


def requires_dist(wheel: Path) -> list[str]:
    """The Requires-Dist lines of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def expected_variant(flavour: CudaFlavour, torch_version: Version, stable: bool = False) -> str:
    """The variant a build of this row gives: pt<minor><flavour>, or for a stable build stable<floor><cpu|cuX>."""
    if stable:
        return rules.stable_variant_name(rules.stable_flavour_for(str(flavour.version) if flavour.is_cuda else None))
    return variant_name(torch_version, flavour.name)


def check(
    wheel: Path, flavour: CudaFlavour, torch_version: Version, arch_list: list[str] | None = None, stable: bool = False
) -> dict:
    """Raises WheelCheckError on any disagreement; returns a summary dict. stable: a stable-ABI wheel built from
    this row against `torch_version` (the floor): build info STABLE_ABI and the floor, torch>=floor required."""
    _, version, _, tags = parse_wheel_filename(wheel.name)
    info = build_info(wheel)
    variant = expected_variant(flavour, torch_version, stable)
    problems = []
    if info["VARIANT"] != variant or version.local != variant:
        problems.append(f"variant: wheel says {info['VARIANT']} / +{version.local}, row says {variant}")
    built = Version(info["TORCH_VERSION"])
    if built.release[:2] != torch_version.release[:2]:
        problems.append(f"torch: built against {built}, row says {torch_version}")
    requires = [str(r.specifier) for r in map(Requirement, requires_dist(wheel)) if r.name == "torch"]
    if stable:
        floor = floor_text()
        if info.get("STABLE_ABI") is not True or info.get("STABLE_ABI_FLOOR") != floor:
            problems.append(
                f"stable ABI: build info STABLE_ABI={info.get('STABLE_ABI')!r} STABLE_ABI_FLOOR="
                f"{info.get('STABLE_ABI_FLOOR')!r}, expected True and {floor!r}"
            )
        if built.release[:2] != tuple(rules.STABLE_ABI_FLOOR):
            problems.append(f"torch: a stable wheel is built against the floor {floor}, this one against {built}")
        want_requires = [f">={floor}"]
    else:
        if info.get("STABLE_ABI"):
            problems.append("a stable-ABI build where the row is a per-minor one (VISDET_OPS_STABLE_ABI=1 set?)")
        want_requires = [f"=={torch_version.major}.{torch_version.minor}.*"]
    if requires != want_requires:
        problems.append(f"Requires-Dist: torch{requires}, expected torch{want_requires}")
    if flavour.is_cuda:
        if not info["WITH_CUDA"]:
            problems.append("CUDA row but the wheel has no CUDA kernels")
        elif Version(info["TORCH_CUDA_VERSION"]).release[:2] != flavour.version.release[:2]:
            problems.append(f"CUDA: built for {info['TORCH_CUDA_VERSION']}, row says {flavour.version}")
        want_sass, want_ptx = sass_and_ptx(arch_list or list(flavour.arch_list))
        if (info["CUDA_ARCH_SASS"], info["CUDA_ARCH_PTX"]) != (want_sass, want_ptx):
            problems.append(
                f"archs: build info {info['CUDA_ARCH_SASS']} + PTX {info['CUDA_ARCH_PTX']}, "
                f"expected {want_sass} + PTX {want_ptx}"
            )
    elif info["WITH_CUDA"]:
        problems.append("cpu row but the wheel has CUDA kernels")
    sass, ptx = embedded_archs(wheel)
    if (sass, ptx) != (info["CUDA_ARCH_SASS"], info["CUDA_ARCH_PTX"]):
        problems.append(
            f"embedded archs SASS {sass} PTX {ptx} differ from build info "
            f"{info['CUDA_ARCH_SASS']} PTX {info['CUDA_ARCH_PTX']}"
        )
    if not all(t.abi == "abi3" for t in tags):
        problems.append(f"not an abi3 wheel: {sorted(str(t) for t in tags)}")
    if problems:
        raise WheelCheckError(f"{wheel.name}:\n  " + "\n  ".join(problems))
    return {
        "wheel": str(wheel),
        "size_bytes": wheel.stat().st_size,
        "tags": sorted(str(t) for t in tags),
        "variant": variant,
        "stable_abi": stable,
        "sass": sass,
        "ptx": ptx,
        "build_info": info,
    }


def describe(summary: dict) -> str:
    floor = summary["build_info"].get("STABLE_ABI_FLOOR")
    stable = f"; stable ABI, every torch >= {floor}" if summary.get("stable_abi") else ""
    return (
        f"wheel     {summary['wheel']}\n"
        f"size      {summary['size_bytes'] / 1024:.0f} KiB\n"
        f"tags      {', '.join(summary['tags'])}\n"
        f"variant   {summary['variant']} (torch {summary['build_info']['TORCH_VERSION']}{stable})\n"
        f"SASS      {' '.join('sm_' + a.replace('.', '') for a in summary['sass']) or '-'}\n"
        f"PTX       {' '.join('compute_' + a.replace('.', '') for a in summary['ptx']) or '-'}"
    )


if __name__ == "__main__":
    for w in sys.argv[1:]:
        print(build_info(Path(w)))
        print(embedded_archs(Path(w)))
