"""torch.compile(fullgraph=True) and torch.use_deterministic_algorithms(True) on every public op and module, written
once: each runs the small model per public name that the op's test file declares (`AUTOCAST_CASES`, over
tests/autocast_harness.py), in float32.

- compiled whole (no graph break, backend aot_eager: the registered autograd formula and the fake impls), the
  output and every parameter's gradient equal the eager run's (the eager entry point, a plain autograd.Function);
- under deterministic algorithms, a backward either raises torch's alert (a CUDA kernel that accumulates with
  atomics; under warn_only it warns) or gives bitwise-equal gradients twice; on the CPU none alerts.

What is particular to a family (a stress shape for a deterministic CUDA backward, the NMS family's data-dependent
output under compile) stays in its test file."""

from __future__ import annotations

import pytest
import torch

from . import autocast_harness as amp
from .conftest import op_modules, op_test_module

CASES = [
    pytest.param(family, name, id=name)
    for family in op_modules()
    for name in getattr(op_test_module(family), "AUTOCAST_CASES", {})
]
ALERT = "does not have a deterministic implementation"


def _make(family: str, name: str, rng: torch.Generator, device: torch.device) -> amp.Case:
    return op_test_module(family).AUTOCAST_CASES[name](rng).to(device)


def _forward_backward(model, case: amp.Case, device: torch.device, seed: torch.Tensor):
    out = model(*[t.to(device) for t in case.inputs])
    params = [p for p in case.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out.float() * seed.to(device)).sum(), params, allow_unused=True)
    return out.detach(), grads


@pytest.mark.parametrize("family, name", CASES)
def test_compiles_whole_and_matches_eager(rng, family, name):
    case = _make(family, name, rng, torch.device("cpu"))
    with torch.no_grad():
        seed = torch.randn(case(*case.inputs).shape, generator=rng)
    torch._dynamo.reset()
    got, got_grads = _forward_backward(torch.compile(case, fullgraph=True, backend="aot_eager"), case, "cpu", seed)
    want, want_grads = _forward_backward(case, case, "cpu", seed)
    torch.testing.assert_close(got, want)
    assert any(g is not None for g in want_grads), f"{name}: no parameter gets a gradient"
    for g, w in zip(got_grads, want_grads, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("device_name", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("family, name", CASES)
def test_backward_is_deterministic_or_alerts(rng, monkeypatch, device_name, family, name):
    device = amp.device_for(device_name)
    # The cases' convs and linears are cuBLAS calls, which deterministic mode accepts only with this setting.
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    case = _make(family, name, rng, device)
    with torch.no_grad():
        seed = torch.randn(case(*[t.to(device) for t in case.inputs]).shape, generator=rng)
    torch.use_deterministic_algorithms(True)
    try:
        try:
            first = _forward_backward(case, case, device, seed)
        except RuntimeError as exc:
            assert device.type == "cuda" and ALERT in str(exc), f"{name} on {device}: {exc}"
            torch.use_deterministic_algorithms(True, warn_only=True)
            with pytest.warns(UserWarning, match=ALERT):
                _forward_backward(case, case, device, seed)
            return
        second = _forward_backward(case, case, device, seed)
    finally:
        torch.use_deterministic_algorithms(False)
    assert torch.equal(first[0], second[0]), f"{name} on {device}: outputs differ between runs"
    for g, w in zip(first[1], second[1], strict=True):
        assert (g is None and w is None) or torch.equal(g, w), f"{name} on {device}: gradients differ between runs"
