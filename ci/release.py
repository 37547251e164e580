"""The release path, run natively: the steps of [tool.cibuildwheel] (pyproject.toml) and the publish step of
.github/workflows/publish.yml, from the same definitions the workflows use.

  python -m ci.release rehearsal [--python PYTHON3.10] [--work DIR] [--flavour cpu] [--torch 2.13] [--no-stable]
                                 [--aarch64-torch 2.10]

The rehearsal, in a scratch copy of the source tree, for one variant:
  release 1 (the version of ci/matrix.toml): in a fresh venv of a bare CPython 3.10, cibuildwheel's
    before-build, build (pip wheel, the configured frontend arguments), repair-wheel-command; then in another
    fresh venv before-test, the test extras, the wheel, test-command (the installed-package tests: `nox -s tests` ran
    the whole suite on this code and torch, the smoke step runs it on this Python from the stable wheel); then the
    publish step (ci.index with
    --previous = the published site, --wheel-url = the release's download URL) into a site served on 127.0.0.1;
    Release 1 also holds the stable-ABI wheel of the row where [stable] has one (stable211cpu for the cpu row;
    --no-stable leaves it out): the same before-build, build and repair with VISDET_OPS_STABLE_ABI=1 against the
    floor torch (the row's newest patch of it), the wheel check of a stable row, and ci.abi_audit against that
    torch; its suite runs in the smoke step, beside the [tests] torch;
    Release 1 also holds the row's aarch64 wheel for --aarch64-torch (pt210cpu): the same build steps, cross-compiled
    here (ci.release.cross_environment, docs/aarch64.md), the wheel check of an aarch64 row; the smoke step installs
    and tests it in an aarch64 venv under qemu (ci/qemu.py);
  release 2 (the version bumped in the copy's ci/matrix.toml, as the next release commit would): the same build
    and publish of the per-minor wheel (its tests are the same code as release 1's and are not run again). Its
    build reuses release 1's object files (the stable wheel builds in a copy of its own, so they stay there; the
    extension is linked again and the package files copied again): a version bump changes no compiled input,
    release 1 rehearsed the compile from scratch, and what release 2 rehearses is the version and the index;
  then every variant of the site goes through ci.smoke (fresh venvs with only torch, -f and --index-url,
  with and without --no-deps, doctor, a mismatched torch; the whole CPU suite from the stable wheel, and the
  installed-package tests from the per-minor one, whose code release 1's test-command ran the suite on), and
  every version must install by exact version from the merged index.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import matrix as variant_matrix  # noqa: E402
from ci import qemu, smoke, toolchain, wheel_check  # noqa: E402


def cibw_config(root: Path = ROOT) -> dict:
    """[tool.cibuildwheel] with its [tool.cibuildwheel.linux] overrides, as cibuildwheel reads them."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10 (the release's test venv): the test extras bring tomli
        import tomli as tomllib

    tool = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    config = {k: v for k, v in tool.items() if k != "linux"}
    config.update(tool.get("linux", {}))
    return config


def build_environment(
    flavour: variant_matrix.CudaFlavour, torch_version, arch_list: list[str] | None = None, stable: bool = False
) -> dict:
    """What the build steps of one variant need from the matrix; passed into cibuildwheel's container
    (environment-pass) or set natively. stable: the stable-ABI wheel built from this row (torch_version is then
    the floor's build torch of the row)."""
    env = {
        "VISDET_OPS_FLAVOUR": flavour.name,
        "VISDET_OPS_TORCH": str(torch_version),
        "VISDET_OPS_CUDA": "1" if flavour.is_cuda else "0",
        "VISDET_OPS_STABLE_ABI": "1" if stable else "0",
        "VISDET_OPS_TORCH_PIP_ARGS": json.dumps(flavour.torch_pip_args(torch_version)),
        # The commit's time, read here: the container's copy of the tree may have no usable git. Every build step
        # (setup.py, bdist_wheel, auditwheel's rezip) dates the wheel's files by it (docs/release.md).
        "SOURCE_DATE_EPOCH": str(variant_matrix.rules.source_date_epoch(ROOT)[0]),
    }
    if flavour.is_cuda:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(arch_list or flavour.arch_list)
    return env


def _command(template: str, **values: str) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", shlex.quote(value))
    return template


def _sh(command: str, env: dict, cwd: Path | None = None) -> None:
    print(f"+ {command}", flush=True)
    subprocess.run(["sh", "-c", command], env=env, cwd=cwd, check=True)


def _venv(python: str, path: Path, base_env: dict) -> dict:
    """A fresh venv; returns the environment that activates it."""
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(path)], check=True)
    return _activate(path, base_env)


def _activate(path: Path, base_env: dict) -> dict:
    """The environment that activates the venv at `path`."""
    env = dict(base_env, VIRTUAL_ENV=str(path), PATH=f"{path / 'bin'}{os.pathsep}{base_env['PATH']}")
    env.pop("PYTHONHOME", None)
    return env


def build_and_repair(
    python: str, project: Path, out: Path, variant_env: dict, work: Path, venv: str = "build-venv", fresh: bool = True
) -> Path:
    """before-build, build, repair-wheel-command of [tool.cibuildwheel] in a fresh venv of `python` (work/venv), or
    in that venv as an earlier build left it (fresh=False: its torch's headers keep their times, so the objects
    compiled against them stay up to date)."""
    config = cibw_config(project)
    base_env = dict(os.environ, **config.get("environment", {}), **variant_env)
    env = _venv(python, work / venv, base_env) if fresh else _activate(work / venv, base_env)
    _sh(_command(config["before-build"], project=str(project)), env, cwd=project)
    frontend = config.get("build-frontend", {})
    if frontend.get("name", "pip") != "pip":
        raise SystemExit(f"ci.release runs the pip build frontend only, the config names {frontend}")
    built = work / "built"
    shutil.rmtree(built, ignore_errors=True)
    args = " ".join(shlex.quote(a) for a in frontend.get("args", []))
    _sh(f"python -m pip wheel {shlex.quote(str(project))} --wheel-dir={shlex.quote(str(built))} --no-deps {args}", env)
    (raw,) = built.glob("*.whl")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for step in config["repair-wheel-command"]:
        _sh(_command(step, wheel=str(raw), dest_dir=str(out)), env)
    (wheel,) = out.glob("*.whl")
    return wheel


def test_wheel(python: str, project: Path, wheel: Path, variant_env: dict, work: Path) -> None:
    """before-test, the test requirements, the wheel and test-command, in a fresh venv, from a scratch folder."""
    config = cibw_config(project)
    env = _venv(python, work / "test-venv", dict(os.environ, **config.get("environment", {}), **variant_env))
    if config.get("before-test"):
        _sh(_command(config["before-test"], project=str(project)), env, cwd=project)
    extras = ",".join(config.get("test-extras", []))
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    _sh(
        f"python -m pip install {shlex.quote(requirement)} "
        + " ".join(map(shlex.quote, config.get("test-requires", []))),
        env,
    )
    # The whole suite already ran on this code and torch (`nox -s tests`, in place), and the smoke step runs it on this
    # Python from the stable wheel: test-command runs the installed-package tests here (ci/scratch.py); on GitHub's
    # runners cibuildwheel runs it whole.
    env = dict(env, VISDET_OPS_SCRATCH_SUITE="installed")
    with tempfile.TemporaryDirectory(prefix="cibw-test-") as cwd:
        _sh(_command(config["test-command"], project=str(project)), env, cwd=Path(cwd))
    smoke.free(work / "test-venv")


def publish(wheelhouse: Path, site: Path, site_url: str, tag: str, assets: Path, assets_url: str) -> None:
    """The publish workflow's index step: merge this release into the published index (read from its URL)."""
    subprocess.run(
        [sys.executable, "-m", "ci.index", "--wheelhouse", str(wheelhouse), "--out", str(site),
         "--base-url", site_url, "--previous", site_url, "--wheel-url", f"{assets_url}/{tag}",
         "--assets-out", str(assets / tag)],
        cwd=ROOT, check=True,
    )  # fmt: skip


def find_python(version: str) -> str:
    """An interpreter of `version` that actually runs (a pyenv shim of an inactive version does not)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(str(p) for p in pyenv_root.glob(f"versions/{version}.*/bin/python{version}"))
    for exe in filter(None, candidates):
        res = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip() == str(tuple(int(p) for p in version.split("."))):
            return exe
    raise SystemExit(f"no working python{version} found (PATH, {pyenv_root}/versions): install CPython {version}")


def _copy_tree(dest: Path, root: Path = ROOT) -> Path:
    """The files a clean checkout has (tracked and not ignored), as the release job checks them out. git decides
    which files those are; a tree that is not a git checkout (a `git archive` export, a tarball) stops here with
    one line saying so, not with git's traceback."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=root, capture_output=True, text=True,
        )  # fmt: skip
    except FileNotFoundError:
        listing = None
    if listing is None or listing.returncode != 0:
        raise SystemExit(
            f"release rehearsal: {root} is not a git checkout (an exported tree?); it copies the files a clean "
            "checkout has, which git lists: run it from a git clone (git clone <repo> && nox -s release-rehearsal)"
        )
    files = listing.stdout.split("\0")
    shutil.rmtree(dest, ignore_errors=True)
    for rel in filter(None, files):
        src = root / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _reachable(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=20).close()
        return True
    except (urllib.error.URLError, OSError):
        return False


def _bump(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:-1] + [str(int(parts[-1]) + 1)])


def _set_version(project: Path, version: str) -> None:
    path = project / "ci" / "matrix.toml"
    text, count = re.subn(r'(?m)^version = "[^"]+"', f'version = "{version}"', path.read_text(), count=1)
    if count != 1:
        raise SystemExit(f"{path}: no top-level version line")
    path.write_text(text)


def rehearsal_environment(flavour: variant_matrix.CudaFlavour, torch_version, stable: bool = False) -> dict:
    """build_environment for the rehearsal: where the row's torch index is unreachable (machines that reach PyPI
    only) and PyPI's wheel of the release is another build, the torch comes from PyPI (a CUDA build: its CPU ABI
    is the same, and a cpu variant, per-minor or stable, compiles no CUDA)."""
    env = build_environment(flavour, torch_version, stable=stable)
    if not flavour.torch_from_pypi(torch_version) and not _reachable(flavour.torch_index):
        print(f"NOTE: {flavour.torch_index} is unreachable: torch {torch_version} comes from PyPI", flush=True)
        env["VISDET_OPS_TORCH_PIP_ARGS"] = json.dumps([f"torch=={torch_version}"])
    return env


def audit_stable(wheel: Path, project: Path, work: Path, venv: str = "build-venv-stable") -> None:
    """ci.abi_audit of a stable wheel against the torch of its build venv (the floor torch it was built against)."""
    python = work / venv / "bin" / "python"
    print(f"+ {python} -m ci.abi_audit {wheel}", flush=True)
    if subprocess.run([str(python), "-m", "ci.abi_audit", str(wheel)], cwd=project).returncode != 0:
        raise SystemExit(f"{wheel.name}: ci.abi_audit failed (see above)")


def expected_listing(
    variant: str, versions: list[str], stable_variant: str | None, aarch64_variant: str | None = None
) -> dict[str, list[str]]:
    """What the merged index must list after the rehearsal's releases: every version of the per-minor variant,
    and the stable variant's and the aarch64 wheel's first (release 1) only."""
    want = {variant: sorted(f"{v}+{variant}" for v in versions)}
    if stable_variant:
        want[stable_variant] = [f"{versions[0]}+{stable_variant}"]
    if aarch64_variant:
        want.setdefault(aarch64_variant, [])
        want[aarch64_variant] = sorted({*want[aarch64_variant], f"{versions[0]}+{aarch64_variant}"})
    return want


def cross_environment(flavour: variant_matrix.CudaFlavour, torch_version, python: str) -> dict:
    """The variables that make the release build steps cross-compile for flavour.platform here (docs/aarch64.md): the
    host torch of the same release (its pip arguments, as rehearsal_environment gives them for this machine's row),
    the cross compilers and the target torch, fetched into the nox cache."""
    host = flavour.on(toolchain.host_platform())
    env = rehearsal_environment(host, torch_version)
    env.update(toolchain.cross_compilers(flavour.platform))

    def pip(args: list[str]) -> None:
        subprocess.run([sys.executable, "-m", "pip", *args], check=True)

    env["VISDET_OPS_TARGET_TORCH"] = str(toolchain.target_torch(flavour, torch_version, qemu.CACHE, pip, python))
    return env


def rehearsal(args: argparse.Namespace) -> int:
    started = time.monotonic()
    python = args.python or find_python(".".join(map(str, variant_matrix.rules.MIN_PYTHON)))
    matrix = variant_matrix.load()
    flavour = matrix.flavour(args.flavour)
    torch_version = flavour.torch_for(args.torch) if args.torch else matrix.tests_torch
    variant = variant_matrix.variant_name(torch_version, flavour.name)
    stable = matrix.stable_for_row(flavour.name) if args.stable else None
    # The aarch64 wheel of release 1: the row's per-minor wheel for --aarch64-torch, cross-compiled here and checked
    # under qemu in the smoke step (the wheels workflow builds it natively on an arm64 runner).
    aarch64 = flavour.on("aarch64") if args.aarch64_torch else None
    aarch64_torch = aarch64.torch_for(args.aarch64_torch) if aarch64 else None
    aarch64_variant = variant_matrix.variant_name(aarch64_torch, flavour.name) if aarch64 else None
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    (work / "www" / "site").mkdir(parents=True)
    server, url = smoke.serve(work / "www")
    site, site_url = work / "www" / "site" / "whl", f"{url}/site/whl"
    assets, assets_url = work / "www" / "releases" / "download", f"{url}/releases/download"
    project = _copy_tree(work / "project")
    # The stable wheel builds in its own copy, so that release 2's per-minor build finds release 1's objects.
    stable_project = _copy_tree(work / "project-stable") if stable else None
    first = str(matrix.version)
    versions = [first, _bump(first)]
    variant_env = rehearsal_environment(flavour, torch_version)
    stable_env = rehearsal_environment(flavour, stable.torch, stable=True) if stable else None
    aarch64_project = _copy_tree(work / "project-aarch64") if aarch64 else None
    also = f" + {stable.name} (torch {stable.torch}) in release 1" if stable else ""
    also += f" + {aarch64_variant} for aarch64 (torch {aarch64_torch}) in release 1" if aarch64 else ""
    python_version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    print(f"release rehearsal: {variant} (torch {torch_version}){also} with {python}, versions {versions}", flush=True)
    try:
        for n, version in enumerate(versions):
            _set_version(project, version)
            house = work / f"wheelhouse-{version}"
            if n > 0:  # release 1's objects stay (build/temp.*); its linked extension and copied files go
                for built in (project / "build").glob("lib.*"):
                    shutil.rmtree(built)
            # Release 2 builds in release 1's venv: a fresh torch install would date every header after the objects.
            wheel = build_and_repair(python, project, house / variant, variant_env, work, fresh=n == 0)
            summary = wheel_check.check(wheel, flavour, torch_version)
            print(wheel_check.describe(summary), flush=True)
            if n == 0:
                test_wheel(python, project, wheel, variant_env, work)
            if n == 0 and stable:
                _set_version(stable_project, version)
                stable_wheel = build_and_repair(
                    python, stable_project, house / stable.name, stable_env, work, venv="build-venv-stable"
                )
                summary = wheel_check.check(stable_wheel, flavour, stable.torch, stable=True)
                print(wheel_check.describe(summary), flush=True)
                audit_stable(stable_wheel, stable_project, work)
                # Only release 1 builds it: its venv (a CUDA torch) and its objects go now, not at the end.
                smoke.free(work / "build-venv-stable", stable_project / "build")
            if n == 0 and aarch64:
                step = time.monotonic()
                _set_version(aarch64_project, version)
                cross_env = cross_environment(aarch64, aarch64_torch, python_version)
                out = work / "built-aarch64"
                aarch64_wheel = build_and_repair(
                    python, aarch64_project, out, cross_env, work, venv="build-venv-aarch64"
                )
                (house / aarch64_variant).mkdir(parents=True, exist_ok=True)
                aarch64_wheel = Path(shutil.move(aarch64_wheel, house / aarch64_variant / aarch64_wheel.name))
                summary = wheel_check.check(aarch64_wheel, aarch64, aarch64_torch)
                print(wheel_check.describe(summary), flush=True)
                smoke.free(work / "build-venv-aarch64", aarch64_project / "build")
                print(f"aarch64 cross build of {aarch64_variant}: {time.monotonic() - step:.0f} s", flush=True)
            publish(house, site, site_url, f"v{version}", assets, assets_url)
        smoke.free(work / "build-venv")
        manifest = json.loads((site / "manifest.json").read_text())["wheels"]
        want = expected_listing(variant, versions, stable.name if stable else None, aarch64_variant)
        listed = {v: sorted(e["version"] for e in manifest if e["variant"] == v) for v in want}
        if listed != want:
            raise SystemExit(f"after two releases the index lists {listed}, expected {want}")
        smoke.run_smoke(
            site,
            site_url,
            work / "smoke",
            versions=[v for vs in want.values() for v in vs],
            source=project,
            suite_tested=frozenset({variant}),  # release 1's test-command ran the whole suite on its code
            # The aarch64 wheel: the four install modes and its tests under qemu; installing by exact version is the
            # index's logic, the same for both platforms' wheels, and the x86_64 ones check it (87 s saved in CI).
            aarch64={aarch64_variant: []} if aarch64 else None,
        )
    finally:
        server.shutdown()
    print(f"release rehearsal OK: {variant}{also}, releases {versions}, {time.monotonic() - started:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    reh = sub.add_parser("rehearsal", help="two simulated releases of one variant into one index, then smoke")
    reh.add_argument("--python", help="the CPython to build with (default: a working python3.10)")
    reh.add_argument("--work", type=Path, default=ROOT / ".nox" / "_rehearsal")
    reh.add_argument("--flavour", default="cpu")
    reh.add_argument("--torch", help="torch release of the row (default: the matrix's [tests] torch)")
    reh.add_argument(
        "--aarch64-torch",
        default="2.10",
        help="torch release of the row whose aarch64 wheel release 1 cross-compiles and the smoke checks under qemu "
        "(default 2.10: PyPI's newest CPU-only aarch64 torch, the newest that imports here); '' leaves it out",
    )
    reh.add_argument(
        "--no-stable",
        dest="stable",
        action="store_false",
        help="leave out the row's stable-ABI wheel (release 1 holds it by default where [stable] has one)",
    )
    args = parser.parse_args(argv)
    return rehearsal(args)


if __name__ == "__main__":
    sys.exit(main())
