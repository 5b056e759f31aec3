"""The case model: which items a question set makes under the session's settings —
question x variant x condition x model x repeat — and which together session each belongs to.
Pure module: no pytest (collect.py turns cases into items).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pytest_kgbench.conditions import Condition
from pytest_kgbench.packs import Pack
from pytest_kgbench.questions import Question, QuestionSet
from pytest_kgbench.settings import Settings


@dataclass(frozen=True)
class Case:
    """One item: what is asked, under which condition, of whom, which time."""

    question: Question
    condition: Condition
    variant: str
    model: str
    agent: str
    repeat: int

    @property
    def param_id(self) -> str:
        variant = "" if self.variant == "base" else f"{self.variant}-"
        return f"{variant}{self.condition.id}-{self.model}-r{self.repeat}"

    @property
    def name(self) -> str:
        return f"{self.question.id}[{self.param_id}]"

    @property
    def keywords(self) -> set[str]:
        """What `-k` matches besides the name: tier, pack, variant, condition id and label,
        mode, model and expectation (so `-k L3`, `-k "credit and D2"` select)."""
        q = self.question
        return {q.tier, q.pack, self.variant, self.condition.id, self.condition.label,
                self.condition.mode, self.model, q.expect}


def pack_conditions(pack: Pack, conds: tuple[Condition, ...]) -> list[Condition]:
    """The selected conditions this pack has every artefact for."""
    return [c for c in conds if pack.lacks(c.artefacts) is None]


def not_run(pack: Pack, conds: tuple[Condition, ...]) -> list[str]:
    """Why parts of the selection do not run on this pack, one line each ("pack cwd-acme has
    no rules (shapes.ttl): D6 skipped"); the whole pack when its data is unavailable."""
    if pack.unavailable:
        return [f"pack {pack.name} skipped: {pack.unavailable}"]
    by_reason: dict[str, list[str]] = {}
    for cond in conds:
        why = pack.lacks(cond.artefacts)
        if why:
            by_reason.setdefault(why, []).append(cond.id)
    return [f"pack {pack.name} {why}: {', '.join(ids)} skipped"
            for why, ids in by_reason.items()]


def cases_for(qset: QuestionSet, pack: Pack, settings: Settings) -> Iterator[Case]:
    """Every item of a question file, in file order (so every xdist worker agrees)."""
    variants = settings.variants
    if variants == ("all",):
        variants = tuple(pack.variants)
    conds = pack_conditions(pack, settings.conditions)
    for q in qset.questions:
        for variant in variants:
            if variant not in pack.variants or (q.variants and variant not in q.variants):
                continue
            for cond in conds:
                if cond.mode not in q.modes:
                    continue
                for model in settings.models:
                    for repeat in range(1, settings.repeats + 1):
                        yield Case(q, cond, variant, model, settings.agent, repeat)


def session_of(case: Case) -> str:
    """The together session an item belongs to."""
    from pytest_kgbench.together import group_name

    q = case.question
    return group_name(q.pack, case.variant, case.condition.id, case.model, case.repeat,
                      q.persona)


def asks_together(settings: Settings) -> bool:
    """Whether items share together sessions (a replay answers from stored slices, per item)."""
    from pytest_kgbench.registry import current

    return settings.ask == "together" and current().agent(settings.agent).kind != "replay"


def session_notes(settings: Settings, args: list[str]) -> list[str]:
    """The not-run lines of the session's packs (those whose question files the collection
    arguments reach; every selected pack when there are none)."""
    from pathlib import Path

    from pytest_kgbench.errors import InputError
    from pytest_kgbench.locate import open_pack, selected

    roots = [Path(a.split("::", 1)[0]).resolve() for a in args]
    out: list[str] = []
    for source in selected(settings).values():
        if roots and not any(f == r or r in f.parents for f in source.question_files
                             for r in roots):
            continue
        try:
            pack = open_pack(settings, source.name)
        except InputError:
            continue  # collection reports it, naming the file and field
        out += not_run(pack, settings.conditions)
    return out
