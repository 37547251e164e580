"""The docs cannot go stale silently (issue 26).

- Every repository path that docs/*.md and README.md name exists: relative markdown links (and their #anchors,
  against the target's headings as GitHub spells them) and every token that starts with one of the source folders
  (`csrc/common/host.h`, `tests/test_memory.py`, `ci/*.py`); a template (`csrc/ops/<op>/<op>.cpp`, `{h,cpp}`)
  must match at least one file.
- docs/adding-an-op.md, the one map of the tree, names every file of ci/, benchmarks/, csrc/common/, the
  package's own modules, the tests' helpers and the docs pages.
- docs/ holds reference pages only: run logs go to runs/gpu/ (runs/gpu/README.md).
- Every repository path a module docstring of the tree names (the package, tests, benchmarks, ci, setup.py,
  noxfile.py) exists, as in the docs.

Nothing here imports visdet_ops: the lists it compares with are read from the source files.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MAP = DOCS / "adding-an-op.md"
PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]

# The folders of the source tree: a token that starts with one of them is a path to check.
SOURCE_FOLDERS = (".ci", ".github", "benchmarks", "ci", "csrc", "docs", "runs", "tests", "visdet_ops")

# ci/scratch.py runs the suite from a copy of the tree without the package (and without runs/): the paths the docs
# name are checked in the source tree only.
pytestmark = pytest.mark.skipif(
    not (ROOT / "visdet_ops" / "__init__.py").is_file(),
    reason="a copy of the tree without the package (ci/scratch.py): the docs' paths are checked in the source tree",
)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FOLDER = "|".join(re.escape(f) for f in SOURCE_FOLDERS)
PATH_TOKEN = re.compile(r"(?<![\w./$~-])((?:" + FOLDER + r")/[\w./<>*{},+-]*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _headings(text: str) -> list[str]:
    """The ATX headings of a markdown text, outside fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(match.group(2))
    return found


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation dropped, spaces to hyphens, -1, -2, ... for
    repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _headings(text):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", plain.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _expand_braces(pattern: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for option in match.group(1).split(",") for p in _expand_braces(head + option + tail)]


def _exists(token: str) -> bool:
    """A repository path, or a template of one (`<op>`, `*`, `{a,b}`) that matches at least one path."""
    if not any(c in token for c in "<*{"):
        return (ROOT / token).exists()
    patterns = _expand_braces(re.sub(r"<[^<>]*>", "*", token).rstrip("/"))
    return all(any(ROOT.glob(p)) for p in patterns)


def _path_tokens(text: str) -> set[str]:
    return {m.group(1).rstrip(".,;:") for m in PATH_TOKEN.finditer(text)}


def _links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not re.match(r"[a-zA-Z][\w+.-]*:", t)]  # not http:, mailto:, ...


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_path_named_exists(page):
    missing = sorted(t for t in _path_tokens(_read(page)) if not _exists(t))
    assert not missing, f"{_rel(page)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_link_resolves(page):
    text = _read(page)
    broken = []
    for target in _links(text):
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(_read(dest)):
            broken.append(f"{target}: no heading with that anchor in {_rel(dest)}")
    assert not broken, f"{_rel(page)}: {broken}"


def test_the_path_check_sees_templates_and_stale_paths():
    """The checks above on known cases: a template matches the folders it stands for, a renamed file is caught."""
    assert _exists("csrc/ops/<op>/<op>_cuda_host.cpp") and _exists("tests/ops/test_<module>.py")
    assert _exists("csrc/ops/_rois/rois*.{h,cpp,cu}") and _exists("ci/*.py") and _exists("csrc/ops/<op>/")
    assert not _exists("csrc/ops/ms_deform_attn") and not _exists("csrc/ops/<op>/<op>_autograd.cpp")
    tokens = _path_tokens("`ci/sanitize_cases.py`, (docs/ops.md). torch/csrc/stable/ops.h, `shared/docs/LAYOUT.md`")
    assert tokens == {"ci/sanitize_cases.py", "docs/ops.md"}
    assert _anchors("# A\n```\n# not a heading\n```\n## Integer arguments\n## `some_op`\n## A") == {
        "a",
        "integer-arguments",
        "some_op",
        "a-1",
    }


@functools.cache
def _mmcv_module_paths() -> frozenset[str]:
    """visdet_ops.MMCV_MODULE_PATHS as the package derives it: its public modules but _OWN_MODULES (read from
    visdet_ops/__init__.py)."""
    for node in ast.walk(ast.parse(_read(ROOT / "visdet_ops" / "__init__.py"))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_OWN_MODULES" for t in node.targets):
            own = set(ast.literal_eval(node.value))
            return frozenset(
                f.stem for f in (ROOT / "visdet_ops").glob("*.py") if f.stem[0] != "_" and f.stem not in own
            )
    raise AssertionError("visdet_ops/__init__.py has no _OWN_MODULES")


def _mapped_files() -> dict[str, str]:
    """Every file the map must name -> the spelling it must use."""
    want = {}
    for folder in ("ci", "benchmarks"):
        for f in sorted((ROOT / folder).glob("*.py")):
            if f.name != "__init__.py":
                want[_rel(f)] = _rel(f)
    for f in sorted((ROOT / "tests").glob("*.py")):
        if not f.name.startswith("test_") and f.name != "__init__.py":
            want[_rel(f)] = _rel(f)
    for f in sorted((ROOT / "csrc" / "common").iterdir()):
        want[_rel(f)] = f.name
    for f in sorted((ROOT / "csrc" / "ops").glob("_*/*")):
        want[_rel(f)] = f"{f.parent.name}/{f.name}"
    for f in sorted((ROOT / "visdet_ops").glob("*.py")):
        if f.stem not in _mmcv_module_paths():
            want[_rel(f)] = f.name
    for f in sorted((ROOT / "visdet_ops" / "ops").glob("_*.py")):
        want[_rel(f)] = f"ops/{f.name}"
    for f in sorted(DOCS.glob("*.md")):
        if f != MAP:
            want[_rel(f)] = f.name
    return want


def test_the_map_names_every_file():
    """docs/adding-an-op.md is the one map of the tree: a file added to ci/, benchmarks/, csrc/common/, a family home
    csrc/ops/_<family>/, the package
    or the tests' helpers, or a new docs page, gets its line there."""
    text = _read(MAP)
    missing = [
        path
        for path, spelling in _mapped_files().items()
        if not re.search(rf"(?<![\w./-]){re.escape(spelling)}(?![\w-])", text)
    ]
    assert not missing, f"docs/adding-an-op.md does not name {missing}: add each where it belongs on the map"


def test_docs_holds_reference_pages_only():
    """Run logs and other records live in runs/ (runs/gpu/README.md), not among the reference pages."""
    others = sorted(_rel(p) for p in DOCS.iterdir() if not (p.is_file() and p.suffix == ".md"))
    assert not others, f"docs/ holds pages only; move {others} (GPU run logs: runs/gpu/)"


def _python_files() -> list[Path]:
    files = [ROOT / "setup.py", ROOT / "noxfile.py", *sorted((ROOT / "visdet_ops").rglob("*.py"))]
    for folder in ("tests", "benchmarks", "ci"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if f.is_file() and ".nox" not in f.parts]


def test_every_path_named_in_a_module_docstring_exists():
    """Module docstrings are docs too: a path they name (`tests/fuzz_worker.py`, `docs/ops.md`) must exist."""
    stale = {}
    for f in _python_files():
        doc = ast.get_docstring(ast.parse(_read(f))) or ""
        missing = sorted(t for t in _path_tokens(doc) if not _exists(t))
        if missing:
            stale[_rel(f)] = missing
    assert not stale, f"module docstrings name paths that do not exist: {stale}"
