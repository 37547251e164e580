"""The build's own rules, beside setup.py and never shipped: the stable ABI's compiler flags, the ELF machine of a
built library, the CUDA arch rules, the CUDA toolkit lookup and what makes a build reproducible (SOURCE_DATE_EPOCH's
default, the path maps).

One module for setup.py, noxfile.py and ci/ (`import visdet_build`; setup.py puts its own folder on sys.path, as a
PEP 517 build does not): it also re-exports every name of the package's torch-free rules,
visdet_ops/_build_rules.py (variant names, release numbers, the abi3 and torch floors, the platforms: what the
import check and the doctor use). Those are loaded from their file: importing visdet_ops would import torch and
the compiled ops. Where the tree has no package (an installed wheel's tests run from a copy of the tree without
it, ci/scratch.py), the installed package's file. Standard library only: the release builds in a bare CPython 3.10.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _package_rules():
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


package_rules = _package_rules()
# Every public name of the package's rules is a name of this module (rules.parse_variant, rules.MIN_PYTHON, ...);
# the four this module itself uses are also written out, for readers and linters.
globals().update({name: value for name, value in vars(package_rules).items() if not name.startswith("_")})
Release = package_rules.Release
parse_release = package_rules.parse_release
PLATFORMS = package_rules.PLATFORMS
STABLE_ABI_FLOOR = package_rules.STABLE_ABI_FLOOR

# --- The LibTorch stable ABI's flags ----------------------------------------------------------------------------


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


# --- Platforms -------------------------------------------------------------------------------------------------
#
# The ELF e_machine field of a built library, spelt as a wheel's platform tag.
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


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
_EPOCH_FILES = ("setup.py", "visdet_build.py", "pyproject.toml", "ci/matrix.toml")
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


# The host C++ compiler's flags of every build (setup.py; torch's own come first). -ffp-contract=off: GCC fuses
# a * b + c into one multiply-add (one rounding instead of two) wherever the target has the instruction, which every
# aarch64 CPU has and an x86_64 build without -mfma (none of ours) lacks. Without it the aarch64 wheel's CPU kernels
# round differently from the x86_64 ones the test suite ran: box IoUs differed in the last bits (measured on
# 200,000 rotated pairs; identical with it, tests/test_aarch64.py). The x86_64 objects are the same bytes either way.
CXX_FLAGS = ("-O3", "-g0", "-fvisibility=hidden", "-ffp-contract=off")


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
