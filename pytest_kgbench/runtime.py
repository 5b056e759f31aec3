"""The per-process runtime behind the `kgbench_runtime` fixture: packs, built variants,
executors, prompts, keys and agents, each made once and reused; and `run_case`, which turns one
item into its record (answer + grade). No pytest here: the hooks call it.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any, Mapping

from pytest_kgbench.agents import Agent, Task, make_agent
from pytest_kgbench.answers import prose
from pytest_kgbench.conditions import Condition
from pytest_kgbench.errors import HarnessBroken, InputError
from pytest_kgbench.executors import jsonable
from pytest_kgbench.grading import grade
from pytest_kgbench.packs import Built, Pack, build_variant, find_pack
from pytest_kgbench.prompts import Prompt, build_prompt, guard_for
from pytest_kgbench.questions import Question
from pytest_kgbench.settings import Settings


JUDGED_AGENTS = ("anthropic", "claude-cli")  # a model wrote the answer: the judge reads it


class Runtime:
    """Caches of one process (one xdist worker, or the whole serial session)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._packs: dict[str, Pack] = {}
        self._built: dict[tuple[str, str], Built] = {}
        self._executors: dict[tuple[Any, ...], Any] = {}
        self._prompts: dict[tuple[Any, ...], Prompt] = {}
        self._keys: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._agents: dict[str, Agent] = {}
        self._sessions: dict[tuple[str, tuple[str, ...]], tuple[Prompt, dict[str, Any]]] = {}

    def pack(self, name: str) -> Pack:
        if name not in self._packs:
            self._packs[name] = find_pack(name, Path(self.settings.datasets_dir),
                                          Path(self.settings.ontology_dir))
        return self._packs[name]

    def built(self, pack_name: str, variant: str) -> Built:
        if (pack_name, variant) not in self._built:
            self._built[(pack_name, variant)] = build_variant(
                self.pack(pack_name), variant, Path(self.settings.cache_dir),
                seed=self.settings.dataset_seed)
        return self._built[(pack_name, variant)]

    def executor(self, built: Built, cond: Condition, persona: str) -> Any:
        """The store a querying condition reads, opened once per process and persona."""
        from pytest_kgbench.executors.sparql import SparqlExecutor
        from pytest_kgbench.executors.sql import SqlExecutor

        engine = self.settings.sparql_engine
        key = (str(built.dir), cond.language, cond.data, cond.load_ontology, persona, engine)
        if key not in self._executors:
            guard = guard_for(built, persona)
            timeout = self.settings.query_timeout
            if cond.language == "sql":
                path, specs = ((built.executed_duckdb_path, built.pack.executed_tables)
                               if cond.data == "executed" else
                               (built.duckdb_path, built.pack.tables))
                if not path.is_file():
                    raise HarnessBroken(f"no DuckDB file at {path}")
                self._executors[key] = SqlExecutor.open(path, specs, guard, timeout)
            else:
                graph = built.load_graph(engine, derived=cond.data == "derived",
                                         ontology=cond.load_ontology)
                self._executors[key] = SparqlExecutor(graph, guard, timeout)
        return self._executors[key]

    def prompt(self, cond: Condition, built: Built, question: Question, executor: Any) -> Prompt:
        floor = bool(self.settings.extra.get("floor"))
        key = (cond.id, str(built.dir), question.persona)
        cached = self._prompts.get(key)
        if cached is None:
            cached = build_prompt(cond, built, question, executor=executor,
                                  max_rounds=self.settings.max_rounds, floor=floor)
            self._prompts[key] = cached
            return cached
        from pytest_kgbench.prompts import question_block

        return Prompt(cached.system, cached.context, question_block(question, floor=floor))

    def together_prompt(self, cond: Condition, built: Built, group: tuple[Question, ...],
                        executor: Any) -> Prompt:
        """The prompt of a together session asking every question of `group`."""
        return build_prompt(cond, built, group[0], executor=executor,
                            max_rounds=self.settings.max_rounds,
                            floor=bool(self.settings.extra.get("floor")), together=group)

    def key(self, question: Question, built: Built) -> dict[str, Any] | None:
        """The key of a question on a variant, computed by the pack's key function."""
        cache_key = (question.id, built.pack.name, built.variant)
        if cache_key not in self._keys:
            self._keys[cache_key] = compute_key(question, built)
        return self._keys[cache_key]

    def agent(self, name: str) -> Agent:
        if name not in self._agents:
            self._agents[name] = make_agent(name, self.settings)
        return self._agents[name]

    def close(self) -> None:
        for ex in self._executors.values():
            ex.close()
        self._executors.clear()

    def run_case(self, case: Any, group: tuple[Question, ...] = ()) -> dict[str, Any]:
        """Ask one item and grade it; return its record (builtin types only). With `group` (the
        selected questions of the item's together session) the item's answer is its slice of
        the session's one answer, asked once per process."""
        q: Question = case.question
        cond: Condition = case.condition
        built = self.built(q.pack, case.variant)
        executor = self.executor(built, cond, q.persona) if cond.mode == "querying" else None
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t0 = time.perf_counter()
        if group:
            prompt, answer = self.together_answer(case, built, executor, group)
        else:
            prompt = self.prompt(cond, built, q, executor)
            task = Task(question=q, condition=cond, prompt=prompt,
                        guard=guard_for(built, q.persona), built=built, model=case.model,
                        repeat=case.repeat, executor=executor)
            answer = self.agent(case.agent).ask(task)
        elapsed = round(time.perf_counter() - t0, 4)
        key = self.key(q, built)
        guard = guard_for(built, q.persona)
        withheld = self.guard_withheld(q, cond, guard)
        result = grade(q, key, answer, built.aliases, guard_withheld=withheld)
        metrics = self.metrics(case, built, answer, executor)
        if q.checklist and case.agent in JUDGED_AGENTS and answer.status == "answered":
            metrics["judge"] = (self.judge(q, answer.text) if prose(answer.text).strip() else
                                {"skipped": "the answer has no prose to judge"})
        return {
            "question": q.id, "tier": q.tier, "pack": q.pack, "variant": case.variant,
            "condition": cond.id, "condition_label": cond.label, "mode": cond.mode,
            "model": case.model, "agent": case.agent, "repeat": case.repeat,
            "persona": q.persona, "expect": q.expect,
            "ask": "together" if group or answer.session else "apart",
            "question_sha256": q.sha256, "question_file": Path(q.file).name,
            "dataset": {"seed": built.seed, "build": built.dir.name,
                        "pack_sha256": built.manifest.get("pack_sha256")},
            "prompt": {"sha256": prompt.sha256, "context_sha256": prompt.context_sha256,
                       "question": prompt.question,
                       "context": f"{prompt.system}\n\n{prompt.context}"},
            "key": key,
            "answer": answer.to_dict(),
            "grade": result.grade, "score": result.score, "status": answer.status,
            "behaviour": result.behaviour, "letter": result.letter, "reason": result.reason,
            "fields": [f.__dict__ for f in result.fields], "metrics": metrics,
            "started": started, "elapsed_s": elapsed,
        }

    def together_answer(self, case: Any, built: Built, executor: Any,
                        group: tuple[Question, ...]) -> tuple[Prompt, Any]:
        """The item's slice of its together session, asking the session the first time.

        Model agents answer the session's prompt in one conversation; reference agents answer
        per question, and their answers are combined into one session answer first, so both go
        through the same split (together.py)."""
        from pytest_kgbench import together

        q: Question = case.question
        cond: Condition = case.condition
        ids = tuple(x.id for x in group)
        name = together.group_name(q.pack, case.variant, cond.id, case.model, case.repeat,
                                   q.persona)
        sessions = self._sessions
        if (name, ids) not in sessions:
            prompt = self.together_prompt(cond, built, group, executor)
            agent = self.agent(case.agent)
            common = dict(condition=cond, prompt=prompt, guard=guard_for(built, q.persona),
                          built=built, model=case.model, repeat=case.repeat, executor=executor,
                          together=ids)
            if getattr(agent, "asks_together", False):
                session = agent.ask(Task(question=group[0], **common))  # type: ignore[arg-type]
            else:
                session = together.combine(
                    [(x.id, agent.ask(Task(question=x, **common))) for x in group])  # type: ignore[arg-type]
            sessions[(name, ids)] = (prompt, together.split(session, ids, name, asker=q.id))
        prompt, answers = sessions[(name, ids)]
        if q.id not in answers:  # pragma: no cover - the group always holds its own item
            raise HarnessBroken(f"{q.id} is not a question of its together session {name}")
        return prompt, answers[q.id]

    def judge(self, q: Question, text: str) -> dict[str, Any]:
        """Two passes of the judge model over a "why" answer's checklist."""
        from pytest_kgbench.agents.anthropic import AnthropicAgent, classify, resolve_model
        from pytest_kgbench.judge import ask_judge

        if "judge" not in self._agents:
            self._agents["judge"] = AnthropicAgent(self.settings)  # type: ignore[assignment]
        client = self._agents["judge"].client()  # type: ignore[attr-defined]
        model = resolve_model(str(self.settings.extra.get("judge_model") or "sonnet"),
                              dict(self.settings.extra.get("aliases") or {}))
        import anthropic

        try:
            first, used = ask_judge(client, model, q.text, text, q.checklist)
            second, used2 = ask_judge(client, model, q.text, text, q.checklist)
        except anthropic.APIError as exc:
            raise classify(exc) from exc
        return {"model": model, "checklist": list(q.checklist), "first": first,
                "second": second, "tokens": {k: used[k] + used2[k] for k in used},
                "score": None if first is None else round(sum(first) / len(first), 6)}

    @staticmethod
    def guard_withheld(q: Question, cond: Condition, guard: Any) -> bool:
        """Whether the data a block question asks for was withheld from view before the agent
        could ask (its reference query is refused as personal data for this persona)."""
        statement = q.gold.get(cond.reference) if q.expect == "block" else None
        if not statement:
            return False
        refusal = guard.check(cond.language, statement)
        return bool(refusal and "personal data" in refusal)

    def metrics(self, case: Any, built: Built, answer: Any, executor: Any, *,
                rerun: bool = False) -> dict[str, Any]:
        """Every metric beside the grade that can be measured for this item (metrics.py).

        The last statement's result is the one the executor gave moments ago in this item; with
        `rerun` (a rescore of stored answers) the statement runs again instead."""
        from pytest_kgbench import metrics as m

        q: Question = case.question
        cond: Condition = case.condition
        out: dict[str, Any] = {}
        block = answer.block or {}
        out["attribution"] = m.attribution(block.get("definitions_used"),
                                           self.definitions_given(built, cond))
        records = self.key_records(q, built)
        if records:
            aliases = built.aliases
            out["citations"] = m.citations(
                block.get("records_used"), records,
                lambda r: _canonical(r, aliases))
        gold_statement = q.gold.get(cond.reference)
        if cond.mode != "querying" or q.expect != "answer" or not gold_statement:
            return out
        ran = [x for x in answer.queries if x.statement]
        if not ran:
            out["execution"] = False
            out["note"] = "no query ran"
            return out
        last = executor.run(ran[-1].statement) if rerun else ran[-1]
        gold = last if ran[-1].statement == gold_statement else executor.run(gold_statement)
        ordered = any(f.ordered for f in q.fields)
        tol = {"rel": max((f.rel_tol for f in q.fields), default=0.005),
               "abs_tol": max((f.abs_tol for f in q.fields), default=0.0)}
        carried = last.ok and m.rows_carried(gold.rows, last.rows, ordered=ordered, **tol)
        figure = m.states_figure(answer.text, gold.rows, rel=tol["rel"])
        reads = sorted({r for x in ran for r in x.reads})
        grounded, grounded_exact = m.grounding(gold.reads, reads)
        evidence = built.pack.manifest.get("evidence") or {}
        fid = m.fidelity(q.needs, ran[-1].statement, cond.reference, evidence)
        measured = [v for v in fid.values() if v is not None]
        out.update({
            "execution": bool(carried and figure is not False),
            "result_set_exact": bool(last.ok and m.result_set_exact(gold.rows, last.rows, **tol)),
            "answer_carries_figure": figure,
            "grounding": grounded, "grounding_exact": grounded_exact,
            "reads": reads, "gold_reads": gold.reads,
            "fidelity": (all(measured) if measured else None), "fidelity_by_definition": fid,
            "rows_returned": len(last.rows), "gold_rows": len(gold.rows),
        })
        return out

    def definitions_given(self, built: Built, cond: Condition) -> list[str]:
        """The names (labels and CURIEs) of the definitions this condition shows."""
        cache = self.__dict__.setdefault("_given", {})
        key = (built.pack.name, cond.id)
        if key not in cache:
            from pytest_kgbench.ontology import concepts, defined_names

            names: list[str] = []
            for kind in cond.definitions:
                if kind in ("markdown", "ontology", "neutral"):
                    ttl = built.pack.definitions_ttl.read_text(encoding="utf-8")
                    for c in concepts(ttl):
                        names += [c["label"], c["curie"], c["curie"].split(":", 1)[-1]]
                elif kind == "axioms":
                    for name in ("axioms.ttl", "shapes.ttl"):
                        path = built.pack.ontology_file(name)
                        if path:
                            names += defined_names(path.read_text(encoding="utf-8"))
            cache[key] = names
        return cache[key]

    def key_records(self, q: Question, built: Built) -> list[str]:
        """The records a question's key depends on: those its key function names (`_records`),
        else the entities of its key's entity fields."""
        if q.expect != "answer":
            return []
        if q.key:
            fn = built.pack.key_function(q.key, question=q.id)
            value = fn(built.tables, **dict(q.params))
            if "_records" in value:
                return [str(r) for r in value["_records"]]
        key = self.key(q, built) or {}
        out: list[str] = []
        for f in q.fields:
            if f.kind == "entity" and key.get(f.name) is not None:
                out.append(str(key[f.name]))
            elif f.kind == "entity_list":
                out += [str(v) for v in key.get(f.name) or []]
        return out


def compute_key(question: Question, built: Built) -> dict[str, Any] | None:
    """A question's key on a variant: the pack's key function over the built data, or the
    hand-written key for a fixed pack without one; None for abstain/block questions."""
    if question.expect != "answer":
        return None
    if question.key is None:
        return dict(question.hand_key or {})
    fn = built.pack.key_function(question.key, question=question.id)
    try:
        value = fn(built.tables, **dict(question.params))
    except TypeError as exc:
        raise InputError(question.file, f"key function '{question.key}' rejected the params: "
                         f"{exc}", question=question.id, field="params") from exc
    if not isinstance(value, Mapping):
        raise InputError(question.file, f"key function '{question.key}' must return a mapping "
                         "of answer fields", question=question.id, field="key")
    value = {k: v for k, v in value.items() if k != "_records"}
    missing = [f.name for f in question.fields if f.name not in value]
    if missing:
        raise InputError(question.file, f"key function '{question.key}' gives no value for "
                         f"{missing}", question=question.id, field="key")
    return {name: _plain(v) for name, v in value.items()}


def _canonical(record: str, aliases: Mapping[str, Mapping[str, str]]) -> str:
    """A record id as its entity's canonical id when an alias table knows it."""
    from pytest_kgbench.packs import normalise_id

    norm = normalise_id(record)
    for table in aliases.values():
        if norm in table:
            return normalise_id(table[norm])
    return norm


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set) else items
    return jsonable(value)
