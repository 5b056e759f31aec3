"""Keys a person can check: for 20 of the credit questions of issue 34, the key derived by hand
from the raw rows of credit/base (tests/data/credit_derivations.yaml) — the rows are in the
data, the lists said to be complete are, and the key functions (datasets/credit/keys.py)
compute the same key. The checks are shared with research's (tests/derivations.py)."""

from __future__ import annotations

import pytest
from derivations import check_fixture, check_key, check_rows, entries

ENTRIES = entries("credit")
NEW_FROM = 38  # the questions added for issue 34 are credit-Q38 and after


def test_the_fixture_derives_twenty_new_questions(credit_questions) -> None:
    check_fixture(ENTRIES, credit_questions, NEW_FROM)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_a_hand_derivation_rests_on_rows_of_the_data(entry, credit_base) -> None:
    check_rows(entry, credit_base.tables)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["question"] for e in ENTRIES])
def test_the_key_function_agrees_with_the_hand_derivation(entry, credit_questions,
                                                          credit_base) -> None:
    check_key(entry, credit_questions, credit_base)
