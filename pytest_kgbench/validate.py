"""Checking a pack's questions against its data: the key (code), the gold SQL and the gold SPARQL
must agree; every L3 trap must differ from the key; on base the key must equal the hand-written
one; a question expecting a block must have its reference query refused by the guard.

Used by the pack tests, the seed-property tests and `kgbench check`. No pytest here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_kgbench.answer_key import compute_key
from pytest_kgbench.answers import fields_from_rows
from pytest_kgbench.build import Built
from pytest_kgbench.executors import Executor
from pytest_kgbench.grading import grade_field
from pytest_kgbench.questions import Question
from pytest_kgbench.stores import open_store


@dataclass
class QuestionCheck:
    """What one question's queries and key gave on one built variant."""

    question: str
    tier: str
    variant: str
    key: Mapping[str, Any] | None
    gold: dict[str, Any] = field(default_factory=dict)
    trap: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Stores:
    """One store per reference kind and persona over a built variant, opened on first use."""

    def __init__(self, built: Built, timeout: float = 60.0,
                 engines: Mapping[str, str] | None = None) -> None:
        self.built = built
        self.timeout = timeout
        self.engines = dict(engines or {})
        self._open: dict[tuple[str, str], Executor] = {}

    def get(self, reference: str, persona: str) -> Executor:
        """The store a reference query (`sql`, `sparql`, `executed`) runs on."""
        key = (reference, persona)
        if key not in self._open:
            self._open[key] = open_store(self.built, reference, persona, engines=self.engines,
                                         timeout=self.timeout)
        return self._open[key]

    def close(self) -> None:
        for ex in self._open.values():
            ex.close()


def same_fields(question: Question, a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
                aliases: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The names of the answer fields on which `a` and `b` differ (the grader's comparison)."""
    a, b = a or {}, b or {}
    return [spec.name for spec in question.fields
            if not grade_field(spec, a.get(spec.name), b.get(spec.name), aliases).ok]


def run_fields(question: Question, stores: Stores, language: str, statement: str) -> Any:
    """The answer fields a query gives, or a dict {'refused': ...} / {'error': ...}."""
    result = stores.get(language, question.persona).run(statement)
    if result.refused:
        return {"refused": result.refused}
    if not result.ok:
        return {"error": result.error}
    try:
        return fields_from_rows(question.fields, result.columns, result.rows)
    except KeyError as exc:
        return {"error": str(exc)}


def check_question(question: Question, built: Built, stores: Stores) -> QuestionCheck:
    key = compute_key(question, built)
    check = QuestionCheck(question.id, question.tier, built.variant, key)
    aliases = built.aliases
    for lang, statement in question.gold.items():
        got = run_fields(question, stores, lang, statement)
        check.gold[lang] = got
        if question.expect == "block":
            if "refused" not in got:
                check.problems.append(f"gold {lang} was not refused by the guard")
        elif "error" in got or "refused" in got:
            check.problems.append(f"gold {lang} failed: {got}")
        else:
            diff = same_fields(question, key, got, aliases)
            if diff:
                check.problems.append(f"gold {lang} differs from the key on {diff}: "
                                      f"key {key}, gold {got}")
    for lang, statement in question.trap.items():
        got = run_fields(question, stores, lang, statement)
        check.trap[lang] = got
        if question.tier == "L3":
            if "error" in got or "refused" in got:
                check.problems.append(f"trap {lang} failed: {got}")
            elif not same_fields(question, key, got, aliases):
                check.problems.append(f"trap {lang} gives the key ({got}): the trap does not bite")
    if (built.variant == "base" and built.seed == built.pack.seed
            and question.hand_key is not None and question.expect == "answer"):
        diff = same_fields(question, key, question.hand_key, aliases)
        if diff:
            check.problems.append(f"key differs from hand_key on {diff}: key {key}, "
                                  f"hand_key {dict(question.hand_key)}")
    return check


def check_questions(questions: list[Question], built: Built, *, timeout: float = 60.0,
                    engines: Mapping[str, str] | None = None) -> list[QuestionCheck]:
    """Check every question that runs on this variant (on the `engines` named per language,
    else each language's default)."""
    stores = Stores(built, timeout, engines)
    try:
        return [check_question(q, built, stores) for q in questions
                if q.variants is None or built.variant in q.variants]
    finally:
        stores.close()
