"""The ladder (README: The ladder of conditions), as data in one place.

A condition says what the model is given and how it reaches the data. Each one names the pack
artefacts it needs; a pack without them does not get the condition (R7 needs `neutral.ttl`,
which only credit has). Adding a rung is adding a row here (or returning one from a plugin's
`pytest_kgbench_conditions` hook) and, if it needs a new artefact, the code that builds it —
nothing else switches on condition ids. The session's conditions are the registry's
(`by_id`, `select`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_kgbench.errors import InputError

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
"""The shipped ladder by id (a session's conditions, plugins' included, are `registered()`)."""


def registered() -> dict[str, Condition]:
    """The session's conditions by id: the ladder plus those plugins add."""
    from pytest_kgbench.registry import current

    return current().conditions


def by_id(condition_id: str) -> Condition:
    """A condition by its id (case-insensitive)."""
    known = registered()
    cond = known.get(condition_id) or known.get(condition_id.upper())
    if cond is None:
        raise InputError("--condition", f"unknown condition '{condition_id}' "
                         f"(known: {', '.join(known)})")
    return cond


def groups() -> dict[str, tuple[str, ...]]:
    """The names that stand for several conditions: all, reading, querying."""
    ids = list(registered().values())
    return {"all": tuple(c.id for c in ids),
            "reading": tuple(c.id for c in ids if c.mode == "reading"),
            "querying": tuple(c.id for c in ids if c.mode == "querying")}


# The paired comparisons --ablation reports by default (README: Comparing conditions); R5-R7
# exists on credit only, which the pairing (questions present under both conditions) takes care
# of by itself.
DESIGN_PAIRS: tuple[tuple[str, str], ...] = (
    ("R1", "R4"), ("R4", "R5"), ("R3", "R4"), ("R1", "R10"), ("D1", "D2"), ("D1", "D3"),
    ("D4", "D5"), ("D1", "D4"), ("D2", "D5"), ("D3", "D6"), ("R5", "R7"),
)


def ablation_pairs(selected: tuple[str, ...]) -> list[tuple[str, str]]:
    """The pairs an ablation reports: the first-listed condition against every other, then the
    design's named pairs whose both sides were run (each pair once)."""
    pairs: list[tuple[str, str]] = [(selected[0], other) for other in selected[1:]]
    for a, b in DESIGN_PAIRS:
        if a in selected and b in selected and (a, b) not in pairs and (b, a) not in pairs:
            pairs.append((a, b))
    return pairs


def select(spec: str | None) -> tuple[Condition, ...]:
    """Conditions named by an option value: ids, comma lists, `reading`, `querying`, `all`.
    The order is kept as given (a group expands in ladder order): the first is the baseline."""
    known = registered()
    named = groups()
    chosen: list[str] = []
    for part in (spec or "all").replace(" ", "").split(","):
        if not part:
            continue
        ids = named.get(part.lower()) or ((part.upper(),) if part.upper() in known else None)
        if ids is None:
            raise InputError("--condition", f"unknown condition '{part}' "
                             f"(known: {', '.join([*known, *named])})")
        chosen += [i for i in ids if i not in chosen]
    return tuple(known[i] for i in chosen)
