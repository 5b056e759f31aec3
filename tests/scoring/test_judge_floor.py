"""The judge (two passes, Cohen's kappa) and the floor arm's minimal prompt."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_api import FakeMessagesAPI, text

from conftest import only_run, run_records
from pytest_kgbench.scoring.judge import ask_judge, cohen_kappa, parse_verdict, summarise


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
    """Through the run's own backend's plain call: the anthropic agent's `complete`, over
    HTTP to a server speaking the Messages API."""
    from pytest_kgbench.agents.models.anthropic import AnthropicAgent
    from pytest_kgbench.core.settings import Settings

    with FakeMessagesAPI() as api:
        api.push(text('```json\n{"points": [true, false, true]}\n```'),
                 text('```json\n{"points": [true, true, true]}\n```'))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        agent = AnthropicAgent(Settings.at(Path(__file__).resolve().parents[2]))
        assert agent.completes
        first, used = ask_judge(agent.complete, "m", "Why?", "Because.", ["a", "b", "c"])
        second, _ = ask_judge(agent.complete, "m", "Why?", "Because.", ["a", "b", "c"])
        assert used == {"input": 100, "output": 20}
        assert "Checklist:\n1. a\n2. b\n3. c" in api.requests[0]["body"]["messages"][0]["content"]
    summary = summarise([{"nodeid": "n1", "first": first, "second": second,
                          "checklist": ["a", "b", "c"]}])
    assert summary["points"] == 3 and summary["disagreements"] == [
        {"nodeid": "n1", "point": 2, "text": "b", "first": False, "second": True}]
    assert summary["agreement"] == pytest.approx(2 / 3, abs=1e-6)
    # an answer with no prose is not judged, and is counted apart from unreadable verdicts
    more = summarise([{"nodeid": "n1", "first": first, "second": second, "checklist": "abc"},
                      {"nodeid": "n2", "skipped": "the answer has no prose to judge"},
                      {"nodeid": "n3", "first": None, "second": [True, True, True]}])
    assert (more["items"], more["no_prose"], more["unreadable"], more["points"]) == (2, 1, 1, 3)


def test_the_floor_prompt_says_nothing_about_definitions_checking_or_citing(credit_base,
                                                                          credit_questions) -> None:
    from pytest_kgbench.asking.prompts import build_prompt
    from pytest_kgbench.core.conditions import BY_ID

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


ANSWERS = {
    "research-Q30": ("W5463775453 is the preprint of W6904196185: one work, counted once.",
                     {"work": "W6904196185", "count": 1}),
    "research-Q33": ("A5720102936 and A4483374961 share an ORCID, so it is a self-citation.",
                     {"counts": "no", "shared_person": "A5720102936"}),
}
VERDICTS = [[True, True, False], [True, False, False], [True, True, True], [True, True, True]]


@pytest.mark.parametrize("ask", ["apart", "together"])
def test_why_questions_are_judged_twice_through_a_model_run(project, monkeypatch, ask) -> None:
    """Research Q30 and Q33 (the checklist questions) answered by the anthropic agent against
    the fake API; the judge reads each item's own answer twice; the report gives kappa and
    the disagreement."""
    import json

    from pytest_kgbench.scoring.judge import JUDGE_SYSTEM

    verdicts = iter(VERDICTS)

    def respond(body: dict):
        if body.get("system") == JUDGE_SYSTEM:
            return text(f'```json\n{{"points": {json.dumps(next(verdicts))}}}\n```',
                        input_tokens=50, output_tokens=5)
        asked = json.dumps(body["messages"])
        ids = [qid for qid in ANSWERS if f"## Question {qid}" in asked or f"### {qid}" in asked]
        if len(ids) == 1:
            prose, block = ANSWERS[ids[0]]
            return text(f"{prose}\n```json\n{json.dumps(block)}\n```")
        return text("\n".join(f"**{qid}.** {ANSWERS[qid][0]}" for qid in ids) + "\n```json\n"
                    + json.dumps({qid: ANSWERS[qid][1] for qid in ids}) + "\n```")

    with FakeMessagesAPI(respond) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        p = project()
        research = Path(__file__).resolve().parents[2] / "questions" / "research.yaml"
        (p.path / "questions" / "research.yaml").write_text(research.read_text())
        result = p.runpytest("questions/research.yaml", "--model", "sonnet", "--condition",
                             "R1", "--ask", ask, "-k", "Q30 or Q33")
        result.assert_outcomes(passed=2)
        judge_bodies = [r["body"] for r in api.requests if r["body"].get("system") == JUDGE_SYSTEM]
    run = only_run(p)
    records = run_records(p)
    by_q = {r["question"]: r["metrics"]["judge"] for r in records}
    assert by_q["research-Q30"]["first"] == VERDICTS[0]
    assert by_q["research-Q30"]["second"] == VERDICTS[1]
    assert by_q["research-Q33"]["first"] == by_q["research-Q33"]["second"] == VERDICTS[2]
    # the judge read each item's own answer, not its sibling's
    assert len(judge_bodies) == 4
    for body, qid in zip(judge_bodies, ["research-Q30"] * 2 + ["research-Q33"] * 2):
        prompt = body["messages"][0]["content"]
        other = next(q for q in ANSWERS if q != qid)
        assert ANSWERS[qid][0] in prompt and ANSWERS[other][0] not in prompt
    report = json.loads((run / "report.json").read_text())
    judge = report["judge"]
    flat = [VERDICTS[0] + VERDICTS[2], VERDICTS[1] + VERDICTS[3]]
    assert judge["points"] == 6 and judge["kappa"] == cohen_kappa(*flat)
    assert judge["tokens"] == {"input": 200, "output": 20}
    assert [(d["point"], d["first"], d["second"]) for d in judge["disagreements"]] == \
        [(2, True, False)]
    assert "research-Q30" in judge["disagreements"][0]["nodeid"]
    md = (run / "report.md").read_text()
    assert "## Judge" in md and "Cohen's kappa: " + f"{judge['kappa']:.3f}" in md
