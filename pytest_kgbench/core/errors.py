"""The few exceptions whose class decides what happens to a run."""

from __future__ import annotations


class KgbenchError(Exception):
    """Base class of the plugin's own errors."""


class InputError(KgbenchError):
    """Bad input (a question file, a pack manifest): the message names the file, the
    question and the field, so the user can fix it without reading the plugin's code."""

    def __init__(self, where: str, message: str, *, question: str | None = None,
                 field: str | None = None) -> None:
        self.where = where
        self.question = question
        self.field = field
        parts = [where]
        if question:
            parts.append(f"question {question}")
        if field:
            parts.append(f"field '{field}'")
        super().__init__(f"{': '.join(parts)}: {message}")


class HarnessBroken(KgbenchError):
    """The harness itself cannot measure (no executor, a tool server that did not connect, a
    rejected credential). The session halts at once; banked results stay intact."""


class ReferenceFailed(HarnessBroken):
    """A question's reference query failed on its store (an error, or a result with no
    answer's fields), as opposed to running past its deadline. Where the store is one the
    harness vouches for, the run halts as for any broken harness; on a server it does not
    (`Executor.checks_reference`), the question is one that server cannot serve, and is skipped
    with the reason (run/items.py, `ItemRunner.unservable`)."""


class TransientModelError(KgbenchError):
    """A model call failed for a reason worth retrying (rate limit, overload, reset) after the
    SDK's own retries. pytest-rerunfailures reruns the item; it is never graded."""


class ItemSkipped(KgbenchError):
    """The item cannot be asked as the run is set (its prompt is longer than the model's
    context window). It is skipped with the reason — banked with status "skipped", never
    graded, listed apart in the report — and the run goes on."""


class NoAnswer(KgbenchError):
    """The item has no answer to give (a replay of a run that never banked it): it is not
    graded, and the run lists it as missing, so the run says it is incomplete."""


class BudgetReached(HarnessBroken):
    """The next model request could take the run's spending past --max-cost: the run halts
    as a broken harness does (banked results kept, the report marked HALTED), with the budget
    as its reason rather than a fault."""


class Cancelled(HarnessBroken):
    """The run is stopping (a halt, Ctrl-C, the end of the session): a model request, round
    or retry not yet started is not started (pacing.Pace.cancel). Never a grade: an item that
    meets it halts as a broken harness does."""


class QueryTimeout(Exception):
    """Raised inside a query thread when its time is up."""
