"""The wording check of kgbench check (issue 34, leak-free wording): a text holding one of the
pack's distinguishing terms (L3) or a value of its key is flagged, and fails the check unless the
question carries wording_why."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_kgbench.packs.question_set import wording_flags, wording_lines

TERMS = {"credit:TestRecord": ["test record", "sandbox"],
         "credit:Control": ["more than half", "exactly 50%"]}


def _q(qid: str, text: str, tier: str = "L3", wording_why: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=qid, text=text, tier=tier, wording_why=wording_why)


def test_a_distinguishing_term_in_an_l3_text_is_flagged_and_fails() -> None:
    qs = [_q("p-Q1", "How many issuers, not counting any Test Record, are in Aldoria?"),
          _q("p-Q2", "How many issuers are in Aldoria?")]
    flags = wording_flags(qs, TERMS, {})
    assert [(f.question, f.what, f.found, f.source) for f in flags] == [
        ("p-Q1", "term", "test record", "credit:TestRecord")]
    lines, failed = wording_lines(flags, "p", len(qs))
    assert failed and lines[0].startswith("BAD p-Q1") and "1 unjustified" in lines[-1]


def test_terms_are_whole_words_and_only_l3_texts_are_held_to_them() -> None:
    qs = [_q("p-Q1", "Which sandboxes hold test records?"),  # a longer word is not the term
          _q("p-Q2", "Which sandbox records are there?", tier="L1")]
    assert wording_flags(qs, TERMS, {}) == []


def test_a_key_value_in_the_text_is_flagged_at_any_tier() -> None:
    qs = [_q("p-Q1", "Is Orvane rated AA- on 2023-06-30?", tier="L1"),
          _q("p-Q2", "Which issuer has LEI 9845002KRZKA7D4S0J80's parent?")]
    keys = {"p-Q1": {"rating": "AA-"}, "p-Q2": {"issuers": ["9845002KRZKA7D4S0J80"], "count": 1}}
    found = {(f.question, f.found, f.source) for f in wording_flags(qs, {}, keys)}
    assert found == {("p-Q1", "AA-", "rating"), ("p-Q2", "9845002KRZKA7D4S0J80", "issuers")}


@pytest.mark.parametrize(("text", "key"), [
    ("What was the rating of Orvane on 2023-06-30?", {"count": 30}),   # a date's day
    ("What was the rating of Orvane on 2023-06-30?", {"count": 2023}),  # a date's year
    ("What is the rating of Orvane?", {"rating": "A"}),                 # a rating, case-sensitive
    ("What was the rating of Orvane on 2023-06-30?", {"rating": "AA"}),
    ("Is Borealis in control of Cobalt?", {"controls": False}),         # booleans leak no value
    ("How large is the 2.5 bn programme?", {"count": 5}),
])
def test_a_value_inside_a_longer_token_is_not_a_leak(text: str, key: dict) -> None:
    assert wording_flags([_q("p-Q1", text)], {}, {"p-Q1": key}) == []


def test_wording_why_reports_a_flag_without_failing_the_check() -> None:
    qs = [_q("p-Q1", "How large is the test record?",
             wording_why="The question asks for the test records themselves.")]
    flags = wording_flags(qs, TERMS, {})
    assert len(flags) == 1 and not flags[0].fails
    lines, failed = wording_lines(flags, "p", 1)
    assert not failed and lines[0].startswith(" - ") and "p-Q1 text" in lines[0]
    assert "justified" in lines[0]


def test_a_question_may_carry_wording_why(tmp_path) -> None:
    from pytest_kgbench.core.questions import load_questions

    path = tmp_path / "p.yaml"
    path.write_text("- id: p-Q1\n  tier: L4\n  text: How many test records?\n  expect: abstain\n"
                    "  wording_why: It asks for them by name.\n", encoding="utf-8")
    (q,) = load_questions(path).questions
    assert q.wording_why == "It asks for them by name."


@pytest.mark.parametrize("pack", ["credit", "research"])
def test_the_shipped_packs_pass_the_wording_check(pack, request) -> None:
    """Both shipped packs: no L3 text names a distinguishing term, no text holds its key."""
    from pytest_kgbench.scoring.answer_key import compute_key

    qset = request.getfixturevalue(f"{pack}_questions")
    built = request.getfixturevalue(f"{pack}_base")
    terms = request.getfixturevalue(f"{pack}_pack").manifest["distinguishing_terms"]
    keys = {q.id: compute_key(q, built) for q in qset.questions
            if q.key and (q.variants is None or "base" in q.variants)}
    flags = wording_flags(qset.questions, terms, keys)
    assert [f.line() for f in flags if f.fails] == []
