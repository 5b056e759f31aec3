"""The plugin's own hooks: how another package adds an agent, a store kind, a field kind, a
metric or a condition without an edit here (as pytest-xdist's `newhooks.py` adds its hooks).

Implement any of them in a pytest plugin — a `conftest.py`, a module given with `-p`, or an
installed package's `pytest11` entry point — and return the pieces to register. The `kgbench`
command loads installed `pytest11` plugins that implement them too, so `kgbench rescore` or
`kgbench prompt` know the same pieces a run knew. A name registered twice is a usage error.

Each piece is Protocol-typed (`core/registry.py` says what each must offer):

    def pytest_kgbench_agents():
        return [EchoAgent]            # classes: name, kind, asks_together, judged, ask()

    def pytest_kgbench_field_kinds():
        return [ColourKind()]         # name, is_list, describe(spec), compare(...)

    def pytest_kgbench_metrics():
        return [AnswerLength()]       # name, title, order, measure(item), summarise, cell

    def pytest_kgbench_stores():
        return [MyEngine()]           # name, language, default, open(...), classify(...)

    def pytest_kgbench_conditions():
        return [Condition("D7", ...)]  # rows of the ladder

Hook functions take no arguments; pluggy calls every implementation and registers the union.
This module imports pluggy only, never pytest, so the `kgbench` command can use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.core.registry import AgentClass, FieldKind, Metric, StoreKind

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_kgbench_agents() -> Sequence[AgentClass]:
    """Agent classes to register: each has `name`, `kind` ("model", "reference" or "replay"),
    `asks_together`, `judged`, a constructor taking the session's `Settings`, `ask(task)` and
    optionally a classmethod `check(settings, asking)` returning a problem to refuse the run
    with before anything runs (a missing credential, say), or None."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_stores() -> Sequence[StoreKind]:
    """Store kinds (engines) to register: each serves one query language and opens a
    condition's store over a built variant (`registry.StoreKind`)."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_field_kinds() -> Sequence[FieldKind]:
    """Field kinds of the closing JSON block to register: how a value of the kind is
    described to the model and compared with the key (`registry.FieldKind`)."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_metrics() -> Sequence[Metric]:
    """Metrics measured beside the grade of every item, summarised per arm in the report
    (`registry.Metric`)."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_conditions() -> Sequence[Condition]:
    """Conditions (rungs of the ladder) to add to the shipped R1-R10 and D1-D6."""
    raise NotImplementedError


HOOKS: tuple[str, ...] = ("pytest_kgbench_agents", "pytest_kgbench_stores",
                          "pytest_kgbench_field_kinds", "pytest_kgbench_metrics",
                          "pytest_kgbench_conditions")
"""Every hook of this module, in the order the registry reads them."""


def results(hook: Any, name: str) -> list[tuple[str, Any]]:
    """(plugin name, piece) for every piece the implementations of hook `name` returned."""
    caller = getattr(hook, name)
    out: list[tuple[str, Any]] = []
    for impl in reversed(caller.get_hookimpls()):  # registration order
        pieces = impl.function()
        for piece in pieces or ():
            out.append((impl.plugin_name, piece))
    return out
