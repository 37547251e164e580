"""visdet_ops against mmcv.ops' public names and signatures (mmcv 2.2.0's: tests/mmcv_snapshot.py, the one
snapshot). What visdet_ops implements is derived from its exports; docs/migration.md's names table is generated from
both (`python -m tests.mmcv_snapshot --write`) and checked here."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import visdet_ops

from .conftest import composite_modules, declarations, op_modules
from .mmcv_snapshot import (
    INHERITED_CONSTRUCTORS,
    MMCV_OPS_ALL,
    MMCV_SIGNATURES,
    MMCV_SUBMODULE_NAMES,
    MMCV_SUBMODULES,
    implemented,
    migration_names_block,
)

# The names of mmcv 2.2.0's mmcv.ops.__all__ that visdet_ops exports (its functions, its modules).
IMPLEMENTED_FUNCTIONS, IMPLEMENTED_MODULES = implemented()
IMPLEMENTED = IMPLEMENTED_FUNCTIONS + IMPLEMENTED_MODULES
ROOT = Path(__file__).resolve().parent.parent


def _declared(name: str) -> dict:
    """The declaration `name` of every op and composite module's test file (tests/ops/test_<module>.py), merged."""
    found: dict = {}
    for module, declared in declarations(name, [*op_modules(), *composite_modules()]).items():
        twice = sorted(set(found) & set(declared))
        assert not twice, f"{name}: {twice} declared twice (again in tests/ops/test_{module}.py)"
        found.update(declared)
    return found


# Where visdet_ops' default is written differently from mmcv's on purpose: (name, parameter) -> (ours, mmcv's), each
# test file's MMCV_SAME_MEANING_DEFAULTS.
SAME_MEANING_DEFAULTS = _declared("MMCV_SAME_MEANING_DEFAULTS")


def _resolve(qualname: str):
    obj = visdet_ops
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _positional(obj, qualname: str) -> list[inspect.Parameter]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    if inspect.isclass(obj) or qualname.endswith(".forward"):
        params = params[1:]  # self
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in params if p.kind in kinds]


def test_lists_are_consistent_with_mmcv_and_the_package():
    assert len(set(MMCV_OPS_ALL)) == len(MMCV_OPS_ALL) == 124
    assert IMPLEMENTED, "visdet_ops exports none of mmcv's names"
    # Every implemented name (and every name mmcv exports from a submodule only) is in the snapshot's submodule of
    # mmcv that holds it, and the package provides exactly the module paths that hold an implemented name.
    held = {name for names in MMCV_SUBMODULES.values() for name in names}
    missing = sorted(set(IMPLEMENTED) - held)
    assert not missing, f"tests/mmcv_snapshot.py, MMCV_SUBMODULES: no mmcv submodule holds {missing}"
    ours = set(IMPLEMENTED) | set(MMCV_SUBMODULE_NAMES)
    wanted = {path for path, names in MMCV_SUBMODULES.items() if set(names) & ours}
    provided = set(visdet_ops.MMCV_MODULE_PATHS)
    assert provided == wanted, f"mmcv module paths (visdet_ops/<path>.py) missing or not mmcv's: {wanted ^ provided}"


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_every_implemented_mmcv_name_imports(name):
    module = __import__("visdet_ops", fromlist=[name])
    obj = getattr(module, name)
    assert name in visdet_ops.__all__
    if name in IMPLEMENTED_MODULES:
        assert inspect.isclass(obj) and issubclass(obj, torch.nn.Module), name
    else:
        assert callable(obj) and not inspect.isclass(obj), name


@pytest.mark.parametrize("name", sorted(MMCV_SUBMODULE_NAMES))
def test_mmcv_submodule_names_import_from_the_top(name):
    assert callable(getattr(visdet_ops, name)) and name in visdet_ops.__all__


@pytest.mark.parametrize("path", visdet_ops.MMCV_MODULE_PATHS)
def test_mmcv_module_paths_hold_mmcvs_names(path):
    module = importlib.import_module(f"visdet_ops.{path}")
    want = sorted(set(MMCV_SUBMODULES.get(path, ())) & (set(IMPLEMENTED) | set(MMCV_SUBMODULE_NAMES)))
    # mmcv's names, and any extra is one of visdet_ops' own (a registered op's function, say)
    assert want and set(want) <= set(module.__all__) <= set(visdet_ops.__all__)
    for name in module.__all__:
        assert getattr(module, name) is getattr(visdet_ops, name), f"visdet_ops.{path}.{name}"
    # Where a function has the submodule's name, the package attribute stays the function.
    if path in visdet_ops.__all__:
        assert callable(getattr(visdet_ops, path)) and not inspect.ismodule(getattr(visdet_ops, path))


def test_mmcv_module_paths_in_a_fresh_process():
    """Imported first thing, in mmcv's spellings (`from visdet_ops.<path> import <name>`, `import visdet_ops.<path>`,
    `import visdet_ops.<path> as m`), every module path, those named like a function first: the submodule imports
    work and leave the functions in place (the package attribute, and what `import ... as` binds)."""
    paths = sorted(visdet_ops.MMCV_MODULE_PATHS, key=lambda path: (path not in visdet_ops.__all__, path))
    shadowed = [path for path in paths if path in visdet_ops.__all__]
    assert shadowed, "no module path is named like a function: nothing to check the import order of"
    lines, names = ["import inspect, sys"], []
    for path in paths:
        exported = importlib.import_module(f"visdet_ops.{path}").__all__
        lines.append(
            f"from visdet_ops.{path} import " + ", ".join(f"{n} as _n{len(names) + j}" for j, n in enumerate(exported))
        )
        names += exported
    for i, path in enumerate(paths):
        lines += [f"import visdet_ops.{path}", f"import visdet_ops.{path} as _m{i}"]
    lines.append("import visdet_ops")
    for i, path in enumerate(paths):
        if path in shadowed:
            lines.append(f"assert inspect.isfunction(visdet_ops.{path}) and _m{i} is visdet_ops.{path}, {path!r}")
        else:
            lines.append(f"assert _m{i} is sys.modules['visdet_ops.{path}'], {path!r}")
    lines += [f"assert _n{j} is visdet_ops.{n}, {n!r}" for j, n in enumerate(names)]
    done = subprocess.run([sys.executable, "-c", "\n".join(lines)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_implemented_name_has_its_mmcv_signature_listed():
    """A new public name cannot skip the signature check: each implemented function, each module's constructor and
    forward has a list in MMCV_SIGNATURES (or, for a *Pack constructor, is its parent's, and passes through)."""
    need = set(IMPLEMENTED) | {f"{name}.forward" for name in IMPLEMENTED_MODULES}
    missing = sorted(need - set(MMCV_SIGNATURES) - set(INHERITED_CONSTRUCTORS))
    assert not missing, f"MMCV_SIGNATURES has no list for {missing}: add mmcv's positional parameters"
    for name, parent in INHERITED_CONSTRUCTORS.items():
        cls, base = getattr(visdet_ops, name), getattr(visdet_ops, parent)
        assert issubclass(cls, base), f"{name} must subclass {parent}"
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD], (
            f"{name}.__init__ must pass (*args, **kwargs) to {parent}, as mmcv's does"
        )


@pytest.mark.parametrize("qualname", sorted(MMCV_SIGNATURES))
def test_positional_parameters_and_defaults_match_mmcv(qualname):
    """mmcv's positional parameters, in mmcv's order and with mmcv's defaults,
    lead ours (visdet_ops may add parameters after them, or keyword-only ones)."""
    want = MMCV_SIGNATURES[qualname]
    got = _positional(_resolve(qualname), qualname)
    assert [p.name for p in got[: len(want)]] == [name for name, _ in want], qualname
    for param, (name, default_src) in zip(got, want, strict=False):
        if default_src is None:
            continue  # mmcv requires it; a default here only adds a way to call
        assert param.default is not inspect.Parameter.empty, f"{qualname}: {name} has no default (mmcv: {default_src})"
        mmcv_default = ast.literal_eval(default_src)
        special = SAME_MEANING_DEFAULTS.get((qualname, name))
        if special is not None:
            assert (param.default, mmcv_default) == special, qualname
            continue
        assert param.default == mmcv_default and type(param.default) is type(mmcv_default), (
            f"{qualname}: {name} defaults to {param.default!r}, mmcv to {default_src}"
        )


def test_same_meaning_defaults_are_mmcv_parameters():
    """Each MMCV_SAME_MEANING_DEFAULTS entry names a parameter of MMCV_SIGNATURES with mmcv's default as it is there,
    and our default as the signature has it (no entry outlives the difference it explains)."""
    for (qualname, name), (ours, mmcv) in SAME_MEANING_DEFAULTS.items():
        defaults = dict(MMCV_SIGNATURES[qualname])
        assert name in defaults and ast.literal_eval(defaults[name]) == mmcv, (qualname, name)
        param = {p.name: p for p in _positional(_resolve(qualname), qualname)}[name]
        assert param.default == ours and param.default != mmcv, (qualname, name)


def test_migration_page_names_table_is_generated():
    """docs/migration.md's names table (and its counts) is what tests/mmcv_snapshot.py generates from mmcv's names
    and the package's exports."""
    page = (ROOT / "docs" / "migration.md").read_text()
    assert migration_names_block() in page, "docs/migration.md is stale: run python -m tests.mmcv_snapshot --write"


def test_migration_page_names_the_module_paths():
    """The "Module paths" paragraph of docs/migration.md names every module path the package provides."""
    text = (ROOT / "docs" / "migration.md").read_text()
    paragraph = text.split("### Module paths", 1)[1].split("\n#", 1)[0].split("hold the names", 1)[0]
    named = set(re.findall(r"`(?:visdet_ops)?\.(\w+)`", paragraph))
    assert named == set(visdet_ops.MMCV_MODULE_PATHS), (
        f"docs/migration.md, Module paths: {sorted(named ^ set(visdet_ops.MMCV_MODULE_PATHS))}"
    )


ASSERTION_ERRORS = _declared("MMCV_ASSERTION_ERRORS")


def test_there_are_assertion_error_calls():
    assert ASSERTION_ERRORS, "no test file declares MMCV_ASSERTION_ERRORS"


@pytest.mark.parametrize("name", sorted(ASSERTION_ERRORS))
def test_argument_errors_are_also_assertion_errors(name):
    """mmcv checks these arguments with `assert`: our errors name the argument and are ValueErrors, and also
    AssertionErrors, so code written against mmcv (and mmcv's own tests) that catches AssertionError keeps working.
    The calls: each test file's MMCV_ASSERTION_ERRORS."""
    with pytest.raises(ValueError) as info:
        ASSERTION_ERRORS[name]()
    assert isinstance(info.value, AssertionError)
