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


def assert_uniform_init(t: torch.Tensor, bound: float, name: str = "weight") -> None:
    """`t` drawn from uniform(-bound, bound): nothing outside it and, for a tensor
    of a few thousand values, the extremes near it (0.95^n odds of a false
    failure) and the standard deviation that of the uniform law (bound / sqrt(3)).
    A bound 2.45x off (Kaiming vs 1/sqrt(fan_in)) fails every one of these."""
    assert t.numel() >= 2000, f"{name}: too few values ({t.numel()}) to pin an init"
    top = t.detach().abs().max().item()
    # float32 draws may round up to float32(bound), just above the float64 bound.
    assert top <= bound * (1 + 2**-20), f"{name}: max |w| {top} is outside the bound {bound}"
    assert top >= 0.95 * bound, f"{name}: max |w| {top} is far inside the bound {bound}"
    std = t.detach().double().std().item()
    want = bound / 3**0.5
    assert abs(std - want) < 0.1 * want, f"{name}: std {std}, uniform(+-{bound}) has {want}"


def assert_normal_init(t: torch.Tensor, std: float, name: str = "weight") -> None:
    """`t` drawn from normal(0, std) (a few thousand values: sample std within 10%)."""
    assert t.numel() >= 2000, f"{name}: too few values ({t.numel()}) to pin an init"
    got = t.detach().double().std().item()
    assert abs(got - std) < 0.1 * std, f"{name}: std {got}, expected {std}"
    assert abs(t.detach().double().mean().item()) < 0.1 * std, f"{name}: mean is not 0"
    assert t.detach().abs().max().item() > 2 * std, f"{name}: no tail, not a normal law"


def assert_zero(t: torch.Tensor, name: str = "tensor") -> None:
    assert torch.equal(t.detach(), torch.zeros_like(t)), f"{name} is not zero-initialised"


def op_modules() -> list[str]:
    """The op modules of visdet_ops/ops/ (those not starting with `_`): the families the cross-op tests iterate."""
    import pkgutil

    from visdet_ops import ops

    return sorted(m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_"))


def composite_modules() -> list[str]:
    """The modules of visdet_ops/composite/ (those not starting with `_`): mmcv's names that are compositions,
    exported as the op modules are but registering no op (visdet_ops/composite/__init__.py)."""
    import pkgutil

    from visdet_ops import composite

    return sorted(m.name for m in pkgutil.iter_modules(composite.__path__) if not m.name.startswith("_"))


def op_test_module(family: str):
    """tests/ops/test_<family>.py, imported as pytest names it (tests.ops.test_<family>): the cross-op tests collect
    a family's blocks from it by name (INTEGER_EDGE_ROWS, AUTOCAST_CASES, FUZZ, ONNX_CASES, ...)."""
    import importlib

    return importlib.import_module(f"{__package__}.ops.test_{family}")


def declarations(name: str, families: list[str] | None = None) -> dict[str, dict]:
    """family -> its test file's declaration `name` (a dict; empty where the file has none), for every op module or
    the given `families` (tests/ops/test_<family>.py each)."""
    return {family: getattr(op_test_module(family), name, {}) for family in families or op_modules()}


@pytest.fixture(scope="session")
def onnx_table():
    """visdet_ops.onnx.custom_translation_table, or a skip where torch is too old or onnx, onnxscript or
    onnxruntime are missing (tests/onnx_harness.py)."""
    from .onnx_harness import table

    return table()
