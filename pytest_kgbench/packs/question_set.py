"""Checks of a question set's wording (issue 34, leak-free wording): a question text must not name
its answer, and an L3 text must not name the clause of a definition its trap turns on.

No domain knowledge: the terms that would give a clause away are the pack's own
(`distinguishing_terms` in pack.yaml: concept -> words), and the values a text must not hold are
the question's key. A question may carry `wording_why` to justify a flag; it is then reported but
does not fail the check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TERM_TIERS = ("L3",)  # the tier whose texts must not name the clause they test


@dataclass(frozen=True)
class WordingFlag:
    """One term or key value found in one question's text."""

    question: str
    what: str  # "term" (a distinguishing term) or "key" (a value of the key)
    found: str
    source: str  # the concept the term names, or the key field holding the value
    justified: str | None = None  # the question's wording_why, if it gives one

    @property
    def fails(self) -> bool:
        return self.justified is None

    def line(self) -> str:
        mark = " - " if self.justified else "BAD"
        said = (f"names {self.source} ('{self.found}')" if self.what == "term"
                else f"holds its key's {self.source} ({self.found!r})")
        return f"{mark} {self.question} text {said}" + (
            f"; justified: {self.justified}" if self.justified else "")


def _term_pattern(term: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])", re.IGNORECASE)


def _scalars(value: Any) -> Iterable[Any]:
    if isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _scalars(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _scalars(v)
    else:
        yield value


def _value_texts(value: Any) -> list[str]:
    """The spellings of one key value a text could hold; none for a value no text can leak
    (a boolean, a null: yes/no and 'none' are words of any question)."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, float):
        return [repr(value)] + ([str(int(value))] if value.is_integer() else [])
    text = str(value).strip()
    return [text] if text else []


def _value_pattern(text: str) -> re.Pattern[str]:
    # case-sensitive (a rating 'A' is not the article 'a'); not inside a longer token, a date
    # or a number (30 is not the day of 2023-06-30, 5 not the digit of 2.5)
    return re.compile(rf"(?<![\w+.:/-]){re.escape(text)}(?![\w+]|[.:/-]\w)")


def wording_flags(questions: Iterable[Any], terms: Mapping[str, Iterable[str]] | None,
                  keys: Mapping[str, Mapping[str, Any] | None]) -> list[WordingFlag]:
    """Every distinguishing term (pack.yaml's `terms`, concept -> words) in an L3 question's
    text, and every value of a question's key (`keys`, by question id) in its text."""
    patterns = [(concept, word, _term_pattern(word))
                for concept, words in (terms or {}).items() for word in words or ()]
    flags: list[WordingFlag] = []
    for q in questions:
        why = getattr(q, "wording_why", None)
        if q.tier in TERM_TIERS:
            flags += [WordingFlag(q.id, "term", word, concept, why)
                      for concept, word, pattern in patterns if pattern.search(q.text)]
        for name, value in (keys.get(q.id) or {}).items():
            for scalar in _scalars(value):
                flags += [WordingFlag(q.id, "key", text, name, why)
                          for text in _value_texts(scalar) if _value_pattern(text).search(q.text)]
    return flags


def wording_lines(flags: list[WordingFlag], pack: str, checked: int) -> tuple[list[str], bool]:
    """What `kgbench check` prints of the wording flags, and whether they fail it."""
    failing = sum(f.fails for f in flags)
    lines = [f.line() for f in flags]
    lines.append(f"wording of {pack}: {checked} question texts, {len(flags)} flagged "
                 f"({failing} unjustified: a key value or a distinguishing term in the text)")
    return lines, bool(failing)
