"""Typed access to ci/matrix.toml, the one table of visdet-ops variants.

Used by setup.py (default arch list), noxfile.py, the workflows (``python -m
ci.matrix --json``) and the tests. Standard library only (plus ``packaging``),
so that it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MATRIX_PATH = ROOT / "ci" / "matrix.toml"


def _load_build_rules():
    """visdet_ops/_build_rules.py (the variant grammar, the abi3 floor, the arch rules, the CUDA toolkit
    lookup), loaded from its file: importing the package would import torch and the compiled ops. Where the
    tree has no package (tests of an installed wheel run from such a copy), the installed package's file."""
    path = ROOT / "visdet_ops" / "_build_rules.py"
    if not path.exists():
        installed = importlib.util.find_spec("visdet_ops")  # finds the package without running its __init__
        if installed is None or not installed.submodule_search_locations:
            raise ImportError(f"{path} is missing and no visdet_ops package is installed")
        path = Path(installed.submodule_search_locations[0]) / "_build_rules.py"
    spec = importlib.util.spec_from_file_location("_visdet_ops_build_rules", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


rules = _load_build_rules()
sass_and_ptx = rules.sass_and_ptx


@dataclass(frozen=True)
class CudaFlavour:
    """One [[cuda]] row: a CUDA version (or cpu) and the torch builds for it."""

    name: str  # "cpu", "cu130"
    version: Version | None  # CUDA version; None for cpu
    arch_list: tuple[str, ...]  # TORCH_CUDA_ARCH_LIST entries, "+PTX" marks PTX
    torch: tuple[Version, ...]  # releases, ascending
    torch_index: str
    pypi_default: tuple[str, ...]  # torch minors whose PyPI wheel is this build
    manylinux_image: str
    # How a build machine without this CUDA gets it: debian_suite and
    # debian_packages (apt-get download, unpacked privately), pypi (wheels).
    toolchain: dict = field(default_factory=dict)

    @property
    def is_cuda(self) -> bool:
        return self.version is not None

    def newest_torch(self) -> Version:
        return self.torch[-1]

    def build_targets(self) -> list[Version]:
        """The newest patch release of each torch minor: what wheels are built against."""
        newest: dict[tuple[int, int], Version] = {}
        for t in self.torch:
            newest[(t.major, t.minor)] = t
        return list(newest.values())

    def patches_of(self, torch_version: Version | str) -> list[Version]:
        """Every release of this row with the same major.minor."""
        v = Version(str(torch_version))
        return [t for t in self.torch if (t.major, t.minor) == (v.major, v.minor)]

    def torch_for(self, wanted: str) -> Version:
        """The newest release of this row matching `wanted` ("2.4" or "2.4.1")."""
        want = Version(wanted)
        parts = len(want.release)
        matches = [t for t in self.torch if t.release[:parts] == want.release]
        if not matches:
            known = ", ".join(str(t) for t in self.torch)
            raise ValueError(f"torch {wanted} has no {self.name} build in ci/matrix.toml (known: {known})")
        return matches[-1]

    def torch_pip_args(self, torch_version: Version | str) -> list[str]:
        """pip install arguments for this row's build of `torch_version`: PyPI's wheel where it is this build,
        else PyTorch's index too (its +cpu / +cuXY label sorts above PyPI's plain release of the same number)."""
        version = Version(str(torch_version))
        args = [f"torch=={version}"]
        if not self.torch_from_pypi(version):
            args += ["--extra-index-url", self.torch_index]
        return args

    def torch_from_pypi(self, torch_version: Version) -> bool:
        """Whether PyPI's plain `torch==X` wheel is this flavour's build."""
        minor = f"{torch_version.major}.{torch_version.minor}"
        return minor in self.pypi_default


@dataclass(frozen=True)
class StableVariant:
    """One stable-ABI wheel ([stable] table): built from a [[cuda]] row against the floor torch, it serves every
    torch >= the floor (_build_rules.STABLE_ABI_FLOOR) with the row's CUDA major."""

    flavour: str  # "cpu", "cu12", "cu13"
    row: CudaFlavour  # the [[cuda]] row it is built from (toolkit, archs, image)
    torch: Version  # the build torch: the newest patch of the floor's minor in the row

    @property
    def name(self) -> str:
        """stable211cpu, stable211cu13: the local version label and index folder."""
        return rules.stable_variant_name(self.flavour)

    @property
    def session(self) -> str:
        """The nox session that builds it."""
        return f"build-stable-{self.flavour}"

    @property
    def is_cuda(self) -> bool:
        return self.row.is_cuda

    @property
    def arch_list(self) -> tuple[str, ...]:
        return self.row.arch_list

    @property
    def image(self) -> str:
        return self.row.manylinux_image

    @property
    def toolchain(self) -> dict:
        return self.row.toolchain

    def floor_patches(self) -> list[Version]:
        """The row's releases of the floor's minor (what --torch may pick; the default is the newest)."""
        return [t for t in self.row.torch if (t.major, t.minor) == rules.STABLE_ABI_FLOOR]


def floor_text() -> str:
    """The stable floor as a release prefix: '2.11'."""
    return ".".join(map(str, rules.STABLE_ABI_FLOOR))


@dataclass(frozen=True)
class Matrix:
    version: Version
    flavours: tuple[CudaFlavour, ...]
    tests_torch: Version  # what `nox -s tests` builds against
    tests_flavour: str
    stable: tuple[StableVariant, ...] = ()  # the stable-ABI wheels, in [stable] order

    def flavour(self, name: str) -> CudaFlavour:
        for f in self.flavours:
            if f.name == name:
                return f
        names = ", ".join(f.name for f in self.flavours)
        raise KeyError(f"no variant {name!r} in ci/matrix.toml (known: {names})")

    def flavour_for_cuda(self, cuda_version: str | None) -> CudaFlavour | None:
        """The row for a CUDA version as torch reports it ("13.0"), or cpu."""
        if cuda_version is None:
            return self.flavour("cpu")
        want = Version(cuda_version)
        for f in self.flavours:
            if f.version is not None and f.version.release[:2] == want.release[:2]:
                return f
        return None

    def stable_variant(self, flavour: str) -> StableVariant:
        """The stable wheel of a stable flavour ("cpu", "cu13") or variant name ("stable211cu13")."""
        for sv in self.stable:
            if flavour in (sv.flavour, sv.name):
                return sv
        names = ", ".join(sv.name for sv in self.stable) or "none"
        raise KeyError(f"no stable variant {flavour!r} in ci/matrix.toml's [stable] table (known: {names})")

    def stable_for_row(self, row: str) -> StableVariant | None:
        """The stable wheel built from [[cuda]] row `row`, if any."""
        return next((sv for sv in self.stable if sv.row.name == row), None)


def variant_name(torch_version: Version | str, flavour: str) -> str:
    """pt<major><minor><flavour>: the local version label and index folder."""
    return rules.variant_name(str(torch_version), flavour)


def load(path: Path = MATRIX_PATH) -> Matrix:
    """Reads and validates the matrix; raises ValueError naming the bad row."""
    data = tomllib.loads(path.read_text())
    if data.get("schema") != 1:
        raise ValueError(f"{path}: schema must be 1, got {data.get('schema')!r}")
    flavours = []
    seen: set[str] = set()
    for row in data["cuda"]:
        name = row["name"]
        where = f"{path}: [[cuda]] {name!r}"
        if name in seen:
            raise ValueError(f"{where}: duplicate name")
        seen.add(name)
        torch = tuple(Version(t) for t in row["torch"])
        if not torch:
            raise ValueError(f"{where}: torch list is empty")
        if list(torch) != sorted(set(torch)):
            raise ValueError(f"{where}: torch must be ascending without duplicates")
        too_old = [str(t) for t in torch if (t.major, t.minor) < rules.MIN_TORCH]
        if too_old:
            raise ValueError(
                f"{where}: torch {', '.join(too_old)} is older than visdet-ops' floor "
                f"{rules.min_torch()} (visdet_ops/_build_rules.py MIN_TORCH)"
            )
        version = Version(row["version"]) if "version" in row else None
        arch_list = tuple(row.get("arch_list", ()))
        if name == "cpu":
            if version is not None or arch_list:
                raise ValueError(f"{where}: cpu takes no CUDA version or arch_list")
        else:
            if version is None:
                raise ValueError(f"{where}: CUDA rows need a version")
            expected = f"cu{version.major}{version.minor}"
            if name != expected:
                raise ValueError(f"{where}: name must be {expected!r} for CUDA {version}")
            _check_arch_list(where, version, arch_list)
        flavours.append(
            CudaFlavour(
                name=name,
                version=version,
                arch_list=arch_list,
                torch=torch,
                torch_index=row["torch_index"],
                pypi_default=tuple(row.get("pypi_default", ())),
                manylinux_image=row["manylinux_image"],
                toolchain=dict(row.get("toolchain", {})),
            )
        )
    _check_pypi_defaults(flavours)
    tests = data["tests"]
    m = Matrix(
        Version(data["version"]),
        tuple(flavours),
        Version(tests["torch"]),
        tests["flavour"],
        _stable_variants(path, data.get("stable", {}), flavours),
    )
    if m.tests_torch not in m.flavour(m.tests_flavour).torch:
        raise ValueError(f"{path}: [tests] torch {m.tests_torch} is not a {m.tests_flavour} release of the matrix")
    return m


def _stable_variants(path: Path, table: dict, flavours: list[CudaFlavour]) -> tuple[StableVariant, ...]:
    """The [stable] table: stable flavour -> [[cuda]] row. Each row must ship the floor torch and give that flavour
    (cu126 -> cu12), and the flavours must be exactly those of _build_rules (what the import check recommends)."""
    if not table:
        return ()
    by_name = {f.name: f for f in flavours}
    out = []
    for flavour, row_name in table.items():
        where = f"{path}: [stable] {flavour} = {row_name!r}"
        row = by_name.get(row_name)
        if row is None:
            raise ValueError(f"{where}: no [[cuda]] row of that name")
        derived = rules.stable_flavour_for(str(row.version) if row.is_cuda else None)
        if flavour != derived:
            raise ValueError(f"{where}: the {row_name} row builds the stable flavour {derived!r}, not {flavour!r}")
        sv = StableVariant(flavour, row, Version("0"))
        patches = sv.floor_patches()
        if not patches:
            raise ValueError(
                f"{where}: the {row_name} row lists no torch {floor_text()} (the stable floor, "
                "_build_rules.STABLE_ABI_FLOOR), and a stable wheel is built against the floor"
            )
        out.append(StableVariant(flavour, row, patches[-1]))
    want, got = set(rules.stable_flavours()), {sv.flavour for sv in out}
    if want != got:
        raise ValueError(
            f"{path}: [stable] has the flavours {sorted(got)}, _build_rules.STABLE_ABI_CUDA_MAJORS gives "
            f"{sorted(want)} (the import check and the doctor recommend those): make them agree"
        )
    return tuple(out)


def _check_arch_list(where: str, cuda: Version, arch_list: tuple[str, ...]) -> None:
    if not arch_list:
        raise ValueError(f"{where}: arch_list is empty")
    archs = [Version(a.removesuffix("+PTX")) for a in arch_list]
    if archs != sorted(set(archs)):
        raise ValueError(f"{where}: arch_list must be ascending without duplicates")
    if not arch_list[-1].endswith("+PTX"):
        raise ValueError(f"{where}: the newest arch must carry +PTX (forward compatibility)")
    for entry in arch_list:
        problem = rules.arch_problem(str(cuda), entry)
        if problem:
            raise ValueError(f"{where}: {problem}")


def _check_pypi_defaults(flavours: list[CudaFlavour]) -> None:
    owner: dict[str, str] = {}
    for f in flavours:
        for minor in f.pypi_default:
            if minor in owner:
                raise ValueError(f"torch {minor}: PyPI default claimed by both {owner[minor]} and {f.name}")
            owner[minor] = f.name
            if not any(f"{t.major}.{t.minor}" == minor for t in f.torch):
                raise ValueError(f"{f.name}: pypi_default {minor} is not in its torch list")


def github_matrix(m: Matrix, newest_only: bool = False) -> list[dict[str, str]]:
    """Rows for a GitHub Actions matrix: one build job per variant (flavour x torch minor, then the stable
    wheels); a release builds them all. Each row names the nox session that builds it (`nox -s <session> --
    --torch <torch>`) and its [[cuda]] row (flavour). newest_only: the newest torch of each row (a quick check),
    and the stable wheels."""
    rows = []
    for f in m.flavours:
        torches = [f.newest_torch()] if newest_only else f.build_targets()
        for t in torches:
            rows.append(
                {
                    "flavour": f.name,
                    "torch": str(t),
                    "variant": variant_name(t, f.name),
                    "image": f.manylinux_image,
                    "session": f"build-{f.name}",
                }
            )
    for sv in m.stable:
        row = {"flavour": sv.row.name, "torch": str(sv.torch), "variant": sv.name, "image": sv.image}
        rows.append({**row, "session": sv.session})
    return rows


def markdown(m: Matrix) -> str:
    """docs/matrix.md: the variant table, generated from the matrix."""
    lines = [
        "# Variants",
        "",
        "Generated from `ci/matrix.toml` by `python -m ci.matrix --markdown > docs/matrix.md`",
        "(a test fails when this file is stale). One wheel per row and torch minor, abi3, for every",
        f"CPython >= {rules.MIN_PYTHON[0]}.{rules.MIN_PYTHON[1]}.",
        "",
        "| flavour | CUDA | torch releases | SASS archs | PTX | variants | torch comes from |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in m.flavours:
        sass, ptx = sass_and_ptx(f.arch_list)
        names = ", ".join(f"`{variant_name(t, f.name)}`" for t in f.build_targets())
        source = f.torch_index + (f" (PyPI default for {', '.join(f.pypi_default)})" if f.pypi_default else "")
        lines.append(
            f"| {f.name} | {f.version or '-'} | {', '.join(map(str, f.torch))} | {' '.join(sass) or '-'} | "
            f"{' '.join(ptx) or '-'} | {names} | {source} |"
        )
    floor = floor_text()
    lines += [
        "",
        "## Stable-ABI variants",
        "",
        f"One wheel per CUDA major for every torch >= {floor} (the stable floor, `_build_rules.STABLE_ABI_FLOOR`),",
        f"built against torch {floor} through the LibTorch stable ABI ([stable-abi.md](stable-abi.md)); the import",
        f"check and `visdet-ops doctor` recommend it for torch >= {floor}. Built from these `[[cuda]]` rows",
        "(`[stable]` in `ci/matrix.toml`):",
        "",
        "| variant | serves | built from | build torch | SASS archs | PTX | nox session |",
        "|---|---|---|---|---|---|---|",
    ]
    for sv in m.stable:
        sass, ptx = sass_and_ptx(sv.arch_list)
        serves = f"torch >= {floor}, " + (
            "CPU tensors (beside a CPU or CUDA torch)" if not sv.is_cuda else f"CUDA {sv.flavour.removeprefix('cu')}.x"
        )
        lines.append(
            f"| `{sv.name}` | {serves} | {sv.row.name} | {sv.torch} | {' '.join(sass) or '-'} | "
            f"{' '.join(ptx) or '-'} | `nox -s {sv.session}` |"
        )
    lines += [
        "",
        "Install: `pip install visdet-ops -f <index>/<variant>/`.",
        "",
        "## Adding a torch release",
        "",
        "1. Add the release to the `torch` list of every `[[cuda]]` row PyTorch built it for (ascending).",
        "   If PyPI's plain `torch==X.Y` wheel is one of them, add `X.Y` to that row's `pypi_default`.",
        '2. A new CUDA version gets its own row: `name = "cuXY"`, `version`, `arch_list` (newest arch',
        "   with `+PTX`), `torch_index`, `manylinux_image`. `python -m pytest tests/test_matrix.py`",
        "   rejects impossible rows (sm_70 on CUDA 13, sm_100 before 12.8, missing PTX, ...).",
        "3. `python -m ci.matrix --markdown > docs/matrix.md`, then `nox -s build-<flavour> -- --torch X.Y`",
        "   (or let `wheels.yml` build every row).",
        "",
        "The stable wheels need nothing for a new torch release: they already serve it. A new CUDA major gets",
        "a `[stable]` entry (its oldest row that ships the floor torch) and an entry in",
        "`_build_rules.STABLE_ABI_CUDA_MAJORS`; the matrix check fails until both agree.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="GitHub Actions matrix as JSON")
    parser.add_argument("--markdown", action="store_true", help="docs/matrix.md")
    parser.add_argument("--newest-only", action="store_true", help="only the newest torch of each row")
    args = parser.parse_args(argv)
    m = load()
    if args.markdown:
        print(markdown(m), end="")
        return 0
    rows = github_matrix(m, newest_only=args.newest_only)
    if args.json:
        print(json.dumps({"include": rows}))
    else:
        for r in rows:
            print(f"{r['variant']:<14} torch {r['torch']:<8} {r['flavour']:<6} nox -s {r['session']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
