"""Typed access to ci/matrix.toml, the one table of visdet-ops variants.

Used by noxfile.py, the workflows (``python -m ci.matrix --json``), the ci/ helpers and the tests; setup.py reads
ci/matrix.toml itself (plain TOML: the release build imports nothing from ci/). Standard library only (plus
``packaging``), so that it runs before anything is installed. A row is viewed per platform (CudaFlavour.on).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

import visdet_build as rules

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MATRIX_PATH = ROOT / "ci" / "matrix.toml"


sass_and_ptx = rules.sass_and_ptx


@dataclass(frozen=True)
class CudaFlavour:
    """One [[cuda]] row on one platform: a CUDA version (or cpu) and the torch builds for it on that machine. The row's
    [cuda.<platform>] table gives what differs per platform (on())."""

    name: str  # "cpu", "cu130"
    version: Version | None  # CUDA version; None for cpu
    arch_list: tuple[str, ...]  # TORCH_CUDA_ARCH_LIST entries, "+PTX" marks PTX
    torch: tuple[Version, ...]  # releases, ascending
    torch_index: str
    pypi_default: tuple[str, ...]  # torch minors whose PyPI wheel (for this platform) is this build
    manylinux_image: str
    # How a build machine without this CUDA gets it: debian_suite and
    # debian_packages (apt-get download, unpacked privately), pypi (wheels).
    toolchain: dict = field(default_factory=dict)
    platform: str = "x86_64"  # the machine this view is of
    platforms: tuple[str, ...] = ("x86_64",)  # every machine torch ships the row for
    row: dict = field(default_factory=dict, compare=False, repr=False)  # the raw [[cuda]] table, for on()

    @property
    def is_cuda(self) -> bool:
        return self.version is not None

    def on(self, platform: str) -> CudaFlavour:
        """The same row on another platform; KeyError naming the row where torch ships no build for it."""
        if platform == self.platform:
            return self
        if platform not in self.platforms:
            raise KeyError(
                f"torch ships no {platform} build of the {self.name} row (ci/matrix.toml: platforms = "
                f"{list(self.platforms)})"
            )
        return _row_view(self.row, platform, MATRIX_PATH)

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


def _row_view(row: dict, platform: str, path: Path) -> CudaFlavour:
    """A [[cuda]] table on one of its platforms, validated: the row's values with its [cuda.<platform>] table's."""
    name = row["name"]
    where = f"{path}: [[cuda]] {name!r} on {platform}"
    table = row.get(platform)
    if not isinstance(table, dict) or "manylinux_image" not in table:
        raise ValueError(f"{where}: needs a [cuda.{platform}] table with its manylinux_image")
    unknown = set(table) - {"manylinux_image", "pypi_default", "since", "arch_list"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} in [cuda.{platform}]")
    torch = tuple(Version(t) for t in row["torch"])
    if "since" in table:
        since = Version(table["since"])
        if since not in torch:
            raise ValueError(f"{where}: since = {table['since']!r} is not a release of the row")
        torch = tuple(t for t in torch if t >= since)
    version = Version(row["version"]) if "version" in row else None
    arch_list = tuple(table.get("arch_list", row.get("arch_list", ())))
    if version is not None:
        _check_arch_list(where, version, arch_list)
    elif arch_list:
        raise ValueError(f"{where}: cpu takes no arch_list")
    return CudaFlavour(
        name=name,
        version=version,
        arch_list=arch_list,
        torch=torch,
        torch_index=row["torch_index"],
        pypi_default=tuple(table.get("pypi_default", ())),
        manylinux_image=table["manylinux_image"],
        toolchain=dict(row.get("toolchain", {})),
        platform=platform,
        platforms=tuple(row["platforms"]),
        row=row,
    )


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

    @property
    def platforms(self) -> tuple[str, ...]:
        """The machines this stable wheel is built for: those where its row ships the floor torch."""
        out = []
        for platform in self.row.platforms:
            view = self.row.on(platform)
            if any((t.major, t.minor) == rules.STABLE_ABI_FLOOR for t in view.torch):
                out.append(platform)
        return tuple(out)

    def on(self, platform: str) -> StableVariant:
        """The stable wheel on another platform; KeyError where its row ships no floor torch there."""
        if platform not in self.platforms:
            raise KeyError(
                f"{self.name} has no {platform} build: the {self.row.name} row ships no torch {floor_text()} "
                f"for {platform} (ci/matrix.toml)"
            )
        row = self.row.on(platform)
        patches = [t for t in row.torch if (t.major, t.minor) == rules.STABLE_ABI_FLOOR]
        return StableVariant(self.flavour, row, patches[-1])


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

    runners: dict = field(default_factory=dict)  # [platforms.<platform>] runner: the GitHub runner that builds it

    def flavour(self, name: str, platform: str = "x86_64") -> CudaFlavour:
        """The row `name` on `platform` (KeyError naming the row where torch ships nothing for that platform)."""
        for f in self.flavours:
            if f.name == name:
                return f.on(platform)
        names = ", ".join(f.name for f in self.flavours)
        raise KeyError(f"no variant {name!r} in ci/matrix.toml (known: {names})")

    def platform_flavours(self, platform: str) -> list[CudaFlavour]:
        """Every row torch ships for `platform`, as its view on that platform."""
        return [f.on(platform) for f in self.flavours if platform in f.platforms]

    @property
    def platforms(self) -> tuple[str, ...]:
        """Every platform some row ships, in rules.PLATFORMS order."""
        return tuple(p for p in rules.PLATFORMS if any(p in f.platforms for f in self.flavours))

    def published(self) -> dict:
        """Per platform, the variant names that get a wheel and the newest torch minor the matrix knows: the PUBLISHED
        table setup.py writes into _build_info (the import check and the doctor say where no wheel exists)."""
        out = {}
        for platform in self.platforms:
            rows = self.platform_flavours(platform)
            names = {variant_name(t, f.name) for f in rows for t in f.build_targets()}
            names |= {sv.name for sv in self.stable if platform in sv.platforms}
            newest = max(t for f in rows for t in f.torch)
            out[platform] = {"variants": sorted(names), "newest_torch": f"{newest.major}.{newest.minor}"}
        return out

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
    platform_views = []  # the rows' views on platforms other than x86_64, checked like the x86_64 ones
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
        elif version is None:
            raise ValueError(f"{where}: CUDA rows need a version")
        elif name != f"cu{version.major}{version.minor}":
            raise ValueError(f"{where}: name must be {f'cu{version.major}{version.minor}'!r} for CUDA {version}")
        platforms = row.get("platforms")
        if not platforms or list(platforms) != sorted(set(platforms), key=platforms.index):
            raise ValueError(f"{where}: platforms must list the machines torch ships the row for, e.g. ['x86_64']")
        bad = [p for p in platforms if p not in rules.PLATFORMS]
        if bad:
            raise ValueError(f"{where}: platforms {bad} are none of {list(rules.PLATFORMS)}")
        stray = [p for p in rules.PLATFORMS if p in row and p not in platforms]
        if stray:
            raise ValueError(f"{where}: [cuda.{stray[0]}] given but {stray[0]!r} is not in its platforms")
        if "x86_64" not in platforms:
            raise ValueError(f"{where}: every row ships x86_64 (Matrix.flavours holds the rows' x86_64 views)")
        views = [_row_view(row, p, path) for p in platforms]
        flavours += [v for v in views if v.platform == "x86_64"]
        platform_views += [v for v in views if v.platform != "x86_64"]
    for platform in rules.PLATFORMS:
        _check_pypi_defaults([v for v in (*flavours, *platform_views) if v.platform == platform])
    runners = {p: t.get("runner") for p, t in data.get("platforms", {}).items()}
    missing = [p for f in flavours for p in f.platforms if not runners.get(p)]
    if missing:
        raise ValueError(f"{path}: [platforms.{missing[0]}] needs the runner (GitHub Actions) that builds it")
    tests = data["tests"]
    m = Matrix(
        Version(data["version"]),
        tuple(flavours),
        Version(tests["torch"]),
        tests["flavour"],
        _stable_variants(path, data.get("stable", {}), flavours),
        runners,
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
    """Rows for a GitHub Actions matrix: one build job per variant and platform (flavour x torch minor x platform,
    then the stable wheels on each of their platforms); a release builds them all. Each row names the nox session
    that builds it (`nox -s <session> -- --torch <torch> --platform <platform>`), its [[cuda]] row (flavour), the
    platform's manylinux image and the runner that builds it natively. newest_only: the newest torch of each row (a
    quick check), and the stable wheels."""
    rows = []
    for platform in m.platforms:
        for f in m.platform_flavours(platform):
            torches = [f.newest_torch()] if newest_only else f.build_targets()
            for t in torches:
                rows.append(
                    {
                        "flavour": f.name,
                        "torch": str(t),
                        "variant": variant_name(t, f.name),
                        "platform": platform,
                        "runner": m.runners[platform],
                        "image": f.manylinux_image,
                        "session": f"build-{f.name}",
                    }
                )
        for sv in m.stable:
            if platform not in sv.platforms:
                continue
            view = sv.on(platform)
            row = {"flavour": view.row.name, "torch": str(view.torch), "variant": view.name, "platform": platform}
            rows.append({**row, "runner": m.runners[platform], "image": view.image, "session": view.session})
    return rows


# The GPUs each SASS arch of our lists serves, for docs/matrix.md's platforms table (which GPU runs which code is
# visdet_ops/_compat.sass_runs_on: sm_80 code also runs on sm_86/sm_89, sm_100 on sm_103, sm_120 on sm_121).
GPUS = {
    "7.0": "V100",
    "7.5": "T4",
    "8.0": "A100",
    "8.6": "A10/RTX 30",
    "8.9": "L4/RTX 40",
    "9.0": "H100/GH200",
    "10.0": "B200/GB200/B300",
    "11.0": "Thor",
    "12.0": "RTX 50/GB10",
}


def _gpus(arch_list) -> str:
    sass, ptx = sass_and_ptx(arch_list)
    if not sass:
        return "CPU only"
    return (
        " ".join(f"sm_{a.replace('.', '')} ({GPUS.get(a, '?')})" for a in sass)
        + " + PTX "
        + " ".join(f"compute_{a.replace('.', '')}" for a in ptx)
    )


def platforms_markdown(m: Matrix) -> list[str]:
    """The platforms table (platform x variant x GPUs): the README's and docs/matrix.md's."""
    lines = ["| platform | variants | torch | GPUs: SASS (what runs it) + PTX |", "|---|---|---|---|"]
    for platform in m.platforms:
        for sv in m.stable:
            if platform in sv.platforms:
                view = sv.on(platform)
                lines.append(f"| {platform} | `{view.name}` | >= {floor_text()} | {_gpus(view.arch_list)} |")
        for f in m.platform_flavours(platform):
            targets = f.build_targets()
            span = f"{targets[0].major}.{targets[0].minor}-{targets[-1].major}.{targets[-1].minor}"
            names = f"`{variant_name(targets[0], f.name)}` ... `{variant_name(targets[-1], f.name)}`"
            if len(targets) == 1:
                span, names = f"{targets[0].major}.{targets[0].minor}", f"`{variant_name(targets[0], f.name)}`"
            lines.append(f"| {platform} | {names} | {span} | {_gpus(f.arch_list)} |")
    return lines


def markdown(m: Matrix) -> str:
    """docs/matrix.md: the variant table, generated from the matrix."""
    lines = [
        "# Variants",
        "",
        "Generated from `ci/matrix.toml` by `python -m ci.matrix --markdown > docs/matrix.md`",
        "(a test fails when this file is stale). One wheel per row and torch minor, abi3, for every",
        f"CPython >= {rules.MIN_PYTHON[0]}.{rules.MIN_PYTHON[1]}.",
        "",
        "| flavour | platform | CUDA | torch releases | SASS archs | PTX | variants | torch comes from |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in m.flavours:
        for f in (row.on(p) for p in row.platforms):
            sass, ptx = sass_and_ptx(f.arch_list)
            names = ", ".join(f"`{variant_name(t, f.name)}`" for t in f.build_targets())
            source = f.torch_index + (f" (PyPI default for {', '.join(f.pypi_default)})" if f.pypi_default else "")
            lines.append(
                f"| {f.name} | {f.platform} | {f.version or '-'} | {', '.join(map(str, f.torch))} | "
                f"{' '.join(sass) or '-'} | {' '.join(ptx) or '-'} | {names} | {source} |"
            )
    lines += [
        "",
        "## Platforms",
        "",
        "Which wheels exist for which machine (`platforms` and the `[cuda.<platform>]` tables of `ci/matrix.toml`).",
        "A variant's x86_64 and aarch64 wheels share its index folder; pip picks the one for the machine by its",
        "platform tag. aarch64: GH200 and GB200 nodes, DGX Spark, Jetson Thor and Graviton/Ampere CPU servers;",
        "Jetson Orin (sm_87) is not covered (JetPack's own torch; build from source, docs/aarch64.md).",
        "",
        *platforms_markdown(m),
    ]
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
        "| variant | platform | serves | built from | build torch | SASS archs | PTX | nox session |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stable in m.stable:
        for sv in (stable.on(p) for p in stable.platforms):
            sass, ptx = sass_and_ptx(sv.arch_list)
            serves = f"torch >= {floor}, " + (
                "CPU tensors (beside a CPU or CUDA torch)"
                if not sv.is_cuda
                else f"CUDA {sv.flavour.removeprefix('cu')}.x"
            )
            session = sv.session + ("" if sv.row.platform == "x86_64" else f" -- --platform {sv.row.platform}")
            lines.append(
                f"| `{sv.name}` | {sv.row.platform} | {serves} | {sv.row.name} | {sv.torch} | "
                f"{' '.join(sass) or '-'} | {' '.join(ptx) or '-'} | `nox -s {session}` |"
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


README_BEGIN = "<!-- platforms table: python -m ci.matrix --readme (generated from ci/matrix.toml) -->"
README_END = "<!-- end of platforms table -->"


def readme(m: Matrix, text: str) -> str:
    """README.md with its platforms table (between README_BEGIN and README_END) made anew from the matrix."""
    start, end = text.index(README_BEGIN), text.index(README_END)
    return text[: start + len(README_BEGIN)] + "\n" + "\n".join(platforms_markdown(m)) + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="GitHub Actions matrix as JSON")
    parser.add_argument("--markdown", action="store_true", help="docs/matrix.md")
    parser.add_argument("--newest-only", action="store_true", help="only the newest torch of each row")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's platforms table")
    args = parser.parse_args(argv)
    m = load()
    if args.readme:
        path = ROOT / "README.md"
        path.write_text(readme(m, path.read_text()))
        return 0
    if args.markdown:
        print(markdown(m), end="")
        return 0
    rows = github_matrix(m, newest_only=args.newest_only)
    if args.json:
        print(json.dumps({"include": rows}))
    else:
        for r in rows:
            print(
                f"{r['variant']:<14} {r['platform']:<8} torch {r['torch']:<8} {r['flavour']:<6} nox -s {r['session']}"
                f" -- --torch {r['torch']} --platform {r['platform']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
