"""The per-process runtime behind the `kgbench_runtime` fixture: packs, built variants,
stores, prompts, keys and agents, each made once and reused, and the pace and the answers in
flight of the process. The item runner (run/items.py) asks and grades on them; the estimate
(run/estimate.py) prices a run's prompts. No pytest here: the hooks call it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pytest_kgbench.agents import BaseAgent, Task, agent_class
from pytest_kgbench.asking.cases import Case
from pytest_kgbench.asking.prompts import Prompt, build_prompt
from pytest_kgbench.core.conditions import Condition
from pytest_kgbench.core.errors import HarnessBroken, KgbenchError
from pytest_kgbench.core.questions import Question
from pytest_kgbench.core.registry import Registry, given
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.engines import Executor
from pytest_kgbench.engines.stores import guard_for, open_store
from pytest_kgbench.packs.build import Built, build_variant
from pytest_kgbench.packs.locate import open_pack
from pytest_kgbench.packs.schema import Pack
from pytest_kgbench.scoring.answer_key import compute_key


class Runtime:
    """Caches of one process (one xdist worker, or the whole serial session)."""

    def __init__(self, settings: Settings, registry: Registry | None = None) -> None:
        self.settings = settings
        self.registry = given(registry)  # a script's runtime: the shipped pieces
        self._packs: dict[str, Pack] = {}
        self._built: dict[tuple[str, str], Built] = {}
        self._executors: dict[tuple[Any, ...], Executor] = {}
        self._prompts: dict[tuple[Any, ...], Prompt] = {}
        self._keys: dict[tuple[str, str, str], dict[str, Any] | None] = {}
        self._agents: dict[str, BaseAgent] = {}
        self._contrasted: set[tuple[str, str]] = set()
        # the session's items (set by the plugin): what --batch submits at once
        self.session_cases: list[Case] = []
        self.say: Callable[[str], None] | None = None  # a line on the terminal, or None (-q)
        from pytest_kgbench.asking.inflight import Inflight
        from pytest_kgbench.asking.pacing import Pace

        self.pace = Pace.from_settings(settings)  # --rpm, --tpm and the cancel, per process
        self.inflight = (Inflight(settings.limits.concurrency, self.pace)
                         if settings.limits.concurrency > 1 else None)

    def pack(self, name: str) -> Pack:
        if name not in self._packs:
            self._packs[name] = open_pack(self.settings, name)
        return self._packs[name]

    def built(self, pack_name: str, variant: str,
              progress: Callable[[str], None] | None = None) -> Built:
        if (pack_name, variant) not in self._built:
            self._built[(pack_name, variant)] = build_variant(
                self.pack(pack_name), variant, Path(self.settings.paths.cache_dir),
                seed=self.settings.plan.dataset_seed, progress=progress)
        return self._built[(pack_name, variant)]

    def prebuild(self, pairs: Iterable[tuple[str, str]],
                 progress: Callable[[str], None]) -> None:
        """Build the (pack, variant) pairs a session's items ask about before the first item
        runs, telling `progress` of each build and its time (a cached one says nothing). A
        pack or variant that cannot be built raises KgbenchError naming it (the session stops
        before any item: the plugin's preflight)."""
        for pack_name, variant in sorted(set(pairs)):
            try:
                self.built(pack_name, variant, progress)
            except KgbenchError:
                raise
            except Exception as exc:  # noqa: BLE001 - a pack's own code failing, named
                raise KgbenchError(f"building {pack_name}/{variant} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc

    def executor(self, built: Built, cond: Condition, persona: str) -> Executor:
        """The store a querying condition reads, opened once per process and persona."""
        engines = self.settings.engines_for(cond)
        key = (str(built.dir), cond.language, cond.data, cond.load_ontology, persona,
               engines.get(cond.language))
        if key not in self._executors:
            self._executors[key] = open_store(built, cond, persona, engines=engines,
                                              timeout=self.settings.limits.query_timeout,
                                              registry=self.registry)
        return self._executors[key]

    def prompt(self, cond: Condition, built: Built, question: Question,
               executor: Executor | None) -> Prompt:
        floor = self.settings.plan.floor or cond.floor
        key = (cond.id, str(built.dir), question.persona)
        cached = self._prompts.get(key)
        if cached is None:
            self.check_contrasts(cond, built)
            cached = build_prompt(cond, built, question, executor=executor,
                                  max_rounds=self.settings.limits.max_rounds, floor=floor,
                                  query_timeout=self.settings.limits.query_timeout)
            self._prompts[key] = cached
            return cached
        from pytest_kgbench.asking.prompts import question_block

        return Prompt(cached.system, cached.context, question_block(question, floor=floor))

    def check_contrasts(self, cond: Condition, built: Built) -> None:
        """A condition whose prompt would be the same as a condition it is compared with is a
        broken harness (prompts.contrast_problem): checked once per condition and variant."""
        key = (cond.id, str(built.dir))
        if key in self._contrasted:
            return
        from pytest_kgbench.asking.cases import pack_conditions
        from pytest_kgbench.asking.prompts import contrast_problem
        from pytest_kgbench.core.conditions import DESIGN_PAIRS, arm, registered

        known = registered(self.registry)
        rung = cond.base_id
        for a, b in DESIGN_PAIRS:
            if rung not in (a, b):
                continue
            other = known.get(b if a == rung else a)
            if other is None or not pack_conditions(built.pack, (other,)):
                continue
            other = arm(other, cond.schema)  # compared within the arm
            problem = contrast_problem(built, cond, other)
            if problem:
                raise HarnessBroken(problem)
        self._contrasted.add(key)

    def together_prompt(self, cond: Condition, built: Built, group: tuple[Question, ...],
                        executor: Executor | None) -> Prompt:
        """The prompt of a together session asking every question of `group`."""
        self.check_contrasts(cond, built)
        limits = self.settings.limits
        return build_prompt(cond, built, group[0], executor=executor,
                            max_rounds=limits.max_rounds, floor=self.settings.plan.floor,
                            query_timeout=limits.query_timeout, together=group)

    def key(self, question: Question, built: Built) -> dict[str, Any] | None:
        """The key of a question on a variant, computed by the pack's key function."""
        cache_key = (question.id, built.pack.name, built.variant)
        if cache_key not in self._keys:
            self._keys[cache_key] = compute_key(question, built)
        return self._keys[cache_key]

    def agent(self, name: str, model: str | None = None) -> BaseAgent:
        """The agent `name`, made once per process; a model served at its own endpoint
        ([tool.kgbench.models] base_url) gets an agent of its own, connected there."""
        url = self.settings.model.model_urls.get(model or "")
        key = f"{name} {url}" if url else name
        if key not in self._agents:
            settings = self.settings.but(base_url=url) if url else self.settings
            agent = agent_class(name, self.registry)(settings)
            agent.registry = self.registry  # the session's pieces (a plugin's engine, say)
            agent.keep_pace(self.pace)  # a model agent's requests keep to the process's pace
            if self.inflight is not None:
                self.inflight.abort_hooks.append(agent.abort)
            if self.settings.model.batch and agent.batches:
                agent.batch_plan = lambda: self.batch_tasks(name)
                agent.batch_say = self.say
            self._agents[key] = agent
        return self._agents[key]
    def batch_tasks(self, agent: str) -> list[Task]:
        """The task of every single-turn item of the session the agent answers (a reading
        condition, asked apart): what --batch submits at once (agents/support/batch.py)."""
        tasks = []
        for case in self.session_cases:
            q, cond = case.question, case.condition
            if case.agent != agent or cond.mode != "reading":
                continue
            built = self.built(q.pack, case.variant)
            tasks.append(Task(question=q, condition=cond,
                              prompt=self.prompt(cond, built, q, None),
                              guard=guard_for(built, q.persona), built=built, model=case.model,
                              repeat=case.repeat))
        return tasks

    def concurrent(self, agent: BaseAgent) -> bool:
        """Whether this agent's items are answered ahead of their turn (--concurrency N > 1,
        and an agent that says it is thread-safe)."""
        return self.inflight is not None and agent.threadsafe

    def stop(self) -> None:
        """Stop answering ahead (a halt, the end of the session): nothing more is asked, the
        connections in flight are cut, the threads end, unclaimed answers are discarded."""
        if self.inflight is not None:
            self.inflight.close()
        self.pace.cancel()

    def close(self) -> None:
        from pytest_kgbench.scoring.answer_key import close_key_stores

        self.stop()
        for agent in self._agents.values():
            agent.close()
        self._agents.clear()
        for ex in self._executors.values():
            ex.close()
        self._executors.clear()
        close_key_stores()
