"""The estimate of a run before it is asked: the tokens of its items' prompts, per condition
and model, as they would be asked (one prompt per item, or one per together session)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_kgbench.agents import agent_class
from pytest_kgbench.agents.support.served import Facts
from pytest_kgbench.asking.cases import Case, session_of
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.run.runtime import Runtime


def served_facts(settings: Settings, registry: Registry | None) -> dict[str, Facts]:
    """What the server of each model asked at one of the user's says of it (its window) and,
    for a model with no price, its speed measured here: the estimate's window and time."""
    out: dict[str, Facts] = {}
    for model in settings.plan.models:
        priced = bool(settings.model.prices.get(settings.model_id(model)))
        got = agent_class(settings.agent_for(model), registry).server_facts(
            settings, model, speed=not priced)
        if got is not None:
            out[model] = got
    return out


def estimate_report(runtime: Runtime, cases: Iterable[Case], *, together: bool,
                    heading: str) -> list[str]:
    """The estimate's lines: the table (core.pricing.estimate_lines), a model served by a
    server of the user's costing time rather than dollars, then what each such server said
    (the window it serves) or why it could not be asked."""
    from pytest_kgbench.core.pricing import estimate_lines

    settings = runtime.settings
    facts = served_facts(settings, runtime.registry)
    estimates = estimate(runtime, cases, together=together, facts=facts)
    speeds = {m: (f.speed.prompt, f.speed.output) for m, f in facts.items() if f.speed}
    lines = estimate_lines(estimates, settings.model.aliases, settings.model.prices,
                           heading=heading, speeds=speeds)
    for model, got in facts.items():
        window = (f"serves a {got.window:,}-token window" if got.window else
                  f"says no window: {settings.window(model):,} tokens assumed "
                  "([tool.kgbench.windows] sets it)")
        lines.append(f"{model} at {got.url}: {window}"
                     + (f"; {got.problem}" if got.problem else ""))
    return lines


def estimate(runtime: Runtime, cases: Iterable[Case], *, together: bool,
             facts: dict[str, Facts] | None = None) -> dict[tuple[str, str], Any]:
    """The estimated tokens of a run's items, per condition and model, as they would be
    asked: one prompt per item, or one per together session (costs.Estimate). A model's
    window is what its server says (`facts`), else the project's table, else the default."""
    from pytest_kgbench.core.pricing import Estimate

    facts = facts or {}

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
            cond.id, case.model,
            window=getattr(facts.get(case.model), "window", None)
            or runtime.settings.window(case.model),
            cache_minimum=runtime.settings.cache_minimum(case.model),
            max_output=runtime.settings.model.max_tokens,
            max_rounds=runtime.settings.limits.max_rounds,
            **({"count": counter} if (counter := getattr(facts.get(case.model), "count", None))
               else {})))
        est.add(mode=cond.mode, context=prompt.context, question=prompt.question,
                system=prompt.system, questions=len(group))
    return out
