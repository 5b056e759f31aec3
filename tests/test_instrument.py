"""The instrument, corrected: each test here failed on the grader before it was corrected (a
believable wrong number), and passes after."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import credit_question
from pytest_kgbench.answers import Answer, extract_block, prose
from pytest_kgbench.conditions import BY_ID
from pytest_kgbench.errors import HarnessBroken
from pytest_kgbench.fieldkinds import norm_date, norm_entity, norm_number, norm_rating
from pytest_kgbench.grading import grade
from pytest_kgbench.metrics import MetricInput, measure_all
from pytest_kgbench.metrics.attribution import attribution
from pytest_kgbench.metrics.execution import rows_carried, same_cell, states_figure
from pytest_kgbench.questions import parse_question
from pytest_kgbench.registry import current

SCALE = ["AAA", "AA+", "AA", "AA-", "A+", "A", "A-", "BBB+", "BBB", "BBB-", "BB+", "BB", "BB-",
         "B+", "B", "B-", "CCC+", "CCC", "CCC-", "CC", "C", "D"]


# --- 1. the closing block, and never raising ----------------------------------------------------

def test_the_block_after_an_sql_fence_is_the_answer() -> None:
    text = ("I ran\n```sql\nSELECT rating FROM r\n```\nwhich gives AA.\n\n"
            "```json\n{\"rating\": \"AA\"}\n```\n")
    assert extract_block(text) == {"rating": "AA"}
    assert "```json" not in prose(text) and "SELECT rating" in prose(text)


def test_an_untagged_fence_or_an_inline_object_is_the_answer() -> None:
    assert extract_block("Answer:\n```\n{\"count\": 3}\n```") == {"count": 3}
    assert extract_block('The answer is {"count": 3} as the table shows.') == {"count": 3}
    # the last top-level object wins; objects inside it are not separate answers
    assert extract_block('{"a": 1} then {"b": {"c": 2}}') == {"b": {"c": 2}}
    assert prose('It is {"count": 3}.') == "It is ."


@pytest.mark.parametrize("digits", [400, 5000])
def test_huge_integers_are_graded_not_raised(digits: int) -> None:
    q = credit_question("credit-Q03")  # a count
    text = f"```json\n{{\"count\": {'9' * digits}}}\n```"
    result = grade(q, {"count": 8}, Answer(text=text, block=extract_block(text)))
    assert result.grade == "wrong"  # a 5,000-digit literal is no block; 400 digits is no 8


def test_tiny_decimals_in_prose_and_many_identical_rows_give_metrics() -> None:
    assert states_figure("a share of 0.00001 here", [[5]]) is False
    rows = [["LEI1", 1]] * 1200
    assert rows_carried(rows, rows)  # no RecursionError: scipy's matching
    assert not rows_carried(rows, rows[:-1])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_answer_text_gets_a_grade(text: str) -> None:
    q = credit_question("credit-Q06")
    result = grade(q, {"issuers": ["L1"], "count": 1},
                   Answer(text=text, block=extract_block(text)))
    assert result.grade in ("correct", "partial", "wrong")
    states_figure(prose(text), [[1], ["L1"]])


# --- 2. a missing field is not a null ------------------------------------------------------------

@pytest.mark.parametrize("block", [{}, {"note": "no idea"}, {"rating": None},
                                   {"rating": "cannot be determined"}])
def test_an_absent_or_null_rating_is_not_unrated(block) -> None:
    q = credit_question("credit-Q11")  # the key: unrated (withdrawn before the date)
    result = grade(q, {"rating": "unrated"}, Answer(text="...", block=block))
    assert result.grade == "wrong"
    if "rating" not in block:
        assert result.fields[0].absent


@pytest.mark.parametrize("said", ["unrated", "Unrated", "NR", "withdrawn", "not rated"])
def test_an_explicit_unrated_is_unrated(said: str) -> None:
    q = credit_question("credit-Q11")
    assert grade(q, {"rating": "unrated"}, Answer(text="...", block={"rating": said})).grade \
        == "correct"


# --- 3. normalisation ----------------------------------------------------------------------------

def test_dates_read_the_whole_value() -> None:
    assert norm_date("2032-11-271") != "2032-11-27"
    assert norm_date("2032-11-27") == norm_date("2032-11-27T00:00:00") == "2032-11-27"


def test_unicode_dashes_percent_counts_and_iris() -> None:
    assert norm_rating("BBB\u2011") == norm_rating("BBB\u2212") == "BBB-"
    assert norm_number("\u22125") == -5.0
    assert norm_number("8425%") == 84.25 and norm_number("8425%") != 8425
    assert not same_cell(200, 201) and same_cell(200, "200") and same_cell(200.0, 200.4)
    issuers = {"iss-86607": "LEI9", "lei9": "LEI9"}
    assert norm_entity("https://kgbench.example/credit/id/issuer/ISS-86607", issuers) == "lei9"
    works = {"10.5555/xyz": "W1", "w1": "W1"}
    assert norm_entity("https://doi.org/10.5555/xyz", works) == "w1"


def test_an_outlook_or_watch_after_a_rating_is_the_rating() -> None:
    for said in ("AA- (negative outlook)", "AA-/Negative", "AA- on watch negative", "aa\u2212"):
        assert norm_rating(said) == "AA-", said
    assert norm_rating("AA- or A+") != "AA-"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SCALE), st.sampled_from(["", " ", " (stable)", "/Negative",
                                                 " watch positive", " *-"]),
       st.sampled_from(["-", "\u2212", "\u2011", "\u2013"]))
def test_ratings_normalise_to_the_scale(rating: str, suffix: str, dash: str) -> None:
    written = rating.replace("-", dash).lower() + suffix
    assert norm_rating(written) == rating


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**9, 10**9))
def test_numbers_read_with_thousands_separators_and_signs(n: int) -> None:
    assert norm_number(f"{n:,}") == n
    assert norm_number(str(n).replace("-", "\u2212")) == n
    assert norm_number(f"{n}%") == pytest.approx(n / 100)


@settings(max_examples=200, deadline=None)
@given(st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2100, 12, 31)),
       st.text(alphabet="0123456789x", min_size=1, max_size=3))
def test_a_date_with_anything_after_it_is_not_that_date(day: dt.date, tail: str) -> None:
    assert norm_date(day.isoformat()) == day.isoformat()
    assert norm_date(day.isoformat() + tail) != day.isoformat()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=50),
                 st.lists(st.text(max_size=10), max_size=5)))
def test_no_field_kind_raises_on_any_value(value) -> None:
    q = credit_question("credit-Q06")
    for kind in current().field_kinds.values():
        for spec in q.fields:
            kind.compare(spec, "x", value, {})


# --- 4. and 5. execution accuracy: no vacuous passes, the prose, too many rows --------------------

def _item(built, q, statement, text="", cond="D1"):
    from pytest_kgbench.stores import open_store

    executor = open_store(built, BY_ID[cond], q.persona)
    ran = executor.run(statement)
    answer = Answer(text=text, block=extract_block(text), queries=[ran])
    return MetricInput(question=q, condition=BY_ID[cond], answer=answer, executor=executor)


def _sql_question(gold: str, answer=None, tier="L1"):
    answer = answer or {"count": {"kind": "integer"}}
    return parse_question({"id": "t-Q1", "tier": tier, "text": "?", "answer": answer,
                           "hand_key": {name: 1 for name in answer}, "gold": {"sql": gold}},
                          where="t.yaml", index=0)


def test_a_failing_gold_query_halts_instead_of_passing_anything(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM no_such_table")
    with pytest.raises(HarnessBroken, match="gold query of t-Q1 failed under D1"):
        measure_all(_item(credit_base, q, "SELECT 1 AS count", "It is 1."),
                    current().ordered_metrics())


def test_a_gold_query_with_no_value_leaves_execution_undefined(credit_base) -> None:
    q = _sql_question("SELECT NULL AS count")
    item = _item(credit_base, q, "SELECT NULL AS count", "I do not know.")
    out = measure_all(item, current().ordered_metrics())
    assert "execution" not in out and "no value" in out["details"]["note"]


def test_the_figure_is_read_from_the_prose_not_the_block(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT count(*) AS count FROM countries",
                 "Here it is.\n```json\n{\"count\": 8}\n```")
    out = measure_all(item, current().ordered_metrics())
    assert out["answer_carries_figure"] is False and out["execution"] is False


def test_a_zero_never_states_a_small_value() -> None:
    assert states_figure("There were 0 such issuers.", [[0.4]]) is False
    assert states_figure("There were 0 such issuers.", [[499]]) is False
    assert states_figure("About 0.4 of them.", [[0.4]]) is True


def test_listing_everything_does_not_carry_a_list(credit_base) -> None:
    q = _sql_question("SELECT lei AS issuers FROM issuers ORDER BY lei LIMIT 3",
                      answer={"issuers": {"kind": "entity_list", "entity": "issuer"}})
    item = _item(credit_base, q, "SELECT DISTINCT lei FROM issuers",
                 "Every issuer is listed above.")
    out = measure_all(item, current().ordered_metrics())
    assert out["execution"] is False and out["details"]["rows_returned"] > 6


def test_a_range_with_the_figure_does_not_pass(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT range FROM range(10000)", "The count is 8.")
    assert measure_all(item, current().ordered_metrics())["execution"] is False


def test_the_gold_query_itself_passes(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT count(*) AS count FROM countries", "There are 8.")
    assert measure_all(item, current().ordered_metrics())["execution"] is True


# --- 8. attribution ------------------------------------------------------------------------------

def test_attribution_needs_the_exact_id_of_a_given_definition() -> None:
    given = ["Rating on a date", "credit:RatingOnDate", "RatingOnDate"]
    assert attribution(["e", "credit:", "Made-up Issuer Rule", "Rating"], given) == \
        {"claims": 4, "true": 0}
    assert attribution([" credit:ratingondate ", "Rating on a date"], given) == \
        {"claims": 2, "true": 2}


# --- 6. semantic fidelity from the parsed query --------------------------------------------------

def test_fidelity_reads_the_parse_not_the_text(credit_pack) -> None:
    from pytest_kgbench.metrics.fidelity import fidelity

    evidence, prefixes = credit_pack.manifest["evidence"], credit_pack.rdf["prefixes"]
    needs = ["credit:TestRecord", "credit:RatingOnDate"]
    commented = ("SELECT rating FROM rating_actions -- source_system not used\n"
                 "WHERE issue_date <= DATE '2024-06-30'")
    assert fidelity(needs, commented, "sql", evidence) == \
        {"credit:TestRecord": False, "credit:RatingOnDate": False}
    applied = ("SELECT rating FROM rating_actions a JOIN issuers i ON a.entity_id = i.issuer_id "
               "WHERE i.source_system <> 'sandbox' AND DATE '2024-06-30' >= a.action_date")
    assert fidelity(needs, applied, "sql", evidence) == \
        {"credit:TestRecord": True, "credit:RatingOnDate": True}
    sparql = ('PREFIX cr: <https://kgbench.example/credit/def#>\n'
              'SELECT ?r WHERE { ?a cr:rating ?r } # cr:actionDate cr:sourceSystem')
    assert fidelity(needs, sparql, "sparql", evidence, prefixes) == \
        {"credit:TestRecord": False, "credit:RatingOnDate": False}


def test_a_text_pattern_as_evidence_is_refused_with_the_field(tmp_path) -> None:
    import shutil

    from pytest_kgbench.errors import InputError
    from pytest_kgbench.packs import find_pack

    from conftest import REPO

    shutil.copytree(REPO / "datasets" / "credit", tmp_path / "credit")
    manifest = tmp_path / "credit" / "pack.yaml"
    text = manifest.read_text().replace('credit:Outlook: {sql: {column: outlook}',
                                        "credit:Outlook: {sql: 'outlook'", 1)
    manifest.write_text(text)
    with pytest.raises(InputError, match="field 'evidence.credit:Outlook.sql': is a text "
                                         "pattern"):
        find_pack("credit", tmp_path, REPO / "ontology")


# --- 7. needs the data exercises ----------------------------------------------------------------

def test_a_need_the_data_never_exercises_is_caught(credit_pack, credit_base) -> None:
    import dataclasses

    from pytest_kgbench.validate import check_needs

    q14 = credit_question("credit-Q14")  # TestRecord was dropped: no sandbox issuer is counted
    vacuous = dataclasses.replace(q14, needs=(*q14.needs, "credit:TestRecord"))
    found = {(c.need, c.exercised) for c in check_needs([vacuous], [credit_base])}
    assert ("credit:TestRecord", False) in found
    q12 = credit_question("credit-Q12")  # here a sandbox record would be counted
    assert ("credit:TestRecord", True) in {(c.need, c.exercised)
                                           for c in check_needs([q12], [credit_base])}


def test_every_shipped_need_is_exercised_or_says_why(credit_pack, research_pack, kg_cache,
                                                     credit_questions, research_questions
                                                     ) -> None:
    from pytest_kgbench.build import build_variant
    from pytest_kgbench.validate import check_needs

    for pack, qset in ((credit_pack, credit_questions), (research_pack, research_questions)):
        builts = [build_variant(pack, v, kg_cache) for v in pack.variants]
        checks = check_needs(list(qset.questions), builts)
        assert [c for c in checks if c.exercised is False] == []
        assert all(c.why for c in checks if c.exercised is None)
        assert sum(c.exercised is True for c in checks) >= 5
