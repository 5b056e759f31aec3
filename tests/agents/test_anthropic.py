"""The anthropic agent through the real SDK against a fake Messages API on 127.0.0.1: the tool
loop, prompt caching, and every fault class with what it does to the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_api import malformed, stall, status, text, tool_use

from conftest import credit_question, only_run, run_records

REPO = Path(__file__).resolve().parents[2]



def test_a_querying_item_runs_a_multi_round_tool_loop(project, api) -> None:
    q = credit_question("credit-Q01")
    api.push(tool_use("list_tables", {}), tool_use("describe", {"name": "countries"}),
             tool_use("run_query", {"query": q.gold["sql"]}),
             text("Caldera's sovereign rating is A+ (countries row XC).\n"
                  "```json\n{\"rating\": \"A+\", \"definitions_used\": []}\n```"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "-k", "Q01")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    key = rec["key"]["rating"]
    assert rec["answer"]["rounds"] == 4
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["list_tables", "describe",
                                                                "run_query"]
    assert rec["answer"]["queries"][0]["reads"] == ["countries"]
    assert rec["answer"]["tokens"]["input"] == 400 and rec["answer"]["tokens"]["output"] > 0
    assert rec["grade"] == ("correct" if key == "A+" else "wrong")
    first = api.requests[0]["body"]
    assert first["model"] == "claude-sonnet-5-5"
    assert {t["name"] for t in first["tools"]} == {"list_tables", "describe", "run_query"}
    # the date reminder Claude Code sends too (agents.framing), then the data block, cached
    assert "Today's date is" in first["messages"][0]["content"][0]["text"]
    assert first["messages"][0]["content"][1]["cache_control"] == {"type": "ephemeral"}
    # the tool results went back to the model, and the run's queries are the model's
    last = api.requests[-1]["body"]["messages"]
    results = [b for m in last if m["role"] == "user" for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert len(results) == 3 and "rows" in results[-1]["content"]
    # two cache breakpoints: the data block, and the latest block of the conversation
    marked = [(i, j) for i, m in enumerate(last) for j, b in enumerate(m["content"])
              if isinstance(b, dict) and "cache_control" in b]
    assert marked == [(0, 1), (len(last) - 1, len(last[-1]["content"]) - 1)]


def test_the_last_round_forbids_tools(project, api) -> None:
    api.default = lambda body: (tool_use("list_tables", {}) if body.get("tool_choice") is None
                                else text("Out of rounds.\n```json\n{\"rating\": null}\n```"))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "D1", "-k", "Q01",
                "--max-rounds", "2").assert_outcomes(passed=1)
    assert len(api.requests) == 3
    assert api.requests[-1]["body"]["tool_choice"] == {"type": "none"}
    assert run_records(p)[0]["answer"]["rounds"] == 3


def test_a_reading_item_is_one_message(project, api) -> None:
    api.push(text("```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    p.runpytest("questions", "--model", "haiku", "--condition", "R1", "-k", "Q01",
                "--effort", "low").assert_outcomes(passed=1)
    body = api.requests[0]["body"]
    assert "tools" not in body and body["model"] == "claude-haiku-5-5"
    assert body["output_config"] == {"effort": "low"}
    assert "### countries.csv" in body["messages"][0]["content"][1]["text"]


def test_529_after_the_sdks_retries_is_rerun_and_graded_once(project, api) -> None:
    # the SDK tries three times (two retries); all 529 -> TransientModelError -> rerun
    api.push(status(529, kind="overloaded_error"), status(529, kind="overloaded_error"),
             status(529, kind="overloaded_error"), text("```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("rerun") == 1, outcomes
    assert len(run_records(p)) == 1
    assert len(api.requests) == 4


def test_429_is_retried_by_the_sdk_honouring_retry_after(project, api) -> None:
    api.push(status(429, kind="rate_limit_error"), text("```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01"
                ).assert_outcomes(passed=1)
    assert len(api.requests) == 2


def test_500_is_retried_by_the_sdk_and_graded_once(project, api) -> None:
    api.push(status(500), status(503), text("```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 1 and "rerun" not in outcomes  # the SDK's retries sufficed
    assert len(api.requests) == 3 and len(run_records(p)) == 1


@pytest.mark.parametrize("code, kind, says", [
    (403, "permission_error", "rejected the credential (403)"),
    (404, "not_found_error", "does not know this model"),
])
def test_403_and_404_halt_the_run(project, api, code, kind, says) -> None:
    api.push(status(code, kind=kind))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q01 or Q03")
    assert result.ret == 3
    result.stdout.fnmatch_lines([f"*harness is broken*{says}*"])
    assert len(api.requests) == 1  # one call, not retried, and the run stopped there
    report = json.loads((only_run(p) / "report.json").read_text())
    assert report["counts"]["items"] == 0 and len(report["missing"]) == 2


def test_401_halts_the_run_and_keeps_what_was_banked(project, api) -> None:
    api.push(text("```json\n{\"rating\": \"A+\"}\n```"), status(401, kind="authentication_error"))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1",
                         "-k", "Q01 or Q03 or Q04")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*rejected the credential (401)*"])
    answers = run_records(p)
    assert [a["question"] for a in answers] == ["credit-Q01"]
    report = json.loads((only_run(p) / "report.json").read_text())
    assert not report["complete"] and len(report["missing"]) == 2


@pytest.mark.slow
def test_401_under_xdist_halts_every_worker_and_keeps_what_was_banked(project, api) -> None:
    import itertools

    served = itertools.count()
    api.default = lambda body: (text("```json\n{\"rating\": \"A+\"}\n```")
                                if next(served) < 3 else status(401, kind="authentication_error"))
    p = project()
    result = p.runpytest_subprocess("questions", "--model", "sonnet", "--condition", "R1",
                                    "-k", "L1 or L2", "-n", "2")
    assert result.ret == 3
    result.stdout.fnmatch_lines(["*harness is broken*rejected the credential (401)*"
                                 "3 item(s) banked and kept, exit status 3*"])
    assert "INTERNALERROR" not in result.stdout.str()
    assert len(run_records(p)) == 3  # the three answered before the 401, nothing lost
    assert len(api.requests) <= 3 + 2  # each worker stopped at its first 401
    report = json.loads((only_run(p) / "report.json").read_text())
    assert not report["complete"] and "rejected the credential" in report["halted"]
    from pytest_kgbench.core.questions import load_questions

    selected = sum(1 for q in load_questions(p.path / "questions" / "credit.yaml").questions
                   if q.tier in ("L1", "L2") and (q.variants is None or "base" in q.variants))
    assert len(report["missing"]) == selected - 3
    assert any("harness is broken" in m["why"] for m in report["missing"])


def test_a_missing_key_is_a_usage_error_before_anything_runs(project, api, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().strip() == (
        "ERROR: --agent anthropic: no ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the "
        "environment: the anthropic agent cannot call the API")
    assert "collected" not in result.stdout.str()
    assert api.requests == [] and not (p.path / "reports").exists()


def test_a_stall_past_the_item_timeout_is_a_timeout_grade(project, api) -> None:
    api.push(stall(4))
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                         "--item-timeout", "1")
    result.assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert rec["status"] == "timeout" and rec["letter"] == "T" and rec["grade"] == "wrong"


def test_a_malformed_body_is_transient_and_never_graded(project, api) -> None:
    api.push(malformed(), malformed(), malformed())
    p = project()
    # in a process of its own: the failure's traceback is formatted with `ast`, which a
    # RecursionError caught earlier in a long-lived test worker (the guard's nesting tests)
    # has been seen to leave raising SystemError (CPython 3.11), an INTERNALERROR of the run
    result = p.runpytest_subprocess("questions", "--model", "sonnet", "--condition", "R1",
                                    "-k", "Q01", "--model-reruns", "0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TransientModelError*"])
    run = only_run(p)
    assert (run / "answers.jsonl").read_text() == "" if (run / "answers.jsonl").exists() else True
    report = json.loads((run / "report.json").read_text())
    assert not report["complete"]


def test_the_sdk_streams_from_the_fake_server(api) -> None:
    """The fake server also speaks server-sent events (the Claude Code CLI streams)."""
    import anthropic

    api.push(tool_use("run_query", {"query": "SELECT 1"}, id="toolu_1"))
    client = anthropic.Anthropic(base_url=api.url, api_key="sk-test")
    with client.messages.stream(model="m", max_tokens=10,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[1].input == {"query": "SELECT 1"}


@pytest.mark.parametrize("flags, names", [
    (("--temperature", "0.2"), "--temperature"),
    (("--top-p", "0.9"), "--top-p"),
    (("--temperature", "0", "--top-p", "0.5"), "--temperature, --top-p"),
])
def test_sampling_the_installed_sdk_cannot_send_is_refused_before_the_run(project, api, flags,
                                                                         names) -> None:
    """The installed SDK's Messages.create takes no temperature or top_p (the Messages API of
    anthropic 2.x sets none): every item was an F with a TypeError and the run went on. Now the
    run is refused in one line before anything is asked."""
    import anthropic

    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                         *flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert err.startswith(f"ERROR: --agent anthropic: {names}: the Messages API, as the "
                          f"installed anthropic SDK {anthropic.__version__} sends it, takes no")
    assert len(err.splitlines()) == 1
    assert api.requests == [] and not (p.path / "reports").exists()


def test_sampling_an_sdk_takes_is_sent_and_recorded(project, api, monkeypatch) -> None:
    """An SDK whose Messages.create still takes temperature and top_p gets them."""
    from anthropic.resources.messages import Messages

    real = Messages.create

    def create(self, *, temperature: float | None = None, top_p: float | None = None,
               **rest):  # as anthropic 0.x's did: the settings go into the body
        body = {k: v for k, v in (("temperature", temperature), ("top_p", top_p))
                if v is not None}
        return real(self, **rest, extra_body=body or None)

    monkeypatch.setattr(Messages, "create", create)
    api.push(text("Caldera is rated A+.\n```json\n{\"rating\": \"A+\"}\n```"))
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--temperature", "0.2", "--top-p", "0.9").assert_outcomes(passed=1)
    body = api.requests[0]["body"]
    assert (body["temperature"], body["top_p"]) == (0.2, 0.9)
    sent = run_records(p)[0]["sent"]
    assert (sent["temperature"], sent["top_p"]) == (0.2, 0.9)

