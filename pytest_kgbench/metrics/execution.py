"""Execution accuracy (the agent's last query carries every gold row, and the prose states a
gold figure), the strict result set beside it, and the figure in the prose."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from pytest_kgbench.fieldkinds import norm_number
from pytest_kgbench.metrics.base import MetricInput, RateMetric

# --- cells ---------------------------------------------------------------------------------------

def _same_number(a: float, b: float, rel: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=max(abs_tol, 1e-9))


def same_cell(gold: Any, got: Any, *, rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """Two cells agree: numbers within tolerance — a proportion and its percentage only when one
    side is a proper fraction (0.045 ~ 4.5, but never 4.5 million ~ 450 million) — else text
    compared case-insensitively."""
    if gold is None or got is None:
        return gold is None and got is None
    g, o = norm_number(gold), norm_number(got)
    if isinstance(gold, bool) or isinstance(got, bool):
        return str(gold).casefold() == str(got).casefold()
    if g is not None and o is not None:
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


def rows_carried(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                 ordered: bool = False, rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """Each gold row is carried by a distinct returned row (extra rows allowed); with `ordered`,
    the carrying rows appear in the gold order."""
    if ordered:
        i = 0
        for row in got:
            if i < len(gold) and carries(gold[i], row, rel=rel, abs_tol=abs_tol):
                i += 1
        return i == len(gold)
    match: dict[int, int] = {}  # returned row -> gold row (bipartite matching, augmenting paths)

    def assign(g: int, seen: set[int]) -> bool:
        for r, row in enumerate(got):
            if r not in seen and carries(gold[g], row, rel=rel, abs_tol=abs_tol):
                seen.add(r)
                if r not in match or assign(match[r], seen):
                    match[r] = g
                    return True
        return False

    return all(assign(g, set()) for g in range(len(gold)))


def result_set_exact(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                     rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """The strict result-set equality: same number of rows and columns, rows matched one to one."""
    if len(gold) != len(got) or any(len(g) != len(o) for g, o in zip(gold, got)):
        return False
    return (rows_carried(gold, got, rel=rel, abs_tol=abs_tol)
            and rows_carried(got, gold, rel=rel, abs_tol=abs_tol))


_NUMBER = re.compile(r"[-+]?\d[\d,_]*(?:\.\d+)?")


def states_figure(text: str, gold: Sequence[Sequence[Any]], *, rel: float = 0.005) -> bool | None:
    """Whether the prose states at least one gold value (numbers allow rounding to the text's
    precision and rescaling by 100 or 1000; other values by case-insensitive inclusion).
    None when the gold result holds no value to state."""
    values = [v for row in gold for v in row if v is not None]
    if not values:
        return None
    lowered = (text or "").casefold()
    numbers = [n for n in (norm_number(m) for m in _NUMBER.findall(text or "")) if n is not None]
    for value in values:
        if isinstance(value, bool):
            words = ("yes", "true") if value else ("no", "false", "not")
            if any(re.search(rf"\b{w}\b", lowered) for w in words):
                return True
            continue
        g = norm_number(value)
        if g is not None and not isinstance(value, str):
            for n in numbers:
                for scale in (1, 100, 0.01, 1000, 0.001):
                    target = g * scale
                    digits = 0 if n == int(n) else len(str(n).split(".")[1])
                    if abs(round(target, digits) - n) <= max(rel * abs(target), 0.5 * 10**-digits):
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
    return last.ok and rows_carried(gold.rows, last.rows, ordered=item.ordered, **item.tolerance)


def _figure(item: MetricInput) -> bool | None:
    if item.gold is None or item.last is None:
        return None
    return states_figure(item.answer.text, item.gold.rows, rel=item.tolerance["rel"])


class Execution(RateMetric):
    name = "execution"
    title = "execution"
    help = ("execution accuracy: the last query carries every gold row and the prose states a "
            "gold figure")
    order = 10

    def measure(self, item: MetricInput) -> bool | None:
        if not item.queried:
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
