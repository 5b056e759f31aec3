"""The same checks on every provider that answers through the tool loop against its own fake
API on 127.0.0.1 (the `backend` fixture): a prompt past the context window, an answer cut at the
output limit, a broken body, a missing key, a local server that needs none, the cost of priced
and unpriced models, a together session. What only one provider has (its wire format, its
errors' wording) stays in its own file (test_openai, test_gemini)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fake_gemini
import pytest

from conftest import credit_question, only_run, run_records, transient_never_graded

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"
APIS = ["openai", "gemini"]
SIGNATURE = "c2lnbmVkIGJ5IHRoZSBtb2RlbA=="  # a Gemini thought signature (base64)


def without_base_url(args: list[str]) -> list[str]:
    at = args.index("--base-url")
    return args[:at] + args[at + 2:]


def ask(p: Any, backend: tuple[Any, ...], *args: str) -> Any:
    return p.runpytest("questions", *backend[2], *args)


@dataclass(frozen=True)
class Wire:
    """What one provider's checks need of its wire format and wording: one record per
    provider, so a third is one more entry in WIRES."""

    key: str                                         # the environment variable of its key
    no_key: str                                      # the usage error without key or URL
    key_sent: Callable[[dict[str, Any]], str | None]  # the key a request carried
    too_long: str            # what its error said of a prompt past the window (in the reason)
    stop: str                # its stop reason for an answer cut at the output limit
    max_tokens_sent: Callable[[dict[str, Any]], int]  # the output limit a request asked for
    # (the price table, the usage the fake reports, what it bills)
    priced: tuple[str, dict[str, int], float]
    call: Callable[..., Any]                         # one tool call in its wire format
    server_errors: Callable[[Any], list[Any]]        # three 5xx in its words
    broken: tuple[str, ...]                          # its fake's broken-body modes
    persisting: tuple[str, ...]                      # its failures that persist (4xx/5xx)
    limited: dict[str, Callable[[Any], Any]]         # a 429 that says how long to wait


# the prices: 600k plain input at $1 and 400k cached at the cache-read price; the output
# (gemini's thoughts included) at $10/million
WIRES: dict[str, Wire] = {
    "openai": Wire(
        key="OPENAI_API_KEY",
        no_key="no OPENAI_API_KEY in the environment and no --base-url",
        key_sent=lambda r: r["headers"]["authorization"].removeprefix("Bearer "),
        too_long="maximum context length is 128000 tokens",
        stop="length",
        max_tokens_sent=lambda body: body["max_tokens"],
        priced=('[tool.kgbench.prices."gpt-test-1"]\ninput = 1.0\noutput = 10.0\n'
                'cache_read = 0.5\n',
                {"prompt_tokens": 1_000_000, "completion_tokens": 100_000,
                 "cached_tokens": 400_000}, 0.6 + 0.2 + 1.0),
        call=lambda steps, name, args, first: steps.tool_call(name, args or {}),
        server_errors=lambda steps: [steps.status(500), steps.status(502), steps.status(503)],
        broken=("malformed", "no_choices"),
        persisting=("rate_limited",),
        limited={"openai": lambda steps: steps.rate_limited(retry_after="1")}),
    "gemini": Wire(
        key="GEMINI_API_KEY",
        no_key="no GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment and no --base-url",
        key_sent=fake_gemini.key_sent,
        too_long="exceeds the maximum number of tokens allowed (1048576)",
        stop="MAX_TOKENS",
        max_tokens_sent=lambda body: body["generationConfig"]["maxOutputTokens"],
        priced=('[tool.kgbench.prices."gemini-test-1"]\ninput = 1.0\noutput = 10.0\n'
                'cache_read = 0.25\n',
                {"prompt_tokens": 1_000_000, "completion_tokens": 60_000,
                 "cached_tokens": 400_000, "thoughts_tokens": 40_000}, 0.6 + 0.1 + 1.0),
        # its first call carries a thought signature to echo back
        call=lambda steps, name, args, first: steps.function_call(
            name, args, signature=SIGNATURE if first else None),
        server_errors=lambda steps: [steps.internal(), steps.internal(), steps.internal()],
        broken=("malformed", "cut", "no_candidates"),
        persisting=("rate_limited", "unavailable", "internal"),
        # its RetryInfo, or the Retry-After header
        limited={"gemini-retry-info": lambda steps: steps.rate_limited("1s"),
                 "gemini-retry-after": lambda steps: steps.rate_limited(None,
                                                                         retry_after="1")}),
}
assert list(WIRES) == APIS


def each(what: Callable[[Wire], Any]) -> list[tuple[str, str]]:
    """(provider, mode) for each mode `what` names of each provider."""
    return [(name, mode) for name, wire in WIRES.items() for mode in what(wire)]


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_a_prompt_past_the_context_is_skipped_with_the_reason(project, backend) -> None:
    name, server, _, steps = backend
    server.push(steps.too_long(), steps.text(A_PLUS))
    p = project()
    result = ask(p, backend, "--condition", "R1", "-k", "Q01 or Q03")
    result.assert_outcomes(passed=1, skipped=1)
    assert len(server.requests) == 2  # not retried; the run went on
    report = json.loads((only_run(p) / "report.json").read_text())
    (skipped,) = report["skipped"]
    assert skipped["reason"].startswith("the prompt is longer than the model accepts (400)")
    assert WIRES[name].too_long in skipped["reason"]


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_an_answer_cut_at_the_limit_is_truncated(project, backend) -> None:
    name, server, _, steps = backend
    server.push(steps.truncated())
    p = project()
    ask(p, backend, "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    rec = run_records(p)[0]
    assert (rec["status"], rec["letter"]) == ("truncated", "M")
    assert rec["sent"]["calls"][0]["stop_reason"] == WIRES[name].stop


@pytest.mark.parametrize("backend, broken", each(lambda w: w.broken), indirect=["backend"])
def test_a_broken_body_is_transient_and_never_graded(project, backend, broken) -> None:
    _, server, args, steps = backend
    step = getattr(steps, broken)
    server.push(step(), step(), step())
    transient_never_graded(project(), *args)


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_no_key_and_no_base_url_is_a_usage_error(project, backend, monkeypatch) -> None:
    name, server, args, _ = backend
    monkeypatch.delenv(WIRES[name].key)
    p = project()
    asked = ["questions", *without_base_url(args), "--condition", "R1", "-k", "Q01"]
    result = p.runpytest(*asked)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert WIRES[name].no_key in result.stderr.str()
    assert server.requests == []
    assert p.runpytest(*asked, "--collect-only").ret == 0  # nothing asked: no key needed


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_a_local_server_needs_no_key_and_its_cost_is_unknown(project, backend,
                                                             monkeypatch) -> None:
    name, server, args, steps = backend
    monkeypatch.delenv(WIRES[name].key)
    server.push(steps.text(A_PLUS))
    p = project()
    result = ask(p, backend, "--condition", "R1", "-k", "Q01")
    result.assert_outcomes(passed=1)
    assert WIRES[name].key_sent(server.requests[0]) == "no-key"
    report = json.loads((only_run(p) / "report.json").read_text())
    (arm,) = report["conditions"].values()
    assert arm["tokens"]["input"] == 100 and arm["cost_usd"] is None  # unknown, not $0
    model = args[args.index("--model") + 1]
    result.stdout.fnmatch_lines([f"*cost unknown for {model} (no price in the settings)*"])
    assert "$0.0000" not in result.stdout.str()


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_a_priced_model_is_costed_from_its_tokens(project, backend) -> None:
    name, server, _, steps = backend
    table, usage, billed = WIRES[name].priced
    server.push(steps.text(A_PLUS, **usage))
    p = project()
    (p.path / "pyproject.toml").write_text(table)
    ask(p, backend, "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    report = json.loads((only_run(p) / "report.json").read_text())
    (arm,) = report["conditions"].values()
    assert arm["cost_usd"]["billed"] == pytest.approx(billed)


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_asked_together_one_conversation_answers_every_item(project, backend) -> None:
    name, server, _, steps = backend
    server.push(steps.text("credit-Q01: A+ from the countries table.\n"
                           "```json\n{\"credit-Q01\": {\"rating\": \"A+\"}}\n```"))
    p = project()
    ask(p, backend, "--condition", "R1", "-k", "Q01 or Q03", "--ask", "together"
        ).assert_outcomes(passed=2)
    assert len(server.requests) == 1
    records = {r["question"]: r for r in run_records(p)}
    assert set(records) == {"credit-Q01", "credit-Q03"}
    assert records["credit-Q01"]["answer"]["block"] == {"rating": "A+"}
    assert records["credit-Q03"]["status"] == "skipped"  # left out of the block: a miss
    assert WIRES[name].max_tokens_sent(server.requests[0]["body"]) == 4096


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_max_tokens_is_sent_as_given_and_raised_only_for_a_together_session(project,
                                                                            backend) -> None:
    """--max-tokens 256 is what an item asked apart sends (a local model's small window needs
    it kept); a together session of two questions gets 400 tokens each."""
    name, server, _, steps = backend
    server.default = lambda body: steps.text(A_PLUS)
    p = project()
    ask(p, backend, "--condition", "R1", "-k", "Q01", "--max-tokens", "256"
        ).assert_outcomes(passed=1)
    assert WIRES[name].max_tokens_sent(server.requests[-1]["body"]) == 256
    ask(p, backend, "--condition", "R1", "-k", "Q01 or Q03", "--ask", "together",
        "--max-tokens", "256", "--no-cache").assert_outcomes(passed=2)
    assert WIRES[name].max_tokens_sent(server.requests[-1]["body"]) == 800


@pytest.mark.parametrize("backend", APIS, indirect=True)
def test_a_500_mid_loop_reruns_the_item_paying_only_for_what_was_not_answered(
        project, backend) -> None:
    """The rerun of an item a 500 broke mid-loop replays its answered rounds from the
    response cache (marked, not counted) and asks only the rest; the reply it replays goes back
    as it came (on Gemini, with its thought signature)."""
    name, server, _, steps = backend
    q, wire = credit_question("credit-Q01"), WIRES[name]
    server.push(wire.call(steps, "list_tables", None, True), *wire.server_errors(steps),
                wire.call(steps, "run_query", {"query": q.gold["sql"]}, False),
                steps.text(A_PLUS))
    p = project()
    outcomes = ask(p, backend, "--condition", "D1", "-k", "Q01").parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("rerun") == 1, outcomes
    assert len(server.requests) == 6  # 1 answered, 3 failed, then only 2 more
    (rec,) = run_records(p)
    assert [c["name"] for c in rec["answer"]["tool_calls"]] == ["list_tables", "run_query"]
    assert [c.get("cache_hit", False) for c in rec["sent"]["calls"]] == [True, False, False]
    assert rec["sent"]["response_cache"] == {"hits": 1, "misses": 2}
    assert rec["answer"]["tokens"]["input"] == 100 + 100  # the replayed round is not spend
    if name == "gemini":  # the replayed reply, in the request after it, as it came
        replayed = server.requests[4]["body"]["contents"][1]["parts"][0]
        assert replayed["thoughtSignature"] == SIGNATURE


@pytest.mark.parametrize("backend, failing", each(lambda w: w.persisting),
                         indirect=["backend"])
def test_a_failure_that_persists_is_transient_rerun_and_graded_once(project, backend,
                                                                    failing) -> None:
    """Retried within the item, then rerun whole; never a halt (Gemini's 429 quota message
    names billing, which for another provider means an account that cannot pay)."""
    _, server, _, steps = backend
    step = getattr(steps, failing)
    server.push(step(), step(), step(), steps.text(A_PLUS))
    p = project()
    outcomes = ask(p, backend, "--condition", "R1", "-k", "Q01").parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("rerun") == 1, outcomes
    assert len(server.requests) == 4 and len(run_records(p)) == 1


@pytest.mark.parametrize("backend, limited", each(lambda w: w.limited), indirect=["backend"])
def test_429_is_retried_after_the_delay_it_asks(project, backend, limited) -> None:
    name, server, _, steps = backend
    server.push(WIRES[name].limited[limited](steps), steps.text(A_PLUS))
    p = project()
    ask(p, backend, "--condition", "R1", "-k", "Q01").assert_outcomes(passed=1)
    assert len(server.requests) == 2
    assert server.requests[1]["t"] - server.requests[0]["t"] >= 0.95
    assert run_records(p)[0]["sent"]["calls"][0]["attempts"] == 2
