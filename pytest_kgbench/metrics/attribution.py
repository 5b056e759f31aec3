"""Attribution: the definitions an answer claims to have used, and how many of those claims are
true — a claim is true only when the condition gave a definition of that name."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import Metric, MetricInput


def _name(text: str) -> str:
    return " ".join(text.strip().strip("`'\"").split()).casefold()


def attribution(claims: Any, given: Iterable[str]) -> dict[str, Any] | None:
    """The distinct claims an answer makes (`definitions_used`) and how many are true: a
    claim is true only when it IS the id, CURIE or label of a definition the condition gave
    (ignoring case and surrounding space) — never a part of one ("e", "credit:") or a name it
    contains. A claim repeated (in any case or spacing) is one claim: one true claim listed
    five times is 1/1, not 5/5."""
    if not isinstance(claims, list) or not claims:
        return None
    names = {_name(n) for n in given if n and _name(n)}
    distinct = {("name", _name(c)) if isinstance(c, str)
                else ("value", json.dumps(c, sort_keys=True, default=str)) for c in claims}
    strings = {_name(c) for c in claims if isinstance(c, str)}
    return {"claims": len(distinct), "true": len(strings & names)}


class Attribution(Metric):
    name = "attribution"
    title = "attribution"
    help = "true claims / claims of definitions used"
    order = 70

    def measure(self, item: MetricInput) -> dict[str, Any] | None:
        return attribution(item.block.get("definitions_used"), item.definitions_given)

    def summarise(self, values: Sequence[Any]) -> dict[str, Any] | None:
        total = sum(v["claims"] for v in values)
        if not total:
            return None
        true = sum(v["true"] for v in values)
        return {"true_claims": true, "claims": total, "rate": round(true / total, 6)}

    def cell(self, summary: Mapping[str, Any]) -> str:
        return f"{summary['true_claims']}/{summary['claims']}"


METRICS = (Attribution(),)
