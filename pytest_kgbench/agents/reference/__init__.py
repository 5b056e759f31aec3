"""Reference agents answer with a question's own queries: `gold` with the reference query, `trap`
with the naive one. Querying conditions run it through the item's executor and guard, exactly as
a model's query would run. Reading conditions first rebuild a store *from the prompt text alone*
(the CSV or Turtle blocks it shows), so a gold score of 100% proves the prompt carries the facts.

A reference query that times out or fails is the harness failing, not a miss: `HarnessBroken`,
and the run halts (a synthetic arm set to always-gold would otherwise score what the query
timeout allows). One failure is data: the trap agent's naive query over the raw tables, run
against a store that holds other tables (the executed ones of R10 and D3), fails because the
naive reader does not know them — a miss, as designed.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.core.errors import HarnessBroken, ReferenceFailed
from pytest_kgbench.scoring.answers import Answer, answer_text, fields_from_rows

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings


class ReferenceAgent(BaseAgent):
    """Answers with the question's `gold` (or `trap`) query."""

    kind = "reference"
    judged = False
    which = "gold"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._stores: dict[tuple[str, str], Any] = {}

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()

    def statement(self, task: Task) -> str | None:
        return self.statement_for(task)[0]

    def statement_for(self, task: Task) -> tuple[str | None, bool]:
        """(the query to run, whether it was written for another store than this one: the
        naive reader's raw-table query, run whatever the store holds)."""
        q = task.question
        ref = task.condition.reference
        if self.which == "gold":
            return q.gold.get(ref), False
        if not q.trap:
            return q.gold.get(ref), False  # no naive reading differs: it answers as gold
        # the naive reader's query for this store if there is one; otherwise its query over the
        # raw tables, whatever the store holds (it does not know the executed tables)
        if q.trap.get(ref):
            return q.trap[ref], False
        language = task.condition.language
        return q.trap.get(language), ref != language

    def _store(self, task: Task) -> Any:
        """The executor to run on: the item's own, or one rebuilt from the prompt's text."""
        if task.executor is not None:
            return task.executor
        from pytest_kgbench.engines.stores import store_from_context

        lang = task.condition.language
        cache_key = (task.prompt.context_sha256 + task.guard.persona, lang)
        if cache_key not in self._stores:  # whole results, as the key's (store_from_context)
            self._stores[cache_key] = store_from_context(
                task.prompt.context, lang, task.guard, self.settings.stores.engines,
                self.registry)
        return self._stores[cache_key]

    def ask(self, task: Task) -> Answer:
        start = time.perf_counter()
        q = task.question
        statement, elsewhere = self.statement_for(task)
        if statement is None:
            answer = Answer(text="This question cannot be answered from the data: it holds no "
                            "such facts.", block={"abstain": True})
            answer.latency_s = round(time.perf_counter() - start, 4)
            return answer
        store = self._store(task)
        result = store.run(statement)
        where = f"the {self.which} query of {q.id} under {task.condition.id}"
        if result.timed_out:
            raise HarnessBroken(f"{where} ran past --query-timeout "
                                f"({self.settings.limits.query_timeout:g} s): {result.error or ''}"
                                .rstrip(": "))
        if result.error and not elsewhere:
            raise ReferenceFailed(f"{where} failed: {result.error.splitlines()[0]}")
        answer = Answer(queries=[result], rounds=1)
        if task.executor is not None:  # querying: the query is one run_query call
            answer.tool_calls.append({"name": "run_query", "input": {"query": statement},
                                      "output": result.preview()[:4000]})
        if result.refused:
            answer.text = f"The executor refused the request: {result.refused}"
            answer.block = {"declined": True}
        elif not result.ok:
            answer.text = f"The reference query failed: {result.error}"
            answer.status = "error"
            answer.error = result.error
        else:
            try:
                fields = fields_from_rows(q.fields, result.columns, result.rows)
            except KeyError as exc:
                if not elsewhere:
                    raise ReferenceFailed(f"{where} gives no answer's fields: {exc}") from exc
                answer.text = f"The reference query's result does not fit the answer: {exc}"
                answer.status = "error"
                answer.error = str(exc)
            else:
                answer.text = answer_text(fields, f"From the {self.which} query "
                                          f"({len(result.rows)} rows).")
                answer.block = fields
        answer.latency_s = round(time.perf_counter() - start, 4)
        return answer
