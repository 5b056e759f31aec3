"""Collection: a question file becomes items, question x variant x condition x model x repeat.

Items are `pytest.Function`s (so fixtures work) whose case lives in `item.stash[CASE]`. Ids are
built from data only, in file order, so every xdist worker collects the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_kgbench import keys
from pytest_kgbench.conditions import Condition
from pytest_kgbench.errors import InputError
from pytest_kgbench.packs import Pack, find_pack
from pytest_kgbench.questions import Question, QuestionSet, load_questions
from pytest_kgbench.settings import Settings

REFERENCE_AGENTS = ("gold", "trap", "synthetic")


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
    return [c for c in conds if all(pack.has(f) for f in c.requires)]


def cases_for(qset: QuestionSet, pack: Pack, settings: Settings) -> Iterator[Case]:
    variants = settings.variants
    if variants == ("all",):
        variants = tuple(pack.variants)
    conds = pack_conditions(pack, settings.conditions)
    for q in qset.questions:
        for variant in variants:
            if variant not in pack.variants or (q.variants and variant not in q.variants):
                continue
            for cond in conds:
                for model in settings.models:
                    for repeat in range(1, settings.repeats + 1):
                        yield Case(q, cond, variant, model, settings.agent, repeat)


def _run_item(request: pytest.FixtureRequest, kgbench_runtime: Any) -> None:
    """The body of every kgbench item: ask, grade, bank; fail only a must-pass rule."""
    from pytest_kgbench.errors import HarnessBroken

    item = request.node
    case: Case = item.stash[keys.CASE]
    try:
        record = kgbench_runtime.run_case(case, group=item.stash.get(keys.GROUP, ()))
    except HarnessBroken as exc:
        broken = f"kgbench: the harness is broken, the run halts: {exc}"
    else:
        broken = None
    if broken:
        # stop after this item, in this process and (through xdist's shouldstop) in the whole
        # run; the controller banks what finished and exits 3 (RunStore.finish)
        item.session.shouldstop = broken
        item.stash[keys.BROKEN] = broken
        pytest.fail(broken, pytrace=False)
    item.stash[keys.RECORD] = record
    settings: Settings = kgbench_runtime.settings
    if settings.must_pass and record["grade"] != "correct":
        why = "the gold agent must answer every item correctly" if settings.agent == "gold" \
            else "--kgbench-strict: every item must be answered correctly"
        fields = "; ".join(f"{f['name']}: expected {f['expected']!r}, got {f['got']!r}"
                           for f in record["fields"] if not f["ok"])
        errors = "; ".join(q["error"] or q["refused"] or "" for q in record["answer"]["queries"]
                           if q["error"] or q["refused"])
        pytest.fail(f"{why}: graded {record['grade']} ({record['reason']})"
                    + (f"\n  fields: {fields}" if fields else "")
                    + (f"\n  query: {errors}" if errors else ""), pytrace=False)


def asks_together(settings: Settings) -> bool:
    """Whether items share together sessions (a replay answers from stored slices, per item)."""
    return settings.extra.get("ask") == "together" and settings.agent != "replay"


def session_of(case: Case) -> str:
    from pytest_kgbench.together import group_name

    q = case.question
    return group_name(q.pack, case.variant, case.condition.id, case.model, case.repeat,
                      q.persona)


def assign_sessions(items: list[pytest.Item]) -> None:
    """Asked together: give every selected item the questions of its session, in item order."""
    groups: dict[str, list[Question]] = {}
    for item in items:
        case = item.stash.get(keys.CASE, None)
        if case is not None:
            groups.setdefault(session_of(case), []).append(case.question)
    frozen = {name: tuple(qs) for name, qs in groups.items()}
    for item in items:
        case = item.stash.get(keys.CASE, None)
        if case is not None:
            item.stash[keys.GROUP] = frozen[session_of(case)]


class QuestionItem(pytest.Function):
    """A kgbench item: a `pytest.Function` (so it gets fixtures) named for its question."""

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


class QuestionFile(pytest.File):
    """A `questions/<pack>.yaml` file."""

    def collect(self) -> Iterator[pytest.Item]:
        settings: Settings = self.config.stash[keys.SETTINGS]
        try:
            qset = load_questions(self.path)
            pack = find_pack(self.path.stem, Path(settings.datasets_dir),
                             Path(settings.ontology_dir))
            unknown = [v for v in settings.variants if v != "all" and v not in pack.variants]
            if unknown and len(unknown) == len(settings.variants):
                raise InputError("--variant", f"pack '{pack.name}' has no variant "
                                 f"{', '.join(unknown)} (known: {', '.join(pack.variants)})")
            for q in qset.questions:
                if q.persona not in pack.personas:
                    raise InputError(q.file, f"no persona '{q.persona}' in the pack",
                                     question=q.id, field="persona")
        except InputError as exc:
            raise self.CollectError(str(exc)) from exc
        for case in cases_for(qset, pack, settings):
            item = QuestionItem.from_parent(self, name=case.name, callobj=_run_item)
            item.extra_keyword_matches.update(case.keywords)
            item.stash[keys.CASE] = case
            if settings.agent not in REFERENCE_AGENTS:
                # a model call that failed transiently is asked again; a graded answer never is
                item.add_marker(pytest.mark.flaky(
                    reruns=int(settings.extra.get("model_reruns", 2)), reruns_delay=0.5,
                    only_rerun=["TransientModelError"]))
            ref = case.condition.reference
            if (settings.agent in REFERENCE_AGENTS and case.question.expect != "abstain"
                    and ref not in case.question.gold):
                item.add_marker(pytest.mark.skip(
                    reason=f"{case.question.id} has no '{ref}' reference query"))
            yield item
