"""One commit, built twice in two folders, gives byte-identical wheels (docs/release.md, "Verifying a wheel").

  python -m ci.reproducible [--session build-stable-cpu] [--work DIR] [--keep-venvs] [-- BUILD ARGS]
  nox -s reproducible -- --session build-stable-cu13 -- --arch-list 9.0 --jobs 2

Copies the files a clean checkout has (ci.release's copy) into two folders of different names and lengths and runs
the same nox build session in each, the one a person and the release run (BUILD ARGS go to it). Each copy builds in
its own venv inside itself, so the build torch's headers lie at two paths as well, with SOURCE_DATE_EPOCH from this
checkout's commit. Then the repaired wheels' sha256 must agree; where they do not, it names the wheel members that
differ and any path of either build folder found in them, and exits with status 1.

Not in CI: two builds with two torch installs take minutes each on 2 cores. tests/test_reproducible.py is CI's
check: one C++ and one CUDA translation unit compiled twice in two folders with the build's flags.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import matrix as variant_matrix  # noqa: E402
from ci import release  # noqa: E402

# Two names of different lengths: a layout that shifts with the folder's length shows up too.
COPIES = ("one", "second-copy")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def paths_in(data: bytes, folders: list[Path]) -> list[str]:
    """The build folders (as given and resolved) whose path occurs in `data`."""
    spellings = dict.fromkeys(s for f in folders for s in (str(f), str(f.resolve())))
    return [s for s in spellings if s.encode() in data]


def differences(wheel_a: Path, wheel_b: Path, folders: list[Path]) -> list[str]:
    """What differs between two wheels, member by member (names, bytes, zip metadata), with the build-folder paths
    each differing member contains. Empty when the files are identical."""
    if wheel_a.read_bytes() == wheel_b.read_bytes():
        return []
    if wheel_a.name != wheel_b.name:
        return [f"file names differ: {wheel_a.name} and {wheel_b.name}"]
    found = []
    with zipfile.ZipFile(wheel_a) as za, zipfile.ZipFile(wheel_b) as zb:
        infos_a, infos_b = za.infolist(), zb.infolist()
        names_a, names_b = [i.filename for i in infos_a], [i.filename for i in infos_b]
        if names_a != names_b:
            found.append(f"members or their order differ: {names_a} and {names_b}")
        for info_a, info_b in zip(infos_a, infos_b, strict=False):  # a count mismatch is reported above
            if info_a.filename != info_b.filename:
                continue
            data_a, data_b = za.read(info_a), zb.read(info_b)
            if data_a != data_b:
                leaks = paths_in(data_a, folders) + paths_in(data_b, folders)
                found.append(
                    f"{info_a.filename}: contents differ"
                    + (f" (holds the build folder: {', '.join(leaks)})" if leaks else "")
                )
            meta_a = (info_a.date_time, info_a.external_attr, info_a.compress_type, info_a.extra)
            meta_b = (info_b.date_time, info_b.external_attr, info_b.compress_type, info_b.extra)
            if meta_a != meta_b:
                found.append(f"{info_a.filename}: zip metadata differs: {meta_a} and {meta_b}")
    return found or ["the zip containers differ, their members do not (compression or archive comment)"]


def build(copy: Path, session: str, build_args: list[str], epoch: str) -> Path:
    """`nox -s <session> -- <build_args>` in `copy`, with its own envdir; the repaired wheel."""
    cmd = [sys.executable, "-m", "nox", "--envdir", str(copy / ".nox"), "-s", session, "--", *build_args]
    print(f"+ (cd {copy} && SOURCE_DATE_EPOCH={epoch} python {' '.join(cmd[1:])})", flush=True)
    subprocess.run(cmd, cwd=copy, env=dict(os.environ, SOURCE_DATE_EPOCH=epoch), check=True)
    (wheel,) = (copy / "wheelhouse").glob("*/*.whl")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--session", default="build-stable-cpu", help="the nox build session (default: %(default)s)")
    parser.add_argument("--work", type=Path, default=ROOT / ".nox" / "_reproducible")
    parser.add_argument("--keep-venvs", action="store_true", help="keep each copy's build venv (a torch install)")
    parser.add_argument("build_args", nargs="*", help="after --: arguments of the build session")
    args = parser.parse_args(argv)
    if not args.session.startswith("build-"):
        parser.error(f"--session names a build session (nox -l lists them), got {args.session!r}")
    started = time.monotonic()
    epoch, origin = variant_matrix.rules.source_date_epoch(ROOT)
    print(f"SOURCE_DATE_EPOCH={epoch}: {origin}", flush=True)
    work = args.work.resolve()
    wheels, seconds = [], []
    for name in COPIES:
        copy = release._copy_tree(work / name)
        began = time.monotonic()
        try:
            wheels.append(build(copy, args.session, args.build_args, str(epoch)))
        finally:
            if not args.keep_venvs:
                shutil.rmtree(copy / ".nox", ignore_errors=True)
        seconds.append(time.monotonic() - began)
    for wheel, took in zip(wheels, seconds, strict=True):
        print(f"{sha256(wheel)}  {wheel}  ({took:.0f} s)")
    problems = differences(*wheels, [work / name for name in COPIES])
    total = time.monotonic() - started
    if problems:
        print(f"NOT reproducible: {args.session} {' '.join(args.build_args)}", *problems, sep="\n  ")
        return 1
    print(f"reproducible: {args.session} {' '.join(args.build_args)} gave one wheel twice ({total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
