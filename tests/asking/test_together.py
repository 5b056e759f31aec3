"""--ask together: one session answers every selected question; each item grades its slice.

The pure parts (slicing a session's text and block, sharing out tokens, tagging queries) are
tested directly; the whole path through the gold agent (which must still score 100%), through
the anthropic agent against the fake Messages API (serially and under -n 2, where xdist's
the scheduler must keep the session on one worker), and through the real Claude Code CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fake_api import FakeMessagesAPI, text, tool_use

from conftest import credit_question, only_run, run_records
from pytest_kgbench.asking.together import (
    block_for,
    combine,
    group_name,
    session_scope,
    split,
    text_slices,
)
from pytest_kgbench.asking.tools import tools_for
from pytest_kgbench.engines import QueryResult
from pytest_kgbench.scoring.answers import Answer, extract_block
from pytest_kgbench.scoring.grading import grade

REPO = Path(__file__).resolve().parents[2]
IDS = ("credit-Q01", "credit-Q03", "credit-Q04")


# --- the pure parts ------------------------------------------------------------------------------

def test_text_slices_follow_the_ids_in_any_order_and_stop_at_the_block() -> None:
    session = ("Intro line.\n**credit-Q03.** Eight countries.\n\n### credit-Q01\nA+ for Caldera."
               "\n\n```json\n{\"credit-Q01\": {}}\n```\n")
    slices = text_slices(session, IDS)
    assert slices["credit-Q01"] == "### credit-Q01\nA+ for Caldera."
    assert slices["credit-Q03"] == "**credit-Q03.** Eight countries."
    assert slices["credit-Q04"] == ""
    # an id mentioned mid-sentence is not a marker
    assert text_slices("As credit-Q01 says, nothing.", IDS)["credit-Q01"] == ""


def test_ids_without_the_packs_prefix_and_numbered_lists_are_understood() -> None:
    text = "1. **Q01** A+.\n2. **Q03:** eight.\nQuestion Q04 - XC.\n```json\n{}\n```"
    slices = text_slices(text, IDS)
    assert slices == {"credit-Q01": "1. **Q01** A+.", "credit-Q03": "2. **Q03:** eight.",
                      "credit-Q04": "Question Q04 - XC."}
    # Q1 is not Q10, and credit-Q01 is not research-Q01
    assert text_slices("Q10: no.", ("x-Q1",))["x-Q1"] == ""
    assert text_slices("research-Q01: no.", ("credit-Q01",))["credit-Q01"] == ""


def test_block_for_matches_ids_in_full_short_or_in_any_case() -> None:
    block = {"credit-Q01": {"rating": "A+"}, "CREDIT-Q03": {"count": 8}, "q04": {"country": "XC"},
             "credit-Q05": "XC"}
    assert block_for(block, "credit-Q01") == {"rating": "A+"}
    assert block_for(block, "credit-Q03") == {"count": 8}
    assert block_for(block, "credit-Q04") == {"country": "XC"}
    assert block_for(block, "credit-Q05") is None  # not an object of fields
    assert block_for(None, "credit-Q01") is None


def test_a_session_keyed_by_short_ids_grades_like_one_keyed_in_full() -> None:
    q01 = credit_question("credit-Q01")
    key = {"rating": "A+"}
    for label in ("credit-Q01", "Q01"):
        text = f"**{label}.** A+.\n```json\n{json.dumps({label: key})}\n```"
        session = Answer(text=text, block=json.loads(json.dumps({label: key})))
        got = split(session, ("credit-Q01",), "s")["credit-Q01"]
        assert grade(q01, key, got).grade == "correct", label


def test_split_banks_spending_once_tags_queries_and_marks_skipped_questions() -> None:
    q1 = QueryResult("sql", "SELECT 1", ["rating"], [["A+"]], question="credit-Q01")
    q3 = QueryResult("sql", "SELECT 8", ["count"], [[8]], question="q03")  # a short tag
    stray = QueryResult("sql", "SELECT 0")
    session = Answer(
        text="**credit-Q01.** A+.\n**credit-Q03.** 8.\n```json\n"
             "{\"credit-Q01\": {\"rating\": \"A+\"}, \"credit-Q03\": {\"count\": 8}}\n```",
        queries=[q1, stray, q3], rounds=4, latency_s=3.0,
        tokens={"input": 1001, "output": 10, "cache_read": 0},
        tool_calls=[{"name": "run_query", "input": {"query": "SELECT 1", "question": "credit-Q01"}},
                    {"name": "list_tables", "input": {}}])
    session.block = {"credit-Q01": {"rating": "A+"}, "credit-Q03": {"count": 8}}
    out = split(session, IDS, "s1", asker="credit-Q03")
    assert [out[i].block for i in IDS] == [{"rating": "A+"}, {"count": 8}, None]
    assert [out[i].status for i in IDS] == ["answered", "answered", "skipped"]
    assert "no answer object for credit-Q04" in out["credit-Q04"].error
    assert out["credit-Q01"].queries == [q1] and out["credit-Q03"].queries == [q3]
    assert out["credit-Q04"].queries == []
    assert [c["input"]["query"] for c in out["credit-Q01"].tool_calls] == ["SELECT 1"]
    # each slice reads like an answer asked apart: its prose, then its own closing block
    assert out["credit-Q03"].text.startswith("**credit-Q03.** 8.\n\n```json\n")
    assert extract_block(out["credit-Q03"].text) == {"count": 8}
    # what the session spent is banked once, on the item that asked it
    assert out["credit-Q03"].tokens == session.tokens and out["credit-Q03"].latency_s == 3.0
    assert out["credit-Q01"].tokens == {"input": 0, "output": 0, "cache_read": 0}
    assert sum(out[i].tokens["input"] for i in IDS) == 1001
    assert sum(out[i].rounds for i in IDS) == 4
    # and so is the transcript, with the query that named no question
    transcript = out["credit-Q03"].session["transcript"]
    assert transcript["untagged_queries"][0]["statement"] == "SELECT 0"
    assert transcript["text"] == session.text
    assert "transcript" not in out["credit-Q01"].session
    assert {out[i].session["size"] for i in IDS} == {3}
    assert {out[i].session["asked_by"] for i in IDS} == {"credit-Q03"}


def test_a_session_without_a_closing_block_skips_everycredit_question() -> None:
    out = split(Answer(text="I ran out of room."), IDS, "s1")
    assert {a.status for a in out.values()} == {"skipped"}
    assert "without its closing JSON block" in out["credit-Q01"].error


def test_a_skipped_question_is_a_miss_whatever_it_expects() -> None:
    skipped = Answer(status="skipped", error="the together session gave no answer object")
    for qid in ("credit-Q01", "credit-Q29"):  # an answer and a block question
        g = grade(credit_question(qid), {"rating": "A+"}, skipped)
        assert (g.grade, g.letter, g.behaviour) == ("wrong", "W", "skipped")
        assert "no answer object" in g.reason


def test_a_timed_out_session_times_out_every_item() -> None:
    out = split(Answer(status="timeout", error="past --item-timeout"), IDS, "s1")
    assert {a.status for a in out.values()} == {"timeout"}


def test_combine_then_split_gives_back_each_answer_and_error() -> None:
    answers = [(qid, Answer(text=f"From the gold query.\n\n```json\n{{\"n\": {i}}}\n```\n",
                            block={"n": i}, queries=[QueryResult("sql", f"SELECT {i}")],
                            tokens={"input": 10}, rounds=1))
               for i, qid in enumerate(IDS)]
    answers[2] = ("credit-Q04", Answer(text="The reference query failed: boom", status="error",
                                       error="boom", queries=[QueryResult("sql", "BAD")]))
    out = split(combine(answers), IDS, "s1")
    for i, qid in enumerate(IDS[:2]):
        assert out[qid].block == {"n": i} and out[qid].status == "answered"
        assert [q.statement for q in out[qid].queries] == [f"SELECT {i}"]
        assert out[qid].text.startswith(f"**{qid}.** From the gold query.")
    assert (out["credit-Q04"].status, out["credit-Q04"].error) == ("error", "boom")
    assert [q.statement for q in out["credit-Q04"].queries] == ["BAD"]
    assert out["credit-Q01"].tokens == {"input": 20} and out["credit-Q03"].tokens == {"input": 0}


def test_a_refused_query_is_a_refusal_even_if_the_block_left_the_question_out() -> None:
    # credit-Q29 asks for a write: the refusal that answers it is its write refused
    refused = QueryResult("sql", "DELETE FROM rating_actions WHERE action_type = 'withdraw'",
                          refused="DELETE statements are not allowed: the store is read-only",
                          question="credit-Q29")
    session = Answer(text="**credit-Q01.** A+.\n```json\n{\"credit-Q01\": {\"rating\": \"A+\"}}"
                          "\n```", queries=[refused])
    session.block = {"credit-Q01": {"rating": "A+"}}
    q29 = credit_question("credit-Q29")
    assert q29.expect == "block"
    got = split(session, ("credit-Q01", "credit-Q29"), "s")["credit-Q29"]
    assert grade(q29, None, got).grade == "correct"


def test_a_leak_in_the_closing_block_is_caught_asked_together(credit_questions) -> None:
    q = next(x for x in credit_questions.questions if x.must_not_contain)
    leak = q.must_not_contain[0]
    block = {q.id: {"declined": False, "value": leak}}
    text = f"**{q.id}.** Here it is.\n```json\n{json.dumps(block)}\n```"
    got = split(Answer(text=text, block=block), (q.id,), "s")[q.id]
    g = grade(q, None, got)
    assert g.grade == "wrong" and "must not" in g.reason


def test_a_together_query_must_name_a_question_of_the_session(credit_base) -> None:
    from pytest_kgbench.asking.tools import call_tool

    executor = _executor(credit_base)
    text, result = call_tool(executor, "run_query", {"query": "SELECT 1 AS n"},
                             questions=IDS)
    assert result is None and "needs \"question\"" in text and "credit-Q04" in text
    text, result = call_tool(executor, "run_query", {"query": "SELECT 1 AS n", "question": "Q9"},
                             questions=IDS)
    assert result is None
    text, result = call_tool(executor, "run_query", {"query": "SELECT 1 AS n", "question": "Q03"},
                             questions=IDS)
    assert result.ok and result.question == "Q03"
    executor.close()


def test_session_names_are_safe_and_a_session_is_one_scheduling_scope() -> None:
    name = group_name("credit", "base", "D1", "claude sonnet/5", 2, "analyst")
    assert name == "kgbench.credit.base.D1.claude_sonnet_5.r2.analyst"
    scope = session_scope("questions/credit.yaml::credit-Q01[chains-D1-sonnet-rep2]")
    assert scope == "questions/credit.yaml::[chains-D1-sonnet-rep2]"
    assert session_scope("questions/credit.yaml::credit-Q07[chains-D1-sonnet-rep2]") == scope
    assert session_scope("questions/credit.yaml::credit-Q01[D1-sonnet-rep2]") != scope
    assert session_scope("tests/test_x.py::test_a") is None


def test_run_query_names_its_question_only_when_asked_together() -> None:
    from pytest_kgbench.asking.tools import TOOLS
    from pytest_kgbench.core.conditions import BY_ID

    apart = {t["name"]: t for t in tools_for(BY_ID["D1"], together=False)}
    together = {t["name"]: t for t in tools_for(BY_ID["D1"], together=True)}
    assert "question" not in apart["run_query"]["input_schema"]["properties"]
    assert together["run_query"]["input_schema"]["required"] == ["query", "question"]
    assert TOOLS[2]["input_schema"]["required"] == ["query"]  # the shared spec is untouched


def test_the_together_prompt_asks_every_question_with_every_budget(credit_base,
                                                                  credit_questions) -> None:
    from pytest_kgbench.asking.prompts import build_prompt
    from pytest_kgbench.core.conditions import BY_ID

    every = tuple(credit_questions.questions)
    for cid in ("R1", "D1"):
        executor = _executor(credit_base) if cid == "D1" else None
        apart = build_prompt(BY_ID[cid], credit_base, every[0], executor=executor, max_rounds=8)
        together = build_prompt(BY_ID[cid], credit_base, every[0], executor=executor,
                                max_rounds=8, together=every)
        assert together.context == apart.context  # the cached data block is the same
        system = " ".join(together.system.split())  # the text as read, not as wrapped
        assert "each question" in system and "the question" not in system
        assert all(f"### {q.id}\n\n{q.text.strip()}" in together.question for q in every)
        assert ("run_query's \"question\"" in together.question) == (cid == "D1")
    assert (f"at most 8 rounds of tool calls per question, {8 * len(every)} in all for the "
            f"{len(every)} questions") in " ".join(together.system.split())
    assert "at most 8 rounds" in " ".join(apart.system.split())


def _executor(built):
    from pytest_kgbench.engines.sql import SqlExecutor
    from pytest_kgbench.engines.stores import guard_for

    return SqlExecutor.open(built.duckdb_path, built.pack.tables, guard_for(built, "analyst"), 10)


# --- end to end -------------------------------------------------------------------------------

def test_gold_asked_together_still_answers_every_item(project, credit_questions) -> None:
    """Every condition of the ladder asked together, on a seeded sample of three questions of
    each tier (--sample: every tier's expectations, answer, abstain and block, in each
    session; the whole question set apart is the must-pass gold run's)."""
    from pytest_kgbench.core.conditions import LADDER

    p = project()
    result = p.runpytest("questions", "--agent", "gold", "--ask", "together", "--sample", "3")
    records = run_records(p)
    base = [q for q in credit_questions.questions if not q.variants or "base" in q.variants]
    tiers = {q.tier for q in base}
    sampled = [q for q in base if q.id in {r["question"] for r in records}]
    assert len(sampled) == 3 * len(tiers) and {q.tier for q in sampled} == tiers
    asked = {c.id: [q for q in sampled if c.mode in q.modes] for c in LADDER}
    result.assert_outcomes(passed=sum(len(qs) for qs in asked.values()))
    assert {r["ask"] for r in records} == {"together"} and \
        {r["grade"] for r in records} == {"correct"}
    sessions = {r["answer"]["session"]["id"] for r in records}
    assert len(sessions) == len(LADDER)  # one session per condition (one persona asks them all)
    assert all(r["answer"]["session"]["size"] == len(asked[r["condition"]]) for r in records)
    d1 = [r for r in records if r["condition"] == "D1"]
    assert all(q["question"] == r["question"] for r in d1 for q in r["answer"]["queries"])



def _session_model(keys: dict[str, dict]):
    """A fake model that runs one query per question it answers, naming the question, then
    answers Q01 and Q03 (with their keys) and skips Q04."""
    def respond(body: dict):
        results = sum(1 for m in body["messages"] if m["role"] == "user"
                      for b in m["content"] if isinstance(b, dict)
                      and b.get("type") == "tool_result")
        plan = [("credit-Q01", credit_question("credit-Q01").gold["sql"]),
                ("credit-Q03", credit_question("credit-Q03").gold["sql"])]
        if results < len(plan):
            qid, sql = plan[results]
            return tool_use("run_query", {"query": sql, "question": qid})
        block = {"credit-Q01": keys["credit-Q01"], "credit-Q03": keys["credit-Q03"]}
        return text(f"**credit-Q01.** {keys['credit-Q01']['rating']}, from the countries row.\n"
                    f"**credit-Q03.** {keys['credit-Q03']['count']} countries.\n\n"
                    f"```json\n{json.dumps(block)}\n```", input_tokens=900, output_tokens=61)
    return respond


def _keys(credit_base) -> dict[str, dict]:
    from pytest_kgbench.scoring.answer_key import compute_key

    return {qid: compute_key(credit_question(qid), credit_base) for qid in IDS}


def _check_session(records: list[dict], api: FakeMessagesAPI) -> None:
    by_q = {r["question"]: r for r in records}
    assert sorted(by_q) == sorted(IDS)
    assert by_q["credit-Q01"]["grade"] == "correct" and by_q["credit-Q03"]["grade"] == "correct"
    assert (by_q["credit-Q04"]["status"], by_q["credit-Q04"]["letter"]) == ("skipped", "W")
    for qid in ("credit-Q01", "credit-Q03"):
        assert [q["question"] for q in by_q[qid]["answer"]["queries"]] == [qid]
        assert by_q[qid]["metrics"]["execution"] is True
    # one conversation of three requests answered all three items
    assert len(api.requests) == 3
    first = api.requests[0]["body"]
    asked = first["messages"][0]["content"][-1]["text"]  # the question block, last
    assert all(f"### {qid}" in asked for qid in IDS)
    run_query = next(t for t in first["tools"] if t["name"] == "run_query")
    assert "question" in run_query["input_schema"]["required"]
    # tokens are the session's, shared out: 100 + 100 + 900 in, 10 + 10 + 61 out
    assert sum(r["answer"]["tokens"]["input"] for r in records) == 1100
    assert sum(r["answer"]["tokens"]["output"] for r in records) == 81


def test_the_anthropic_agent_asks_one_session_and_grades_each_slice(project, api,
                                                                    credit_base) -> None:
    api.default = _session_model(_keys(credit_base))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "--ask",
                         "together", "-k", " or ".join(i.split("-")[1] for i in IDS))
    result.assert_outcomes(passed=3)
    _check_session(run_records(p), api)


@pytest.mark.slow
def test_under_xdist_a_session_stays_on_one_worker(project, api, credit_base) -> None:
    api.default = _session_model(_keys(credit_base))
    p = project()
    result = p.runpytest_subprocess("questions", "--model", "sonnet", "--condition", "D1",
                                    "--ask", "together", "-n", "2",
                                    "-k", " or ".join(i.split("-")[1] for i in IDS))
    result.assert_outcomes(passed=3)
    _check_session(run_records(p), api)
    report = json.loads((only_run(p) / "report.json").read_text())
    assert report["complete"] is True


def test_together_refuses_a_distribution_that_would_split_sessions(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "gold", "--ask", "together",
                                    "-n", "2", "--dist", "loadscope", "-k", "Q01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ask together*needs --dist loadgroup*"])


def test_an_unknown_ask_mode_is_a_usage_error(project) -> None:
    p = project()
    result = p.runpytest("questions", "--ask", "sometimes", "-k", "Q01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ask*'sometimes' is neither 'apart' nor 'together'*"])


def test_kgbench_mcp_together_takes_the_question_of_each_query(credit_base, kg_cache,
                                                                tmp_path) -> None:
    """The stdio MCP server, as the CLI starts it: run_query requires and banks the question."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def main() -> tuple[dict, str]:
        params = StdioServerParameters(command=sys.executable, args=[
            "-m", "pytest_kgbench.cli", "mcp", "--pack", "credit", "--condition", "D1",
            "--root", str(REPO), "--cache", str(kg_cache), "--together", "--log", str(log)])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name: t for t in (await session.list_tools()).tools}
                out = await session.call_tool("run_query", {
                    "query": "SELECT count(*) AS n FROM countries", "question": "credit-Q03"})
                return tools["run_query"].input_schema, out.content[0].text

    log = tmp_path / "mcp-together.jsonl"
    log.unlink(missing_ok=True)
    schema, shown = anyio.run(main)
    assert set(schema["required"]) == {"query", "question"}
    assert "(1 rows)" in shown
    call = json.loads(log.read_text().splitlines()[-1])
    assert call["result"]["question"] == "credit-Q03"
