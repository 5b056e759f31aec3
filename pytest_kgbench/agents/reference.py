"""Reference agents answer with a question's own queries: `gold` with the reference query, `trap`
with the naive one. Querying conditions run it through the item's executor and guard, exactly as
a model's query would run. Reading conditions first rebuild a store *from the prompt text alone*
(the CSV or Turtle blocks it shows), so a gold score of 100% proves the prompt carries the facts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.answers import Answer, answer_text, fields_from_rows

if TYPE_CHECKING:
    from pytest_kgbench.settings import Settings


class ReferenceAgent(BaseAgent):
    """Answers with the question's `gold` (or `trap`) query."""

    kind = "reference"
    judged = False
    which = "gold"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._stores: dict[tuple[str, str], Any] = {}

    def statement(self, task: Task) -> str | None:
        q = task.question
        ref = task.condition.reference
        if self.which == "gold":
            return q.gold.get(ref)
        if not q.trap:
            return q.gold.get(ref)  # no naive reading differs: the trap agent answers as gold
        # the naive reader's query for this store if there is one; otherwise its query over the
        # raw tables, whatever the store holds (it does not know the executed tables)
        return q.trap.get(ref) or q.trap.get(task.condition.language)

    def _store(self, task: Task) -> Any:
        """The executor to run on: the item's own, or one rebuilt from the prompt's text."""
        if task.executor is not None:
            return task.executor
        from pytest_kgbench.stores import store_from_context

        lang = task.condition.language
        cache_key = (task.prompt.context_sha256 + task.guard.persona, lang)
        if cache_key not in self._stores:
            self._stores[cache_key] = store_from_context(task.prompt.context, lang, task.guard,
                                                         self.settings.engines)
        return self._stores[cache_key]

    def ask(self, task: Task) -> Answer:
        start = time.perf_counter()
        q = task.question
        statement = self.statement(task)
        if statement is None:
            answer = Answer(text="This question cannot be answered from the data: it holds no "
                            "such facts.", block={"abstain": True})
            answer.latency_s = round(time.perf_counter() - start, 4)
            return answer
        store = self._store(task)
        result = store.run(statement)
        answer = Answer(queries=[result], rounds=1)
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
                answer.text = f"The reference query's result does not fit the answer: {exc}"
                answer.status = "error"
                answer.error = str(exc)
            else:
                answer.text = answer_text(fields, f"From the {self.which} query "
                                          f"({len(result.rows)} rows).")
                answer.block = fields
        answer.latency_s = round(time.perf_counter() - start, 4)
        return answer
