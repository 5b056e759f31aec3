"""The item runner: one item turned into its record (its answer, grade, metrics and the
judge's reading), on the caches of the process's `Runtime`. No pytest here: the hooks call it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.analysis.comparisons import UNSERVABLE
from pytest_kgbench.asking.cases import Case, session_of
from pytest_kgbench.asking.prompts import Prompt
from pytest_kgbench.core.conditions import Condition
from pytest_kgbench.core.errors import (
    HarnessBroken,
    ItemSkipped,
    ReferenceFailed,
    TransientModelError,
)
from pytest_kgbench.core.questions import KEY_QUERIES, Question
from pytest_kgbench.core.record import ItemRecord
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.engines import Caps, Executor
from pytest_kgbench.engines.stores import guard_for, refusal
from pytest_kgbench.metrics import MetricInput, measure_all, ordered
from pytest_kgbench.packs.build import Built
from pytest_kgbench.packs.schema import normalise_id
from pytest_kgbench.run.runtime import Runtime
from pytest_kgbench.scoring.answers import Answer, prose
from pytest_kgbench.scoring.fieldkinds import entity_of
from pytest_kgbench.scoring.grading import Grade, grade

JUDGE_TRIES = 2  # the judge's own tries of a pass (each with the backend's retries inside)
SKIPPED_LETTER = "S"  # an item that could not be asked (pytest's own letter for a skip)
TRUNCATED_LETTER = "M"  # an answer cut at --max-tokens: a miss


@dataclass
class Asked:
    """What asking one item gave: its prompt, its answer, what the agent sent, and why it was
    skipped (never graded) when it could not be asked."""

    prompt: Prompt
    answer: Answer
    sent: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    unservable: bool = False  # skipped because its store cannot serve the question
    started: str = ""       # when the asking began (UTC, ISO seconds)
    elapsed: float = 0.0    # how long the asking took, seconds


@dataclass
class Prepared:
    """What asking one item apart needs, made on the item's own thread before it is asked
    (the runtime's caches are not shared with the threads that answer ahead)."""

    built: Built
    executor: Executor | None
    task: Task
    unservable: str | None = None  # why its store cannot serve the question (a skip)


def case_key(case: Case) -> tuple[str, str, str]:
    """An item of the session, as the answers in flight know it."""
    return (case.question.pack, str(case.question.file), case.name)


class ItemRunner:
    """Asks and grades the items of one process, on its runtime's caches; holds what an item
    leaves for the next (a together session's answer, the answers started ahead, the names a
    condition defines) and whether the harness broke after an item's answer was made."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._sessions: dict[tuple[str, tuple[str, ...]], tuple[Asked, dict[str, Answer]]] = {}
        self._prepared: dict[tuple[str, str, str], Prepared] = {}  # items answered ahead
        self._given: dict[tuple[str, str], list[str]] = {}
        self._served: dict[tuple[str, ...], str | None] = {}  # unservable, per question/store
        self.broken: str | None = None  # the harness broke after the item's answer was made

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def registry(self) -> Registry:
        return self.runtime.registry

    def run_case(self, case: Case, group: tuple[Question, ...] = (),
                 upcoming: Iterable[Case] = ()) -> ItemRecord:
        """Ask one item and grade it; return its record (builtin types only). With `group` (the
        selected questions of the item's together session) the item's answer is its slice of
        the session's one answer, asked once per process. An item that cannot be asked
        (`ItemSkipped`) gets a record graded "skipped", which the hook skips.

        `upcoming`: the items this process will run next (--concurrency: their answers are
        started now, up to N in flight, and each is taken by its own item; asking/inflight.py)."""
        q, cond = case.question, case.condition
        agent = self.runtime.agent(case.agent, case.model)
        if group:
            started = _now()
            t0 = time.perf_counter()
            built = self.runtime.built(q.pack, case.variant)
            executor = (self.runtime.executor(built, cond, q.persona)
                        if cond.mode == "querying" else None)
            asked = self.together_answer(case, built, executor, group)
            asked.started, asked.elapsed = started, round(time.perf_counter() - t0, 4)
        elif self.runtime.concurrent(agent):
            prepared, asked = self.answer_ahead(case, agent, upcoming)
            built, executor = prepared.built, prepared.executor
        else:
            prepared = self.prepare(case)
            built, executor = prepared.built, prepared.executor
            asked = self.answer(agent, prepared)
        answer = asked.answer
        key = self.runtime.key(q, built)
        if asked.skipped is not None:
            result = Grade("skipped", None, UNSERVABLE if asked.unservable else "skipped",
                           SKIPPED_LETTER, [], asked.skipped)
            metrics: dict[str, Any] = {}
        else:
            result = self.grade(q, cond, built, key, answer)
            metrics = self.metrics(q, cond, built, answer, executor)
            if q.checklist and agent.judged and answer.status == "answered":
                metrics["judge"] = (self.judge(q, answer.text, agent)
                                    if prose(answer.text).strip() else
                                    {"skipped": "the answer has no prose to judge"})
        return make_record(case, built, asked, Graded(key, result, metrics), agent=agent,
                           together=bool(group))

    def prepare(self, case: Case) -> Prepared:
        """The built variant, the store, the prompt and the task of an item asked apart."""
        q, cond = case.question, case.condition
        built = self.runtime.built(q.pack, case.variant)
        executor = (self.runtime.executor(built, cond, q.persona)
                    if cond.mode == "querying" else None)
        prompt = self.runtime.prompt(cond, built, q, executor)
        task = Task(question=q, condition=cond, prompt=prompt,
                    guard=guard_for(built, q.persona), built=built, model=case.model,
                    repeat=case.repeat, executor=executor)
        return Prepared(built, executor, task, self.unservable(case, task))

    def unservable(self, case: Case, task: Task) -> str | None:
        """Why the item's store cannot serve its question, or None; such an item is skipped
        with the reason, for every agent, never graded (a limit of the harness or of the
        store is not the model's miss). Two reasons, for querying conditions only:

        - the key lists more values than one query hands over (`past_row_cap`), a limit that
          grows with the data;
        - the store is one the harness does not vouch for (`Executor.checks_reference`: a
          SPARQL server of the user's) and the question's reference query, run on it as the
          gold agent runs it, is not graded correct there: an error of the server's compiler,
          SQL's integer division (Virtuoso). Checked once per question, condition and
          persona in a process. A reference past its deadline is not a verdict on the
          server: the run halts, as for a reference that fails on a store the harness
          vouches for."""
        q, executor = case.question, task.executor
        if executor is None or q.expect != "answer":
            return None
        built = task.built
        key = self.runtime.key(q, built)
        cached = (q.pack, case.variant, q.id, case.condition.id, q.persona)
        if cached in self._served:
            return self._served[cached]
        why = past_row_cap(q, key, executor.caps)
        if why is None and executor.checks_reference:
            where = f"{executor.engine_name()} cannot serve {q.id} under {case.condition.id}"
            try:
                answer = self.runtime.agent("gold").ask(task)
            except ReferenceFailed as exc:
                why = f"{where}: {exc}"
            else:
                got = self.grade(q, case.condition, built, key, answer)
                if got.grade != "correct":
                    fields = "; ".join(f"{f.name}: expected {f.expected!r}, got {f.got!r}"
                                       for f in got.fields if not f.ok)
                    why = (f"{where}: its reference query is graded {got.grade} there "
                           f"({'; '.join(x for x in (got.reason, fields) if x)})")
        self._served[cached] = why
        return why

    @staticmethod
    def answer(agent: BaseAgent, prepared: Prepared) -> Asked:
        """Ask the agent (on whichever thread): an item that cannot be asked is skipped."""
        task = prepared.task
        started = _now()
        t0 = time.perf_counter()
        if prepared.unservable is not None:
            return Asked(task.prompt, Answer(status="skipped", error=prepared.unservable),
                         task.sent, skipped=prepared.unservable, unservable=True,
                         started=started)
        try:
            asked = Asked(task.prompt, agent.ask(task), task.sent)
        except ItemSkipped as exc:
            asked = Asked(task.prompt, Answer(status="skipped", error=str(exc)), task.sent,
                          skipped=str(exc))
        asked.started, asked.elapsed = started, round(time.perf_counter() - t0, 4)
        return asked

    def answer_ahead(self, case: Case, agent: BaseAgent, upcoming: Iterable[Case]
                     ) -> tuple[Prepared, Asked]:
        """--concurrency: start this item's answer and the next items' (queued up to 2N ahead,
        N in flight), then wait for this one's. What preparing or asking an item raised is
        raised by its own item; a broken harness stops every answer in flight."""
        assert self.runtime.inflight is not None
        prepared = self._prepared

        def starts(c: Case) -> Any:
            try:
                ready = prepared[case_key(c)] = self.prepare(c)
            except Exception as exc:  # noqa: BLE001 - raised by its own item, when it runs
                error = exc

                def fail() -> Asked:
                    raise error
                return fail
            return lambda: self.answer(agent, ready)

        mine = case_key(case)
        if not self.runtime.inflight.started(mine):
            self.runtime.inflight.start(mine, starts(case), force=True)
            if not self.runtime.inflight.started(mine):  # the pool is closed: asked here
                ready = prepared.pop(mine, None) or self.prepare(case)
                return ready, self.answer(agent, ready)
        room, held = self.runtime.inflight.room(), self.runtime.inflight.keys()
        for nxt in upcoming:
            if room <= 0:
                break
            key = case_key(nxt)
            # the same agent object: a model at an endpoint of its own has one of its own
            if nxt.agent == case.agent and key not in held and \
                    self.runtime.agent(nxt.agent, nxt.model) is agent:
                room -= self.runtime.inflight.start(key, starts(nxt))
        try:
            asked = self.runtime.inflight.take(mine)
        except HarnessBroken:
            self.runtime.stop()
            raise
        finally:
            mine_ready: Prepared | None = prepared.pop(mine, None)
        if mine_ready is None:  # pragma: no cover - a started item was always prepared
            raise HarnessBroken(f"{case.name}: answered ahead without being prepared")
        return mine_ready, asked

    def grade(self, q: Question, cond: Condition, built: Built, key: dict[str, Any] | None,
              answer: Answer) -> Grade:
        """The item's grade, with the guard's earlier action (withheld data) taken into
        account for block questions. An answer cut at --max-tokens is a miss, whatever its
        cut text holds (its fields are kept for the reader)."""
        result = grade(q, key, answer, built.aliases,
                       guard_withheld=self.guard_withheld(q, cond, built))
        if answer.status == "truncated":
            return replace(result, grade="wrong", score=0.0, behaviour="truncated",
                           letter=TRUNCATED_LETTER,
                           reason=answer.error or "the answer was cut at --max-tokens")
        return result

    def together_answer(self, case: Case, built: Built, executor: Executor | None,
                        group: tuple[Question, ...]) -> Asked:
        """The item's slice of its together session, asking the session the first time.

        Model agents answer the session's prompt in one conversation; reference agents answer
        per question, and their answers are combined into one session answer first, so both go
        through the same split (asking/together.py). A session that cannot be asked skips each of
        its items."""
        from pytest_kgbench.asking import together

        q, cond = case.question, case.condition
        ids = tuple(x.id for x in group)
        name = session_of(case)
        if (name, ids) not in self._sessions:
            prompt = self.runtime.together_prompt(cond, built, group, executor)
            agent = self.runtime.agent(case.agent, case.model)
            common: dict[str, Any] = dict(
                condition=cond, prompt=prompt, guard=guard_for(built, q.persona), built=built,
                model=case.model, repeat=case.repeat, executor=executor, together=ids)
            task = Task(question=group[0], **common)
            try:
                if agent.asks_together:
                    session = agent.ask(task)
                else:
                    session = together.combine(
                        [(x.id, agent.ask(Task(question=x, **common))) for x in group])
            except ItemSkipped as exc:
                skipped = Asked(prompt, Answer(), task.sent, skipped=str(exc))
                self._sessions[(name, ids)] = (skipped, {
                    x: Answer(status="skipped", error=str(exc)) for x in ids})
            else:
                self._sessions[(name, ids)] = (Asked(prompt, session, task.sent),
                                               together.split(session, ids, name, asker=q.id))
        asked, answers = self._sessions[(name, ids)]
        if q.id not in answers:  # pragma: no cover - the group always holds its own item
            raise HarnessBroken(f"{q.id} is not a question of its together session {name}")
        return replace(asked, answer=answers[q.id])

    def judge_backend(self, agent: BaseAgent) -> BaseAgent:
        """What the judge asks through: the run's own agent when it can make a plain call
        (`BaseAgent.completes`), so a run is judged by the backend it uses; else the default
        model agent."""
        if agent.completes:
            return agent
        from pytest_kgbench.core.settings import default_agent

        return self.runtime.agent(default_agent(True, self.registry))

    def judge(self, q: Question, text: str, agent: BaseAgent) -> dict[str, Any]:
        """Two passes of the judge model over a "why" answer's checklist. The judge retries
        itself; a judge that still fails marks the item's judgement failed (the answer and its
        grade stand, the model is never asked again). A judge the harness cannot ask at all
        (a rejected credential, an unknown judge model) also halts the run after this item."""
        from pytest_kgbench.scoring.judge import ask_judge

        backend = self.judge_backend(agent)
        model = self.settings.model_id(self.settings.model.judge_model)
        passes: list[tuple[list[bool] | None, dict[str, int]]] = []
        for _ in range(2):
            failure: str | None = None
            for _attempt in range(JUDGE_TRIES):
                try:
                    passes.append(ask_judge(backend.complete, model, q.text, text, q.checklist,
                                            timeout=self.settings.limits.item_timeout))
                    failure = None
                    break
                except TransientModelError as exc:
                    failure = f"the judge failed after its retries: {exc}"
                except HarnessBroken as exc:
                    self.broken = f"the judge cannot be asked: {exc}"
                    return {"model": model, "checklist": list(q.checklist),
                            "failed": self.broken}
            if failure is not None:
                return {"model": model, "checklist": list(q.checklist), "failed": failure}
        (first, used), (second, used2) = passes
        return {"model": model, "checklist": list(q.checklist), "first": first,
                "second": second, "tokens": {k: used[k] + used2[k] for k in used},
                "score": None if first is None else sum(first) / len(first)}

    def guard_withheld(self, q: Question, cond: Condition, built: Built) -> bool:
        """Whether the data a block question asks for was withheld from view before the agent
        could ask (its reference query is refused as personal data for this persona)."""
        statement = q.gold.get(cond.reference) if q.expect == "block" else None
        if not statement:
            return False
        refused = refusal(built, cond, q.persona, statement,
                          self.settings.engines_for(cond), self.registry)
        return bool(refused and "personal data" in refused)

    def metrics(self, q: Question, cond: Condition, built: Built, answer: Answer,
                executor: Executor | None, *, rerun: bool = False) -> dict[str, Any]:
        """Every registered metric that can be measured for this item (metrics/).

        The last statement's result is the one the executor gave moments ago in this item; with
        `rerun` (a rescore of stored answers) the statement runs again instead."""
        aliases = built.aliases
        item = MetricInput(
            question=q, condition=cond, answer=answer, executor=executor,
            definitions_given=self.definitions_given(built, cond),
            key_records=self.key_records(q, built),
            canonical=lambda r: _canonical(r, aliases),
            evidence=built.pack.manifest.get("evidence") or {},
            prefixes=dict(built.pack.rdf.get("prefixes") or {}), rerun=rerun)
        return measure_all(item, ordered(self.registry))

    def definitions_given(self, built: Built, cond: Condition) -> list[str]:
        """The names (labels and CURIEs) of the definitions this condition shows."""
        key = (built.pack.name, cond.id)
        if key not in self._given:
            from pytest_kgbench.packs.rdf.ontology import concepts, defined_names

            names: list[str] = []
            for kind in cond.definitions:
                if kind in ("markdown", "ontology", "neutral"):
                    if not built.pack.definitions_ttl.is_file():
                        continue  # supplied Markdown only: no concepts to name
                    ttl = built.pack.definitions_ttl.read_text(encoding="utf-8")
                    for c in concepts(ttl):
                        names += [c["label"], c["curie"], c["curie"].split(":", 1)[-1]]
                elif kind == "axioms":
                    for name in ("axioms.ttl", "shapes.ttl"):
                        path = built.pack.ontology_file(name)
                        if path:
                            names += defined_names(path.read_text(encoding="utf-8"))
            self._given[key] = names
        return self._given[key]

    def key_records(self, q: Question, built: Built) -> list[str]:
        """The records a question's key depends on: those its key function names (`_records`),
        else the entities of its key's entity fields."""
        if q.expect != "answer":
            return []
        if q.key and q.key not in KEY_QUERIES:
            fn = built.pack.key_function(q.key, question=q.id)
            value = fn(built.tables, **dict(q.params))
            if "_records" in value:
                return [str(r) for r in value["_records"]]
        key = self.runtime.key(q, built) or {}
        out: list[str] = []
        for f in q.fields:
            if f.kind == "entity" and key.get(f.name) is not None:
                out.append(str(key[f.name]))
            elif f.kind == "entity_list":
                out += [str(v) for v in key.get(f.name) or []]
        return out


def past_row_cap(q: Question, key: dict[str, Any] | None, caps: Caps) -> str | None:
    """Why no answer read through one query can hold the key: a list field of the key longer
    than the rows a query hands over (`Caps.rows`), or whose values, one row each, take more
    characters than a query's result may hold (`Caps.result_chars`); or None. At 200,000
    issuers some lists hold thousands of entities, and a list of long rows (ck25-39: 485 rows,
    435 of them within 30,000 characters) is cut before its rows run out: the gold agent's
    reference query is cut too. A model may page (LIMIT/OFFSET), but the reference reads one
    query, so nothing vouches for such an item: a limit of the harness, which grows with the
    data, not a model's miss."""
    for f in q.fields:
        value = (key or {}).get(f.name)
        if not isinstance(value, list):
            continue
        if len(value) > caps.rows:
            return (f"{q.id}: its key lists {len(value):,} values in '{f.name}' and a query "
                    f"hands over at most {caps.rows:,} rows: no answer read through the "
                    "store can hold them (a limit of the harness, not graded)")
        chars = list_chars(value)
        if chars > result_room(caps):
            return (f"{q.id}: its key lists {len(value):,} values in '{f.name}', "
                    f"{chars:,} characters as a query's rows, and a query hands over at most "
                    f"{caps.result_chars:,} characters: no answer read through one query can "
                    "hold them (a limit of the harness, not graded)")
    return None


def list_chars(values: list[Any]) -> int:
    """The characters a list's values take as a query's result rows (one row each, a list a
    row of cells): at least what any query handing them over takes."""
    from pytest_kgbench.engines import render_row

    return sum(len(render_row(v if isinstance(v, (list, tuple)) else [v])) + 1
               for v in values)


def result_room(caps: Caps) -> int:
    """The characters a result's rows may take within `caps.result_chars` (`fill_capped`'s
    budget for one column: the header and the closing line at its longest take the rest)."""
    from pytest_kgbench.engines import ending

    return caps.result_chars - 1 - len(ending(caps.rows, caps.count_rows, False, caps.rows,
                                              True, caps))


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Graded:
    """What grading one answer gave: the key it was graded against, the grade, the metrics."""

    key: dict[str, Any] | None
    grade: Grade
    metrics: dict[str, Any]


def make_record(case: Case, built: Built, asked: Asked, graded: Graded, *, agent: BaseAgent,
                together: bool) -> ItemRecord:
    """One item's record, the only place one is made."""
    q, cond = case.question, case.condition
    prompt, answer, result = asked.prompt, asked.answer, graded.grade
    key, metrics = graded.key, graded.metrics
    return {
        "question": q.id, "tier": q.tier, "pack": q.pack, "variant": case.variant,
        "condition": cond.id, "condition_label": cond.label, "mode": cond.mode,
        "model": case.model, "agent": case.agent, "agent_kind": agent.kind,
        "simulated": bool(agent.simulated), "repeat": case.repeat,
        "persona": q.persona, "expect": q.expect,
        "ask": "together" if together or answer.session else "apart",
        "question_sha256": q.sha256, "question_file": Path(q.file).name,
        "dataset": {"seed": built.seed, "build": built.dir.name,
                    "pack_sha256": built.manifest.get("pack_sha256")},
        "prompt": {"sha256": prompt.sha256, "context_sha256": prompt.context_sha256,
                   "question": prompt.question, "chars": len(prompt.text),
                   "context": f"{prompt.system}\n\n{prompt.context}"},
        "key": key,
        "answer": answer.to_dict(),
        "grade": result.grade, "score": result.score, "status": answer.status,
        "behaviour": result.behaviour, "letter": result.letter, "reason": result.reason,
        "fields": [f.__dict__ for f in result.fields], "metrics": metrics,
        "sent": dict(asked.sent or {}), "started": asked.started, "elapsed_s": asked.elapsed,
    }


def _canonical(record: str, aliases: Mapping[str, Mapping[str, str]]) -> str:
    """A record id as its entity's canonical id when an alias table knows it, in any spelling
    a condition shows it in (`fieldkinds.entity_of`: 'issuer:ISS-1', an IRI, an alias)."""
    for table in aliases.values():
        found = entity_of(str(record), table)
        if found is not None:
            return found
    return normalise_id(record)
