"""The research pack, what is research's own: the why questions and their checklists, inverted
traps, the evidence each gold query shows, the cast named the same way at every seed, the
variants' sizes and the Work clause planted on every variant and seed. That every question
checks out (on base and large, at any seed), that the generator is deterministic and plants every
trap family several times, ORCID check characters, and the data's agreement across CSV, Markdown
and RDF are the pack contract's (tests/packs/test_pack_contract.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from pytest_kgbench.packs.build import build_variant

CONCEPTS = ("Person", "Work", "CountedOutput", "InstitutionCredit", "FullCounting",
            "FractionalCounting", "CountingCitation")


# --- the question set --------------------------------------------------------------------------

def test_why_questions_are_graded_by_code_and_carry_a_checklist(research_questions) -> None:
    why = [q for q in research_questions.questions if q.checklist]
    assert len(why) >= 2
    for q in why:  # asked to explain, without the question saying what the answer is
        assert "Explain why" in q.text and len(q.checklist) >= 2, q.id
        assert q.tier == "L3" and q.fields and q.key and q.gold, q.id


def test_some_traps_are_inverted(research_questions) -> None:
    """An inverted trap: the naive reading is right and the over-applied rule is the trap."""
    inverted = [q for q in research_questions.questions
                if q.tier == "L3" and "inverted trap" in (q.why or "")]
    assert len(inverted) >= 2


def test_gold_queries_show_the_evidence_of_the_definitions_they_need(research_pack,
                                                                    research_questions) -> None:
    """Semantic fidelity: every needed definition declares evidence, and the gold shows it."""
    from pytest_kgbench.metrics.fidelity import fidelity

    evidence = research_pack.manifest["evidence"]
    assert set(evidence) >= {f"research:{n}" for n in CONCEPTS}
    for concept in evidence.values():
        assert set(concept) - {"ablate"} == {"sql", "sparql", "executed"}, concept
    for q in research_questions.questions:
        if q.expect != "answer":
            continue
        for lang in ("sql", "sparql", "executed"):
            found = fidelity(q.needs, q.gold[lang], lang, evidence, research_pack.rdf["prefixes"])
            assert all(found.values()), (q.id, lang, found)


def test_questions_name_the_cast_the_same_way_at_every_seed(research_pack, research_questions,
                                                            tmp_path) -> None:
    """The ids the questions ask about are hashes of cast labels, never drawn from the seed."""
    import re

    a = build_variant(research_pack, "base", tmp_path, seed=11).tables
    b = build_variant(research_pack, "base", tmp_path, seed=12).tables
    text = "\n".join(f"{q.text} {dict(q.params)} {dict(q.gold)} {dict(q.trap)}"
                     for q in research_questions.questions)
    for ident in set(re.findall(r"\b[WAI]\d{9,10}\b", text)):
        table, col = {"W": ("works", "work_id"), "A": ("authors", "author_id"),
                      "I": ("institutions", "institution_id")}[ident[0]]
        assert any(r[col] == ident for r in a[table]), ident
        assert any(r[col] == ident for r in b[table]), ident


# --- the data ----------------------------------------------------------------------------------

def test_the_variants_have_the_sizes_they_promise(research_base, research_large) -> None:
    assert len(research_base.tables["works"]) == 120
    assert len(research_large.tables["works"]) == 850
    base_ids = {r["author_id"] for r in research_base.tables["authors"]}
    large_ids = {r["author_id"] for r in research_large.tables["authors"]}
    assert {"A4483374961", "A5720102936", "A8449650823"} <= base_ids & large_ids


def _work_clause(tables) -> list[str]:
    """Preprints whose published version lists other persons or other institutions than the
    preprint itself: the Work clause (authors and affiliations are the published version's)."""
    person = {a["author_id"]: a["orcid"] or a["author_id"] for a in tables["authors"]}
    persons: dict[str, set[str]] = defaultdict(set)
    insts: dict[str, set[str]] = defaultdict(set)
    for r in tables["authorships"]:
        persons[r["work_id"]].add(person[r["author_id"]])
        insts[r["work_id"]].add(r["institution_id"])
    return [w["work_id"] for w in tables["works"] if w["published_version_id"] and (
        persons[w["work_id"]] != persons[w["published_version_id"]]
        or insts[w["work_id"]] != insts[w["published_version_id"]])]


@pytest.mark.parametrize(("variant", "seed"), [("base", None), ("base", 7), ("base", 8),
                                               ("large", None), ("large", 7)])
def test_the_work_clause_occurs_on_every_variant_and_seed(research_pack, variant, seed) -> None:
    """The published version's authors or affiliations differ from its preprint's: planted, so
    the questions resting on that clause of Work keep their trap everywhere (it never occurred
    on base, base at seed 7 or large before)."""
    params = dict(research_pack.variants[variant])
    tables = research_pack.module("generate").generate(
        variant=variant, seed=research_pack.seed if seed is None else seed, **params)
    assert "W8718121795" in _work_clause(tables)  # the planted one, at every seed
