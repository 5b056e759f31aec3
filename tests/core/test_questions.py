"""Question files: validation names the file, the question and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.questions import load_questions, set_fingerprint

GOOD = """
- id: t-Q1
  tier: L1
  text: How many?
  answer: {count: {kind: integer}}
  key: keys.count
  gold: {sql: SELECT 1 AS count}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "questions" / "t.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_with_its_fingerprint(tmp_path: Path) -> None:
    qset = load_questions(write(tmp_path, GOOD))
    assert qset.count == 1
    q = qset.questions[0]
    assert (q.id, q.tier, q.expect, q.key, q.pack) == ("t-Q1", "L1", "answer", "count", "t")
    assert qset.sha256 == set_fingerprint({"t-Q1": q.sha256})
    assert len(q.sha256) == 64


def test_the_fingerprint_moves_when_a_question_changes(tmp_path: Path) -> None:
    before = load_questions(write(tmp_path, GOOD)).sha256
    after = load_questions(write(tmp_path, GOOD.replace("How many?", "How many now?"))).sha256
    assert before != after


@pytest.mark.parametrize(("text", "question", "field", "words"), [
    (GOOD.replace("tier: L1", "tier: L9"), "t-Q1", "tier", "must be one of"),
    (GOOD.replace("kind: integer", "kind: bignum"), "t-Q1", "answer.count.kind", "kind must be"),
    (GOOD.replace("  key: keys.count\n", "  key: gold.sparql\n"), "t-Q1", "key",
     "takes its key from gold.sparql, which it does not have"),
    (GOOD.replace("  gold: {sql: SELECT 1 AS count}\n", ""), "t-Q1", "gold", "reference query"),
    (GOOD.replace("tier: L1", "tier: L3"), "t-Q1", "trap", "trap query"),
    (GOOD + "  colour: blue\n", "t-Q1", None, "unknown keys ['colour']"),
    (GOOD.replace("answer: {count: {kind: integer}}", "answer: {abstain: {kind: yesno}}"),
     "t-Q1", "answer.abstain", "reserved"),
    (GOOD + GOOD, "t-Q1", "id", "duplicate question id"),
    (GOOD + "  hand_key: {total: 3}\n", "t-Q1", "hand_key", "fields the answer does not have"),
])
def test_bad_input_names_file_question_and_field(tmp_path: Path, text: str, question: str,
                                                 field: str | None, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_questions(path)
    message = str(info.value)
    assert str(path) in message
    assert f"question {question}" in message
    if field:
        assert f"field '{field}'" in message
    assert words in message


def test_not_yaml_and_not_a_list(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not valid YAML"):
        load_questions(write(tmp_path, "- id: [unclosed\n"))
    with pytest.raises(InputError, match="one YAML list"):
        load_questions(write(tmp_path, "id: t-Q1\n"))


def test_expectations_default_by_tier(tmp_path: Path) -> None:
    text = """
- id: t-Q4
  tier: L4
  text: Unknowable?
- id: t-Q5
  tier: L5
  text: Delete it.
  gold: {sql: DELETE FROM t}
  modes: [querying]
"""
    q4, q5 = load_questions(write(tmp_path, text)).questions
    assert (q4.expect, q5.expect) == ("abstain", "block")
