"""The registered pieces: agents, store kinds (engines), field kinds, metrics and conditions.

Each kind of piece has a Protocol here, and one `Registry` holds the pieces of a session: the
shipped ones, found in their own modules (a module of `agents/` exposing `AGENTS`, of
`executors/` exposing `STORES`, `scoring/fieldkinds.py`'s `FIELD_KINDS`, a module of `metrics/`
exposing `METRICS`, `conditions.LADDER`), plus whatever plugins return from the hooks of
`core/hookspecs.py`. So a new piece is one new file, and a separate installed package can add one
with no edit here. Nothing outside a piece's own module lists its name.

The plugin builds the session's registry at configure time and `activate`s it; pure modules
(questions, grading, report) read `current()`, which outside a session is the shipped pieces
alone. Pure module: no pytest.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from pytest_kgbench.core.errors import InputError

if TYPE_CHECKING:
    from pytest_kgbench.agents import Task
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.core.questions import FieldSpec
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.engines import Executor
    from pytest_kgbench.engines.guard import Guard
    from pytest_kgbench.metrics import MetricInput
    from pytest_kgbench.packs.build import Built
    from pytest_kgbench.scoring.answers import Answer

AGENT_KINDS = ("model", "reference", "replay")
"""model: a model wrote the answer; reference: the question's own queries answered (gold,
trap, the synthetic simulator); replay: a stored run's answers, asked again."""


class Agent(Protocol):
    """What answers an item. The class attributes tell the harness how to treat it."""

    name: str
    kind: str            # one of AGENT_KINDS
    asks_together: bool  # answers a together session in one conversation
    judged: bool         # the judge reads its answers to "why" questions
    simulated: bool      # its answers are drawn, not written: every report says SIMULATED
    must_pass: bool      # every item must be answered correctly, or it fails (gold)

    def ask(self, task: Task) -> Answer:
        """Answer one item (or, with `task.together`, one together session). Never raises
        for a wrong answer; raises `HarnessBroken` when the harness cannot measure and
        `TransientModelError` for a failure worth retrying."""
        ...


class AgentClass(Protocol):
    """A registered agent: its class, made once per process with the session's settings."""

    name: str
    kind: str
    asks_together: bool
    judged: bool
    simulated: bool
    must_pass: bool

    def __call__(self, settings: Settings) -> Agent: ...

    def check(self, settings: Settings, asking: bool) -> str | None:
        """Before anything runs: why this run cannot use the agent (a missing credential, an
        unknown model, a stored run that does not exist), or None. `asking` is False when
        nothing will be asked (--collect-only, --estimate)."""
        ...


class StoreKind(Protocol):
    """An engine for one query language. `open` gives the store a querying condition's items
    query; `from_context` the store the reading gold agent rebuilds from a prompt's text."""

    name: str       # the option's value: --sparql-engine NAME, --sql-engine NAME
    language: str   # "sql" or "sparql": the condition's reference language
    default: bool   # the language's engine when no option names one

    def open(self, built: Built, data: str, guard: Guard, *, ontology: bool,
             timeout: float) -> Executor:
        """The store of a built variant holding `data` ("raw", "executed" or "derived"; with
        `ontology`, the definitions' triples too), behind `guard`."""
        ...

    def from_context(self, context: str, guard: Guard) -> Executor | None:
        """A store over the data a reading prompt shows, or None if this kind cannot build
        one (the language's default kind is used instead)."""
        ...

    def classify(self, guard: Guard, statement: str) -> str | None:
        """Why `guard` refuses `statement` on this engine, or None; without a store."""
        ...

    def check(self) -> str | None:
        """Why the engine cannot run here (a library missing, a server not answering), or
        None."""
        ...

    # A kind that takes an argument (`--sparql-engine endpoint=URL`, `--sql-engine
    # postgres=DSN`) also has `configure(argument) -> StoreKind`: the kind bound to it.


class FieldKind(Protocol):
    """A kind of answer field: how it is explained to the model and compared with the key."""

    name: str
    is_list: bool

    def describe(self, spec: FieldSpec) -> str:
        """The field's value as the prompt explains it ("an integer", "a list of ...")."""
        ...

    def compare(self, spec: FieldSpec, expected: Any, got: Any,
                aliases: Mapping[str, Mapping[str, str]]) -> tuple[bool, float | None]:
        """(whether `got` is the key's `expected` value, F1 for a list or None). Never
        raises: any value a model writes is graded."""
        ...


class Metric(Protocol):
    """A measurement beside the grade, per item, summarised per arm in the report."""

    name: str    # its key in the item's `metrics`
    title: str   # its column in the report
    help: str    # one line under the report's table saying what it measures
    order: int   # columns sort by it

    def measure(self, item: MetricInput) -> Any:
        """The item's value (builtin JSON types), or None when it cannot be measured."""
        ...

    def summarise(self, values: Sequence[Any]) -> dict[str, Any] | None:
        """The arm's summary of its items' values (those not None), or None."""
        ...

    def cell(self, summary: Mapping[str, Any]) -> str:
        """The summary as the report's table shows it."""
        ...


@dataclass
class Registry:
    """The pieces one session (or one `kgbench` command) knows, by name."""

    agents: dict[str, AgentClass] = field(default_factory=dict)
    stores: dict[str, StoreKind] = field(default_factory=dict)
    field_kinds: dict[str, FieldKind] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    conditions: dict[str, Condition] = field(default_factory=dict)
    sources: dict[tuple[str, str], str] = field(default_factory=dict)

    # --- filling ------------------------------------------------------------------------------

    def add(self, table: str, piece: Any, source: str) -> None:
        """Register one piece under its name (`id` for a condition); twice is an error."""
        name = str(getattr(piece, "id" if table == "conditions" else "name", "") or "")
        if not name:
            raise InputError(source, f"registers a piece in {table} with no name: {piece!r}")
        pieces: dict[str, Any] = getattr(self, table)
        if name in pieces:
            raise InputError(source, f"registers {table[:-1].replace('_', ' ')} '{name}', "
                             f"which {self.sources[(table, name)]} registered already")
        if table == "agents" and getattr(piece, "kind", None) not in AGENT_KINDS:
            raise InputError(source, f"agent '{name}' has kind {getattr(piece, 'kind', None)!r}"
                             f" (one of {', '.join(AGENT_KINDS)})")
        pieces[name] = piece
        self.sources[(table, name)] = source

    @classmethod
    def shipped(cls) -> Registry:
        """The pieces that ship with the plugin, found in their own modules (by name: the
        registry depends on none of them)."""
        reg = cls()
        for module, attr, table in _SHIPPED:
            for mod in _modules(module):
                for piece in getattr(mod, attr, ()):
                    reg.add(table, piece, mod.__name__)
        return reg

    def extend(self, hook: Any) -> Registry:
        """Add what every plugin implementing the hooks of `core/hookspecs.py` returns."""
        from pytest_kgbench.core.hookspecs import results

        for name, table in _HOOK_TABLES.items():
            for plugin, piece in results(hook, name):
                self.add(table, piece, f"plugin {plugin}")
        return self

    # --- reading ------------------------------------------------------------------------------

    def agent(self, name: str) -> AgentClass:
        try:
            return self.agents[name]
        except KeyError:
            raise InputError("--agent", f"unknown agent '{name}' (known: "
                             f"{', '.join(sorted(self.agents))})") from None

    def store(self, language: str, name: str | None = None) -> StoreKind:
        """The engine `name` for `language`, or the language's default engine."""
        kinds = [k for k in self.stores.values() if k.language == language]
        if not kinds:
            raise InputError("conditions", f"no store kind serves the language '{language}'")
        if name is None:
            return next((k for k in kinds if k.default), kinds[0])
        base, eq, argument = name.partition("=")  # endpoint=URL, postgres=DSN
        for kind in kinds:
            if kind.name == base:
                if not eq:
                    return kind
                configure = getattr(kind, "configure", None)
                if configure is None:
                    raise InputError(f"--{language}-engine", f"the {language} engine '{base}' "
                                     f"takes no '={argument}'")
                return cast("StoreKind", configure(argument))
        raise InputError(f"--{language}-engine", f"unknown {language} engine '{base}' (known: "
                         f"{', '.join(k.name for k in kinds)})")

    def languages(self) -> list[str]:
        return sorted({k.language for k in self.stores.values()})

    def field_kind(self, name: str) -> FieldKind:
        try:
            return self.field_kinds[name]
        except KeyError:
            raise KeyError(f"unknown field kind '{name}' (known: "
                           f"{', '.join(sorted(self.field_kinds))})") from None

    def ordered_metrics(self) -> list[Metric]:
        return sorted(self.metrics.values(), key=lambda m: (m.order, m.name))


_SHIPPED: tuple[tuple[str, str, str], ...] = (
    ("pytest_kgbench.agents", "AGENTS", "agents"),
    ("pytest_kgbench.engines", "STORES", "stores"),
    ("pytest_kgbench.scoring.fieldkinds", "FIELD_KINDS", "field_kinds"),
    ("pytest_kgbench.metrics", "METRICS", "metrics"),
    ("pytest_kgbench.core.conditions", "LADDER", "conditions"),
)
"""(module or package, the attribute listing its pieces, the registry's table): every module
of a package is read, so a new shipped piece is a new module there."""
_HOOK_TABLES = {"pytest_kgbench_agents": "agents", "pytest_kgbench_stores": "stores",
                "pytest_kgbench_field_kinds": "field_kinds", "pytest_kgbench_metrics": "metrics",
                "pytest_kgbench_conditions": "conditions"}


def _modules(name: str) -> Iterable[Any]:
    """A module, or every module of a package in name order."""
    mod = importlib.import_module(name)
    if not hasattr(mod, "__path__"):
        yield mod
        return
    found = pkgutil.walk_packages(mod.__path__, prefix=f"{name}.")
    for info in sorted(found, key=lambda i: i.name):
        yield importlib.import_module(info.name)


_CURRENT: list[Registry] = []


def current() -> Registry:
    """The active session's registry; outside a session, the shipped pieces."""
    if not _CURRENT:
        _CURRENT.append(Registry.shipped())
    return _CURRENT[-1]


def activate(registry: Registry) -> None:
    """Make `registry` the current one (the plugin does this at configure time)."""
    _CURRENT.append(registry)


def deactivate(registry: Registry) -> None:
    """Undo `activate` (at unconfigure), so an inline pytester run leaves nothing behind."""
    if registry in _CURRENT:
        _CURRENT.remove(registry)


def installed(*, warn: Callable[[str], None] | None = None) -> Registry:
    """The shipped pieces plus those of installed plugins (`pytest11` entry points that
    implement a kgbench hook): the registry of a `kgbench` command run outside pytest."""
    from importlib.metadata import entry_points

    import pluggy

    from pytest_kgbench.core import hookspecs

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
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
    return Registry.shipped().extend(manager.hook)


def field_kind_names() -> Sequence[str]:
    return sorted(current().field_kinds)
