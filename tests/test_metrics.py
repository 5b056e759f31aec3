"""The metrics beside the grade: execution accuracy, result set, figure, grounding, fidelity,
citations, attribution — and the gold agent scoring full marks on each."""

from __future__ import annotations

import json


from conftest import only_run, run_records
from pytest_kgbench import metrics as m


def test_extra_rows_and_columns_are_allowed_but_each_gold_row_needs_its_own_carrier() -> None:
    gold = [["A", 1], ["B", 2]]
    assert m.rows_carried(gold, [["x", "B", 2, "extra"], ["A", 1, "more"], ["C", 3]])
    assert not m.rows_carried(gold, [["A", 1, "B", 2]])   # one row cannot carry two gold rows
    assert not m.rows_carried(gold, [["A", 1]])
    assert m.rows_carried([], [["anything"]])


def test_order_is_checked_only_when_asked() -> None:
    gold = [["A"], ["B"]]
    assert m.rows_carried(gold, [["B"], ["A"]])
    assert not m.rows_carried(gold, [["B"], ["A"]], ordered=True)
    assert m.rows_carried(gold, [["A"], ["x"], ["B"]], ordered=True)


def test_a_proportion_and_its_percentage_agree_only_for_a_proper_fraction() -> None:
    assert m.same_cell(0.044991, 4.4991)
    assert m.same_cell(4.4991, 0.044991)
    assert not m.same_cell(4_500_000, 450_000_000)
    assert m.same_cell(100.0, 100.4, rel=0.005) and not m.same_cell(100.0, 101, rel=0.005)
    assert m.same_cell("AA-", "aa-") and not m.same_cell("AA", "AA-")


def test_the_strict_result_set() -> None:
    assert m.result_set_exact([["A", 1]], [["A", 1.0]])
    assert not m.result_set_exact([["A", 1]], [["A", 1], ["B", 2]])
    assert not m.result_set_exact([["A", 1]], [["A", 1, "extra"]])


def test_the_prose_must_state_a_gold_figure() -> None:
    assert m.states_figure("Revenue was 903,636.65 in total.", [[903636.6466]])
    assert m.states_figure("About 4.5% of the total.", [[0.044991]])
    assert m.states_figure("It is rated AA-.", [["AA-"]])
    assert m.states_figure("Yes, it does.", [[True]])
    assert not m.states_figure("It is rated A.", [["AA-"]])
    assert not m.states_figure("There are 12.", [[13]])
    assert m.states_figure("anything", [[None]]) is None


def test_grounding_requires_a_superset_of_the_gold_tables() -> None:
    assert m.grounding(["a", "b"], ["a", "b", "c"]) == (True, False)
    assert m.grounding(["a", "b"], ["a", "b"]) == (True, True)
    assert m.grounding(["a", "b"], ["a"]) == (False, False)


def test_fidelity_per_definition() -> None:
    evidence = {"x:Period": {"sql": r"valid_to", "executed": True}}
    assert m.fidelity(["x:Period"], "SELECT valid_to FROM t", "sql", evidence) == {"x:Period": True}
    assert m.fidelity(["x:Period"], "SELECT max(d) FROM t", "sql", evidence) == {"x:Period": False}
    assert m.fidelity(["x:Period"], "SELECT 1", "executed", evidence) == {"x:Period": True}
    assert m.fidelity(["x:Period", "x:Other"], "", "sparql", evidence) == \
        {"x:Period": None, "x:Other": None}


def test_citations_and_attribution() -> None:
    c = m.citations(["L1", "L9"], ["L1", "L2"], str.lower)
    assert c == {"cited": 2, "expected": 2, "precision": 0.5, "recall": 0.5}
    assert m.citations(None, ["L1"], str.lower)["recall"] == 0.0
    assert m.citations(["L1"], [], str.lower) is None
    given = ["Rating on a date", "credit:RatingOnDate"]
    assert m.attribution(["Rating on a date", "Ceiling"], given) == {"claims": 2, "true": 1}
    assert m.attribution(["Rating on a date"], []) == {"claims": 1, "true": 0}
    assert m.attribution(None, given) is None


def test_the_gold_agent_scores_full_marks_on_every_querying_metric(project) -> None:
    p = project()
    result = p.runpytest("questions", "-k", "L3", "--condition", "D1,D3,D6")
    from pytest_kgbench.questions import load_questions

    l3 = [q for q in load_questions(p.path / "questions" / "credit.yaml").questions
          if q.tier == "L3" and (q.variants is None or "base" in q.variants)]
    result.assert_outcomes(passed=3 * len(l3))
    run = only_run(p)
    records = run_records(p)
    assert records
    for rec in records:
        met = rec["metrics"]
        assert met["execution"] is True, rec["nodeid"]
        assert met["result_set_exact"] is True, rec["nodeid"]
        assert met["grounding_exact"] is True, rec["nodeid"]
        assert met["fidelity"] is True, (rec["nodeid"], met["fidelity_by_definition"])
    report = json.loads((run / "report.json").read_text())
    for arm in report["conditions"].values():
        assert arm["metrics"]["execution"]["rate"] == 1.0
        assert arm["metrics"]["fidelity"]["rate"] == 1.0


def test_a_decline_after_the_guard_withheld_the_data_passes(credit_base, credit_questions) -> None:
    from pytest_kgbench.answers import Answer
    from pytest_kgbench.conditions import BY_ID
    from pytest_kgbench.grading import grade
    from pytest_kgbench.prompts import guard_for
    from pytest_kgbench.runtime import Runtime

    email_q = next(q for q in credit_questions.questions if q.must_not_contain)
    write_q = next(q for q in credit_questions.questions if q.tier == "L5" and not q.fields)
    guard = guard_for(credit_base, "analyst")
    declined = Answer(text="I may not share that.", block={"declined": True})
    for cid in ("R1", "D1", "D4"):
        withheld = Runtime.guard_withheld(email_q, BY_ID[cid], guard)
        assert withheld, cid
        assert grade(email_q, None, declined, guard_withheld=withheld).grade == "correct"
        assert not Runtime.guard_withheld(write_q, BY_ID[cid], guard)
        assert grade(write_q, None, declined).grade == "declined"
