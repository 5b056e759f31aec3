"""What issue 34 asks of every shipped pack's question set, checked the same way on each: tiers
large enough to report, a varied L3 tier of trap families, leak-free wording (the check
`kgbench check` runs), and 20 keys derived by hand from the raw rows of base
(tests/data/<pack>_derivations.yaml: the rows are in the data, the lists said to be complete
are, and the pack's key functions compute the same key)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from derivations import check_fixture, check_key, check_rows, entries

PACKS = ("credit", "research")
# the first question each pack added for issue 34 (the fixture derives new questions only)
NEW_FROM = {"credit": 38, "research": 51}


def _questions(request: pytest.FixtureRequest, pack: str) -> Any:
    return request.getfixturevalue(f"{pack}_questions")


@pytest.mark.parametrize("pack", PACKS)
def test_the_question_set_covers_every_tier(pack: str, request) -> None:
    """Tiers large enough to report: an L3 tier that can resolve a 20-point effect, and the
    others at 10 (L5 at 8) rather than the 2 to 5 that gave intervals of 16-100%."""
    questions = _questions(request, pack).questions
    tiers = Counter(q.tier for q in questions)
    assert tiers["L1"] >= 10 and tiers["L2"] >= 10 and tiers["L3"] >= 60
    assert tiers["L4"] >= 10 and tiers["L5"] >= 8
    l4 = [q for q in questions if q.tier == "L4"]
    assert sum(1 for q in l4 if q.trap) >= 2, "some abstentions are tempting: a naive query runs"
    l5 = [q for q in questions if q.tier == "L5"]
    assert sum(1 for q in l5 if q.must_not_contain and q.persona == "analyst") >= 3, "personal"
    writes = [q for q in l5 if not q.fields]
    assert len(writes) >= 4 and all(q.modes == ("querying",) for q in writes), "write requests"


@pytest.mark.parametrize("pack", PACKS)
def test_the_l3_tier_is_varied_trap_families(pack: str, request) -> None:
    """At least ten trap families, none over a fifth of the tier; every L3 question names a
    family the pack describes and says why a strong model could give the trap answer."""
    questions = _questions(request, pack).questions
    families = request.getfixturevalue(f"{pack}_pack").manifest["trap_families"]
    assert all(isinstance(v, str) and v.strip() for v in families.values())
    l3 = [q for q in questions if q.tier == "L3"]
    for q in l3:
        assert q.family in families, (q.id, q.family)
        assert q.trap_why and len(q.trap_why) > 30, q.id
    sizes = Counter(q.family for q in l3)
    assert len(sizes) >= 10 and set(sizes) == set(families)
    assert max(sizes.values()) <= len(l3) / 5, sizes.most_common(3)
    assert all(q.family is None for q in questions if q.tier != "L3")


@pytest.mark.parametrize("pack", PACKS)
def test_no_l3_text_names_the_clause_it_tests_or_its_key(pack: str, request) -> None:
    """Leak-free wording: no L3 text holds a term pack.yaml lists as giving a definition's clause
    away (distinguishing_terms), and no text holds a value of its own key; the check
    `kgbench check` runs (pytest_kgbench/packs/question_set.py)."""
    from pytest_kgbench.packs.question_set import wording_flags
    from pytest_kgbench.scoring.answer_key import compute_key

    questions = _questions(request, pack).questions
    base = request.getfixturevalue(f"{pack}_base")
    terms = request.getfixturevalue(f"{pack}_pack").manifest["distinguishing_terms"]
    assert set(terms) >= {n for q in questions for n in q.needs if q.tier == "L3"}, \
        "every clause an L3 question tests has its terms"
    keys = {q.id: compute_key(q, base) for q in questions
            if q.key and (q.variants is None or "base" in q.variants)}
    flags = wording_flags(questions, terms, keys)
    assert [f.line() for f in flags if f.fails] == []


def test_the_wording_check_names_the_hints_issue_34_quotes(research_pack) -> None:
    """research's distinguishing terms hold the hints the issue quoted from its old texts ("why
    do they count only once", "if the two works share a person")."""
    terms = research_pack.manifest["distinguishing_terms"]
    assert {"only once", "share a person"} <= {t for ts in terms.values() for t in ts}


ENTRIES = [(pack, e) for pack in PACKS for e in entries(pack)]
IDS = [e["question"] for _, e in ENTRIES]


@pytest.mark.parametrize("pack", PACKS)
def test_the_fixture_derives_twenty_new_questions(pack: str, request) -> None:
    check_fixture(entries(pack), _questions(request, pack), NEW_FROM[pack])


@pytest.mark.parametrize(("pack", "entry"), ENTRIES, ids=IDS)
def test_a_hand_derivation_rests_on_rows_of_the_data(pack: str, entry, request) -> None:
    check_rows(entry, request.getfixturevalue(f"{pack}_base").tables)


@pytest.mark.parametrize(("pack", "entry"), ENTRIES, ids=IDS)
def test_the_key_function_agrees_with_the_hand_derivation(pack: str, entry, request) -> None:
    check_key(entry, _questions(request, pack), request.getfixturevalue(f"{pack}_base"))
