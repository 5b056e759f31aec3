"""--compare-models: models side by side on the same conditions, with the statistics the
conditions get (paired per question, per tier, Holm-adjusted with the rest of the family)."""

from __future__ import annotations

import json

import pytest

from conftest import only_run, run_records
from pytest_kgbench.analysis.report import model_pairs
from pytest_kgbench.core.settings import Settings


def test_the_first_model_is_paired_with_each_other_on_every_condition(tmp_path) -> None:
    records = [{"model": m, "condition": c} for m in ("haiku", "sonnet", "local")
               for c in ("D1", "R1")]
    settings = Settings.at(tmp_path, models=("sonnet", "haiku", "local"),
                           condition_ids=("D1", "R1", "D4"), compare_models=True)
    assert model_pairs(records, settings) == [
        ("D1", "sonnet", "haiku"), ("D1", "sonnet", "local"),
        ("R1", "sonnet", "haiku"), ("R1", "sonnet", "local")]  # D4 was not run
    assert model_pairs(records, Settings.at(tmp_path, models=("sonnet", "haiku"),
                                            condition_ids=("D1",))) == []  # not asked


def _accuracy(records: list[dict], condition: str, model: str, tier: str) -> float:
    got = [r["score"] for r in records
           if (r["condition"], r["model"], r["tier"]) == (condition, model, tier)]
    return sum(got) / len(got)


@pytest.mark.slow
def test_compare_models_reports_paired_differences_between_models(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "synthetic", "--model",
                                    "sonnet,haiku", "--condition", "D1,R1",
                                    "--compare-models", "--synthetic", "*=0.5",
                                    "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()[-2000:]
    report = json.loads((only_run(p) / "report.json").read_text())
    pairs = {(c["a"], c["b"], c["tier"]): c for c in report["comparisons"]}
    # models only: no condition pair without --ablation, and the first model is a
    assert {(a, b) for a, b, _ in pairs} == {("D1/sonnet", "D1/haiku"),
                                             ("R1/sonnet", "R1/haiku")}
    records = run_records(p)
    l3 = pairs[("D1/sonnet", "D1/haiku", "L3")]
    expected = _accuracy(records, "D1", "haiku", "L3") - _accuracy(records, "D1", "sonnet", "L3")
    assert abs(l3["diff"] - expected) < 1e-9
    assert l3["holm_p"] is not None and l3["holm_p"] >= l3["mcnemar_p"]
    md = (only_run(p) / "report.md").read_text()
    assert "| D1/sonnet | D1/haiku | L3 |" in md


def test_compare_models_and_ablation_share_one_family(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "synthetic", "--model",
                                    "sonnet,haiku", "--condition", "D1,R1", "--ablation",
                                    "--compare-models", "--synthetic", "*=0.5",
                                    "-p", "no:randomly", "-k", "L3")
    assert result.ret == 0, result.stdout.str()[-2000:]
    comparisons = json.loads((only_run(p) / "report.json").read_text())["comparisons"]
    kinds = {(c["a"], c["b"]) for c in comparisons}
    assert ("D1/sonnet", "D1/haiku") in kinds and ("D1/sonnet", "R1/sonnet") in kinds \
        and ("D1/haiku", "R1/haiku") in kinds
    # one Holm family: the smallest raw p is multiplied by the size of the whole family
    smallest = min(comparisons, key=lambda c: c["mcnemar_p"])
    # (report.json rounds p to six places)
    assert abs(smallest["holm_p"] - min(1.0, smallest["mcnemar_p"] * len(comparisons))) < 1e-5


def test_one_run_asks_each_model_through_the_agent_its_table_names(project, api,
                                                                   chat_api) -> None:
    """`--model sonnet,local`, local being a model of an OpenAI-compatible server: sonnet goes
    to the Messages API, local to its own endpoint, and both are arms of one report."""
    from fake_api import text as anthropic_text
    from fake_openai import text as chat_text

    answer = "```json\n{\"rating\": \"A+\"}\n```"
    api.push(anthropic_text(answer))
    chat_api.push(chat_text(answer))
    p = project()
    (p.path / "pyproject.toml").write_text(
        "[tool.kgbench.models]\n"
        f'local = {{ id = "qwen-test-7b", agent = "openai", base_url = "{chat_api.url}" }}\n')
    result = p.runpytest("questions", "--model", "sonnet,local", "--condition", "R1",
                         "-k", "Q01", "--compare-models")
    result.assert_outcomes(passed=2)
    assert [r["body"]["model"] for r in chat_api.requests] == ["qwen-test-7b"]
    assert len(api.requests) == 1 and api.requests[0]["body"]["model"] == "claude-sonnet-5-5"
    by_model = {r["model"]: r for r in run_records(p)}
    assert by_model["sonnet"]["agent"] == "anthropic" and by_model["local"]["agent"] == "openai"
    assert by_model["local"]["sent"]["base_url"] == chat_api.url
    report = json.loads((only_run(p) / "report.json").read_text())
    assert {(c["a"], c["b"]) for c in report["comparisons"]} == {("R1/sonnet", "R1/local")}


def test_a_model_table_with_an_unknown_key_is_named(project) -> None:
    p = project()
    (p.path / "pyproject.toml").write_text(
        '[tool.kgbench.models]\nlocal = { id = "x-1", agnet = "openai" }\n')
    result = p.runpytest("questions", "--model", "local", "--collect-only", "-q")
    assert result.ret == 4
    assert "models.local" in result.stderr.str() and "pyproject.toml" in result.stderr.str()
