"""Keys a person can check (issue 34): the shared checks of a pack's hand derivations
(tests/data/<pack>_derivations.yaml). Each entry names a question, the raw rows that decide its
key (only the columns that matter), which of them are all the rows of their kind (`complete`:
every row of the table whose column takes one of these values is listed), the reasoning from the
definitions, and the key. The checks: every row is in the data, each `complete` list is
complete, and the pack's key function computes the same key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pytest_kgbench.scoring.answer_key import compute_key

DATA = Path(__file__).resolve().parent / "data"


def entries(pack: str) -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / f"{pack}_derivations.yaml").read_text(encoding="utf-8"))


def _project(row: dict[str, Any], columns: list[str]) -> tuple:
    return tuple(row[c] for c in columns)


def check_fixture(items: list[dict[str, Any]], questions: Any, new_from: int) -> None:
    """At least 20 distinct questions, each new (numbered from `new_from`), with a key computed
    by code, a derivation and rows."""
    ids = [e["question"] for e in items]
    assert len(ids) == len(set(ids)) >= 20
    known = {q.id: q for q in questions.questions}
    for qid in ids:
        assert qid in known and int(qid.split("-Q")[1]) >= new_from, qid
        assert known[qid].key, qid  # computed by code, which the fixture checks
    assert all(e["derivation"].strip() and e["rows"] for e in items)


def check_rows(entry: dict[str, Any], tables: dict[str, list[dict[str, Any]]]) -> None:
    """Every listed row is in the data; every `complete` list holds all the rows of its kind."""
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


def check_key(entry: dict[str, Any], questions: Any, built: Any) -> None:
    """The key function computes the key derived by hand, field by field."""
    q = next(q for q in questions.questions if q.id == entry["question"])
    key = compute_key(q, built)
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
