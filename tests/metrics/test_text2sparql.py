"""The TEXT2SPARQL'25 challenge's metric (metrics/text2sparql.py) and the importer's formats
(run/importers.py). The unit tests need nothing external; the reproduction of the published
per-question scores reads the challenge's files from KGBENCH_EXTERNAL and is skipped, with the
reason, without them."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from pytest_kgbench.core.errors import InputError, KgbenchError
from pytest_kgbench.engines import QueryResult
from pytest_kgbench.metrics import text2sparql as t2s
from pytest_kgbench.run.importers import FORMATS, SqlLines, Text2Sparql, register, split_qname

REPO = Path(__file__).resolve().parents[2]
EXTERNAL = Path(os.environ["KGBENCH_EXTERNAL"]) if os.environ.get("KGBENCH_EXTERNAL") else None
RESULTS = EXTERNAL / "text2sparql25-results" if EXTERNAL else None
needs_results = pytest.mark.skipif(
    RESULTS is None or not (RESULTS / "ck25_true_result_set.json").is_file(),
    reason="the challenge's published results are external: set KGBENCH_EXTERNAL to the folder "
    "holding text2sparql25-results")


def test_set_scores_follow_trec_eval() -> None:
    truth = {"a": 1, "b": 1, "c": 1, "d": 1}
    s = t2s.set_scores({"a": 1, "b": 1, "x": 1}, truth)
    assert s["set_P"] == 2 / 3 and s["set_recall"] == 0.5
    assert s["set_F"] == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert t2s.set_scores({}, truth) == {"set_P": 0.0, "set_recall": 0.0, "set_F": 0.0}
    # an empty reference, and an ASK whose answer is false, have nothing relevant: all 0
    assert t2s.set_scores({"a": 1}, {}) == {"set_P": 0.0, "set_recall": 0.0, "set_F": 0.0}
    assert t2s.set_scores({"true": 0}, {"true": 0})["set_F"] == 0.0
    assert t2s.set_scores({"true": 1}, {"true": 1})["set_F"] == 1.0


def test_result_set_is_every_bound_value_as_text() -> None:
    rows = [["http://x/a", 3, None], ["http://x/b", 3, True]]
    assert t2s.result_set(["s", "n", "flag"], rows) == {
        "http://x/a": 1, "http://x/b": 1, "3": 1, "true": 1}
    ask = QueryResult(language="sparql", statement="ASK {}", columns=["ask"], rows=[[False]])
    assert t2s.from_query_result(ask) == {"true": 0}
    failed = QueryResult(language="sparql", statement="x", error="parse error")
    assert t2s.from_query_result(failed) == {}
    assert t2s.from_query_result(None) == {}


def test_ndcg_ranks_ties_by_value_descending() -> None:
    # every score is 1: trec_eval ranks by document id, descending: c, b, a
    truth = {"a": 1, "c": 1}
    got = t2s.ndcg({"a": 1, "b": 1, "c": 1}, truth)
    ideal = 1 + 1 / math.log2(3)
    assert got == pytest.approx((1 + 1 / math.log2(4)) / ideal)  # c at 1, a at 3
    assert t2s.ndcg({"z": 1, "a": 1}, {"a": 1}) == pytest.approx(1 / math.log2(3))
    assert t2s.ndcg({}, truth) == 0.0


def test_the_mean_is_numpys_to_the_last_bit() -> None:
    np = pytest.importorskip("numpy")
    import random

    rng = random.Random(7)
    for n in (0, 1, 7, 8, 9, 50, 128, 129, 300):
        values = [rng.random() / 3 for _ in range(n)]
        expected = float(np.mean(np.array(values, dtype=np.float64))) if values else 0.0
        assert t2s.np_mean(values) == expected, n


def test_evaluate_has_the_clients_shape_and_its_set_f_ndcg_quirk() -> None:
    truth = {"q:1-en": {"a": 1}, "q:2-en": {"b": 1, "c": 1}}
    out = t2s.evaluate({"q:1-en": {"a": 1}, "q:2-en": {"c": 1}}, truth, ["q:2-en"])
    assert set(out) == {"q:1-en", "q:2-en", "average"}
    assert "ndcg" in out["q:2-en"] and "ndcg" not in out["q:1-en"]
    assert out["average"]["set_F"] == (1.0 + out["q:2-en"]["set_F"]) / 2
    # the client averages over the average entry's ndcg too (order_matters.combine_metrics)
    nd = out["q:2-en"]["ndcg"]
    assert out["average"]["set_F_ndcg"] == pytest.approx((1.0 + nd + nd) / 3)
    missing = t2s.evaluate({}, truth)  # a question the system did not answer scores 0
    assert missing["q:1-en"]["set_F"] == 0.0 and "set_F_ndcg" not in missing["average"]


@needs_results
@pytest.mark.parametrize("team", ["WSE", "MIPT"])
def test_the_published_result_sets_give_the_published_scores_exactly(team: str) -> None:
    from pytest_kgbench.run.importers import ordered_qnames

    truth = json.loads((RESULTS / "ck25_true_result_set.json").read_text())
    sets = json.loads((RESULTS / team / "ck25_system_result_set.json").read_text())
    published = json.loads((RESULTS / team / "ck25_eval.json").read_text())
    ordered = ordered_qnames(EXTERNAL / "ck25-dataset" / "questions.yml")
    assert ordered == ["ck25:27-en", "ck25:37-en"]
    assert t2s.evaluate(sets, truth, ordered) == published  # every score, every bit


@needs_results
@pytest.mark.parametrize("team", ["IIS-Q", "INFAI"])
def test_the_other_published_evaluations_average_as_published(team: str) -> None:
    # no result sets were published for these two: the averages of their per-question scores
    published = json.loads((RESULTS / team / "ck25_eval.json").read_text())
    per_question = [v for k, v in published.items() if k != "average"]
    assert len(per_question) == 50
    for metric in ("set_P", "set_recall", "set_F"):
        assert t2s.np_mean([v[metric] for v in per_question]) == published["average"][metric]


class _Q:
    def __init__(self, qid: str) -> None:
        self.id = qid


def test_text2sparql_format_maps_qnames_to_questions(tmp_path: Path) -> None:
    questions = [_Q("ck25-1"), _Q("ck25-2"), _Q("ck25-3")]
    path = tmp_path / "answers.json"
    path.write_text(json.dumps([{"qname": "ck25:2-en", "query": "ASK {}"},
                                {"qname": "ck25:1-en", "query": "SELECT * {}"}]))
    preds = Text2Sparql().read(path, questions, "ck25")
    assert [(p.question, p.statement, p.source) for p in preds] == [
        ("ck25-1", "SELECT * {}", "ck25:1-en"), ("ck25-2", "ASK {}", "ck25:2-en"),
        ("ck25-3", None, "(no answer)")]
    assert split_qname("ck25:12-en") == ("ck25", "12", "en")
    path.write_text(json.dumps([{"qname": "ck25:9-en", "query": "x"}]))
    with pytest.raises(InputError, match="ck25:9-en names no question"):
        Text2Sparql().read(path, questions, "ck25")
    path.write_text(json.dumps([{"qname": "ck25:1-en", "query": "x"}] * 2))
    with pytest.raises(InputError, match="a second time"):
        Text2Sparql().read(path, questions, "ck25")
    path.write_text(json.dumps([{"qname": "nonsense", "query": "x"}]))
    with pytest.raises(InputError, match="is not <prefix>:<id>-<lang>"):
        Text2Sparql().read(path, questions, "ck25")


def test_sql_lines_format_reads_one_query_per_line(tmp_path: Path) -> None:
    questions = [_Q("p-1"), _Q("p-2")]
    path = tmp_path / "pred.sql"
    path.write_text("SELECT 1\nSELECT 2\t----- bird -----\tcalifornia_schools\n\n")
    preds = SqlLines().read(path, questions, "p")
    assert [(p.question, p.statement, p.source) for p in preds] == [
        ("p-1", "SELECT 1", "line 1"), ("p-2", "SELECT 2", "line 2")]
    path.write_text("SELECT 1\n")
    with pytest.raises(InputError, match="1 lines for the 2 questions"):
        SqlLines().read(path, questions, "p")


def test_formats_are_a_registry() -> None:
    assert {"text2sparql", "sql-lines"} <= set(FORMATS)
    with pytest.raises(KgbenchError, match="exists already"):
        register(Text2Sparql())


@pytest.mark.slow
def test_import_makes_a_run_folder_show_reads(tmp_path: Path, kg_cache: Path, capsys) -> None:
    """Two credit answers in the text2sparql format: the gold SPARQL of credit-Q01 and a wrong
    query for credit-Q02; the rest unanswered. Graded by the plugin as a replay."""
    import yaml

    from pytest_kgbench.cli import main

    questions = yaml.safe_load((REPO / "questions" / "credit.yaml").read_text())
    q1 = next(q for q in questions if q["id"] == "credit-Q01")
    answers = tmp_path / "TEAM" / "answers.json"
    answers.parent.mkdir()
    answers.write_text(json.dumps([
        {"qname": "credit:Q01-en", "query": q1["gold"]["sparql"]},
        {"qname": "credit:Q02-en", "query": "SELECT ?s WHERE { ?s ?p ?o } LIMIT 1"},
        {"qname": "credit:Q03-en", "query": "DELETE WHERE { ?s ?p ?o }"}]))
    code = main(["import", str(answers), "--format", "text2sparql", "--pack", "credit",
                 "--run-id", "imported", "--root", str(REPO), "--reports", str(tmp_path / "r"),
                 "--cache", str(kg_cache), "--query-timeout", "30"])
    out = capsys.readouterr().out
    assert code == 0, out
    run = tmp_path / "r" / "imported"
    records = {json.loads(line)["question"]: json.loads(line)
               for line in (run / "answers.jsonl").read_text().splitlines()}
    assert records["credit-Q01"]["grade"] == "correct"
    assert records["credit-Q01"]["model"] == "text2sparql:TEAM"
    assert records["credit-Q02"]["grade"] != "correct"
    assert records["credit-Q03"]["answer"]["queries"][0]["refused"]  # the guard, as for a model
    assert "credit-Q03: " in out
    unanswered = [r for q, r in records.items() if q not in ("credit-Q01", "credit-Q02",
                                                             "credit-Q03")]
    assert unanswered and all(r["grade"] != "correct" for r in unanswered)
    scores = json.loads((run / "text2sparql.json").read_text())
    assert scores["credit:Q01-en"]["set_F"] == 1.0
    assert scores["credit:Q02-en"]["set_F"] < 1.0
    assert main(["show", str(run)]) == 0
    assert "text2sparql:TEAM" in capsys.readouterr().out
