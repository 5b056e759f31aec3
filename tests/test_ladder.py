"""The full ladder on credit: the decoy, the neutral wording, axioms without prose, the executed
tables and the SHACL-derived graph agreeing, and each condition's prompt reading as it should."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core import conditions
from pytest_kgbench.packs.build import build_variant

REPO = Path(__file__).resolve().parents[1]
ONTOLOGY = REPO / "ontology" / "credit"
CR = "https://kgbench.example/credit/def#"


def test_the_decoy_is_as_long_as_the_definitions_and_defines_none_they_need(
        credit_base, credit_questions) -> None:
    from conftest import decoy_checks

    ratio, labels, decoy = decoy_checks(ONTOLOGY, credit_base, credit_questions)
    assert 0.9 <= ratio <= 1.1
    assert len(labels) >= 10
    for label in labels:
        assert not re.search(rf"\b{re.escape(label)}\b", decoy, re.IGNORECASE), label


def test_the_neutral_ontology_differs_in_one_sentence_only(credit_questions) -> None:
    slanted = (ONTOLOGY / "definitions.ttl").read_text(encoding="utf-8").splitlines()
    neutral = (ONTOLOGY / "neutral.ttl").read_text(encoding="utf-8").splitlines()
    changed = [(a, b) for a, b in zip(slanted, neutral) if a != b]
    assert len(slanted) == len(neutral) and len(changed) == 1
    before, after = changed[0]
    sentences = lambda s: re.split(r"(?<=\.) ", s)  # noqa: E731
    diff = [d for d in difflib.ndiff(sentences(before), sentences(after)) if d[0] in "+-"]
    assert len(diff) == 2, diff
    assert "means that a downgrade is coming" in diff[0]
    assert "signals that a downgrade is possible" in diff[1]
    assert any("credit:Outlook" in q.needs for q in credit_questions.questions)


@pytest.mark.parametrize("name", ["axioms.ttl", "shapes.ttl"])
def test_axioms_and_rules_carry_no_prose(name: str) -> None:
    import rdflib

    text = (ONTOLOGY / name).read_text(encoding="utf-8")
    graph = rdflib.Graph().parse(data=text, format="turtle")
    prose = {"http://www.w3.org/2000/01/rdf-schema#comment",
             "http://www.w3.org/2000/01/rdf-schema#label",
             "http://www.w3.org/2004/02/skos/core#definition",
             "http://www.w3.org/2004/02/skos/core#scopeNote",
             "http://www.w3.org/ns/shacl#message", "http://www.w3.org/ns/shacl#description",
             "http://purl.org/dc/terms/description"}
    assert not {str(p) for p in graph.predicates()} & prose
    assert not re.search(r"^\s*#", text, re.M), "a Turtle comment is prose too"


def test_the_axioms_are_owl_and_the_rules_are_shacl_af() -> None:
    import rdflib
    from rdflib.namespace import OWL, SH

    axioms = rdflib.Graph().parse(ONTOLOGY / "axioms.ttl")
    assert (rdflib.URIRef(CR + "LegalEntity"), OWL.hasKey, None) in axioms
    assert len(list(axioms.subjects(rdflib.RDF.type, OWL.Restriction))) >= 5
    shapes = rdflib.Graph().parse(ONTOLOGY / "shapes.ttl")
    assert len(list(shapes.objects(None, SH.rule))) >= 5
    assert len(list(shapes.subjects(rdflib.RDF.type, SH.NodeShape))) >= 4


def _facts_from_tables(ex: dict) -> dict[str, set]:
    return {
        "entities": {r["lei"] for r in ex["issuers"]},
        "records": {(r["issuer_id"], r["lei"]) for r in ex["issuer_records"]},
        "ancestors": {(r["lei"], r["ancestor_lei"]) for r in ex["control_chains"]},
        "controlled_by": {(r["lei"], r["ancestor_lei"]) for r in ex["control_chains"]
                          if r["depth"] == 1},
        "ultimate": {(r["lei"], r["ultimate_parent_lei"]) for r in ex["groups"]},
        "ceilings": {(r["country_code"], r["ceiling"]) for r in ex["countries"]},
        "periods": {(r["entity_type"], r["entity_id"], str(r["valid_from"]),
                     str(r["valid_to"]) if r["valid_to"] else None, r["rating_rank"],
                     r["investment_grade"], r["effective_rating"]) for r in ex["rating_periods"]},
    }


def _facts_from_graph(graph) -> dict[str, set]:
    def rows(query: str) -> set:
        return {tuple(None if v is None else v.toPython() if hasattr(v, "toPython") else str(v)
                      for v in row) for row in graph.query(f"PREFIX cr: <{CR}> {query}")}

    def pairs(prop: str) -> set:
        return rows(f"SELECT ?a ?b WHERE {{ ?x cr:{prop} ?y . ?x cr:lei ?a . ?y cr:lei ?b . "
                    f"?x a cr:LegalEntity . ?y a cr:LegalEntity }}")

    periods = rows("""SELECT ?type ?id ?from ?to ?rank ?ig ?eff WHERE {
        ?a cr:periodOf ?x ; cr:validFrom ?from ; cr:entityType ?type .
        OPTIONAL { ?a cr:validTo ?to } OPTIONAL { ?a cr:ratingRank ?rank }
        OPTIONAL { ?a cr:investmentGrade ?ig } OPTIONAL { ?a cr:effectiveRating ?eff }
        { ?x a cr:LegalEntity ; cr:lei ?id } UNION { ?x cr:isin ?id } }""")
    return {
        "entities": {r[0] for r in rows("SELECT ?l WHERE { ?e a cr:LegalEntity ; cr:lei ?l }")},
        "records": rows("SELECT ?id ?l WHERE { ?r cr:entity ?e ; cr:issuerId ?id . ?e cr:lei ?l }"),
        "ancestors": pairs("ancestor"),
        "controlled_by": pairs("controlledBy"),
        "ultimate": pairs("ultimateParent"),
        "ceilings": rows("SELECT ?c ?ceiling WHERE { ?x cr:countryCode ?c ; cr:ceiling ?ceiling }"),
        "periods": {(t, i, str(f), str(to) if to else None, rank, ig, eff)
                    for t, i, f, to, rank, ig, eff in periods},
    }


def test_executed_tables_and_shacl_rules_derive_the_same_facts(credit_pack, kg_cache) -> None:
    """Two executions of the definitions — code upstream (R10/D3) and SHACL rules in the graph
    (D6) — must hold the same derived facts, on every credit variant. A disagreement means one
    definition is wrong."""
    for variant in credit_pack.variants:
        built = build_variant(credit_pack, variant, kg_cache)
        from_tables = _facts_from_tables(built.executed)
        from_graph = _facts_from_graph(built.derived_graph)
        for fact, expected in from_tables.items():
            assert expected, f"{variant}: no {fact} derived at all"
            got = from_graph[fact]
            assert got == expected, (variant, fact, sorted(expected - got)[:5],
                                     sorted(got - expected)[:5])


def test_the_graph_after_the_rules_conforms_to_the_shapes(credit_base) -> None:
    import rdflib
    from pyshacl import validate

    shapes = rdflib.Graph().parse(ONTOLOGY / "shapes.ttl")
    conforms, _, text = validate(credit_base.derived_graph, shacl_graph=shapes)
    assert conforms, text[:2000]


def _prompt(built, cid: str, question):
    cond = conditions.BY_ID[cid]
    return build_prompt(cond, built, question).context


def test_prompts_of_r5_r7_r8_r9_r10_read_as_a_person_expects(credit_base, credit_questions) -> None:
    q = next(q for q in credit_questions.questions if q.id == "credit-Q32")
    r5, r7, r8, r9, r10 = (_prompt(credit_base, c, q) for c in ("R5", "R7", "R8", "R9", "R10"))
    definition = "Issuer records that share an LEI are one issuer"
    assert "means that a downgrade is coming" in r5 and "signals that a downgrade" not in r5
    assert "signals that a downgrade is possible" in r7 and "downgrade is coming" not in r7
    assert r5.replace("means that a downgrade is coming", "signals that a downgrade is possible") \
        == r7
    assert "owl:hasKey" in r8 and "sh:rule" in r8 and definition not in r8
    assert "skos:definition" not in r8 and "rdfs:comment" not in r8
    assert "owl:hasKey" in r9 and definition in r9
    assert "### rating_periods.csv" in r10 and "### control_chains.csv" in r10
    assert "Definitions" not in r10 and "### rating_actions.csv" not in r10
    assert "sandbox" not in r10


def test_r7_is_collected_only_for_a_pack_with_a_neutral_ontology(project, pytester) -> None:
    p = project()
    toy_data = p.path / "datasets" / "toy" / "data"
    toy_data.mkdir(parents=True)
    (toy_data / "things.csv").write_text("id,size\na,1\nb,3\n")
    (p.path / "datasets" / "toy" / "pack.yaml").write_text(
        "name: toy\ntables:\n  things:\n    columns: {id: VARCHAR, size: INTEGER}\n"
        "rdf:\n  vocab: t\n  prefixes: {t: 'https://toy.example/def#', ti: 'https://toy.example/id/'}\n"
        "  tables:\n    things: {class: t:Thing, subject: 'ti:{id}'}\n")
    (p.path / "datasets" / "credit").symlink_to(REPO / "datasets" / "credit")
    (p.path / "ontology" / "toy").mkdir(parents=True)
    (p.path / "ontology" / "credit").symlink_to(ONTOLOGY)
    (p.path / "ontology" / "toy" / "definitions.ttl").write_text(
        "@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n"
        "<https://toy.example/Size> a skos:Concept ; skos:prefLabel 'Size' ; "
        "skos:definition 'How big a thing is.' .\n")
    (p.path / "questions" / "toy.yaml").write_text(
        "- id: toy-Q01\n  tier: L2\n  text: What is the total size?\n"
        "  answer: {total: {kind: integer}}\n  hand_key: {total: 4}\n"
        "  gold:\n    sql: SELECT sum(size) AS total FROM things\n"
        "    sparql: \"PREFIX t: <https://toy.example/def#> "
        "SELECT (SUM(?s) AS ?total) WHERE { ?x t:size ?s }\"\n")
    p.makeini("[pytest]\n"
              f"kgbench_cache = {p.path / '.cache'}\n")
    out = p.runpytest("questions", "--collect-only", "-q", "--condition", "all").stdout.str()
    ids = [line for line in out.splitlines() if "::" in line]
    r7 = [i for i in ids if "[R7-" in i]
    assert r7 and all("credit.yaml" in i for i in r7)
    toy = {i.split("[")[1].split("-")[0] for i in ids if "toy.yaml" in i}
    assert toy == {"R1", "R2", "R4", "R5", "R6", "D1", "D2", "D4", "D5"}
    result = p.runpytest("questions/toy.yaml", "--agent", "gold", "--condition", "all")
    result.assert_outcomes(passed=9)
