"""The judge (two passes, Cohen's kappa) and the floor arm's minimal prompt."""

from __future__ import annotations

import pytest

from fake_api import FakeMessagesAPI, text
from pytest_kgbench.judge import ask_judge, cohen_kappa, parse_verdict, summarise


def test_cohen_kappa_against_its_definition() -> None:
    assert cohen_kappa([True, False, True, False], [True, False, True, False]) == 1.0
    assert cohen_kappa([True, True, False, False], [True, False, True, False]) == 0.0
    assert cohen_kappa([True, True, True], [True, True, True]) is None  # chance agreement is 1
    assert cohen_kappa([], []) is None
    # 8 points, 6 agree; p(true) = 4/8 and 4/8 -> chance 0.5 -> (0.75 - 0.5) / 0.5
    a = [True, True, True, True, False, False, False, False]
    b = [True, True, True, False, True, False, False, False]
    assert cohen_kappa(a, b) == pytest.approx(0.5)


def test_verdicts_must_hold_one_boolean_per_point() -> None:
    assert parse_verdict('```json\n{"points": [true, false]}\n```', 2) == [True, False]
    assert parse_verdict('```json\n{"points": [true]}\n```', 2) is None
    assert parse_verdict("no block", 1) is None


def test_the_judge_asks_the_api_and_the_report_summarises_two_passes(monkeypatch) -> None:
    import anthropic

    with FakeMessagesAPI() as api:
        api.push(text('```json\n{"points": [true, false, true]}\n```'),
                 text('```json\n{"points": [true, true, true]}\n```'))
        client = anthropic.Anthropic(base_url=api.url, api_key="sk-test")
        first = ask_judge(client, "m", "Why?", "Because.", ["a", "b", "c"])
        second = ask_judge(client, "m", "Why?", "Because.", ["a", "b", "c"])
        assert "Checklist:\n1. a\n2. b\n3. c" in api.requests[0]["body"]["messages"][0]["content"]
    summary = summarise([{"nodeid": "n1", "first": first, "second": second}])
    assert summary["points"] == 3 and summary["disagreements"] == [{"nodeid": "n1", "point": 2}]
    assert summary["agreement"] == pytest.approx(2 / 3, abs=1e-6)


def test_the_floor_prompt_says_nothing_about_definitions_checking_or_citing(credit_base,
                                                                          credit_questions) -> None:
    from pytest_kgbench.conditions import BY_ID
    from pytest_kgbench.prompts import build_prompt

    q = credit_questions.questions[0]
    every = tuple(credit_questions.questions)
    for together in ((), every):  # asked apart, and asked together
        floor = build_prompt(BY_ID["R1"], credit_base, q, floor=True, together=together)
        normal = build_prompt(BY_ID["R1"], credit_base, q, together=together)
        assert floor.context == normal.context
        for word in ("definition", "citing", "cite", "careful", "records_used", "abstain"):
            assert word not in (floor.system + floor.question).lower(), word
            if word in ("citing", "records_used", "abstain"):
                assert word in (normal.system + normal.question).lower(), word
        assert '"rating"' in floor.question and "```json" in floor.question
