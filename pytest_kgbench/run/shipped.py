"""The pieces that ship with the plugin, registered as a third-party plugin's are: through the
hooks of `core/hookspecs.py`, implemented here. This module is a pluggy plugin; the pytest
plugin registers it first (so the shipped pieces come first in every table), and `installed()`
does the same for the `kgbench` command.

Each kind of piece is found in its own modules, so a new shipped piece is one new file: every
module of `agents/` exposing `AGENTS`, of `engines/` exposing `STORES`, of `metrics/` exposing
`METRICS`, `scoring/fieldkinds.py`'s `FIELD_KINDS` and `core/conditions.py`'s `LADDER`. They
are loaded by name from here, the `run` layer, which sits above every one of them: the
discovery adds no import that goes up a layer.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pluggy

from pytest_kgbench.agents import BaseAgent
from pytest_kgbench.core import hookspecs
from pytest_kgbench.core.conditions import Condition
from pytest_kgbench.core.questions import FieldKind
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.engines.stores import StoreKind
from pytest_kgbench.metrics import Metric

hookimpl = pluggy.HookimplMarker("pytest")

NAME = "kgbench-shipped"
"""The name this plugin is registered under (a piece's source in the registry's errors)."""

BASES: dict[str, type] = {"agents": BaseAgent, "stores": StoreKind, "field_kinds": FieldKind,
                          "metrics": Metric, "conditions": Condition}
"""What every piece of each table must be (an agent: a subclass)."""


def _modules(name: str) -> Iterable[Any]:
    """A module, or every module of a package (sub-packages included) in name order."""
    mod = importlib.import_module(name)
    if not hasattr(mod, "__path__"):
        yield mod
        return
    found = pkgutil.walk_packages(mod.__path__, prefix=f"{name}.")
    for info in sorted(found, key=lambda i: i.name):
        yield importlib.import_module(info.name)


def _found(package: str, attr: str) -> list[Any]:
    return [piece for mod in _modules(package) for piece in getattr(mod, attr, ())]


@hookimpl
def pytest_kgbench_agents() -> Sequence[type[Any]]:
    return _found("pytest_kgbench.agents", "AGENTS")


@hookimpl
def pytest_kgbench_stores() -> Sequence[Any]:
    return _found("pytest_kgbench.engines", "STORES")


@hookimpl
def pytest_kgbench_field_kinds() -> Sequence[Any]:
    return _found("pytest_kgbench.scoring.fieldkinds", "FIELD_KINDS")


@hookimpl
def pytest_kgbench_metrics() -> Sequence[Any]:
    return _found("pytest_kgbench.metrics", "METRICS")


@hookimpl
def pytest_kgbench_conditions() -> Sequence[Any]:
    return _found("pytest_kgbench.core.conditions", "LADDER")


def register(manager: Any) -> None:
    """Give a plugin manager the hooks and, first, the shipped pieces (once)."""
    known = getattr(manager.hook, hookspecs.HOOKS[0], None)
    if known is None or not known.has_spec():
        manager.add_hookspecs(hookspecs)
    if manager.get_plugin(NAME) is None:
        manager.register(sys.modules[__name__], name=NAME)


def fill(manager: Any) -> Registry:
    """The registry of every piece the manager's plugins register, each checked against its
    table's base class."""
    return Registry(bases=dict(BASES)).extend(manager, _source)


def _source(plugin: str, piece: Any) -> str:
    """A shipped piece's module (where to read it); another plugin's name."""
    if plugin != NAME:
        return f"plugin {plugin}"
    return str((piece if isinstance(piece, type) else type(piece)).__module__)


def shipped() -> Registry:
    """The shipped pieces alone (a test's, a benchmark's, or a script's registry)."""
    manager = pluggy.PluginManager("pytest")
    register(manager)
    return fill(manager)


def installed(*, warn: Callable[[str], None] | None = None) -> Registry:
    """The shipped pieces plus those of installed plugins (`pytest11` entry points that
    implement a kgbench hook): the registry of a `kgbench` command run outside pytest."""
    from importlib.metadata import entry_points

    manager = pluggy.PluginManager("pytest")
    register(manager)
    for ep in entry_points(group="pytest11"):
        if ep.value.split(":", 1)[0].startswith("pytest_kgbench."):
            continue
        try:
            module = ep.load()
        except Exception as exc:  # noqa: BLE001 - another package's plugin; say it, go on
            (warn or (lambda m: print(m, file=sys.stderr)))(
                f"kgbench: plugin {ep.name} could not be loaded: {exc}")
            continue
        if any(hasattr(module, h) for h in hookspecs.HOOKS):
            manager.register(module, name=ep.name)
    return fill(manager)
