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


def _extension(wheel: Path, tmp: str) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("visdet_ops/_C") and n.endswith(".so")]
        if len(names) != 1:
            raise WheelCheckError(f"{wheel.name}: expected one visdet_ops/_C*.so, found {names}")
        return Path(zf.extract(names[0], tmp))


def embedded_archs(wheel: Path) -> tuple[list[str], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        return fatbin.archs(_extension(wheel, tmp))


def extension_machine(wheel: Path) -> str:
    """The machine the wheel's compiled extension is for, from its ELF header."""
    with tempfile.TemporaryDirectory() as tmp:
        return rules.elf_machine(_extension(wheel, tmp))


# The top-level modules a wheel ships: pyproject.toml's py-modules. The build's own rules (visdet_build.py, beside
# setup.py) are not among them.
SHIPPED_MODULES = {"visdet_ops_doctor.py"}


def stray_modules(wheel: Path) -> list[str]:
    """The top-level Python modules of the wheel that it should not ship."""
    with zipfile.ZipFile(wheel) as zf:
        return sorted(n for n in zf.namelist() if "/" not in n and n.endswith(".py") and n not in SHIPPED_MODULES)


def tag_machines(tags) -> set[str]:
    """The machines a wheel's platform tags name (manylinux_2_34_aarch64 -> aarch64)."""
    out = set()
    for tag in tags:
        out |= {m for m in rules.PLATFORMS if tag.platform.endswith(f"_{m}")}
    return out


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
    if stray_modules(wheel):
        problems.append(f"top-level modules that are not shipped: {stray_modules(wheel)}")
    if not all(t.abi == "abi3" for t in tags):
        problems.append(f"not an abi3 wheel: {sorted(str(t) for t in tags)}")
    # The platform: the row view's machine, in the tag, the ELF header and the build info alike.
    machine = extension_machine(wheel)
    if tag_machines(tags) != {flavour.platform} or machine != flavour.platform:
        problems.append(
            f"platform: built for {flavour.platform}, but the tags say {sorted(str(t) for t in tags)} and the "
            f"extension is an {machine} ELF"
        )
    if info.get("PLATFORM") != flavour.platform:
        problems.append(f"platform: build info PLATFORM={info.get('PLATFORM')!r}, expected {flavour.platform!r}")
    if not any(t.platform.startswith("manylinux_") for t in tags):
        problems.append(f"not repaired to a manylinux tag: {sorted(str(t) for t in tags)}")
    if problems:
        raise WheelCheckError(f"{wheel.name}:\n  " + "\n  ".join(problems))
    return {
        "wheel": str(wheel),
        "size_bytes": wheel.stat().st_size,
        "tags": sorted(str(t) for t in tags),
        "variant": variant,
        "platform": machine,
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
        f"platform  {summary.get('platform')}\n"
        f"SASS      {' '.join('sm_' + a.replace('.', '') for a in summary['sass']) or '-'}\n"
        f"PTX       {' '.join('compute_' + a.replace('.', '') for a in summary['ptx']) or '-'}"
    )


if __name__ == "__main__":
    for w in sys.argv[1:]:
        print(build_info(Path(w)))
        print(embedded_archs(Path(w)))
