"""The research pack: key = gold SQL = gold SPARQL = gold executed (SQL over the executed tables)
for every question on base and large (SPARQL on rdflib on base, on Oxigraph elsewhere), every L3
trap bites (at the pack's seed and at random seeds), the base keys match the hand-written ones,
and the generator is deterministic and plants every trap family several times."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.schema import read_tables
from pytest_kgbench.run.validate import check_questions

REPO = Path(__file__).resolve().parents[1]
CONCEPTS = ("Person", "Work", "CountedOutput", "InstitutionCredit", "FullCounting",
            "FractionalCounting", "CountingCitation")


@pytest.fixture(scope="module")
def checks(research_questions, research_base):
    return {c.question: c for c in check_questions(list(research_questions.questions),
                                                   research_base)}


def _problems(checks) -> dict[str, list[str]]:
    return {c.question: c.problems for c in checks if c.problems}


# --- the question set --------------------------------------------------------------------------


def test_every_answer_question_has_both_gold_languages_and_a_hand_key(research_questions) -> None:
    for q in research_questions.questions:
        if q.gold:
            assert set(q.gold) == {"sql", "sparql", "executed"}, q.id
        if q.expect == "answer":
            assert q.hand_key is not None and q.key, q.id
        if q.tier == "L3":
            assert set(q.trap) >= {"sql", "sparql"}, q.id
            assert q.why and q.needs, q.id
        if q.tier == "L4":
            assert q.expect == "abstain" and not q.gold, q.id


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


def test_the_l3_traps_cover_every_trap_family(research_questions) -> None:
    needs = Counter(n for q in research_questions.questions if q.tier == "L3" for n in q.needs)
    for concept in CONCEPTS:
        assert needs[f"research:{concept}"] >= 2, concept


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


# --- the checks --------------------------------------------------------------------------------

def test_every_question_checks_out_on_base(checks, research_questions) -> None:
    """key = gold SQL = gold SPARQL; L3 trap (SQL and SPARQL) != key; key = hand_key on base;
    L5 gold refused by the guard."""
    assert set(checks) == {q.id for q in research_questions.questions}
    assert not _problems(checks.values())


def test_every_question_checks_out_on_large(research_questions, research_large) -> None:
    found = check_questions(list(research_questions.questions), research_large,
                            engines={"sparql": "oxigraph"})
    assert len(found) == len(research_questions.questions)
    assert not _problems(found)


def test_gold_really_ran_every_reference_kind(checks) -> None:
    """Guard against a vacuous pass: gold results were computed, not absent."""
    for qid, c in checks.items():
        if c.key is not None:
            assert set(c.gold) == {"sql", "sparql", "executed"}, qid
            assert all("error" not in v and "refused" not in v for v in c.gold.values()), qid


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6))
def test_every_question_checks_out_at_any_seed(seed, research_pack, research_questions,
                                               tmp_path_factory) -> None:
    """A seed that breaks a trap is a generator bug: at ten seeds, every L3 trap misses the key
    (and key = gold SQL = gold SPARQL = gold executed). hand_key holds only at the pack's
    seed."""
    questions = [dataclasses.replace(q, hand_key=None) for q in research_questions.questions]
    built = build_variant(research_pack, "base", tmp_path_factory.mktemp("seed"), seed=seed)
    try:
        found = check_questions(questions, built, engines={"sparql": "oxigraph"})
        assert len(found) == len(questions)
        assert not _problems(found), seed
        for c in found:
            if c.tier == "L3":
                assert c.trap and c.gold["sql"] and c.gold["sparql"], c.question
    finally:
        shutil.rmtree(built.dir, ignore_errors=True)


# --- the data ----------------------------------------------------------------------------------

def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.suffix in (".csv", ".ttl", ".md")}


def test_the_same_seed_gives_byte_identical_files(research_pack, tmp_path) -> None:
    a = build_variant(research_pack, "base", tmp_path / "a", seed=7)
    b = build_variant(research_pack, "base", tmp_path / "b", seed=7)
    c = build_variant(research_pack, "base", tmp_path / "c", seed=8)
    assert _digest(a.dir) == _digest(b.dir)
    assert _digest(a.dir)["authorships.csv"] != _digest(c.dir)["authorships.csv"]


def test_the_variants_have_the_sizes_they_promise(research_base, research_large) -> None:
    assert len(research_base.tables["works"]) == 120
    assert len(research_large.tables["works"]) == 850
    base_ids = {r["author_id"] for r in research_base.tables["authors"]}
    large_ids = {r["author_id"] for r in research_large.tables["authors"]}
    assert {"A4483374961", "A5720102936", "A8449650823"} <= base_ids & large_ids


def test_orcids_carry_valid_check_characters(research_base) -> None:
    def ok(orcid: str) -> bool:
        digits = orcid.replace("-", "")
        total = 0
        for ch in digits[:15]:
            total = (total + int(ch)) * 2
        check = (12 - total % 11) % 11
        return digits[15] == ("X" if check == 10 else str(check))

    orcids = [r["orcid"] for r in research_base.tables["authors"] if r["orcid"]]
    assert orcids and all(ok(o) for o in orcids)


def test_every_trap_family_is_planted_several_times(research_base) -> None:
    t = research_base.tables
    authors = {r["author_id"]: r for r in t["authors"]}
    person = {a: r["orcid"] or a for a, r in authors.items()}
    # who is who: ORCIDs on several records; names shared by several persons
    orcids = Counter(r["orcid"] for r in t["authors"] if r["orcid"])
    assert sum(1 for n in orcids.values() if n > 1) >= 2, "records sharing an ORCID"
    names: dict[str, set[str]] = defaultdict(set)
    for a, r in authors.items():
        names[r["display_name"]].add(person[a])
    assert sum(1 for ps in names.values() if len(ps) > 1) >= 2, "one name, several persons"
    assert any(r["orcid"] is None for r in t["authors"] if r["display_name"] == "Mira Castellan")
    # hierarchies: four levels somewhere, several chains of three or more
    parent = {r["institution_id"]: r["parent_id"] for r in t["institutions"]}

    def depth(i: str) -> int:
        return 1 + (depth(parent[i]) if parent[i] else 0)

    depths = Counter(depth(i) for i in parent)
    assert depths[4] >= 2 and sum(n for d, n in depths.items() if d >= 3) >= 6, "hierarchies"
    # counting methods: persons with several institutions on one work
    per = Counter((r["work_id"], r["author_id"]) for r in t["authorships"])
    assert sum(1 for n in per.values() if n > 1) >= 2, "several institutions on one work"
    # versions, retractions, datasets, standalone preprints
    works = {r["work_id"]: r for r in t["works"]}
    published = [r for r in t["works"] if r["published_version_id"]]
    assert len(published) >= 3, "preprints with a published version"
    assert sum(1 for r in t["works"] if r["work_type"] == "preprint"
               and not r["published_version_id"]) >= 2, "standalone preprints"
    assert sum(1 for r in t["works"] if r["is_retracted"]) >= 2, "retracted works"
    assert sum(1 for r in t["works"] if r["work_type"] == "dataset") >= 3, "datasets"
    both = sum(1 for c in t["citations"] if works[c["cited_work_id"]]["published_version_id"])
    assert both >= 2, "citations to preprints of published works"
    # self-citations, one of them across two records of one person
    persons: dict[str, set[str]] = defaultdict(set)
    records: dict[str, set[str]] = defaultdict(set)
    for r in t["authorships"]:
        persons[r["work_id"]].add(person[r["author_id"]])
        records[r["work_id"]].add(r["author_id"])
    selfs = [c for c in t["citations"]
             if persons[c["citing_work_id"]] & persons[c["cited_work_id"]]]
    hidden = [c for c in selfs if not records[c["citing_work_id"]] & records[c["cited_work_id"]]]
    assert len(selfs) >= 3 and hidden, "self-citations"


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


def test_the_csv_files_read_back_to_the_same_typed_rows(research_base) -> None:
    again = read_tables(research_base.csv_dir, research_base.pack.tables)
    assert again == research_base.tables
    assert isinstance(again["works"][0]["is_retracted"], bool)
    assert isinstance(again["works"][0]["publication_year"], int)


def test_markdown_is_rendered_from_the_turtle(research_base) -> None:
    from pytest_kgbench.packs.rdf.ontology import concepts

    ttl = (REPO / "ontology" / "research" / "definitions.ttl").read_text(encoding="utf-8")
    found = concepts(ttl)
    assert {c["curie"] for c in found} >= {f"research:{n}" for n in (*CONCEPTS, "PersonalData")}
    from conftest import unrendered

    assert unrendered(research_base) == []


def test_the_rdf_holds_the_same_facts_as_the_tables(research_base) -> None:
    from rdflib import RDF, URIRef

    g = research_base.graph
    rs = "https://kgbench.example/research/def#"
    for table, cls in (("works", "Work"), ("authors", "Author"), ("institutions", "Institution"),
                       ("authorships", "Authorship"), ("citations", "Citation")):
        assert len(set(g.subjects(RDF.type, URIRef(rs + cls)))) == len(research_base.tables[table])
    with_orcid = sum(1 for r in research_base.tables["authors"] if r["orcid"])
    assert len(set(g.subject_objects(URIRef(rs + "orcid")))) == with_orcid
    linked = sum(1 for r in research_base.tables["works"] if r["published_version_id"])
    assert len(set(g.subject_objects(URIRef(rs + "publishedVersion")))) == linked
