"""The `rows` field kind: a table compared as a multiset of rows, cells normalised."""

from __future__ import annotations

from pytest_kgbench.answers import fields_from_rows
from pytest_kgbench.fieldkinds import RowsKind, norm_cell
from pytest_kgbench.questions import FieldSpec

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
