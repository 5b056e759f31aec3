"""The schema arms (--schema prompt|tools|none|floor): how a querying condition's model learns
the store. What each arm's prompt and tool list hold, through the Messages API loop and the
Claude Code CLI; the arms as conditions (ids, selection, pairs); gold under every arm; and the
cost of discovery in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_api import text, tool_use

from conftest import cli_session, credit_question, has_result, run_records
from pytest_kgbench.analysis.report import call_difference
from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.asking.tools import call_tool, tools_for
from pytest_kgbench.core import conditions
from pytest_kgbench.core.conditions import ablation_pairs, arm, by_id, schema_arms, select
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.engines.stores import open_store

REPO = Path(__file__).resolve().parents[2]
# words of credit's store description that no question, instruction or title holds
SQL_DESCRIPTION = ("rating_actions", "legal_name", "issuer_id", "country_code VARCHAR",
                   "(157 rows)")
SPARQL_DESCRIPTION = ("cr:RatingAction", "cr:legalName", "PREFIX cr:")


def _names(tools: list[dict]) -> list[str]:
    return [t["name"] for t in tools]


# --- the arms as conditions ---------------------------------------------------------------------

def test_each_querying_rung_runs_under_every_arm_named_in_order() -> None:
    ids = [c.id for c in select("R1,D1,D4", schema_arms("all"))]
    assert ids == ["R1", "D1", "D1.tools", "D1.none", "D1.floor",
                   "D4", "D4.tools", "D4.none", "D4.floor"]
    assert [c.id for c in select("D1", schema_arms("tools,none"))] == ["D1.tools", "D1.none"]
    # an arm named by id, in any case, is that arm; the default arm is the rung itself
    assert by_id("d2.TOOLS").id == "D2.tools" and by_id("D2.tools").schema == "tools"
    assert by_id("D2.tools").tools == ("list_tables", "describe", "run_query")
    assert by_id("D2.none").tools == by_id("D2.floor").tools == ("run_query",)
    assert by_id("D2.floor").floor and not by_id("D2.none").floor
    assert arm(by_id("R4"), "none") is by_id("R4")  # a reading rung has no store to describe
    with pytest.raises(InputError, match="has no schema arms"):
        by_id("R1.tools")
    with pytest.raises(InputError, match="unknown schema arm 'catalog'"):
        schema_arms("catalog")
    with pytest.raises(InputError, match="unknown schema arm"):
        by_id("D1.catalog")


def test_the_arms_pair_as_the_write_up_compared_them() -> None:
    ids = tuple(c.id for c in select("D1,D4", schema_arms("all")))
    pairs = ablation_pairs(ids)
    for pair in [("D1", "D1.tools"), ("D1.tools", "D1.none"), ("D1.none", "D1.floor"),
                 ("D4", "D4.tools"), ("D1", "D4"), ("D1.tools", "D4.tools"),
                 ("D1.none", "D4.none")]:
        assert pair in pairs, pair
    # the first-listed rung is the baseline of its own arm only, never across arms
    assert ("D1", "D4.none") not in pairs and ("D1", "D1.none") not in pairs
    assert len(pairs) == len(set(pairs))


def test_the_schema_setting_crosses_to_workers_and_back() -> None:
    from pytest_kgbench.core.settings import Settings

    s = Settings.at(REPO, condition_ids=("D1", "D1.none"), schema=("prompt", "none"))
    back = Settings.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and back.plan.schema == ("prompt", "none")
    assert [c.id for c in back.conditions()] == ["D1", "D1.none"]


# --- what each arm shows and offers -------------------------------------------------------------

@pytest.mark.parametrize("rung,words", [("D1", SQL_DESCRIPTION), ("D4", SPARQL_DESCRIPTION)])
def test_each_arms_prompt_and_tools(credit_base, rung, words) -> None:
    q = credit_question("credit-Q01")
    shown = {}
    for schema in conditions.SCHEMA_ARMS:
        cond = arm(by_id(rung), schema)
        ex = open_store(credit_base, cond, "analyst")
        try:
            p = build_prompt(cond, credit_base, q, executor=ex)
        finally:
            ex.close()
        shown[schema] = (p, _names(tools_for(cond, together=False)))
    prompt_arm, tools_arm = shown["prompt"][0], shown["tools"][0]
    assert all(w in prompt_arm.context for w in words)
    for schema in ("tools", "none", "floor"):
        p = shown[schema][0]
        assert not any(w in p.text for w in words), (schema, [w for w in words if w in p.text])
    assert "list_tables and describe show what it holds" in tools_arm.context
    assert "list_tables" not in shown["none"][0].text and "describe" not in shown["none"][0].system
    assert shown["prompt"][1] == shown["tools"][1] == ["list_tables", "describe", "run_query"]
    assert shown["none"][1] == shown["floor"][1] == ["run_query"]
    # the floor: the minimal instruction, nothing about citing
    assert shown["floor"][0].system == "Answer the question about this data."
    assert "citing" in shown["none"][0].system and "definitions_used" not in shown["floor"][0].text


def test_tools_arm_can_learn_what_the_prompt_arm_is_told(credit_base) -> None:
    """A graph's prefixes are in the prompt's description; list_tables gives them too."""
    ex = open_store(credit_base, by_id("D4.tools"), "analyst")
    try:
        listing, _ = call_tool(ex, "list_tables", {})
        block = ex.store_block()
    finally:
        ex.close()
    for line in block.splitlines():
        if line.startswith("- PREFIX"):
            assert line[2:].replace(" ", "") in listing.replace(" ", ""), line


def test_a_tool_not_offered_is_no_tool_and_refusals_do_not_point_to_it(credit_base) -> None:
    cond = by_id("D1.none")
    ex = open_store(credit_base, cond, "analyst")
    try:
        said, result = call_tool(ex, "list_tables", {}, offered=cond.tools)
        assert said == "ERROR: no tool named 'list_tables' (tools: run_query)" and result is None
        said, result = call_tool(ex, "run_query",
                                 {"query": "SELECT * FROM information_schema.tables"},
                                 offered=cond.tools)
        assert result is not None and result.refused and "list_tables" not in said
        with_tools, _ = call_tool(ex, "run_query",
                                  {"query": "SELECT * FROM information_schema.tables"})
        assert "list_tables" in with_tools  # the hint stays where the tools are offered
    finally:
        ex.close()


def _answer_q01(sql: str):
    return text("Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```")


@pytest.mark.parametrize("schema,offered", [
    ("none", {"run_query"}), ("tools", {"list_tables", "describe", "run_query"})])
def test_the_messages_api_gets_each_arms_prompt_and_tools(project, api, schema, offered) -> None:
    q = credit_question("credit-Q01")
    api.push(tool_use("run_query", {"query": q.gold["sql"]}), _answer_q01(q.gold["sql"]))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "--schema", schema,
                "-k", "Q01").assert_outcomes(passed=1)
    first = api.requests[0]["body"]
    assert {t["name"] for t in first["tools"]} == offered
    sent = json.dumps(first["system"]) + json.dumps(first["messages"])
    assert not any(w in sent for w in SQL_DESCRIPTION), [w for w in SQL_DESCRIPTION if w in sent]
    rec = run_records(p)[0]
    assert rec["condition"] == f"D1.{schema}" and rec["nodeid"].endswith(
        f"credit-Q01[D1.{schema}-sonnet-rep1]")


def test_the_messages_api_prompt_arm_is_todays_prompt(project, api) -> None:
    q = credit_question("credit-Q01")
    api.push(tool_use("run_query", {"query": q.gold["sql"]}), _answer_q01(q.gold["sql"]))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "-k", "Q01"
                ).assert_outcomes(passed=1)
    sent = json.dumps(api.requests[0]["body"]["messages"])
    assert all(w in sent for w in SQL_DESCRIPTION)
    assert run_records(p)[0]["condition"] == "D1"


def test_the_cli_session_is_offered_run_query_alone_under_none(project, monkeypatch,
                                                               tmp_path) -> None:
    """Claude Code through `kgbench mcp`: the server serves the arm's tools only, and the
    session's own check accepts exactly those."""
    seen: list[set[str]] = []

    def scripted(body: dict):
        tools = {t.get("name") for t in body.get("tools", [])}
        seen.append({t for t in tools if t.startswith("mcp__kgbench__")})
        if "mcp__kgbench__run_query" in tools and not has_result(body):
            return tool_use("mcp__kgbench__run_query",
                            {"query": "SELECT sovereign_rating AS rating FROM countries "
                                      "WHERE name = 'Caldera'"})
        return text("Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```")

    with cli_session(monkeypatch, tmp_path, scripted) as api:
        p = project()
        result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                             "--condition", "D1", "--schema", "none", "-k", "Q01")
        result.assert_outcomes(passed=1)
        bodies = [r["body"] for r in api.requests]
    assert seen and all(s == {"mcp__kgbench__run_query"} for s in seen if s), seen
    sent = json.dumps([b.get("system") for b in bodies]) + json.dumps(
        [b["messages"][0] for b in bodies])
    assert not any(w in sent for w in SQL_DESCRIPTION)
    rec = run_records(p)[0]
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["run_query"]
    assert rec["grade"] in ("correct", "wrong")  # graded, not a harness failure


# --- gold, selection and the report -------------------------------------------------------------

def test_gold_is_right_under_every_arm_and_k_selects_an_arm(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--condition", "D1,D4", "--schema", "all",
                                    "--sample", "1", "-p", "no:randomly")
    result.assert_outcomes(passed=5 * 8)
    recs = run_records(p)
    assert {r["condition"] for r in recs} == {"D1", "D1.tools", "D1.none", "D1.floor",
                                              "D4", "D4.tools", "D4.none", "D4.floor"}
    assert all(r["grade"] in ("correct", "blocked", "abstained") for r in recs)
    assert all(r["score"] == 1 for r in recs if r["score"] is not None)
    chosen = p.runpytest("questions", "--condition", "D1,D4", "--schema", "all", "--sample", "1",
                         "-k", "tools", "--collect-only", "-q")
    ids = [line for line in chosen.outlines if "::" in line]
    assert ids and all(".tools-" in line for line in ids) and len(ids) == 10
    marked = p.runpytest("questions", "--condition", "D1", "--schema", "all", "--sample", "1",
                         "-m", "none", "--collect-only", "-q", "--strict-markers")
    assert [line for line in marked.outlines if "::" in line] and all(
        "D1.none-" in line for line in marked.outlines if "::" in line)


def test_a_synthetic_schema_ablation_reports_the_cost_of_discovery(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "synthetic", "--condition", "D1",
                                    "--schema", "prompt,tools,none", "--ablation",
                                    "--synthetic", "*=0.9", "-p", "no:randomly")
    assert result.ret == 0
    run = next((p.path / "reports").iterdir())
    report = json.loads((run / "report.json").read_text())
    effort = {a: c["effort"] for a, c in report["conditions"].items()}
    # prompt and none make one call (the query); tools discovers first
    assert effort["D1"]["tool_calls"]["median"] == 1
    assert effort["D1.none"]["tool_calls"]["median"] == 1
    assert effort["D1.tools"]["tool_calls"]["median"] >= 3
    pair = next(c for c in report["comparisons"]
                if (c["a"], c["b"], c["tier"]) == ("D1", "D1.tools", "L3"))
    assert pair["tool_calls"]["mean_diff"] >= 2 and pair["tool_calls"]["wilcoxon_p"] < 0.05
    back = next(c for c in report["comparisons"]
                if (c["a"], c["b"], c["tier"]) == ("D1.tools", "D1.none", "L3"))
    assert back["tool_calls"]["mean_diff"] <= -2
    for page in ("report.md", "report.html"):
        text = (run / page).read_text()
        assert "What answering cost: tool calls, rounds, time" in text, page
        assert "tool calls b − a (Wilcoxon p)" in text, page
        assert f"{pair['tool_calls']['mean_diff']:+.2f}" in text, page


def test_the_paired_difference_of_calls() -> None:
    a = {"q1": [2, 2], "q2": [3], "q3": [1]}
    b = {"q1": [3, 3], "q2": [4], "q3": [2], "q4": [9]}  # q4 is unpaired: left out
    d = call_difference(a, b)
    assert d is not None
    assert d["n_questions"] == 3 and d["mean_diff"] == 1 and d["relative"] == round(3 / 6, 4)
    assert call_difference(a, a)["wilcoxon_p"] is None  # no difference: no test
    assert call_difference(a, {"q9": [1]}) is None


def test_asked_together_the_arm_holds_for_the_session(project, api) -> None:
    """One session answering two questions under D1.none: run_query alone (taking the
    question's id), no description, and each question's query banked with its item."""
    q1, q6 = credit_question("credit-Q01"), credit_question("credit-Q06")
    api.push(tool_use("run_query", {"query": q1.gold["sql"], "question": "credit-Q01"}),
             text("**credit-Q01.** A+.\n```json\n{\"credit-Q01\": {\"rating\": \"A+\"}, "
                  "\"credit-Q06\": {\"abstain\": true}}\n```"))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "--schema", "none",
                "--ask", "together", "-k", "Q01 or Q06").assert_outcomes(passed=2)
    assert len(api.requests) == 2
    first = api.requests[0]["body"]
    assert [t["name"] for t in first["tools"]] == ["run_query"]
    assert set(first["tools"][0]["input_schema"]["required"]) == {"query", "question"}
    sent = json.dumps(first["system"]) + json.dumps(first["messages"])
    assert not any(w in sent for w in SQL_DESCRIPTION)
    assert q6.id in sent
    recs = {r["question"]: r for r in run_records(p)}
    assert [c["name"] for c in recs["credit-Q01"]["answer"]["tool_calls"]] == ["run_query"]
    assert recs["credit-Q06"]["answer"]["tool_calls"] == []
    assert {r["condition"] for r in recs.values()} == {"D1.none"}


def test_the_openai_agent_gets_each_arms_tools_and_refuses_the_others(project, chat_api) -> None:
    """--agent openai under D1.none: run_query alone is offered, no description is sent, and
    a call to a tool the arm does not offer is answered as a call to no tool."""
    from fake_openai import text as chat_text
    from fake_openai import tool_call

    q = credit_question("credit-Q01")
    chat_api.push(tool_call("list_tables", {}), tool_call("run_query", {"query": q.gold["sql"]}),
                  chat_text("Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    p.runpytest("questions", "--agent", "openai", "--base-url", chat_api.url, "--model",
                "gpt-test-1", "--condition", "D1", "--schema", "none", "-k", "Q01",
                "--no-cache").assert_outcomes(passed=1)
    first = chat_api.requests[0]["body"]
    assert [t["function"]["name"] for t in first["tools"]] == ["run_query"]
    sent = json.dumps(first["messages"])
    assert not any(w in sent for w in SQL_DESCRIPTION)
    calls = run_records(p)[0]["answer"]["tool_calls"]
    assert [c["name"] for c in calls] == ["list_tables", "run_query"]
    assert calls[0]["output"].startswith("ERROR: no tool named 'list_tables'")
