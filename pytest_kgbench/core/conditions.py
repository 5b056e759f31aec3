"""The ladder (docs/conditions.md), as data in one place.

A condition says what the model is given and how it reaches the data. Each one names the pack
artefacts it needs; a pack without them does not get the condition (R7 needs `neutral.ttl`,
which only credit has). Adding a rung is adding a row here (or returning one from a plugin's
`pytest_kgbench_conditions` hook) and, if it needs a new artefact, the code that builds it —
nothing else switches on condition ids. The session's conditions are the registry's
(`by_id`, `select`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry, given

# the pack artefacts each kind of shown definitions is made from (Pack.has names them)
SHOWN_FROM: dict[str, tuple[str, ...]] = {
    "markdown": ("definitions",), "ontology": ("definitions.ttl",),
    "neutral": ("neutral.ttl",), "decoy": ("decoy.md",), "axioms": ("axioms.ttl", "shapes.ttl"),
}


@dataclass(frozen=True)
class Condition:
    """One rung of the ladder."""

    id: str
    label: str
    mode: str                     # "reading" | "querying"
    language: str                 # the reference query language: "sql" | "sparql"
    data: str                     # reading: "csv" | "rdf" | "executed";
    #                               querying, the store's data: "raw" | "executed" | "derived"
    definitions: tuple[str, ...]  # artefacts shown: "markdown", "ontology", "neutral", "decoy",
    #                               "axioms"
    load_ontology: bool = False   # querying: the ontology's triples are loaded into the store
    requires: tuple[str, ...] = ()  # artefacts the pack must have (see Pack.has)
    schema: str = "prompt"        # querying: how the model learns the store (SCHEMA_ARMS)
    engine: str | None = None     # querying: the engine of an engine arm ("D4@oxigraph"),
    #                               None for the session's engine of the language

    @property
    def base_id(self) -> str:
        """The ladder rung this condition is an arm of ("D1" for "D1.tools", "D4@oxigraph")."""
        return re.split(r"[.@]", self.id, maxsplit=1)[0]

    @property
    def floor(self) -> bool:
        """The naive floor's minimal instruction (the `floor` schema arm)."""
        return self.mode == "querying" and SCHEMA_ARMS[self.schema].floor

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools the model is offered: none when it reads; the store's three when it
        queries, or run_query alone when the arm gives no way to discover the store."""
        if self.mode != "querying":
            return ()
        if SCHEMA_ARMS[self.schema].discovery:
            return ("list_tables", "describe", "run_query")
        return ("run_query",)

    @property
    def artefacts(self) -> tuple[str, ...]:
        """What the pack must have for this condition (Pack.has): its `requires`, tables for a
        condition over tables (SQL, CSV), RDF for a graph condition, and the files its
        definitions are shown from."""
        need = list(self.requires)
        if self.data in ("csv", "executed") or (self.mode == "querying"
                                                 and self.language == "sql"):
            need.append("tables")
        if self.language == "sparql" or self.data == "rdf":
            need.append("rdf")
        for kind in self.definitions:
            need += SHOWN_FROM.get(kind, ())
        if self.load_ontology:
            need.append("definitions.ttl")
        return tuple(dict.fromkeys(need))

    @property
    def reference(self) -> str:
        """Which of a question's reference queries fits this condition's data:
        `sql`, `sparql`, or `executed` (SQL over the executed tables)."""
        return "executed" if self.data == "executed" else self.language


LADDER: tuple[Condition, ...] = (
    Condition("R1", "csv", "reading", "sql", "csv", ()),
    Condition("R2", "rdf", "reading", "sparql", "rdf", ()),
    Condition("R3", "csv+padding", "reading", "sql", "csv", ("decoy",), requires=("decoy.md",)),
    Condition("R4", "csv+markdown", "reading", "sql", "csv", ("markdown",)),
    Condition("R5", "csv+ontology", "reading", "sql", "csv", ("ontology",)),
    Condition("R6", "rdf+ontology", "reading", "sparql", "rdf", ("ontology",)),
    Condition("R7", "csv+neutral", "reading", "sql", "csv", ("neutral",),
              requires=("neutral.ttl",)),
    Condition("R8", "csv+axioms", "reading", "sql", "csv", ("axioms",),
              requires=("axioms.ttl", "shapes.ttl")),
    Condition("R9", "csv+axioms+markdown", "reading", "sql", "csv", ("axioms", "markdown"),
              requires=("axioms.ttl", "shapes.ttl")),
    Condition("R10", "executed", "reading", "sql", "executed", (), requires=("executed",)),
    Condition("D1", "sql", "querying", "sql", "raw", ()),
    Condition("D2", "sql+markdown", "querying", "sql", "raw", ("markdown",)),
    Condition("D3", "sql+executed", "querying", "sql", "executed", (), requires=("executed",)),
    Condition("D4", "sparql", "querying", "sparql", "raw", ()),
    Condition("D5", "sparql+ontology", "querying", "sparql", "raw", ("markdown",),
              load_ontology=True),
    Condition("D6", "sparql+axioms", "querying", "sparql", "derived", (),
              requires=("shapes.ttl",)),
)
BY_ID = {c.id: c for c in LADDER}


@dataclass(frozen=True)
class SchemaArm:
    """How a querying condition's model learns the store (`--schema`): whether the prompt
    describes it, whether list_tables and describe are offered, and whether the instruction
    is the floor's minimal one."""

    name: str
    described: bool   # the prompt holds the store's tables/classes, columns and counts
    discovery: bool   # list_tables and describe are offered
    floor: bool       # the minimal instruction of the naive floor
    what: str


SCHEMA_ARMS: dict[str, SchemaArm] = {
    "prompt": SchemaArm("prompt", True, True, False,
                        "the store described in the prompt, and the discovery tools"),
    "tools": SchemaArm("tools", False, True, False,
                       "no description in the prompt: the store is learnt through list_tables "
                       "and describe"),
    "none": SchemaArm("none", False, False, False,
                      "no description anywhere: run_query alone"),
    "floor": SchemaArm("floor", False, False, True,
                       "the naive floor: run_query alone and a minimal instruction"),
}
# prompt<->tools: the same knowledge, reached by other means (the accuracy should not move, the
# tool calls should); tools<->none: what a description of the store is worth; none<->floor:
# what the instruction is worth, down to the floor
SCHEMA_PAIRS: tuple[tuple[str, str], ...] = (("prompt", "tools"), ("tools", "none"),
                                             ("none", "floor"))


def schema_arms(spec: str | None) -> tuple[str, ...]:
    """The arms an option value names: `prompt`, `tools`, `none`, `floor`, comma lists, or
    `all` (every arm, in that order)."""
    chosen: list[str] = []
    for part in (spec or "prompt").replace(" ", "").lower().split(","):
        if not part:
            continue
        names = tuple(SCHEMA_ARMS) if part == "all" else (part,)
        for name in names:
            if name not in SCHEMA_ARMS:
                raise InputError("--schema", f"unknown schema arm '{part}' "
                                 f"(known: {', '.join([*SCHEMA_ARMS, 'all'])})")
            if name not in chosen:
                chosen.append(name)
    return tuple(chosen) or ("prompt",)


def arm(cond: Condition, schema: str) -> Condition:
    """`cond` under a schema arm: itself for `prompt` (and for a reading condition, which
    has no store to describe), else the condition `<id>.<arm>` ("D1.tools")."""
    if cond.mode != "querying" or schema == "prompt":
        return cond
    if schema not in SCHEMA_ARMS:
        raise InputError("--schema", f"unknown schema arm '{schema}' "
                         f"(known: {', '.join(SCHEMA_ARMS)})")
    return replace(cond, id=f"{cond.id}.{schema}", label=f"{cond.label} [{schema}]",
                   schema=schema)


def on_engine(cond: Condition, engine: str) -> Condition:
    """`cond` on an engine arm: the condition `<id>@<engine>` ("D4@oxigraph", "D1.none@postgres")
    whose store runs on `engine` (a store kind's name; --sparql-engine/--sql-engine with more
    than one engine), so one run grades the same items on each engine. A reading condition
    has no store: itself."""
    if cond.mode != "querying":
        return cond
    return replace(cond, id=f"{cond.id}@{engine}", label=f"{cond.label} on {engine}",
                   engine=engine)


def engine_arms(cond: Condition, engines: Mapping[str, tuple[str, ...]] | None
                ) -> list[Condition]:
    """`cond` on each engine `engines` names for its language, when it names more than one;
    else `cond` alone."""
    names = (engines or {}).get(cond.language, ())
    if cond.mode != "querying" or len(names) < 2:
        return [cond]
    return [on_engine(cond, name) for name in names]


def normal_id(condition_id: str) -> str:
    """A condition id as the registry spells it: the rung upper-case, the arms lower-case
    ("d1.TOOLS" -> "D1.tools", "d4@Oxigraph" -> "D4@oxigraph")."""
    head, at, engine = condition_id.strip().partition("@")
    rung, dot, schema = head.partition(".")
    return rung.upper() + (dot + schema.lower() if dot else "") + (at + engine.lower()
                                                                   if at else "")
"""The shipped ladder by id (a session's conditions, plugins' included, are `registered()`)."""


def registered(registry: Registry | None = None) -> dict[str, Condition]:
    """The conditions of `registry` (a session's: the ladder plus those plugins add) by id;
    the shipped ladder where none is passed."""
    return given(registry).conditions


def by_id(condition_id: str, registry: Registry | None = None) -> Condition:
    """A condition of `registry` by its id (case-insensitive), an arm of one included
    ("D1.tools", "D4@oxigraph")."""
    head, at, engine = condition_id.partition("@")
    if at:
        base = by_id(head, registry)
        if base.mode != "querying" or not engine:
            raise InputError("--condition", f"'{condition_id}': {base.id} reads its data: it "
                             "has no engine arms" if engine else
                             f"'{condition_id}' names no engine after '@'")
        return on_engine(base, engine.lower())
    known = registered(registry)
    rung, _, schema = condition_id.partition(".")
    found = known.get(rung) or known.get(rung.upper())
    if found is None:
        raise InputError("--condition", f"unknown condition '{condition_id}' "
                         f"(known: {', '.join(known)})")
    cond = found
    if schema:
        if cond.mode != "querying":
            raise InputError("--condition", f"'{condition_id}': {cond.id} reads its data: it "
                             "has no schema arms")
        return arm(cond, schema.lower())
    return cond


def groups(registry: Registry | None = None) -> dict[str, tuple[str, ...]]:
    """The names that stand for several conditions: all, reading, querying."""
    ids = list(registered(registry).values())
    return {"all": tuple(c.id for c in ids),
            "reading": tuple(c.id for c in ids if c.mode == "reading"),
            "querying": tuple(c.id for c in ids if c.mode == "querying")}


# The paired comparisons --ablation reports by default (docs/conditions.md); R5-R7
# exists on credit only, which the pairing (questions present under both conditions) takes care
# of by itself.
DESIGN_PAIRS: tuple[tuple[str, str], ...] = (
    ("R1", "R4"), ("R4", "R5"), ("R3", "R4"), ("R1", "R10"), ("D1", "D2"), ("D1", "D3"),
    ("D4", "D5"), ("D1", "D4"), ("D2", "D5"), ("D3", "D6"), ("R5", "R7"),
)


def id_parts(condition_id: str) -> tuple[str, str, str]:
    """A condition id's rung, schema arm and engine arm: "D4.tools@oxigraph" -> ("D4",
    "tools", "oxigraph"); "D1" -> ("D1", "prompt", "")."""
    head, _, engine = condition_id.partition("@")
    rung, _, schema = head.partition(".")
    return rung, schema or "prompt", engine


def _arm_name(condition_id: str) -> str:
    return id_parts(condition_id)[1]


def ablation_pairs(selected: tuple[str, ...]) -> list[tuple[str, str]]:
    """The pairs an ablation reports: the first-listed condition against every other of its
    schema arm; each condition's engine arms, the first engine against each other
    (D4@rdflib-D4@oxigraph); each rung's schema arms against each other (prompt-tools,
    tools-none, none-floor), on each engine; then the design's named pairs, within each schema
    arm, whose both sides were run (each pair once)."""
    pairs: list[tuple[str, str]] = []

    def add(a: str, b: str) -> None:
        if a in selected and b in selected and a != b and (a, b) not in pairs \
                and (b, a) not in pairs:
            pairs.append((a, b))

    parts = {c: id_parts(c) for c in selected}
    first = selected[0]
    for other in selected[1:]:
        if _arm_name(other) == _arm_name(first):
            add(first, other)
    engines: dict[str, list[str]] = {}
    for c in selected:
        if parts[c][2]:
            engines.setdefault(c.partition("@")[0], []).append(c)
    for group in engines.values():
        for other in group[1:]:
            add(group[0], other)
    for rung, engine in dict.fromkeys((r, e) for r, _, e in parts.values()):
        at = f"@{engine}" if engine else ""
        for a, b in SCHEMA_PAIRS:
            add((rung if a == "prompt" else f"{rung}.{a}") + at, f"{rung}.{b}{at}")
    for a, b in DESIGN_PAIRS:
        for x, (rx, sx, _) in parts.items():
            for y, (ry, sy, _) in parts.items():
                if (rx, ry) == (a, b) and sx == sy:
                    add(x, y)
    return pairs


def select(spec: str | None, schema: tuple[str, ...] = ("prompt",),
           engines: Mapping[str, tuple[str, ...]] | None = None,
           registry: Registry | None = None) -> tuple[Condition, ...]:
    """Conditions named by an option value: ids, comma lists, `reading`, `querying`, `all`,
    and arms by id ("D1.tools", "D4@oxigraph"). Each querying condition named by its rung runs
    under every arm of `schema` (--schema), in that order, and on every engine `engines` names
    for its language when it names more than one (language -> engine names). The order is
    kept as given (a group expands in ladder order): the first is the baseline."""
    known = registered(registry)
    named = groups(registry)
    chosen: list[Condition] = []
    for part in (spec or "all").replace(" ", "").split(","):
        if not part:
            continue
        if "." in part or "@" in part:
            conds = [by_id(normal_id(part), registry)]
        else:
            ids = named.get(part.lower()) or ((part.upper(),) if part.upper() in known else None)
            if ids is None:
                raise InputError("--condition", f"unknown condition '{part}' "
                                 f"(known: {', '.join([*known, *named])})")
            conds = [arm(known[i], s) for i in ids for s in schema]
        if "@" not in part:
            conds = [e for c in conds for e in engine_arms(c, engines)]
        for cond in conds:
            if all(c.id != cond.id for c in chosen):
                chosen.append(cond)
    return tuple(chosen)
