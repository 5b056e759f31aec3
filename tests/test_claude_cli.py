"""The claude-cli agent with the real Claude Code CLI, pointed at the fake Messages API on
127.0.0.1: a reading item, and querying items whose tool calls go through `kgbench mcp`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import run_records
from fake_api import FakeMessagesAPI, text, tool_use
from pytest_kgbench.agents.claude_cli import MCP_TOOLS, ClaudeCliAgent, find_claude
from pytest_kgbench.errors import HarnessBroken, TransientModelError

REPO = Path(__file__).resolve().parents[1]


def has_result(body: dict) -> bool:
    return any(isinstance(m.get("content"), list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"])
        for m in body.get("messages", []))


def scripted(body: dict):
    """List the tables, run one query, then answer with a closing JSON block."""
    tools = {t.get("name") for t in body.get("tools", [])}
    if set(MCP_TOOLS) <= tools and not has_result(body):
        return tool_use("mcp__kgbench__run_query",
                        {"query": "SELECT sovereign_rating AS rating FROM countries "
                                  "WHERE name = 'Caldera'"})
    return text("Caldera is rated as the countries table says.\n"
                "```json\n{\"rating\": \"A+\", \"count\": 8}\n```")


@pytest.fixture
def cli(monkeypatch, tmp_path):
    binary = find_claude(str(REPO))
    assert binary, ("the Claude Code CLI is needed for this test: "
                    "npm install --prefix .tools @anthropic-ai/claude-code")
    monkeypatch.setenv("KGBENCH_CLAUDE", binary)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with FakeMessagesAPI(scripted) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        yield api


def test_reading_and_querying_items_through_the_real_cli(project, cli) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1,D1", "-k", "L1")
    result.assert_outcomes(passed=8)
    records = run_records(p)
    assert len(records) == 8 and all(r["grade"] in ("correct", "partial", "wrong")
                                     for r in records)
    querying = [r for r in records if r["condition"] == "D1"]
    for r in querying:
        calls = r["answer"]["tool_calls"]
        assert [c["name"] for c in calls] == ["run_query"], r["nodeid"]
        assert r["answer"]["queries"][0]["rows"] == [[r["key"].get("rating", "A+")]] or \
            r["answer"]["queries"][0]["columns"] == ["rating"]
        assert r["answer"]["queries"][0]["reads"] == ["countries"]
    q01 = next(r for r in querying if r["question"] == "credit-Q01")
    assert q01["grade"] == ("correct" if q01["key"]["rating"] == "A+" else "wrong")
    reading = [r for r in records if r["condition"] == "R1"]
    assert all(r["answer"]["tool_calls"] == [] for r in reading)
    bodies = [req["body"] for req in cli.requests]
    assert any("### countries.csv" in json.dumps(b) for b in bodies)
    assert all(b["model"] == "claude-sonnet-5-5" for b in bodies)


def _events(init: dict, result: dict) -> subprocess.CompletedProcess[str]:
    out = "\n".join(json.dumps(e) for e in ({"type": "system", "subtype": "init", **init},
                                            {"type": "result", **result}))
    return subprocess.CompletedProcess(["claude"], 0, out, "")


def test_an_mcp_server_that_did_not_connect_breaks_the_harness() -> None:
    ok = {"result": "done", "is_error": False, "num_turns": 1, "usage": {}}
    with pytest.raises(HarnessBroken, match="did not connect"):
        ClaudeCliAgent._read(_events({"mcp_servers": [{"name": "kgbench", "status": "failed"}],
                                      "tools": list(MCP_TOOLS)}, ok), querying=True)
    with pytest.raises(HarnessBroken, match="did not connect"):
        ClaudeCliAgent._read(_events({"mcp_servers": [{"name": "kgbench", "status": "connected"}],
                                      "tools": []}, ok), querying=True)
    answer = ClaudeCliAgent._read(_events({"mcp_servers": [], "tools": []}, ok), querying=False)
    assert answer.text == "done"


def test_cli_faults_are_classified() -> None:
    init = {"mcp_servers": [], "tools": []}
    with pytest.raises(HarnessBroken, match="401"):
        ClaudeCliAgent._read(_events(init, {"is_error": True, "api_error_status": 401,
                                            "result": "Invalid API key"}), querying=False)
    with pytest.raises(TransientModelError):
        ClaudeCliAgent._read(_events(init, {"is_error": True, "api_error_status": 529,
                                            "result": "Overloaded"}), querying=False)
    with pytest.raises(HarnessBroken, match="no init or result"):
        ClaudeCliAgent._read(subprocess.CompletedProcess(["claude"], 1, "", "boom"), False)


def together_script(body: dict):
    """Asked together: one query per question, each naming its question, then both answers."""
    tools = {t.get("name") for t in body.get("tools", [])}
    done = sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    plan = [("credit-Q01", "SELECT sovereign_rating AS rating FROM countries "
                           "WHERE name = 'Caldera'"),
            ("credit-Q03", "SELECT count(*) AS count FROM countries")]
    if set(MCP_TOOLS) <= tools and done < len(plan):
        qid, sql = plan[done]
        return tool_use("mcp__kgbench__run_query", {"query": sql, "question": qid})
    return text("**credit-Q01.** A+, from the countries row.\n**credit-Q03.** Eight.\n\n"
                "```json\n{\"credit-Q01\": {\"rating\": \"A+\"}, \"credit-Q03\": {\"count\": 8}}"
                "\n```")


def test_a_together_session_through_the_real_cli(project, cli) -> None:
    cli.default = together_script
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "D1", "--ask", "together", "-k", "Q01 or Q03")
    result.assert_outcomes(passed=2)
    records = {r["question"]: r for r in run_records(p)}
    assert sorted(records) == ["credit-Q01", "credit-Q03"]
    for qid, r in records.items():
        assert [q["question"] for q in r["answer"]["queries"]] == [qid]
        assert r["answer"]["session"]["questions"] == ["credit-Q01", "credit-Q03"]
        field, value = ("rating", "A+") if qid == "credit-Q01" else ("count", 8)
        assert r["key"][field] == value  # the script answered the key, so the grade is C
        assert (r["grade"], r["letter"]) == ("correct", "C")
    assert records["credit-Q03"]["answer"]["queries"][0]["rows"] == \
        [[records["credit-Q03"]["key"]["count"]]]
    # one CLI session: the first model request asked both questions
    asked = [json.dumps(req["body"]) for req in cli.requests if "### credit-Q03" in
             json.dumps(req["body"])]
    assert asked and "### credit-Q01" in asked[0]
