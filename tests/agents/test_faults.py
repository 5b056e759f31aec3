"""Faults of the anthropic agent and the judge, against the fake Messages API through the real
SDK: what each one does to the item and the run (halt, rerun, miss, or skipped with the
reason). The claude-cli agent's are in test_claude_cli.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_api import (
    bad_request,
    stall,
    status,
    text,
    too_long,
    tool_use,
    trickle,
    truncated,
)

from conftest import only_run, run_records, wait_until

A_PLUS = "Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```"



def test_a_prompt_too_long_for_the_window_is_skipped_with_the_reason(project, api) -> None:
    api.push(too_long(), text(A_PLUS))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-rs",
                         "-k", "Q01 or Q03", "-p", "no:randomly")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == 0  # a skipped item is not a failure of the run
    result.stdout.fnmatch_lines(["*SKIPPED*prompt is too long: 221000 tokens > 200000*"])
    assert len(api.requests) == 2  # never retried: it would be as long the second time
    records = {r["question"]: r for r in run_records(p)}
    skipped = records["credit-Q01"]
    assert (skipped["status"], skipped["grade"], skipped["score"], skipped["letter"],
            skipped["outcome"]) == ("skipped", "skipped", None, "S", "skipped")
    assert "prompt is too long" in skipped["reason"]
    report = json.loads((only_run(p) / "report.json").read_text())
    assert report["complete"] and report["missing"] == []
    assert [s["nodeid"] for s in report["skipped"]] == [skipped["nodeid"]]
    assert "prompt is too long" in report["skipped"][0]["reason"]
    # not in the accuracy: the arm holds the one item that was asked
    assert report["conditions"]["R1"]["n_items"] == 1
    assert all(i["question"] != "credit-Q01" for i in report["items"])
    md = (only_run(p) / "report.md").read_text()
    assert "## Items skipped" in md and "credit-Q01" in md.split("## Items skipped")[1]


@pytest.mark.parametrize("step, says", [
    (bad_request(), "refused the request as malformed (400)"),
    (bad_request("Your credit balance is too low to access the Anthropic API."),
     "cannot pay for the call (400)"),
    (status(402, retry_after_ms=None, kind="billing_error"), "cannot pay for the call (402)"),
])
def test_a_malformed_request_or_no_credit_halts(project, api, step, says) -> None:
    api.push(step)
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q01 or Q03")
    assert result.ret == 3
    result.stdout.fnmatch_lines([f"*harness is broken*{says}*"])
    assert len(api.requests) == 1
    assert not (only_run(p) / "answers.jsonl").exists()  # nothing banked, nothing graded


def test_an_answer_cut_at_max_tokens_is_truncated_a_miss(project, api) -> None:
    # the cut text even holds a complete block: still a miss, never "answered"
    api.push(truncated(A_PLUS + "\nAnd one more thing about the"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                         "--max-tokens", "1000")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["grade"], rec["score"], rec["letter"], rec["behaviour"]) == \
        ("truncated", "wrong", 0.0, "M", "truncated")
    assert "cut at the output limit (1000 tokens)" in rec["reason"]
    result.stdout.fnmatch_lines(["questions/credit.yaml M *"])
    sent = rec["sent"]
    assert sent["stop_reason"] == "max_tokens" and sent["max_tokens"] == 1000
    assert sent["calls"][0]["request_id"].startswith("req_")
    assert sent["calls"][0]["model"] == "claude-sonnet-5-5"


def test_every_item_records_what_was_sent(project, api) -> None:
    """Below 400 too, --max-tokens is sent as given to an item asked apart (a local model's
    small window needs it kept)."""
    api.push(text(A_PLUS))
    p = project()
    p.runpytest("questions", "--model", "haiku", "--condition", "R1", "-k", "Q01",
                "--effort", "low", "--max-tokens", "256").assert_outcomes(passed=1)
    sent = run_records(p)[0]["sent"]
    assert sent["backend"] == "messages-api" and sent["client"].startswith("anthropic-sdk ")
    assert (sent["model"], sent["effort"], sent["max_tokens"], sent["stop_reason"]) == \
        ("claude-haiku-5-5", "low", 256, "end_turn")
    assert [c["model"] for c in sent["calls"]] == ["claude-haiku-5-5"]
    body = api.requests[0]["body"]
    assert body["max_tokens"] == 256 and body["output_config"] == {"effort": "low"}


@pytest.mark.parametrize("condition, steps", [
    ("R1", []),                                       # every attempt stalls
    ("D1", [tool_use("list_tables", {})]),            # a round, then the stall
])
def test_the_item_timeout_bounds_the_item_across_retries_and_rounds(project, api, condition,
                                                                   steps) -> None:
    api.push(*steps)
    api.default = lambda body: stall(30)
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", condition,
                         "-k", "Q01", "--item-timeout", "2")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"], rec["grade"]) == ("timeout", "T", "wrong")
    # one deadline: the stalled attempt used up the item's two seconds, so no retry was sent
    # (the SDK's own retries gave each attempt the full timeout again: three attempts, three
    # times the budget); and the item ended before the stalled reply (30 s) came
    assert len(api.requests) == len(steps) + 1, len(api.requests)
    assert rec["answer"]["latency_s"] < 30, rec["answer"]["latency_s"]


def test_a_reply_that_trickles_is_cut_at_the_item_deadline(project, api) -> None:
    """Headers at once, then the body a byte every 0.1 s (about 35 s in all): every read gets
    its byte well within the HTTP client's timeout, which bounds each read, so only a deadline
    on the whole call stops it. The item is a timeout, and the server saw the client hang up
    before the body was whole (it once read to the end: 60 s for an 8 s item)."""
    api.default = lambda body: trickle(text(A_PLUS), every=0.1)
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                         "--item-timeout", "2")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"], rec["grade"]) == ("timeout", "T", "wrong")
    # the trickles end by themselves at the latest (size x 0.1 s); the cut ends them first
    assert wait_until(lambda: all(t["done"] for t in api.trickles),
                      timeout=max(t["size"] for t in api.trickles) * 0.5)
    assert api.trickles and all(t["sent"] < t["size"] for t in api.trickles), api.trickles


def self_citation_project(project, api):
    """A project with the research questions, whose model answers the self-citation question
    (research-Q33) rightly."""
    api.default = lambda body: text(
        "A5720102936 and A4483374961 share an ORCID, so it is a self-citation.\n"
        "```json\n{\"counts\": \"no\", \"shared_person\": \"A5720102936\"}\n```")
    p = project()
    research = Path(__file__).resolve().parents[2] / "questions" / "research.yaml"
    (p.path / "questions" / "research.yaml").write_text(research.read_text())
    return p


def test_a_judge_failure_never_reasks_the_model(project, api) -> None:
    """A judge-only 529: the judge retries itself, then the item is banked with its judgement
    marked failed; the model was asked once, and the item was never rerun."""
    api.judge = lambda body: status(529, kind="overloaded_error")
    p = self_citation_project(project, api)
    result = p.runpytest("questions/research.yaml", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q33")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and "rerun" not in outcomes, outcomes
    from fake_api import is_judge

    asked = [r for r in api.requests if not is_judge(r["body"])]
    judged = [r for r in api.requests if is_judge(r["body"])]
    assert len(asked) == 1
    assert 2 <= len(judged) <= 6  # its own retries, for one pass only
    rec = run_records(p)[0]
    assert rec["grade"] in ("correct", "partial", "wrong")
    assert "529" in rec["metrics"]["judge"]["failed"]
    report = json.loads((only_run(p) / "report.json").read_text())
    assert report["complete"] and report["judge"]["failed"] == 1


@pytest.mark.parametrize("agent", ["gold", "synthetic"])
def test_a_reference_query_that_times_out_halts_the_run(project, agent) -> None:
    """A reference query past --query-timeout is the harness failing: an always-gold synthetic
    arm scored what the timeout let through (20%) before."""
    p = project()
    result = p.runpytest("questions", "--agent", agent, "--synthetic", "*=1.0", "--condition",
                         "D4", "-k", "L3", "--query-timeout", "0.001")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*query of credit-Q*under D4 ran past "
                                 "--query-timeout (0.001 s)*"])
    report = json.loads((only_run(p) / "report.json").read_text())
    assert report["counts"]["items"] == 0 and report["halted"]
    assert {m["why"] for m in report["missing"][1:]} == {"not asked: the run halted"}


def test_the_trap_agents_naive_query_over_other_tables_is_a_miss_not_a_halt(project) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "trap", "--condition", "D3", "-k", "Q10")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["status"] == "error" and rec["grade"] == "wrong"
    assert "rating_actions does not exist" in rec["answer"]["error"]


def test_a_halted_serial_run_lists_what_it_never_asked(project, api) -> None:
    api.push(text(A_PLUS), status(401, kind="authentication_error"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q01 or Q03 or Q04 or Q05")
    assert result.ret == 3
    report = json.loads((only_run(p) / "report.json").read_text())
    whys = [m["why"] for m in report["missing"]]
    assert len(whys) == 3 and "harness is broken" in whys[0]
    assert whys[1:] == ["not asked: the run halted"] * 2
    md = (only_run(p) / "report.md").read_text()
    assert "not asked: the run halted" in md and "worker crash" not in md


def test_a_judge_the_harness_cannot_ask_banks_the_item_then_halts(project, api) -> None:
    api.judge = lambda body: status(404, retry_after_ms=None, kind="not_found_error")
    p = self_citation_project(project, api)
    result = p.runpytest("questions/research.yaml", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q30 or Q33")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*the judge cannot be asked*404*"])
    records = run_records(p)
    assert len(records) == 1 and records[0]["grade"] in ("correct", "partial", "wrong")
    assert "404" in records[0]["metrics"]["judge"]["failed"]
    report = json.loads((only_run(p) / "report.json").read_text())
    assert [m["why"] for m in report["missing"]] == ["not asked: the run halted"]


def test_an_argument_the_sdk_does_not_take_halts_rather_than_failing_each_item() -> None:
    """A request the installed SDK refuses (a TypeError from its create) is ours: a halt, never
    an F per item with the run going on."""
    from pytest_kgbench.agents.support import faults
    from pytest_kgbench.core.errors import HarnessBroken

    def create(*, model: str, timeout: float) -> None:
        raise AssertionError("never called with an argument it does not take")

    with pytest.raises(HarnessBroken, match="refused the request's arguments.*temperature"):
        faults.call_within(create, time.monotonic() + 5,
                           faults.SdkFaults(timeout_error=TimeoutError, api_error=OSError,
                                            retryable=lambda exc: True,
                                            classify=lambda exc: exc),
                           attempts=3, model="m", temperature=0.2)


@pytest.mark.parametrize("backend", ["anthropic", "openai", "gemini", "claude-cli"],
                         indirect=True)
def test_a_refusal_is_banked_once_with_its_own_letter_on_every_backend(project, backend) -> None:
    """A policy refusal is the model's behaviour: one request, banked with status `refused`
    and letter N, a miss. (claude-cli read it as transient: three paid sessions, then F;
    anthropic and openai banked it as an ordinary W.)"""
    name, server, args, steps = backend
    server.default = lambda body: steps.refusal()
    p = project()
    result = p.runpytest("questions", *args, "--condition", "R1", "-k", "Q01")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and "rerun" not in outcomes, outcomes
    rec = run_records(p)[0]
    assert (rec["status"], rec["behaviour"], rec["letter"], rec["grade"], rec["score"]) == \
        ("refused", "refused", "N", "wrong", 0.0), name
    assert rec["reason"].startswith("the model refused to answer")
    assert len(server.requests) == 1  # asked once, never again
    result.stdout.fnmatch_lines(["questions/credit.yaml N*", "*: N 1 (C correct*N refused*"])


@pytest.mark.parametrize("backend", ["anthropic", "openai", "gemini"], indirect=True)
def test_an_empty_reply_is_asked_again_within_the_deadline(project, backend) -> None:
    """An empty reply is a fault, not an answer: asked again, the second reply is graded."""
    name, server, args, steps = backend
    server.push(steps.empty())
    server.default = lambda body: steps.text(A_PLUS)
    p = project()
    p.runpytest("questions", *args, "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["status"] == "answered" and rec["answer"]["block"] == {"rating": "A+"}
    assert len(server.requests) == 2
    assert rec["sent"]["calls"][-1]["empty_replies"] == 1
    assert rec["answer"]["tokens"]["input"] == 200  # both replies were billed


@pytest.mark.parametrize("backend", ["anthropic", "openai", "gemini", "claude-cli"],
                         indirect=True)
def test_a_reply_empty_every_time_is_its_own_status_and_never_cached(project, backend) -> None:
    """Still empty after the tries the deadline allows: status `empty`, letter Z, a miss; and
    never stored, so a second run asks again (an empty reply was cached, and replayed)."""
    name, server, args, steps = backend
    server.default = lambda body: steps.empty()
    p = project()
    p.runpytest("questions", *args, "--condition", "R1", "-k", "Q01", "--run-id", "first"
                ).assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["behaviour"], rec["letter"], rec["grade"]) == \
        ("empty", "empty", "Z", "wrong"), name
    assert "empty" in rec["reason"]
    # our three tries; Claude Code asks once more itself, in its session
    tries = 2 if name == "claude-cli" else 3
    assert len(server.requests) == tries
    p.runpytest("questions", *args, "--condition", "R1", "-k", "Q01", "--run-id", "second"
                ).assert_outcomes(passed=1)
    assert len(server.requests) == 2 * tries  # asked again: nothing was cached
    if name != "claude-cli":  # the control: an answer is cached, and a third run asks nothing
        server.default = lambda body: steps.text(A_PLUS)
        for run_id in ("third", "fourth"):
            p.runpytest("questions", *args, "--condition", "R1", "-k", "Q01", "--run-id",
                        run_id).assert_outcomes(passed=1)
        assert len(server.requests) == 2 * tries + 1


def test_an_item_that_never_reported_says_its_fault(project, api) -> None:
    """Its reason is the fault (the exception's own line), never the first line of a frame's
    locals ("call: create = <bound method Messages.create of ...>")."""
    api.default = lambda body: status(529, kind="overloaded_error")
    p = project()
    p.runpytest_subprocess("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                           "--model-reruns", "0").assert_outcomes(failed=1)
    report = json.loads((only_run(p) / "report.json").read_text())
    (missing,) = report["missing"]
    first = missing["why"].splitlines()[0]
    assert first.startswith("call: pytest_kgbench.core.errors.TransientModelError: the API call "
                            "failed (529) after the retries"), first
    md = (only_run(p) / "report.md").read_text().split("## Items that never reported")[1]
    assert "TransientModelError: the API call failed (529)" in md.splitlines()[2]
    assert "bound method" not in md.split("## Fingerprints")[0]

