"""Variant names, release numbers, the abi3 floor, the CUDA arch rules, the CUDA toolkit lookup and what makes a
build reproducible (SOURCE_DATE_EPOCH's default, the path maps): the one home of these rules.

A variant is one wheel's target, pt<torch major><torch minor><cpu|cuXY> (pt213cpu, pt214cu130), or for a stable-ABI
wheel stable<floor major><floor minor><cpu|cuX> (stable211cu13): the wheel's local version label (0.1.0+pt213cpu)
and its folder in the wheel index. recommended_variant picks the one to install beside a torch.

Standard library only and torch-free: the import check, `visdet-ops doctor`, setup.py and the ci/ tools all use
this module. setup.py and ci/ load it from its file (importlib), so that nothing else of the package, and
no torch, is imported.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

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


def stable_target_version(floor: tuple[int, int] = STABLE_ABI_FLOOR) -> str:
    """The TORCH_TARGET_VERSION macro value of a floor, as torch/headeronly/version.h encodes a release (major in
    bits 56-63, minor in 48-55): (2, 11) -> '0x020B000000000000'."""
    major, minor = floor
    return f"0x{major:02X}{minor:02X}000000000000"


def stable_abi_flags(with_cuda: bool, floor: tuple[int, int] = STABLE_ABI_FLOOR) -> list[str]:
    """The compiler flags (C++ and nvcc) of a stable build: the adapter's switch, the floor as TORCH_TARGET_VERSION
    (hides newer stable API; with TORCH_STABLE_ONLY, empties every unstable torch header, so a stray at:: fails to
    build) and, for CUDA builds, USE_CUDA (declares aoti_torch_get_current_cuda_stream in the shim)."""
    flags = ["-DVISDET_OPS_STABLE_ABI", f"-DTORCH_TARGET_VERSION={stable_target_version(floor)}", "-DTORCH_STABLE_ONLY"]
    return flags + (["-DUSE_CUDA"] if with_cuda else [])


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
# are the spellings of platform.machine() on Linux, of wheel platform tags (manylinux_2_28_<machine>) and of the
# ELF e_machine field of a built library.
PLATFORMS = ("x86_64", "aarch64")
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
_MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64", "armv8": "aarch64"}


def normalize_machine(machine: str) -> str:
    """platform.machine() as a wheel's platform tag spells it: 'AMD64' -> 'x86_64', 'arm64' -> 'aarch64'."""
    name = machine.strip().lower()
    return _MACHINE_ALIASES.get(name, name)


def elf_machine(path: str | Path) -> str:
    """The machine a 64-bit little-endian ELF file was built for ('x86_64', 'aarch64'); raises ValueError naming the
    file for anything else."""
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    code = int.from_bytes(head[18:20], "little")
    if code not in ELF_MACHINES:
        raise ValueError(f"{path}: ELF machine {code} is none of {', '.join(PLATFORMS)}")
    return ELF_MACHINES[code]


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


# --- CUDA arch rules -------------------------------------------------------------------------------------------

_ARCH_ENTRY = re.compile(r"^\d+\.\d+(\+PTX)?$")


def sass_and_ptx(arch_list) -> tuple[list[str], list[str]]:
    """Splits TORCH_CUDA_ARCH_LIST entries ('8.6', '9.0+PTX') into SASS archs and PTX archs."""
    sass, ptx = [], []
    for entry in arch_list:
        arch = entry.removesuffix("+PTX")
        sass.append(arch)
        if entry.endswith("+PTX"):
            ptx.append(arch)
    return sass, ptx


def gencode_flags(arch_list) -> list[str]:
    """nvcc's -gencode flags for TORCH_CUDA_ARCH_LIST entries, as torch.utils.cpp_extension writes them (SASS for each
    arch, PTX for the +PTX ones, sorted). setup.py passes them itself: cpp_extension adds its own only when no nvcc
    flag contains the letters 'arch', so a -ccbin aarch64-linux-gnu-gcc, or any path through a folder named
    'research', silently left a build with nvcc's default sm_75 alone."""
    flags = set()
    for entry in arch_list:
        num = entry.removesuffix("+PTX").replace(".", "")
        flags.add(f"-gencode=arch=compute_{num},code=sm_{num}")
        if entry.endswith("+PTX"):
            flags.add(f"-gencode=arch=compute_{num},code=compute_{num}")
    return sorted(flags)


def arch_problem(cuda_version: str | Release, entry: str) -> str | None:
    """Why nvcc of `cuda_version` cannot build arch list entry `entry`, or None when it can."""
    if not _ARCH_ENTRY.match(entry):
        return f"arch list entries look like '8.6' or '9.0+PTX', got {entry!r}"
    cuda = cuda_version if isinstance(cuda_version, Release) else parse_release(str(cuda_version))
    arch = parse_release(entry.removesuffix("+PTX")).major_minor
    if cuda.major >= 13 and arch < (7, 5):
        return f"CUDA {cuda} cannot target sm_{arch[0]}{arch[1]} (CUDA 13 dropped sm_70/sm_72)"
    if cuda.major_minor < (12, 8) and arch >= (10, 0):
        return f"CUDA {cuda} cannot target sm_{arch[0]}{arch[1]} (Blackwell needs CUDA >= 12.8)"
    return None


# --- CUDA toolkit ----------------------------------------------------------------------------------------------


def nvcc_version(cuda_home: str | Path) -> Release | None:
    """The release of <cuda_home>/bin/nvcc ('13.0.88'), or None when there is no working nvcc there."""
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    if not nvcc.exists():
        return None
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"release \d+\.\d+, V(\d+\.\d+\.\d+)", out)
    return parse_release(match.group(1)) if match else None


def cuda_home_candidates(want: Release | None = None) -> list[Path]:
    """Where a CUDA toolkit is looked for, in order: CUDA_HOME, CUDA_PATH, the toolkit of the nvcc on PATH,
    /usr/local/cuda-X.Y (when a release is wanted), /usr/local/cuda.

    The nvcc on PATH counts only where its folder's parent holds include/cuda_runtime.h: torch's own guess
    takes dirname(dirname(which nvcc)), wrong for a wrapper script such as /usr/local/bin/nvcc."""
    homes = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(nvcc).resolve().parent.parent
        if (home / "include" / "cuda_runtime.h").exists():
            homes.append(home)
    if want is not None:
        homes.append(Path(f"/usr/local/cuda-{want.major}.{want.minor}"))
    homes.append(Path("/usr/local/cuda"))
    return list(dict.fromkeys(homes))


def find_cuda_home(want: Release | None = None) -> tuple[Path | None, list[str]]:
    """The first candidate with a working nvcc (of want's major.minor when given), and what was seen."""
    seen = []
    for home in cuda_home_candidates(want):
        found = nvcc_version(home)
        seen.append(f"{home}: {'nvcc ' + str(found) if found else 'no nvcc'}")
        if found is not None and (want is None or found.major_minor == want.major_minor):
            return home, seen
    return None, seen


# --- Reproducible builds ---------------------------------------------------------------------------------------

# The names the source tree, the build torch and the CUDA toolkit take inside the binary. __FILE__ in a check
# message (ours, and torch's headers' STD_TORCH_CHECK) then reads visdet-ops/csrc/ops/nms/nms.cpp or
# torch/include/torch/csrc/stable/ops.h, never the folder the build ran in: one commit built in two folders gives
# the same bytes (docs/release.md, "Verifying a wheel").
SOURCE_PREFIX = "visdet-ops"
TORCH_PREFIX = "torch"
CUDA_PREFIX = "cuda"

# The build inputs whose newest modification time stands in for the commit time where there is no git checkout.
_EPOCH_FILES = ("setup.py", "pyproject.toml", "ci/matrix.toml")
_EPOCH_TREES = ("csrc", "visdet_ops")
_EPOCH_SUFFIXES = (".py", ".cpp", ".h", ".cu", ".cuh", ".toml")


def source_date_epoch(root: str | Path) -> tuple[int, str]:
    """The build's timestamp (reproducible-builds.org's SOURCE_DATE_EPOCH) and where it came from: the variable
    when set; else the time of the commit checked out at `root` (`git log -1 --format=%ct`); else, in a tree
    without git (a `git archive` export, a tarball), the newest modification time of the build's inputs, which a
    `git archive` export sets to the commit time. It dates _build_info.py and every file of the wheel."""
    env = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if env:
        if not env.isdigit():
            raise ValueError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, got {env!r}")
        return int(env), "SOURCE_DATE_EPOCH"
    root = Path(root).resolve()

    def git(*args: str) -> str:
        try:
            run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        except OSError:
            return ""
        return run.stdout.strip() if run.returncode == 0 else ""

    # Only root's own checkout: a tree unpacked inside some other repository must not take that one's commit.
    toplevel = git("rev-parse", "--show-toplevel")
    if toplevel and Path(toplevel).resolve() == root:
        stamp = git("log", "-1", "--format=%ct")
        if stamp.isdigit():
            return int(stamp), "the commit time (git log -1 --format=%ct)"
    inputs = [root / f for f in _EPOCH_FILES] + [
        p
        for tree in _EPOCH_TREES
        for p in (root / tree).rglob("*")
        if p.suffix in _EPOCH_SUFFIXES and p.name != "_build_info.py" and "__pycache__" not in p.parts
    ]
    times = [int(p.stat().st_mtime) for p in inputs if p.is_file()]
    if not times:
        raise ValueError(f"{root}: no git commit and none of the build's source files to date the build by")
    return max(times), "the newest source file (no git checkout)"


def prefix_maps(root: str | Path, torch_dir: str | Path, cuda_home: str | Path | None = None) -> list[tuple[str, str]]:
    """(folder, stable name) pairs for -ffile-prefix-map, each folder as given and resolved. The most general comes
    first: GCC applies the last map that matches, and the build torch lies inside the source tree where the venv
    does (nox's .nox/<session>/), as a provisioned CUDA toolkit does (.nox/_cache/)."""
    pairs = []
    for folder, name in ((root, SOURCE_PREFIX), (torch_dir, TORCH_PREFIX), (cuda_home, CUDA_PREFIX)):
        if folder is not None:
            pairs += [(spelling, name) for spelling in dict.fromkeys((str(Path(folder)), str(Path(folder).resolve())))]
    return pairs


def reproducible_cxx_flags(maps: list[tuple[str, str]]) -> list[str]:
    """The C++ compiler's flags for a build whose bytes do not depend on its folder: -ffile-prefix-map (GCC >= 8,
    clang >= 10) rewrites __FILE__ and debug paths alike."""
    return [f"-ffile-prefix-map={folder}={name}" for folder, name in maps]


def reproducible_nvcc_flags(maps: list[tuple[str, str]], nvcc: Release) -> list[str]:
    """nvcc's flags for the same: the prefix maps for its host compiler (which also preprocesses the device code,
    so device-side __FILE__ is mapped too), then what nvcc itself varies, measured with nvcc 13.0 by compiling one
    .cu file twice:
    - its intermediate files are /tmp/tmpxft_<pid>_..., and the host object's symbol table names the one it
      compiled: -objtemp (documented in CUDA 12.4) puts them beside the object file, named after it;
    - a .cu file's anonymous namespace is named _GLOBAL__N__<hash of the source path>_12_rois_cuda_cu_<random>,
      in the host stubs and in the cubin alike (cudafe++ makes the names and hands them to cicc in its module id
      file). The path is the absolute one nvcc gives cudafe++ (--orig_src_path_name, the realpath: a symlinked
      folder does not help), and <random> changes from run to run in some files (rois_cuda.cu: 1b756e1a_<pid>).
      cudafe++ gets one fixed path name (the last one given wins) and -frandom-seed a fixed seed (nvcc passes it on
      to the host compiler too): the names no longer vary, and differ between files only by the .cu file's base
      name, which setup.py requires to be unique.
    The last two are applied from nvcc 13 on, the toolkit they were verified with here."""
    flags = [f"-Xcompiler=-ffile-prefix-map={folder}={name}" for folder, name in maps]
    if (nvcc.major, nvcc.minor) >= (12, 4):
        flags.append("-objtemp")
    if nvcc.major >= 13:
        flags += [f"-Xcudafe=--orig_src_path_name={SOURCE_PREFIX}", f"-frandom-seed={SOURCE_PREFIX}"]
    return flags
