"""Checks that a stable-ABI build of visdet_ops._C calls libtorch through the stable C shim only.

  python -m ci.abi_audit <wheel | .so> [--torch-lib DIR]     exit 1 on a violation, 2 on an error

The rule: every dynamic symbol that the extension imports and that libtorch*/libc10* export (the symbol tables of
the torch install, `nm -D --defined-only`) must be a stable C shim function: an unmangled `aoti_torch_*` or
`torch_*` name. A mangled C++ symbol (at::, c10::, torch:: classes and functions) from libtorch is the unstable ABI:
it changes between torch minors, and a wheel using it runs on the torch it was built against only.

torch-abi-audit (pip install torch-abi-audit; Quansight) makes the same split by symbol name and also maps each
shim function to the torch release that introduced it; when it is installed, the audit runs it too and requires
the minimum torch it reports to be at most the stable floor (_build_rules.STABLE_ABI_FLOOR). The nm rule stands on
its own so that CI needs nothing but binutils and the torch it builds against."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import visdet_build as rules

ROOT = Path(__file__).resolve().parent.parent
TORCH_LIBRARIES = re.compile(r"^lib(torch|c10)[a-z0-9_]*\.so$")
STABLE_SHIM = re.compile(r"^(aoti_torch|torch)_[A-Za-z0-9_]+$")


@dataclass
class AuditResult:
    library: str
    from_torch: list[str] = field(default_factory=list)  # imported symbols that libtorch*/libc10* define
    violations: list[str] = field(default_factory=list)  # of those, the ones outside the stable C shim
    min_torch: str | None = None  # torch-abi-audit's minimum torch version, when it ran

    @property
    def stable(self) -> bool:
        return not self.violations


def dynamic_symbols(library: Path, defined: bool) -> set[str]:
    """The dynamic symbols a shared library defines (defined=True) or imports, without version suffixes."""
    nm = shutil.which("nm")
    if nm is None:
        raise RuntimeError("abi_audit: `nm` (binutils) is needed and was not found on PATH")
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run([nm, "-D", flag, str(library)], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@")[0])
    return names


def torch_exports(torch_lib: Path) -> set[str]:
    """Every dynamic symbol that the libtorch*/libc10* libraries of a torch install define."""
    libraries = [p for p in sorted(torch_lib.iterdir()) if TORCH_LIBRARIES.match(p.name)]
    if not libraries:
        raise RuntimeError(f"abi_audit: no libtorch*/libc10* libraries in {torch_lib}")
    exports: set[str] = set()
    for library in libraries:
        exports |= dynamic_symbols(library, defined=True)
    return exports


# libtorch also exports the C++ standard library's template instantiations it uses (std::basic_stringstream, ...);
# the extension's own references to those are libstdc++'s ABI, not torch's.
_CXX_RUNTIME = re.compile(
    r"^((vtable|typeinfo|typeinfo name|VTT|construction vtable) for )?(std|__gnu_cxx|__cxxabiv1)::"
)


def demangle(symbols: list[str]) -> list[str]:
    """The readable names of symbols, in order (c++filt, binutils)."""
    filt = shutil.which("c++filt")
    if filt is None:
        raise RuntimeError("abi_audit: `c++filt` (binutils) is needed and was not found on PATH")
    if not symbols:
        return []
    out = subprocess.run([filt], input="\n".join(symbols), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def classify(imported: Iterable[str], exports: set[str]) -> tuple[list[str], list[str]]:
    """(the imported symbols torch defines, those of them outside the stable C shim). The rule under test: a symbol
    libtorch*/libc10* define is fine when it is a C shim function (aoti_torch_*, torch_*) or belongs to the C++
    runtime (std::, __gnu_cxx::); anything else (at::, c10::, torch::, caffe2:: ...) is the unstable ABI."""
    from_torch = sorted(s for s in imported if s in exports)
    candidates = [s for s in from_torch if not STABLE_SHIM.match(s)]
    readable = demangle(candidates)
    return from_torch, [s for s, r in zip(candidates, readable, strict=True) if not _CXX_RUNTIME.match(r)]


def torch_abi_audit_min_torch(library: Path) -> str | None:
    """The minimum torch version torch-abi-audit reports for the library, or None when the tool is not installed."""
    tool = shutil.which("torch-abi-audit")
    if tool is None:
        return None
    out = subprocess.run([tool, "--json", str(library)], capture_output=True, text=True).stdout
    report = json.loads(out)
    versions = [
        e["torch"]["min_torch_version"]
        for e in report.get("extensions", [])
        if e.get("torch") and e["torch"].get("min_torch_version")
    ]
    return max(versions, default=None, key=lambda v: tuple(int(p) for p in v.split(".")))


def audit(library: Path, torch_lib: Path) -> AuditResult:
    result = AuditResult(str(library))
    result.from_torch, result.violations = classify(dynamic_symbols(library, defined=False), torch_exports(torch_lib))
    result.min_torch = torch_abi_audit_min_torch(library)
    return result


def extension_of(target: Path, tmp: Path) -> Path:
    """The visdet_ops/_C*.so of a wheel (extracted into tmp), or target itself."""
    if target.suffix != ".whl":
        return target
    with zipfile.ZipFile(target) as zf:
        names = [n for n in zf.namelist() if n.startswith("visdet_ops/_C") and n.endswith(".so")]
        if len(names) != 1:
            raise RuntimeError(f"abi_audit: {target.name}: expected one visdet_ops/_C*.so, found {names}")
        return Path(zf.extract(names[0], tmp))


def default_torch_lib() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("abi_audit: torch is not importable here; pass --torch-lib <site-packages>/torch/lib")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="a visdet-ops wheel or a _C*.so")
    parser.add_argument("--torch-lib", type=Path, help="the torch/lib folder whose exports count as libtorch")
    args = parser.parse_args(argv)
    floor = ".".join(map(str, rules.STABLE_ABI_FLOOR))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            library = extension_of(args.target, Path(tmp))
            result = audit(library, args.torch_lib or default_torch_lib())
    except (OSError, RuntimeError, subprocess.CalledProcessError, json.JSONDecodeError) as exc:
        print(f"abi_audit: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.target.name}: imports {len(result.from_torch)} symbols from libtorch/libc10")
    if result.violations:
        print(f"FAIL: {len(result.violations)} of them are outside the stable C shim (unstable libtorch ABI):")
        for mangled, readable in zip(result.violations, demangle(result.violations), strict=False):
            print(f"  {readable}    [{mangled}]" if readable != mangled else f"  {mangled}")
        return 1
    print("OK: every libtorch symbol it imports is a stable C shim function (aoti_torch_*, torch_*)")
    if result.min_torch is not None:
        print(f"torch-abi-audit: needs torch >= {result.min_torch} (stable floor {floor})")
        if tuple(map(int, result.min_torch.split(".")))[:2] > rules.STABLE_ABI_FLOOR:
            print(f"FAIL: the extension needs torch {result.min_torch}, newer than the stable floor {floor}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
