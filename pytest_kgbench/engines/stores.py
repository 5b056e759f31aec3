"""Store kinds (engines) and which store a condition opens, in one place.

`StoreKind` is what an engine offers (the shipped ones are the modules of this package exposing
`STORES`; a plugin registers its own through `pytest_kgbench_stores`); `store_kind` picks the
registered one `--sql-engine` / `--sparql-engine` name; `open_store(built, condition,
persona)` serves the run, the checks, the reference agents, the prompts and the MCP server
alike."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry, given
from pytest_kgbench.engines import CAPS, WHOLE, Caps
from pytest_kgbench.engines.guard import Guard

if TYPE_CHECKING:
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.engines import Executor
    from pytest_kgbench.packs.build import Built, StoreSource


class StoreKind(ABC):
    """An engine for one query language. `open` gives the store a querying condition's items
    query, from a build's files (`packs.build.StoreSource`: each view's files, the tables'
    schemas, the definitions' triples, who reads what), never the build handle; `from_context`
    the store the reading gold agent rebuilds from a prompt's text."""

    name: str = ""        # the option's value: --sparql-engine NAME, --sql-engine NAME
    language: str = ""    # "sql" or "sparql": the condition's reference language
    default: bool = False  # the language's engine when no option names one

    @property
    def label(self) -> str:
        """How a run folder and its report name the engine: a bound kind's redacted form (a
        server's URL, a DSN with its password as ***), else its name."""
        return self.name

    def configure(self, argument: str) -> StoreKind:
        """The kind bound to `argument` (`--sparql-engine endpoint=URL`, `--sql-engine
        postgres=DSN`); a kind that takes none refuses it."""
        raise InputError(f"--{self.language}-engine", f"the {self.language} engine "
                         f"'{self.name}' takes no '={argument}'")

    @abstractmethod
    def open(self, source: StoreSource, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> Executor:
        """The store of a built variant holding `data` ("raw", "executed" or "derived"; with
        `ontology`, the definitions' triples too), behind `guard`, on the files of the
        persona's view (`source.files(guard.view)`)."""

    def from_context(self, context: str, guard: Guard, caps: Caps = CAPS) -> Executor | None:
        """A store over the data a reading prompt shows, its results held to `caps`, or None
        if this kind cannot build one (the language's default kind is used instead)."""
        return None

    @abstractmethod
    def classify(self, guard: Guard, statement: str) -> str | None:
        """Why `guard` refuses `statement` on this engine, or None; without a store."""

    def check(self) -> str | None:
        """Why the engine cannot run here (a library missing, a server not answering), or
        None."""
        return None


def find_kind(registry: Registry, language: str, name: str | None = None) -> StoreKind:
    """The registered engine `name` (`NAME=ARGUMENT` binds it) for `language`, or the
    language's default engine."""
    kinds = [cast(StoreKind, k) for k in registry.stores.values() if k.language == language]
    if not kinds:
        raise InputError("conditions", f"no store kind serves the language '{language}'")
    if name is None:
        return next((k for k in kinds if k.default), kinds[0])
    base, eq, argument = name.partition("=")  # endpoint=URL, postgres=DSN
    for kind in kinds:
        if kind.name == base:
            return kind.configure(argument) if eq else kind
    raise InputError(f"--{language}-engine", f"unknown {language} engine '{base}' (known: "
                     f"{', '.join(k.name for k in kinds)})")


def languages(registry: Registry) -> list[str]:
    """The query languages the registered engines serve."""
    return sorted({k.language for k in registry.stores.values()})


@dataclass(frozen=True)
class Target:
    """What a store must hold: its language, its data (raw, executed or derived), and whether
    the definitions' triples are loaded too."""

    language: str
    data: str = "raw"
    ontology: bool = False


def target_of(where: Condition | str) -> Target:
    """The store a condition queries, or the store a question's reference query of that name
    (`sql`, `sparql`, `executed`: SQL over the executed tables) runs on."""
    if isinstance(where, str):
        return Target("sql", "executed") if where == "executed" else Target(where)
    return Target(where.language, where.data, where.load_ontology)


def guard_for(built: Built, persona: str) -> Guard:
    """The guard of a persona over a built variant. Its `view` says which build of the
    variant the persona's stores open: the full data, or the restricted copy without what the
    persona may not read (every store kind opens `source.files(guard.view)`)."""
    from pytest_kgbench.engines.guard import PersonalProperty
    from pytest_kgbench.packs.rdf.mapping import personal_properties

    pack = built.pack
    props = tuple(PersonalProperty(*p) for p in personal_properties(pack.personal, pack.rdf))
    return Guard(persona=persona, reads_personal=pack.reads_personal(persona),
                 personal=dict(pack.personal),
                 personal_predicates=frozenset(p.predicate for p in props), properties=props)


def store_kind(language: str, engines: Mapping[str, str] | None = None,
               registry: Registry | None = None) -> StoreKind:
    """The engine a language runs on: the one `engines` names, else the language's default,
    among the store kinds of `registry` (the session's; the shipped ones where none is
    passed)."""
    return find_kind(given(registry), language, (engines or {}).get(language))


def engine_labels(engines: Mapping[str, str] | None = None,
                  registry: Registry | None = None) -> dict[str, str]:
    """language -> the engine its queries run on, as a run folder and its report name it: the
    kind's `label` where it has one (a redacted display form: a server's URL, a DSN without
    its password), else its name."""
    out = {}
    for language in languages(given(registry)):
        out[language] = store_kind(language, engines, registry).label
    return out


def open_store(built: Built, where: Any, persona: str, *,
               engines: Mapping[str, str] | None = None, timeout: float = 60.0,
               registry: Registry | None = None, caps: Caps = CAPS) -> Executor:
    """The store `where` (a condition, or a reference query's name) queries for `persona`,
    opened on the persona's view of the variant (withheld data absent), its results held to
    `caps`: a model's store the standard `CAPS`; the store a key is read from `WHOLE` (a key
    is never cut). Every executor applies its `caps` per query."""
    target = target_of(where)
    kind = store_kind(target.language, engines, registry)
    store = kind.open(built.source, target.data, guard_for(built, persona),
                      ontology=target.ontology, timeout=timeout)
    store.caps = caps
    return store


def store_from_context(context: str, language: str, guard: Guard,
                       engines: Mapping[str, str] | None = None,
                       registry: Registry | None = None) -> Executor:
    """A store over the data a reading prompt shows (the reading gold agent's, and a rescore's
    of its queries), on the named engine when it can build one, else on the language's default
    engine. Its results are whole (`WHOLE`): it proves the prompt holds the facts, against a
    key that is never cut, whatever one query may hand a model."""
    kind = store_kind(language, engines, registry)
    store = kind.from_context(context, guard, WHOLE)
    if store is None:
        store = store_kind(language, None, registry).from_context(context, guard, WHOLE)
    if store is None:
        from pytest_kgbench.core.errors import HarnessBroken

        raise HarnessBroken(f"no {language} engine can read a store from a prompt's text")
    return store


def refusal(built: Built, where: Any, persona: str, statement: str,
            engines: Mapping[str, str] | None = None,
            registry: Registry | None = None) -> str | None:
    """Why the persona's guard refuses `statement` on the store `where` would open, without
    opening it."""
    target = target_of(where)
    kind = store_kind(target.language, engines, registry)
    return kind.classify(guard_for(built, persona), statement)
