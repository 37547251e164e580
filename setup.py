"""Builds the visdet_ops._C extension. Metadata lives in pyproject.toml.

Environment:
  VISDET_OPS_CUDA=1       build the CUDA kernels; a missing nvcc or a CPU-only
                          torch is an error (never a silent CPU-only wheel)
  VISDET_OPS_CUDA=0       CPU kernels only
  (unset)                 CUDA when torch is a CUDA build and nvcc is found
  VISDET_OPS_STABLE_ABI=1 build against the LibTorch stable ABI: one wheel (variant stable211cpu,
                          stable211cu13, ...) for every torch >= the stable floor of the same CUDA
                          major (docs/stable-abi.md)
  CUDA_HOME               the CUDA toolkit (default: nvcc on PATH, /usr/local/cuda)
  TORCH_CUDA_ARCH_LIST    override the arch list of ci/matrix.toml ("8.0;9.0+PTX")
  SOURCE_DATE_EPOCH       the build's timestamp: _build_info.py's BUILD_TIME and the wheel's file dates
                          (default: the commit time, `git log -1 --format=%ct`; without git, the newest
                          source file's date)
  MAX_JOBS                parallel compile jobs (ninja)
  VISDET_OPS_TARGET_TORCH cross-compile: the `torch` package folder of the target machine's torch (an unpacked
                          aarch64 wheel, docs/aarch64.md), the same release as the torch this runs with, whose
                          headers and libraries the build uses instead; CC and CXX must be compilers for that
                          machine (aarch64-linux-gnu-gcc/g++), and a CUDA build needs CUDA_HOME/targets/sbsa-linux

Build against the torch you will run with, without build isolation:
  pip install "torch==<the release you run>" && pip wheel --no-build-isolation --no-deps .
"""

from __future__ import annotations

import ast
import datetime
import inspect
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def fail(message: str) -> NoReturn:
    raise SystemExit(f"\nvisdet-ops build error: {message}\n")


# The build imports nothing from ci/ (a release builds in a bare CPython 3.10 that has only the
# [build-system] requirements): the variant and arch rules come from visdet_build.py beside this file
# (a PEP 517 build does not put this folder on sys.path), and the matrix is read as plain TOML.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
import visdet_build as variants  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        fail(
            "Python < 3.11 needs `tomli` to read ci/matrix.toml: pip install 'tomli>=1.1' "
            "(one of the [build-system] requirements)"
        )


try:
    import torch
except ImportError:
    fail(
        "torch is not importable. visdet-ops compiles against the torch it will "
        "run with: install that torch first, then "
        "build without isolation: `pip wheel --no-build-isolation --no-deps .`"
    )

MATRIX = tomllib.loads((ROOT / "ci" / "matrix.toml").read_text())
HOST_TORCH_DIR = Path(torch.__file__).resolve().parent


def elf_symbols(library: Path) -> str:
    """`nm -D --defined-only` of a shared library (GNU nm reads an aarch64 ELF as well as an x86_64 one)."""
    nm = shutil.which("nm")
    if nm is None:
        fail("`nm` (binutils) is needed to read the target torch's libraries")
    return subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True, text=True).stdout


def decide_target():
    """(torch folder, machine, torch version, torch CUDA, cxx11 ABI) the build compiles for: the running torch, or in a
    cross build VISDET_OPS_TARGET_TORCH's. A cross build takes headers and libraries from the target torch and the
    rest (torch.utils.cpp_extension and its flags) from the running one, which must be the same release so that the
    flags fit the headers (and the device code is the same as a native build's: docs/aarch64.md)."""
    host_machine = variants.normalize_machine(platform.machine())
    host = (HOST_TORCH_DIR, host_machine, torch.__version__, torch.version.cuda, bool(torch._C._GLIBCXX_USE_CXX11_ABI))
    raw = os.environ.get("VISDET_OPS_TARGET_TORCH", "").strip()
    if not raw:
        return host, False
    target = Path(raw).resolve()
    c10 = target / "lib" / "libc10.so"
    version_py = target / "version.py"
    if not (target / "include").is_dir() or not c10.exists() or not version_py.exists():
        fail(
            f"VISDET_OPS_TARGET_TORCH={raw}: not a torch package folder (expected include/, lib/libc10.so and "
            "version.py in it: the torch/ folder of an unpacked torch wheel for the target machine)"
        )
    try:
        machine = variants.elf_machine(c10)
    except ValueError as exc:
        fail(f"VISDET_OPS_TARGET_TORCH: {exc}")
    values = {}
    for node in ast.parse(version_py.read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            names = node.targets if isinstance(node, ast.Assign) else [node.target]
            for name in names:
                if isinstance(name, ast.Name) and name.id in ("__version__", "cuda"):
                    values[name.id] = ast.literal_eval(node.value)
    version, cuda = values.get("__version__"), values.get("cuda")
    if version is None:
        fail(f"VISDET_OPS_TARGET_TORCH: {version_py} has no __version__")
    if variants.parse_release(version).parts != variants.parse_release(torch.__version__).parts:
        fail(
            f"cross build: the target torch is {version} and this build runs with torch {torch.__version__}; "
            "install the same release for this machine (torch.utils.cpp_extension's flags must fit the target's "
            "headers)"
        )
    cxx11_abi = "__cxx11" in elf_symbols(c10)
    if cxx11_abi != host[4]:
        fail(f"cross build: the target torch's C++ ABI (_GLIBCXX_USE_CXX11_ABI={int(cxx11_abi)}) is not the host's")
    compiler = os.environ.get("CXX", "c++")
    dumped = command_output([compiler, "-dumpmachine"]) if shutil.which(compiler.split()[0]) else ""
    if not dumped.startswith(machine):
        fail(
            f"cross build for {machine}: CXX={compiler} compiles for {dumped or 'nothing (not found)'}; set CC and CXX "
            f"to {machine}-linux-gnu-gcc and -g++ (Debian: apt-get install g++-{machine}-linux-gnu)"
        )
    return (target, machine, version, cuda, cxx11_abi), machine != host_machine


def command_output(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


(TORCH_DIR, TARGET_MACHINE, _TARGET_VERSION, TORCH_CUDA, CXX11_ABI), CROSS = decide_target()
TORCH_VERSION = variants.parse_release(_TARGET_VERSION)
# nvcc's target folder for a cross build (CUDA_HOME/targets/<dir>: the target's headers and libcudart).
NVCC_TARGET_DIRS = {"aarch64": "sbsa-linux", "x86_64": "x86_64-linux"}


def decide_stable_abi() -> bool:
    mode = os.environ.get("VISDET_OPS_STABLE_ABI", "").strip()
    if mode not in ("", "0", "1"):
        fail(f"VISDET_OPS_STABLE_ABI must be 0, 1 or unset, got {mode!r}")
    if mode != "1":
        return False
    floor = variants.STABLE_ABI_FLOOR
    if TORCH_VERSION.major_minor < floor:
        fail(
            f"VISDET_OPS_STABLE_ABI=1 needs torch >= {floor[0]}.{floor[1]} (the stable floor) to build against, "
            f"got torch {torch.__version__}; build the per-minor wheel for this torch instead"
        )
    return True


STABLE_ABI = decide_stable_abi()


def decide_cuda():
    mode = os.environ.get("VISDET_OPS_CUDA", "").strip()
    if mode not in ("", "0", "1"):
        fail(f"VISDET_OPS_CUDA must be 0, 1 or unset, got {mode!r}")
    if mode == "0":
        return False, None, None
    cuda_home, _ = variants.find_cuda_home()
    if mode == "1":
        if TORCH_CUDA is None:
            fail(
                f"VISDET_OPS_CUDA=1 but torch {_TARGET_VERSION} is a CPU-only build; "
                "install a CUDA build of torch to build the CUDA kernels"
            )
        if cuda_home is None or not (cuda_home / "bin" / "nvcc").exists():
            fail(
                "VISDET_OPS_CUDA=1 but no nvcc was found (CUDA_HOME unset, no nvcc on "
                f"PATH, no /usr/local/cuda); install the CUDA {TORCH_CUDA} toolkit and set CUDA_HOME"
            )
    elif TORCH_CUDA is None or cuda_home is None or not (cuda_home / "bin" / "nvcc").exists():
        if TORCH_CUDA is not None:
            print(
                f"visdet-ops build WARNING: torch {torch.__version__} is a CUDA build but no "
                "nvcc was found: building the CPU kernels only (variant label 'cpu'). "
                "Set VISDET_OPS_CUDA=1 to make this an error.",
                file=sys.stderr,
            )
        return False, None, None
    nvcc = variants.nvcc_version(cuda_home)
    if nvcc is None:
        fail(f"could not run {cuda_home / 'bin' / 'nvcc'} --version")
    if nvcc.major != variants.parse_release(TORCH_CUDA).major:
        fail(f"nvcc {nvcc} ({cuda_home}) cannot build for torch {torch.__version__}, which needs CUDA {TORCH_CUDA}")
    if CROSS and not (cuda_home / "targets" / NVCC_TARGET_DIRS[TARGET_MACHINE] / "lib").is_dir():
        fail(
            f"cross build for {TARGET_MACHINE}: {cuda_home}/targets/{NVCC_TARGET_DIRS[TARGET_MACHINE]} is missing (the "
            "target's CUDA headers and libcudart, which nox -s build-<row> -- --platform assembles: docs/aarch64.md)"
        )
    return True, cuda_home, nvcc


WITH_CUDA, CUDA_HOME, NVCC_VERSION = decide_cuda()
if WITH_CUDA:
    # torch.utils.cpp_extension reads CUDA_HOME when it is first imported.
    os.environ["CUDA_HOME"] = str(CUDA_HOME)

from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension  # noqa: E402


def flavour_name() -> str:
    return variants.flavour_for(TORCH_CUDA if WITH_CUDA else None)


def arch_list() -> list[str]:
    """TORCH_CUDA_ARCH_LIST if set, else the matrix row of torch's CUDA."""
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        entries = [e for e in re.split(r"[;\s]+", env) if e]
    else:
        rows = [r for r in MATRIX["cuda"] if r["name"] == flavour_name()]
        if not rows:
            fail(
                f"ci/matrix.toml has no row for CUDA {TORCH_CUDA}; add one or set "
                "TORCH_CUDA_ARCH_LIST (e.g. '8.0;9.0+PTX')"
            )
        entries = list(rows[0]["arch_list"])
    for e in entries:
        problem = variants.arch_problem(NVCC_VERSION, e)
        if problem:
            fail(f"TORCH_CUDA_ARCH_LIST: {problem}")
    return entries


VARIANT = (
    variants.stable_variant_name(variants.stable_flavour_for(TORCH_CUDA if WITH_CUDA else None))
    if STABLE_ABI
    else variants.variant_name(TORCH_VERSION, flavour_name())
)
VERSION = f"{MATRIX['version']}+{VARIANT}"
ARCHS = arch_list() if WITH_CUDA else []
if WITH_CUDA:
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(ARCHS)


# One commit gives the same wheel, wherever and whenever it is built (docs/release.md, "Verifying a wheel"): the
# timestamp defaults to the commit's, and the environment carries it to bdist_wheel's file dates (this process) and
# to the compilers (__DATE__).
try:
    EPOCH, EPOCH_SOURCE = variants.source_date_epoch(ROOT)
except ValueError as exc:
    fail(str(exc))
os.environ["SOURCE_DATE_EPOCH"] = str(EPOCH)


def build_time() -> str:
    return datetime.datetime.fromtimestamp(EPOCH, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_build_info(package_dir: Path) -> None:
    sass, ptx = variants.sass_and_ptx(ARCHS)
    cxx = os.environ.get("CXX", "c++")
    commit = command_output(["git", "rev-parse", "HEAD"])
    if commit and command_output(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    info = {
        "VERSION": VERSION,
        "VARIANT": VARIANT,
        "TORCH_VERSION": str(TORCH_VERSION),
        "TORCH_CUDA_VERSION": TORCH_CUDA if WITH_CUDA else None,
        "WITH_CUDA": WITH_CUDA,
        "NVCC_VERSION": str(NVCC_VERSION) if WITH_CUDA else None,
        "CUDA_ARCH_SASS": sass,
        "CUDA_ARCH_PTX": ptx,
        "CXX11_ABI": CXX11_ABI,
        # The machine the extension is built for (platform.machine() spelling; a cross build's target).
        "PLATFORM": TARGET_MACHINE,
        # Which variants have a wheel for which machine (ci/matrix.toml): the import check and the doctor say where
        # none serves a torch (a JetPack torch on a Jetson, say) instead of printing a pip line that finds nothing.
        "PUBLISHED": published_variants(),
        # A stable build runs on every torch >= the floor (same CUDA major): the loader checks that, not the minor.
        "STABLE_ABI": STABLE_ABI,
        "STABLE_ABI_FLOOR": ".".join(map(str, variants.STABLE_ABI_FLOOR)) if STABLE_ABI else None,
        # The op folders compiled in: every csrc/ops/<op> folder, in either build (one host source per op; the family
        # homes csrc/ops/_<family> are not ops).
        "OP_FOLDERS": op_folders(),
        "COMPILER": (command_output([cxx, "--version"]).splitlines() or [None])[0],
        "GIT_COMMIT": commit or None,
        "BUILD_TIME": build_time(),
    }
    lines = ['"""Generated by setup.py when visdet-ops was built. Never edit or commit."""', ""]
    lines += [f"{k} = {v!r}" for k, v in info.items()]
    (package_dir / "_build_info.py").write_text("\n".join(lines) + "\n")


def published_variants() -> dict:
    """Per platform, the variants of ci/matrix.toml with a wheel and the newest torch minor it knows (the build reads
    the matrix as plain TOML: ci/matrix.py's Matrix.published() is the same table, and a test holds them equal)."""

    def release(text: str) -> tuple[int, ...]:
        return variants.parse_release(text).parts

    floor = variants.STABLE_ABI_FLOOR
    out: dict = {}
    for row in MATRIX["cuda"]:
        for machine in row["platforms"]:
            table = row[machine]
            torches = [t for t in row["torch"] if "since" not in table or release(t) >= release(table["since"])]
            entry = out.setdefault(machine, {"variants": set(), "newest_torch": (0, 0)})
            entry["variants"] |= {variants.variant_name(t, row["name"]) for t in torches}
            entry["newest_torch"] = max(entry["newest_torch"], *(release(t)[:2] for t in torches))
            if row["name"] in MATRIX.get("stable", {}).values() and any(release(t)[:2] == floor for t in torches):
                flavour = next(k for k, v in MATRIX["stable"].items() if v == row["name"])
                entry["variants"].add(variants.stable_variant_name(flavour))
    return {
        m: {"variants": sorted(e["variants"]), "newest_torch": ".".join(map(str, e["newest_torch"]))}
        for m, e in out.items()
    }


def op_folders() -> list[str]:
    """The csrc/ops/<op> folders this build compiles: every one, in either build (one host source per op). The
    family homes csrc/ops/_<family> (code two ops share) are not ops: family_folders()."""
    return sorted(p.name for p in (ROOT / "csrc" / "ops").iterdir() if p.is_dir() and not p.name.startswith("_"))


def family_folders() -> list[str]:
    """csrc/ops/_<family>: what the ops of a family share (their checks, kernels and host functions)."""
    return sorted(p.name for p in (ROOT / "csrc" / "ops").iterdir() if p.is_dir() and p.name.startswith("_"))


def extension():
    csrc = ROOT / "csrc"
    # csrc/module.cpp, csrc/common/, the family homes and the op folders of this build: every .cpp (the CPU host files
    # *_cpu_host.cpp included) in every build, the CUDA host files *_cuda_host.cpp and the .cu only with CUDA.
    folders = [csrc, csrc / "common", *(csrc / "ops" / f for f in (*family_folders(), *op_folders()))]
    sources = sorted(str(p.relative_to(ROOT)) for d in folders for p in d.glob("*.cpp"))
    if WITH_CUDA:
        cu_sources = sorted((p.relative_to(ROOT) for d in folders for p in d.glob("*.cu")), key=str)
        check_unique_cu_names(cu_sources)
        sources += map(str, cu_sources)
    else:
        sources = [s for s in sources if not s.endswith("_cuda_host.cpp")]
    cxx_flags = list(variants.CXX_FLAGS)
    nvcc_flags = ["-O3", "-Xfatbin=-compress-all", "-Xcompiler=-fvisibility=hidden"]
    if STABLE_ABI:
        # Only what the floor's stable ABI offers compiles (TORCH_TARGET_VERSION hides newer API), and an unstable
        # torch header is empty under TORCH_STABLE_ONLY / TORCH_TARGET_VERSION, so a stray at:: use fails to build.
        # USE_CUDA declares aoti_torch_get_current_cuda_stream in the shim (the CUDA host files need it).
        cxx_flags += variants.stable_abi_flags(WITH_CUDA)
        nvcc_flags += variants.stable_abi_flags(WITH_CUDA)
    # No path of this build in the binary: the source tree, the build torch and the toolkit by fixed names.
    maps = variants.prefix_maps(ROOT, TORCH_DIR, CUDA_HOME)
    cxx_flags += variants.reproducible_cxx_flags(maps)
    if WITH_CUDA:
        nvcc_flags += variants.reproducible_nvcc_flags(maps, NVCC_VERSION)
        # The arch list's -gencode flags, written here (cpp_extension drops its own when a flag names 'arch').
        nvcc_flags += variants.gencode_flags(ARCHS)
        if CROSS:
            # The target's headers and libraries under CUDA_HOME/targets/<dir>; the host compiler is CC (torch passes
            # it to nvcc as -ccbin). The device code comes out of the same nvcc passes as a native build's.
            nvcc_flags.append(f"--target-directory={NVCC_TARGET_DIRS[TARGET_MACHINE]}")
    macros = []
    if "Py_LIMITED_API" not in inspect.getsource(BuildExtension):
        # torch < 2.6 does not define it for py_limited_api extensions.
        macros.append(("Py_LIMITED_API", variants.PY_LIMITED_API))
    if WITH_CUDA:
        macros.append(("VISDET_OPS_WITH_CUDA", "1"))
    kwargs = dict(
        name="visdet_ops._C",
        sources=sources,
        include_dirs=[str(csrc)],
        define_macros=macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags} if WITH_CUDA else {"cxx": cxx_flags},
        extra_link_args=["-Wl,--strip-debug"],
        py_limited_api=True,
    )
    ext = (CUDAExtension if WITH_CUDA else CppExtension)(**kwargs)
    if CROSS:
        retarget_torch(ext)
    if STABLE_ABI and WITH_CUDA:
        link_cuda_runtime_statically(ext)
    return ext


def retarget_torch(ext) -> None:
    """A cross build compiles against the target torch's headers and links its libraries: torch.utils.cpp_extension
    named the running torch's folders, which are replaced by the target's (the same release, so the same layout)."""

    def moved(path: str) -> str:
        p = Path(path).resolve()
        return str(TORCH_DIR / p.relative_to(HOST_TORCH_DIR)) if p.is_relative_to(HOST_TORCH_DIR) else path

    ext.include_dirs = [moved(d) for d in ext.include_dirs]
    ext.library_dirs = [moved(d) for d in ext.library_dirs]


def check_unique_cu_names(cu_sources: list[Path]) -> None:
    """nvcc names a .cu file's anonymous namespace after its base name and, in a reproducible build, a fixed path
    (visdet_build.reproducible_nvcc_flags): two .cu files of one name would define the same host symbols."""
    seen: dict[str, Path] = {}
    for cu in cu_sources:
        if cu.name in seen:
            fail(f"two CUDA sources named {cu.name} ({seen[cu.name]}, {cu}): give each .cu file its own name")
        seen[cu.name] = cu


def link_cuda_runtime_statically(ext) -> None:
    """A stable CUDA build links no libtorch_cuda, libc10_cuda or libcudart (csrc/common/host_cuda.h finds the
    stream function at run time and checks errors with its own runtime): libcudart_static.a instead, so the wheel
    loads beside a CPU-only torch too, and beside every CUDA-major-equal torch whatever its cudart minor."""
    ext.libraries = [lib for lib in ext.libraries if lib not in ("cudart", "c10_cuda", "torch_cuda")]
    dirs = [*ext.library_dirs, str(CUDA_HOME / "lib64"), str(CUDA_HOME / "lib")]
    found = next((d for d in dirs if (Path(d) / "libcudart_static.a").exists()), None)
    if found is None:
        fail(f"the stable CUDA build links libcudart_static.a, which is in none of {dirs}")
    ext.extra_link_args += [f"-L{found}", "-l:libcudart_static.a", "-ldl", "-lrt", "-lpthread"]


class BuildPy(build_py):
    """Writes _build_info.py into the wheel's staging folder, not the source
    tree, so that a wheel build never mislabels an in-place build."""

    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            write_build_info(Path(self.build_lib) / "visdet_ops")


def check_no_static_libstdcxx(library: Path) -> None:
    """Fails when the toolchain copied libstdc++ into the extension.

    Seen with a compiler wrapper whose -B path holds only libstdc++.a: the
    extension then carries its own iostream/locale state and segfaults in the
    first error message it formats once another C++ extension (torchvision)
    is loaded. A correct build defines no std::locale symbols."""
    if not library.exists():
        fail(f"built extension {library} not found")
    nm = shutil.which("nm")
    if nm is None:
        print("visdet-ops build WARNING: no `nm`, cannot check for a static libstdc++", file=sys.stderr)
        return
    symbols = subprocess.run([nm, "--defined-only", str(library)], capture_output=True, text=True).stdout
    copied = [line.split()[-1] for line in symbols.splitlines() if " _ZNSt6locale" in line]
    if copied:
        fail(
            f"{library.name} contains a static copy of libstdc++ ({len(copied)} std::locale symbols, e.g. "
            f"{copied[0]}): the C++ compiler (CXX={os.environ.get('CXX', 'c++')}) links libstdc++ statically, "
            "and such an extension crashes beside other C++ extensions. Build with a compiler that links "
            "libstdc++ dynamically, e.g. CC=/usr/bin/gcc CXX=/usr/bin/g++."
        )


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """Checks the linked extension; in-place builds (develop, editable,
    build_ext --inplace) describe themselves in the source tree, next to the
    _C they produced."""

    def run(self):
        super().run()
        for ext in self.extensions:
            check_no_static_libstdcxx(Path(self.get_ext_fullpath(ext.name)))
        if self.inplace or getattr(self, "editable_mode", False):
            write_build_info(ROOT / "visdet_ops")


STABLE_NOTE = (
    f"stable ABI for torch >= {'.'.join(map(str, variants.STABLE_ABI_FLOOR))} (ops: {', '.join(op_folders())}), "
    if STABLE_ABI
    else ""
)
CROSS_NOTE = f"cross build for {TARGET_MACHINE} against {TORCH_DIR}, " if CROSS else ""
print(
    f"visdet-ops {VERSION}: torch {TORCH_VERSION}, {CROSS_NOTE}{STABLE_NOTE}"
    + (f"CUDA {TORCH_CUDA} (nvcc {NVCC_VERSION} at {CUDA_HOME}), archs {';'.join(ARCHS)}" if WITH_CUDA else "CPU only")
    + f"; SOURCE_DATE_EPOCH={EPOCH} ({EPOCH_SOURCE})",
    file=sys.stderr,
)

setup(
    version=VERSION,
    # torch and nothing else at run time: the import check and the doctor use the standard library only.
    install_requires=[
        f"torch>={variants.STABLE_ABI_FLOOR[0]}.{variants.STABLE_ABI_FLOOR[1]}"
        if STABLE_ABI
        else f"torch=={TORCH_VERSION.major}.{TORCH_VERSION.minor}.*"
    ],
    ext_modules=[extension()],
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
    # A cross build's wheel is tagged for its target (auditwheel then gives it its manylinux tag).
    options={
        "bdist_wheel": {
            "py_limited_api": variants.ABI3_TAG,
            **({"plat_name": f"linux_{TARGET_MACHINE}"} if CROSS else {}),
        }
    },
)
