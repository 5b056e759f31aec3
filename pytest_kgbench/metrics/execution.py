"""Execution accuracy (the agent's last query carries every gold row, and the prose states a
gold figure), the strict result set beside it, and the figure in the prose."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
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
    `rows_allowed`); with `ordered`, the carrying rows appear in the gold order.

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


def rows_allowed(gold_rows: int, sizes: Sequence[int] = ()) -> int:
    """How many rows a result may return and still answer: the gold rows plus a quarter more
    (at least one more), and fewer than any table or class it reads holds where that holds
    more than the gold rows (`sizes`) -- so the allowance never reaches a table's size, and a
    query listing every issuer, or `range(10000)`, does not carry a list by listing
    everything. Never fewer than the gold rows."""
    allowed = gold_rows + max(1, gold_rows // 4)
    bigger = [n for n in sizes if n > gold_rows]
    if bigger:
        allowed = min(allowed, min(bigger) - 1)
    return max(allowed, gold_rows)


def reads_store(result: Any, language: str, prefixes: Mapping[str, str] | None = None) -> bool:
    """Whether a statement reads the store at all: it names a table, class or property of it
    (the executor's `reads`), or, in SPARQL, matches at least one triple pattern. A constant
    (`SELECT 9 AS n`, `SELECT (9 AS ?n) WHERE {}`) reads nothing: its result would fit any
    question whose answer it happens to be."""
    if result.reads:
        return True
    if language != "sparql":
        return False
    from pytest_kgbench.evidence import read_sparql, walk

    query = read_sparql(result.statement, tuple(sorted((prefixes or {}).items()))).query
    if query is None:
        return True  # not readable here (a prefix the store binds): not judged a constant
    return any(getattr(node, "name", None) == "BGP" and dict.get(node, "triples")
               for node in walk(query.algebra))


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


_AUXILIARIES = {"does": "does|do|did", "do": "does|do|did", "did": "does|do|did",
                "is": "is|are|was|were", "are": "is|are|was|were", "was": "is|are|was|were",
                "were": "is|are|was|were", "has": "has|have|had", "have": "has|have|had",
                "can": "can", "will": "will"}
_ASKED = re.compile(rf"\b({'|'.join(_AUXILIARIES)})\s+([^?]*?)\?", re.IGNORECASE)
_NOT_VERBS = {"the", "this", "that", "these", "those", "its", "their", "any", "all", "and",
              "with", "from", "into", "than", "then", "there", "here", "also", "still"}
# a sentence that opens with its verdict: "No.", "Yes, it does", "**No** —", "Answer: false"
_OPENS = re.compile(r"^\W*(?:(?:the\s+)?answer\s*(?:is|:)\s*)?\W*(yes|no|true|false)\W*"
                    r"(?:[.,;:!\u2014\u2013-]|$)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\banswer\s*(?:is|:)\s*\W*(yes|no|true|false)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|no|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE)
_HYPOTHETICAL = re.compile(r"\b(?:whether|if|unless)\b|\?", re.IGNORECASE)


def _question_verb(question: str) -> tuple[str, str] | None:
    """The auxiliary family and main verb of a yes/no question ("Does X control Y?" ->
    does|do|did, control): the verb is the clause's last lower-case word (names are
    capitalised)."""
    for m in _ASKED.finditer(question or ""):
        words = [w for w in re.findall(r"[A-Za-z]+", m.group(2))
                 if w.islower() and len(w) >= 3 and w not in _NOT_VERBS]
        if words:
            return _AUXILIARIES[m.group(1).casefold()], words[-1]
    return None


def stated_yesno(text: str, question: str = "") -> bool | None:
    """The yes or no the prose states, or None when it states neither (or both): a sentence
    that opens with yes/no/true/false ("No.", "Yes, it does"), "the answer is no", or the
    question's own verb affirmed or denied ("Borealis does not control Cobalt", "this
    citation counts"). A "no" or "not" anywhere else is not a statement of the value ("I
    could not work it out" states nothing)."""
    asked = _question_verb(question)
    found: set[bool] = set()
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", (text or "").replace("\u2019", "'")):
        m = _OPENS.match(sentence) or _ANSWER_IS.search(sentence)
        if m:
            found.add(m.group(1).casefold() in ("yes", "true"))
            continue
        if asked is None or _HYPOTHETICAL.search(sentence):
            continue
        aux, verb = asked
        if re.search(rf"\b(?:{aux})(?:\s+not|n't)\s+(?:\w+\s+)?{verb}", sentence, re.I):
            found.add(False)
            continue
        # affirmed: "it does count", "Borealis controls Cobalt" (a subject before the verb, so
        # a field's label "counts:" is not a sentence), with no negation just before it
        for m in re.finditer(rf"\b(?:(?:{aux})\s+(?:\w+\s+)?{verb}\b|(?<=\w\s){verb}e?s\b)",
                             sentence, re.I):
            if not _NEGATED.search(" ".join(sentence[:m.start()].split()[-3:])):
                found.add(True)
    return found.pop() if len(found) == 1 else None


def states_figure(text: str, gold: Sequence[Sequence[Any]], *, rel: float = 0.005,
                  question: str = "") -> bool | None:
    """Whether the prose (the answer without its closing block) states a gold value: a count
    exactly; another number when it agrees to the precision stated (within half a unit of its
    last digit, or the relative tolerance) and keeps the value's magnitude (off by at most
    half of it; a stated zero states only zero, so "0" never states 0.4); a proportion as its
    percentage or back (never by 1000); a yes/no as the value the prose states
    (`stated_yesno`, read with the question's verb), never a "not" anywhere; other values by
    inclusion, ignoring case. None when the gold result holds no value to state."""
    values = [v for row in gold for v in row if v is not None]
    if not values:
        return None
    lowered = (text or "").casefold()
    numbers = _stated(text)
    for value in values:
        if isinstance(value, bool):
            if stated_yesno(text, question) is value:
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
    returned = max(len(last.rows), last.row_count or 0)
    item.details.update({"rows_returned": returned, "gold_rows": len(gold.rows)})
    if not last.ok:
        return False
    if not reads_store(last, item.condition.language, item.prefixes):
        item.details["note"] = "the query reads nothing from the store (a constant)"
        return False
    sizes = ([t.rows for t in item.executor.catalog() if t.name in set(last.reads)]
             if item.executor is not None else [])
    allowed = rows_allowed(len(gold.rows), sizes)
    if returned > allowed:
        item.details["rows_allowed"] = allowed
        return False
    return rows_carried(gold.rows, last.rows, ordered=item.ordered, **item.tolerance)


def _figure(item: MetricInput) -> bool | None:
    if item.gold is None or item.last is None:
        return None
    from pytest_kgbench.answers import prose

    return states_figure(prose(item.answer.text), item.gold.rows, rel=item.tolerance["rel"],
                         question=item.question.text)


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
