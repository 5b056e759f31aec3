"""The openai agent through the real `openai` SDK against a fake OpenAI-compatible Chat
Completions API on 127.0.0.1 (tests/fake_openai.py): the tool loop, the last-round rule, the
settings it sends, every fault class with what it does to the run, and its cost."""

from __future__ import annotations

import json

import pytest
from fake_openai import (
    LOCAL_TOO_LONG,
    local_too_long,
    stall,
    status,
    text,
    tool_call,
    trickle,
    unauthorized,
)

from conftest import credit_question, only_run, run_records, wait_until

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"


def ask(p, api, *args: str):
    return p.runpytest("questions", "--agent", "openai", "--base-url", api.url,
                       "--model", "gpt-test-1", *args)


def test_a_querying_item_answers_through_tool_calls(project, chat_api) -> None:
    q = credit_question("credit-Q01")
    chat_api.push(tool_call("list_tables", {}), tool_call("describe", {"name": "countries"}),
                  tool_call("run_query", {"query": q.gold["sql"]}, id="call_q"),
                  text("Caldera's sovereign rating is A+ (countries row XC).\n"
                       "```json\n{\"rating\": \"A+\", \"definitions_used\": []}\n```",
                       prompt_tokens=500, cached_tokens=300))
    p = project()
    ask(p, chat_api, "--condition", "D1", "-k", "Q01").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["answer"]["rounds"] == 4
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["list_tables", "describe",
                                                                "run_query"]
    assert rec["answer"]["queries"][0]["reads"] == ["countries"]
    # prompt tokens served from the provider's cache are cache reads, the rest plain input
    assert rec["answer"]["tokens"] == {"input": 300 + 200, "output": 50, "cache_read": 300,
                                       "cache_write": 0}
    assert rec["grade"] == ("correct" if rec["key"]["rating"] == "A+" else "wrong")
    assert rec["agent"] == "openai" and rec["sent"]["backend"] == "chat-completions"
    first = chat_api.requests[0]["body"]
    assert first["model"] == "gpt-test-1" and first["max_tokens"] == 4096
    assert "max_completion_tokens" not in first  # a compatible server takes max_tokens
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "### countries" in first["messages"][1]["content"] or \
        "countries" in first["messages"][1]["content"]
    assert {t["type"] for t in first["tools"]} == {"function"}
    assert {t["function"]["name"] for t in first["tools"]} == {"list_tables", "describe",
                                                               "run_query"}
    assert first["tools"][2]["function"]["parameters"]["required"] == ["query"]
    # each tool result went back as a `tool` message answering its call
    last = chat_api.requests[-1]["body"]["messages"]
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert len(tool_msgs) == 3 and tool_msgs[-1]["tool_call_id"] == "call_q"
    assert "rows" in tool_msgs[-1]["content"]
    calls = [m for m in last if m["role"] == "assistant"]
    assert calls[-1]["tool_calls"][0]["function"]["name"] == "run_query"


def test_the_last_round_forbids_tools_and_says_so(project, chat_api) -> None:
    chat_api.default = lambda body: (
        tool_call("list_tables", {}) if body.get("tool_choice") != "none"
        else text("Out of rounds.\n```json\n{\"rating\": null}\n```"))
    p = project()
    ask(p, chat_api, "--condition", "D1", "-k", "Q01", "--max-rounds", "2"
        ).assert_outcomes(passed=1)
    assert len(chat_api.requests) == 3
    assert [r["body"].get("tool_choice") for r in chat_api.requests] == [None, None, "none"]
    last = chat_api.requests[-1]["body"]["messages"]
    assert last[-1] == {"role": "user", "content": "You have used your last round of tools. "
                                                   "Answer now, from what you have."}
    assert run_records(p)[0]["answer"]["rounds"] == 3


def test_malformed_tool_arguments_are_an_error_the_model_reads(project, chat_api) -> None:
    chat_api.push(tool_call("run_query", "{\"query\": \"SELECT", id="call_bad"), text(A_PLUS))
    p = project()
    ask(p, chat_api, "--condition", "D1", "-k", "Q01").assert_outcomes(passed=1)
    tool_msg = next(m for m in chat_api.requests[1]["body"]["messages"] if m["role"] == "tool")
    assert tool_msg["tool_call_id"] == "call_bad"
    assert tool_msg["content"].startswith("ERROR: the tool call's arguments are not JSON")


def test_a_tool_call_cut_at_the_limit_goes_back_as_valid_json(project, chat_api) -> None:
    """A tool call cut at max_tokens has arguments that are not JSON. The conversation sent
    back holds them as `{}` (the tool's result says what they were), for llama.cpp's server
    answers a 500 to arguments it cannot parse: the item would be retried and never graded."""
    chat_api.strict_arguments = True
    cut = tool_call("run_query", "{\"query\": \"SELECT name FR", id="call_cut")
    cut["finish_reason"] = "length"
    chat_api.push(cut, text(A_PLUS))
    p = project()
    ask(p, chat_api, "--condition", "D1", "-k", "Q01").assert_outcomes(passed=1)
    assert not any("refused" in r for r in chat_api.requests)  # no 500 was needed
    sent = chat_api.requests[1]["body"]["messages"]
    call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    assert call["id"] == "call_cut" and call["function"]["arguments"] == "{}"
    result = next(m for m in sent if m["role"] == "tool")["content"]
    assert result.startswith("ERROR: the tool call's arguments are not JSON")
    assert '{"query": "SELECT name FR' in result
    assert run_records(p)[0]["answer"]["rounds"] == 2


def test_a_reading_item_sends_and_records_its_sampling_settings(project, chat_api) -> None:
    chat_api.push(text(A_PLUS))
    p = project()
    ask(p, chat_api, "--condition", "R1", "-k", "Q01", "--temperature", "0.2",
        "--top-p", "0.9").assert_outcomes(passed=1)
    body = chat_api.requests[0]["body"]
    assert "tools" not in body and body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert "### countries.csv" in body["messages"][1]["content"]
    sent = run_records(p)[0]["sent"]
    assert (sent["temperature"], sent["top_p"], sent["base_url"]) == (0.2, 0.9, chat_api.url)
    assert sent["calls"][0]["stop_reason"] == "stop" and sent["calls"][0]["request_id"]


def test_openai_itself_gets_max_completion_tokens(monkeypatch, chat_api) -> None:
    """Without --base-url the agent talks to OpenAI, whose reasoning models refuse max_tokens
    (the SDK's OPENAI_BASE_URL points it at the fake here)."""
    from pytest_kgbench.agents.models.openai import OpenAIAgent
    from pytest_kgbench.core.settings import Settings

    monkeypatch.setenv("OPENAI_BASE_URL", chat_api.url)
    agent = OpenAIAgent(Settings.at(".", agent="openai", models=("gpt-test-1",),
                                    max_tokens=77, effort="low"))
    chat_api.push(text("fine"))
    out = agent.complete("system", "hello", model="gpt-test-1", max_tokens=77, timeout=10)
    body = chat_api.requests[0]["body"]
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body
    assert body["reasoning_effort"] == "low"
    assert out.text == "fine" and out.tokens == {"input": 100, "output": 20}
    assert chat_api.requests[0]["headers"]["authorization"] == "Bearer sk-test-not-a-secret"


def test_a_500_mid_run_without_the_cache_banks_only_the_rerun(project, chat_api) -> None:
    q = credit_question("credit-Q01")
    chat_api.push(tool_call("list_tables", {}), status(500), status(502), status(503),
                  tool_call("run_query", {"query": q.gold["sql"]}), text(A_PLUS))
    p = project()
    outcomes = ask(p, chat_api, "--condition", "D1", "-k", "Q01", "--no-cache").parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("rerun") == 1, outcomes
    (rec,) = run_records(p)
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["run_query"]
    assert rec["answer"]["rounds"] == 2 and rec["sent"]["response_cache"]["hits"] == 0
    assert not (p.path / ".kgbench-responses").exists()


def test_a_500_the_retries_outlast_is_no_rerun(project, chat_api) -> None:
    chat_api.push(status(500), text(A_PLUS))
    p = project()
    outcomes = ask(p, chat_api, "--condition", "R1", "-k", "Q01").parseoutcomes()
    assert outcomes["passed"] == 1 and "rerun" not in outcomes
    assert len(chat_api.requests) == 2


def test_401_halts_the_run_and_keeps_what_was_banked(project, chat_api) -> None:
    chat_api.push(text(A_PLUS), unauthorized())
    p = project()
    result = ask(p, chat_api, "--condition", "R1", "-k", "Q01 or Q03 or Q04")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*rejected the credential (401)*"])
    assert [a["question"] for a in run_records(p)] == ["credit-Q01"]
    assert len(chat_api.requests) == 2  # not retried, and nothing asked after it
    report = json.loads((only_run(p) / "report.json").read_text())
    assert not report["complete"] and len(report["missing"]) == 2


def test_an_exhausted_quota_halts_rather_than_retrying(project, chat_api) -> None:
    chat_api.push(status(429, type="insufficient_quota", error_code="insufficient_quota",
                         message="You exceeded your current quota, please check your plan."))
    p = project()
    result = ask(p, chat_api, "--condition", "R1", "-k", "Q01")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*cannot pay*"])
    assert len(chat_api.requests) == 1


@pytest.mark.parametrize("server", sorted(LOCAL_TOO_LONG))
def test_a_local_servers_too_long_is_skipped_as_the_providers_is(project, chat_api,
                                                                 server) -> None:
    """llama.cpp's 400 exceed_context_size_error was read as a malformed request and halted
    the run; each local server's own body for a prompt past its context is a skip."""
    chat_api.push(local_too_long(server), text(A_PLUS))
    p = project()
    result = ask(p, chat_api, "--condition", "R1", "-k", "Q01 or Q03")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == 0
    assert len(chat_api.requests) == 2  # not retried; the run went on
    report = json.loads((only_run(p) / "report.json").read_text())
    (skipped,) = report["skipped"]
    assert skipped["reason"].startswith("the prompt is longer than the model accepts (400)")
    body = LOCAL_TOO_LONG[server][1]
    said = body.get("error", body)
    said = said if isinstance(said, str) else said["message"]
    assert said[:40] in skipped["reason"]


def test_a_stall_past_the_item_timeout_is_a_timeout_grade(project, chat_api) -> None:
    chat_api.push(stall(30))
    p = project()
    ask(p, chat_api, "--condition", "R1", "-k", "Q01", "--item-timeout", "1"
        ).assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["status"] == "timeout" and rec["letter"] == "T" and rec["grade"] == "wrong"
    # it ended before the stalled reply came (30 s), and sent no retry past its deadline
    assert rec["elapsed_s"] < 30 and len(chat_api.requests) == 1


def test_a_reply_that_trickles_is_cut_at_the_item_deadline(project, chat_api) -> None:
    """Headers at once, then the completion a byte every 0.1 s: the HTTP client's timeout
    bounds each read, never the whole; the item's deadline does (test_faults.py has the
    anthropic agent's)."""
    chat_api.default = lambda body: trickle(text(A_PLUS), every=0.1)
    p = project()
    ask(p, chat_api, "--condition", "R1", "-k", "Q01", "--item-timeout", "2"
        ).assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"], rec["grade"]) == ("timeout", "T", "wrong")
    assert wait_until(lambda: all(t["done"] for t in chat_api.trickles),
                      timeout=max(t["size"] for t in chat_api.trickles) * 0.5)
    assert chat_api.trickles and all(t["sent"] < t["size"] for t in chat_api.trickles), \
        chat_api.trickles


def test_chat_tools_translate_every_tool_spec() -> None:
    from pytest_kgbench.agents.models.openai import chat_tools
    from pytest_kgbench.asking.tools import TOOLS

    out = chat_tools(list(TOOLS))
    assert [t["function"]["name"] for t in out] == [t["name"] for t in TOOLS]
    assert all(t["type"] == "function" for t in out)
    assert [t["function"]["parameters"] for t in out] == [t["input_schema"] for t in TOOLS]


