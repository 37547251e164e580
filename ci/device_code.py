"""Compares the CUDA device code of two builds: the cubins and PTX that cuobjdump extracts from each wheel's extension,
arch by arch. The aarch64 wheels' kernels are the ones tested on the GPU when this says "same" for every arch the two
have in common (docs/aarch64.md, "The same kernels").

  python -m ci.device_code A.whl B.whl [--cuobjdump PATH]     exit 1 when an arch the two share differs

cuobjdump comes from PyPI's nvidia-cuda-cuobjdump (`nox -s device-code` installs it; neither the system CUDA 13 here
nor PyPI's CUDA 13.0 toolchain has it, and 13.0 has no such wheel: the 13.x one reads 13.0 fatbins). The payloads
ci/fatbin.py reads (compressed as stored) are compared as well, so the check also stands without cuobjdump.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import fatbin  # noqa: E402

CUOBJDUMP_REQUIREMENT = "nvidia-cuda-cuobjdump>=13.2,<14"
_EXTRACTED = re.compile(r"^.+\.(?P<n>\d+)\.(?P<arch>sm_\d+)\.(?P<kind>cubin|ptx)$")


def extension(wheel: Path, dest: Path) -> Path:
    """The wheel's visdet_ops/_C*.so, extracted into `dest`."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("visdet_ops/_C") and n.endswith(".so")]
        return Path(zf.extract(name, dest))


def find_cuobjdump(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in map(Path, sys.path):
        candidate = base / "nvidia" / "cu13" / "bin" / "cuobjdump"
        if candidate.exists():
            return str(candidate)
    return None


def cuobjdump_files(cuobjdump: str, library: Path, dest: Path) -> dict[tuple[str, str], list[bytes]]:
    """(kind, arch) -> the cubins / PTX files `cuobjdump -xelf all -xptx all` writes, in its numbering order."""
    dest.mkdir(parents=True, exist_ok=True)
    for flag in ("-xelf", "-xptx"):
        subprocess.run([cuobjdump, flag, "all", str(library)], cwd=dest, capture_output=True, text=True, check=True)
    out: dict[tuple[str, str], list[tuple[int, bytes]]] = {}
    for f in dest.iterdir():
        m = _EXTRACTED.match(f.name)
        if m:
            arch = m.group("arch").removeprefix("sm_")
            key = ("ptx" if m.group("kind") == "ptx" else "sass", f"{arch[:-1]}.{arch[-1]}")
            out.setdefault(key, []).append((int(m.group("n")), f.read_bytes()))
    return {k: [data for _, data in sorted(v)] for k, v in out.items()}


def compare_wheels(a: Path, b: Path, cuobjdump: str | None) -> tuple[dict, dict | None]:
    """(payload comparison per (kind, arch), cuobjdump comparison per (kind, arch) or None without cuobjdump)."""
    with tempfile.TemporaryDirectory() as tmp:
        la, lb = extension(a, Path(tmp) / "a"), extension(b, Path(tmp) / "b")
        payloads = fatbin.compare(la, lb)
        if cuobjdump is None:
            return payloads, None
        fa = cuobjdump_files(cuobjdump, la, Path(tmp) / "xa")
        fb = cuobjdump_files(cuobjdump, lb, Path(tmp) / "xb")
        return payloads, fatbin.compare_groups(fa, fb, _judge_files)


def _judge_files(a: list[bytes], b: list[bytes]) -> str:
    """Two builds' extracted files of one (kind, arch), in cuobjdump's order."""
    if a == b:
        return f"same ({len(a)} files)"
    if sorted(a) == sorted(b):
        return "same files, another order"
    changed = sum(x != y for x, y in zip(a, b, strict=False))
    return f"differs ({changed} of {len(a)} files)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--cuobjdump", help="the cuobjdump to use (default: PATH, then an installed nvidia wheel)")
    args = parser.parse_args(argv)
    tool = find_cuobjdump(args.cuobjdump)
    payloads, dumped = compare_wheels(args.a, args.b, tool)
    print(f"A: {args.a.name}\nB: {args.b.name}\ncuobjdump: {tool or 'not found (payloads only)'}")
    failed = False
    for key, result in payloads.items():
        extracted = "-" if dumped is None else dumped.get(key, "absent")
        print(f"  {key[0]:<4} {key[1]:<5} payload: {result:<10} cuobjdump: {extracted}")
        shared = not result.startswith("only")
        failed |= shared and (result != "same" or (dumped is not None and not dumped.get(key, "").startswith("same")))
    print("FAIL: device code differs in an arch both builds have" if failed else "OK: every shared arch is the same")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
