"""Shared fixtures: devices and dtypes.

CUDA cases are skipped only where no GPU is visible; with
VISDET_OPS_REQUIRE_CUDA=1 (the GPU check sets it) a missing GPU or a
CPU-only build is a failure, so a GPU run can never pass by skipping."""

from __future__ import annotations

import os

import pytest
import torch

REQUIRE_CUDA = os.environ.get("VISDET_OPS_REQUIRE_CUDA") == "1"


def _cuda_param():
    return pytest.param("cuda", marks=pytest.mark.cuda, id="cuda")


DEVICES = ["cpu", _cuda_param()]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    if request.param == "cuda":
        require_cuda()
    return torch.device(request.param)


def require_cuda() -> None:
    import visdet_ops

    if not torch.cuda.is_available():
        if REQUIRE_CUDA:
            pytest.fail("VISDET_OPS_REQUIRE_CUDA=1 but torch.cuda.is_available() is False")
        pytest.skip("no CUDA device")
    if not visdet_ops.BUILD_INFO["WITH_CUDA"]:
        pytest.fail("a GPU is visible but this visdet-ops build has no CUDA kernels")


@pytest.fixture(params=[torch.float32, torch.float64], ids=["f32", "f64"])
def dtype(request) -> torch.dtype:
    return request.param


@pytest.fixture
def rng() -> torch.Generator:
    """Fresh random inputs every run; the seed is printed on failure and
    VISDET_OPS_TEST_SEED=<seed> replays it."""
    replay = os.environ.get("VISDET_OPS_TEST_SEED")
    seed = int(replay) if replay else int.from_bytes(os.urandom(4), "little")
    print(f"random seed: {seed}")
    return torch.Generator().manual_seed(seed)


def torchvision_or_skip():
    try:
        import torchvision  # noqa: F401
        from torchvision import ops  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken torchvision is "absent"
        pytest.skip(f"torchvision is not importable here: {exc}")
    return ops
