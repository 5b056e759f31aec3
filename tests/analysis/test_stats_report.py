"""Issue 30, items 9-12: every stored float at full precision, no interval of zero width, the
cost table per tier, and comparisons that say what a skip took from them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from pytest_kgbench.analysis import stats
from pytest_kgbench.analysis.report import (
    build_report,
    call_difference,
    calls_text,
    effort_rows,
    render_markdown,
)
from pytest_kgbench.core.settings import Settings

FAST = 999


def _record(question: str, condition: str, score: float | None, *, tier: str = "L3",
            grade: str | None = None, calls: int = 0, model: str = "m",
            tokens: dict[str, int] | None = None, mode: str = "reading",
            chars: int = 4000) -> dict[str, Any]:
    grade = grade or ("correct" if score == 1 else "partial" if score else "wrong")
    return {"nodeid": f"t::{question}[{condition}-{model}]", "question": question, "pack": "p",
            "variant": "base", "condition": condition, "condition_label": condition,
            "mode": mode, "model": model, "agent": "a", "agent_kind": "model", "repeat": 1,
            "tier": tier, "score": score, "grade": grade, "reason": "the prompt is longer "
            "than the model accepts" if grade == "skipped" else "", "metrics": {},
            "prompt": {"chars": chars, "context_sha256": condition},
            "answer": {"tool_calls": [{}] * calls, "tokens": tokens or {}},
            "question_sha256": question, "dataset": {"seed": 1, "build": "base"}}


def _report(records: list[dict[str, Any]], conditions: tuple[str, ...]) -> dict[str, Any]:
    report = build_report(records, Settings.at(".", condition_ids=conditions, ablation=True),
                          missing=[], meta={})
    return json.loads(json.dumps(report, allow_nan=False))  # as report.json stores it


# --- 9. every p keeps its precision ---------------------------------------------------------

def test_a_tiny_wilcoxon_p_is_stored_whole_and_printed_as_itself() -> None:
    a = {f"q{i}": [1] for i in range(40)}
    b = {f"q{i}": [2 + i] for i in range(40)}  # every question more calls under b
    d = call_difference(a, b)
    assert d is not None
    expected = float(sps.wilcoxon([1 + i for i in range(40)], zero_method="wilcox").pvalue)
    assert 0 < expected < 1e-9
    assert d["wilcoxon_p"] == expected  # not round(p, 6) == 0.0
    assert d["mean_diff"] == sum(1 + i for i in range(40)) / 40
    assert f"p {expected:.1e}" in calls_text(d) and "0.0e+00" not in calls_text(d)


def test_report_json_keeps_every_float_whole() -> None:
    """Thirds everywhere: a stored value rounded to any number of decimals differs from it."""
    scores = {"q1": (1.0, 0.0), "q2": (1.0, 0.5), "q3": (0.5, 1.0)}
    records = [_record(q, c, s, calls=calls, tokens={"input": 1, "cache_read": 1,
                                                     "cache_write": 1}, mode="querying")
               for q, pair in scores.items() for c, s, calls in
               (("D1", pair[0], 1), ("D2", pair[1], int(q[1:]) ** 2))]
    report = _report(records, ("D1", "D2"))
    (comp,) = report["comparisons"]
    assert comp["diff"] == stats.compare(
        {q: [p[0]] for q, p in scores.items()}, {q: [p[1]] for q, p in scores.items()},
        a="D1", b="D2", tier="L3", seed=0).diff == pytest.approx(-1 / 3)
    assert comp["diff"] != round(comp["diff"], 9)
    arm = report["conditions"]["D2"]
    assert arm["cache_read_share"] == 1 / 3
    assert arm["effort"]["tool_calls"]["mean"] == 14 / 3  # calls 1, 4, 9
    assert comp["tool_calls"]["mean_b"] == 14 / 3 and comp["tool_calls"]["mean_diff"] == 11 / 3
    assert comp["tool_calls"]["relative"] == 14 / 3 - 1


def test_to_dict_stores_p_values_and_intervals_whole() -> None:
    c = stats.compare({f"q{i}": [0.0] for i in range(13)},
                      {f"q{i}": [1.0] if i < 12 else [0.0] for i in range(13)},
                      a="A", b="B", tier="t", seed=0, n_resamples=FAST)
    d = stats.holm_adjust([c, c])[0].to_dict()
    assert d["mcnemar_p"] == stats.mcnemar_exact(0, 12) == 2 * 0.5 ** 12
    assert d["holm_p"] == 2 * d["mcnemar_p"]
    assert d["ci95"] == list(c.ci95)


# --- 10. no interval of zero width ------------------------------------------------------------

def _u(n: int) -> float:
    """The Wilson upper bound of 0 successes in n (scipy)."""
    return float(sps.binomtest(0, n).proportion_ci(method="wilson").high)


def test_every_question_at_a_half_gets_an_interval_with_width() -> None:
    est = stats.accuracy({f"q{i}": [0.5] for i in range(9)}, seed=0, n_resamples=FAST)
    assert est.value == 0.5
    assert est.ci95 == pytest.approx((0.5 - _u(9) / 2, 0.5 + _u(9) / 2))
    assert est.ci95[1] - est.ci95[0] > 0.25  # 9 questions allow that much


def test_every_paired_difference_zero_gets_an_interval_with_width() -> None:
    same = {f"q{i}": [float(i % 2)] for i in range(9)}
    c = stats.compare(same, dict(same), a="A", b="B", tier="t", seed=0, n_resamples=FAST)
    assert c.diff == 0.0
    assert c.ci95 == pytest.approx((-_u(9), _u(9)))  # up to 30% of questions could move 1


def test_all_right_is_still_the_wilson_interval_of_n_of_n() -> None:
    est = stats.accuracy({f"q{i}": [1.0] for i in range(9)}, seed=0, n_resamples=FAST)
    assert est.ci95 == pytest.approx(stats.wilson(9, 9))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3),
                       st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=3),
                       min_size=1, max_size=12),
       st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3),
                       st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=3),
                       min_size=1, max_size=12))
def test_no_interval_has_zero_width(a: dict, b: dict) -> None:
    est = stats.accuracy(a, seed=1, n_resamples=FAST)
    assert est.ci95 is not None and est.ci95[0] < est.ci95[1]
    assert est.ci95[0] <= est.value <= est.ci95[1]
    c = stats.compare(a, b, a="A", b="B", tier="t", seed=1, n_resamples=FAST)
    if c.n_questions:
        assert c.ci95 is not None and -1.0 <= c.ci95[0] < c.ci95[1] <= 1.0
        assert c.ci95[0] - 1e-12 <= c.diff <= c.ci95[1] + 1e-12


# --- 11. the cost table per tier ----------------------------------------------------------------

def test_what_answering_cost_is_per_tier_never_pooled() -> None:
    records = ([_record(f"a{i}", "D1", 1.0, tier="L1", calls=1, mode="querying")
                for i in range(4)]
               + [_record(f"b{i}", "D1", 0.0, tier="L3", calls=5, mode="querying")
                  for i in range(4)])
    report = _report(records, ("D1",))
    header, rows = effort_rows(report)
    assert header[:3] == ["arm", "tier", "accuracy"]
    assert [r[:3] for r in rows] == [["D1", "L3", "0.0% (n=4)"], ["D1", "L1", "100.0% (n=4)"]]
    assert rows[0][3].startswith("5 ") and rows[1][3].startswith("1 ")
    md = render_markdown(report)
    assert "50.0%" not in md.split("## What answering cost")[1].split("##")[0]  # no pooled figure


# --- 12. a skip is shown per pair, and refuses the paired test -----------------------------------

def _with_skips() -> list[dict[str, Any]]:
    records = []
    for i in range(9):
        records.append(_record(f"q{i}", "R1", 0.0))
        records.append(_record(f"q{i}", "R2", 1.0, grade="skipped") if i < 3 else
                       _record(f"q{i}", "R2", 1.0, chars=8000))
        records.append(_record(f"q{i}", "R4", 1.0, chars=4400))
    return records


def test_questions_lost_to_a_long_prompt_are_counted_per_pair_and_refuse_the_test() -> None:
    report = _report(_with_skips(), ("R1", "R2", "R4"))
    by_pair = {(c["a"], c["b"]): c for c in report["comparisons"]}
    lost = by_pair[("R1", "R2")]
    assert lost["lost"] == {"a": 0, "b": 3} and lost["n_questions"] == 6
    assert lost["mcnemar_p"] is None and lost["holm_p"] is None
    assert "0 question(s) of a and 3 of b were skipped" in lost["refused"]
    kept = by_pair[("R1", "R4")]
    assert kept["lost"] == {"a": 0, "b": 0} and kept["refused"] is None
    assert kept["mcnemar_p"] == stats.mcnemar_exact(0, 9)
    # the refused comparison is not in the Holm family
    family = [c["mcnemar_p"] for c in report["comparisons"] if c["mcnemar_p"] is not None]
    assert kept["holm_p"] == pytest.approx(min(1.0, len(family) * kept["mcnemar_p"]))
    md = render_markdown(report)
    row = next(line for line in md.splitlines() if line.startswith("| R1 | R2 |"))
    assert "| refused | refused |" in row and "| 0 / 3 |" in row
    assert "R1 vs R2 (L3): no paired test" in md
    from pytest_kgbench.analysis.html_report import render_html

    html = render_html(report)
    assert "Comparisons without a p-value" in html and ">refused<" in html and ">0 / 3<" in html


def test_a_side_that_lost_every_question_still_shows_its_pair() -> None:
    records = [_record(f"q{i}", "R1", 1.0) for i in range(5)]
    records += [_record(f"q{i}", "R2", None, grade="skipped") for i in range(5)]
    report = _report(records, ("R1", "R2"))
    (comp,) = report["comparisons"]
    assert comp["n_questions"] == 0 and comp["lost"] == {"a": 0, "b": 5}
    assert comp["mcnemar_p"] is None and comp["refused"]


def test_questions_a_store_cannot_serve_leave_both_sides_and_keep_the_test() -> None:
    """Three questions its store cannot serve (D4 on a server answering their references
    wrong: skipped as `unservable`, for every model alike) are left out of both sides of D1 vs
    D4, and the test over the other six stands: they are not lost for the model's sake, as a
    prompt past its window is (which takes the test away)."""
    records = []
    for i in range(9):
        records.append(_record(f"q{i}", "D1", 0.0, mode="querying"))
        if i < 3:
            rec = _record(f"q{i}", "D4", None, grade="skipped", mode="querying")
            rec["behaviour"], rec["reason"] = "unservable", "Virtuoso at … cannot serve"
            records.append(rec)
        else:
            records.append(_record(f"q{i}", "D4", 1.0, mode="querying"))
    report = _report(records, ("D1", "D4"))
    (comp,) = report["comparisons"]
    assert comp["dropped"] == 3 and comp["lost"] == {"a": 0, "b": 0}
    assert comp["refused"] is None and comp["n_questions"] == 6
    assert comp["mcnemar_p"] == stats.mcnemar_exact(0, 6)
    assert comp["diff"] == 1.0  # the six both sides answered, not D1's nine against D4's six
    row = next(line for line in render_markdown(report).splitlines()
               if line.startswith("| D1 | D4 |"))
    assert "| 0 / 0 | 3 |" in row


def test_the_headline_gives_each_reading_arm_its_prompt_size_over_r1() -> None:
    report = _report(_with_skips(), ("R1", "R2", "R4"))
    conds = report["conditions"]
    assert conds["R1"]["prompt_ratio_r1"] == 1.0
    assert conds["R2"]["prompt_ratio_r1"] == 2.0 and conds["R4"]["prompt_ratio_r1"] == 1.1
    md = render_markdown(report)
    assert "2,000 (2.00× R1)" in md and "1,100 (1.10× R1)" in md
    assert "| 1,000 |" in md  # R1 itself: its size alone
    assert math.isfinite(conds["R2"]["prompt_tokens"])


def test_the_judge_and_the_cost_keep_their_floats_whole() -> None:
    from pytest_kgbench.core.pricing import dollars
    from pytest_kgbench.scoring.judge import cohen_kappa, summarise

    a, b = [True, True, False, True, False, False, True], [True, False, False, True, True,
                                                          False, True]
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    chance = (sum(a) / n) * (sum(b) / n) + (1 - sum(a) / n) * (1 - sum(b) / n)
    assert cohen_kappa(a, b) == (observed - chance) / (1 - chance)
    judged = summarise([{"nodeid": "x", "first": [True, False, False],
                         "second": [True, False, True], "checklist": ["a", "b", "c"]}])
    assert judged is not None and judged["made"] == 1 / 3 and judged["agreement"] == 2 / 3
    # one input token at $0.30 per million was stored as round(3e-07, 6) == 0.0
    assert dollars({"input": 1}, {"input": 0.3, "output": 1.0}) == {
        "billed": 0.3 / 1e6, "without_cache": 0.3 / 1e6}


def test_the_ratio_to_r1_pairs_the_same_items() -> None:
    """A graph-only pack (no tables, so no R1) asked under R2 does not weigh in R2's ratio."""
    records = _with_skips()
    for i in range(20):
        rec = _record(f"g{i}", "R2", 1.0, chars=900_000)
        records.append(dict(rec, pack="graph-only"))
    conds = _report(records, ("R1", "R2", "R4"))["conditions"]
    assert conds["R2"]["prompt_ratio_r1"] == 2.0
    assert conds["R2"]["prompt_tokens"] > 100_000  # the arm's own median takes them all
