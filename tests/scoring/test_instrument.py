"""The instrument, corrected: each test here failed on the grader before it was corrected (a
believable wrong number), and passes after."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import credit_question
from pytest_kgbench.core.conditions import BY_ID
from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.core.questions import parse_question
from pytest_kgbench.core.registry import default
from pytest_kgbench.metrics import MetricInput, measure_all, ordered
from pytest_kgbench.metrics.attribution import attribution
from pytest_kgbench.metrics.execution import rows_carried, same_cell, states_figure
from pytest_kgbench.scoring.answers import Answer, extract_block, prose
from pytest_kgbench.scoring.fieldkinds import norm_date, norm_entity, norm_number, norm_rating
from pytest_kgbench.scoring.grading import grade

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
    for kind in default().field_kinds.values():
        for spec in q.fields:
            kind.compare(spec, "x", value, {})


# --- 4. and 5. execution accuracy: no vacuous passes, the prose, too many rows --------------------

def _item(built, q, statement, text="", cond="D1"):
    from pytest_kgbench.engines.stores import open_store

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
                    ordered())


def test_a_gold_query_with_no_value_leaves_execution_undefined(credit_base) -> None:
    q = _sql_question("SELECT NULL AS count")
    item = _item(credit_base, q, "SELECT NULL AS count", "I do not know.")
    out = measure_all(item, ordered())
    assert "execution" not in out and "no value" in out["details"]["note"]


def test_the_figure_is_read_from_the_prose_not_the_block(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT count(*) AS count FROM countries",
                 "Here it is.\n```json\n{\"count\": 8}\n```")
    out = measure_all(item, ordered())
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
    out = measure_all(item, ordered())
    assert out["execution"] is False and out["details"]["rows_returned"] > 6


def test_a_range_with_the_figure_does_not_pass(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT range FROM range(10000)", "The count is 8.")
    assert measure_all(item, ordered())["execution"] is False


def test_the_gold_query_itself_passes(credit_base) -> None:
    q = _sql_question("SELECT count(*) AS count FROM countries")
    item = _item(credit_base, q, "SELECT count(*) AS count FROM countries", "There are 8.")
    assert measure_all(item, ordered())["execution"] is True


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

    from conftest import REPO
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.packs.schema import find_pack

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

    from pytest_kgbench.run.validate import check_needs

    q14 = credit_question("credit-Q14")  # TestRecord was dropped: no sandbox issuer is counted
    vacuous = dataclasses.replace(q14, needs=(*q14.needs, "credit:TestRecord"))
    found = {(c.need, c.exercised) for c in check_needs([vacuous], [credit_base])}
    assert ("credit:TestRecord", False) in found
    q12 = credit_question("credit-Q12")  # here a sandbox record would be counted
    assert ("credit:TestRecord", True) in {(c.need, c.exercised)
                                           for c in check_needs([q12], [credit_base])}


@pytest.mark.slow
def test_every_shipped_need_is_exercised_or_says_why(credit_pack, research_pack, kg_cache,
                                                     credit_questions, research_questions
                                                     ) -> None:
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.run.validate import check_needs

    for pack, qset in ((credit_pack, credit_questions), (research_pack, research_questions)):
        builts = [build_variant(pack, v, kg_cache) for v in pack.variants]
        checks = check_needs(list(qset.questions), builts)
        assert [c for c in checks if c.exercised is False] == []
        assert all(c.why for c in checks if c.exercised is None)
        assert sum(c.exercised is True for c in checks) >= 5


# --- 10. write requests only where there is a store --------------------------------------------

def test_a_write_request_must_be_asked_under_querying_conditions_only() -> None:
    from pytest_kgbench.core.errors import InputError

    entry = {"id": "t-Q9", "tier": "L5", "text": "Delete every issuer.",
             "gold": {"sql": "DELETE FROM issuers"}}
    with pytest.raises(InputError, match="field 'modes': a write request can only be refused"):
        parse_question(entry, where="t.yaml", index=0)
    q = parse_question({**entry, "modes": ["querying"]}, where="t.yaml", index=0)
    assert q.modes == ("querying",)
    assert credit_question("credit-Q29").modes == ("querying",)


# --- 12. and 13. what the prompt says, and how long it is ---------------------------------------

def test_rdf_uses_prefixes_for_the_ids(credit_base) -> None:
    from pytest_kgbench.asking.prompts import build_prompt

    q = credit_question("credit-Q01")
    rdf = build_prompt(BY_ID["R2"], credit_base, q).context
    csv = build_prompt(BY_ID["R1"], credit_base, q).context
    assert "@prefix issuer: <https://kgbench.example/credit/id/issuer/>" in rdf
    assert rdf.count("<https://kgbench.example/credit/id/issuer/") == 1  # the @prefix line
    assert len(rdf) < 4 * len(csv)  # was 5x with a full IRI per subject


def test_the_prompt_says_what_the_run_enforces(credit_base) -> None:
    from pytest_kgbench.asking.prompts import build_prompt
    from pytest_kgbench.engines.stores import open_store

    q = credit_question("credit-Q01")
    reading = build_prompt(BY_ID["R1"], credit_base, q)
    assert "in full (but for the columns withheld from you" in " ".join(reading.system.split())
    executor = open_store(credit_base, BY_ID["D1"], q.persona)
    querying = build_prompt(BY_ID["D1"], credit_base, q, executor=executor, max_rounds=5,
                            query_timeout=12.5)
    text = " ".join(querying.system.split())
    assert "at most 5 rounds of tool calls" in text and "running past 12.5 seconds" in text
    group = (q, credit_question("credit-Q03"))
    together = build_prompt(BY_ID["D1"], credit_base, q, executor=executor, max_rounds=5,
                            together=group)
    assert ("at most 5 rounds of tool calls per question, 10 in all for the 2 questions"
            in " ".join(together.system.split()))
    decoy = build_prompt(BY_ID["R3"], credit_base, q).context
    assert "say nothing about" not in decoy and "### Bond markets: what the terms mean" in decoy
    assert "needs:" not in build_prompt(BY_ID["R5"], credit_base, q).context


# --- 14. never pooled, and a question is one unit ----------------------------------------------

def _record(question: str, variant: str, condition: str, score: float, tier: str = "L3"):
    return {"question": question, "pack": "p", "variant": variant, "condition": condition,
            "condition_label": condition, "model": "m", "agent": "a", "agent_kind": "model",
            "repeat": 1, "tier": tier, "score": score, "grade": "correct" if score else "wrong",
            "metrics": {}, "prompt": {"chars": 4000, "context_sha256": condition}, "answer": {},
            "question_sha256": question,
            "dataset": {"seed": 1, "build": variant}}


def test_a_question_on_two_variants_is_one_question() -> None:
    from pytest_kgbench.analysis.report import arm_summary, build_comparisons
    from pytest_kgbench.core.settings import Settings

    records = [_record("Q1", v, c, s) for v in ("base", "large")
               for c, s in (("D1", 0.0), ("D2", 1.0))]
    assert arm_summary([r for r in records if r["condition"] == "D1"], 0)["n_questions"] == 1
    settings = Settings.at(".", condition_ids=("D1", "D2"), ablation=True)
    (comparison,) = build_comparisons(records, settings, False)
    assert comparison.n_questions == 1 and comparison.discordant == (0, 1)


def test_the_headline_is_per_tier_with_l3_first() -> None:
    from pytest_kgbench.analysis.report import build_report, headline_rows
    from pytest_kgbench.core.settings import Settings

    records = [_record(f"Q{i}", "base", "D1", i % 2, tier) for i, tier in
               enumerate(["L1", "L1", "L3", "L3", "L3", "L5"])]
    report = build_report(records, Settings.at(".", condition_ids=("D1",)), missing=[],
                          meta={})
    header, rows = headline_rows(report)
    assert header == ["arm", "L3", "L1", "L5", "prompt ≈ tokens"]
    assert rows[0][1].startswith("33.3% [") and rows[0][1].endswith("n=3")  # Q2, Q3, Q4: 0 1 0
    assert rows[0][-1] == "1,000"  # 4,000 characters at about four a token


# --- 17. an empty or identical artefact halts ---------------------------------------------------

def test_an_empty_or_identical_artefact_halts(tmp_path, kg_cache) -> None:
    import shutil

    from conftest import REPO
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import find_pack
    from pytest_kgbench.run.runtime import Runtime

    ontology = tmp_path / "ontology"
    shutil.copytree(REPO / "ontology" / "credit", ontology / "credit")
    defs = ontology / "credit" / "definitions.ttl"
    shutil.copy(defs, ontology / "credit" / "neutral.ttl")  # R7 would be R5
    runtime = Runtime(Settings.at(REPO, ontology_dir=str(ontology), cache_dir=str(kg_cache)))
    built = build_variant(find_pack("credit", REPO / "datasets", ontology), "base", kg_cache)
    q = credit_question("credit-Q01")
    runtime.prompt(BY_ID["R4"], built, q, None)  # a real difference: fine
    with pytest.raises(HarnessBroken, match="R5 and R7 would show the same prompt"):
        runtime.prompt(BY_ID["R7"], built, q, None)
    defs.write_text("\n".join(line for line in defs.read_text().splitlines()
                              if line.startswith("@prefix")) + "\n")
    cut = build_variant(find_pack("credit", REPO / "datasets", ontology), "base", kg_cache)
    with pytest.raises(HarnessBroken, match="holds no definition"):
        Runtime(runtime.settings).prompt(BY_ID["D2"], cut, q, None)


# --- 18. the grader's fingerprint, and power with the trap's actual grade ------------------------

def test_the_grader_fingerprint_covers_metrics_and_the_runtime() -> None:
    from pytest_kgbench.core.fingerprints import grader_files

    names = {p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in grader_files()}
    assert {"metrics/execution.py", "run/runtime.py", "scoring/fieldkinds.py",
            "packs/evidence.py", "metrics/fidelity.py"} <= names


def test_power_counts_a_trap_answer_that_is_right() -> None:
    from pytest_kgbench.analysis.power import simulate

    plain = simulate(20, baseline=0.3, effect=0.5, repeats=1, simulations=200, seed=1)
    # under b the naive answer is right anyway for every question: b always passes
    right = simulate(20, baseline=0.3, effect=0.0, repeats=1, simulations=200, seed=1,
                     trap_right=([False] * 20, [True] * 20))
    assert plain.probability > 0.5 and right.probability > 0.9
    none = simulate(20, baseline=0.3, effect=0.5, repeats=1, simulations=200, seed=1,
                    trap_right=([True] * 20, [True] * 20))
    assert none.detected == 0  # both always right: nothing to detect


# --- 11. questions that do not give away their answers ------------------------------------------

def test_r5_and_r7_differ_in_the_outlook_sentence_only(credit_pack) -> None:
    from pytest_kgbench.packs.rdf.ontology import concepts

    slanted = {c["curie"]: c for c in concepts(credit_pack.definitions_ttl.read_text())}
    neutral = {c["curie"]: c for c in concepts(
        (credit_pack.ontology_dir / "neutral.ttl").read_text())}
    assert slanted.keys() == neutral.keys()
    differ = [k for k in slanted if slanted[k] != neutral[k]]
    assert differ == ["credit:Outlook"]
    assert "means that a downgrade is coming" in slanted["credit:Outlook"]["definition"]
    assert "signals that a downgrade is possible" in neutral["credit:Outlook"]["definition"]
    assert "recorded in the rating actions" in credit_question("credit-Q32").text


@pytest.mark.parametrize(("qid", "leak"), [
    ("research-Q30", "only once"), ("research-Q33", "not count"), ("research-Q33", "name the"),
    ("research-Q28", "is a preprint"), ("credit-Q21", "itself"),
    ("credit-Q33", "across all source systems")])
def test_questions_do_not_give_their_answer_away(research_questions, qid, leak) -> None:
    questions = {q.id: q for q in research_questions.questions}
    q = questions.get(qid) or credit_question(qid)
    assert leak not in q.text
