"""The TEXT2SPARQL'25 challenge's per-question scores, reproduced: set precision, recall and F
over result sets, and nDCG for questions whose order matters.

Read from the challenge's client (AKSW/text2sparql-client at 24ccd99, 2025-05-26, the version
the challenge scored with), not guessed:

- `DBpediaDict2PytrecDict.tranform` (utils/evaluation_metrics.py) turns a SPARQL JSON result
  into a "result set": every bound value of every variable of every row, as its string, with
  weight 1 — column, row, datatype, language and multiplicity are dropped. An ASK result is
  `{"true": 1}` when true and `{"true": 0}` when false. A query that failed (any exception,
  the endpoint's error or its 180 s timeout in utils/query_rdf.py `get_json`) is the empty set.
- `Evaluation.evaluate` scores the sets with pytrec_eval (trec_eval 9): `set_P`, `set_recall`,
  `set_F` per question; the true set is the qrels (a value is relevant when its weight is
  above 0), the predicted set the run (every value retrieved, score 1).
- `order_matters.py`: questions whose `features` list RESULT_ORDER_MATTERS get `ndcg` too, and
  the average gains `set_F_ndcg` (nDCG where given, else set_F, averaged — over the
  "average" entry too, whose ndcg is in the results by then: a quirk kept as published).

trec_eval's nDCG ranks the run by score and breaks ties by document id, descending (every
score is 1 here, so the ranking is by value, descending), with gain 1 for a relevant value
and a discount of log2(rank + 1). The averages are numpy's mean (pairwise summation), so the
last bit agrees too. Pure module: no pytest.
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import Metric, MetricInput

ResultSet = dict[str, int]
SET_METRICS = ("set_P", "set_recall", "set_F")


def lexical(value: Any) -> str:
    """A cell as the string the challenge's result sets hold (the SPARQL JSON `value`): an
    IRI or a string as it is, a boolean as true/false, a number, date or time in its lexical
    form as far as the executor's cell keeps it. The executor's cells are Python values (an
    xsd:decimal 3 arrives as the float 3.0): a whole-number float is written as the integer,
    as the challenge's endpoint wrote whole decimals ("3", "-4")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)


def result_set(columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
               ask: bool | None = None) -> ResultSet:
    """The client's `tranform`: every bound value of every column, weight 1 (an ASK result,
    `ask`, is {"true": 1 or 0})."""
    if ask is not None:
        return {"true": 1 if ask else 0}
    out: ResultSet = {}
    for j in range(len(columns)):
        for row in rows:
            if j < len(row) and row[j] is not None:
                out[lexical(row[j])] = 1
    return out


def from_query_result(result: Any) -> ResultSet:
    """A QueryResult's result set; a failed, refused or timed-out query is the empty set (the
    client's `get_json` returns an empty result on any error)."""
    if result is None or not result.ok:
        return {}
    if list(result.columns) == ["ask"] and len(result.rows) == 1 and \
            isinstance(result.rows[0][0], bool):
        return result_set([], [], ask=result.rows[0][0])
    return result_set(result.columns, result.rows)


def set_scores(predicted: Mapping[str, int], truth: Mapping[str, int]) -> dict[str, float]:
    """trec_eval's set_P, set_recall and set_F (beta 1) for one question."""
    relevant = {d for d, rel in truth.items() if rel > 0}
    retrieved = len(predicted)
    hits = sum(1 for d in predicted if d in relevant)
    precision = hits / retrieved if retrieved else 0.0
    recall = hits / len(relevant) if relevant else 0.0
    f = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"set_P": precision, "set_recall": recall, "set_F": f}


def ndcg(predicted: Mapping[str, int], truth: Mapping[str, int]) -> float:
    """trec_eval's ndcg: the run ranked by score (all 1), ties by value descending."""
    ranked = sorted(predicted, key=lambda d: (predicted[d], d.encode()), reverse=True)
    gains = sorted((rel for rel in truth.values() if rel > 0), reverse=True)
    dcg = sum(truth.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked)
              if truth.get(d, 0) > 0)
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    return dcg / ideal if ideal > 0 else 0.0


def question_scores(predicted: Mapping[str, int], truth: Mapping[str, int], *,
                    ordered: bool = False) -> dict[str, float]:
    """The challenge's scores of one question (ndcg only where its order matters)."""
    out = set_scores(predicted, truth)
    if ordered:
        out["ndcg"] = ndcg(predicted, truth)
    return out


def np_mean(values: Sequence[float]) -> float:
    """numpy's mean of float64 values, summed as numpy sums (pairwise, 8-way unrolled), so the
    average equals the published one to the last bit."""
    return _pairwise([float(v) for v in values]) / len(values) if values else 0.0


def _pairwise(a: list[float]) -> float:
    n = len(a)
    if n < 8:
        total = -0.0
        for x in a:
            total += x
        return total
    if n <= 128:
        r = a[:8]
        i = 8
        while i < n - (n % 8):
            for k in range(8):
                r[k] += a[i + k]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for x in a[i:]:
            total += x
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(a[:half]) + _pairwise(a[half:])


def evaluate(predicted: Mapping[str, Mapping[str, int]], truth: Mapping[str, Mapping[str, int]],
             ordered: Sequence[str] = ()) -> dict[str, Any]:
    """The client's `evaluate` output: per question (every question of `truth`; one missing
    from `predicted` scores as the empty set), and "average" of each metric over them, with
    `set_F_ndcg` when some question's order matters."""
    results: dict[str, Any] = {}
    for q, true_set in truth.items():
        results[q] = question_scores(predicted.get(q, {}), true_set, ordered=q in ordered)
    average = {m: np_mean([results[q][m] for q in truth]) for m in SET_METRICS}
    if any(q in truth for q in ordered):
        average["ndcg"] = np_mean([results[q]["ndcg"] for q in truth if q in ordered])
        # order_matters.combine_metrics averages over every entry of the results, the
        # "average" entry (holding the mean ndcg by then) included: statistics.fmean
        combined = [results[q].get("ndcg", results[q]["set_F"]) for q in truth]
        average["set_F_ndcg"] = statistics.fmean([*combined, average["ndcg"]])
    results["average"] = average
    return results


class ChallengeF(Metric):
    """The challenge's set_F of the item's last query against the gold query's result, as
    result sets (the client's scoring). Not measured when either result was capped: the
    score needs the whole result set."""

    name = "challenge_set_f"
    title = "Challenge set-F"
    help = ("TEXT2SPARQL'25's per-question set-F: the values of the last query's result "
            "against the gold query's, as sets (metrics/text2sparql.py)")
    order = 60

    def measure(self, item: MetricInput) -> float | None:
        if not item.queried or item.condition.language != "sparql":
            return None
        gold = item.gold
        last = item.last
        if gold is None:
            return None
        for result in (gold, last):
            if result is not None and (result.truncated or not result.row_count_exact
                                       or (result.row_count or 0) > len(result.rows)):
                item.details["challenge_set_f"] = "a result was capped: not measured"
                return None
        scores = set_scores(from_query_result(last), from_query_result(gold))
        return round(scores["set_F"], 6)

    def summarise(self, values: Sequence[float]) -> dict[str, Any] | None:
        if not values:
            return None
        return {"mean": round(np_mean(values), 6), "n": len(values)}

    def cell(self, summary: Mapping[str, Any]) -> str:
        return f"{summary['mean']:.3f} ({summary['n']})"


METRICS = (ChallengeF(),)
