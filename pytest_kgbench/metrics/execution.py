"""Execution accuracy (the agent's last query carries every gold row, and the prose states a
gold figure), the strict result set beside it, and the figure in the prose."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from pytest_kgbench.fieldkinds import grouped, max_matching, norm_number
from pytest_kgbench.metrics.base import MetricInput, RateMetric

# --- cells ---------------------------------------------------------------------------------------

def _same_number(a: float, b: float, rel: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=max(abs_tol, 1e-9))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def same_cell(gold: Any, got: Any, *, rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """Two cells agree: a count (an integer gold value) exactly; other numbers within the
    tolerance — a proportion and its percentage only when one side is a proper fraction
    (0.045 ~ 4.5, but never 4.5 million ~ 450 million); anything else as text, ignoring case."""
    if gold is None or got is None:
        return gold is None and got is None
    if isinstance(gold, bool) or isinstance(got, bool):
        return str(gold).casefold() == str(got).casefold()
    g, o = norm_number(gold), norm_number(got)
    if g is not None and o is not None:
        if not (math.isfinite(g) and math.isfinite(o)):
            return False
        if _is_count(gold):
            return o == g
        if _same_number(g, o, rel, abs_tol):
            return True
        if abs(g) < 1 and _same_number(100 * g, o, rel, abs_tol):
            return True
        return abs(o) < 1 and _same_number(g, 100 * o, rel, abs_tol)
    return str(gold).strip().casefold() == str(got).strip().casefold()


def carries(gold_row: Sequence[Any], row: Sequence[Any], *, rel: float = 0.005,
            abs_tol: float = 0.0) -> bool:
    """A returned row carries a gold row when every gold value appears somewhere in it
    (extra columns are allowed)."""
    return all(any(same_cell(g, v, rel=rel, abs_tol=abs_tol) for v in row) for g in gold_row)


def _row_key(row: Sequence[Any]) -> tuple[str, ...]:
    return tuple(json.dumps(c, sort_keys=True, default=str) for c in row)


def rows_carried(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                 ordered: bool = False, rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """Each gold row is carried by a distinct returned row (extra rows allowed; see
    `too_many_rows`); with `ordered`, the carrying rows appear in the gold order.

    Unordered, it is a maximum matching (`fieldkinds.max_matching`, the `rows` kind's too):
    identical rows are grouped with their counts, so 1,200 identical rows are one pair of
    nodes, and nothing recurses."""
    if ordered:
        i = 0
        for row in got:
            if i < len(gold) and carries(gold[i], row, rel=rel, abs_tol=abs_tol):
                i += 1
        return i == len(gold)
    if not gold:
        return True
    if len(got) < len(gold):
        return False
    gold_rows, gold_counts = grouped(list(gold), _row_key)
    got_rows, got_counts = grouped(list(got), _row_key)
    pairs = [(i, j) for i, g in enumerate(gold_rows) for j, r in enumerate(got_rows)
             if carries(g, r, rel=rel, abs_tol=abs_tol)]
    return max_matching(gold_counts, got_counts, pairs) == len(gold)


def too_many_rows(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]]) -> bool:
    """Whether a result returns too much to count as answering: more than twice the gold
    rows (and more than one row beyond them). Carrying the gold rows among extra ones is
    allowed, but a query listing every issuer, or `range(10000)`, carries every list by
    listing everything."""
    return len(got) > max(2 * len(gold), len(gold) + 1)


def result_set_exact(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                     rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """The strict result-set equality: same number of rows and columns, rows matched one to one."""
    if len(gold) != len(got) or any(len(g) != len(o) for g, o in zip(gold, got)):
        return False
    return (rows_carried(gold, got, rel=rel, abs_tol=abs_tol)
            and rows_carried(got, gold, rel=rel, abs_tol=abs_tol))


_NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d[\d,_]*(?:\.(\d+))?(?:[eE][-+]?\d+)?%?")


def _stated(text: str) -> list[tuple[float, float]]:
    """Every number the prose states, with half a unit of its last stated digit (what
    rounding to its precision allows)."""
    out: list[tuple[float, float]] = []
    for m in _NUMBER.finditer(text or ""):
        n = norm_number(m.group(0))
        if n is None or not math.isfinite(n):
            continue
        decimals = len(m.group(1) or "") + (2 if m.group(0).endswith("%") else 0)
        out.append((n, 0.5 * 10.0 ** -decimals))
    return out


def states_figure(text: str, gold: Sequence[Sequence[Any]], *, rel: float = 0.005) -> bool | None:
    """Whether the prose (the answer without its closing block) states a gold value: a count
    exactly; another number when it agrees to the precision stated (within half a unit of its
    last digit, or the relative tolerance) and keeps the value's magnitude (off by at most
    half of it; a stated zero states only zero, so "0" never states 0.4); a proportion as its
    percentage or back (never by 1000); other values by inclusion, ignoring case. None when
    the gold result holds no value to state."""
    values = [v for row in gold for v in row if v is not None]
    if not values:
        return None
    lowered = (text or "").casefold()
    numbers = _stated(text)
    for value in values:
        if isinstance(value, bool):
            words = ("yes", "true") if value else ("no", "false", "not")
            if any(re.search(rf"\b{w}\b", lowered) for w in words):
                return True
            continue
        g = norm_number(value)
        if g is not None and not isinstance(value, str):
            if not math.isfinite(g):
                continue
            for n, half_unit in numbers:
                if _is_count(value):
                    if n == g:
                        return True
                    continue
                targets = [g]
                if abs(g) < 1:
                    targets.append(100 * g)   # a proportion stated as its percentage
                elif abs(n) < 1:
                    targets.append(g / 100)   # a percentage stated as its proportion
                for target in targets:
                    if target == 0 or n == 0:
                        if target == n:
                            return True
                        continue
                    error = abs(n - target)
                    if error <= max(rel * abs(target), half_unit) and error <= 0.5 * abs(target):
                        return True
            continue
        if str(value).casefold() in lowered:
            return True
    return False


# --- the metrics -------------------------------------------------------------------------------

def _carried(item: MetricInput) -> bool | None:
    last, gold = item.last, item.gold
    if last is None or gold is None:
        return None
    item.details.update({"rows_returned": len(last.rows), "gold_rows": len(gold.rows)})
    if not last.ok or too_many_rows(gold.rows, last.rows):
        return False
    return rows_carried(gold.rows, last.rows, ordered=item.ordered, **item.tolerance)


def _figure(item: MetricInput) -> bool | None:
    if item.gold is None or item.last is None:
        return None
    from pytest_kgbench.answers import prose

    return states_figure(prose(item.answer.text), item.gold.rows, rel=item.tolerance["rel"])


class Execution(RateMetric):
    name = "execution"
    title = "execution"
    help = ("execution accuracy: the last query carries every gold row and the prose states a "
            "gold figure")
    order = 10

    def measure(self, item: MetricInput) -> bool | None:
        if not item.queried or item.gold is None:
            return None
        if not item.ran:
            item.details["note"] = "no query ran"
            return False
        return bool(_carried(item) and _figure(item) is not False)


class ResultSetExact(RateMetric):
    name = "result_set_exact"
    title = "result exact"
    help = "the last query returns exactly the gold result set"
    order = 20

    def measure(self, item: MetricInput) -> bool | None:
        last, gold = item.last, item.gold
        if last is None or gold is None:
            return None
        return bool(last.ok and result_set_exact(gold.rows, last.rows, **item.tolerance))


class AnswerCarriesFigure(RateMetric):
    name = "answer_carries_figure"
    title = "figure"
    help = "the prose states a gold figure"
    order = 30

    def measure(self, item: MetricInput) -> bool | None:
        return _figure(item)


METRICS = (Execution(), ResultSetExact(), AnswerCarriesFigure())
