"""The querying tools and the prompts of each condition."""

from __future__ import annotations

import json

from pytest_kgbench.agents.support.mcp_server import log_line
from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.asking.tools import TOOL_NAMES, TOOLS, call_tool, tools_for
from pytest_kgbench.core import conditions
from pytest_kgbench.engines import CAPS
from pytest_kgbench.engines.sql import SqlExecutor, database_from_csv_text
from pytest_kgbench.engines.stores import guard_for, open_store, store_from_context
from pytest_kgbench.packs.reading import tables_from_text


def _q(credit_questions, qid):
    return next(q for q in credit_questions.questions if q.id == qid)


def test_querying_conditions_have_three_tools_reading_none() -> None:
    for cond in conditions.LADDER:
        names = tuple(t["name"] for t in tools_for(cond, together=False))
        assert names == (TOOL_NAMES if cond.mode == "querying" else ())


def test_tools_list_describe_and_run(credit_base) -> None:
    ex = open_store(credit_base, "sql", "analyst")
    text, result = call_tool(ex, "list_tables", {})
    assert "rating_actions (" in text and result is None
    text, _ = call_tool(ex, "describe", {"name": "contacts"})
    assert "withheld" in text and "email" not in text.split("withheld")[0]
    text, result = call_tool(ex, "run_query", {"query": "SELECT count(*) AS n FROM countries"})
    assert result is not None and result.rows == [[8]] and "(1 rows)" in text
    text, result = call_tool(ex, "run_query", {"query": "DELETE FROM countries"})
    assert text.startswith("REFUSED") and result.refused
    assert call_tool(ex, "nope", {})[0].startswith("ERROR")
    assert call_tool(ex, "run_query", {})[0].startswith("ERROR")
    ex.close()


def test_reading_prompts_carry_exactly_the_built_rows(credit_base, credit_questions) -> None:
    """The gold agent's premise: the CSV in the prompt parses back to the built tables."""
    q = _q(credit_questions, "credit-Q10")
    prompt = build_prompt(conditions.BY_ID["R1"], credit_base, q)
    tables = tables_from_text(prompt.context)
    assert set(tables) == set(credit_base.pack.tables)
    con_rows = SqlExecutor(database_from_csv_text(tables), {n: s for n, (s, _) in tables.items()},
                           guard_for(credit_base, "analyst"))
    for name, rows in credit_base.tables.items():
        got = con_rows.run(f'SELECT count(*) FROM "{name}"').rows[0][0]
        assert got == len(rows), name
    assert "Definitions" not in prompt.context
    assert q.text in prompt.question and '"rating"' in prompt.question


def test_definitions_appear_only_where_the_condition_gives_them(credit_base,
                                                                credit_questions) -> None:
    q = _q(credit_questions, "credit-Q13")
    text = {c.id: build_prompt(c, credit_base, q,
                               executor=_executor(credit_base, c)).context
            for c in conditions.LADDER}
    definition = "Issuer records that share an LEI are one issuer"
    for cid, context in text.items():
        has = definition in context
        assert has == (cid in ("R4", "R5", "R6", "R7", "R9", "D2", "D5")), cid
    assert "skos:definition" in text["R5"] and "skos:definition" not in text["R4"]
    assert "```turtle" in text["R2"] and "```csv" not in text["R2"]
    assert "```csv" not in text["D1"] and "issuers (" in text["D1"]
    assert "PREFIX cr:" in text["D4"]


def test_the_rdf_prompt_parses_back_to_the_graph_minus_personal_data(credit_base,
                                                                     credit_questions) -> None:
    prompt = build_prompt(conditions.BY_ID["R2"], credit_base, _q(credit_questions, "credit-Q01"))
    guard = guard_for(credit_base, "analyst")
    store = store_from_context(prompt.context, "sparql", guard)
    personal = guard.personal_predicates
    assert personal
    expected = sum(1 for t in credit_base.graph if str(t[1]) not in personal)
    assert store.triples == expected
    store.close()


def test_results_are_capped_and_the_caps_are_stated(credit_base) -> None:
    """The model is told the caps, a capped result says so, and the result kept is the
    capped one (with the row count), not every row."""
    run_query = next(t for t in TOOLS if t["name"] == "run_query")
    assert CAPS.describe() in run_query["description"]
    for store in (open_store(credit_base, "sql", "analyst"),
                  open_store(credit_base, "sparql", "analyst")):
        many = ("SELECT * FROM range(100000)" if store.language == "sql" else
                "SELECT ?p WHERE { ?s ?p ?o }")
        text, res = call_tool(store, "run_query", {"query": many})
        assert res is not None and res.truncated and len(res.rows) == CAPS.rows
        assert res.row_count > CAPS.rows and f"showing {CAPS.rows} of" in text
        assert CAPS.describe() in text
        logged = json.loads(log_line("run_query", {"query": many}, text, res))["result"]
        assert len(logged["rows"]) == CAPS.rows and logged["row_count"] == res.row_count
        wide = ("SELECT repeat('x', 100000000) AS x" if store.language == "sql" else
                "SELECT (STRLEN(?x) AS ?n) ?x WHERE { BIND(CONCAT("
                + ", ".join(["'" + "x" * 400 + "'"] * 10) + ") AS ?x) }")
        text, res = call_tool(store, "run_query", {"query": wide})
        assert res is not None and res.ok and res.cells_cut == 1 and res.truncated
        assert len(text) < CAPS.result_chars + 2000
        assert sum(len(str(v)) for row in res.rows for v in row) <= CAPS.result_chars
        store.close()


def _executor(built, cond):
    if cond.mode != "querying":
        return None
    return open_store(built, cond, "analyst")
