"""The pack contract: every shipped pack through the same checks, so that a new pack gets them
for free. Its questions (every one checks out on every variant and at any seed, each answer
question has the three gold references and a hand key, the L3 traps need every definition with
evidence), its data (deterministic by seed, read back typed, every declared trap planted,
identifiers with valid check digits, the RDF holding the facts of the tables) and its ladder
(definitions rendered to Markdown, a decoy as long that defines none of them, a neutral ontology
differing in the one slanted sentence, axioms and rules without prose, OWL axioms and SHACL-AF
rules, executed tables and rules deriving the same facts, the derived graph conforming).

The packs are those under datasets/ whose data is in the repository. The conformance packs
(cwd-acme, ck25) read published data from the external folder and are held to the published
references by their own tests (tests/packs/test_cwd_acme.py, tests/packs/test_ck25.py): they have no
generator, hand keys, traps or ladder artefacts, so nearly every check here would skip on them.

A check that needs an artefact (a neutral ontology, axioms, rules, executed tables, a generator)
runs on every pack that has it and is skipped, naming the pack and the artefact, on one that has
not. What a check needs to know of a pack that its pack.yaml does not declare is in DECLARED
below (and, as code, in tests/pack_declared.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import hashlib
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pack_declared import (
    CHECK_DIGITS,
    FACTS,
    DerivedFacts,
    Tables,
    credit_planted,
    research_planted,
)

from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.schema import find_pack, read_tables
from pytest_kgbench.run.validate import check_questions

REPO = Path(__file__).resolve().parents[2]


# --- what each pack declares here, because pack.yaml has no field for it yet ------------------

class Slant(NamedTuple):
    """neutral.ttl: the concept whose definition it words neutrally, the slanted sentence of
    definitions.ttl and the neutral one neutral.ttl puts in its place (R5 against R7)."""

    concept: str
    slanted: str
    neutral: str


class Floors(NamedTuple):
    """The least axioms.ttl holds of owl:Restriction, and shapes.ttl of sh:NodeShape and
    sh:rule (the larger of the two packs' old floors wherever it holds for both)."""

    restrictions: int
    node_shapes: int
    rules: int


class IdColumn(NamedTuple):
    """A column of identifiers of a scheme with check digits (pack_declared.CHECK_DIGITS);
    `every_row`: no row lacks one."""

    table: str
    column: str
    scheme: str
    every_row: bool = True


@dataclasses.dataclass(frozen=True)
class Declared:
    slant: Slant
    has_key: tuple[str, str]  # axioms.ttl: (class, property) of an owl:hasKey, in the vocab
    transitive: str  # axioms.ttl: a property of the vocab declared owl:TransitiveProperty
    floors: Floors
    ids: tuple[IdColumn, ...]
    facts: DerivedFacts  # what the definitions derive, read twice (pack_declared.py)
    planted: Callable[[Tables], dict[str, tuple[int, int]]]  # trap -> (count in base, least)


DECLARED = {
    "credit": Declared(
        slant=Slant("credit:Outlook",
                    "A negative outlook means that a downgrade is coming within the next year.",
                    "A negative outlook signals that a downgrade is possible within the next "
                    "year."),
        has_key=("LegalEntity", "lei"), transitive="ancestor",
        floors=Floors(restrictions=5, node_shapes=4, rules=6),
        ids=(IdColumn("issuers", "lei", "LEI"), IdColumn("instruments", "isin", "ISIN")),
        facts=FACTS["credit"], planted=credit_planted),
    "research": Declared(
        slant=Slant("research:Work",
                    "A preprint is an early draft that its journal publication later replaces.",
                    "A preprint is a version of a work shared before, or without, a journal "
                    "publication."),
        has_key=("Person", "orcid"), transitive="ancestor",
        floors=Floors(restrictions=5, node_shapes=6, rules=6),
        ids=(IdColumn("authors", "orcid", "ORCID", every_row=False),),
        facts=FACTS["research"], planted=research_planted),
}


# --- the packs ----------------------------------------------------------------------------------

def _in_repository() -> dict[str, Any]:
    """Every pack under datasets/ whose data needs no external folder, by name."""
    found = {}
    for folder in sorted((REPO / "datasets").iterdir()):
        if (folder / "pack.yaml").is_file():
            pack = find_pack(folder.name, REPO / "datasets", REPO / "ontology")
            if pack.unavailable is None:
                found[folder.name] = pack
    return found


SHIPPED = _in_repository()
VARIANTS = [pytest.param(name, v, id=f"{name}-{v}")
            for name, pack in SHIPPED.items() for v in pack.variants]
SCALED = [p for p in VARIANTS if p.values[1] != "base"]
PROSE = {"http://www.w3.org/2000/01/rdf-schema#comment",
         "http://www.w3.org/2000/01/rdf-schema#label",
         "http://www.w3.org/2004/02/skos/core#definition",
         "http://www.w3.org/2004/02/skos/core#scopeNote",
         "http://www.w3.org/2004/02/skos/core#example",
         "http://www.w3.org/ns/shacl#message", "http://www.w3.org/ns/shacl#description",
         "http://www.w3.org/ns/shacl#name", "http://purl.org/dc/terms/description"}
PYTHON_TYPE = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "DECIMAL": float,
               "DATE": dt.date, "TIMESTAMP": dt.datetime, "BOOLEAN": bool}


def _session(request: pytest.FixtureRequest, name: str, make: Callable[[], Any]) -> Any:
    """conftest's session fixture `name` where there is one (nothing is built twice), else
    make() (a pack conftest has no fixtures for)."""
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        return make()


@pytest.fixture(scope="session", params=sorted(SHIPPED))
def pack_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def pack(pack_name: str, request: pytest.FixtureRequest):
    return _session(request, f"{pack_name}_pack", lambda: SHIPPED[pack_name])


@pytest.fixture(scope="session")
def base(pack_name: str, pack, request: pytest.FixtureRequest, kg_cache: Path):
    """The pack's base variant, built at its own seed."""
    return _session(request, f"{pack_name}_base", lambda: build_variant(pack, "base", kg_cache))


@pytest.fixture(scope="session")
def questions(pack_name: str, request: pytest.FixtureRequest):
    from pytest_kgbench.core.questions import load_questions

    return _session(request, f"{pack_name}_questions",
                    lambda: load_questions(REPO / "questions" / f"{pack_name}.yaml"))


@pytest.fixture(scope="session")
def checks(pack_name: str, base, questions, request: pytest.FixtureRequest):
    """validate.check_questions on base (SPARQL on rdflib), by question id."""
    return _session(request, f"{pack_name}_checks", lambda: {
        c.question: c for c in check_questions(list(questions.questions), base)})


@pytest.fixture(scope="session")
def generated(pack):
    """The pack, where a generator draws its data from a seed."""
    if "generator" not in pack.manifest:
        pytest.skip(f"pack {pack.name} has no generator (its data is fixed): no seed to vary")
    return pack


def _variant(request: pytest.FixtureRequest, pack, variant: str, kg_cache: Path):
    return _session(request, f"{pack.name}_{variant}",
                    lambda: build_variant(pack, variant, kg_cache))


def _needs(pack, *artefacts: str) -> None:
    why = pack.lacks(artefacts)
    if why:
        pytest.skip(f"pack {pack.name} {why}")


def _declared(pack) -> Declared:
    if pack.name not in DECLARED:
        pytest.fail(f"pack {pack.name} has the artefact this check reads, but no entry in "
                    "DECLARED (tests/packs/test_pack_contract.py): declare what it needs there")
    return DECLARED[pack.name]


def _runs_on(q, variant: str) -> bool:
    return q.variants is None or variant in q.variants


def _references(pack) -> set[str]:
    """The gold references an answer question carries: SQL, SPARQL and, where the pack has
    executed tables, SQL over them."""
    return {"sql", "sparql"} | ({"executed"} if pack.has("executed") else set())


def _vocab(pack) -> str:
    return pack.rdf["prefixes"][pack.rdf["vocab"]]


def test_every_pack_is_under_the_contract_or_has_conformance_tests_of_its_own() -> None:
    assert {"credit", "research"} <= set(SHIPPED)
    assert set(DECLARED) <= set(SHIPPED), "an entry of DECLARED names no shipped pack"
    for folder in (REPO / "datasets").iterdir():
        if (folder / "pack.yaml").is_file() and folder.name not in SHIPPED:
            own = REPO / "tests" / "packs" / f"test_{folder.name.replace('-', '_')}.py"
            assert own.is_file(), f"pack {folder.name} is neither here nor tested in {own.name}"


# --- the questions ------------------------------------------------------------------------------

def test_every_question_checks_out(checks, questions) -> None:
    """key = gold SQL = gold SPARQL = gold executed; L3 trap (SQL and SPARQL) != key;
    key = hand_key on base; L5 gold refused by the guard."""
    assert set(checks) == {q.id for q in questions.questions if _runs_on(q, "base")}
    assert {qid: c.problems for qid, c in checks.items() if c.problems} == {}


def test_gold_really_ran_every_reference_kind(pack, checks) -> None:
    """Guard against a vacuous pass: gold results were computed, not absent."""
    for qid, c in checks.items():
        if c.key is not None:
            assert set(c.gold) == _references(pack), qid
            assert all("error" not in v and "refused" not in v for v in c.gold.values()), qid


def test_every_answer_question_has_both_gold_languages_and_a_hand_key(pack, questions) -> None:
    references = _references(pack)
    for q in questions.questions:
        if q.gold:
            assert set(q.gold) == references, q.id
        if q.expect == "answer":
            assert set(q.gold) == references, q.id
            assert (q.hand_key is not None) == _runs_on(q, "base") and q.key, q.id
        if q.tier == "L3":
            assert set(q.trap) == {"sql", "sparql"}, q.id
            assert q.why and q.needs, q.id
        if q.tier == "L4":
            assert q.expect == "abstain" and not q.gold, q.id


def test_the_l3_traps_cover_every_trap_family(pack, questions) -> None:
    """Every definition the pack declares evidence for (pack.yaml's `evidence`) is needed by two
    L3 questions at least."""
    concepts = set(pack.manifest.get("evidence") or {})
    if not concepts:
        pytest.skip(f"pack {pack.name} has no evidence (pack.yaml's evidence)")
    needs = Counter(n for q in questions.questions if q.tier == "L3" for n in q.needs)
    assert {c: needs[c] for c in sorted(concepts) if needs[c] < 2} == {}


@pytest.mark.parametrize(("pack_name", "variant"), SCALED, indirect=["pack_name"])
def test_every_question_checks_out_on_the_scaled_variants(pack, questions, variant: str,
                                                          request, kg_cache) -> None:
    built = _variant(request, pack, variant, kg_cache)
    found = check_questions(list(questions.questions), built, engines={"sparql": "oxigraph"})
    assert {c.question for c in found} == {q.id for q in questions.questions
                                           if _runs_on(q, variant)}
    assert {c.question: c.problems for c in found if c.problems} == {}


@pytest.mark.slow
@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(seed=st.integers(min_value=0, max_value=10**6))
def test_every_question_checks_out_at_any_seed(generated, questions, tmp_path_factory,
                                               seed: int) -> None:
    """A property of the design, not of one draw: at ten seeds, every L3 trap misses the key
    (and key = gold SQL = gold SPARQL = gold executed). hand_key holds only at the pack's
    seed."""
    asked = [dataclasses.replace(q, hand_key=None) for q in questions.questions]
    built = build_variant(generated, "base", tmp_path_factory.mktemp("seed"), seed=seed)
    try:
        found = check_questions(asked, built, engines={"sparql": "oxigraph"})
        assert {c.question for c in found} == {q.id for q in asked if _runs_on(q, "base")}
        assert {c.question: c.problems for c in found if c.problems} == {}, f"seed {seed}"
        for c in found:
            if c.tier == "L3":
                assert c.trap and c.gold["sql"] and c.gold["sparql"], c.question
    finally:
        shutil.rmtree(built.dir, ignore_errors=True)


# --- the data -----------------------------------------------------------------------------------

def _digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".csv", ".ttl", ".md")}


def test_the_same_seed_gives_byte_identical_files(generated, tmp_path) -> None:
    a = _digest(build_variant(generated, "base", tmp_path / "a", seed=7).dir)
    b = _digest(build_variant(generated, "base", tmp_path / "b", seed=7).dir)
    c = _digest(build_variant(generated, "base", tmp_path / "c", seed=8).dir)
    assert a == b
    drawn = ({f"csv/{t}.csv" for t in generated.tables} | {"data.ttl"}
             | {f"executed/{t}.csv" for t in generated.executed_tables})
    assert drawn <= set(a)
    assert sorted(f for f in drawn if a[f] == c[f]) == [], "another seed, other data"


def test_identifiers_carry_valid_check_digits(pack, base) -> None:
    for ident in _declared(pack).ids:
        values = [r[ident.column] for r in base.tables[ident.table]]
        if ident.every_row:
            assert None not in values, ident
        present = [v for v in values if v is not None]
        assert present, ident
        assert [v for v in present if not CHECK_DIGITS[ident.scheme](v)] == [], ident


def test_every_trap_family_is_planted_several_times(pack, base) -> None:
    planted = _declared(pack).planted(base.tables)
    assert planted
    assert {trap: (n, least) for trap, (n, least) in planted.items() if n < least} == {}


def test_the_csv_files_read_back_to_the_same_typed_rows(pack, base) -> None:
    again = read_tables(base.csv_dir, pack.tables)
    assert again == base.tables
    if "generator" in pack.manifest:  # and they are the generator's own rows
        assert again == pack.generate(base.variant, base.seed)
    for name, spec in pack.tables.items():
        for column, sql_type in spec.columns:
            kind = PYTHON_TYPE.get(sql_type)
            if kind is not None:
                values = [r[column] for r in again[name] if r[column] is not None]
                assert values and {type(v) for v in values} == {kind}, (name, column, sql_type)


def test_the_rdf_holds_the_same_facts_as_the_tables(pack, base) -> None:
    """Each row is one subject of its table's class, each non-null cell one triple of its
    column's predicate (pack.yaml's rdf mapping)."""
    from rdflib import RDF, URIRef

    from pytest_kgbench.packs.rdf.mapping import column_entry, expand

    mapping = pack.rdf
    if not mapping.get("tables"):
        pytest.skip(f"pack {pack.name} has no table mapping (pack.yaml's rdf.tables)")
    prefixes = mapping["prefixes"]
    subjects: Counter[str] = Counter()
    cells: Counter[str] = Counter()
    for table, spec in mapping["tables"].items():
        rows = base.tables[table]
        subjects[expand(spec["class"], prefixes)] += len(rows)
        for column in pack.tables[table].column_names:
            entry = column_entry(spec.get("columns") or {}, column, mapping.get("vocab"),
                                 f"rdf.tables.{table}")
            if entry is not None:
                cells[expand(entry["predicate"], prefixes)] += sum(
                    r[column] is not None for r in rows)
    g = base.graph
    assert {c: len(set(g.subjects(RDF.type, URIRef(c)))) for c in subjects} == dict(subjects)
    assert {p: len(set(g.subject_objects(URIRef(p)))) for p in cells} == dict(cells)


# --- the ladder ---------------------------------------------------------------------------------

def test_markdown_is_rendered_from_the_turtle(pack, base, questions) -> None:
    """definitions.ttl defines every concept the questions need, every one with evidence and
    (for a pack with personal data) PersonalData; the Markdown carries each."""
    from conftest import unrendered
    from pytest_kgbench.packs.rdf.ontology import concepts

    _needs(pack, "definitions.ttl")
    found = {c["curie"] for c in concepts(pack.definitions_ttl.read_text(encoding="utf-8"))}
    wanted = set(pack.manifest.get("evidence") or {}) | {
        n for q in questions.questions for n in q.needs}
    if pack.personal:
        wanted.add(f"{pack.name}:PersonalData")
    assert sorted(wanted - found) == []
    assert unrendered(base) == []


def test_the_decoy_is_as_long_as_the_definitions_and_defines_none_they_need(
        pack, base, questions) -> None:
    from conftest import decoy_checks

    _needs(pack, "decoy.md", "definitions.ttl")
    ratio, labels, decoy = decoy_checks(pack.ontology_dir, base, questions)
    needed = {n for q in questions.questions for n in q.needs}
    assert 0.9 <= ratio <= 1.1
    assert labels and len(labels) == len(needed) >= len(pack.manifest.get("evidence") or {})
    for label in labels:
        assert not re.search(rf"\b{re.escape(label)}\b", decoy, re.IGNORECASE), label
    assert len(re.findall(r"^## ", decoy, re.M)) >= 10, "a glossary, not one long paragraph"


def test_the_neutral_ontology_differs_in_the_one_slanted_sentence(pack, questions) -> None:
    """R5 and R7 differ in exactly one sentence of one definition, the slanted wording against
    a neutral one. Every other line, concept and sentence of the two files is the same."""
    from pytest_kgbench.packs.rdf.ontology import concepts

    _needs(pack, "neutral.ttl", "definitions.ttl")
    slant = _declared(pack).slant
    slanted = pack.definitions_ttl.read_text(encoding="utf-8")
    neutral = pack.ontology_file("neutral.ttl").read_text(encoding="utf-8")
    changed = [(a, b) for a, b in zip(slanted.splitlines(), neutral.splitlines()) if a != b]
    assert len(slanted.splitlines()) == len(neutral.splitlines()) and len(changed) == 1

    def sentences(line: str) -> list[str]:
        return re.split(r"(?<=\.) ", line)

    before, after = changed[0]
    diff = [d for d in difflib.ndiff(sentences(before), sentences(after)) if d[0] in "+-"]
    end = diff[0].removeprefix(f"- {slant.slanted}") if diff else None
    assert end in ("", '" .', '" ;'), diff  # the sentence may close the Turtle literal
    assert diff == [f"- {slant.slanted}{end}", f"+ {slant.neutral}{end}"]
    # as the prompts read them: the same concepts, and only the slanted one's definition differs
    a = {c["curie"]: c for c in concepts(slanted)}
    b = {c["curie"]: c for c in concepts(neutral)}
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == [slant.concept]
    assert a[slant.concept]["definition"].replace(slant.slanted, slant.neutral) == \
        b[slant.concept]["definition"]
    assert any(slant.concept in q.needs for q in questions.questions), "questions to bite on"


def test_r5_and_r7_prompts_differ_in_the_slanted_sentence_only(pack, base, questions) -> None:
    from pytest_kgbench.asking.prompts import build_prompt
    from pytest_kgbench.core import conditions

    _needs(pack, "neutral.ttl")
    slant = _declared(pack).slant
    q = next(q for q in questions.questions if slant.concept in q.needs)
    r5, r7 = (build_prompt(conditions.BY_ID[c], base, q).context for c in ("R5", "R7"))
    assert slant.slanted in r5 and slant.slanted not in r7
    assert slant.neutral in r7 and slant.neutral not in r5
    assert r5.replace(slant.slanted, slant.neutral) == r7


@pytest.mark.parametrize("name", ["axioms.ttl", "shapes.ttl"])
def test_axioms_and_rules_carry_no_prose(pack, name: str) -> None:
    import rdflib

    _needs(pack, name)
    text = pack.ontology_file(name).read_text(encoding="utf-8")
    graph = rdflib.Graph().parse(data=text, format="turtle")
    assert not {str(p) for p in graph.predicates()} & PROSE
    assert not re.search(r"^\s*#", text, re.M), "a Turtle comment is prose too"


def test_the_axioms_are_owl(pack) -> None:
    import rdflib
    from rdflib.collection import Collection
    from rdflib.namespace import OWL

    _needs(pack, "axioms.ttl")
    declared, vocab = _declared(pack), _vocab(pack)
    axioms = rdflib.Graph().parse(pack.ontology_file("axioms.ttl"))
    cls, prop = declared.has_key
    keys = [list(Collection(axioms, k))
            for k in axioms.objects(rdflib.URIRef(vocab + cls), OWL.hasKey)]
    assert [rdflib.URIRef(vocab + prop)] in keys, f"{cls} is keyed by {prop}"
    assert len(list(axioms.subjects(rdflib.RDF.type, OWL.Restriction))) >= \
        declared.floors.restrictions
    assert (rdflib.URIRef(vocab + declared.transitive), rdflib.RDF.type,
            OWL.TransitiveProperty) in axioms


def test_the_rules_are_shacl_af(pack) -> None:
    import rdflib
    from rdflib.namespace import SH

    _needs(pack, "shapes.ttl")
    floors = _declared(pack).floors
    shapes = rdflib.Graph().parse(pack.ontology_file("shapes.ttl"))
    assert len(list(shapes.subjects(rdflib.RDF.type, SH.NodeShape))) >= floors.node_shapes
    rules = list(shapes.objects(None, SH.rule))
    assert len(rules) >= floors.rules
    for rule in rules:
        assert (rule, rdflib.RDF.type, SH.SPARQLRule) in shapes
        assert shapes.value(rule, SH.order) is not None
        construct = str(shapes.value(rule, SH.construct))
        assert "$this" not in construct, "a rule runs once over the graph, not once per node"
    # every rule hangs off one node shape that targets a single node: each runs once per graph
    holders = set(shapes.subjects(SH.rule, None))
    assert len(holders) == 1
    assert len(list(shapes.objects(holders.pop(), SH.targetNode))) == 1


@pytest.mark.parametrize(("pack_name", "variant"), VARIANTS, indirect=["pack_name"])
def test_executed_tables_and_shacl_rules_derive_the_same_facts(pack, variant: str, request,
                                                               kg_cache) -> None:
    """Two executions of the definitions — code upstream (R10/D3) and SHACL rules in the graph
    (D6) — must hold the same derived facts, on every variant. A disagreement means one
    definition is wrong."""
    _needs(pack, "executed", "shapes.ttl")
    facts = _declared(pack).facts
    built = _variant(request, pack, variant, kg_cache)
    from_tables = facts.from_tables(built.executed)
    from_graph = facts.from_graph(built.load_graph(facts.store, derived=True))
    for fact, expected in from_tables.items():
        assert expected, f"{variant}: no {fact} derived at all"
        got = from_graph[fact]
        assert got == expected, (variant, fact, sorted(expected - got)[:5],
                                 sorted(got - expected)[:5])
    assert {"executed", "shacl_rules"} <= set(built.manifest["build_seconds"])


def test_the_graph_after_the_rules_conforms_to_the_shapes(pack, base) -> None:
    import rdflib
    from pyshacl import validate

    _needs(pack, "shapes.ttl")
    shapes = rdflib.Graph().parse(pack.ontology_file("shapes.ttl"))
    conforms, _, text = validate(base.derived_graph, shacl_graph=shapes)
    assert conforms, text[:2000]
