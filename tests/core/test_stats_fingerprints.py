"""Issue 30, item 13: the grader's fingerprint covers every module a grade, a metric or a figure
depends on, derived from the imports and held to grimp's import graph."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

from pytest_kgbench.core import fingerprints
from pytest_kgbench.core.fingerprints import (
    GRADER_ENTRIES,
    PACKAGE,
    closure,
    grader_files,
    prompt_files,
    registered_sources,
)

ROOT = Path(fingerprints.__file__).resolve().parents[1]  # pytest_kgbench/


def _names(files: list[str]) -> set[str]:
    return {str(Path(f).relative_to(ROOT)) for f in files if Path(f).is_relative_to(ROOT)}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None)


def _upstream(graph: grimp.ImportGraph, entries: list[str]) -> set[str]:
    """Every module the entries (packages: all their modules) import, by grimp."""
    out: set[str] = set()
    for entry in entries:
        for module in {m for m in graph.modules if m == entry or m.startswith(entry + ".")}:
            out |= {module} | graph.find_upstream_modules(module)
    return out


def test_the_grader_closure_holds_everything_grimp_finds_imported(graph) -> None:
    """Complete: every module grimp's import graph reaches from the entries and from the
    registered pieces is fingerprinted; what ours adds beyond grimp is only the packages a
    module lives in (their __init__ runs on import) and what those import, and modules
    named to be run as a process."""
    inside, _ = registered_sources()
    entries = [*(f"{PACKAGE}.{e}" for e in GRADER_ENTRIES), *inside]
    ours, theirs = closure(entries), _upstream(graph, entries)
    assert theirs <= ours
    parents = {".".join(m.split(".")[:i]) for m in theirs for i in range(1, m.count(".") + 1)}
    extra = ours - theirs
    assert extra <= parents | _upstream(graph, sorted(parents)) | {
        f"{PACKAGE}.executors.sparql_worker"}
    files = _names(grader_files())
    assert {f"{m.removeprefix(PACKAGE + '.').replace('.', '/')}.py" for m in theirs
            if not (ROOT / m.removeprefix(PACKAGE + ".").replace(".", "/")).is_dir()} <= files


def test_the_grader_fingerprint_covers_normalise_id_the_statistics_and_the_engines() -> None:
    files = _names(grader_files())
    assert {"packs/schema.py", "analysis/stats.py", "analysis/report.py",
            "analysis/comparisons.py", "analysis/html_report.py", "scoring/grading.py",
            "scoring/fieldkinds.py", "scoring/answer_key.py", "core/questions.py",
            "run/runtime.py", "scoring/judge.py", "packs/evidence.py"} <= files
    assert {f"engines/{m}.py" for m in ("sql", "sparql", "sparql_worker", "postgres",
                                          "endpoint", "guard", "worker")} <= files
    assert {f"metrics/{p.name}" for p in (ROOT / "metrics").glob("*.py")} <= files
    # what only answers (the agents) or runs the session (the plugin) is not the grader's
    assert not {"plugin/__init__.py", "agents/models/anthropic.py", "agents/models/openai.py",
                "cli/__init__.py"} & files


def test_the_prompt_fingerprint_covers_the_store_descriptions() -> None:
    files = _names(prompt_files())
    assert {"asking/prompts.py", "packs/reading.py", "asking/tools.py", "core/conditions.py",
            "packs/schema.py", "engines/sql.py", "engines/sparql.py"} <= files


def test_a_type_checking_import_is_not_a_dependency(tmp_path, monkeypatch) -> None:
    import ast

    known = {"pkg": tmp_path / "__init__.py", "pkg.a": tmp_path / "a.py",
             "pkg.b": tmp_path / "b.py", "pkg.c": tmp_path / "c.py", "pkg.d": tmp_path / "d.py"}
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n"
              "else:\n    from . import c\ndef f():\n    from .d import x\n"
              "RUN = 'pytest_kgbench.engines.sparql_worker'\n")
    visitor = fingerprints._Imports("pkg.a", False, known)
    visitor.visit(ast.parse(source))
    assert visitor.found == {"pkg.c", "pkg.d"}
