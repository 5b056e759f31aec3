"""Collection: a question file becomes items, question x variant x condition x model x repeat.

Items are `pytest.Function`s (so fixtures work) whose case (asking/cases.py) lives in
`item.stash[CASE]`. Ids are built from data only, in file order, so every xdist worker collects
the same list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_kgbench.agents import agent_class
from pytest_kgbench.asking.cases import Case, cases_for, not_run, session_of
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.questions import KEY_QUERIES, Question, QuestionSet, load_questions
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.packs.locate import PackSource, open_pack, selected, source_of_file
from pytest_kgbench.packs.schema import Pack
from pytest_kgbench.plugin import keys

BY_CONTEXT = "kgbench_by_context"
"""The workerinput key saying the controller schedules by prompt context (plugin/__init__.py)."""


def _not_banked(item: pytest.Item, runtime: Any, why: str) -> NoReturn:
    """Drop the item's answer: it is never banked, the run lists it as missing (the hook
    attaches `why` to its report), and --resume asks it again."""
    item.stash[keys.NOT_BANKED] = why
    if runtime is not None and keys.INTERRUPT in item.config.stash and \
            item.config.stash[keys.INTERRUPT].requested:
        runtime.stop()  # nothing more is asked: answers in flight are cut, never banked
    pytest.skip(why)


def _run_item(request: pytest.FixtureRequest, kgbench_items: Any) -> None:
    """The body of every kgbench item: ask, grade, bank; fail only a must-pass rule. After a
    Ctrl-C (core/interrupt.py) the item's answer is dropped, whatever it was: what the interruption
    hit (a query DuckDB stopped, a model call cut short) must not be graded."""
    from contextlib import nullcontext

    from pytest_kgbench.core.errors import BudgetReached, HarnessBroken, NoAnswer
    from pytest_kgbench.core.interrupt import INTERRUPTED

    item = request.node
    case: Case = item.stash[keys.CASE]
    broken: str | None = None
    settings: Settings = kgbench_items.settings
    interrupt = item.config.stash.get(keys.INTERRUPT, None)
    dropped = (f"not banked: the run was {INTERRUPTED} while this item was asked; "
               f"pytest --resume {settings.plan.run_id} asks it again")
    concurrency = settings.limits.concurrency
    ahead = upcoming(item, 2 * concurrency) if concurrency > 1 else []
    try:
        with interrupt.abortable() if interrupt is not None else nullcontext():
            record = kgbench_items.run_case(case, group=item.stash.get(keys.GROUP, ()),
                                              upcoming=ahead)
    except BaseException as exc:
        if interrupt is not None and interrupt.requested:
            # whatever it is (DuckDB turns the KeyboardInterrupt into a RuntimeError), the
            # interruption may be what raised it: never graded, never a halt
            _not_banked(item, kgbench_items.runtime, dropped)
        if isinstance(exc, NoAnswer):
            _not_banked(item, None, f"not banked: {exc}")
        elif isinstance(exc, BudgetReached):
            broken = f"kgbench: the run halts at its spending cap: {exc}"
        elif isinstance(exc, HarnessBroken):
            broken = f"kgbench: the harness is broken, the run halts: {exc}"
        else:
            raise
    if interrupt is not None and interrupt.requested:
        _not_banked(item, kgbench_items.runtime, dropped)  # what broke may be the interruption
    if broken is not None:
        # stop after this item, in this process and (through xdist's shouldstop) in the whole
        # run; the controller banks what finished and exits 3 (RunStore.finish)
        _halt(item, broken)
        pytest.fail(broken, pytrace=False)
    item.stash[keys.RECORD] = record
    if kgbench_items.broken is not None:  # the item was answered, then the harness broke
        _halt(item, f"kgbench: the harness is broken, the run halts: {kgbench_items.broken}")
        kgbench_items.broken = None
    if record["grade"] == "skipped":  # it could not be asked: banked with the reason, no grade
        pytest.skip(record["reason"])
    must_pass = settings.plan.strict or agent_class(settings.plan.agent,
                                                    kgbench_items.registry).must_pass
    if must_pass and record["grade"] != "correct":
        why = ("--kgbench-strict: every item must be answered correctly" if settings.plan.strict
               else f"the {settings.plan.agent} agent must answer every item correctly")
        fields = "; ".join(f"{f['name']}: expected {f['expected']!r}, got {f['got']!r}"
                           for f in record["fields"] if not f["ok"])
        errors = "; ".join(q["error"] or q["refused"] or "" for q in record["answer"]["queries"]
                           if q["error"] or q["refused"])
        pytest.fail(f"{why}: graded {record['grade']} ({record['reason']})"
                    + (f"\n  fields: {fields}" if fields else "")
                    + (f"\n  query: {errors}" if errors else ""), pytrace=False)


def upcoming(item: pytest.Item, n: int) -> list[Case]:
    """The cases of at most `n` items this process is sure to run after `item` (--concurrency
    answers them ahead): serially, the following items of the session; on an xdist worker
    (whose scheduler sends a prompt context's items wholly to one worker, `context_scope`),
    the following items of the item's own scope. Items marked skip are passed over."""
    from pytest_kgbench.asking.cases import context_scope

    session = item.session
    positions = session.stash.get(keys.POSITIONS, None)
    if positions is None or len(positions) != len(session.items):
        positions = {id(x): i for i, x in enumerate(session.items)}
        session.stash[keys.POSITIONS] = positions
    index = positions.get(id(item))
    if index is None:
        return []
    workerinput: dict[str, Any] | None = getattr(item.config, "workerinput", None)
    worker = workerinput is not None
    if workerinput is not None and not workerinput.get(BY_CONTEXT):
        return []  # another scheduler may send the next items anywhere
    scopes: dict[str, str] = {}
    if workerinput is not None:  # the scheduler's scopes (cases.scope_groups), computed alike
        scopes = session.stash.get(keys.SCOPES, {})
        if not scopes:
            from pytest_kgbench.asking.cases import asks_together, scope_groups

            scopes = session.stash[keys.SCOPES] = scope_groups(
                [x.nodeid for x in session.items], int(workerinput.get("workercount") or 1),
                split=not asks_together(item.config.stash[keys.SETTINGS],
                                        item.config.stash[keys.REGISTRY]))
    scope = scopes.get(item.nodeid, context_scope(item.nodeid)) if worker else None
    out: list[Case] = []
    for nxt in session.items[index + 1:]:
        if len(out) >= n:
            break
        if worker and scopes.get(nxt.nodeid, context_scope(nxt.nodeid)) != scope:
            break  # a scope's items are consecutive (order_by_context)
        if not _askable(nxt):
            continue
        out.append(nxt.stash[keys.CASE])
    return out


def _askable(item: pytest.Item) -> bool:
    """A question item that is not marked skip (looked up once per item)."""
    known = item.stash.get(keys.ASKABLE, None)
    if known is None:
        known = keys.CASE in item.stash and item.get_closest_marker("skip") is None
        item.stash[keys.ASKABLE] = known
    return known


def order_by_context(items: list[pytest.Item]) -> None:
    """Items sharing a prompt context run one after another (cases.context_of): a stable sort
    by the first appearance of each item's scope, then of its persona within it, so the
    provider's prompt cache holds a context's data block while its items are asked, instead of
    losing it between questions. The order within a context (question, repeat) is kept, and
    so is any order a plugin such as pytest-randomly gave before (contexts in their first
    appearance). Items that are not questions keep their places among the groups."""
    from pytest_kgbench.asking.cases import context_of

    first: dict[Any, int] = {}
    keyed: list[tuple[int, int, int]] = []
    for i, item in enumerate(items):
        case = item.stash.get(keys.CASE, None)
        if case is None:
            keyed.append((i, 0, i))
            continue
        scope, persona = context_of(case)
        a = first.setdefault(scope, i)
        keyed.append((a, first.setdefault((scope, persona), i), i))
    order = sorted(range(len(items)), key=lambda j: keyed[j])
    items[:] = [items[j] for j in order]


def _halt(item: pytest.Item, why: str) -> None:
    item.session.shouldstop = why
    item.stash[keys.BROKEN] = why


def resume_split(items: list[pytest.Item], banked: Sequence[Mapping[str, Any]]
                 ) -> tuple[list[pytest.Item], list[str]]:
    """Resuming: (the items already banked, which are not asked again; the banked items whose
    question was edited since, which are asked again and never graded against the old
    answer)."""
    records = {r.get("nodeid"): r for r in banked}
    done: list[pytest.Item] = []
    again: list[str] = []
    for item in items:
        rec = records.get(item.nodeid)
        case = item.stash.get(keys.CASE, None)
        if rec is None:
            continue
        if case is not None and rec.get("question_sha256") != case.question.sha256:
            again.append(item.nodeid)
        else:
            done.append(item)
    return done, again


def not_answerable(items: list[pytest.Item], settings: Settings, registry: Registry
                   ) -> list[pytest.Item]:
    """The items the session's agent cannot answer and so does not ask (a replay answers only
    what its stored run asked): those its class's `selects(settings)` does not keep."""
    keep = agent_class(settings.plan.agent, registry).selects(settings)
    if keep is None:
        return []
    return [i for i in items if keys.CASE in i.stash and not keep(i.stash[keys.CASE])]


def not_planned(items: list[pytest.Item], settings: Settings) -> list[pytest.Item]:
    """Resuming: the items the run was not started with (meta.json's `expected`: a question
    added to the file since), which it does not ask; with --force-resume, none."""
    from pytest_kgbench.core.settings import stored_meta

    if not settings.plan.resume or settings.plan.force_resume:
        return []
    planned = stored_meta(settings.run_dir).get("expected")
    if not isinstance(planned, list):
        return []  # a run from before it recorded its items
    keep = set(planned)
    return [i for i in items if keys.CASE in i.stash and i.nodeid not in keep]


def not_sampled(items: list[pytest.Item], settings: Settings) -> list[pytest.Item]:
    """With --sample N, the items whose question is not among the N drawn per pack and tier."""
    from pytest_kgbench.asking.cases import sample_questions

    if not settings.plan.sample:
        return []
    cases = [i.stash[keys.CASE] for i in items if keys.CASE in i.stash]
    keep = sample_questions([c.question for c in cases], settings.plan.sample,
                            settings.plan.stats_seed)
    return [i for i in items if keys.CASE in i.stash and
            (i.stash[keys.CASE].question.pack, i.stash[keys.CASE].question.id) not in keep]


def not_rerun(items: list[pytest.Item], settings: Settings) -> list[pytest.Item]:
    """With --kgbench-rerun RUN, the items RUN did not grade wrong, partial or timed out."""
    if settings.plan.rerun is None:
        return []
    again = set(settings.plan.rerun)
    return [i for i in items if i.nodeid not in again]


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
        # a line number is needed: pytest places an item's runtime skip with it
        return self.path, 0, self.name


def check_collected(qset: QuestionSet, pack: Pack, settings: Settings) -> None:
    """What collection can check before anything runs: the variants exist, each question's
    persona exists and its key function resolves."""
    unknown = [v for v in settings.plan.variants if v != "all" and not pack.has_variant(v)]
    if unknown and len(unknown) == len(settings.plan.variants):
        raise InputError("--variant", f"pack '{pack.name}' has no variant "
                         f"{', '.join(unknown)} (known: {', '.join(pack.variants)})")
    for q in qset.questions:
        if q.persona not in pack.personas:
            raise InputError(q.file, f"no persona '{q.persona}' in the pack",
                             question=q.id, field="persona")
        if q.key is not None and q.key not in KEY_QUERIES and q.expect == "answer":
            pack.key_function(q.key, question=q.id)


def questions_of(config: pytest.Config, path: Path, name: str, pack: Pack) -> QuestionSet:
    """A question file's questions, read and checked once per session (the run's preflight
    reads them, then collection)."""
    read = config.stash.setdefault(keys.QUESTION_SETS, {})
    key = (str(path), name)
    if key not in read:
        read[key] = load_questions(path, pack=name, source=pack,
                                   registry=config.stash[keys.REGISTRY])
    return read[key]


def reached(settings: Settings, paths: Sequence[Path]) -> list[PackSource]:
    """The packs whose question files the collection paths reach (every selected pack when
    there are none)."""
    roots = [p.resolve() for p in paths]
    return [source for source in selected(settings).values()
            if not roots or any(f == r or r in f.parents for f in source.question_files
                                for r in roots)]


def preflight(config: pytest.Config, settings: Settings, paths: Sequence[Path]) -> list[str]:
    """What would stop the run's collection, found before anything is made (a run that fails
    here leaves no run folder): each pack the paths reach opens, its question files read and
    check (collect.check_collected: the variants, personas, key functions), and at least one
    pack can run here. Returns the not-run lines of the reached packs (a pack whose external
    data or optional dependency is absent is left out, saying why); raises InputError naming
    the file and field, or saying why nothing can run."""
    roots = [p.resolve() for p in paths]
    sources = reached(settings, paths)
    notes: list[str] = []
    runnable = 0
    for source in sources:
        pack = open_pack(settings, source.name)
        notes += not_run(pack, settings.conditions(config.stash[keys.REGISTRY]))
        if pack.unavailable:
            continue
        runnable += 1
        for path in source.question_files:
            if roots and not any(path == r or r in path.parents for r in roots):
                continue
            check_collected(questions_of(config, path, source.name, pack), pack, settings)
    if sources and not runnable:
        where = "--pack" if settings.plan.pack_names else ", ".join(str(p) for p in paths)
        raise InputError(where, "nothing can run here: " + "; ".join(notes))
    return notes


class QuestionFile(pytest.File):
    """A `questions/<pack>.yaml` file."""

    def collect(self) -> Iterator[pytest.Item]:
        settings: Settings = self.config.stash[keys.SETTINGS]
        registry = self.config.stash[keys.REGISTRY]
        agent = agent_class(settings.plan.agent, registry)
        source = source_of_file(settings, self.path)
        name = source.name if source else self.path.stem
        if settings.plan.pack_names and name not in settings.plan.pack_names:
            return
        try:
            pack = open_pack(settings, name)
            if pack.unavailable:
                return  # the controller's notes say why (collect.preflight)
            qset = questions_of(self.config, self.path, name, pack)
            check_collected(qset, pack, settings)
        except InputError as exc:
            raise self.CollectError(str(exc)) from exc
        for case in cases_for(qset, pack, settings, registry):
            item = QuestionItem.from_parent(self, name=case.name, callobj=_run_item)
            item.extra_keyword_matches.update(case.keywords)
            for marker in case.markers:
                item.add_marker(marker)
            item.stash[keys.CASE] = case
            if agent.kind == "model":
                # a model call that failed transiently is asked again; a graded answer never is
                item.add_marker(pytest.mark.flaky(
                    reruns=settings.limits.model_reruns, reruns_delay=0.5,
                    only_rerun=["TransientModelError"]))
            ref = case.condition.reference
            if case.question.skip:
                item.add_marker(pytest.mark.skip(
                    reason=f"{case.question.id}: {case.question.skip}"))
            elif (agent.kind == "reference" and case.question.expect != "abstain"
                    and ref not in case.question.gold):
                item.add_marker(pytest.mark.skip(
                    reason=f"{case.question.id} has no '{ref}' reference query"))
            elif (agent.kind == "reference" and case.question.disagreement
                    and case.question.key != f"gold.{ref}"):
                item.add_marker(pytest.mark.skip(
                    reason=f"{case.question.id}: its {ref} reference disagrees with its key "
                    f"({case.question.disagreement})"))
            yield item
