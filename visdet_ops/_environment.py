"""Every VISDET_OPS_* environment variable, in one documented list.

`visdet-ops doctor` prints the ones set; docs/environment.md is generated from this list
(`python -m visdet_ops._environment > docs/environment.md`), and a test fails when the source tree reads a
VISDET_OPS_* variable that is not here. Standard library only.
"""

from __future__ import annotations

import os
import sys

# name -> (who reads it, what it does)
VARIABLES: dict[str, tuple[str, str]] = {
    "VISDET_OPS_SYNC_CHECKS": (
        "run time",
        "1: every host-side check of tensor values on CUDA (RoI coordinates and batch indices, class targets, "
        "MSDA level tables), each a device-to-host wait; a debugging switch",
    ),
    "VISDET_OPS_SYNC_ROI_CHECKS": (
        "run time",
        "1: CUDA RoI ops check the RoI values on the host and raise, instead of NaN output for a bad RoI",
    ),
    "VISDET_OPS_SYNC_LEVEL_CHECKS": (
        "run time",
        "1: CUDA multi_scale_deformable_attn checks level tables that live on the GPU on the host and raises, "
        "instead of NaN output for a level outside value's keys",
    ),
    "VISDET_OPS_SYNC_TARGET_CHECKS": (
        "run time",
        "1: CUDA focal losses check the targets on the host and raise, instead of NaN rows for a bad target",
    ),
    "VISDET_OPS_INDEX_URL": (
        "run time",
        "the wheel index named in the install lines of the import error and the doctor (a mirror)",
    ),
    "VISDET_OPS_CUDA": (
        "build",
        "1: build the CUDA kernels, a missing nvcc is an error; 0: CPU kernels only; unset: CUDA when torch "
        "is a CUDA build and nvcc is found",
    ),
    "VISDET_OPS_STABLE_ABI": (
        "build",
        "1: build against the LibTorch stable ABI (one wheel for every torch >= the stable floor of a CUDA major; "
        "docs/stable-abi.md); 0 or unset: the "
        "per-torch-minor build",
    ),
    "VISDET_OPS_TARGET_TORCH": (
        "build",
        "a cross build (docs/aarch64.md): the torch package folder of the target machine's torch, whose headers and "
        "libraries setup.py builds against (set by nox -s build-<row> -- --platform aarch64)",
    ),
    "VISDET_OPS_FLAVOUR": ("release", "the matrix row a cibuildwheel build is for (set by ci.release)"),
    "VISDET_OPS_TORCH": ("release", "the torch release a cibuildwheel build is for (set by ci.release)"),
    "VISDET_OPS_TORCH_PIP_ARGS": (
        "release",
        "pip arguments (a JSON list) installing the variant's torch in cibuildwheel's hooks (set by ci.release)",
    ),
    "VISDET_OPS_REQUIRE_CUDA": ("tests", "1: CUDA test cases fail instead of skipping when no GPU is usable"),
    "VISDET_OPS_REQUIRE_NVCC": ("tests", "1: compiling the CUDA sources is not skipped when nvcc is missing"),
    "VISDET_OPS_REQUIRE_CROSS": (
        "tests",
        "1: tests/test_aarch64.py's cross-compile test fails instead of skipping without the aarch64 g++ or nvcc",
    ),
    "VISDET_OPS_TEST_CUDA_ARCH": (
        "tests",
        "the arch tests/test_cuda_sources.py compiles for (default: the newest SASS arch of the matrix row)",
    ),
    "VISDET_OPS_TEST_SEED": ("tests", "replays the random seed a failing test printed"),
    "VISDET_OPS_SCRATCH_SUITE": (
        "tests",
        "installed: ci/scratch.py (the release's test-command) runs the installed-package tests, not the whole suite",
    ),
    "VISDET_OPS_FUZZ_EXAMPLES": (
        "tests",
        "tests/test_fuzz.py: hypothesis examples per op family (default 500, the fixed CI budget; 2000+: a long run)",
    ),
    "VISDET_OPS_FUZZ_SEED": (
        "tests",
        "tests/test_fuzz.py: the hypothesis seed (default 0: the same cases every run; `random`: a fresh one, printed)",
    ),
    "VISDET_OPS_MEMORY_CALLS": (
        "tests",
        "tests/test_memory.py: calls per op and measuring window, at most (default 20000; more for a soak run)",
    ),
    "VISDET_OPS_MEMORY_SECONDS": (
        "tests",
        "tests/test_memory.py: seconds per op and window, about (default 0.5; at least 500 calls whatever it says)",
    ),
}


def set_variables() -> dict[str, str]:
    """The VISDET_OPS_* variables set in this environment (unknown ones too, so that a typo shows)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("VISDET_OPS_")}


def markdown() -> str:
    lines = [
        "# Environment variables",
        "",
        "Generated from `visdet_ops/_environment.py` by `python -m visdet_ops._environment > docs/environment.md`",
        "(a test fails when this file is stale). `visdet-ops doctor` prints the ones set.",
        "",
        "| variable | read by | effect |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {scope} | {text} |" for name, (scope, text) in VARIABLES.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
