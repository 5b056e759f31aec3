"""The estimate of a run before it is asked: the tokens of its items' prompts, per condition
and model, as they would be asked (one prompt per item, or one per together session)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_kgbench.asking.cases import Case, session_of
from pytest_kgbench.run.runtime import Runtime


def estimate(runtime: Runtime, cases: Iterable[Case], *, together: bool
             ) -> dict[tuple[str, str], Any]:
    """The estimated tokens of a run's items, per condition and model, as they would be
    asked: one prompt per item, or one per together session (costs.Estimate)."""
    from pytest_kgbench.core.pricing import Estimate

    out: dict[tuple[str, str], Estimate] = {}
    sessions: dict[str, list[Case]] = {}
    for case in cases:
        sessions.setdefault(session_of(case) if together else str(id(case)), []).append(case)
    for group in sessions.values():
        case = group[0]
        q, cond = case.question, case.condition
        built = runtime.built(q.pack, case.variant)
        executor = runtime.executor(built, cond, q.persona) if cond.mode == "querying" else None
        if together:
            prompt = runtime.together_prompt(cond, built, tuple(c.question for c in group),
                                          executor)
        else:
            prompt = runtime.prompt(cond, built, q, executor)
        est = out.setdefault((cond.id, case.model), Estimate(
            cond.id, case.model, window=runtime.settings.window(case.model),
            cache_minimum=runtime.settings.cache_minimum(case.model)))
        est.add(mode=cond.mode, context=prompt.context, question=prompt.question,
                system=prompt.system, questions=len(group))
    return out
