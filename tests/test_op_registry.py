"""Every operator registered in torch.ops.visdet_ops has what the project promises for an op: a fake impl
(torch.compile), an opcheck of the call its module's example case makes, that example case calling it (the doctor, the
sanitizer sweep and tests/test_examples.py run those), a benchmark of its family (the `@benchmark`s of
benchmarks/op_benchmarks/<family>.py, which benchmarks/bench.py runs) and a docs section. A new op that misses one
fails here, by name.

An op's family is the module of visdet_ops/ops/ that registers its fake impl; its test file is
tests/ops/test_<module>.py, its docs section the `## <module>` section of docs/ops.md."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch
from torch._library.simple_registry import singleton

import visdet_ops
from visdet_ops import _loader
from visdet_ops.ops import EXAMPLES
from visdet_ops.ops._registration import EAGER_ENTRY_POINTS

from .conftest import composite_modules

ROOT = Path(__file__).resolve().parent.parent
OPS = _loader.op_names()
PUBLIC = [n for n in OPS if not n.split("::")[1].startswith("_")]
DOCS = (ROOT / "docs" / "ops.md").read_text()


def _load_bench():
    spec = importlib.util.spec_from_file_location("visdet_ops_bench", ROOT / "benchmarks" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


BENCH = _load_bench()
BENCHMARKS = BENCH.BENCHMARKS  # benchmarks/op_benchmarks/<family>.py's declarations


def _fake_module(qualname: str) -> str:
    """The module whose register_fake registered qualname's fake impl (the op's module)."""
    entry = singleton.find(qualname)
    # torch 2.4 names the holder abstract_impl (torch.library.impl_abstract's name), later releases fake_impl.
    kernel = (entry.fake_impl if hasattr(entry, "fake_impl") else entry.abstract_impl).kernel
    assert kernel is not None, f"{qualname} has no fake impl (torch.library.register_fake)"
    path = Path(kernel.source.rsplit(":", 1)[0])  # "<file>:<line>" of the register_fake call
    return f"visdet_ops.{path.parent.name}.{path.stem}"


def test_the_registry_is_not_empty():
    assert len(PUBLIC) >= 16 and all(n.startswith("visdet_ops::") for n in OPS)


@pytest.mark.parametrize("qualname", OPS)
def test_fake_impl(qualname):
    assert _fake_module(qualname).startswith("visdet_ops.ops.")


def test_opcheck_on_every_ops_example_call(device):
    """torch.library.opcheck (schema, autograd registration, fake impl, AOT dispatch) on every registered op,
    backward ops included, with the arguments its module's example case passes it (captured below autograd, as
    tests/memory_worker.py captures them). An op that no example case calls fails here by name."""
    from .memory_worker import capture

    calls = capture(device)
    missing = sorted(set(OPS) - set(calls))
    assert not missing, f"no example case calls {missing}, so nothing opchecks them"
    failures = []
    for qualname, (func, args, kwargs) in sorted(calls.items()):
        try:
            torch.library.opcheck(func, args, kwargs)
        except Exception as e:  # collected: every failing op is named at once
            failures.append(f"{qualname}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("qualname", PUBLIC)
def test_example_case(qualname):
    family = _fake_module(qualname).rsplit(".", 1)[1]
    assert family in EXAMPLES, f"visdet_ops.ops.{family} registers {qualname} but declares no @example case"
    name = qualname.split("::")[1]
    assert name in EXAMPLES[family].ops, f"the example case of visdet_ops.ops.{family} does not call {name}"


@pytest.mark.parametrize("qualname", PUBLIC)
def test_benchmark_entry(qualname):
    family = _fake_module(qualname).rsplit(".", 1)[1]
    covered = {b.family for b in BENCHMARKS if "bench" in b.tags}
    assert family in covered, f"benchmarks/op_benchmarks/{family}.py declares no @benchmark for bench.py ({qualname})"


def test_the_benchmark_list_is_the_op_families():
    assert BENCH.op_families() == sorted(EXAMPLES)
    assert BENCH.unbenchmarked_families() == []
    strays = sorted({b.family for b in BENCHMARKS} - set(EXAMPLES))
    assert not strays, f"benchmarks/op_benchmarks/ modules named after no op family: {strays}"


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda b: f"{b.family}.{b.run.__name__}")
def test_benchmark_names_ops_of_its_family(bench):
    """What a @benchmark says it times is a registered op of its family (catches a benchmark left behind when an op
    moves to another module)."""
    assert bench.ops, f"{bench.run.__qualname__} names no op"
    for op in bench.ops:
        assert f"visdet_ops::{op}" in OPS, f"{bench.run.__qualname__}: {op} is not a registered op"
        family = _fake_module(f"visdet_ops::{op}").rsplit(".", 1)[1]
        assert family == bench.family, f"{bench.run.__qualname__}: {op} belongs to {family}, not {bench.family}"
    for tag in bench.tags:
        report = ROOT / "benchmarks" / f"{tag}.py"
        assert report.is_file(), f"{bench.run.__qualname__}: tag {tag!r} names no report (benchmarks/{tag}.py)"
        assert tag == "bench" or f'"{tag}"' in report.read_text(), f"benchmarks/{tag}.py does not select {tag!r}"


def _docs_section(family: str) -> str:
    """The text of docs/ops.md's `## <family>` section (to the next `## `), or "" where there is none."""
    match = re.search(rf"^## {re.escape(family)}\b.*?(?=^## |\Z)", DOCS, re.M | re.S)
    return match.group(0) if match else ""


@pytest.mark.parametrize("family", sorted(EXAMPLES))
def test_docs_section_of_each_op_module(family):
    """Each op module has its section in docs/ops.md, which names every public name of the module."""
    section = _docs_section(family)
    assert section, f"docs/ops.md has no '## {family}' section"
    missing = [n for n in importlib.import_module(f"visdet_ops.ops.{family}").__all__ if f"`{n}" not in section]
    assert not missing, f"the '## {family}' section of docs/ops.md does not name {missing}"


@pytest.mark.parametrize("qualname", PUBLIC)
def test_docs_section(qualname):
    name = qualname.split("::")[1]
    family = _fake_module(qualname).rsplit(".", 1)[1]
    assert f"`{name}" in _docs_section(family), f"the '## {family}' section of docs/ops.md does not describe {name}"


def test_the_package_exports_what_the_op_modules_declare():
    modules = {_fake_module(q) for q in OPS}
    # and visdet_ops/composite/'s modules, which register no op (mmcv's names that are compositions)
    modules |= {f"visdet_ops.composite.{m}" for m in composite_modules()}
    names = {n for m in modules for n in importlib.import_module(m).__all__}
    assert names == set(visdet_ops.__all__) - {"BUILD_INFO"}
    assert all(callable(getattr(visdet_ops, n)) for n in names)


@pytest.mark.parametrize("qualname", OPS)
def test_autograd_formula_has_one_home(qualname):
    """An op with an autograd formula registered it through _registration.register_autograd (which also gives its
    public functions the cheap eager entry point and makes its private backward op refuse double backward); a
    private backward op refuses double backward; an op without a gradient has no formula at all."""
    import torch

    from visdet_ops.ops._registration import EAGER_ENTRY_POINTS

    name = qualname.split("::")[1]
    has_formula = torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Autograd")
    if name.startswith("_") and name.endswith("_backward"):
        assert has_formula, f"{qualname}: no autograd formula (double backward must be refused, not zeros)"
        assert name[1 : -len("_backward")] in EAGER_ENTRY_POINTS
    else:
        assert has_formula == (name in EAGER_ENTRY_POINTS), f"{qualname}: autograd not registered by register_autograd"


@functools.cache
def _example_calls_on_the_cpu() -> dict[str, tuple]:
    """qualname -> (op, args, kwargs): the call each op module's example case makes of it (tests/memory_worker.py)."""
    from .memory_worker import capture

    return capture(torch.device("cpu"))


def _first_differentiable(out) -> torch.Tensor:
    from torch.utils._pytree import tree_flatten

    return next(t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad)


@pytest.mark.parametrize("name", sorted(EAGER_ENTRY_POINTS))
def test_eager_entry_point_equals_the_registered_formula(name):
    """The same formula twice, for every op with an eager entry point: the entry point (what the op's public functions
    and modules call) and a direct torch.ops call (the registered formula) give the same output and gradients on the
    call the op's example case makes, and an autocast region takes the registered path."""
    op, args, kwargs = _example_calls_on_the_cpu()[f"visdet_ops::{name}"]
    # The entry point takes the schema's arguments positionally (as register_autocast's wrapper passes them).
    args = [
        args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(op._schema.arguments)
    ]
    # The first floating tensor asks for a gradient (the features, the boxes, the logits), as a training step's does.
    first = next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point())
    x = args[first].clone().requires_grad_()
    args[first] = x
    eager = _first_differentiable(EAGER_ENTRY_POINTS[name](*args))
    assert eager.grad_fn.name() == f"{name}_eagerBackward"
    (g_eager,) = torch.autograd.grad(eager.sum(), x)
    direct = _first_differentiable(op(*args))
    assert f"GeneratedBackwardFor_visdet_ops_{name}" in direct.grad_fn.name()
    (g_direct,) = torch.autograd.grad(direct.sum(), x)
    assert torch.equal(eager, direct) and torch.equal(g_eager, g_direct)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = _first_differentiable(EAGER_ENTRY_POINTS[name](*args))
    assert f"GeneratedBackwardFor_visdet_ops_{name}" in under.grad_fn.name()
    # Whichever tensor alone asks for a gradient, a module's parameter included, the entry point records its own node
    # (or refuses as the registered formula does: a focal loss's per-class weight).
    detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    for i, a in enumerate(detached):
        if not (isinstance(a, torch.Tensor) and a.is_floating_point()):
            continue
        one = [torch.nn.Parameter(a.clone()) if j == i else b for j, b in enumerate(detached)]
        try:
            out = EAGER_ENTRY_POINTS[name](*one)
        except RuntimeError as exc:
            with pytest.raises(RuntimeError, match=re.escape(str(exc))):
                op(*one)
            continue
        assert _first_differentiable(out).grad_fn.name() == f"{name}_eagerBackward", f"argument {i} as a parameter"


def _our_backward_nodes(out: torch.Tensor) -> tuple[set[str], set[str]]:
    """The ops whose backward nodes the graph of `out` holds: (through an eager entry point, through the registered
    formula)."""
    eager, registered, seen, stack = set(), set(), set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack += [n for n, _ in node.next_functions]
        node_name = node.name()
        if node_name.endswith("_eagerBackward") and node_name[: -len("_eagerBackward")] in EAGER_ENTRY_POINTS:
            eager.add(node_name[: -len("_eagerBackward")])
        elif node_name.startswith("GeneratedBackwardFor_visdet_ops_"):
            registered.add(node_name[len("GeneratedBackwardFor_visdet_ops_") :].removesuffix("Backward"))
    return eager, {n.removesuffix("_default") for n in registered}


def test_public_functions_and_modules_take_the_eager_entry_point():
    """Every public function and module, as each op's test file calls it in its AUTOCAST_CASES (a small model per
    public name, parameters included), reaches our ops through their eager entry points outside autocast and
    through the registered formulas inside it; every op with an eager entry point is reached so by some case."""
    from .conftest import op_test_module

    reached, wrong = set(), []
    for family in sorted(EXAMPLES):
        for case_name, make_case in getattr(op_test_module(family), "AUTOCAST_CASES", {}).items():
            case = make_case(torch.Generator().manual_seed(0))
            eager, registered = _our_backward_nodes(case(*case.inputs))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                eager_under, registered_under = _our_backward_nodes(case(*case.inputs))
            if registered:
                wrong.append(f"{family} {case_name}: the registered formula of {sorted(registered)} outside autocast")
            if eager_under or registered_under != eager:
                wrong.append(
                    f"{family} {case_name}: under autocast eager {sorted(eager_under)}, registered "
                    f"{sorted(registered_under)} (outside it eager {sorted(eager)})"
                )
            reached |= eager
    assert not wrong, "\n".join(wrong)
    missing = sorted(set(EAGER_ENTRY_POINTS) - reached)
    assert not missing, f"no AUTOCAST_CASES model reaches the eager entry point of {missing}"
