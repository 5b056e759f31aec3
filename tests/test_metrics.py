"""The metrics beside the grade: execution accuracy, result set, figure, grounding, fidelity,
citations, attribution — and the gold agent scoring full marks on each."""

from __future__ import annotations

import json


from conftest import only_run, run_records
from pytest_kgbench.metrics.attribution import attribution
from pytest_kgbench.metrics.citations import citations
from pytest_kgbench.metrics.execution import result_set_exact, rows_carried, same_cell, \
    states_figure
from pytest_kgbench.metrics.fidelity import fidelity
from pytest_kgbench.metrics.grounding import grounding


def test_extra_rows_and_columns_are_allowed_but_each_gold_row_needs_its_own_carrier() -> None:
    gold = [["A", 1], ["B", 2]]
    assert rows_carried(gold, [["x", "B", 2, "extra"], ["A", 1, "more"], ["C", 3]])
    assert not rows_carried(gold, [["A", 1, "B", 2]])   # one row cannot carry two gold rows
    assert not rows_carried(gold, [["A", 1]])
    assert rows_carried([], [["anything"]])


def test_order_is_checked_only_when_asked() -> None:
    gold = [["A"], ["B"]]
    assert rows_carried(gold, [["B"], ["A"]])
    assert not rows_carried(gold, [["B"], ["A"]], ordered=True)
    assert rows_carried(gold, [["A"], ["x"], ["B"]], ordered=True)


def test_a_proportion_and_its_percentage_agree_only_for_a_proper_fraction() -> None:
    assert same_cell(0.044991, 4.4991)
    assert same_cell(4.4991, 0.044991)
    assert not same_cell(4_500_000, 450_000_000)
    assert same_cell(100.0, 100.4, rel=0.005) and not same_cell(100.0, 101, rel=0.005)
    assert same_cell("AA-", "aa-") and not same_cell("AA", "AA-")


def test_the_strict_result_set() -> None:
    assert result_set_exact([["A", 1]], [["A", 1.0]])
    assert not result_set_exact([["A", 1]], [["A", 1], ["B", 2]])
    assert not result_set_exact([["A", 1]], [["A", 1, "extra"]])


def test_the_prose_must_state_a_gold_figure() -> None:
    assert states_figure("Revenue was 903,636.65 in total.", [[903636.6466]])
    assert states_figure("About 4.5% of the total.", [[0.044991]])
    assert states_figure("It is rated AA-.", [["AA-"]])
    assert states_figure("Yes, it does.", [[True]])
    assert not states_figure("It is rated A.", [["AA-"]])
    assert not states_figure("There are 12.", [[13]])
    assert states_figure("anything", [[None]]) is None


def test_grounding_requires_a_superset_of_the_gold_tables() -> None:
    assert grounding(["a", "b"], ["a", "b", "c"]) == (True, False)
    assert grounding(["a", "b"], ["a", "b"]) == (True, True)
    assert grounding(["a", "b"], ["a"]) == (False, False)


def test_fidelity_per_definition() -> None:
    evidence = {"x:Period": {"sql": {"column": "valid_to"}, "executed": True}}
    assert fidelity(["x:Period"], "SELECT valid_to FROM t", "sql", evidence) == {"x:Period": True}
    assert fidelity(["x:Period"], "SELECT max(d) FROM t", "sql", evidence) == {"x:Period": False}
    # read from the parse: a comment or a string naming the column is not evidence
    assert fidelity(["x:Period"], "SELECT max(d) FROM t -- valid_to not used", "sql",
                    evidence) == {"x:Period": False}
    assert fidelity(["x:Period"], "SELECT 'valid_to' FROM t", "sql", evidence) == \
        {"x:Period": False}
    assert fidelity(["x:Period"], "SELECT 1", "executed", evidence) == {"x:Period": True}
    assert fidelity(["x:Period", "x:Other"], "", "sparql", evidence) == \
        {"x:Period": None, "x:Other": None}


def test_citations_and_attribution() -> None:
    c = citations(["L1", "L9"], ["L1", "L2"], str.lower)
    assert c == {"cited": 2, "expected": 2, "precision": 0.5, "recall": 0.5}
    assert citations(None, ["L1"], str.lower)["recall"] == 0.0
    assert citations(["L1"], [], str.lower) is None
    given = ["Rating on a date", "credit:RatingOnDate"]
    assert attribution(["Rating on a date", "Ceiling"], given) == {"claims": 2, "true": 1}
    assert attribution(["Rating on a date"], []) == {"claims": 1, "true": 0}
    assert attribution(None, given) is None


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
    from pytest_kgbench.runtime import Runtime
    from pytest_kgbench.settings import Settings

    email_q = next(q for q in credit_questions.questions if q.must_not_contain)
    write_q = next(q for q in credit_questions.questions if q.tier == "L5" and not q.fields)
    runtime = Runtime(Settings.at(credit_base.pack.dir.parents[1]))
    declined = Answer(text="I may not share that.", block={"declined": True})
    for cid in ("R1", "D1", "D4"):
        withheld = runtime.guard_withheld(email_q, BY_ID[cid], credit_base)
        assert withheld, cid
        assert grade(email_q, None, declined, guard_withheld=withheld).grade == "correct"
        assert not runtime.guard_withheld(write_q, BY_ID[cid], credit_base)
        # a write request declined before any query is the right answer, counted in the tier
        assert grade(write_q, None, declined).grade == "correct"
