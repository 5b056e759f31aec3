"""The full ladder on research: the decoy, the neutral wording (R5 and R7 differ in one slanted
sentence), axioms and rules without prose, the executed tables and the SHACL-derived graph agreeing
on every variant, the derived graph conforming to the shapes, and each condition's prompt reading
as it should."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_kgbench.asking.cases import pack_conditions
from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core import conditions
from pytest_kgbench.packs.build import build_variant

REPO = Path(__file__).resolve().parents[1]
ONTOLOGY = REPO / "ontology" / "research"
RS = "https://kgbench.example/research/def#"
PROSE = {"http://www.w3.org/2000/01/rdf-schema#comment",
         "http://www.w3.org/2000/01/rdf-schema#label",
         "http://www.w3.org/2004/02/skos/core#definition",
         "http://www.w3.org/2004/02/skos/core#scopeNote",
         "http://www.w3.org/2004/02/skos/core#example",
         "http://www.w3.org/ns/shacl#message", "http://www.w3.org/ns/shacl#description",
         "http://www.w3.org/ns/shacl#name", "http://purl.org/dc/terms/description"}











def test_research_gets_every_condition_of_the_ladder(research_pack) -> None:
    got = [c.id for c in pack_conditions(research_pack, conditions.LADDER)]
    assert got == [c.id for c in conditions.LADDER]


SLANTED = "A preprint is an early draft that its journal publication later replaces."
NEUTRAL = "A preprint is a version of a work shared before, or without, a journal publication."


def test_the_neutral_ontology_differs_in_the_one_slanted_sentence(research_questions) -> None:
    """R5 and R7 differ in exactly one sentence of one definition: the slanted wording of what a
    preprint is (which invites dropping every preprint from the output) against a neutral one.
    Every other line, concept and sentence of the two files is the same."""
    import difflib

    from pytest_kgbench.packs.rdf.ontology import concepts

    slanted = (ONTOLOGY / "definitions.ttl").read_text(encoding="utf-8")
    neutral = (ONTOLOGY / "neutral.ttl").read_text(encoding="utf-8")
    lines = list(zip(slanted.splitlines(), neutral.splitlines()))
    changed = [(a, b) for a, b in lines if a != b]
    assert len(slanted.splitlines()) == len(neutral.splitlines()) and len(changed) == 1

    def sentences(line: str) -> list[str]:
        return re.split(r"(?<=\.) ", line)

    before, after = changed[0]
    diff = [d for d in difflib.ndiff(sentences(before), sentences(after)) if d[0] in "+-"]
    assert diff == [f"- {SLANTED}", f"+ {NEUTRAL}"]
    # as the prompts read them: the same concepts, and only the Work definition differs
    a = {c["curie"]: c for c in concepts(slanted)}
    b = {c["curie"]: c for c in concepts(neutral)}
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == ["research:Work"]
    assert a["research:Work"]["definition"].replace(SLANTED, NEUTRAL) == \
        b["research:Work"]["definition"]
    # the contrast has questions to bite on: the standalone preprints the slant invites dropping
    family = [q for q in research_questions.questions
              if q.family == "standalone-preprint-dropped"]
    assert len(family) >= 3 and all("R7" in (q.why or "") for q in family)


def test_r5_and_r7_prompts_differ_in_the_slanted_sentence_only(research_base,
                                                               research_questions) -> None:
    q = next(q for q in research_questions.questions if q.id == "research-Q69")
    r5, r7 = _prompt(research_base, "R5", q), _prompt(research_base, "R7", q)
    assert SLANTED in r5 and SLANTED not in r7 and NEUTRAL in r7 and NEUTRAL not in r5
    assert r5.replace(SLANTED, NEUTRAL) == r7


def test_the_decoy_is_as_long_as_the_definitions_and_defines_none_they_need(
        research_base, research_questions) -> None:
    from conftest import decoy_checks

    ratio, labels, decoy = decoy_checks(ONTOLOGY, research_base, research_questions)
    assert 0.9 <= ratio <= 1.1
    assert len(labels) >= 7
    for label in labels:
        assert not re.search(rf"\b{re.escape(label)}\b", decoy, re.IGNORECASE), label
    assert len(re.findall(r"^## ", decoy, re.M)) >= 10, "a glossary, not one long paragraph"


@pytest.mark.parametrize("name", ["axioms.ttl", "shapes.ttl"])
def test_axioms_and_rules_carry_no_prose(name: str) -> None:
    import rdflib

    text = (ONTOLOGY / name).read_text(encoding="utf-8")
    graph = rdflib.Graph().parse(data=text, format="turtle")
    assert not {str(p) for p in graph.predicates()} & PROSE
    assert not re.search(r"^\s*#", text, re.M), "a Turtle comment is prose too"


def test_the_axioms_are_owl_and_the_rules_are_shacl_af() -> None:
    import rdflib
    from rdflib.collection import Collection
    from rdflib.namespace import OWL, SH

    axioms = rdflib.Graph().parse(ONTOLOGY / "axioms.ttl")
    person = rdflib.URIRef(RS + "Person")
    keys = [list(Collection(axioms, k)) for k in axioms.objects(person, OWL.hasKey)]
    assert [rdflib.URIRef(RS + "orcid")] in keys, "a person is keyed by ORCID"
    assert len(list(axioms.subjects(rdflib.RDF.type, OWL.Restriction))) >= 5
    assert (rdflib.URIRef(RS + "ancestor"), rdflib.RDF.type, OWL.TransitiveProperty) in axioms
    shapes = rdflib.Graph().parse(ONTOLOGY / "shapes.ttl")
    assert len(list(shapes.subjects(rdflib.RDF.type, SH.NodeShape))) >= 6
    rules = list(shapes.objects(None, SH.rule))
    assert len(rules) >= 6
    for rule in rules:
        assert (rule, rdflib.RDF.type, SH.SPARQLRule) in shapes
        assert shapes.value(rule, SH.order) is not None
        construct = str(shapes.value(rule, SH.construct))
        assert "$this" not in construct, "a rule runs once over the graph, not once per node"
    # every rule hangs off one node shape that targets a single node: each runs once per graph
    holders = set(shapes.subjects(SH.rule, None))
    assert len(holders) == 1
    assert len(list(shapes.objects(holders.pop(), SH.targetNode))) == 1


# --- two executions of the definitions ----------------------------------------------------------

def _facts_from_tables(ex: dict) -> dict[str, set]:
    return {
        "persons": {(r["person_id"], r["orcid"]) for r in ex["persons"]},
        "records": {(r["author_id"], r["person_id"]) for r in ex["author_records"]},
        "versions": {(r["record_id"], r["work_id"]) for r in ex["work_records"]},
        "works": {r["work_id"] for r in ex["works"]},
        "counted": {r["work_id"] for r in ex["works"] if r["counted"]},
        "ancestors": {(r["institution_id"], r["ancestor_id"]) for r in ex["institution_ancestors"]
                      if r["depth"] > 0},
        "work_persons": {(r["work_id"], r["person_id"], round(r["share"], 6))
                         for r in ex["work_persons"]},
        "credited": {(r["work_id"], r["person_id"], r["institution_id"], round(r["credit"], 6))
                     for r in ex["credited_authorships"]},
        "counting_citations": {(r["citing_work_id"], r["cited_work_id"])
                               for r in ex["counting_citations"]},
    }


def _facts_from_graph(graph) -> dict[str, set]:
    def rows(query: str) -> set:
        return {tuple(None if v is None else v.toPython() for v in row)
                for row in graph.query(f"PREFIX rs: <{RS}> {query}")}

    shares = rows("""SELECT ?w ?p ?n WHERE {
        ?work rs:byPerson ?person ; rs:personCount ?n ; rs:workId ?w . ?person rs:personId ?p }""")
    credited = rows("""SELECT ?w ?p ?i ?credit WHERE {
        ?c a rs:CreditedAuthorship ; rs:credit ?credit ; rs:creditWork/rs:workId ?w ;
           rs:creditPerson/rs:personId ?p ; rs:creditInstitution/rs:institutionId ?i }""")
    return {
        "persons": rows("SELECT ?id ?o WHERE { ?p a rs:Person ; rs:personId ?id "
                        "OPTIONAL { ?p rs:orcid ?o } }"),
        "records": rows("SELECT ?a ?p WHERE { ?r rs:person ?x ; rs:authorId ?a . "
                        "?x rs:personId ?p }"),
        "versions": rows("SELECT ?r ?w WHERE { ?x rs:versionOf ?y . ?x rs:workId ?r . "
                         "?y rs:workId ?w }"),
        "works": {r[0] for r in rows("SELECT ?w WHERE { ?x a rs:MergedWork ; rs:workId ?w }")},
        "counted": {r[0] for r in rows("SELECT ?w WHERE { ?x a rs:CountedWork ; rs:workId ?w }")},
        "ancestors": rows("SELECT ?i ?a WHERE { ?x rs:ancestor ?y . ?x rs:institutionId ?i . "
                          "?y rs:institutionId ?a }"),
        "work_persons": {(w, p, round(1 / n, 6)) for w, p, n in shares},
        "credited": {(w, p, i, round(float(c), 6)) for w, p, i, c in credited},
        "counting_citations": rows("SELECT ?a ?b WHERE { ?x rs:countedCitation ?y . "
                                   "?x rs:workId ?a . ?y rs:workId ?b }"),
    }


def test_executed_tables_and_shacl_rules_derive_the_same_facts(research_pack, kg_cache) -> None:
    """Two executions of the definitions — code upstream (R10/D3) and SHACL rules in the graph
    (D6) — must hold the same derived facts, on every research variant. A disagreement means one
    definition is wrong."""
    for variant in research_pack.variants:
        built = build_variant(research_pack, variant, kg_cache)
        from_tables = _facts_from_tables(built.executed)
        from_graph = _facts_from_graph(built.load_graph("Oxigraph", derived=True))
        for fact, expected in from_tables.items():
            assert expected, f"{variant}: no {fact} derived at all"
            got = from_graph[fact]
            assert got == expected, (variant, fact, sorted(expected - got)[:5],
                                     sorted(got - expected)[:5])
        # what the definitions do, so that agreement is not agreement on nothing
        facts = from_tables
        assert len(facts["persons"]) < len(built.tables["authors"])
        assert len(facts["works"]) < len(built.tables["works"])
        assert len(facts["counted"]) < len(facts["works"])
        assert len(facts["counting_citations"]) < len(built.tables["citations"])
        assert any(share < 1 for _, _, share in facts["work_persons"])
        assert {"executed", "shacl_rules"} <= set(built.manifest["build_seconds"])


def test_the_credit_of_a_work_adds_up_to_one(research_base) -> None:
    """Fractional counting splits each work's 1 among its persons; the top institutions of each
    person's listings receive all of that person's share."""
    from collections import defaultdict

    ex = research_base.executed
    shares: dict[str, float] = defaultdict(float)
    for r in ex["work_persons"]:
        shares[r["work_id"]] += r["share"]
    assert all(abs(s - 1) < 1e-5 for s in shares.values())
    tops = {r["institution_id"] for r in ex["institutions"] if not r["parent_id"]}
    per_work: dict[str, float] = defaultdict(float)
    for r in ex["credited_authorships"]:
        if r["institution_id"] in tops:
            per_work[r["work_id"]] += r["credit"]
    assert set(per_work) == set(shares)
    assert all(abs(v - 1) < 1e-5 for v in per_work.values())


def test_the_graph_after_the_rules_conforms_to_the_shapes(research_base) -> None:
    import rdflib
    from pyshacl import validate

    shapes = rdflib.Graph().parse(ONTOLOGY / "shapes.ttl")
    conforms, _, text = validate(research_base.derived_graph, shacl_graph=shapes)
    assert conforms, text[:2000]
    # the shapes have teeth: the raw graph, before the rules, lacks what they require
    conforms, _, _ = validate(research_base.graph, shacl_graph=shapes)
    assert not conforms


def test_the_rules_derive_nothing_from_personal_data(research_base) -> None:
    derived = research_base.derived_nt.read_text(encoding="utf-8")
    assert derived and "#email>" not in derived and "@" not in derived


# --- the prompts --------------------------------------------------------------------------------

def _prompt(built, cid: str, question):
    return build_prompt(conditions.BY_ID[cid], built, question).context


def test_prompts_of_r3_r8_r9_r10_read_as_a_person_expects(research_base,
                                                          research_questions) -> None:
    q = next(q for q in research_questions.questions if q.id == "research-Q21")
    r3, r4, r8, r9, r10 = (_prompt(research_base, c, q) for c in ("R3", "R4", "R8", "R9", "R10"))
    definition = "Author records that share an ORCID are one person"
    assert definition in r4 and definition not in r3
    assert "Scholarly publishing: what the terms mean" in r3 and "pub:ImpactFactor" in r3
    assert "owl:hasKey" in r8 and "sh:rule" in r8 and "sh:SPARQLRule" in r8
    assert definition not in r8 and "skos:definition" not in r8 and "rdfs:comment" not in r8
    assert "owl:hasKey" in r9 and definition in r9
    for table in ("persons", "works", "institution_ancestors", "work_persons",
                  "credited_authorships", "counting_citations"):
        assert f"### {table}.csv" in r10, table
    assert "Definitions" not in r10 and "### citations.csv" not in r10
    assert "### authors.csv" not in r10


def test_r10_and_d3_withhold_the_emails_from_an_analyst(research_base,
                                                        research_questions) -> None:
    from pytest_kgbench.engines.sql import SqlExecutor
    from pytest_kgbench.engines.stores import guard_for

    q = next(q for q in research_questions.questions if q.id == "research-Q39")
    r10 = _prompt(research_base, "R10", q)
    assert "### author_emails.csv" in r10 and "withheld: email" in r10
    assert "mira.castellan@aldermoor.example" not in r10 and "@" not in r10
    ex = SqlExecutor.open(research_base.executed_duckdb_path, research_base.pack.executed_tables,
                          guard_for(research_base, "analyst"), 30.0)
    try:
        assert ex.run(q.gold["executed"]).refused
    finally:
        ex.close()


def test_per_id_namespaces_are_those_of_one_id_or_a_handful() -> None:
    from pytest_kgbench.packs.rdf.mapping import per_id_namespaces

    mapping = {"prefixes": {"ex": "https://x.example/def#", "exi": "https://x.example/id/",
                            "own": "https://x.example/id/pair/W1/"}}
    spaces = ["https://x.example/id/work/", "https://x.example/id/email/",
              "https://x.example/id/pair/W1/", "https://x.example/id/pair/W2/",
              "https://x.example/id/pair/W3/", "https://x.example/id/cite/W1/",
              "https://x.example/id/cite/W2/A7/", "https://x.example/id/deep/W1/A1/",
              "https://other.example/pair/W1/", "https://other.example/pair/W2/"]
    # the class-level ones (work, email) stay; a declared one (own) is never hidden; a lone
    # nested one (deep) has no sibling; outside every declared base nothing is ours to hide
    assert per_id_namespaces(spaces, mapping) == {
        "https://x.example/id/pair/W2/", "https://x.example/id/pair/W3/",
        "https://x.example/id/cite/W1/", "https://x.example/id/cite/W2/A7/"}


def test_the_graph_store_describes_its_classes_not_one_prefix_per_authorship(
        research_base) -> None:
    from pytest_kgbench.asking.tools import call_tool
    from pytest_kgbench.engines.sparql import STORES
    from pytest_kgbench.engines.stores import guard_for

    ex = STORES[0].open(research_base, "raw", guard_for(research_base, "analyst"))
    try:
        shown = ex.prefixes()
        assert {"rs", "rsi", "work", "author", "institution", "authorship",
                "citation"} <= set(shown)
        # one prefix per class namespace (issue 30, item 16), none per authorship
        assert [ns for ns in shown.values() if "/authorship/" in ns or "/citation/" in ns] == [
            "https://kgbench.example/research/id/authorship/",
            "https://kgbench.example/research/id/citation/"]
        block = ex.store_block()
        assert block.count("PREFIX") == len(shown) < 20
        listed, _ = call_tool(ex, "list_tables", {})
        assert listed.count("PREFIX") == len(shown)
        bound = ex.info["namespaces"]
        assert sum("/authorship/" in ns for ns in bound.values()) == 1
        ttl = research_base.files().data.read_text(encoding="utf-8")
        assert ttl.count("/authorship/") == 1 and ttl.count("\nauthorship:W") > 100
        one = next(ns for ns in bound.values() if "/authorship/" in ns)
        result = ex.run(f"SELECT ?s WHERE {{ ?s ?p ?o FILTER(STRSTARTS(STR(?s), \"{one}\")) }}")
        assert not result.error and result.rows
    finally:
        ex.close()
