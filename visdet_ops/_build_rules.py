"""Variant names, release numbers, the abi3 floor, the torch floors and the platforms: what the import check
(_loader.py, _compat.py) and `visdet-ops doctor` decide with, the one home of these rules.

A variant is one wheel's target, pt<torch major><torch minor><cpu|cuXY> (pt213cpu, pt214cu130), or for a stable-ABI
wheel stable<floor major><floor minor><cpu|cuX> (stable211cu13): the wheel's local version label (0.1.0+pt213cpu)
and its folder in the wheel index. recommended_variant picks the one to install beside a torch.

Standard library only and torch-free. The build's own rules (the CUDA arch rules, the toolkit lookup, the stable
ABI's and the reproducible build's flags) are not shipped: they live in visdet_build.py beside setup.py, which
re-exports every name of this module, so setup.py, noxfile.py and ci/ import that one module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The abi3 floor: one cp310-abi3 wheel per variant serves every CPython >= 3.10.
MIN_PYTHON = (3, 10)
ABI3_TAG = f"cp{MIN_PYTHON[0]}{MIN_PYTHON[1]}"
PY_LIMITED_API = f"0x{MIN_PYTHON[0]:02X}{MIN_PYTHON[1]:02X}0000"  # the Py_LIMITED_API macro value

# The oldest torch visdet-ops runs on: every op module registers its fake impl and autograd formula with
# torch.library.register_fake / register_autograd (and the tests use torch.library.opcheck), all new in torch 2.4.
# ci/matrix.py refuses a matrix row with an older torch; the import check and the doctor say so for an older torch.
MIN_TORCH = (2, 4)

# PEP 440 releases as torch and nvcc print them: 2.13.0, 2.13.0+cpu, 2.10.0.dev20251001+cu130, 13.0.88.
_RELEASE = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?P<suffix>(?:[._-]?(?:a|b|c|rc|alpha|beta|pre|preview|dev|post)[._-]?\d*)*)"
    r"(?:\+(?P<local>[a-z0-9]+(?:[._-][a-z0-9]+)*))?\s*$",
    re.IGNORECASE,
)
# Torch majors are one digit: pt213cpu is torch 2.13.
_VARIANT = re.compile(r"^pt(?P<major>\d)(?P<minor>\d+)(?P<flavour>cpu|cu\d{2,3})$")


@dataclass(frozen=True)
class Release:
    """The numeric part of a version (what the rules here compare) and its local label."""

    parts: tuple[int, ...]
    local: str | None = None

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def minor(self) -> int:
        return self.parts[1] if len(self.parts) > 1 else 0

    @property
    def major_minor(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def __str__(self) -> str:
        return ".".join(map(str, self.parts)) + (f"+{self.local}" if self.local else "")


def parse_release(text: str) -> Release:
    """'2.13.0+cpu' -> Release((2, 13, 0), 'cpu'); raises ValueError naming the text."""
    match = _RELEASE.match(str(text))
    if not match:
        raise ValueError(f"not a version number: {text!r}")
    return Release(tuple(int(p) for p in match.group("release").split(".")), match.group("local"))


def flavour_for(torch_cuda: str | None) -> str:
    """The flavour of a torch build: 'cpu', or 'cu130' for torch.version.cuda == '13.0'."""
    if not torch_cuda:
        return "cpu"
    cuda = parse_release(torch_cuda)
    return f"cu{cuda.major}{cuda.minor}"


def variant_name(torch_version: str | Release, flavour: str) -> str:
    """pt<major><minor><flavour>: the local version label and index folder."""
    v = torch_version if isinstance(torch_version, Release) else parse_release(str(torch_version))
    name = f"pt{v.major}{v.minor}{flavour}"
    if not _VARIANT.match(name):
        raise ValueError(f"torch {torch_version} with flavour {flavour!r} gives no valid variant name ({name!r})")
    return name


def variant_for(torch_version: str, torch_cuda: str | None) -> str:
    """The variant matching a torch install (torch.__version__, torch.version.cuda)."""
    return variant_name(torch_version, flavour_for(torch_cuda))


def parse_variant(name: str) -> tuple[tuple[int, int], str]:
    """'pt213cpu' -> ((2, 13), 'cpu'); raises ValueError for anything else."""
    match = _VARIANT.match(name)
    if not match:
        raise ValueError(f"not a variant name: {name!r} (expected pt<major><minor><cpu|cuXY>, e.g. pt213cpu)")
    return (int(match.group("major")), int(match.group("minor"))), match.group("flavour")


def is_variant(name: str) -> bool:
    return _VARIANT.match(name) is not None


# --- The LibTorch stable ABI ------------------------------------------------------------------------------------
#
# A stable build (setup.py with VISDET_OPS_STABLE_ABI=1) compiles the host layer against torch's stable C shim with
# TORCH_TARGET_VERSION set to the floor: one wheel per CUDA major serves every torch >= the floor
# (docs/stable-abi.md). The floor is the oldest torch the stable wheels are tested on.
STABLE_ABI_FLOOR = (2, 11)

_STABLE_VARIANT = re.compile(r"^stable(?P<major>\d)(?P<minor>\d+)(?P<flavour>cpu|cu\d{2})$")


def stable_flavour_for(torch_cuda: str | None) -> str:
    """The flavour of a stable build: 'cpu', or 'cu13' for any CUDA 13.x (the CUDA runtime major still splits
    wheels; the minor does not)."""
    return "cpu" if not torch_cuda else f"cu{parse_release(torch_cuda).major}"


def stable_variant_name(flavour: str, floor: tuple[int, int] = STABLE_ABI_FLOOR) -> str:
    """stable<floor major><floor minor><cpu|cuXX>: stable211cpu, stable211cu13 (local version label and index
    folder of a stable wheel)."""
    name = f"stable{floor[0]}{floor[1]}{flavour}"
    if not _STABLE_VARIANT.match(name):
        raise ValueError(f"flavour {flavour!r} gives no valid stable variant name ({name!r})")
    return name


def is_stable_variant(name: str) -> bool:
    return _STABLE_VARIANT.match(name) is not None


# The CUDA majors that have a stable wheel (besides cpu): ci/matrix.toml's [stable] table names the [[cuda]] row each
# is built from, and its check (ci/matrix.py, tests/test_matrix.py) requires the two to agree. Written here, not read
# from the matrix, because the import check and the doctor recommend these variants and the package ships no
# ci/matrix.toml.
STABLE_ABI_CUDA_MAJORS = (12, 13)


def stable_flavours() -> tuple[str, ...]:
    """The flavours that have a stable wheel: ('cpu', 'cu12', 'cu13')."""
    return ("cpu", *(f"cu{major}" for major in STABLE_ABI_CUDA_MAJORS))


def has_stable_build(torch_version: str, torch_cuda: str | None) -> bool:
    """Whether a stable wheel serves this torch: torch >= the floor, CPU or a CUDA major with a stable build."""
    if parse_release(torch_version).major_minor < STABLE_ABI_FLOOR:
        return False
    return torch_cuda is None or parse_release(torch_cuda).major in STABLE_ABI_CUDA_MAJORS


def torch_is_supported(torch_version: str) -> bool:
    """Whether visdet-ops has builds for this torch (>= MIN_TORCH)."""
    return parse_release(torch_version).major_minor >= MIN_TORCH


def min_torch() -> str:
    """MIN_TORCH as a version string, '2.4'."""
    return ".".join(map(str, MIN_TORCH))


def recommended_variant(torch_version: str, torch_cuda: str | None) -> str | None:
    """The variant to install beside a torch (torch.__version__, torch.version.cuda): the stable variant where one
    serves it (one build for every torch >= the floor), else the per-minor variant (variant_for); None for a torch
    older than MIN_TORCH, which no build serves. Whether that variant has a wheel for the machine: install_advice."""
    if not torch_is_supported(torch_version):
        return None
    if has_stable_build(torch_version, torch_cuda):
        return stable_variant_name(stable_flavour_for(torch_cuda))
    return variant_for(torch_version, torch_cuda)


# --- Platforms --------------------------------------------------------------------------------------------------
#
# A variant is built for each machine torch ships its [[cuda]] row for (ci/matrix.toml's `platforms`): the wheels of
# one variant for x86_64 and aarch64 share its index folder and differ in their platform tag only. The names here
# are the spellings of platform.machine() on Linux and of wheel platform tags (manylinux_2_28_<machine>).
PLATFORMS = ("x86_64", "aarch64")
_MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}


def normalize_machine(machine: str) -> str:
    """platform.machine() as a wheel's platform tag spells it: 'AMD64' -> 'x86_64', 'arm64' -> 'aarch64'."""
    name = machine.strip().lower()
    return _MACHINE_ALIASES.get(name, name)


def install_advice(
    torch_version: str, torch_cuda: str | None, machine: str, published: dict | None
) -> tuple[str | None, str | None]:
    """(variant, problem) for a torch on a machine: the recommended variant where a wheel of it is published for the
    machine, else (None, why not). `published` is a build's PUBLISHED table (_build_info, generated from
    ci/matrix.toml: per machine, the variant names with a wheel and the newest torch minor the matrix knew); None
    (an unbuilt tree) or a torch newer than the table knows trusts the recommendation. A torch older than MIN_TORCH
    gives (None, None): the caller says to upgrade it."""
    variant = recommended_variant(torch_version, torch_cuda)
    if variant is None or not published:
        return variant, None
    machine = normalize_machine(machine)
    table = published.get(machine)
    where = f"torch {parse_release(torch_version)} ({'CUDA ' + torch_cuda if torch_cuda else 'CPU'}) on {machine}"
    if table is None:
        return None, f"visdet-ops publishes no wheels for {machine} (only {', '.join(sorted(published))})"
    newest = parse_release(table["newest_torch"]).major_minor
    if variant in table["variants"] or parse_release(torch_version).major_minor > newest:
        return variant, None
    return None, f"no visdet-ops wheel is published for {where} (variant {variant} has no {machine} build)"


def variant_note(variant: str) -> str:
    """The variant's name, with why it serves a torch when it is a stable one:
    'stable211cu13: one build for every torch >= 2.11 with CUDA 13'; a per-minor name as it is."""
    match = _STABLE_VARIANT.match(variant)
    if not match:
        return variant
    flavour, floor = match.group("flavour"), f"{match.group('major')}.{match.group('minor')}"
    if flavour == "cpu":
        return f"{variant}: one CPU build for every torch >= {floor}"
    return f"{variant}: one build for every torch >= {floor} with CUDA {flavour.removeprefix('cu')}"
