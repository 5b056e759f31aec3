"""The `rows` field kind: a table compared as a multiset of rows, cells normalised."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_kgbench.core.questions import FieldSpec
from pytest_kgbench.scoring.answers import fields_from_rows
from pytest_kgbench.scoring.fieldkinds import RowsKind, norm_cell

KIND = RowsKind()
SPEC = FieldSpec(name="rows", kind="rows", rel_tol=0.0, abs_tol=0.0)
KEY = [["31003000336", 20000.0, "2019-01-15T00:00:00"], ["31003000337", 12000.0, None]]


def ok(expected, got, spec=SPEC):
    return KIND.compare(spec, expected, got, {})


def test_the_same_table_in_another_row_and_column_order_matches():
    got = [[None, "31003000337", "12000.00"], ["2019-01-15", 20000, 31003000336]]
    assert ok(KEY, got) == (True, 1.0)


def test_a_missing_row_fails_with_its_f1():
    verdict, f1 = ok(KEY, KEY[:1])
    assert not verdict and f1 == round(2 * 1 / 3, 6)


def test_a_duplicate_row_fails():
    verdict, f1 = ok(KEY, [KEY[0], KEY[0], KEY[1]])
    assert not verdict and f1 == 0.8
    # and a key row listed twice is not met by one answer row
    assert not ok([KEY[0], KEY[0]], [KEY[0]])[0]


def test_a_number_off_by_more_than_the_tolerance_fails():
    near = [["31003000336", 20000.0000000001, "2019-01-15"], KEY[1]]
    assert ok(KEY, near)[0]  # within 1e-9 counts as equal even with no tolerance
    off = [["31003000336", 20001, "2019-01-15"], KEY[1]]
    assert not ok(KEY, off)[0]
    tolerant = FieldSpec(name="rows", kind="rows", rel_tol=0.001)
    assert ok(KEY, off, tolerant)[0]
    assert not ok(KEY, [["31003000336", 20100, "2019-01-15"], KEY[1]], tolerant)[0]


def test_dates_and_datetimes():
    assert norm_cell("2019-01-15T00:00:00") == norm_cell("2019-01-15 00:00:00") == "2019-01-15"
    assert norm_cell("2019-01-15") == "2019-01-15"
    # a time of day is not a date: it does not match the date alone
    assert norm_cell("2019-01-15T10:30:00") != "2019-01-15"
    assert not ok([["2019-01-15"]], [["2019-01-15T10:30:00"]])[0]


def test_cells_within_a_row_pair_one_to_one():
    assert not ok([[1, 1]], [[1, 2]])[0]
    assert not ok([[1, 2]], [[1, 1]])[0]
    assert not ok([[1, 2]], [[1, 2, 3]])[0]


def test_strings_none_and_shapes():
    assert ok([["Fire", None]], [[" fire ", "null"]])[0]
    assert not ok([["Fire"]], [["Flood"]])[0]
    assert ok([], [])[0]
    assert not ok([["x"]], None)[0]
    assert not ok([["x"]], "not a table")[0]
    assert ok([["x"]], ["x"])[0]  # a one-column table may be written as a flat list


def test_fields_from_rows_gives_the_whole_result_whatever_the_columns_are_named():
    fields = fields_from_rows((SPEC,), ["Policy_Number", "sum(policy_amount)"],
                              [["1", 2.0], ["3", 4.0]])
    assert fields == {"rows": [["1", 2.0], ["3", 4.0]]}


# --- the matching: no recursion, and the same verdicts as a search over every pairing ----------

def test_a_thousand_rows_with_one_repeated_999_times_grade_as_the_key():
    """999 identical rows and one more: once a RecursionError (graded wrong though the answer
    is the key), now a maximum flow over two distinct rows."""
    from pytest_kgbench.scoring.grading import grade_field

    key = [["31003000336", 20000.0]] * 999 + [["31003000337", 12000.0]]
    got = [[20000, "31003000336"]] * 999 + [["12,000.00", "31003000337"]]
    assert ok(key, got) == (True, 1.0)
    assert grade_field(SPEC, key, got, {}).ok
    assert not grade_field(SPEC, key, got[:-1] + [got[0]], {}).ok  # 1,000 of one row: wrong


def test_a_thousand_distinct_rows_in_another_order_match():
    import random

    key = [[f"P{i:05d}", float(i * 7 % 1013), f"2019-01-{1 + i % 28:02d}"] for i in range(1000)]
    got = [[row[2], row[1], row[0].lower()] for row in key]
    random.Random(5).shuffle(got)
    assert ok(key, got) == (True, 1.0)
    got[17] = [got[17][0], got[17][1] + 1, got[17][2]]
    verdict, f1 = ok(key, got)
    assert not verdict and f1 == round(2 * 999 / 2000, 6)


def _search(expected, got, same) -> int:
    """The largest number of pairs over every pairing (the definition, for small inputs)."""
    import itertools

    best = 0
    for k in range(min(len(expected), len(got)), 0, -1):
        for left in itertools.combinations(range(len(expected)), k):
            for right in itertools.permutations(range(len(got)), k):
                if all(same(expected[i], got[j]) for i, j in zip(left, right)):
                    return k
    return best


def _row_same(tolerance):
    def cell_same(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return abs(a - b) <= tolerance(a) and math.isfinite(b)
        return type(a) is type(b) and a == b

    def row_same(a, b):
        return len(a) == len(b) and _search(a, b, cell_same) == len(a)

    return row_same


CELLS = st.one_of(st.none(), st.sampled_from(["a", "b"]),
                  st.sampled_from([0.0, 1.0, 1.004, 1.01, 2.0, 100.0, 100.4, -1.0, 1e9]))
TABLES = st.lists(st.lists(CELLS, min_size=0, max_size=3), max_size=4)


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(expected=TABLES, got=TABLES, rel=st.sampled_from([0.0, 0.005, 0.01]),
       abs_tol=st.sampled_from([0.0, 0.5]))
def test_match_rows_is_a_maximum_matching(expected, got, rel, abs_tol):
    """`match_rows` (grouping, pruning, the interval greedy, a maximum flow) gives the size of
    the largest pairing that a search over every pairing finds, cells paired one to one."""
    from pytest_kgbench.scoring.fieldkinds import match_rows

    def tolerance(a):
        return max(abs_tol, rel * abs(a), 1e-9)

    assert match_rows(expected, got, tolerance) == _search(expected, got, _row_same(tolerance))


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(left=st.lists(st.integers(1, 5), max_size=5), right=st.lists(st.integers(1, 5), max_size=5),
       data=st.data())
def test_max_matching_of_multisets(left, right, data):
    """Distinct items with counts, against the same multisets spelt out item by item."""
    from pytest_kgbench.scoring.fieldkinds import max_matching
    pairs = data.draw(st.sets(st.tuples(st.integers(0, max(len(left) - 1, 0)),
                                        st.integers(0, max(len(right) - 1, 0))), max_size=8))
    pairs = {(i, j) for i, j in pairs if i < len(left) and j < len(right)}
    flat_left = [i for i, n in enumerate(left) for _ in range(n)][:6]
    flat_right = [j for j, n in enumerate(right) for _ in range(n)][:6]
    counts_l = [flat_left.count(i) for i in range(len(left))]
    counts_r = [flat_right.count(j) for j in range(len(right))]
    pairs = {(i, j) for i, j in pairs if counts_l[i] and counts_r[j]}
    expect = _search(flat_left, flat_right, lambda i, j: (i, j) in pairs)
    assert max_matching(counts_l, counts_r, pairs) == expect
