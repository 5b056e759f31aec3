"""Keys a person can check: for 20 of the research questions of issue 34, the key derived by hand
from the raw rows of research/base (tests/data/research_derivations.yaml) — the rows are in the
data, the lists said to be complete are, and the key functions (datasets/research/keys.py)
compute the same key. The checks are shared with credit's (tests/derivations.py)."""

from __future__ import annotations

import pytest
from derivations import check_fixture, check_key, check_rows, entries

ENTRIES = entries("research")
NEW_FROM = 51  # the questions added for issue 34 are research-Q51 and after


def test_the_fixture_derives_twenty_new_questions(research_questions) -> None:
    check_fixture(ENTRIES, research_questions, NEW_FROM)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_a_hand_derivation_rests_on_rows_of_the_data(entry, research_base) -> None:
    check_rows(entry, research_base.tables)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_the_key_function_agrees_with_the_hand_derivation(entry, research_questions,
                                                          research_base) -> None:
    check_key(entry, research_questions, research_base)
