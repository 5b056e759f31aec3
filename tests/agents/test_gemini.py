"""The gemini agent through the real `google-genai` SDK against a fake Gemini API on 127.0.0.1
(tests/fake_gemini.py): the tool loop in Gemini's own wire format, the last-round rule, the
settings it sends and the key where the SDK sends it, every fault class with what it does to
the run, the item's deadline against a stall and a trickle, and its tokens and cost. The
refusal and empty-reply rules every backend shares are in test_faults.py."""

from __future__ import annotations

import json

import pytest
from fake_gemini import (
    bad_key,
    bad_request,
    blocked,
    forbidden,
    function_call,
    function_responses,
    key_sent,
    malformed_call,
    not_found,
    route,
    stall,
    text,
    trickle,
    unauthenticated,
)
from peaks import Lateness

from conftest import credit_question, only_run, run_records, wait_until

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"
KEY = "gm-test-not-a-secret"  # the gemini_api fixture's GEMINI_API_KEY
SIGNATURE = "c2lnbmVkIGJ5IHRoZSBtb2RlbA=="  # a thought signature (base64), echoed verbatim


def ask(p, api, *args: str):
    return p.runpytest("questions", "--agent", "gemini", "--base-url", api.url,
                       "--model", "gemini-test-1", *args)


def declarations(body: dict) -> list[dict]:
    return [d for tool in body.get("tools") or [] for d in tool["functionDeclarations"]]


def schema_of(declaration: dict) -> dict:
    """A declaration's JSON schema, as the SDK spells the field (proto JSON takes both)."""
    return declaration.get("parametersJsonSchema") or declaration["parameters_json_schema"]


def mode(body: dict) -> str | None:
    return ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")


def test_a_querying_item_answers_through_function_calls(project, gemini_api) -> None:
    q = credit_question("credit-Q01")
    gemini_api.push(
        function_call("list_tables", None),  # a call without args (no parameters)
        function_call("describe", {"name": "countries"}, id="fc-describe"),
        function_call("run_query", {"query": q.gold["sql"]}, id="fc-query", signature=SIGNATURE),
        text("Caldera's sovereign rating is A+ (countries row XC).\n"
             "```json\n{\"rating\": \"A+\", \"definitions_used\": []}\n```",
             prompt_tokens=500, cached_tokens=300, thoughts_tokens=7))
    p = project()
    ask(p, gemini_api, "--condition", "D1", "-k", "Q01").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["grade"] == ("correct" if rec["key"]["rating"] == "A+" else "wrong")
    assert rec["answer"]["block"]["rating"] == "A+" and rec["answer"]["rounds"] == 4
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["list_tables", "describe",
                                                                "run_query"]
    assert rec["answer"]["queries"][0]["reads"] == ["countries"]
    # cached prompt tokens are cache reads, the rest input; the thoughts are billed output
    assert rec["answer"]["tokens"] == {"input": 3 * 100 + 200, "output": 3 * 10 + 20 + 7,
                                       "cache_read": 300, "cache_write": 0}
    assert rec["agent"] == "gemini" and rec["sent"]["backend"] == "gemini-api"
    assert rec["sent"]["client"].startswith("google-genai-sdk ")
    # the REST route and the key where the SDK sends it: a header, never the URL
    first = gemini_api.requests[0]
    assert route(first) == {"version": "v1beta", "model": "gemini-test-1"}
    assert first["headers"]["x-goog-api-key"] == KEY and key_sent(first) == KEY
    assert "key=" not in first["path"]
    body = first["body"]
    assert body["systemInstruction"]["parts"][0]["text"].strip()
    assert [c["role"] for c in body["contents"]] == ["user"]
    assert "countries" in body["contents"][0]["parts"][0]["text"]
    assert body["generationConfig"]["maxOutputTokens"] == 4096 and mode(body) is None
    assert [d["name"] for d in declarations(body)] == ["list_tables", "describe", "run_query"]
    assert schema_of(declarations(body)[2])["required"] == ["query"]
    # each result went back as a functionResponse answering its call (by id where it had one)
    last = gemini_api.requests[-1]["body"]
    assert [c["role"] for c in last["contents"]] == ["user"] + ["model", "user"] * 3
    answered = function_responses(last)
    assert [r["name"] for r in answered] == ["list_tables", "describe", "run_query"]
    assert [r.get("id") for r in answered] == [None, "fc-describe", "fc-query"]
    assert "rows" in answered[-1]["response"]["result"]
    # the model's turn went back as it came, its thought signature byte for byte
    calling = last["contents"][5]["parts"][0]
    assert calling["functionCall"]["name"] == "run_query"
    assert calling["thoughtSignature"] == SIGNATURE


def test_the_last_round_sends_mode_none_and_says_so(project, gemini_api) -> None:
    gemini_api.default = lambda body: (
        function_call("list_tables", None) if mode(body) != "NONE"
        else text("Out of rounds.\n```json\n{\"rating\": null}\n```"))
    p = project()
    ask(p, gemini_api, "--condition", "D1", "-k", "Q01", "--max-rounds", "2"
        ).assert_outcomes(passed=1)
    assert [mode(r["body"]) for r in gemini_api.requests] == [None, None, "NONE"]
    assert all(declarations(r["body"]) for r in gemini_api.requests)  # still declared
    last = gemini_api.requests[-1]["body"]["contents"][-1]
    assert last["role"] == "user" and "functionResponse" in last["parts"][0]
    assert last["parts"][-1] == {"text": "You have used your last round of tools. "
                                         "Answer now, from what you have."}
    assert run_records(p)[0]["answer"]["rounds"] == 3


def test_a_reading_item_sends_and_records_its_settings(project, gemini_api) -> None:
    gemini_api.push(text(A_PLUS))
    p = project()
    ask(p, gemini_api, "--condition", "R1", "-k", "Q01", "--temperature", "0.2",
        "--top-p", "0.9", "--effort", "low").assert_outcomes(passed=1)
    body = gemini_api.requests[0]["body"]
    config = body["generationConfig"]
    assert (config["temperature"], config["topP"]) == (0.2, 0.9)
    thinking = config["thinkingConfig"]
    assert (thinking.get("thinkingLevel") or thinking.get("thinking_level")) == "LOW"
    assert "tools" not in body and "toolConfig" not in body
    assert "### countries.csv" in body["contents"][0]["parts"][0]["text"]
    sent = run_records(p)[0]["sent"]
    assert (sent["temperature"], sent["top_p"], sent["effort"], sent["base_url"],
            sent["api_version"]) == (0.2, 0.9, "low", gemini_api.url, "v1beta")
    (call,) = sent["calls"]
    assert call["stop_reason"] == "STOP" and call["request_id"].startswith("resp-")
    assert call["model"] == "gemini-test-1"


def test_an_effort_gemini_does_not_take_is_refused_before_the_run(project, gemini_api) -> None:
    p = project()
    result = ask(p, gemini_api, "--condition", "R1", "-k", "Q01", "--effort", "max")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--effort max: the gemini agent sends it as thinkingLevel" in result.stderr.str()
    assert gemini_api.requests == []


def test_a_rejected_key_halts_the_run_and_keeps_what_was_banked(project, gemini_api) -> None:
    gemini_api.push(text(A_PLUS), bad_key())
    p = project()
    result = ask(p, gemini_api, "--condition", "R1", "-k", "Q01 or Q03 or Q04")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*rejected the credential (400)*"
                                 "API key not valid*"])
    assert [a["question"] for a in run_records(p)] == ["credit-Q01"]
    assert len(gemini_api.requests) == 2  # not retried, and nothing asked after it
    report = json.loads((only_run(p) / "report.json").read_text())
    assert not report["complete"] and len(report["missing"]) == 2


@pytest.mark.parametrize("fault, says", [
    (unauthenticated, "rejected the credential (401)"),
    (forbidden, "rejected the credential (403)"),
    (not_found, "does not know this model or endpoint (404)"),
    (bad_request, "refused the request as malformed (400)"),
], ids=["401", "403", "404", "400"])
def test_a_fault_of_ours_halts_at_once(project, gemini_api, fault, says) -> None:
    gemini_api.push(fault())
    p = project()
    result = ask(p, gemini_api, "--condition", "R1", "-k", "Q01")
    assert result.ret == 3
    result.stdout.fnmatch_lines([f"*harness is broken*{says}*"])
    assert len(gemini_api.requests) == 1


@pytest.mark.parametrize("slow", [stall(30), trickle(text(A_PLUS), every=0.1)],
                         ids=["stall", "trickle"])
def test_a_slow_reply_ends_at_the_item_deadline(project, gemini_api, slow) -> None:
    """A stall, or headers at once and then the reply a byte every 0.1 s (the HTTP client's
    timeout bounds each read, never the whole): the item's deadline ends it, as a timeout,
    within its --item-timeout and what the machine held the process back."""
    gemini_api.default = lambda body: slow
    p = project()
    with Lateness() as late:
        ask(p, gemini_api, "--condition", "R1", "-k", "Q01", "--item-timeout", "2"
            ).assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"], rec["grade"]) == ("timeout", "T", "wrong")
    assert rec["answer"]["latency_s"] < 2 + 1.0 + late.seconds, (rec["answer"], late.seconds)
    assert len(gemini_api.requests) == 1  # no retry past the deadline
    if slow["kind"] == "trickle":  # the connection was cut before the whole reply came
        assert wait_until(lambda: all(t["done"] for t in gemini_api.trickles), timeout=30)
        assert gemini_api.trickles and all(t["sent"] < t["size"] for t in gemini_api.trickles)


def test_a_blocked_prompt_is_a_refusal_banked_once(project, gemini_api) -> None:
    """No candidate at all, and promptFeedback.blockReason: the model's refusal, not a broken
    body (which would be rerun)."""
    gemini_api.default = lambda body: blocked("PROHIBITED_CONTENT")
    p = project()
    outcomes = ask(p, gemini_api, "--condition", "R1", "-k", "Q01").parseoutcomes()
    assert outcomes.get("passed") == 1 and "rerun" not in outcomes, outcomes
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"]) == ("refused", "N")
    assert "promptFeedback.blockReason PROHIBITED_CONTENT" in rec["reason"]
    assert rec["sent"]["calls"][0]["stop_reason"] == "blocked: PROHIBITED_CONTENT"
    assert len(gemini_api.requests) == 1


def test_a_malformed_function_call_is_an_empty_reply_asked_again(project, gemini_api) -> None:
    """finishReason MALFORMED_FUNCTION_CALL carries no call to answer and no text: asked
    again within the deadline, the next reply is the one the loop goes on with."""
    q = credit_question("credit-Q01")
    gemini_api.push(malformed_call(), function_call("run_query", {"query": q.gold["sql"]}),
                    text(A_PLUS))
    p = project()
    ask(p, gemini_api, "--condition", "D1", "-k", "Q01").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["status"] == "answered" and rec["answer"]["block"] == {"rating": "A+"}
    assert rec["sent"]["calls"][0]["empty_replies"] == 1
    assert len(gemini_api.requests) == 3 and rec["answer"]["rounds"] == 2


def test_google_api_key_is_the_key_the_sdk_reads_first(project, gemini_api,
                                                       monkeypatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key-not-a-secret")
    gemini_api.push(text(A_PLUS))
    p = project()
    ask(p, gemini_api, "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    assert key_sent(gemini_api.requests[0]) == "google-key-not-a-secret"


def test_batch_is_refused_before_the_run(project, gemini_api) -> None:
    p = project()
    result = ask(p, gemini_api, "--condition", "R1", "-k", "Q01", "--batch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the gemini agent has no batch API" in result.stderr.str()


def test_the_judge_asks_through_the_same_endpoint(gemini_api) -> None:
    from pytest_kgbench.agents.models.gemini import GeminiAgent
    from pytest_kgbench.core.settings import Settings

    agent = GeminiAgent(Settings.at(".", agent="gemini", base_url=gemini_api.url,
                                    models=("gemini-test-1",), max_tokens=77))
    gemini_api.push(text("fine", cached_tokens=30, thoughts_tokens=5))
    out = agent.complete("system", "hello", model="gemini-judge-1", max_tokens=77, timeout=10)
    (request,) = gemini_api.requests
    assert route(request)["model"] == "gemini-judge-1"
    assert request["body"]["systemInstruction"]["parts"] == [{"text": "system"}]
    assert request["body"]["generationConfig"]["maxOutputTokens"] == 77
    assert out.text == "fine" and out.tokens == {"input": 100, "output": 25}


def test_declarations_carry_every_tool_spec() -> None:
    from pytest_kgbench.agents.models.gemini import function_declarations
    from pytest_kgbench.asking.tools import TOOLS

    out = function_declarations(list(TOOLS))
    assert [d["name"] for d in out] == [t["name"] for t in TOOLS]
    assert [d["parameters_json_schema"] for d in out] == [t["input_schema"] for t in TOOLS]


def test_an_error_status_without_googles_body_is_still_classified(project,
                                                                  gemini_api) -> None:
    """A proxy's 404 with a plain body (no {"error": {...}}): still the unknown endpoint."""
    gemini_api.push({"kind": "status", "status": 404, "headers": {},
                     "body": {"detail": "Not Found"}})
    p = project()
    result = ask(p, gemini_api, "--condition", "R1", "-k", "Q01")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*(404)*"])
