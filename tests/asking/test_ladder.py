"""The ladder on credit, what is credit's own: each condition's prompt reading as it should, and R7
collected only for a pack with a neutral ontology. The decoy, the neutral wording, axioms and
rules, the executed tables against the SHACL-derived graph are the pack contract's
(tests/packs/test_pack_contract.py)."""

from __future__ import annotations

from pathlib import Path

from pytest_kgbench.asking.prompts import build_prompt
from pytest_kgbench.core import conditions

REPO = Path(__file__).resolve().parents[2]
ONTOLOGY = REPO / "ontology" / "credit"


def _prompt(built, cid: str, question):
    cond = conditions.BY_ID[cid]
    return build_prompt(cond, built, question).context


def test_prompts_of_r5_r7_r8_r9_r10_read_as_a_person_expects(credit_base, credit_questions) -> None:
    """R5 against R7 is the pack contract's (tests/packs/test_pack_contract.py: the whole
    slanted and neutral sentences); here also no shorter piece of the other wording is left in
    either."""
    q = next(q for q in credit_questions.questions if q.id == "credit-Q32")
    r5, r7, r8, r9, r10 = (_prompt(credit_base, c, q) for c in ("R5", "R7", "R8", "R9", "R10"))
    definition = "Issuer records that share an LEI are one issuer"
    assert "signals that a downgrade" not in r5 and "downgrade is coming" not in r7
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
