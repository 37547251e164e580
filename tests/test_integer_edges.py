"""The integer-edge checks that span ops. Each op's rows (every integer argument of its ops and modules at 0, -1,
2^31, 2^40, 2^63 - 1 and just past its bounds) are in its test file, tests/ops/test_<module>.py, over the harness
in tests/integer_edge_harness.py (its docstring: what a row checks, and the worker that runs each case)."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import torch

import visdet_ops
from visdet_ops import _loader
from visdet_ops.ops import EXAMPLES, _args

from . import integer_edge_harness as edges
from .conftest import op_test_module


def _sleep_case(device, seconds, gen):
    import time

    time.sleep(seconds)


edges.register_case("sleep", _sleep_case)


def test_the_case_limit_stops_a_runaway_case_and_the_worker_recovers(monkeypatch):
    """The harness itself: a case past its limit is reported as a timeout and its worker killed; the next case gets
    a fresh worker, whose first use of a module and a device is not charged to the case (a loaded GPU machine took
    over 20 s for a CUDA context and cuBLAS there, and three DCN cases failed on it)."""
    monkeypatch.setattr(edges, "CASE_TIMEOUT_S", 1.0)
    cpu = torch.device("cpu")
    result = edges.run_in_worker(__name__, "sleep", cpu, 5, 0)
    assert result.get("timeout") and result["timeout_s"] == 1.0, result
    assert edges.run_in_worker(__name__, "sleep", cpu, 0, 0) == {"ok": True}
    assert edges.run_in_worker(__name__, "sleep", cpu, 0.2, 0) == {"ok": True}


# ---------------------------------------------------------------- every public entry point names the user's argument

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class DocsRow:
    """A row of docs/ops.md's "Integer arguments" table: the arguments it names (backticked, first column), the
    bounds of visdet_ops/ops/_args.py it shows and the ranges it says they accept, in order."""

    line: str
    arguments: tuple[str, ...]
    bounds: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]


def _number(text: str) -> int:
    """'4096', '2^20', '2^63 - 1' as an int."""
    match = re.fullmatch(r"\s*(-?\d+)(?:\^(\d+))?(?:\s*-\s*(\d+))?\s*", text)
    assert match, f"docs/ops.md: not a bound: {text!r}"
    base, power, minus = match.groups()
    return int(base) ** int(power or 1) - int(minus or 0)


def _ranges(accepted: str) -> tuple[tuple[int, int], ...]:
    """The ranges an "Accepted" cell says, in order: [lo, hi], {a, b} (each value of a discrete choice), any int64 /
    any integer."""
    found = []
    for interval, choice, _ in re.findall(r"\[([^\]]+)\]|\{([^}]+)\}|(any int(?:eger|64))", accepted):
        if interval or choice:
            values = [_number(v) for v in (interval or choice).split(",")]
            found.append((min(values), max(values)))
        else:
            found.append(edges.ANY)
    return tuple(found)


@functools.cache
def docs_integer_rows() -> tuple[DocsRow, ...]:
    """docs/ops.md's "Integer arguments" table, row by row."""
    section = (ROOT / "docs" / "ops.md").read_text().split("\n## Integer arguments\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or set(cells[0]) <= set("- ") or cells[2].startswith("Bound"):
            continue
        arguments = tuple(re.findall(r"`(\w+)`", cells[0]))
        rows.append(DocsRow(line, arguments, tuple(re.findall(r"`(\w+)`", cells[2])), _ranges(cells[1])))
    return tuple(rows)


def _bounds() -> dict[str, tuple[int, int]]:
    """The bounds of visdet_ops/ops/_args.py: its upper-case (lo, hi) constants."""
    return {
        name: value
        for name, value in vars(_args).items()
        if name.isupper() and isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value)
    }


def test_every_bound_has_its_row_in_the_docs():
    """Each bound of visdet_ops/ops/_args.py has its row in docs/ops.md's "Integer arguments" table: the row names it
    (column "Bound") and says the range it holds; a row names only bounds that exist, one range for each."""
    bounds, documented, wrong = _bounds(), {}, []
    for row in docs_integer_rows():
        if len(row.bounds) != len(row.ranges) or not row.bounds:
            wrong.append(f"{row.line}: {len(row.bounds)} bounds, {len(row.ranges)} ranges")
        documented.update(zip(row.bounds, row.ranges, strict=False))
    missing = sorted(set(bounds) - set(documented))
    assert not missing, f"bounds of visdet_ops/ops/_args.py without a row in docs/ops.md 'Integer arguments': {missing}"
    wrong += [f"{n}: docs/ops.md says {documented[n]}, _args.py {v}" for n, v in bounds.items() if documented[n] != v]
    wrong += [f"docs/ops.md names {n}, which is no bound of _args.py" for n in sorted(set(documented) - set(bounds))]
    assert not wrong, wrong


def test_the_docs_name_every_integer_argument():
    """Every integer parameter that a signature shows (an int annotation or default) is named in docs/ops.md's table;
    the table's names are how an argument without one (output_size, kernel_size: an int or a pair, no default) is
    known to be an integer (the next test)."""
    named = {a for row in docs_integer_rows() for a in row.arguments}
    missing = sorted(
        f"{name}-{param_name}"
        for _, name, param_name, param in _public_parameters()
        if _is_typed_integer(param) and param_name not in named
    )
    assert not missing, f"integer parameters docs/ops.md's 'Integer arguments' table does not name: {missing}"


def _from_test_files(name: str, default) -> list:
    """The table `name` (INTEGER_EDGE_ROWS, ...) of each op's test file, `default` where one has none."""
    return [getattr(op_test_module(family), name, default) for family in sorted(EXAMPLES)]


def _public_rows() -> list[edges.Row]:
    return [r for rows in _from_test_files("INTEGER_EDGE_ROWS", []) for r in rows if not r.id.startswith("op.")]


def _parameters(entry) -> dict[str, inspect.Parameter]:
    """The parameters a user passes to a public function or module class (a *Pack class passes its *args and
    **kwargs on to its base: the first class in the MRO with a signature of its own)."""
    if not inspect.isclass(entry):
        return dict(inspect.signature(entry).parameters)
    for cls in entry.__mro__:
        if "__init__" in vars(cls):
            params = dict(inspect.signature(cls.__init__).parameters)
            params.pop("self", None)
            if any(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params.values()):
                return params
    return {}


def _public_parameters():
    """(family, public name, parameter name, parameter) of every parameter of every op module's public names."""
    for family in sorted(EXAMPLES):
        module = importlib.import_module(f"visdet_ops.ops.{family}")
        for name in module.__all__:
            for param_name, param in _parameters(getattr(module, name)).items():
                yield family, name, param_name, param


def _is_typed_integer(param: inspect.Parameter) -> bool:
    """Annotated int (`int`, `int | None`), else an int default (not a bool)."""
    if param.annotation is not param.empty:
        return re.search(r"\bint\b", str(param.annotation)) is not None
    return isinstance(param.default, int) and not isinstance(param.default, bool)


def test_every_integer_parameter_of_every_public_entry_point_has_a_row():
    """Each integer parameter (typed, or named in docs/ops.md's table and no registered op's tensor) of each public
    function and module constructor of an op module has an integer-edge row `<name>-<parameter>` in the op's test
    file."""
    have = {row.id for row in _public_rows()}
    named = {a for row in docs_integer_rows() for a in row.arguments} - _schema_tensor_arguments()
    missing = [
        f"{name}-{param_name} (tests/ops/test_{family}.py)"
        for family, name, param_name, param in _public_parameters()
        if (param_name in named or _is_typed_integer(param)) and f"{name}-{param_name}" not in have
    ]
    assert not missing, f"integer parameters without an integer-edge row: {missing}"


def _schema_tensor_arguments() -> set[str]:
    """The names registered ops give tensors: a name the docs' table lists is not an integer where it is one of these
    (a deformable op's offset tensor; an NMS offset=0 is typed by its default)."""
    return {a.name for schema in _schemas() for a in schema.arguments if "Tensor" in str(a.type)}


def _schema_integer_arguments() -> list[str]:
    """op.<op>-<argument> for each integer argument (int, SymInt) of each registered op's schema, backward ops too."""
    return [
        f"op.{schema.name.split('::')[1]}-{a.name}"
        for schema in _schemas()
        for a in schema.arguments
        if str(a.type) in ("int", "SymInt")
    ]


def _schemas() -> list:
    """The schema of every registered op, backward ops too."""
    return [torch._C._get_schema(qualname, "") for qualname in _loader.op_names()]


def test_every_integer_argument_of_every_registered_op_has_a_row():
    """Each integer argument of each registered op (direct torch.ops.visdet_ops calls) has an `op.<op>-<argument>`
    row in its family's test file, or an entry in that file's INTEGER_EDGE_OP_COVERED_OTHERWISE saying why not."""
    have = {row.id for rows in _from_test_files("INTEGER_EDGE_ROWS", []) for row in rows if row.id.startswith("op.")}
    have.update(*_from_test_files("INTEGER_EDGE_OP_COVERED_OTHERWISE", {}))
    schema = _schema_integer_arguments()
    missing = sorted(set(schema) - have)
    assert not missing, f"registered ops' integer arguments without an integer-edge row: {missing}"
    stray = sorted(have - set(schema))
    assert not stray, f"integer-edge rows of no registered op's integer argument: {stray}"


def test_public_rows_name_the_users_argument():
    """A public entry point's row expects its error to name the parameter the user wrote, exactly: no schema name
    (pooled_height, pad_w), no alias."""
    # Rows whose argument is not a parameter of the entry point itself (row id -> where the user writes it).
    not_a_parameter = {k for table in _from_test_files("INTEGER_EDGE_NOT_A_PARAMETER", {}) for k in table}
    wrong = []
    for row in _public_rows():
        entry, _, arg = row.id.partition("-")
        if row.names != (arg,):
            wrong.append(f"{row.id}: names {row.names}, not ({arg!r},)")
        elif row.id not in not_a_parameter and arg not in _parameters(getattr(visdet_ops, entry)):
            wrong.append(f"{row.id}: {arg} is not a parameter of visdet_ops.{entry}")
    assert not wrong, wrong


def test_message_names_whole_words():
    assert edges.message_names("op: padding must be in [0, 65536], got (1, 2)", "padding")
    assert edges.message_names("x: padding[1] must be", "padding")
    assert not edges.message_names("op: stride_h must be in [1, 65536], got 0", "stride")
    assert not edges.message_names("op: pooled_height must be in [1, 4096], got 0", "output_size")


def test_python_and_cpp_bounds_agree():
    """The numbers in _args.py and csrc/common/checks.h are the same."""
    text = (ROOT / "csrc" / "common" / "checks.h").read_text()
    consts = {m[0]: eval(m[1]) for m in re.findall(r"constexpr int64_t (k\w+) = ([^;]+);", text)}  # noqa: S307
    assert consts["kMaxPooledSize"] == _args.POOLED_SIZE[1]
    assert (consts["kMinSamplingRatio"], consts["kMaxSamplingRatio"]) == _args.SAMPLING_RATIO
    assert consts["kMaxStride"] == _args.STRIDE[1]
    assert consts["kMaxPadding"] == _args.PADDING[1]
    assert consts["kMaxDilation"] == _args.DILATION[1]
    assert consts["kMaxGroups"] == _args.GROUPS[1]
    assert consts["kMaxCarafeKernel"] == _args.CARAFE_KERNEL[1]
    assert consts["kMaxCarafeGroups"] == _args.CARAFE_GROUPS[1]
    assert consts["kMaxCarafeScale"] == _args.CARAFE_SCALE[1]
