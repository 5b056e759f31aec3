"""The response cache and the spending cap (agents/support/cache.py), end to end through both model
agents against the fake servers on 127.0.0.1: a second identical run makes no request and
costs nothing, repeats stay distinct requests, --no-cache asks again, and --max-cost halts the
run before the request that could pass it."""

from __future__ import annotations

import json

import pytest

from conftest import only_run, run_records

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"
PRICED = ('[tool.kgbench.prices."gpt-test-1"]\ninput = 1.0\noutput = 10.0\n'
          '[tool.kgbench.prices."claude-sonnet-5-5"]\ninput = 2.0\noutput = 10.0\n')


def openai_run(p, api, *args: str):
    return p.runpytest("questions", "--agent", "openai", "--base-url", api.url,
                       "--model", "gpt-test-1", "--condition", "R1", *args)


def spent(p, run: str) -> dict:
    report = json.loads((p.path / "reports" / run / "report.json").read_text())
    (arm,) = report["conditions"].values()
    return arm


def test_a_second_identical_openai_run_makes_no_request_and_costs_nothing(
        project, chat_api) -> None:
    from fake_openai import text

    chat_api.default = lambda body: text(A_PLUS, prompt_tokens=1000, completion_tokens=50)
    p = project()
    (p.path / "pyproject.toml").write_text(PRICED)
    openai_run(p, chat_api, "-k", "Q01 or Q03", "--run-id", "first").assert_outcomes(passed=2)
    assert len(chat_api.requests) == 2
    first = spent(p, "first")
    assert first["cost_usd"]["billed"] == pytest.approx(2 * (1000 * 1.0 + 50 * 10.0) / 1e6)
    openai_run(p, chat_api, "-k", "Q01 or Q03", "--run-id", "second").assert_outcomes(passed=2)
    assert len(chat_api.requests) == 2  # nothing more was asked
    second = json.loads((p.path / "reports" / "second" / "report.json").read_text())
    (arm,) = second["conditions"].values()
    assert arm.get("cost_usd") is None or arm["cost_usd"]["billed"] == 0.0
    records = [json.loads(x) for x in
               (p.path / "reports" / "second" / "answers.jsonl").read_text().splitlines()]
    for rec in records:
        assert sum(rec["answer"]["tokens"].values()) == 0
        assert rec["sent"]["response_cache"] == {"hits": 1, "misses": 0}
        assert rec["sent"]["calls"][0]["cache_hit"] is True
    # the same answers and grades as the first run, read back from the cache
    firsts = {r["question"]: (r["answer"]["text"], r["grade"]) for r in
              (json.loads(x) for x in (p.path / "reports" / "first" / "answers.jsonl")
               .read_text().splitlines())}
    assert {r["question"]: (r["answer"]["text"], r["grade"]) for r in records} == firsts


def test_repeats_stay_distinct_requests_and_no_cache_asks_again(project, chat_api) -> None:
    p = project()
    openai_run(p, chat_api, "-k", "Q01", "--repeats", "2").assert_outcomes(passed=2)
    assert len(chat_api.requests) == 2  # two repeats, two requests: never a hit on each other
    openai_run(p, chat_api, "-k", "Q01", "--repeats", "2", "--no-cache"
               ).assert_outcomes(passed=2)
    assert len(chat_api.requests) == 4
    openai_run(p, chat_api, "-k", "Q01", "--repeats", "2").assert_outcomes(passed=2)
    assert len(chat_api.requests) == 4  # the first run's two responses, one per repeat


def test_another_setting_is_another_request(project, chat_api) -> None:
    p = project()
    openai_run(p, chat_api, "-k", "Q01").assert_outcomes(passed=1)
    openai_run(p, chat_api, "-k", "Q01", "--temperature", "0.5").assert_outcomes(passed=1)
    openai_run(p, chat_api, "-k", "Q01", "--max-tokens", "100").assert_outcomes(passed=1)
    assert len(chat_api.requests) == 3


def test_an_error_is_never_cached(project, chat_api) -> None:
    from fake_openai import status, text

    chat_api.push(status(500), status(500), status(500), text(A_PLUS))
    p = project()
    openai_run(p, chat_api, "-k", "Q01", "--model-reruns", "0").assert_outcomes(failed=1)
    openai_run(p, chat_api, "-k", "Q01").assert_outcomes(passed=1)
    assert len(chat_api.requests) == 4  # the failed run stored nothing to answer from


def test_a_second_identical_anthropic_run_makes_no_request(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    p = project()
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--run-id", "first").assert_outcomes(passed=1)
    assert len(api.requests) == 1
    p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", "Q01",
                "--run-id", "second").assert_outcomes(passed=1)
    assert len(api.requests) == 1
    rec = json.loads((p.path / "reports" / "second" / "answers.jsonl").read_text())
    assert rec["sent"]["calls"][0]["cache_hit"] is True
    assert sum(rec["answer"]["tokens"].values()) == 0


def test_max_cost_halts_before_the_request_that_could_pass_it(project, chat_api) -> None:
    """Each request's worst case is its input (about chars/4 tokens, some 5,500 here, at $1/M)
    plus its 100 output tokens at $10/M: about $0.0065. Each costs $0.009 as served (8,000
    prompt tokens, 100 output). Under a cap of $0.020 the second request fits (0.009 + 0.0065)
    and the third could pass it (0.018 + 0.0065): it is never made. The run halts, keeps the
    two, and says why."""
    from fake_openai import text

    chat_api.default = lambda body: text(A_PLUS, prompt_tokens=8000, completion_tokens=100)
    p = project()
    (p.path / "pyproject.toml").write_text(PRICED)
    result = openai_run(p, chat_api, "-k", "Q01 or Q03 or Q04 or Q05", "--max-tokens", "100",
                        "--max-cost", "0.020", "--no-cache")
    assert result.ret == 3, result.stdout.str()
    result.stdout.fnmatch_lines(["*the run halts at its spending cap: budget:*"
                                 "$0.0180 is spent*of --max-cost $0.02:*"])
    assert len(chat_api.requests) == 2 and len(run_records(p)) == 2
    report = json.loads((only_run(p) / "report.json").read_text())
    assert "budget" in report["halted"] and not report["complete"]
    assert len(report["missing"]) == 2
    ledger = json.loads((only_run(p) / "spend.json").read_text())
    assert ledger["spent"] == pytest.approx(2 * (8000 * 1.0 + 100 * 10.0) / 1e6)
    assert ledger["reserved"] == {}
    assert "HALTED" in (only_run(p) / "report.md").read_text()


def test_max_cost_needs_a_price(project, chat_api) -> None:
    p = project()
    result = openai_run(p, chat_api, "-k", "Q01", "--max-cost", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--max-cost: no price for gpt-test-1" in result.stderr.str()
    assert chat_api.requests == []


def test_the_ledger_refuses_what_would_pass_the_cap(tmp_path) -> None:
    from pytest_kgbench.agents.support.cache import Budget
    from pytest_kgbench.core.errors import BudgetReached

    budget = Budget(tmp_path, 1.0)
    first = budget.reserve(0.6)
    with pytest.raises(BudgetReached, match=r"\$0.6000 more in flight"):
        budget.reserve(0.5)  # 0.6 in flight + 0.5 > 1.0
    budget.settle(first, 0.25)  # it cost less than its worst case
    second = budget.reserve(0.7)
    budget.settle(second, None)  # not billed (an error)
    assert budget.spent() == pytest.approx(0.25)
    with pytest.raises(BudgetReached):
        budget.reserve(0.76)


def test_request_keys_differ_by_every_part() -> None:
    from pytest_kgbench.agents.support.cache import request_key

    base = request_key("p", "http://x", {"model": "m", "messages": [1]}, 0)
    assert base == request_key("p", "http://x", {"messages": [1], "model": "m"}, 0)
    assert len({base, request_key("q", "http://x", {"model": "m", "messages": [1]}, 0),
                request_key("p", "http://y", {"model": "m", "messages": [1]}, 0),
                request_key("p", "http://x", {"model": "n", "messages": [1]}, 0),
                request_key("p", "http://x", {"model": "m", "messages": [2]}, 0),
                request_key("p", "http://x", {"model": "m", "messages": [1]}, 1)}) == 6


@pytest.mark.parametrize("values, flag", [({"temperature": 0.1}, "--temperature"),
                                          ({"top_p": 0.5}, "--top-p"),
                                          ({"max_cost": 2.0}, "--max-cost")])
def test_claude_cli_refuses_what_it_cannot_honour(values, flag) -> None:
    """Claude Code takes no sampling settings and makes its own calls: a setting it would
    ignore is refused before the run, never dropped in silence."""
    from pytest_kgbench.agents.models.claude_cli import ClaudeCliAgent
    from pytest_kgbench.core.settings import Settings

    settings = Settings.at(".", agent="claude-cli", models=("sonnet",), **values)
    assert ClaudeCliAgent.check(settings, asking=False) == (
        f"{flag}: the claude CLI agent cannot honour it")
    assert ClaudeCliAgent.check(Settings.at(".", agent="claude-cli", models=("sonnet",)),
                                asking=False) is None


def test_sampling_and_cost_options_are_checked_naming_the_option(tmp_path) -> None:
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.core.settings import OPTIONS, PATHS
    from pytest_kgbench.run.config import build_settings

    ini = {o.ini: o.default for o in OPTIONS}
    paths = {name: default for name, _, default in PATHS}

    def build(**cli):
        return build_settings({f"kgbench_{k}": v for k, v in cli.items()}, ini,
                              root=tmp_path, paths=paths)

    s = build(temperature="0.3", top_p="1", max_cost="2.5", no_cache=True,
              base_url="http://localhost:11434/v1")
    assert (s.model.temperature, s.model.top_p, s.limits.max_cost, s.model.response_cache,
            s.model.base_url) == (0.3, 1.0, 2.5, False, "http://localhost:11434/v1")
    assert s.paths.responses_dir == str((tmp_path / ".kgbench-responses").resolve())
    assert build().model.response_cache is True and build().limits.max_cost is None
    for option, value, says in (("max_cost", "0", "--max-cost: must be more than 0"),
                                ("max_cost", "lots", "--max-cost: 'lots' is not a number"),
                                ("temperature", "-1", "--temperature: must be at least 0"),
                                ("top_p", "x", "--top-p: 'x' is not a number")):
        with pytest.raises(InputError, match=says):
            build(**{option: value})


def test_max_cost_holds_across_xdist_workers(project, chat_api) -> None:
    """Two workers share one ledger: together they make no more requests than the cap allows
    one process (each request about $0.009 served, $0.0065 at worst; a cap of $0.020 leaves
    room for two, whichever worker makes them), and every worker stops."""
    from fake_openai import text

    chat_api.default = lambda body: text(A_PLUS, prompt_tokens=8000, completion_tokens=100)
    p = project()
    (p.path / "pyproject.toml").write_text(PRICED)
    result = p.runpytest_subprocess(
        "questions", "--agent", "openai", "--base-url", chat_api.url, "--model", "gpt-test-1",
        "--condition", "R1", "-k", "L1", "--max-tokens", "100", "--max-cost", "0.020",
        "--no-cache", "-n", "2")
    assert result.ret == 3, result.stdout.str()
    assert "INTERNALERROR" not in result.stdout.str()
    assert len(chat_api.requests) == 2 and len(run_records(p)) == 2
    report = json.loads((only_run(p) / "report.json").read_text())
    assert "spending cap" in report["halted"]
