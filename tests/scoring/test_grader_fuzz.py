"""The grader, fuzzed: any answer text — prose, a broken fence, a JSON block of any shape —
yields a grade, never an exception (a harness failure is never a grade, and a model's text is
never a harness failure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_kgbench.scoring.answer_key import compute_key
from pytest_kgbench.scoring.answers import Answer, extract_block
from pytest_kgbench.scoring.grading import SCORES, grade

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=12)


@st.composite
def answer_texts(draw, fields: tuple[str, ...]) -> str:
    prose = draw(st.text(max_size=200))
    how = draw(st.integers(0, 4))
    if how == 0:
        return prose
    if how == 1:  # a block with the question's own fields, of any value
        block = {f: draw(JSONISH) for f in fields if draw(st.booleans())}
        block.update(draw(st.dictionaries(st.text(max_size=8), JSONISH, max_size=3)))
        return f"{prose}\n```json\n{json.dumps(block)}\n```"
    if how == 2:  # a block of another shape
        return f"{prose}\n```json\n{json.dumps(draw(JSONISH))}\n```"
    if how == 3:  # a broken fence
        return f"{prose}\n```json\n{draw(st.text(max_size=80))}"
    return f"```json\n{{\"abstain\": {json.dumps(draw(JSONISH))}, \"declined\": true}}\n```"


@pytest.fixture(scope="module")
def cases(credit_questions, credit_base):
    wanted = {"answer": 3, "abstain": 1, "block": 1}
    out = []
    for q in credit_questions.questions:
        if wanted.get(q.expect, 0) > 0 and (not q.variants or "base" in q.variants):
            wanted[q.expect] -= 1
            out.append((q, compute_key(q, credit_base)))
    return out


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_answer_text_yields_a_grade(cases, credit_base, data) -> None:
    question, key = data.draw(st.sampled_from(cases))
    text = data.draw(answer_texts(tuple(f.name for f in question.fields)))
    block = extract_block(text)
    result = grade(question, key, Answer(text=text, block=block), credit_base.aliases)
    assert result.grade in SCORES and result.letter
