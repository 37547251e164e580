"""CUDA graphs (issue 25 item 4): every op whose output sizes do not depend on tensor values is captured in a CUDA
graph and replays what eager computes, forward and backward ops alike; the ops whose host reads device data (each
family's test file declares them, with why: CUDA_GRAPH_DATA_DEPENDENT) refuse capture with an error that names the op
and the reason (each public function that calls one: its CUDA_GRAPH_REFUSALS); a small detector head
(tests/test_autocast.py's ReduceOverheadHead) trains under torch.compile(mode="reduce-overhead"), whose CUDA graphs
hold our kernels.

The calls are the ones each op module's example case makes (tests/memory_worker.py's capture, float32): a new op
is captured without anyone adding it here. GPU only, but for the check that the declarations match the op modules."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest
import torch
from torch.utils._pytree import tree_flatten

from visdet_ops import _loader

from .conftest import declarations, op_modules, op_test_module, require_cuda

# registered op -> why its host reads device data: they raise (through the public functions) instead of being captured.
DATA_DEPENDENT = {
    op: why for declared in declarations("CUDA_GRAPH_DATA_DEPENDENT").values() for op, why in declared.items()
}
REFUSALS = [
    pytest.param(family, name, id=name)
    for family, declared in declarations("CUDA_GRAPH_REFUSALS").items()
    for name in declared
]


def _refusing_functions(family: str) -> set[str]:
    """The names visdet_ops/ops/<family>.py passes to refuse_graph_capture (the public functions that refuse)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(f"visdet_ops.ops.{family}")))
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "refuse_graph_capture"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def test_the_declarations_match_the_op_modules():
    """Each public function that refuses capture (refuse_graph_capture) has its CUDA_GRAPH_REFUSALS call in its
    family's test file and no other; a family with such functions declares the registered ops behind them, with why,
    in CUDA_GRAPH_DATA_DEPENDENT, and each is a registered op. On the CPU: what the GPU tests below rely on."""
    registered, wrong = set(_loader.op_names()), []
    refusals, data_dependent = declarations("CUDA_GRAPH_REFUSALS"), declarations("CUDA_GRAPH_DATA_DEPENDENT")
    for family in op_modules():
        refusing = _refusing_functions(family)
        if set(refusals[family]) != refusing:
            wrong.append(
                f"tests/ops/test_{family}.py: CUDA_GRAPH_REFUSALS {sorted(refusals[family])}, the op module "
                f"refuses capture in {sorted(refusing)}"
            )
        if bool(data_dependent[family]) != bool(refusing):
            wrong.append(f"tests/ops/test_{family}.py: CUDA_GRAPH_DATA_DEPENDENT {sorted(data_dependent[family])}")
        for op, why in data_dependent[family].items():
            if op not in registered or not (isinstance(why, str) and why):
                wrong.append(f"tests/ops/test_{family}.py: CUDA_GRAPH_DATA_DEPENDENT[{op!r}] = {why!r}")
    assert not wrong, "\n".join(wrong)


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def test_every_op_replays_in_a_cuda_graph():
    require_cuda()
    from .memory_worker import capture

    calls = capture(torch.device("cuda"))
    assert set(DATA_DEPENDENT) <= set(calls), "an op listed as data-dependent is no longer registered or called"
    failures = []
    for qualname, (func, args, kwargs) in sorted(calls.items()):
        if qualname in DATA_DEPENDENT:
            continue
        try:
            eager = _tensors(func(*args, **kwargs))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture stream (lazy inits, allocator)
                for _ in range(2):
                    func(*args, **kwargs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = func(*args, **kwargs)
            for t in _tensors(out):
                t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)  # a replay must rewrite them
            graph.replay()
            torch.cuda.synchronize()
            got = _tensors(out)
            assert len(got) == len(eager), f"{len(got)} outputs, eager {len(eager)}"
            for i, (g, e) in enumerate(zip(got, eager, strict=True)):
                assert g.shape == e.shape and g.dtype == e.dtype, f"output {i}: {g.shape} {g.dtype} vs {e.shape}"
                if e.is_floating_point():
                    # Ops that accumulate with atomics differ from eager in the last bits only.
                    scale = max(e.abs().max().item(), 1.0) if e.numel() else 1.0
                    torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6 * scale, equal_nan=True)
                else:
                    assert torch.equal(g, e), f"output {i} differs"
        except Exception as exc:  # collected: every failing op is named at once
            failures.append(f"{qualname}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("family, name", REFUSALS)
def test_data_dependent_ops_refuse_capture_clearly(family, name):
    require_cuda()
    call = op_test_module(family).CUDA_GRAPH_REFUSALS[name](torch.Generator().manual_seed(0))
    call()  # eager works
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=rf"{name} cannot be captured in a CUDA graph: "):
        with torch.cuda.graph(graph):
            call()
    call()  # and still works after the refused capture
    torch.cuda.synchronize()


def test_detector_head_trains_under_reduce_overhead():
    """tests/test_autocast.py's ReduceOverheadHead (a deformable conv -> RoI pooling -> a linear classifier -> a focal
    loss), compiled with mode='reduce-overhead' (CUDA graphs), three steps against eager from the same weights."""
    require_cuda()
    from .test_autocast import ReduceOverheadHead as Head

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    eager = Head().cuda()
    compiled_module = Head().cuda()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_module, mode="reduce-overhead")
    x = torch.randn(2, 8, 32, 32, generator=gen).cuda()
    rois = torch.tensor([[0, 4.0, 4, 60, 60], [1, 10, 20, 100, 90], [0, 0, 0, 127, 127]]).cuda()
    labels = torch.tensor([0, 5, 3]).cuda()
    for step in range(3):
        want = eager(x, rois, labels)
        want.backward()
        got = compiled(x, rois, labels)
        got.backward()
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-4, atol=1e-6, msg=f"step {step}: loss")
        for (name, p), q in zip(eager.named_parameters(), compiled_module.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=f"step {step}: grad of {name}")
            p.grad, q.grad = None, None
