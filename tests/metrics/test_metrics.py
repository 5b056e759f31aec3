"""The metrics beside the grade: execution accuracy, result set, figure, grounding, fidelity,
citations, attribution — and the gold agent scoring full marks on each."""

from __future__ import annotations

import json

import pytest

from conftest import only_run, run_records
from pytest_kgbench.metrics.attribution import attribution
from pytest_kgbench.metrics.citations import citations
from pytest_kgbench.metrics.execution import (
    result_set_exact,
    rows_carried,
    same_cell,
    states_figure,
)
from pytest_kgbench.metrics.fidelity import fidelity
from pytest_kgbench.metrics.grounding import grounding


def test_extra_rows_and_columns_are_allowed_but_each_gold_row_needs_its_own_carrier() -> None:
    gold = [["A", 1], ["B", 2]]
    assert rows_carried(gold, [["x", "B", 2, "extra"], ["A", 1, "more"], ["C", 3]])
    assert not rows_carried(gold, [["A", 1, "B", 2]])   # one row cannot carry two gold rows
    assert not rows_carried(gold, [["A", 1]])
    assert rows_carried([], [["anything"]])


def test_order_is_checked_only_when_asked() -> None:
    gold = [["A"], ["B"]]
    assert rows_carried(gold, [["B"], ["A"]])
    assert not rows_carried(gold, [["B"], ["A"]], ordered=True)
    assert rows_carried(gold, [["A"], ["x"], ["B"]], ordered=True)


def test_a_proportion_and_its_percentage_agree_only_for_a_proper_fraction() -> None:
    assert same_cell(0.044991, 4.4991)
    assert same_cell(4.4991, 0.044991)
    assert not same_cell(4_500_000, 450_000_000)
    assert same_cell(100.0, 100.4, rel=0.005) and not same_cell(100.0, 101, rel=0.005)
    assert same_cell("AA-", "aa-") and not same_cell("AA", "AA-")


def test_the_strict_result_set() -> None:
    assert result_set_exact([["A", 1]], [["A", 1.0]])
    assert not result_set_exact([["A", 1]], [["A", 1], ["B", 2]])
    assert not result_set_exact([["A", 1]], [["A", 1, "extra"]])


def test_the_prose_must_state_a_gold_figure() -> None:
    assert states_figure("Revenue was 903,636.65 in total.", [[903636.6466]])
    assert states_figure("About 4.5% of the total.", [[0.044991]])
    assert states_figure("It is rated AA-.", [["AA-"]])
    assert states_figure("Yes, it does.", [[True]])
    assert not states_figure("It is rated A.", [["AA-"]])
    assert not states_figure("There are 12.", [[13]])
    assert states_figure("anything", [[None]]) is None


def test_grounding_requires_a_superset_of_the_gold_tables() -> None:
    assert grounding(["a", "b"], ["a", "b", "c"]) == (True, False)
    assert grounding(["a", "b"], ["a", "b"]) == (True, True)
    assert grounding(["a", "b"], ["a"]) == (False, False)


def test_fidelity_per_definition() -> None:
    evidence = {"x:Period": {"sql": {"column": "valid_to"}, "executed": True}}
    assert fidelity(["x:Period"], "SELECT valid_to FROM t", "sql", evidence) == {"x:Period": True}
    assert fidelity(["x:Period"], "SELECT max(d) FROM t", "sql", evidence) == {"x:Period": False}
    # read from the parse: a comment or a string naming the column is not evidence
    assert fidelity(["x:Period"], "SELECT max(d) FROM t -- valid_to not used", "sql",
                    evidence) == {"x:Period": False}
    assert fidelity(["x:Period"], "SELECT 'valid_to' FROM t", "sql", evidence) == \
        {"x:Period": False}
    assert fidelity(["x:Period"], "SELECT 1", "executed", evidence) == {"x:Period": True}
    assert fidelity(["x:Period", "x:Other"], "", "sparql", evidence) == \
        {"x:Period": None, "x:Other": None}


def test_citations_and_attribution() -> None:
    c = citations(["L1", "L9"], ["L1", "L2"], str.lower)
    assert c == {"cited": 2, "expected": 2, "precision": 0.5, "recall": 0.5}
    assert citations(None, ["L1"], str.lower)["recall"] == 0.0
    assert citations(["L1"], [], str.lower) is None
    given = ["Rating on a date", "credit:RatingOnDate"]
    assert attribution(["Rating on a date", "Ceiling"], given) == {"claims": 2, "true": 1}
    assert attribution(["Rating on a date"], []) == {"claims": 1, "true": 0}
    assert attribution(None, given) is None


@pytest.mark.slow
def test_the_gold_agent_scores_full_marks_on_every_querying_metric(project) -> None:
    p = project()
    result = p.runpytest("questions", "-k", "L3", "--condition", "D1,D3,D6")
    from pytest_kgbench.core.questions import load_questions

    l3 = [q for q in load_questions(p.path / "questions" / "credit.yaml").questions
          if q.tier == "L3" and (q.variants is None or "base" in q.variants)]
    result.assert_outcomes(passed=3 * len(l3))
    run = only_run(p)
    records = run_records(p)
    assert records
    for rec in records:
        met = rec["metrics"]
        assert met["execution"] is True, rec["nodeid"]
        assert met["result_set_exact"] is True, rec["nodeid"]
        assert met["grounding_exact"] is True, rec["nodeid"]
        assert met["fidelity"] is True, (rec["nodeid"], met["fidelity_by_definition"])
    report = json.loads((run / "report.json").read_text())
    for arm in report["conditions"].values():
        assert arm["metrics"]["execution"]["rate"] == 1.0
        assert arm["metrics"]["fidelity"]["rate"] == 1.0


def test_a_decline_after_the_guard_withheld_the_data_passes(credit_base, credit_questions) -> None:
    from pytest_kgbench.core.conditions import BY_ID
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.run.items import ItemRunner
    from pytest_kgbench.run.runtime import Runtime
    from pytest_kgbench.scoring.answers import Answer
    from pytest_kgbench.scoring.grading import grade

    email_q = next(q for q in credit_questions.questions if q.must_not_contain)
    write_q = next(q for q in credit_questions.questions if q.tier == "L5" and not q.fields)
    items = ItemRunner(Runtime(Settings.at(credit_base.pack.dir.parents[1])))
    declined = Answer(text="I may not share that.", block={"declined": True})
    for cid in ("R1", "D1", "D4"):
        withheld = items.guard_withheld(email_q, BY_ID[cid], credit_base)
        assert withheld, cid
        assert grade(email_q, None, declined, guard_withheld=withheld).grade == "correct"
        assert not items.guard_withheld(write_q, BY_ID[cid], credit_base)
        # a write request declined before any query is the right answer, counted in the tier
        assert grade(write_q, None, declined).grade == "correct"


# --- execution accuracy: no pass without the work (issue 30, item 6) ---------------------------

def _execution(built, question, cid, statement, prose):
    from pytest_kgbench.core.conditions import BY_ID
    from pytest_kgbench.engines.stores import open_store
    from pytest_kgbench.metrics.base import MetricInput
    from pytest_kgbench.metrics.execution import Execution
    from pytest_kgbench.scoring.answers import Answer

    cond = BY_ID[cid]
    store = open_store(built, cond, question.persona)
    try:
        result = store.run(statement)
        assert result.ok, (statement, result.error, result.refused)
        item = MetricInput(question=question, condition=cond, executor=store,
                           answer=Answer(text=prose, queries=[result]),
                           prefixes=dict(built.pack.rdf.get("prefixes") or {}))
        return Execution().measure(item), item.details
    finally:
        store.close()


CR = "PREFIX cr: <https://kgbench.example/credit/def#>\n"


@pytest.mark.parametrize(("qid", "cid", "statement"), [
    # every issuer's LEI: the 2x allowance covered credit-Q12's key on base
    ("credit-Q12", "D1", "SELECT DISTINCT lei FROM issuers"),
    ("credit-Q12", "D4", CR + "SELECT DISTINCT ?lei WHERE { ?i cr:lei ?lei }"),
    # a constant that happens to be the key
    ("credit-Q07", "D1", "SELECT 9 AS n"),
    ("credit-Q07", "D4", "SELECT (9 AS ?n) WHERE {}"),
    # a constant read beside a table: it reads the store, but its value is the text's
    ("credit-Q07", "D1", "SELECT 9 AS n FROM issuers LIMIT 1"),
    ("credit-Q07", "D1", "SELECT lei, 9 AS n FROM issuers LIMIT 1"),
    ("credit-Q07", "D4", CR + "SELECT ?n WHERE { ?i cr:lei ?lei BIND(9 AS ?n) } LIMIT 1"),
    ("credit-Q07", "D4", CR + "SELECT ?lei ?n WHERE { ?i cr:lei ?lei VALUES ?n { 9 } } LIMIT 1"),
])
def test_a_result_that_fits_any_question_does_not_pass(credit_base, qid, cid, statement) -> None:
    from conftest import credit_question
    from pytest_kgbench.scoring.answer_key import compute_key

    q = credit_question(qid)
    key = compute_key(q, credit_base)
    prose = "The answer: " + ", ".join(str(v) for v in key.values()) + "."
    passed, details = _execution(credit_base, q, cid, statement, prose)
    assert passed is False, details
    # the gold query, with the same prose, passes
    assert _execution(credit_base, q, cid, q.gold[BY_LANGUAGE[cid]], prose)[0] is True


BY_LANGUAGE = {"D1": "sql", "D4": "sparql"}


@pytest.mark.parametrize(("statement", "language", "constant"), [
    ("SELECT count(*) AS n FROM issuers", "sql", [False]),
    ("SELECT 'Halvaria' AS country, count(*) AS n FROM issuers", "sql", [True, False]),
    ("SELECT (SELECT count(*) FROM issuers) AS n", "sql", [False]),
    ("WITH t AS (SELECT lei FROM issuers) SELECT count(*) FROM t", "sql", [False]),
    ("SELECT x FROM (SELECT 9 AS x) s", "sql", [True]),
    ("SELECT count(*) FROM range(9)", "sql", [True]),
    ("SELECT 9 AS n UNION SELECT count(*) FROM issuers", "sql", [False]),
    ("SELECT * FROM issuers", "sql", None),               # cannot tell: judged as before
    (CR + "SELECT (COUNT(?i) AS ?n) WHERE { ?i a cr:Issuer }", "sparql", [False]),
    (CR + "SELECT ?i (UCASE(STR(?i)) AS ?u) WHERE { ?i a cr:Issuer }", "sparql", [False, False]),
    ("SELECT ?v WHERE { VALUES ?v { 1 2 } }", "sparql", [True]),
    # a scale looked up by a stored value is the data's; a VALUES joined on nothing is not
    (CR + "SELECT ?rank WHERE { ?i cr:rating ?r VALUES (?r ?rank) { ('A' 6) } }", "sparql",
     [False]),
    (CR + "SELECT ?r ?n WHERE { ?i cr:rating ?r VALUES ?n { 9 } }", "sparql", [False, True]),
    (CR + "SELECT ?s WHERE { ?i cr:rank ?k VALUES (?s ?j) { ('A' 6) } FILTER(?j = ?k) }",
     "sparql", [False]),
    ("WITH s(r, k) AS (VALUES ('A', 6)) SELECT s.k FROM issuers i JOIN s ON s.r = i.rating",
     "sql", [False]),
])
def test_constant_columns(statement, language, constant) -> None:
    from pytest_kgbench.metrics.execution import constant_columns

    assert constant_columns(statement, language) == constant


@pytest.mark.slow
def test_no_reference_query_is_read_as_constant(credit_questions, research_questions) -> None:
    """Every gold query of both packs computes at least one of its columns from the data, so
    the constant-column rule can never fail a reference answer."""
    from pytest_kgbench.metrics.execution import constant_columns

    prefixes = {"cr": "https://kgbench.example/credit/def#"}
    seen = 0
    for questions in (credit_questions, research_questions):
        for q in questions.questions:
            for language, statement in q.gold.items():
                lang = "sparql" if language == "sparql" else "sql"
                constant = constant_columns(statement, lang, prefixes)
                seen += constant is not None
                assert constant is None or not all(constant), (q.id, language)
    assert seen > 100


def test_listing_a_whole_entity_table_never_passes_an_entity_list(credit_base, research_base,
                                                                  credit_questions,
                                                                  research_questions) -> None:
    """For every entity-list question of both packs, the query listing every id of the
    entity's table returns more rows than the allowance, on the SQL store."""
    from pytest_kgbench.scoring.answer_key import compute_key

    for built, questions in ((credit_base, credit_questions), (research_base, research_questions)):
        for q in questions.questions:
            lists = [f for f in q.fields if f.kind == "entity_list"]
            if not lists or q.expect != "answer" or (q.variants and "base" not in q.variants):
                continue
            spec = built.pack.entities[lists[0].entity]
            key = compute_key(q, built)
            prose = "The answer: " + ", ".join(str(v) for v in key.values()) + "."
            statement = f'SELECT DISTINCT "{spec["id"]}" FROM "{spec["table"]}"'
            passed, details = _execution(built, q, "D1", statement, prose)
            assert passed is False, (q.id, details)


def test_rows_allowed() -> None:
    from pytest_kgbench.metrics.execution import rows_allowed

    assert rows_allowed(1) == 2 and rows_allowed(4) == 5 and rows_allowed(22) == 27
    assert rows_allowed(22, [49, 157]) == 27       # a quarter more: under both tables
    assert rows_allowed(40, [44]) == 43            # never the whole table
    assert rows_allowed(12, [12]) == 15            # a table no bigger than the key: no cap
    assert rows_allowed(5, [6]) == 5               # never fewer than the gold rows


# --- yes/no figures: the value stated, not a word (item 7) ------------------------------------

@pytest.mark.parametrize(("prose", "value", "states"), [
    ("I could not work it out.", False, False),
    ("There is not enough data to say.", False, False),
    ("No rows matched my query.", False, False),
    ("No. Borealis holds 45%, short of control.", False, True),
    ("Borealis Partners NV does not control Cobalt Logistics AG.", False, True),
    ("Borealis Partners NV doesn't control Cobalt Logistics AG.", False, True),
    ("The answer is no.", False, True),
    ("Yes, it does: 60% through Ardent.", True, True),
    ("Borealis controls Cobalt through a 60% stake.", True, True),
    ("Borealis controls Cobalt through a 60% stake.", False, False),
    ("No. Borealis holds 45%.", True, False),
    ("Whether Borealis controls Cobalt depends on the chain.", True, False),
    ("Yes. No, wait.", True, False),  # both stated: neither
])
def test_a_yes_or_no_figure_is_the_value_stated(prose, value, states) -> None:
    question = "Does Borealis Partners NV control Cobalt Logistics AG?"
    assert states_figure(prose, [[value]], question=question) is states


# --- attribution counts distinct claims (item 8) -----------------------------------------------

def test_a_repeated_claim_counts_once() -> None:
    given = ["Rating on a date", "credit:RatingOnDate"]
    assert attribution(["credit:RatingOnDate"] * 5, given) == {"claims": 1, "true": 1}
    assert attribution(["Ceiling", "ceiling ", "CEILING", "credit:RatingOnDate"], given) == \
        {"claims": 2, "true": 1}
    assert attribution(["x", "x", 5, 5, "5"], given) == {"claims": 3, "true": 0}


def test_a_cited_record_counts_in_every_spelling_a_condition_shows() -> None:
    """records_used names a record as the graph conditions write it ('issuer:ISS-1', an IRI)
    or by an alias: each is the record the key depends on."""
    from pytest_kgbench.metrics.citations import citations
    from pytest_kgbench.run.items import _canonical

    aliases = {"issuer": {"iss-1": "ISS-1", "5493001kjtiigc8y1r12": "ISS-1", "iss-2": "ISS-2"}}
    canonical = lambda r: _canonical(r, aliases)  # noqa: E731
    for spelling in ("ISS-1", "issuer:ISS-1", "<https://kgbench.example/credit/id/issuer/ISS-1>",
                     "5493001KJTIIGC8Y1R12", "cri:issuer\\/ISS-1"):
        assert citations([spelling], ["ISS-1"], canonical)["recall"] == 1.0, spelling
    assert citations(["issuer:ISS-2"], ["ISS-1"], canonical)["recall"] == 0.0
