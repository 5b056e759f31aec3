"""The registry: the pieces one session knows, by name — agents, store kinds (engines), field
kinds, metrics and conditions.

Generic on purpose. What each kind of piece must offer is an abstract base class beside its
domain (`agents.BaseAgent`, `engines.StoreKind`, `core.questions.FieldKind`,
`metrics.Metric`, `core.conditions.Condition`), and each domain reads its own table through a
typed accessor (`agents.agent_class`, `engines.stores.store_kind`, `core.questions.field_kind`,
`metrics.ordered`); this module names none of them, so it sits at the bottom with nothing
above it to reach for.

A registry is filled through pluggy: every implementation of the hooks of `core/hookspecs.py`
is called, the plugin's own (`run/shipped.py`, which finds the shipped pieces in their
modules) first, then every other plugin's, in the order pluggy registered them. A piece that is
not an instance (for agents, a subclass) of its table's base class, or a name given twice, is
an `InputError` naming both sources.

The plugin builds the session's registry at configure time and keeps it in `config.stash`; a
`kgbench` command builds its own; each passes it to what looks a piece up by name. Nothing is
made current: a caller that passes no registry (a script, a notebook, a test of one module)
gets `default()`, the shipped pieces, made once, from a factory the package's root hands in
(`outside_a_session`). Pure module: no pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_kgbench.core.errors import InputError

TABLES: dict[str, str] = {
    "pytest_kgbench_agents": "agents", "pytest_kgbench_stores": "stores",
    "pytest_kgbench_field_kinds": "field_kinds", "pytest_kgbench_metrics": "metrics",
    "pytest_kgbench_conditions": "conditions"}
"""Each hook of core/hookspecs.py and the table its pieces go to, in the order they are read."""


@dataclass
class Registry:
    """The pieces one session (or one `kgbench` command) knows, by name. `bases` maps a table
    to the class its pieces must be (agents: subclass); a table missing from it is not
    checked."""

    agents: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, Any] = field(default_factory=dict)
    field_kinds: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)
    bases: dict[str, type] = field(default_factory=dict, repr=False)

    def table(self, table: str) -> dict[str, Any]:
        if table not in TABLES.values():
            raise KeyError(f"no registry table '{table}' (known: {', '.join(TABLES.values())})")
        pieces: dict[str, Any] = getattr(self, table)
        return pieces

    def add(self, table: str, piece: Any, source: str) -> None:
        """Register one piece under its name (`id` for a condition); twice is an error."""
        what = table[:-1].replace("_", " ")
        base = self.bases.get(table)
        if base is not None and not (issubclass(piece, base) if isinstance(piece, type)
                                     and table == "agents" else isinstance(piece, base)):
            need = "a subclass" if table == "agents" else "an instance"
            raise InputError(source, f"registers {what} {piece!r}, which is not {need} of "
                             f"{base.__module__}.{base.__qualname__}")
        name = str(getattr(piece, "id" if table == "conditions" else "name", "") or "")
        if not name:
            raise InputError(source, f"registers a piece in {table} with no name: {piece!r}")
        pieces = self.table(table)
        if name in pieces:
            raise InputError(source, f"registers {what} '{name}', which "
                             f"{self.sources[(table, name)]} registered already")
        pieces[name] = piece
        self.sources[(table, name)] = source

    def extend(self, manager: Any,
               source: Callable[[str, Any], str] = lambda plugin, _: f"plugin {plugin}",
               ) -> Registry:
        """Add what every implementation of the hooks of `core/hookspecs.py` returns, each
        called through pluggy (`manager`: a pluggy PluginManager with those hookspecs), in
        the order the plugins were registered; `source(plugin name, piece)` says where each
        piece came from in the registry's errors."""
        for hook, table in TABLES.items():
            caller = getattr(manager.hook, hook)
            plugins = [impl.plugin for impl in reversed(caller.get_hookimpls())]
            for plugin in dict.fromkeys(plugins):  # one plugin may implement it once
                others = [p for p in plugins if p is not plugin]
                for pieces in manager.subset_hook_caller(hook, remove_plugins=others)():
                    for piece in pieces or ():
                        self.add(table, piece, source(manager.get_name(plugin), piece))
        return self

    def get(self, table: str, name: str, where: str) -> Any:
        """The piece `name` of `table`, or an InputError at `where` listing the known ones."""
        pieces = self.table(table)
        if name not in pieces:
            raise InputError(where, f"unknown {table[:-1].replace('_', ' ')} '{name}' (known: "
                             f"{', '.join(sorted(pieces))})")
        return pieces[name]


_OUTSIDE: list[Callable[[], Registry]] = []
_MADE: list[Registry] = []


def outside_a_session(factory: Callable[[], Registry]) -> None:
    """What `default()` gives: the package's root sets it to the shipped pieces
    (`run.shipped.shipped`)."""
    _OUTSIDE[:] = [factory]
    _MADE.clear()


def default() -> Registry:
    """The shipped pieces, made once: the registry of a caller that passes none. Never a
    session's: a session's pieces reach a function only as its `registry` argument."""
    if not _MADE:
        if not _OUTSIDE:  # pragma: no cover - the package's root always sets it
            raise RuntimeError("no kgbench registry: pass one")
        _MADE.append(_OUTSIDE[0]())
    return _MADE[0]


def given(registry: Registry | None) -> Registry:
    """`registry`, or the shipped pieces where the caller passed none."""
    return default() if registry is None else registry
