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
from pytest_kgbench.conditions import Condition
from pytest_kgbench.errors import HarnessBroken, InputError
from pytest_kgbench.executors import jsonable
from pytest_kgbench.grading import grade
from pytest_kgbench.packs import Built, Pack, build_variant, find_pack
from pytest_kgbench.prompts import Prompt, build_prompt, guard_for
from pytest_kgbench.questions import Question
from pytest_kgbench.settings import Settings


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

        key = (str(built.dir), cond.language, cond.data, cond.load_ontology, persona)
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
                graph = built.derived_graph if cond.data == "derived" else built.graph
                if cond.load_ontology:
                    import rdflib

                    combined = rdflib.Graph()
                    for prefix, ns in graph.namespace_manager.namespaces():
                        combined.bind(prefix, ns)
                    combined += graph
                    combined.parse(built.pack.definitions_ttl, format="turtle")
                    graph = combined
                self._executors[key] = SparqlExecutor(graph, guard, timeout)
        return self._executors[key]

    def prompt(self, cond: Condition, built: Built, question: Question, executor: Any) -> Prompt:
        key = (cond.id, str(built.dir), question.persona)
        cached = self._prompts.get(key)
        if cached is None:
            cached = build_prompt(cond, built, question, executor=executor,
                                  max_rounds=self.settings.max_rounds)
            self._prompts[key] = cached
            return cached
        from pytest_kgbench.prompts import question_block

        return Prompt(cached.system, cached.context, question_block(question))

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

    def run_case(self, case: Any) -> dict[str, Any]:
        """Ask one item and grade it; return its record (builtin types only)."""
        q: Question = case.question
        cond: Condition = case.condition
        built = self.built(q.pack, case.variant)
        executor = self.executor(built, cond, q.persona) if cond.mode == "querying" else None
        prompt = self.prompt(cond, built, q, executor)
        task = Task(question=q, condition=cond, prompt=prompt, guard=guard_for(built, q.persona),
                    built=built, model=case.model, repeat=case.repeat, executor=executor)
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t0 = time.perf_counter()
        answer = self.agent(case.agent).ask(task)
        elapsed = round(time.perf_counter() - t0, 4)
        key = self.key(q, built)
        result = grade(q, key, answer, built.aliases)
        return {
            "question": q.id, "tier": q.tier, "pack": q.pack, "variant": case.variant,
            "condition": cond.id, "condition_label": cond.label, "mode": cond.mode,
            "model": case.model, "agent": case.agent, "repeat": case.repeat,
            "persona": q.persona, "expect": q.expect,
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
            "fields": [f.__dict__ for f in result.fields],
            "started": started, "elapsed_s": elapsed,
        }


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
    missing = [f.name for f in question.fields if f.name not in value]
    if missing:
        raise InputError(question.file, f"key function '{question.key}' gives no value for "
                         f"{missing}", question=question.id, field="key")
    return {name: _plain(v) for name, v in value.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        items = [_plain(v) for v in value]
        return sorted(items, key=str) if isinstance(value, set) else items
    return jsonable(value)
