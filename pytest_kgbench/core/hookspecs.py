"""The plugin's own hooks: how another package adds an agent, a store kind, a field kind, a
metric or a condition without an edit here (as pytest-xdist's `newhooks.py` adds its hooks).

Implement any of them in a pytest plugin — a `conftest.py`, a module given with `-p`, or an
installed package's `pytest11` entry point — and return the pieces to register. The `kgbench`
command loads installed `pytest11` plugins that implement them too, so `kgbench rescore` or
`kgbench prompt` know the same pieces a run knew. A name registered twice is a usage error.

Each piece is an instance (an agent: a subclass) of the abstract base class beside its domain,
which says what it must offer and declares its optional capabilities with their defaults:

    def pytest_kgbench_agents():
        return [EchoAgent]            # agents.BaseAgent subclasses

    def pytest_kgbench_field_kinds():
        return [ColourKind()]         # core.questions.FieldKind

    def pytest_kgbench_metrics():
        return [AnswerLength()]       # metrics.Metric (metrics.RateMetric for a rate)

    def pytest_kgbench_stores():
        return [MyEngine()]           # engines.stores.StoreKind

    def pytest_kgbench_conditions():
        return [Condition("D7", ...)]  # core.conditions.Condition: rows of the ladder

Hook functions take no arguments; pluggy calls every implementation (the plugin's own,
`run/shipped.py`, first) and the registry takes the union.
This module imports pluggy only, never pytest, so the `kgbench` command can use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.core.questions import FieldKind

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_kgbench_agents() -> Sequence[type[Any]]:
    """Agent classes to register: subclasses of `agents.BaseAgent`, which says what each has
    (`name`, `kind`, `ask(task)`, and the optional capabilities with their defaults)."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_stores() -> Sequence[Any]:
    """Store kinds (engines) to register: each serves one query language and opens a
    condition's store over a built variant: instances of `engines.stores.StoreKind`."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_field_kinds() -> Sequence[FieldKind]:
    """Field kinds of the closing JSON block to register: how a value of the kind is
    described to the model and compared with the key: instances of
    `core.questions.FieldKind`."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_metrics() -> Sequence[Any]:
    """Metrics measured beside the grade of every item, summarised per arm in the report
    (instances of `metrics.Metric`)."""
    raise NotImplementedError


@hookspec
def pytest_kgbench_conditions() -> Sequence[Condition]:
    """Conditions (rungs of the ladder) to add to the shipped R1-R10 and D1-D6."""
    raise NotImplementedError


HOOKS: tuple[str, ...] = ("pytest_kgbench_agents", "pytest_kgbench_stores",
                          "pytest_kgbench_field_kinds", "pytest_kgbench_metrics",
                          "pytest_kgbench_conditions")
"""Every hook of this module, in the order the registry reads them."""
