"""Keys a person can check: for 20 of the research questions of issue 34, the key derived by hand
from the raw rows of research/base (tests/data/research_derivations.yaml) — the rows are in the
data, the lists said to be complete are, and the key functions (datasets/research/keys.py)
compute the same key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_kgbench.answer_key import compute_key

FIXTURE = Path(__file__).resolve().parent / "data" / "research_derivations.yaml"
ENTRIES = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
NEW_FROM = 51  # the questions added for issue 34 are research-Q51 and after


def _project(row: dict[str, Any], columns: list[str]) -> tuple:
    return tuple(row[c] for c in columns)


def test_the_fixture_derives_twenty_new_questions(research_questions) -> None:
    ids = [e["question"] for e in ENTRIES]
    assert len(ids) == len(set(ids)) >= 20
    known = {q.id: q for q in research_questions.questions}
    for qid in ids:
        assert qid in known and int(qid.split("-Q")[1]) >= NEW_FROM, qid
        assert known[qid].key, qid  # computed by code, which this fixture checks
    assert all(e["derivation"].strip() and e["rows"] for e in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_a_hand_derivation_rests_on_rows_of_the_data(entry, research_base) -> None:
    tables = research_base.tables
    for table, rows in entry["rows"].items():
        for row in rows:
            columns = list(row)
            found = [r for r in tables[table] if _project(r, columns) == _project(row, columns)]
            assert found, (entry["question"], table, row)
    for table, by_column in (entry.get("complete") or {}).items():
        listed = entry["rows"][table]
        for column, values in by_column.items():
            columns = sorted({c for row in listed for c in row})
            actual = {_project(r, columns) for r in tables[table] if r[column] in values}
            shown = {_project({**dict.fromkeys(columns), **r}, columns) for r in listed
                     if r.get(column) in values}
            assert actual == shown, (entry["question"], table, column,
                                     sorted(actual - shown, key=str)[:3])


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_the_key_function_agrees_with_the_hand_derivation(entry, research_questions,
                                                          research_base) -> None:
    q = next(q for q in research_questions.questions if q.id == entry["question"])
    key = compute_key(q, research_base)
    assert key is not None
    for name, expected in entry["key"].items():
        got = key[name]
        if isinstance(expected, float) or isinstance(got, float):
            assert abs(float(got) - float(expected)) < 1e-3, (q.id, name, got, expected)
        elif isinstance(expected, list):
            assert sorted(got) == sorted(expected), (q.id, name, got, expected)
        else:
            assert got == expected, (q.id, name, got, expected)
    assert set(entry["key"]) == {f.name for f in q.fields}
