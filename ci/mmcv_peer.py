"""mmcv's own compiled kernels as a benchmark peer, where mmcv ships no wheel to install.

  python -m ci.mmcv_peer --out DIR [--sdist mmcv-2.2.0.tar.gz] [--cpu-only]

Builds the importable module `mmcv_rotated_ext` into DIR from mmcv 2.2.0's sdist (the release tests/mmcv_snapshot.py
describes), compiling mmcv's own sources unchanged: for each op of `OPS`, mmcv's device-dispatch file
(`mmcv/ops/csrc/pytorch/<op>.cpp`), its CPU kernels (`pytorch/cpu/<op>.cpp`) and, with CUDA, its CUDA kernels
(`pytorch/cuda/<op>_cuda.cu`). Two small files are written here: the CUDA registrations, copied from mmcv's
`pytorch/cuda/cudabind.cpp` (which holds every op's, so it cannot be compiled alone), and the Python bindings, the
`m.def` lines of mmcv's `pytorch/pybind.cpp` for these ops. So `mmcv_rotated_ext.<name>` is mmcv's `ext_module.<name>`:
same names, argument order and keywords, and the benchmark modules time mmcv's Python wrappers around it.

The GPU machine has no network: fetch the sdist here (`--fetch-only`, into the nox cache) and carry it there.
Then `PYTHONPATH=DIR` makes the module importable by benchmarks/bench.py. Standard library + torch (+ ninja).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SDIST_NAME = "mmcv-2.2.0.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/e9/a2/57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/"
    + SDIST_NAME
)
SDIST_SHA256 = "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9"
DEFAULT_SDIST = ROOT / ".nox" / "_cache" / "downloads" / SDIST_NAME
MODULE = "mmcv_rotated_ext"

# mmcv's source stem -> the ext_module functions it defines (pybind.cpp's names) and the *_impl functions whose
# CUDA registration lives in cudabind.cpp (nms_rotated calls its CUDA function directly: no registration).
OPS = {
    "box_iou_rotated": (("box_iou_rotated",), ("box_iou_rotated_impl",)),
    "nms_rotated": (("nms_rotated",), ()),
    "roi_align_rotated": (
        ("roi_align_rotated_forward", "roi_align_rotated_backward"),
        ("roi_align_rotated_forward_impl", "roi_align_rotated_backward_impl"),
    ),
}


def fetch(dest: Path = DEFAULT_SDIST) -> Path:
    """The sdist at dest, downloaded from PyPI if absent; its sha256 is checked either way."""
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".part")
        with urllib.request.urlopen(SDIST_URL, timeout=120) as response, tmp.open("wb") as fh:
            shutil.copyfileobj(response, fh)
        tmp.replace(dest)
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{dest}: sha256 {digest}, expected {SDIST_SHA256} (mmcv 2.2.0's sdist on PyPI)")
    return dest


def _blocks(text: str, pattern: str) -> list[str]:
    """The statements of text (mmcv's C++ at file scope) that start with a match of pattern, each to its end: a `;` at
    brace depth 0, or the `}` that closes a function body."""
    out = []
    for match in re.finditer(pattern, text):
        depth, i = 0, match.start()
        while i < len(text):
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    out.append(text[match.start() : i + 1])
                    break
            elif ch == ";" and depth == 0:
                out.append(text[match.start() : i + 1])
                break
            i += 1
    return out


def cuda_registrations(cudabind: str, ops: dict = OPS) -> str:
    """The part of mmcv's cudabind.cpp that the CUDA registrations of ops need: the launcher declarations, the
    `<op>_cuda` wrappers and declarations, the `_impl` declarations and the REGISTER_DEVICE_IMPL lines."""
    parts = []
    for stem, (_, impls) in ops.items():
        if not impls:
            continue
        camel = "".join(w.capitalize() for w in stem.split("_")).replace("Roi", "ROI")
        parts += _blocks(cudabind, rf"(?m)^void {camel}(Forward|Backward)?CUDAKernelLauncher\(")
        parts += _blocks(cudabind, rf"(?m)^void {stem}(_forward|_backward)?_cuda\(")
        for impl in impls:
            parts += _blocks(cudabind, rf"(?m)^void {impl}\(")
            parts += _blocks(cudabind, rf"(?m)^REGISTER_DEVICE_IMPL\({impl},")
    missing = [
        impl for _, (_, impls) in ops.items() for impl in impls if f"REGISTER_DEVICE_IMPL({impl}," not in "".join(parts)
    ]
    if missing:
        raise SystemExit(f"cudabind.cpp: no CUDA registration found for {missing}")
    return '#include "pytorch_cpp_helper.hpp"\n#include "pytorch_device_registry.hpp"\n\n' + "\n\n".join(parts) + "\n"


def bindings(pybind: str, ops: dict = OPS) -> str:
    """mmcv's pybind.cpp reduced to ops: their declarations and their m.def lines, under this module's name."""
    names = [name for functions, _ in ops.values() for name in functions]
    decls, defs = [], []
    for name in names:
        found = [b for b in _blocks(pybind, rf"(?m)^\w[\w:<> ]* {name}\(") if not b.rstrip().endswith("}")]
        if not found:
            raise SystemExit(f"pybind.cpp: no declaration of {name}")
        decls.append(found[0])
        calls = _blocks(pybind, rf'm\.def\("{name}"')
        if not calls:
            raise SystemExit(f"pybind.cpp: no m.def of {name}")
        defs.append("  " + calls[0])
    return (
        '#include <torch/extension.h>\n\n#include "pytorch_cpp_helper.hpp"\n\n'
        + "\n\n".join(decls)
        + f"\n\nPYBIND11_MODULE({MODULE}, m) {{\n"
        + "\n".join(defs)
        + "\n}\n"
    )


def build(sdist: Path, out: Path, cuda: bool, verbose: bool = False) -> Path:
    """Extract mmcv's sources of OPS from sdist into out/src, write the two small files, build out/MODULE*.so."""
    import torch.utils.cpp_extension as ext

    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    prefix = sdist.name.removesuffix(".tar.gz") + "/mmcv/ops/csrc/"
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                rel = member.name[len(prefix) :]
                if rel.startswith(("common/", "pytorch/")) and "/mlu" not in rel and "/npu" not in rel:
                    target = src / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
    pytorch = src / "pytorch"
    # mmcv's dispatch file and CPU kernels share a stem (pytorch/x.cpp, pytorch/cpu/x.cpp): one object name for
    # ninja; compiled from copies named by their folder.
    sources = []
    for folder, pattern in (("", "{}.cpp"), ("cpu", "{}.cpp"), ("cuda", "{}_cuda.cu"))[: 3 if cuda else 2]:
        for stem in OPS:
            original = pytorch / folder / pattern.format(stem)
            sources.append(src / f"{folder or 'dispatch'}_{original.name}")
            shutil.copy2(original, sources[-1])
    if cuda:
        (src / "cudabind_subset.cpp").write_text(cuda_registrations((pytorch / "cuda" / "cudabind.cpp").read_text()))
        sources.append(src / "cudabind_subset.cpp")
    (src / "pybind_subset.cpp").write_text(bindings((pytorch / "pybind.cpp").read_text()))
    sources.append(src / "pybind_subset.cpp")
    defines = ["-DMMCV_WITH_CUDA"] if cuda else []
    includes = [str(src / "common"), str(src / "common" / "cuda")]
    build_dir = out / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    # torch's FileBaton: a build killed midway leaves its lock, and the next load() would wait on it for ever.
    (build_dir / "lock").unlink(missing_ok=True)
    ext.load(
        name=MODULE,
        sources=[str(s) for s in sources],
        extra_include_paths=includes,
        extra_cflags=["-O3", *defines],
        extra_cuda_cflags=["-O3", *defines],
        build_directory=str(build_dir),
        with_cuda=cuda,
        verbose=verbose,
    )
    built = sorted(build_dir.glob(f"{MODULE}*.so"))
    if not built:
        raise SystemExit(f"no {MODULE}*.so in {build_dir}")
    for so in built:
        shutil.copy2(so, out / so.name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the folder to build the module into (then PYTHONPATH=it)")
    parser.add_argument("--sdist", type=Path, default=DEFAULT_SDIST, help=f"mmcv's sdist (default {DEFAULT_SDIST})")
    parser.add_argument("--fetch-only", action="store_true", help="download and check the sdist, build nothing")
    parser.add_argument("--cpu-only", action="store_true", help="without mmcv's CUDA kernels")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    sdist = fetch(args.sdist)
    if args.fetch_only:
        print(sdist)
        return 0
    if args.out is None:
        parser.error("--out is required to build")
    import torch

    cuda = not args.cpu_only and torch.cuda.is_available() or bool(os.environ.get("MMCV_PEER_FORCE_CUDA"))
    out = build(sdist, args.out.resolve(), cuda=cuda, verbose=args.verbose)
    print(f"{MODULE} ({'CPU + CUDA' if cuda else 'CPU'} kernels of mmcv 2.2.0) in {out}: PYTHONPATH={out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
