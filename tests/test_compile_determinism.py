"""torch.compile(fullgraph=True) and torch.use_deterministic_algorithms(True) on every public op and module, written
once: each runs the small model per public name that the op's test file declares (`AUTOCAST_CASES`, over
tests/autocast_harness.py), in float32.

- compiled whole (fullgraph: no graph break; dynamo traces through the fake impls, and the graph calls the ops'
  registered autograd formula; backend eager, for CI time: opcheck's aot_dispatch tests cover AOT autograd; a
  family's cases as one model, one compile per family), the outputs and every parameter's gradient equal the eager run's
  (the eager entry point, a plain autograd.Function);
- under deterministic algorithms on CUDA, a backward either raises torch's alert (a kernel that accumulates with
  atomics; under warn_only it warns) or gives bitwise-equal gradients twice. (The CPU backwards take no atomics;
  the CPU determinism tests of the families whose CPU kernels split work across threads stay in their files.)

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


def _forward_backward(model, case: amp.Case, device, seed: torch.Tensor):
    out = model(*[t.to(device) for t in case.inputs])
    params = [p for p in case.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out.float() * seed.to(device)).sum(), params, allow_unused=True)
    return out.detach(), grads


class _Together(torch.nn.Module):
    """A family's cases as one model (one compile per family: its fixed cost, not the cases, is what CI pays)."""

    def __init__(self, cases: list[amp.Case]):
        super().__init__()
        self.cases = torch.nn.ModuleList(cases)
        self.inputs = [t for case in cases for t in case.inputs]

    def forward(self, *inputs):
        outs, i = [], 0
        for case in self.cases:
            outs.append(case(*inputs[i : i + len(case.inputs)]))
            i += len(case.inputs)
        return tuple(outs)


FAMILIES = sorted({family for family, _ in (p.values for p in CASES)})


@pytest.mark.parametrize("family", FAMILIES)
def test_compiles_whole_and_matches_eager(rng, family):
    """Every public name of the family, compiled as one graph, against eager."""
    names = list(op_test_module(family).AUTOCAST_CASES)
    model = _Together([_make(family, name, rng, torch.device("cpu")) for name in names])
    with torch.no_grad():
        seeds = [torch.randn(out.shape, generator=rng) for out in model(*model.inputs)]
    params = [p for p in model.parameters() if p.requires_grad]

    def forward_backward(fn):
        outs = fn(*model.inputs)
        loss = sum((out.float() * seed).sum() for out, seed in zip(outs, seeds, strict=True))
        return [out.detach() for out in outs], torch.autograd.grad(loss, params, allow_unused=True)

    torch._dynamo.reset()
    got, got_grads = forward_backward(torch.compile(model, fullgraph=True, backend="eager"))
    want, want_grads = forward_backward(model)
    for name, g, w in zip(names, got, want, strict=True):
        torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{name}: {m}")
    assert any(w is not None for w in want_grads), f"{family}: no parameter gets a gradient"
    for g, w in zip(got_grads, want_grads, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("device_name", [pytest.param("cuda", marks=pytest.mark.cuda)])
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
