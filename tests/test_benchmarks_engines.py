"""benchmarks/engines.py run as its README runs it, and the pure helpers of
benchmarks/query_engines.py: which queries it times, how it compares an
engine's answers with the default's, and how a query past the limit is shown and left out of
the ratios."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_kgbench.core.questions import load_questions
from pytest_kgbench.engines import QueryResult

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def qe():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its neighbours, as `python benchmarks/…` has
    spec = importlib.util.spec_from_file_location("query_engines",
                                                  ROOT / "benchmarks" / "query_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["query_engines"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def T(qe, outcome, answer=None, runs=(0.1,)):
    return qe.Timing(outcome, answer, list(runs))


def test_queries_of_takes_each_gold_query_of_the_variant_once(qe):
    questions = load_questions(ROOT / "questions" / "credit.yaml").questions
    sparql = qe.queries_of(questions, "sparql", "base")
    expected = [q.id for q in questions if "sparql" in q.gold and q.expect == "answer"
                and not q.skip and (q.variants is None or "base" in q.variants)]
    assert [q.qid for q in sparql] == expected and expected
    assert {q.kind for q in sparql} == {"gold"} and {q.where for q in sparql} == {"sparql"}
    assert len({q.label for q in sparql}) == len(sparql)  # labels key the tables


def test_queries_of_adds_traps_and_executed_sql_only_when_asked(qe):
    questions = load_questions(ROOT / "questions" / "credit.yaml").questions
    gold = qe.queries_of(questions, "sql", "base")
    every = qe.queries_of(questions, "sql", "base", ("gold", "trap"), executed=True)
    assert {q.where for q in gold} == {"sql"}
    assert {q.kind for q in every} == {"gold", "trap"} and "executed" in {q.where for q in every}
    assert len({q.label for q in every}) == len(every) > len(gold)


def test_outcome_of_tells_the_limit_refusals_and_errors_apart(qe):
    def fields(r):
        return {"n": r.rows[0][0]}

    ok = QueryResult("sql", "s", columns=["n"], rows=[[3]])
    assert qe.outcome_of(ok, fields) == ("ok", {"n": 3})
    stopped = QueryResult("sql", "s", timed_out=True, error="stopped after 5 s")
    assert qe.outcome_of(stopped, fields) == ("> limit", None)
    assert qe.outcome_of(QueryResult("sql", "s", refused="personal\nmore"), fields) == \
        ("refused", "personal")
    assert qe.outcome_of(QueryResult("sql", "s", error="Binder Error: x"), fields)[0] == "error"


def test_agrees_never_calls_an_unfinished_query_the_same(qe):
    same = qe.agrees(T(qe, "ok", {"n": 1}), T(qe, "ok", {"n": 1}))
    assert same == "same"
    assert qe.agrees(T(qe, "ok", {"n": 1}), T(qe, "ok", {"n": 2})) == "differs"
    assert qe.agrees(T(qe, "ok", {"n": 1}), T(qe, "error", "boom")) == "differs"
    assert qe.agrees(T(qe, "error", "DuckDB words"), T(qe, "error", "PG words")) == "same"
    # both past the limit is not agreement: nothing was compared
    assert qe.agrees(T(qe, "> limit"), T(qe, "> limit")) == "unchecked"
    assert qe.agrees(T(qe, "> limit"), T(qe, "ok", {"n": 1})) == "unchecked"
    assert qe.agrees(None, T(qe, "ok", {"n": 1})) == "unchecked"


def test_answers_compare_floats_within_rounding_and_the_rest_exactly(qe):
    assert qe.same_answer({"output": 3.0583333333333336}, {"output": 3.058333333333333})
    assert not qe.same_answer({"output": 3.0583}, {"output": 3.0584})
    assert qe.same_answer({"n": [[1, 2.5], [2, 0.1 + 0.2]]}, {"n": [[1, 2.5], [2, 0.3]]})
    assert not qe.same_answer({"n": 3}, {"n": 4}) and not qe.same_answer([1, 2], [1, 2, 3])
    assert not qe.same_answer({"ok": True}, {"ok": 1}) and not qe.same_answer({"a": 1}, {"b": 1})
    assert qe.agrees(T(qe, "ok", {"x": 0.1 + 0.2}), T(qe, "ok", {"x": 0.3})) == "same"


def test_differences_name_the_query_and_both_answers(qe):
    q = qe.Query("credit-Q01", "gold", "sql", "analyst", "SELECT 1")
    timings = {"duckdb": {q.label: T(qe, "ok", {"n": 1})},
               "postgres": {q.label: T(qe, "ok", {"n": 2})}}
    assert qe.differences(["duckdb", "postgres"], [q], timings) == [
        "- credit-Q01: duckdb ok: {'n': 1}; postgres (throwaway) ok: {'n': 2}"]
    timings["postgres"][q.label] = T(qe, "ok", {"n": 1})
    assert qe.differences(["duckdb", "postgres"], [q], timings) == []


def test_a_query_past_the_limit_shows_as_such_and_has_no_ratio(qe):
    over = T(qe, "> limit", runs=(30.2,))
    assert over.median is None
    assert qe.cell(over, 30) == "> 30 s"
    assert qe.cell(T(qe, "ok", runs=(0.010, 0.012, 0.5)), 30) == "12.0 ms"
    assert qe.cell(T(qe, "ok", runs=(12.344,)), 30) == "12.34 s"
    assert qe.cell(T(qe, "error", "x", runs=(0.002,)), 30) == "2.0 ms (error)"
    assert qe.ratio(T(qe, "ok", runs=(1.0,)), T(qe, "ok", runs=(0.25,))) == 4.0
    assert qe.ratio(over, T(qe, "ok")) is None and qe.ratio(T(qe, "ok"), over) is None


def test_summary_ratio_is_over_the_queries_both_engines_finished(qe):
    default = {"a": T(qe, "ok", 1, (1.0,)), "b": T(qe, "ok", 2, (3.0,)),
               "c": T(qe, "> limit", runs=(60.0,)), "d": T(qe, "ok", 4, (2.0,))}
    other = {"a": T(qe, "ok", 1, (0.5,)), "b": T(qe, "ok", 9, (1.0,)),
             "c": T(qe, "ok", 3, (0.1,)), "d": T(qe, "> limit", runs=(60.0,))}
    s = qe.summary(default, other)
    assert s["finished"] == 3 and s["queries"] == 4 and s["over"] == ["d"]
    assert s["median"] == 0.5                      # of 0.5, 1.0, 0.1
    assert s["both"] == 2 and s["ratio"] == pytest.approx(2.0 / 0.75)  # a and b only
    assert s["differ"] == ["b"] and s["unchecked"] == ["c", "d"]
    assert s["total"] == pytest.approx(1.6)


def test_engine_list_puts_the_default_first_once(qe):
    assert qe.engine_list("oxigraph,endpoint", "sparql") == ["rdflib", "oxigraph", "endpoint"]
    assert qe.engine_list("postgres,duckdb,postgres", "sql") == ["duckdb", "postgres"]
    assert qe.engine_list("", "sql") == []
    assert qe.label_of("endpoint=http://127.0.0.1:1/query") == "endpoint (yours)"
    assert qe.label_of("postgres") == "postgres (throwaway)"
    assert qe.label_of("oxigraph") == "oxigraph"


def test_the_rules_benchmark_runs_and_finds_the_three_stores_agree(tmp_path) -> None:
    """benchmarks/engines.py as its README runs it, on credit/base: every store derives the
    same triples, and each store's time is printed (a script this suite does not run rots: it
    once imported functions that had moved)."""
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "engines.py"), "--pack",
                           "credit", "--variant", "base", "--repeats", "1", "--cache",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "derived, the same on every store" in proc.stdout
    rows = [line.split("|")[1].strip() for line in proc.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| store")]
    assert rows == ["direct", "Oxigraph", "default"], proc.stdout
