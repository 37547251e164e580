"""aarch64 programs on this x86_64 machine: Debian's qemu-user-static, an aarch64 CPython unpacked from Debian's arm64
packages, and the kernel's binfmt_misc so that an aarch64 executable runs like any other (a venv's python, its
console scripts, the subprocesses tests start). docs/aarch64.md says how it is used and what it costs.

  python -m ci.qemu [--cache DIR]     provision (binfmt, sysroot) and print the guest python's version

Nothing is installed into the host's dpkg: the packages are downloaded with a private apt state and unpacked into a
folder (the sysroot), which qemu takes as the aarch64 root for the dynamic loader and the libraries
(QEMU_LD_PREFIX). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".nox" / "_cache"

# The guest interpreter: Debian 12's CPython 3.11 for arm64 and what it loads (TOOLCHAINS.md, measured 2026-12-02).
DEBIAN_SUITE = "bookworm"
DEBIAN_ARCH = "arm64"
GUEST_PYTHON = "python3.11"
SYSROOT_PACKAGES = (
    "python3.11", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libstdc++6",
    "libgcc-s1", "libgomp1", "zlib1g", "libexpat1", "libssl3", "libffi8", "libbz2-1.0", "liblzma5", "libsqlite3-0",
    "libncursesw6", "libtinfo6", "libreadline8", "libuuid1", "libdb5.3", "libnsl2", "libtirpc3", "libgssapi-krb5-2",
    "libkrb5-3", "libk5crypto3", "libcom-err2", "libkrb5support0", "libkeyutils1", "libcrypt1",
)  # fmt: skip

# binfmt_misc: run ELF files of machine 183 (aarch64) through Debian's qemu wrapper, which keeps argv[0] (P) and is
# opened once at registration (F), the same entry Debian's qemu-user-static package makes where systemd registers it.
BINFMT = Path("/proc/sys/fs/binfmt_misc")
BINFMT_NAME = "qemu-aarch64"
BINFMT_MAGIC = r"\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
BINFMT_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
QEMU_CANDIDATES = ("/usr/libexec/qemu-binfmt/aarch64-binfmt-P", "/usr/bin/qemu-aarch64-static")


class QemuError(RuntimeError):
    pass


def _run(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> str:
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise QemuError(
            f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}"
        )
    return res.stdout


def ensure_binfmt() -> str:
    """Makes aarch64 executables runnable (registers qemu with binfmt_misc where it is not yet); returns how."""
    entry = BINFMT / BINFMT_NAME
    if entry.exists() and entry.read_text().startswith("enabled"):
        return f"binfmt_misc {BINFMT_NAME}: already registered"
    qemu = next((q for q in QEMU_CANDIDATES if Path(q).exists()), None)
    if qemu is None:
        raise QemuError("no qemu-aarch64-static: install Debian's qemu-user-static (apt-get install qemu-user-static)")
    if not (BINFMT / "register").exists():
        res = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True, text=True)
        if res.returncode != 0 or not (BINFMT / "register").exists():
            raise QemuError(
                f"binfmt_misc is not mounted at {BINFMT} and mounting it failed ({res.stderr.strip()}): as root, "
                f"`mount -t binfmt_misc binfmt_misc {BINFMT}` (or install binfmt-support), then rerun"
            )
    flags = "PF" if qemu.endswith("-binfmt-P") else "F"
    try:
        (BINFMT / "register").write_text(f":{BINFMT_NAME}:M:0:{BINFMT_MAGIC}:{BINFMT_MASK}:{qemu}:{flags}")
    except OSError as exc:
        raise QemuError(
            f"registering {qemu} with binfmt_misc failed ({exc}): run as root, or install binfmt-support"
        ) from exc
    return f"binfmt_misc {BINFMT_NAME}: registered {qemu} ({flags})"


def sysroot(cache: Path = CACHE) -> Path:
    """The aarch64 root (Debian's arm64 CPython and its libraries), downloaded and unpacked once into the cache."""
    root = cache / f"sysroot-{DEBIAN_SUITE}-{DEBIAN_ARCH}"
    if (root / ".complete").exists():
        return root
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise QemuError(f"the aarch64 sysroot is made of Debian packages and needs {tool} (a Debian machine)")
    apt = cache / f"apt-{DEBIAN_SUITE}-{DEBIAN_ARCH}"
    for sub in ("lists/partial", "archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(
        f"deb http://deb.debian.org/debian {DEBIAN_SUITE} main\n"
        f"deb http://deb.debian.org/debian {DEBIAN_SUITE}-updates main\n"
        f"deb http://deb.debian.org/debian-security {DEBIAN_SUITE}-security main\n"
    )
    (apt / "status").touch()
    (apt / "apt.conf").write_text(
        f'Dir::Etc::SourceList "{apt / "sources.list"}";\nDir::Etc::SourceParts "/nonexistent";\n'
        f'Dir::State::Lists "{apt / "lists"}";\nDir::State::status "{apt / "status"}";\n'
        f'Dir::Cache::Archives "{apt / "archives"}";\nAPT::Architecture "{DEBIAN_ARCH}";\n'
        f'APT::Architectures "{DEBIAN_ARCH}";\nDebug::NoLocking "true";\n'
    )
    env = dict(os.environ, APT_CONFIG=str(apt / "apt.conf"))
    _run(["apt-get", "update", "-q"], env)
    debs = apt / "debs"
    for old in debs.glob("*.deb"):
        old.unlink()
    _run(["apt-get", "download", "-q", *SYSROOT_PACKAGES], env, cwd=debs)
    shutil.rmtree(root, ignore_errors=True)
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    (root / ".complete").touch()
    return root


def guest_env(root: Path, base: dict | None = None) -> dict:
    """An environment in which aarch64 programs find their loader and libraries in `root`."""
    return dict(os.environ if base is None else base, QEMU_LD_PREFIX=str(root))


def guest_python(root: Path) -> Path:
    return root / "usr" / "bin" / GUEST_PYTHON


def make_venv(root: Path, path: Path, env: dict) -> Path:
    """A fresh aarch64 venv at `path` with pip (Debian's CPython has no ensurepip: pip's own pure-Python wheel is put
    into it by this machine's pip); returns its python."""
    shutil.rmtree(path, ignore_errors=True)
    _run([str(guest_python(root)), "-m", "venv", "--without-pip", str(path)], guest_env(root, env))
    site = next((path / "lib").glob("python3.*")) / "site-packages"
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), "pip"], env)
    return path / "bin" / "python"


# torch's own requirements on linux-aarch64 up to 2.10 (its NVIDIA ones are marked platform_machine == "x86_64"), and
# what the installed-package tests need: installed into a guest venv by this machine's pip for the aarch64 platform,
# at native speed (the guest's pip unpacks torch's 800 MB in emulation: minutes). The wheels are the ones the
# guest's pip would take; visdet-ops itself is always installed by the guest's pip, from the served index.
TORCH_PURE_REQUIREMENTS = ("filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
                           "fsspec", "setuptools")  # fmt: skip
TEST_REQUIREMENTS = ("pytest", "pytest-xdist", "hypothesis", "numpy", "packaging")


def install_wheels(venv_python: Path, requirements: list[str], env: dict, resolve: bool = False) -> None:
    """`requirements` into the aarch64 venv of `venv_python`, by this machine's pip for the guest's platform and Python:
    exactly these (torch: its NVIDIA requirements are marked for x86_64, which this pip would read as its own machine),
    or with resolve=True with their dependencies (the test requirements: their markers name Python versions and
    operating systems only, which this machine shares with the guest)."""
    from ci import toolchain

    site = next((venv_python.parent.parent / "lib").glob("python3.*")) / "site-packages"
    python = site.parent.name.removeprefix("python")
    _run([sys.executable, "-m", "pip", "install", "--quiet", *([] if resolve else ["--no-deps"]), "--upgrade",
          "--target", str(site), *toolchain.wheel_platform_args("aarch64", python), *requirements], env)  # fmt: skip


def provision(cache: Path = CACHE) -> tuple[Path, dict]:
    """binfmt and the sysroot; returns the sysroot and the environment for guest programs."""
    print(ensure_binfmt(), flush=True)
    root = sysroot(cache)
    return root, guest_env(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    try:
        root, env = provision(args.cache)
        out = _run(
            [str(guest_python(root)), "-c", "import platform, sys; print(sys.version.split()[0], platform.machine())"],
            env,
        )
    except QemuError as exc:
        print(f"ci.qemu: {exc}", file=sys.stderr)
        return 2
    print(f"sysroot {root}: python {out.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
