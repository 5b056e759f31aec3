"""Which store a condition opens, in one place: `open_store(built, condition, persona)` serves
the run, the checks, the reference agents, the prompts and the MCP server alike, through the
store kinds of the registry (`--sql-engine`, `--sparql-engine` pick among them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.registry import StoreKind, current
from pytest_kgbench.engines.guard import Guard

if TYPE_CHECKING:
    from pytest_kgbench.engines import Executor
    from pytest_kgbench.packs.build import Built


@dataclass(frozen=True)
class Target:
    """What a store must hold: its language, its data (raw, executed or derived), and whether
    the definitions' triples are loaded too."""

    language: str
    data: str = "raw"
    ontology: bool = False


def target_of(where: Any) -> Target:
    """The store a condition queries, or the store a question's reference query of that name
    (`sql`, `sparql`, `executed`: SQL over the executed tables) runs on."""
    if isinstance(where, str):
        return Target("sql", "executed") if where == "executed" else Target(where)
    return Target(where.language, where.data, bool(getattr(where, "load_ontology", False)))


def guard_for(built: Built, persona: str) -> Guard:
    """The guard of a persona over a built variant. Its `view` says which build of the
    variant the persona's stores open: the full data, or the restricted copy without what the
    persona may not read (every store kind opens `built.files(guard.view)`)."""
    from pytest_kgbench.engines.guard import PersonalProperty
    from pytest_kgbench.packs.rdf.mapping import personal_properties

    pack = built.pack
    props = tuple(PersonalProperty(*p) for p in personal_properties(pack.personal, pack.rdf))
    return Guard(persona=persona, reads_personal=pack.reads_personal(persona),
                 personal=dict(pack.personal),
                 personal_predicates=frozenset(p.predicate for p in props), properties=props)


def store_kind(language: str, engines: Mapping[str, str] | None = None) -> StoreKind:
    """The engine a language runs on: the one `engines` names, else the language's default."""
    return current().store(language, (engines or {}).get(language))


def engine_labels(engines: Mapping[str, str] | None = None) -> dict[str, str]:
    """language -> the engine its queries run on, as a run folder and its report name it: the
    kind's `label` where it has one (a redacted display form: a server's URL, a DSN without
    its password), else its name."""
    out = {}
    for language in current().languages():
        kind = store_kind(language, engines)
        out[language] = str(getattr(kind, "label", kind.name))
    return out


def open_store(built: Built, where: Any, persona: str, *,
               engines: Mapping[str, str] | None = None, timeout: float = 60.0) -> Executor:
    """The store `where` (a condition, or a reference query's name) queries for `persona`,
    opened on the persona's view of the variant (withheld data absent)."""
    target = target_of(where)
    kind = store_kind(target.language, engines)
    return kind.open(built, target.data, guard_for(built, persona), ontology=target.ontology,
                     timeout=timeout)


def store_from_context(context: str, language: str, guard: Guard,
                       engines: Mapping[str, str] | None = None) -> Executor:
    """A store over the data a reading prompt shows (the reading gold agent's), on the named
    engine when it can build one, else on the language's default engine."""
    kind = store_kind(language, engines)
    store = kind.from_context(context, guard)
    if store is None:
        store = store_kind(language).from_context(context, guard)
    if store is None:
        from pytest_kgbench.core.errors import HarnessBroken

        raise HarnessBroken(f"no {language} engine can read a store from a prompt's text")
    return store


def refusal(built: Built, where: Any, persona: str, statement: str,
            engines: Mapping[str, str] | None = None) -> str | None:
    """Why the persona's guard refuses `statement` on the store `where` would open, without
    opening it."""
    target = target_of(where)
    return store_kind(target.language, engines).classify(guard_for(built, persona), statement)
