"""Reproducible builds, CI's cheap half: one C++ and one CUDA translation unit, each compiled twice from two copies
of csrc/ in two folders with the build's flags (visdet_build.py, which setup.py uses), must give the
same bytes with no path of either folder or of the build torch in them; and SOURCE_DATE_EPOCH's default.

The whole wheel built twice is `nox -s reproducible` (ci/reproducible.py), minutes long, not in CI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from ci import matrix as variants
from ci import reproducible

ROOT = Path(__file__).resolve().parent.parent
rules = variants.rules
TORCH_DIR = Path(torch.__file__).parent  # as setup.py names it
# Small, and each reaches what leaked before: rois.cpp includes the stable adapter (csrc/common/host_stable.h) and
# torch's stable headers, whose checks embed __FILE__; rois_cuda.cu has an anonymous namespace.
CXX_SOURCE = "csrc/ops/_rois/rois.cpp"
CU_SOURCE = "csrc/ops/_rois/rois_cuda.cu"


def _copies(tmp_path: Path) -> list[Path]:
    """csrc/ in two folders of different names and lengths."""
    roots = [tmp_path / "one", tmp_path / "second-copy"]
    for root in roots:
        shutil.copytree(ROOT / "csrc", root / "csrc")
    return roots


def _compile(cmd: list[str], cwd: Path) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr[-4000:]}"


def _assert_same_and_clean(outputs: list[Path], folders: list[Path]) -> None:
    data = [p.read_bytes() for p in outputs]
    leaks = [reproducible.paths_in(d, folders) for d in data]
    assert leaks == [[], []], f"build folders in the output: {leaks}"
    assert data[0] == data[1], f"{outputs[0].name} differs between two folders"


def test_cxx_object_and_library_are_the_same_from_two_folders(tmp_path: Path):
    """The stable build's C++ flags (as setup.py composes them, torch's own around them), object and linked .so."""
    outputs = []
    for root in _copies(tmp_path):
        maps = rules.prefix_maps(root, TORCH_DIR)
        obj, lib = root / "build" / "rois.o", root / "build" / "_C.abi3.so"
        obj.parent.mkdir()
        cmd = [
            os.environ.get("CXX", "c++"),
            "-MMD", "-MF", f"{obj}.d", "-g", "-O3", "-fPIC",
            *(f"-I{p}" for p in [root / "csrc", *cpp_extension.include_paths()]),
            "-c", str(root / CXX_SOURCE), "-o", str(obj),
            *rules.CXX_FLAGS,
            *rules.stable_abi_flags(with_cuda=False),
            *rules.reproducible_cxx_flags(maps),
            f"-DPy_LIMITED_API={rules.PY_LIMITED_API}", "-DTORCH_EXTENSION_NAME=_C", "-std=c++20",
        ]  # fmt: skip
        _compile(cmd, root)
        _compile([os.environ.get("CXX", "c++"), "-shared", str(obj), "-o", str(lib), "-Wl,--strip-debug"], root)
        outputs.append((obj, lib))
    folders = [*(tmp_path / n for n in ("one", "second-copy")), TORCH_DIR, ROOT]
    _assert_same_and_clean([o for o, _ in outputs], folders)
    _assert_same_and_clean([lib for _, lib in outputs], folders)
    # The check messages' file names, as the maps make them.
    data = outputs[0][0].read_bytes()
    assert b"visdet-ops/csrc/common/host_stable.h" in data and b"torch/include/torch/csrc/stable/ops.h" in data


@pytest.fixture(scope="module")
def cuda_home() -> Path:
    home, _ = rules.find_cuda_home()
    if home is None:
        if os.environ.get("VISDET_OPS_REQUIRE_NVCC") == "1":
            pytest.fail("VISDET_OPS_REQUIRE_NVCC=1 but no nvcc was found (set CUDA_HOME)")
        pytest.skip("no nvcc on this machine")
    return home


def _nvcc_command(cuda_home: Path, nvcc, root: Path, obj: Path, compress: bool = True) -> list[str]:
    """setup.py's nvcc flags (torch's own first), for one arch."""
    return [
        str(cuda_home / "bin" / "nvcc"),
        "-c", str(root / CU_SOURCE), "-o", str(obj),
        f"-I{root / 'csrc'}", "-DVISDET_OPS_WITH_CUDA=1",
        *cpp_extension.COMMON_NVCC_FLAGS, "--compiler-options", "-fPIC",
        "-O3", *(["-Xfatbin=-compress-all"] if compress else []), "-Xcompiler=-fvisibility=hidden",
        *rules.reproducible_nvcc_flags(rules.prefix_maps(root, TORCH_DIR, cuda_home), nvcc),
        "-gencode=arch=compute_90,code=sm_90", "-std=c++17",
    ]  # fmt: skip


def test_cu_object_is_the_same_from_two_folders(tmp_path: Path, cuda_home: Path):
    """nvcc with the build's flags: its temporary names and a .cu file's anonymous-namespace names must not follow
    the folder or the run (visdet_build.reproducible_nvcc_flags), and host and device must still agree on those
    names, or the kernels would not be found at launch."""
    nvcc = rules.nvcc_version(cuda_home)
    if nvcc.major < 13:
        pytest.skip(f"nvcc {nvcc}: the fixed anonymous-namespace names are applied (and verified) for nvcc >= 13 only")
    outputs = []
    for root in _copies(tmp_path):
        obj = root / "build" / "rois_cuda.o"
        obj.parent.mkdir()
        _compile(_nvcc_command(cuda_home, nvcc, root, obj), root)
        outputs.append(obj)
    _assert_same_and_clean(outputs, [tmp_path / "one", tmp_path / "second-copy", ROOT])
    assert b"tmpxft_" not in outputs[0].read_bytes()
    # The host stubs and the cubin name the anonymous namespace alike (uncompressed, the cubin's names are
    # readable): one namespace name in the whole object.
    root = tmp_path / "one"
    plain = root / "build" / "plain.o"
    _compile(_nvcc_command(cuda_home, nvcc, root, plain, compress=False), root)
    names = set(re.findall(rb"_GLOBAL__N__[0-9a-f]+_\d+_rois_cuda_cu_[0-9a-f]{8}", plain.read_bytes()))
    assert len(names) == 1, f"host and device name the anonymous namespace differently: {sorted(names)}"


def test_prefix_maps_put_the_source_tree_first():
    """GCC applies the last map that matches: the torch of a venv inside the tree must come out as torch/..."""
    maps = rules.prefix_maps("/b/src", "/b/src/.nox/s/lib/python3.11/site-packages/torch", "/usr/local/cuda")
    names = [name for _, name in maps]
    assert names.index(rules.SOURCE_PREFIX) < names.index(rules.TORCH_PREFIX) < names.index(rules.CUDA_PREFIX)
    assert rules.reproducible_cxx_flags(maps)[0] == f"-ffile-prefix-map=/b/src={rules.SOURCE_PREFIX}"


def test_nvcc_flags_by_version():
    maps = [("/b/src", "visdet-ops")]
    assert "-objtemp" not in rules.reproducible_nvcc_flags(maps, rules.parse_release("11.8.89"))
    assert not any("orig_src" in f for f in rules.reproducible_nvcc_flags(maps, rules.parse_release("12.8.93")))
    new = rules.reproducible_nvcc_flags(maps, rules.parse_release("13.0.88"))
    assert new[0] == "-Xcompiler=-ffile-prefix-map=/b/src=visdet-ops" and "-objtemp" in new
    assert "-Xcudafe=--orig_src_path_name=visdet-ops" in new and "-frandom-seed=visdet-ops" in new


def test_source_date_epoch_is_the_variable_when_set(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert rules.source_date_epoch(ROOT) == (1700000000, "SOURCE_DATE_EPOCH")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        rules.source_date_epoch(ROOT)


def _tree(root: Path, mtime: int) -> None:
    for rel in ("setup.py", "pyproject.toml", "ci/matrix.toml", "csrc/module.cpp", "visdet_ops/__init__.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
        os.utime(root / rel, (mtime, mtime))


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_source_date_epoch_defaults_to_the_commit_time(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    _tree(tmp_path, 1_600_000_000)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@t", GIT_COMMITTER_DATE="@1650000000 +0000", GIT_AUTHOR_DATE="@1640000000 +0000")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True, env=env)
    assert rules.source_date_epoch(tmp_path)[0] == 1_650_000_000  # the committer's date, as %ct reads it
    # A tree unpacked inside another repository dates by its own files, not that repository's commit.
    inner = tmp_path / "unpacked"
    _tree(inner, 1_610_000_000)
    assert rules.source_date_epoch(inner) == (1_610_000_000, "the newest source file (no git checkout)")


def test_source_date_epoch_without_git_is_the_newest_source_file(tmp_path: Path, monkeypatch):
    """A `git archive` export dates every file by the commit: the newest build input stands in for it."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    _tree(tmp_path, 1_600_000_000)
    os.utime(tmp_path / "csrc" / "module.cpp", (1_620_000_000, 1_620_000_000))
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "newer.o").write_text("a build output is not a source")
    assert rules.source_date_epoch(tmp_path)[0] == 1_620_000_000


def test_differences_names_the_member_and_the_folder(tmp_path: Path):
    folder = tmp_path / "one"
    wheels = []
    for n, payload in enumerate([b"same", f"at {folder}/csrc/x.cpp".encode()]):
        wheel = tmp_path / f"w{n}" / "visdet_ops-0.1.0-cp310-abi3-linux_x86_64.whl"
        wheel.parent.mkdir()
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(zipfile.ZipInfo("visdet_ops/_C.abi3.so", (2026, 1, 1, 0, 0, 0)), payload)
        wheels.append(wheel)
    assert reproducible.differences(wheels[0], wheels[0], [folder]) == []
    (problem,) = reproducible.differences(*wheels, [folder])
    assert problem.startswith("visdet_ops/_C.abi3.so: contents differ") and str(folder) in problem
