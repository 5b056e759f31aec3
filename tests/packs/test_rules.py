"""The SHACL rules run directly on pyoxigraph (ontology.direct_rules) derive exactly what pyshacl
derives, the reference; a rule set direct execution cannot mirror runs through pyshacl."""

from __future__ import annotations

from pathlib import Path

import pytest
import rdflib

from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.rdf.ontology import rule_plan, run_rules, to_sorted_ntriples

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pack,variant", [("credit", "base"), ("credit", "chains"),
                                          ("research", "base")])
def test_direct_rules_derive_what_pyshacl_derives(pack, variant, kg_cache, request) -> None:
    source = request.getfixturevalue(f"{pack}_pack")
    built = build_variant(source, variant, kg_cache)
    shapes = (REPO / "ontology" / pack / "shapes.ttl").read_text(encoding="utf-8")
    assert rule_plan(shapes), "the shipped rules run directly"
    direct = run_rules(built.graph, shapes)
    reference = run_rules(built.graph, shapes, store="Oxigraph")
    assert len(direct) > 0
    assert to_sorted_ntriples(direct) == to_sorted_ntriples(reference)


SHAPES = """
@prefix ex: <http://example.org/> .
@prefix sh: <http://www.w3.org/ns/shacl#> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
ex:p sh:declare [ sh:prefix "ex" ; sh:namespace "http://example.org/"^^xsd:anyURI ] .
ex:S a sh:NodeShape ; sh:targetNode ex:p ;
  sh:rule [ a sh:SPARQLRule ; sh:order 2 ; sh:prefixes ex:p ;
            sh:construct "CONSTRUCT { ?x ex:grand ?z } WHERE { ?x ex:parentOf ?y . ?y ex:parentOf ?z }" ] ;
  sh:rule [ a sh:SPARQLRule ; sh:order 1 ; sh:prefixes ex:p ;
            sh:construct "CONSTRUCT { ?y ex:parentOf ?x } WHERE { ?x ex:childOf ?y }" ] .
"""
DATA = """
@prefix ex: <http://example.org/> .
ex:b ex:childOf ex:a . ex:c ex:childOf ex:b . ex:a ex:name "A" .
"""


def _graph(text: str) -> rdflib.Graph:
    return rdflib.Graph().parse(data=text, format="turtle")


def test_rules_run_in_their_order_each_seeing_the_last() -> None:
    derived = run_rules(_graph(DATA), SHAPES)
    ex = rdflib.Namespace("http://example.org/")
    assert (ex.a, ex.grand, ex.c) in derived  # rule 2 saw rule 1's triples
    assert to_sorted_ntriples(derived) == to_sorted_ntriples(
        run_rules(_graph(DATA), SHAPES, store="Oxigraph"))


def test_a_rule_direct_execution_cannot_mirror_goes_through_pyshacl() -> None:
    focus = SHAPES.replace("sh:targetNode ex:p", "sh:targetClass ex:Person").replace(
        "CONSTRUCT { ?y ex:parentOf ?x } WHERE { ?x ex:childOf ?y }",
        "CONSTRUCT { $this ex:seen true } WHERE { $this ex:childOf ?y }")
    assert rule_plan(focus) is None
    data = _graph(DATA + "ex:b a ex:Person .")
    derived = run_rules(data, focus)
    assert (rdflib.URIRef("http://example.org/b"), rdflib.URIRef("http://example.org/seen"),
            rdflib.Literal(True)) in derived
    assert to_sorted_ntriples(derived) == to_sorted_ntriples(
        run_rules(data, focus, store="Oxigraph"))


def test_appears_in_finds_a_value_anywhere_and_only_a_value() -> None:
    from pytest_kgbench.packs.build import appears_in

    text = '<x> <y> "reach ana.lopez@example.org or +44 20 7946 0001" .\n<a> <b> "plain" .'
    assert appears_in({"ana.lopez@example.org"}, text)
    assert appears_in({"nobody@example.org", "7946 0001"}, text)
    assert not appears_in({"ana.lopez@example.com", "+44 20 7946 0002"}, text)
    assert not appears_in(set(), text) and not appears_in({"plain"}, "")
    assert appears_in({"plain"}, text) and appears_in({"abcd"}, "abcd")


def test_turtle_is_the_same_graph_in_a_stable_readable_order(credit_base) -> None:
    from rdflib.compare import isomorphic

    from pytest_kgbench.packs.rdf.mapping import to_turtle

    g = credit_base.graph
    text = to_turtle(g)
    assert text == to_turtle(g)  # same graph, same bytes
    assert isomorphic(rdflib.Graph().parse(data=text, format="turtle"), g)
    heads = [line for line in text.splitlines() if line.startswith("@prefix")]
    assert heads == sorted(heads) and "rdf:" not in "".join(heads)  # rdf:type is `a`
    blocks = text.split("\n\n")[1:]
    assert blocks and all(" a " in b.splitlines()[0] for b in blocks)  # the type leads
    assert all(line.startswith("    ") for b in blocks for line in b.splitlines()[1:])
