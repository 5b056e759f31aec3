"""The metrics beside the grade (DESIGN §7): execution accuracy, result set (exact), the answer
carrying a gold figure, grounding (and exact), semantic fidelity, citations and attribution.

Pure functions over builtin values (rows, statements, texts); the runtime feeds them. A metric
that cannot be measured for an item is None, never a guess.

How a pack declares the evidence of a definition (semantic fidelity): `evidence:` in its
manifest maps a concept CURIE to, per reference kind (`sql`, `sparql`, `executed`), a regular
expression (case-insensitive) that must match the query that ran — or `true` when the store
already applies the definition (the executed tables drop test records, so any query over them
honours that definition).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from pytest_kgbench.grading import norm_number


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


def carries(gold_row: Sequence[Any], row: Sequence[Any], **tol: float) -> bool:
    """A returned row carries a gold row when every gold value appears somewhere in it
    (extra columns are allowed)."""
    return all(any(same_cell(g, v, **tol) for v in row) for g in gold_row)


def rows_carried(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                 ordered: bool = False, **tol: float) -> bool:
    """Each gold row is carried by a distinct returned row (extra rows allowed); with `ordered`,
    the carrying rows appear in the gold order."""
    if ordered:
        i = 0
        for row in got:
            if i < len(gold) and carries(gold[i], row, **tol):
                i += 1
        return i == len(gold)
    match: dict[int, int] = {}  # returned row -> gold row (bipartite matching, augmenting paths)

    def assign(g: int, seen: set[int]) -> bool:
        for r, row in enumerate(got):
            if r not in seen and carries(gold[g], row, **tol):
                seen.add(r)
                if r not in match or assign(match[r], seen):
                    match[r] = g
                    return True
        return False

    return all(assign(g, set()) for g in range(len(gold)))


def result_set_exact(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], **tol: float) -> bool:
    """The strict result-set equality: same number of rows and columns, rows matched one to one."""
    if len(gold) != len(got) or any(len(g) != len(o) for g, o in zip(gold, got)):
        return False
    return rows_carried(gold, got, **tol) and rows_carried(got, gold, **tol)


_NUMBER = re.compile(r"[-+]?\d[\d,_]*(?:\.\d+)?")


def states_figure(text: str, gold: Sequence[Sequence[Any]], *, rel: float = 0.005) -> bool | None:
    """Whether the prose states at least one gold value (numbers allow rounding to the text's
    precision and rescaling by 100 or 1000; other values by case-insensitive inclusion).
    None when the gold result holds no value to state."""
    values = [v for row in gold for v in row if v is not None]
    if not values:
        return None
    lowered = (text or "").casefold()
    numbers = [norm_number(m) for m in _NUMBER.findall(text or "")]
    numbers = [n for n in numbers if n is not None]
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


# --- grounding, fidelity -------------------------------------------------------------------------

def grounding(gold_reads: Iterable[str], agent_reads: Iterable[str]) -> tuple[bool, bool]:
    """(read set contains the gold set, read set equals it)."""
    gold, got = set(gold_reads), set(agent_reads)
    return gold <= got, gold == got


def fidelity(needs: Sequence[str], statement: str, reference: str,
             evidence: Mapping[str, Mapping[str, Any]]) -> dict[str, bool | None]:
    """For each needed definition: its evidence matched the statement (True/False), or None when
    the pack declares no evidence for it on this kind of store."""
    out: dict[str, bool | None] = {}
    for concept in needs:
        rule = (evidence.get(concept) or {}).get(reference)
        if rule is None:
            out[concept] = None
        elif rule is True:
            out[concept] = True
        else:
            out[concept] = re.search(str(rule), statement or "", re.IGNORECASE | re.DOTALL) is not None
    return out


# --- citations, attribution ----------------------------------------------------------------------

def citations(cited: Any, records: Iterable[str], normalise: Any) -> dict[str, Any] | None:
    """Precision and recall of the records an answer cites against those its key depends on."""
    expected = {normalise(r) for r in records if r is not None}
    if not expected:
        return None
    got_list = cited if isinstance(cited, list) else ([] if cited is None else [cited])
    got = {normalise(str(r)) for r in got_list if r is not None}
    hit = len(expected & got)
    return {"cited": len(got), "expected": len(expected),
            "precision": round(hit / len(got), 6) if got else None,
            "recall": round(hit / len(expected), 6)}


def attribution(claims: Any, given: Iterable[str]) -> dict[str, Any] | None:
    """The definitions an answer claims to have used, and how many of those claims are true: a
    claim is true only when the condition gave a definition of that name (label or CURIE)."""
    if not isinstance(claims, list) or not claims:
        return None
    names = [n.casefold() for n in given]
    true = [c for c in claims if isinstance(c, str) and any(
        c.casefold().strip() in n or n in c.casefold() for n in names if n)]
    return {"claims": len(claims), "true": len(true)}
