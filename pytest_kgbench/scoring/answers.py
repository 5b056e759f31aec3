"""What an agent returns (`Answer`), and the two bridges to and from answer fields: the closing
JSON block of a model's text, and the rows of a reference query."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_kgbench.core.questions import FieldSpec
from pytest_kgbench.engines import QueryResult

STATUSES = ("answered", "timeout", "declined", "error", "skipped", "truncated", "refused",
            "empty")
# skipped: asked together, the session gave no answer for this question (a miss); or the item
#   could not be asked at all (a prompt longer than the model's window: never graded)
# truncated: the model stopped at --max-tokens (stop_reason max_tokens): a miss
# refused: the model declined on policy grounds (stop_reason refusal, message.refusal): a miss
# empty: every try within the deadline gave no text and no tool call: a miss, never cached


@dataclass
class Answer:
    """One agent's answer to one item."""

    text: str = ""
    block: dict[str, Any] | None = None
    queries: list[QueryResult] = field(default_factory=list)
    status: str = "answered"
    tokens: dict[str, int] = field(default_factory=dict)
    latency_s: float = 0.0
    rounds: int = 0
    error: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # every tool call, in order
    session: dict[str, Any] | None = None  # asked together: the shared session (asking/together.py)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["queries"] = [q.to_dict() for q in self.queries]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Answer:
        data = dict(data)
        data["queries"] = [QueryResult(**q) for q in data.get("queries") or []]
        return cls(**data)


_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_MAX_OBJECT_STARTS = 2000  # '{' positions tried when no fenced block parses


def _object(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, or None: never raises, whatever a model wrote (a 5,000-digit
    integer is a ValueError in Python, deep nesting a RecursionError)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def locate_block(text: str) -> tuple[int, int, dict[str, Any]] | None:
    """Where the closing answer block is: the last fenced block (any fence tag, or none) whose
    body is one JSON object; else the last balanced top-level JSON object in the text. Its
    (start, end) span in `text` and the object, or None."""
    text = text or ""
    for m in reversed(list(_FENCE.finditer(text))):
        value = _object(m.group(1).strip())
        if value is not None:
            return m.start(), m.end(), value
    decoder = json.JSONDecoder()
    found: tuple[int, int, dict[str, Any]] | None = None
    pos, tries = text.find("{"), 0
    while pos >= 0 and tries < _MAX_OBJECT_STARTS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found = (pos, end, value)
        pos = text.find("{", end)  # top level only: skip what this object holds
    return found


def extract_block(text: str) -> dict[str, Any] | None:
    """The closing JSON answer block of a text (`locate_block`), or None."""
    found = locate_block(text)
    return None if found is None else found[2]


def prose(text: str) -> str:
    """An answer's text without its closing JSON block: what leaks, figures and the judge
    read (the block's values are not prose stating them)."""
    text = text or ""
    found = locate_block(text)
    if found is None:
        return text
    start, end, _ = found
    return (text[:start] + text[end:]).strip()


def fields_from_rows(specs: tuple[FieldSpec, ...], columns: list[str],
                     rows: list[list[Any]]) -> dict[str, Any]:
    """Answer fields from a reference query's result.

    A field of a whole-result kind (`rows`) takes every row as a list of its cells, all
    columns in query order, ignoring their names (SQL and SPARQL name them differently); a
    list field takes the distinct non-null values of the column of its name, in row order;
    a scalar field takes its column's value in the first row (None without rows); a field with
    `count_of` and no column of its own is the length of that list field.
    """
    index = {c.lower(): i for i, c in enumerate(columns)}
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.whole_result:
            out[spec.name] = [list(row) for row in rows]
            continue
        col = index.get(spec.name.lower())
        if col is None:
            continue
        if spec.is_list:
            seen: list[Any] = []
            for row in rows:
                value = row[col]
                if value is not None and value not in seen:
                    seen.append(value)
            out[spec.name] = seen
        else:
            out[spec.name] = rows[0][col] if rows else None
    for spec in specs:
        if spec.name not in out and spec.count_of and spec.count_of in out:
            out[spec.name] = len(out[spec.count_of])
    missing = [s.name for s in specs if s.name not in out]
    if missing:
        raise KeyError(f"the query returns no column for field(s) {', '.join(missing)} "
                       f"(columns: {', '.join(columns)})")
    return out


def answer_text(fields: Mapping[str, Any], sentence: str) -> str:
    """A plain answer: a sentence stating every field's value in prose (what the metrics read),
    and the closing JSON block."""
    def said(value: Any) -> str:
        if isinstance(value, (list, tuple)):
            return ", ".join(str(v) for v in value) or "none"
        return "none" if value is None else str(value)

    stated = "; ".join(f"{name}: {said(value)}" for name, value in fields.items())
    block = json.dumps(dict(fields), indent=2, ensure_ascii=False, default=str)
    return f"{sentence} {stated}.\n\n```json\n{block}\n```\n"
