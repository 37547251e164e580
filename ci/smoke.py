"""Installs each variant of a served wheel index the way a user does, with no compiler in sight, and checks it.

  python -m ci.smoke --index index [--variant pt213cpu ...] [--work DIR]

For every variant folder of the index (per-minor pt213cpu/ and stable-ABI stable211cpu/ alike): serve the index on
127.0.0.1 (or use --url), make a fresh venv that holds only the variant's torch (a per-minor variant: its minor; a
stable variant: the matrix's [tests] torch minor, or --stable-torch), then for each way a user installs:
  pip install visdet-ops -f <url>/<variant>/                     (and again with --no-deps)
  pip install visdet-ops --index-url <url>/<variant>/simple      (and again with --no-deps)
with pip's configuration cleared (no find-links, no extra index of this machine), nvcc off PATH, CUDA_HOME unset:
numpy and packaging must be absent, `import visdet_ops`, `visdet-ops doctor`, `visdet-ops doctor --json` and
`python -m visdet_ops doctor` must succeed; then visdet-ops is uninstalled again (the venv holds only torch).
Then the CPU test suite runs once against the installed wheel (a variant whose wheel's code the caller already ran
the whole suite on, `suite_tested`: the release rehearsal's per-minor wheel, which cibuildwheel's test-command ran
it on, gets the installed-package tests only, INSTALLED_PACKAGE_TESTS). Last, a per-minor wheel beside a torch of
another minor must fail with one clear ImportError naming both torch versions and the pip line of the variant
recommended for that torch (_build_rules.recommended_variant: the stable one for torch >= the floor), and the doctor
must exit 1.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import matrix as variant_matrix  # noqa: E402
from ci import qemu  # noqa: E402
from ci.index import entry_platform as index_platform  # noqa: E402
from ci.scratch import EMULATION_DESELECT, INSTALLED_PACKAGE_TESTS, pytest_command, tree_without_package  # noqa: E402

rules = variant_matrix.rules


def clean_env() -> dict:
    """The environment of a user's shell: no CUDA toolkit, no PYTHONPATH into the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvcc").exists()
    )
    return env


def user_pip_env(env: dict) -> dict:
    """pip as a user runs it: no configuration file, no PIP_* settings of this machine (find-links, extra
    indexes), so only the index under test and PyPI are consulted."""
    out = {k: v for k, v in env.items() if not k.startswith("PIP_")}
    out["PIP_CONFIG_FILE"] = os.devnull
    out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return out


def run(cmd: list, env: dict, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    res = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, text=True, capture_output=True)
    if check and res.returncode != 0:
        raise SystemExit(
            f"FAILED ({res.returncode}): {' '.join(map(str, cmd))}\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
        )
    return res


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def venv(path: Path, env: dict, sysroot: Path | None = None) -> Path:
    """A fresh venv of this machine's Python, or with `sysroot` of the aarch64 guest Python under qemu (ci/qemu.py)."""
    if sysroot is not None:
        print(f"+ aarch64 venv {path} (qemu, {sysroot})", flush=True)
        return qemu.make_venv(sysroot, path, env)
    shutil.rmtree(path, ignore_errors=True)
    run([sys.executable, "-m", "venv", path], env)
    return path / "bin" / "python"


def free(*paths: Path) -> None:
    """Removes what a step is done with (a venv holds a torch, a CUDA one ~5 GB; a fat build's objects are GBs) and
    prints the disk left: CI's disk is finite, and the release rehearsal's venvs together once filled it (ENOSPC)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    left = shutil.disk_usage(paths[0].parent).free / 2**30
    print(f"disk: {left:.1f} GiB free after removing {', '.join(p.name for p in paths)}", flush=True)


def torch_minor(variant: str) -> str:
    """pt213cpu -> "2.13"."""
    (major, minor), _ = rules.parse_variant(variant)
    return f"{major}.{minor}"


def is_variant_folder(name: str) -> bool:
    """A variant folder of the index: per-minor (pt213cpu) or stable-ABI (stable211cpu)."""
    return rules.is_variant(name) or rules.is_stable_variant(name)


def smoke_torch_minor(variant: str, stable_torch: str | None = None) -> str:
    """The torch minor a variant is smoke-tested beside: a per-minor variant's own; for a stable variant (it serves
    every torch >= the floor) `stable_torch`, by default the matrix's [tests] torch (what the suite runs against)."""
    if not rules.is_stable_variant(variant):
        return torch_minor(variant)
    if stable_torch:
        return stable_torch
    tests = variant_matrix.load().tests_torch
    return f"{tests.major}.{tests.minor}"


def install_torch(py: Path, minor: str, env: dict) -> str:
    """torch of `minor` with this machine's pip configuration (its local torch wheels); returns its version."""
    run([py, "-m", "pip", "install", "--quiet", f"torch=={minor}.*"], env)
    return run([py, "-c", "import torch; print(torch.__version__)"], env).stdout.strip()


def install_modes(url: str, variant: str) -> dict[str, list[str]]:
    find_links = ["visdet-ops", "-f", f"{url}/{variant}/"]
    simple = ["visdet-ops", "--index-url", f"{url}/{variant}/simple"]
    return {
        "-f": find_links,
        "-f --no-deps": [*find_links, "--no-deps"],
        "--index-url simple": simple,
        "--index-url simple --no-deps": [*simple, "--no-deps"],
    }


def check_installed(
    py: Path,
    variant: str,
    env: dict,
    work: Path,
    version: str | None = None,
    check: str = "doctor",
    torch_before: str | None = None,
) -> str:
    """What pip installed in a venv that holds torch and visdet-ops only; returns its version. check="doctor": the venv
    is torch-only, the import, the doctors (text, --json, -m); "import": the import and the installed version (the
    doctors ran on the same wheel); "metadata": the installed distribution's version alone, read without importing
    torch (the further install modes under qemu, where every torch import takes 25 s: they install the file the first
    mode imported and ran the doctors on, so what they add is which file pip chose, and that torch's distribution
    stayed `torch_before`)."""
    want = version or f"+{variant}"
    if check == "metadata":
        probe = "import importlib.metadata as m; print(m.version('visdet-ops'), m.version('torch'))"
        got, torch_version = run([py, "-c", probe], env, cwd=work).stdout.split()
        if not got.endswith(want):
            raise SystemExit(f"{variant}: pip installed visdet-ops {got}, expected {want}")
        if torch_version != torch_before:
            raise SystemExit(f"{variant}: installing visdet-ops changed torch {torch_before} to {torch_version}")
        return got
    if check not in ("doctor", "import"):
        raise ValueError(f"check must be doctor, import or metadata, not {check!r}")
    if check == "doctor":
        absent = run(
            [py, "-c", "import importlib.util as u; print([m for m in ('numpy', 'packaging') if u.find_spec(m)])"], env
        )
        if absent.stdout.strip() != "[]":
            raise SystemExit(f"{variant}: the venv is not torch-only, it has {absent.stdout.strip()}")
    got = run([py, "-c", "import visdet_ops; print(visdet_ops.__version__)"], env, cwd=work).stdout.strip()
    if not got.endswith(want):
        raise SystemExit(f"{variant}: pip installed visdet-ops {got}, expected {want}")
    if check == "import":
        return got
    doctor = run([py.parent / "visdet-ops", "doctor"], env, cwd=work, check=False)
    if doctor.returncode != 0:
        raise SystemExit(f"{variant}: visdet-ops doctor exited {doctor.returncode}\n{doctor.stdout}\n{doctor.stderr}")
    report = run([py.parent / "visdet-ops", "doctor", "--json"], env, cwd=work, check=False)
    if report.returncode != 0 or json.loads(report.stdout)["ok"] is not True:
        raise SystemExit(f"{variant}: visdet-ops doctor --json exited {report.returncode}\n{report.stdout[-3000:]}")
    run([py, "-m", "visdet_ops", "doctor"], env, cwd=work)
    return got


def check_variant(
    variant: str,
    url: str,
    work: Path,
    env: dict,
    versions: list[str] | None = None,
    source: Path = ROOT,
    stable_torch: str | None = None,
    whole_suite: bool = True,
    sysroot: Path | None = None,
) -> dict:
    """One variant's wheel for this machine, or with `sysroot` its aarch64 wheel in an aarch64 venv under qemu."""
    machine = "aarch64" if sysroot is not None else rules.normalize_machine(platform.machine())
    started = time.monotonic()
    py = venv(work / f"venv-{variant}-{machine}", env, sysroot)
    minor = smoke_torch_minor(variant, stable_torch)
    if sysroot is not None:  # torch's aarch64 wheel, laid down at native speed (qemu.install_wheels)
        qemu.install_wheels(py, [f"torch=={minor}.*", *qemu.TORCH_PURE_REQUIREMENTS], env)
    torch_version = install_torch(py, minor, env)
    # torch's distribution version (2.10.0 where torch.__version__ says 2.10.0+cpu), read without importing it
    torch_dist = run([py, "-c", "import importlib.metadata as m; print(m.version('torch'))"], env).stdout.strip()
    times = {"venv + torch": time.monotonic() - started}
    user = user_pip_env(env)
    modes = {}
    for n, (mode, args) in enumerate(install_modes(url, variant).items()):
        step = time.monotonic()
        run([py, "-m", "pip", "install", "--quiet", *args], user)
        check = "doctor" if sysroot is None or n == 0 else "metadata"
        modes[mode] = check_installed(py, variant, user, work, check=check, torch_before=torch_dist)
        run([py, "-m", "pip", "uninstall", "--quiet", "--yes", "visdet-ops"], user)
        times[mode] = time.monotonic() - step
        done = {"doctor": "import + doctor OK", "metadata": "the same file as the first mode's"}[check]
        print(f"{variant} ({machine}): {mode}: visdet-ops {modes[mode]} beside torch {torch_version}: {done}")
    for version in versions or []:
        step = time.monotonic()
        for args in install_modes(url, variant).values():
            run([py, "-m", "pip", "install", "--quiet", "--no-deps", args[0] + f"=={version}", *args[1:]], user)
            # The import and the installed version (under qemu the version alone): the doctors ran on this variant's
            # wheel in the modes above.
            check = "import" if sysroot is None else "metadata"
            check_installed(py, variant, user, work, version=version, check=check, torch_before=torch_dist)
            run([py, "-m", "pip", "uninstall", "--quiet", "--yes", "visdet-ops"], user)
        times[f"version {version}"] = time.monotonic() - step
        print(f"{variant} ({machine}): version {version} installs from both pages")
    # The test suite, once, against the installed wheel (or its installed-package tests, when the caller ran the
    # whole suite on this variant's code already).
    step = time.monotonic()
    if sysroot is None:
        run([py, "-m", "pip", "install", "--quiet", "visdet-ops[test]", "-f", f"{url}/{variant}/"], user)
    else:  # the installed-package tests' requirements natively (qemu.TEST_REQUIREMENTS), visdet-ops by the guest's pip
        qemu.install_wheels(py, list(qemu.TEST_REQUIREMENTS), env, resolve=True)
        run([py, "-m", "pip", "install", "--quiet", "--no-deps", "visdet-ops", "-f", f"{url}/{variant}/"], user)
    paths = ("tests",) if whole_suite else INSTALLED_PACKAGE_TESTS
    deselect = EMULATION_DESELECT if sysroot is not None else ()
    tree = tree_without_package(work / "tree", source)
    res = run(pytest_command(py, paths=paths, env=env, deselect=deselect), env, cwd=tree, check=False)
    times["tests"] = time.monotonic() - step
    summary = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-2000:]
    summary = summary if whole_suite else f"{summary} (installed-package tests: the whole suite ran on this code)"
    print(f"{variant} ({machine}): pytest: {summary}")
    if res.returncode != 0:
        raise SystemExit(f"{variant} ({machine}): tests failed\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}")
    print(f"{variant} ({machine}) times: " + ", ".join(f"{k} {v:.0f} s" for k, v in times.items()), flush=True)
    free(py.parent.parent)
    return {"variant": variant, "machine": machine, "torch": torch_version, "modes": modes, "tests": summary,
            "seconds": {k: round(v) for k, v in times.items()}}  # fmt: skip


def check_mismatch(variant: str, torch_spec: str, url: str, work: Path, env: dict) -> None:
    """`variant`'s wheel beside a torch of another minor: one clear ImportError, doctor exits 1."""
    py = venv(work / "venv-mismatch", env)
    # Installed once: not into pip's cache too (a CUDA torch and its NVIDIA wheels are GBs of CI's disk).
    run([py, "-m", "pip", "install", "--quiet", "--no-cache-dir", torch_spec], env)
    probe = "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))"
    found, found_cuda = json.loads(run([py, "-c", probe], env, cwd=work).stdout)
    run(
        [py, "-m", "pip", "install", "--quiet", "--no-deps", "visdet-ops", "-f", f"{url}/{variant}/"], user_pip_env(env)
    )
    res = run([py, "-c", "import visdet_ops"], env, cwd=work, check=False)
    err = res.stderr
    print(err)
    fix = rules.recommended_variant(found, found_cuda)
    checks = {
        "import fails": res.returncode != 0,
        "one exception, an ImportError": re.findall(r"^\w+Error: ", err, flags=re.M) == ["ImportError: "],
        f"names the build's torch {torch_minor(variant)}": f"built for torch {torch_minor(variant)}" in err,
        f"names the running torch {found}": f"found torch {found}" in err,
        f"prints the pip line for {fix}": "pip install --force-reinstall --no-deps visdet-ops -f " in err
        and f"/{fix}/" in err,
    }
    failed = [k for k, ok in checks.items() if not ok]
    if failed:
        raise SystemExit(f"mismatch {variant} beside torch {found}: {failed}\n{err}")
    for cmd in ([py.parent / "visdet-ops", "doctor"], [py.parent / "visdet-ops", "doctor", "--json"]):
        doctor = run(cmd, env, cwd=work, check=False)
        if doctor.returncode != 1 or "visdet-ops -f " not in doctor.stdout:
            raise SystemExit(f"mismatch: {cmd[1:]} exited {doctor.returncode} (expected 1) or printed no pip line")
    print(f"mismatch check: {variant} beside torch {found} fails clearly: OK")
    free(py.parent.parent)


def run_smoke(
    index: Path,
    url: str,
    work: Path,
    variants: list[str] | None = None,
    versions: list[str] | None = None,
    mismatch_torch: str | None = None,
    source: Path = ROOT,
    stable_torch: str | None = None,
    suite_tested: frozenset[str] = frozenset(),
    aarch64: dict[str, list[str]] | None = None,
) -> list[dict]:
    """Every variant of the index served at `url`; returns a summary per variant. The tests come from the
    source tree at `source` (the tree the wheels were built from); a variant in `suite_tested` (the caller ran the
    whole suite on a wheel of its code) runs INSTALLED_PACKAGE_TESTS only. `aarch64`: variants whose aarch64 wheel is
    checked the same way in an aarch64 venv under qemu (ci/qemu.py), each with its versions to install by number, and
    the installed-package tests (the rest of the suite is the x86_64 wheels' business: the same code)."""
    found = sorted(p.name for p in index.iterdir() if p.is_dir() and is_variant_folder(p.name))
    chosen = [v for v in found if not variants or v in variants]
    if not chosen:
        raise SystemExit(f"no variants in {index}/: run nox -s build-cpu and nox -s index first")
    env = clean_env()
    work.mkdir(parents=True, exist_ok=True)
    results = []
    # This machine's wheels are installed natively; a variant with wheels for other machines only (an aarch64 one
    # cross-built here) is checked under qemu where `aarch64` names it.
    here = rules.normalize_machine(platform.machine())
    manifest = json.loads((index / "manifest.json").read_text())["wheels"] if (index / "manifest.json").exists() else []
    native = {e["variant"] for e in manifest if index_platform(e) == here} if manifest else set(chosen)
    for v in (v for v in chosen if v in native):
        mine = [x for x in versions or [] if x.endswith(f"+{v}")]
        results.append(check_variant(v, url, work, env, mine, source, stable_torch, whole_suite=v not in suite_tested))
    if aarch64:
        root, guest = qemu.provision()
        for v, mine in aarch64.items():
            results.append(check_variant(v, url, work, guest_env(env, root), mine, source, stable_torch, False, root))
    cpu = [v for v in chosen if rules.is_variant(v) and v.endswith("cpu") and v in native]
    if cpu:
        # Another torch minor beside the CPU wheel: this machine's other torch, or the one asked for.
        spec = mismatch_torch or _other_torch(torch_minor(cpu[0]))
        check_mismatch(cpu[0], spec, url, work, env)
    for r in results:
        print(
            f"smoke OK: {r['variant']} ({r.get('machine', 'x86_64')}, torch {r['torch']}): {', '.join(r['modes'])}; "
            f"tests: {r['tests']}; seconds: {r.get('seconds')}"
        )
    return results


def guest_env(env: dict, root: Path) -> dict:
    """The smoke's clean environment with the aarch64 sysroot for qemu."""
    return qemu.guest_env(root, env)


def _other_torch(minor: str) -> str:
    """A torch release of another minor than `minor`, from the matrix's newest CPU-row releases."""
    cpu = variant_matrix.load().flavour("cpu")
    others = [t for t in cpu.build_targets() if f"{t.major}.{t.minor}" != minor]
    return f"torch=={others[-1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, default=ROOT / "index")
    parser.add_argument("--variant", action="append", help="only these variants (default: all in the index)")
    parser.add_argument("--work", type=Path, default=ROOT / ".nox" / "_smoke")
    parser.add_argument("--mismatch-torch", help="pip spec of the other torch for the mismatch check")
    parser.add_argument(
        "--stable-torch", help="torch minor the stable variants are tested beside (default: the [tests] torch's)"
    )
    parser.add_argument(
        "--aarch64",
        action="append",
        default=[],
        metavar="VARIANT",
        help="also check this variant's aarch64 wheel in an aarch64 venv under qemu (ci/qemu.py)",
    )
    args = parser.parse_args(argv)
    server, url = serve(args.index)
    try:
        run_smoke(
            args.index,
            url,
            args.work,
            args.variant,
            mismatch_torch=args.mismatch_torch,
            stable_torch=args.stable_torch,
            aarch64={v: [] for v in args.aarch64},
        )
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
