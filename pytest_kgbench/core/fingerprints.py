"""What code produced a run's numbers: the SHA-256 of every module a grade, a metric or a
figure of the report depends on (a plugin's field kinds, metrics and engines included) and of
the modules that write prompts. meta.json records them; a resume refuses to mix them; a
rescore says which grader it is.

The modules are not listed by hand: they are the import closure of a few entry modules
(GRADER_ENTRIES, PROMPT_ENTRIES) and of the registered pieces a grade looks up by name (field
kinds, metrics, engines: the registry finds them by scanning, which no import statement
shows), read from the source's `import` statements — at module level or inside a function,
leaving out `if TYPE_CHECKING:` blocks, which never run — and the modules a string names to
run them (`"pytest_kgbench.engines.sparql_worker"`, a process of its own). A test holds the
closure to grimp's import graph. Pure module: no pytest.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import re
from collections.abc import Iterable
from pathlib import Path

from pytest_kgbench.core.registry import Registry, given

PACKAGE = "pytest_kgbench"
GRADER_ENTRIES = ("scoring.grading", "scoring.answer_key", "metrics", "run.runtime",
                  "run.rescore", "analysis.report", "analysis.html_report")
"""Where grades, metrics and the report's figures are made: everything they import decides a
grade (normalise_id in packs), a metric (the engines re-running a query) or a figure
(stats)."""
PROMPT_ENTRIES = ("asking.prompts", "packs.reading", "asking.tools", "core.conditions")
"""Where what a model is shown is written."""

_NAMED = re.compile(rf"{PACKAGE}(?:\.\w+)*")


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> its file (a package's `__init__.py`)."""
    root = Path(__file__).parent.parent  # pytest_kgbench/, above core/
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        if "__pycache__" in rel.parts or not all(p.isidentifier() for p in rel.parts):
            continue
        parts = [PACKAGE, *rel.parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


class _Imports(ast.NodeVisitor):
    """The modules one module's source imports (or names whole in a string), resolved against
    `known`; an `if TYPE_CHECKING:` body is not visited."""

    def __init__(self, module: str, is_package: bool, known: dict[str, Path]) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: set[str] = set()

    def _add(self, name: str) -> None:
        while name and name not in self.known:  # `import a.b.c` where c is not a module
            name = name.rpartition(".")[0]
        if name:
            self.found.add(name)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else (
            test.attr if isinstance(test, ast.Attribute) else "")
        if name != "TYPE_CHECKING":
            self.generic_visit(node)
            return
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[:len(base) - (node.level - 1)]
            stem = ".".join([*base, node.module] if node.module else base)
        else:
            stem = node.module or ""
        for alias in node.names:
            full = f"{stem}.{alias.name}"
            self._add(full if full in self.known else stem)

    def visit_Constant(self, node: ast.Constant) -> None:
        # a module named whole to be run (python -m, a worker process); a package named so is
        # the registry's scan, whose pieces grader_files takes from the registry itself
        if isinstance(node.value, str) and _NAMED.fullmatch(node.value) and \
                node.value in self.known and self.known[node.value].name != "__init__.py":
            self.found.add(node.value)


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """module -> the package modules its source imports (or names whole)."""
    known = _modules()
    out = {}
    for name, path in known.items():
        visitor = _Imports(name, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        out[name] = frozenset(visitor.found - {name})
    return out


def closure(modules: Iterable[str]) -> set[str]:
    """The package modules `modules` (dotted names; a package stands for all its modules)
    depend on, themselves included: their imports, followed transitively, and the packages
    each module lives in (importing a module runs its packages' `__init__`)."""
    graph = _graph()
    todo = []
    for name in modules:
        if name not in graph:
            raise KeyError(f"{name} is no module of {PACKAGE}")
        todo += [m for m in graph if m == name or m.startswith(name + ".")]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += graph[name]
    return seen


def registered_sources(tables: tuple[str, ...] = ("field_kinds", "metrics", "stores"),
                       registry: Registry | None = None) -> tuple[set[str], set[Path]]:
    """The pieces of `tables` in `registry` (a grade looks each field kind, metric and engine
    up by name): the package modules they are defined in, and the files of those defined
    outside it (a plugin's)."""
    reg = given(registry)
    known = _modules()
    inside: set[str] = set()
    outside: set[Path] = set()
    for piece in [p for table in tables for p in reg.table(table).values()]:
        kind = piece if inspect.isclass(piece) else type(piece)
        module = getattr(inspect.getmodule(kind), "__name__", "")
        if module in known:
            inside.add(module)
            continue
        source = inspect.getsourcefile(kind)
        if source:
            outside.add(Path(source))
    return inside, outside


def _closure_files(entries: tuple[str, ...], tables: tuple[str, ...],
                   registry: Registry | None) -> list[str]:
    known = _modules()
    inside, outside = registered_sources(tables, registry)
    files = {known[m] for m in closure([*(f"{PACKAGE}.{e}" for e in entries), *inside])}
    return sorted(str(f.resolve()) for f in files | outside)


def grader_files(registry: Registry | None = None) -> list[str]:
    """The files whose code decides a grade, a metric or a figure of the report: the import
    closure of GRADER_ENTRIES and of the registered field kinds', metrics' and engines'
    modules, and the files of those pieces a plugin registers, sorted."""
    return _closure_files(GRADER_ENTRIES, ("field_kinds", "metrics", "stores"), registry)


def prompt_files(registry: Registry | None = None) -> list[str]:
    """The files whose code writes what a model is shown: the closure of PROMPT_ENTRIES and of
    the engines' modules (a querying prompt describes the store as its engine does)."""
    return _closure_files(PROMPT_ENTRIES, ("stores",), registry)


def _sha256(paths: list[str] | set[Path]) -> str:
    digest = hashlib.sha256()
    for name in sorted(str(p) for p in paths):
        path = Path(name)
        digest.update(f"{path.parent.name}/{path.name}".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def grader_sha256(registry: Registry | None = None) -> str:
    """SHA-256 of the grader's code (`grader_files`, by name and content), so a report says
    which grader produced it and a rescore whether the grader changed."""
    return _sha256(grader_files(registry))


def code_fingerprints(registry: Registry | None = None) -> dict[str, str]:
    """What meta.json records of the code that grades and the code that writes prompts (the
    pieces of `registry`, the session's, included)."""
    return {"grader_sha256": grader_sha256(registry),
            "prompts_sha256": _sha256(prompt_files(registry))}
