"""The ladder on research, what is research's own: every condition of the ladder, what the
definitions do (credit split, personal data left alone, the shapes biting before the rules), each
condition's prompt reading as it should, and the graph store's prefixes. The decoy, the neutral
wording (R5 and R7 differ in one slanted sentence), axioms and rules without prose, the executed
tables and the SHACL-derived graph agreeing on every variant, and the derived graph conforming to
the shapes are the pack contract's (tests/packs/test_pack_contract.py)."""

from __future__ import annotations

from pathlib import Path

from pytest_kgbench.asking.cases import pack_conditions
from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core import conditions
from pytest_kgbench.packs.build import build_variant

REPO = Path(__file__).resolve().parents[2]
ONTOLOGY = REPO / "ontology" / "research"


def test_research_gets_every_condition_of_the_ladder(research_pack) -> None:
    got = [c.id for c in pack_conditions(research_pack, conditions.LADDER)]
    assert got == [c.id for c in conditions.LADDER]


def test_the_slant_has_questions_to_bite_on(research_questions) -> None:
    """The neutral ontology differs in the one slanted sentence (the pack contract,
    tests/packs/test_pack_contract.py); the contrast has questions to bite on: the standalone
    preprints the slant invites dropping, each saying why R7 is the test."""
    family = [q for q in research_questions.questions
              if q.family == "standalone-preprint-dropped"]
    assert len(family) >= 3 and all("R7" in (q.why or "") for q in family)


# --- what the definitions do --------------------------------------------------------------------

def test_the_definitions_merge_and_drop_on_every_variant(research_pack, kg_cache) -> None:
    """What the definitions do, so that the pack contract's agreement of the executed tables and
    the SHACL rules (tests/packs/test_pack_contract.py) is not agreement on nothing."""
    from pack_declared import research_facts_from_tables

    for variant in research_pack.variants:
        built = build_variant(research_pack, variant, kg_cache)
        facts = research_facts_from_tables(built.executed)
        assert len(facts["persons"]) < len(built.tables["authors"])
        assert len(facts["works"]) < len(built.tables["works"])
        assert len(facts["counted"]) < len(facts["works"])
        assert len(facts["counting_citations"]) < len(built.tables["citations"])
        assert any(share < 1 for _, _, share in facts["work_persons"])


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


def test_the_shapes_have_teeth(research_base) -> None:
    """The graph after the rules conforms to the shapes (the pack contract); the raw graph,
    before the rules, lacks what they require (credit's raw graph conforms already)."""
    import rdflib
    from pyshacl import validate

    shapes = rdflib.Graph().parse(ONTOLOGY / "shapes.ttl")
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

    ex = STORES[0].open(research_base.source, "raw", guard_for(research_base, "analyst"))
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
