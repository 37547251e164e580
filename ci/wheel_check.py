"""Checks a built wheel against its matrix row and prints what is inside:
path, size, platform tag, variant, SASS/PTX archs actually embedded."""

from __future__ import annotations

import ast
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from . import fatbin
from .matrix import CudaFlavour, sass_and_ptx, variant_name


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


def check(wheel: Path, flavour: CudaFlavour, torch_version: Version, arch_list: list[str] | None = None) -> dict:
    """Raises WheelCheckError on any disagreement; returns a summary dict."""
    _, version, _, tags = parse_wheel_filename(wheel.name)
    info = build_info(wheel)
    variant = variant_name(torch_version, flavour.name)
    problems = []
    if info["VARIANT"] != variant or version.local != variant:
        problems.append(f"variant: wheel says {info['VARIANT']} / +{version.local}, row says {variant}")
    built = Version(info["TORCH_VERSION"])
    if built.release[:2] != torch_version.release[:2]:
        problems.append(f"torch: built against {built}, row says {torch_version}")
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
        "sass": sass,
        "ptx": ptx,
        "build_info": info,
    }


def describe(summary: dict) -> str:
    return (
        f"wheel     {summary['wheel']}\n"
        f"size      {summary['size_bytes'] / 1024:.0f} KiB\n"
        f"tags      {', '.join(summary['tags'])}\n"
        f"variant   {summary['variant']} (torch {summary['build_info']['TORCH_VERSION']})\n"
        f"SASS      {' '.join('sm_' + a.replace('.', '') for a in summary['sass']) or '-'}\n"
        f"PTX       {' '.join('compute_' + a.replace('.', '') for a in summary['ptx']) or '-'}"
    )


if __name__ == "__main__":
    for w in sys.argv[1:]:
        print(build_info(Path(w)))
        print(embedded_archs(Path(w)))
