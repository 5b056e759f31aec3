"""The claude-cli agent with the real Claude Code CLI, pointed at the fake Messages API on
127.0.0.1: a reading item, and querying items whose tool calls go through `kgbench mcp`."""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
from fake_api import (
    FakeMessagesAPI,
    bad_request,
    is_judge,
    stall_stream,
    status,
    text,
    too_long,
    tool_use,
    truncated,
)

from conftest import cli_session, credit_on_base, has_result, only_run, run_records
from pytest_kgbench.agents.models.claude_cli import MCP_TOOLS, ClaudeCliAgent, find_claude
from pytest_kgbench.core.errors import HarnessBroken, TransientModelError

REPO = Path(__file__).resolve().parents[2]
_BINARY = find_claude(str(REPO))
CLI_VERSION = (subprocess.run([_BINARY, "--version"], capture_output=True, text=True,
                              timeout=60).stdout.split()[0] if _BINARY else "")


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
    with cli_session(monkeypatch, tmp_path, scripted) as api:
        yield api


@pytest.mark.slow
def test_reading_and_querying_items_through_the_real_cli(project, cli) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1,D1", "-k", "L1")
    items = 2 * credit_on_base("L1")  # R1 and D1
    result.assert_outcomes(passed=items)
    records = run_records(p)
    assert len(records) == items and all(r["grade"] in ("correct", "partial", "wrong")
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


def _events(init: dict, result: dict):
    from pytest_kgbench.agents.models.claude_cli import Stream

    return Stream(init={"type": "system", "subtype": "init", **init},
                  results=[{"type": "result", **result}], returncode=0)


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
    from pytest_kgbench.agents.models import claude_cli

    init = {"mcp_servers": [], "tools": []}
    with pytest.raises(HarnessBroken, match="401"):
        ClaudeCliAgent._read(_events(init, {"is_error": True, "api_error_status": 401,
                                            "result": "Invalid API key"}), querying=False)
    with pytest.raises(TransientModelError):
        ClaudeCliAgent._read(_events(init, {"is_error": True, "api_error_status": 529,
                                            "result": "Overloaded"}), querying=False)
    with pytest.raises(HarnessBroken, match="no init or result"):
        ClaudeCliAgent._read(claude_cli.Stream(returncode=1, stderr="boom"), False)


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


# --- the CLI asks as the anthropic agent asks, and cannot lie about how it went -------------------

def bodies(api: FakeMessagesAPI) -> list[dict]:
    return [r["body"] for r in api.requests if not is_judge(r["body"])]


def test_a_slow_mcp_server_start_still_connects(project, cli, monkeypatch) -> None:
    """Claude Code 2.1 waits MCP_CONNECT_TIMEOUT_MS (5 s unless set; not MCP_TIMEOUT) for its
    MCP servers, then reports one still starting as `pending` and never looks again. A server
    4 s slow connected only while the machine was idle; this one is 8 s slow, past the CLI's
    own wait whatever the load, and connects because the agent lets the CLI wait the item's
    whole budget."""
    from pytest_kgbench.agents.models import claude_cli

    original = claude_cli.mcp_command

    def slow(*args, **kwargs):
        entry = original(*args, **kwargs)
        server = entry["mcpServers"]["kgbench"]
        inner = " ".join(shlex.quote(x) for x in [server["command"], *server["args"]])
        entry["mcpServers"]["kgbench"] = {"command": "sh", "args": ["-c", f"sleep 8; exec {inner}"]}
        return entry

    monkeypatch.setattr(claude_cli, "mcp_command", slow)
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "D1", "-k", "Q01")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["run_query"]
    assert rec["grade"] == ("correct" if rec["key"]["rating"] == "A+" else "wrong")


def test_claude_code_never_reads_the_users_own_instructions(project, cli, monkeypatch,
                                                            tmp_path) -> None:
    home_marker, above_marker = "MARKER-HOME-7f3a", "MARKER-ABOVE-9c1e"
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    (tmp_path / "home" / ".claude" / "CLAUDE.md").write_text(f"Always say {home_marker}.\n")
    above = tmp_path / "above"
    (above / "tmp").mkdir(parents=True)
    (above / "CLAUDE.md").write_text(f"Always say {above_marker}.\n")
    monkeypatch.setattr(tempfile, "tempdir", str(above / "tmp"))  # the items' folders go here
    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet", "--condition",
                "R1,D1", "-k", "Q01").assert_outcomes(passed=2)
    sent = json.dumps([r["body"] for r in cli.requests])
    assert len(cli.requests) >= 3  # the reading item, and the querying item's two rounds
    assert home_marker not in sent and above_marker not in sent
    assert "claudeMd" not in sent


def test_the_cli_asks_as_the_sdk_does_and_records_what_it_sent(project, cli) -> None:
    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "haiku", "--condition",
                "R1,D1", "-k", "Q01", "--effort", "low", "--max-tokens", "1000"
                ).assert_outcomes(passed=2)
    records = {r["condition"]: r for r in run_records(p)}
    run = only_run(p)
    for body in bodies(cli):
        assert body["model"] == "claude-haiku-5-5" and body["max_tokens"] == 1000
        assert body["output_config"] == {"effort": "low"}
        assert body.get("thinking", {"type": "disabled"}) == {"type": "disabled"}  # no thinking
    for cond, rec in records.items():
        context = (run / rec["prompt"]["context_file"]).read_text().split(
            "\n\n<!-- followed by")[0]

        def texts_of(body: dict) -> list[str]:
            return [x.get("text", "") for x in body["messages"][0]["content"]]

        first = next(b for b in bodies(cli) if rec["prompt"]["question"] in texts_of(b)
                     and any(t and context.endswith(t) for t in texts_of(b)))
        blocks = first["messages"][0]["content"]
        texts = texts_of(first)
        # the recorded prompt is the one sent: our system prompt, then the data block with its
        # own cache breakpoint (sibling items share it), then the question
        data = texts.index(next(t for t in texts if t and context.endswith(t)))
        assert blocks[data]["cache_control"] == {"type": "ephemeral"}
        assert texts[data + 1] == rec["prompt"]["question"]
        system = json.dumps(first["system"])
        assert json.dumps(context[:-len(texts[data])].strip())[1:-1] in system
        # the store is described once (the prompt), not also as the MCP server's instructions
        line = texts[data].splitlines()[2]
        assert json.dumps(first).count(json.dumps(line)[1:-1]) == 1, (cond, line)
        sent = rec["sent"]
        assert sent["backend"] == "claude-code"
        assert sent["client"] == "claude-code " + CLI_VERSION
        assert (sent["model"], sent["effort"], sent["max_tokens"], sent["stop_reason"]) == \
            ("claude-haiku-5-5", "low", 1000, "end_turn")
        assert {c["model"] for c in sent["calls"]} == {"claude-haiku-5-5"}
        assert all(c["message_id"].startswith("msg_") for c in sent["calls"])
    # the run's meta names the client the items went through, with its version
    assert json.loads((run / "meta.json").read_text())["clients"] == ["claude-code " + CLI_VERSION]


@pytest.mark.parametrize("condition", ["R1", "D1"])
def test_both_anthropic_backends_ask_the_same_way(project, cli, condition) -> None:
    """Claude Code puts a system block naming itself before our system prompt and a first user
    block with today's date (the credit questions are date-bound), and no option leaves them
    out: the anthropic agent sends the same, and both records say what was added."""
    import datetime as dt

    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet", "--condition",
                condition, "-k", "Q01", "--run-id", "cli").assert_outcomes(passed=1)
    asked = len(cli.requests)
    p.runpytest("questions", "--agent", "anthropic", "--model", "sonnet", "--condition",
                condition, "-k", "Q01", "--run-id", "sdk").assert_outcomes(passed=1)
    via_cli, via_sdk = cli.requests[0]["body"], cli.requests[asked]["body"]

    def system(body: dict) -> list[str]:  # less the CLI's billing marker, not a prompt
        return [b["text"] for b in body["system"]
                if not b["text"].startswith("x-anthropic-billing-header:")]

    def user(body: dict) -> list[str]:
        return [b["text"] for b in body["messages"][0]["content"]]

    assert system(via_cli) == system(via_sdk)
    assert system(via_sdk)[0] == "You are a Claude agent, built on Anthropic's Claude Agent SDK."
    assert user(via_cli) == user(via_sdk)
    today = dt.date.today().isoformat()
    assert f"Today's date is {today}." in user(via_sdk)[0]
    records = {run: json.loads((p.path / "reports" / run / "answers.jsonl").read_text())
               for run in ("cli", "sdk")}
    for run, rec in records.items():
        assert rec["sent"]["framing"]["identity"] == system(via_sdk)[0], run
        assert rec["sent"]["framing"]["date"] == today, run


def test_the_cli_gets_the_same_last_round_rule(project, cli) -> None:
    """--max-rounds 2: two rounds of tools, then LAST_ROUND; a tool call in the final turn is
    refused; the model's answer is the item's (Claude Code's --max-turns alone ended the
    session with no text)."""
    from pytest_kgbench.agents import LAST_ROUND

    def always_a_tool(body: dict):
        sent = json.dumps(body["messages"])
        if LAST_ROUND in sent and "REFUSED" in sent:
            return text("From what I have: A+.\n```json\n{\"rating\": \"A+\"}\n```")
        return tool_use("mcp__kgbench__run_query",
                        {"query": "SELECT sovereign_rating AS rating FROM countries "
                                  "WHERE name = 'Caldera'"})

    cli.default = always_a_tool
    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet", "--condition", "D1",
                "-k", "Q01", "--max-rounds", "2").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert len(rec["answer"]["queries"]) == 2  # two rounds ran; the final turn's call did not
    asked = bodies(cli)
    assert len(asked) == 4  # two rounds, the final turn's refused call, the answer
    last = asked[2]["messages"][-1]["content"]
    assert last[-1]["text"] == LAST_ROUND and last[0]["type"] == "tool_result"
    assert "REFUSED" in json.dumps(asked[3]["messages"][-1])
    assert rec["answer"]["block"] == {"rating": "A+"} and rec["sent"]["last_round"] is True
    assert rec["grade"] == ("correct" if rec["key"]["rating"] == "A+" else "wrong")


@pytest.mark.parametrize("step, ret, says", [
    (status(401, retry_after_ms=None, kind="authentication_error"), 3,
     "rejected the credential (401)"),
    (status(402, retry_after_ms=None, kind="billing_error"), 3, "cannot pay for the call"),
    (bad_request("Your credit balance is too low to access the Anthropic API."), 3,
     "cannot pay for the call"),
    (bad_request(), 3, "refused the request as malformed (400)"),
    (status(404, retry_after_ms=None, kind="not_found_error"), 3, "does not know this model"),
    (too_long(), 0, "SKIPPED*rompt is too long*"),
])
def test_the_clis_errors_are_not_grades(project, cli, step, ret, says) -> None:
    cli.default = lambda body: step
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1", "-k", "Q01 or Q03", "-rs")
    assert result.ret == ret, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines([f"*{says}*"])
    records = run_records(p) if (only_run(p) / "answers.jsonl").exists() else []
    if ret == 3:
        assert records == []  # halted at the first item, nothing graded
    else:
        assert [(r["status"], r["grade"], r["outcome"]) for r in records] == \
            [("skipped", "skipped", "skipped")] * 2


@pytest.mark.parametrize("code, kind", [(401, "authentication_error"),
                                        (403, "permission_error")])
def test_a_rejected_credential_stops_the_cli_at_once(project, cli, code, kind) -> None:
    """Claude Code retries a 401 (CLAUDE_CODE_MAX_RETRIES): two more calls that no retry can
    change. Its first retry event stops it, and the run halts."""
    cli.default = lambda body: status(code, retry_after_ms=None, kind=kind)
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1", "-k", "Q01")
    assert result.ret == 3
    result.stdout.fnmatch_lines([f"*harness is broken*rejected the credential ({code})*"])
    assert len(cli.requests) == 1


def test_not_logged_in_halts(project, cli, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1", "-k", "Q01 or Q03")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*Not logged in*"])
    assert cli.requests == []


def test_an_overloaded_api_is_rerun_never_graded(project, cli) -> None:
    cli.push(*[status(529, kind="overloaded_error")] * 3)
    cli.default = lambda body: text("A+.\n```json\n{\"rating\": \"A+\"}\n```")
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1", "-k", "Q01")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("rerun") == 1, outcomes
    assert len(cli.requests) == 4  # the CLI's call and its two retries, then the rerun's
    assert len(run_records(p)) == 1


def test_a_cut_answer_is_truncated_a_miss(project, cli) -> None:
    cli.default = lambda body: truncated("Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```"
                                         "\nand then")
    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet", "--condition", "R1",
                "-k", "Q01", "--max-tokens", "1000").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["grade"], rec["letter"]) == ("truncated", "wrong", "M")
    assert rec["sent"]["stop_reason"] == "max_tokens"
    assert "Caldera is rated A+." in rec["answer"]["text"]


def test_a_stalled_stream_is_a_timeout_within_the_item_budget(project, cli) -> None:
    cli.default = lambda body: stall_stream(60)
    p = project()
    p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet", "--condition", "D1",
                "-k", "Q01", "--item-timeout", "8").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"]) == ("timeout", "T")
    # the CLI was stopped at the deadline, long before the stalled stream (60 s) went on
    assert rec["answer"]["latency_s"] < 60


def test_a_cli_run_with_no_api_key_is_judged_through_the_cli(project, cli, monkeypatch) -> None:
    """A Claude Code user logged in with a token of their own (no ANTHROPIC_API_KEY): the judge
    asks through the CLI too, so the "why" answer is judged, not halted on."""
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-not-a-secret")
    cli.judge = lambda body: text('```json\n{"points": [true, false, true]}\n```')
    cli.default = lambda body: text(
        "A5720102936 and A4483374961 share an ORCID, so it is a self-citation.\n"
        "```json\n{\"counts\": \"no\", \"shared_person\": \"A5720102936\"}\n```")
    p = project()
    research = REPO / "questions" / "research.yaml"
    (p.path / "questions" / "research.yaml").write_text(research.read_text())
    result = p.runpytest("questions/research.yaml", "--agent", "claude-cli", "--model",
                         "sonnet", "--condition", "R1", "-k", "Q33")
    assert result.ret == 0, result.stdout.str()[-1500:]
    judge = run_records(p)[0]["metrics"]["judge"]
    assert judge["first"] == judge["second"] == [True, False, True]
    judged = [r for r in cli.requests if is_judge(r["body"])]
    assert len(judged) == 2
    assert all(r["headers"].get("Authorization", "").startswith("Bearer ") for r in judged)


def test_the_installed_cli_runs() -> None:
    """The README's npm command leaves a binary that runs: npm may skip the package's
    postinstall script, which puts the native binary over a placeholder that only says so."""
    from pytest_kgbench.agents.models.claude_cli import POSTINSTALL, cli_version

    version, said = cli_version(_BINARY)
    assert version and version[0].isdigit(), f"{_BINARY}: {said}; {POSTINSTALL}"


def test_a_cli_that_does_not_run_is_refused_before_the_run(project, tmp_path,
                                                          monkeypatch) -> None:
    """npm's placeholder (its postinstall skipped) answers every call with instructions: one
    line and exit 4 before anything runs, saying what to do, never a broken harness per item."""
    stub = tmp_path / "claude"
    stub.write_text("#!/bin/sh\necho 'Error: claude native binary not installed.' >&2\nexit 1\n")
    stub.chmod(0o755)
    monkeypatch.setenv("KGBENCH_CLAUDE", str(stub))
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--condition", "R1", "-k", "Q01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1 and "does not run" in err and "install.cjs" in err, err
    assert "native binary not installed" in err
    assert not (p.path / "reports").exists()


def test_an_effort_the_cli_cannot_take_is_refused_before_the_run(project) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "claude-cli", "--model", "sonnet",
                         "--effort", "turbo", "--condition", "R1", "-k", "Q01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().strip() == ("ERROR: --agent claude-cli: --effort turbo: the "
                                           "claude CLI takes low, medium, high, xhigh, max")
    assert not (p.path / "reports").exists()


def test_ctrl_c_during_a_session_stops_the_cli_and_what_it_started(tmp_path) -> None:
    """A KeyboardInterrupt while the CLI runs (the first Ctrl-C of a run) stops its process
    group, so neither Claude Code nor the MCP server it started runs on to the deadline."""
    import os
    import sys
    import time

    from pytest_kgbench.agents.models.claude_cli import converse

    pids = tmp_path / "pids"
    script = tmp_path / "fake_cli.py"
    script.write_text(
        "import json, os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init'}), flush=True)\n"
        "print(json.dumps({'type': 'result', 'result': 'x'}), flush=True)\n"
        "time.sleep(120)\n")

    def interrupted(stream):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        converse([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ), first="{}",
                 deadline=time.monotonic() + 120, follow_up=interrupted)
    for pid in map(int, pids.read_text().split()):
        for _ in range(100):  # reaped by its parent's exit: gone once the kill is delivered
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"process {pid} still runs after the interrupt")
