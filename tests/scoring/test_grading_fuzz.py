"""An answer fuzz, labelled by hand: several hundred answers across every field kind, write
requests and abstentions (tests/data/answer_fuzz.yaml), each with the grade a careful human
grader gives it and why; the grader must give every one that grade. Then hypothesis: any value
of any shape in any kind's field, and any text around it, yields a grade and never raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_kgbench.core.questions import parse_question
from pytest_kgbench.engines import QueryResult
from pytest_kgbench.packs.schema import normalise_id
from pytest_kgbench.scoring.answers import Answer, extract_block
from pytest_kgbench.scoring.fieldkinds import FIELD_KINDS
from pytest_kgbench.scoring.grading import SCORES, grade

DATA = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "answer_fuzz.yaml"
                       ).read_text("utf-8"))
CASES = DATA["cases"]
LETTER = {"correct": "C", "partial": "P", "wrong": "W"}
ALIASES = {kind: {normalise_id(a): str(canonical) for canonical, aliases in table.items()
                  for a in [canonical, *aliases]}
           for kind, table in DATA["entities"].items()}


def question(case: dict[str, Any]):
    """A one-field question of the case's kind (an L4 or L5 question for abstain and write)."""
    if case["kind"] == "abstain":
        return parse_question({"id": "f-L4", "tier": "L4", "text": "What was its revenue?"},
                              where="answer_fuzz.yaml", index=0)
    if case["kind"] == "write":
        return parse_question({"id": "f-L5", "tier": "L5", "text": "Delete every withdrawal.",
                               "modes": ["querying"], "gold": {"sql": "DELETE FROM t"}},
                              where="answer_fuzz.yaml", index=0)
    spec: dict[str, Any] = {"kind": case["kind"]}
    for extra in ("entity", "tolerance", "ordered"):
        if extra in case:
            spec[extra] = case[extra]
    return parse_question({"id": "f-Q", "tier": "L2", "text": "?", "key": "keys.k",
                           "gold": {"sql": "SELECT 1"}, "answer": {"value": spec}},
                          where="answer_fuzz.yaml", index=0)


def answer_of(case: dict[str, Any]) -> Answer:
    queries = [QueryResult("sparql" if "PREFIX" in q["statement"] else "sql", q["statement"],
                           columns=["x"] * len((q.get("rows") or [[]])[0]),
                           rows=q.get("rows") or [], refused=q.get("refused"),
                           error=q.get("error")) for q in case.get("queries") or []]
    if "text" in case:
        return Answer(text=case["text"], block=extract_block(case["text"]), queries=queries,
                      status=case.get("status", "answered"))
    return Answer(text="", block={"value": case["answer"]})


def graded(case: dict[str, Any]) -> str:
    q = question(case)
    key = None if case["kind"] in ("abstain", "write") else {"value": case["key"]}
    return LETTER[grade(q, key, answer_of(case), ALIASES).grade]


def test_the_set_covers_every_kind_and_is_large_enough() -> None:
    kinds = {c["kind"] for c in CASES}
    assert {k.name for k in FIELD_KINDS} <= kinds
    assert {"write", "abstain"} <= kinds
    assert len(CASES) >= 300
    assert all(c.get("why") and c["grade"] in ("C", "P", "W") for c in CASES)


def test_every_hand_labelled_answer_gets_its_grade() -> None:
    wrong = []
    for i, case in enumerate(CASES):
        got = graded(case)
        if got != case["grade"]:
            shown = case.get("answer", case.get("text"))
            wrong.append(f"#{i} {case['kind']} key={case.get('key')!r} answer={shown!r}: "
                         f"graded {got}, labelled {case['grade']} ({case['why']})")
    assert not wrong, f"{len(wrong)} of {len(CASES)} graded otherwise:\n" + "\n".join(wrong)


# --- hypothesis: nothing raises -----------------------------------------------------------------

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=20)
# what models write, to mix into the text: ids as the conditions spell them, ratings, numbers
PIECES = st.sampled_from(["issuer:ISS-18263", "<https://kgbench.example/credit/id/issuer/",
                          "cri:issuer\\/", "A+", "A++", " *-", "unrated (", "NR", "1,200.5",
                          "%", "doi:10.", "https://orcid.org/", "0000-", "2032-11-", "T00:00",
                          "(", ")", "\u2212", "yes, ", "no", "\\", "\n", "\u200b", "e9999"])
VALUES = JSONISH | st.lists(PIECES, max_size=6).map("".join) | st.text(
    alphabet=st.sampled_from("AB+-*() ,.:/\\<>01923eE%xX\u2212\uff10"), max_size=60)
ROWS = st.lists(st.lists(VALUES, max_size=4) | VALUES, max_size=6)


@settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_value_in_any_kind_yields_a_grade(data) -> None:
    kind = data.draw(st.sampled_from([k.name for k in FIELD_KINDS]))
    case = {"kind": kind}
    if kind in ("entity", "entity_list"):
        case["entity"] = data.draw(st.sampled_from(sorted(DATA["entities"])))
    key = data.draw(ROWS if kind == "rows" else st.sampled_from(
        [c["key"] for c in CASES if c["kind"] == kind and c.get("entity") in
         (None, case.get("entity"))] or [None]))
    value = data.draw(ROWS if kind == "rows" else VALUES)
    q = question(case)
    result = grade(q, {"value": key}, Answer(text="", block={"value": value}), ALIASES)
    assert result.grade in SCORES and result.letter


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_text_around_any_block_yields_a_grade(data) -> None:
    case = data.draw(st.sampled_from(CASES))
    prose = data.draw(st.lists(PIECES | st.text(max_size=30), max_size=8).map("".join))
    block = data.draw(st.dictionaries(st.sampled_from(["value", "declined", "abstain",
                                                       "definitions_used", "rows_deleted"]),
                                      VALUES, max_size=3))
    fence = data.draw(st.sampled_from(["```json\n{}\n```", "```\n{}\n```", "{}", "```json\n{}"]))
    text = prose + "\n" + fence.format(json.dumps(block))
    q = question(case)
    key = None if case["kind"] in ("abstain", "write") else {"value": case["key"]}
    result = grade(q, key, Answer(text=text, block=extract_block(text)), ALIASES)
    assert result.grade in SCORES and result.letter
