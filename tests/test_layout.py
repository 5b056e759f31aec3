"""The package's floor plan: every module in a sub-package named for its layer (and its tests
in a folder of the same name), the layer table of docs/extending.md rendered from the import
contract in pyproject.toml (so the two cannot disagree), no import up the layers even among
type-only imports beyond the ones listed here with their reason, and the 0.x module paths still
importable for one release.

`python tests/test_layout.py` rewrites the table in docs/extending.md from the contract."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "pytest_kgbench"
DOC = REPO / "docs" / "extending.md"
START, END = "<!-- layers: rendered from pyproject.toml -->", "<!-- layers: end -->"


def layers() -> list[list[str]]:
    """The layers contract, top first: each a list of sub-packages independent of each other."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["type"] == "layers"]
    return [[part.strip() for part in layer.split("|")] for layer in contract["layers"]]


def summary(sub: str) -> str:
    """The first sentence of a sub-package's docstring."""
    doc = ast.get_docstring(ast.parse((PACKAGE / sub / "__init__.py").read_text("utf-8"))) or ""
    text = " ".join(doc.split())
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")


def render() -> str:
    rows = ["| layer | sub-package | holds |", "|---|---|---|"]
    for rank, layer in enumerate(layers(), 1):
        for sub in layer:
            rows.append(f"| {rank} | `{sub}/` | {summary(sub)} |")
    return "\n".join([START, *rows, END])


def test_the_layer_table_in_the_docs_is_the_contracts() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"{DOC} has no rendered layer table"
    shown = text[text.index(START):text.index(END) + len(END)]
    assert shown == render(), "run `python tests/test_layout.py` to render it again"


def test_every_module_is_in_a_sub_package_of_the_contract() -> None:
    named = {sub for layer in layers() for sub in layer}
    subs = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subs == named, "a sub-package outside the layers contract, or one it names missing"
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "_moved.py"]


# the tests of the repository as a whole (its floor plan, its docs' commands, its benchmarks),
# which belong to no one layer; every other test sits in the folder of the layer it tests
ROOT_TESTS = {"test_layout.py", "test_docs_commands.py", "test_benchmarks_engines.py"}
# the folders of tests that are of the whole too: realmodel/ asks a real model through every
# layer (tools/llama_server.py serves it)
ROOT_FOLDERS = {"realmodel"}


def test_the_tests_mirror_the_layout() -> None:
    tests = REPO / "tests"
    folders = {p.name for p in tests.iterdir()
               if p.is_dir() and p.name not in ("data", "__pycache__", *ROOT_FOLDERS)}
    named = {sub for layer in layers() for sub in layer}
    assert folders <= named, f"test folders no layer is named for: {sorted(folders - named)}"
    assert {p.name for p in tests.glob("test_*.py")} == ROOT_TESTS
    assert all(list((tests / folder).glob("test_*.py")) for folder in folders)
    # pytest imports each test file by its name alone (no __init__.py): no two may share one
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names))


# Type-only imports that still go up the layers, each with why. None is left: each Protocol the
# registry once held now sits beside its domain, and the shipped pieces are found from `run/`.
# The set is exact: a new upward import fails here.
UPWARD_TYPE_ONLY: set[tuple[str, str]] = set()


def import_cycles(graph: object) -> list[list[str]]:
    """The package's import cycles in `graph` (a grimp graph): every strongly connected
    component of more than one module (Tarjan), the 0.x aliases left out."""
    modules = sorted(m for m in graph.modules  # type: ignore[attr-defined]
                     if m.startswith("pytest_kgbench.") and "_moved" not in m)
    known = set(modules)
    edges = {m: sorted(t for t in graph.find_modules_directly_imported_by(m)  # type: ignore[attr-defined]
                       if t in known) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle_even_counting_type_only_imports_and_the_registrys_discovery() -> None:
    """Zero cycles by any count: grimp's graph with the type-only imports, plus an edge from
    the module that discovers the shipped pieces by name (run/shipped.py) to every module it
    loads that way."""
    import grimp

    from pytest_kgbench.run import shipped

    graph = grimp.build_graph("pytest_kgbench", exclude_type_checking_imports=False)
    for package, _attr in (("pytest_kgbench.agents", "AGENTS"),
                           ("pytest_kgbench.engines", "STORES"),
                           ("pytest_kgbench.metrics", "METRICS"),
                           ("pytest_kgbench.scoring.fieldkinds", "FIELD_KINDS"),
                           ("pytest_kgbench.core.conditions", "LADDER")):
        for module in shipped._modules(package):
            graph.add_import(importer="pytest_kgbench.run.shipped",
                             imported=module.__name__)
    assert import_cycles(graph) == []
    # the check sees a cycle where there is one
    graph.add_import(importer="pytest_kgbench.core.errors", imported="pytest_kgbench.run.shipped")
    assert import_cycles(graph)


def test_no_import_goes_up_the_layers_even_a_type_only_one() -> None:
    import grimp

    rank = {sub: i for i, layer in enumerate(layers()) for sub in layer}
    graph = grimp.build_graph("pytest_kgbench", exclude_type_checking_imports=False)
    runtime = grimp.build_graph("pytest_kgbench", exclude_type_checking_imports=True)
    up, up_at_runtime = set(), set()
    for module in graph.modules:
        parts = module.split(".")
        if len(parts) < 2 or parts[1] not in rank:
            continue
        for target in graph.find_modules_directly_imported_by(module):
            t = target.split(".")
            if len(t) > 1 and t[1] in rank and rank[t[1]] < rank[parts[1]]:
                pair = (module.partition(".")[2], target.partition(".")[2])
                up.add(pair)
                if target in runtime.find_modules_directly_imported_by(module):
                    up_at_runtime.add(pair)
    assert up_at_runtime == set()
    assert up == UPWARD_TYPE_ONLY


LONGEST = 60       # lines of a function, `def` to its last line, docstring included
MOST_PARAMETERS = 7  # not counting self or cls
WHY = "many parameters:"  # a comment on the line above a longer list says why


def oversized(source: str) -> list[str]:
    """The functions of `source` longer than LONGEST lines, or with more than MOST_PARAMETERS
    parameters and no comment saying why."""
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
        a = node.args
        count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
        count -= bool(a.args and a.args[0].arg in ("self", "cls"))
        above = {lines[n.lineno - 2] for n in [node, *node.decorator_list] if n.lineno > 1}
        if length > LONGEST:
            out.append(f"{node.name}: {length} lines")
        if count > MOST_PARAMETERS and not any(WHY in line for line in above):
            out.append(f"{node.name}: {count} parameters")
    return out


def test_no_function_is_over_60_lines_or_7_parameters_without_saying_why() -> None:
    found = {str(path.relative_to(REPO)): oversized(path.read_text(encoding="utf-8"))
             for path in sorted(PACKAGE.rglob("*.py"))}
    assert {path: what for path, what in found.items() if what} == {}
    # the check sees what it looks for
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST))
    assert oversized(f"def f(a, b, c, d, e, f, g, h):\n{body}\n") == [
        "f: 61 lines", "f: 8 parameters"]
    assert oversized(f"# {WHY} each an option\ndef f(a, b, c, d, e, f, g, h):\n    pass\n") == []


def test_the_old_module_paths_still_import_and_say_where_they_went() -> None:
    from pytest_kgbench._moved import MOVED

    for old, new in sorted(MOVED.items()):
        sys.modules.pop(f"pytest_kgbench.{old}", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(f"pytest_kgbench.{old}")
        assert module is importlib.import_module(f"pytest_kgbench.{new}"), old
        assert module.__spec__.name == f"pytest_kgbench.{new}", "the alias took the spec"
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message)
                   for w in caught), old


def test_a_pack_generator_written_for_0x_still_runs() -> None:
    """`from pytest_kgbench.packs import Draws` is the authoring API; the other names of the
    old packs module are still there, and `from pytest_kgbench.settings import Settings` in a
    fresh process works and warns."""
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "from pytest_kgbench.packs import Draws, load_pack, read_manifest\n"
            "assert Draws(1).random() == Draws(1).random()\n"
            "try:\n    from pytest_kgbench.settings import Settings\n"
            "except DeprecationWarning as w:\n    print('warned:', w)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert "pytest_kgbench.settings moved to pytest_kgbench.core.settings" in done.stdout
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        import pytest_kgbench.packs as packs

        packs.nothing_here  # noqa: B018


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    block = render()
    if START in text:
        text = text[:text.index(START)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text, encoding="utf-8")
    print(f"rendered {DOC}")
