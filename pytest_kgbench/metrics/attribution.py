"""Attribution: the definitions an answer claims to have used, and how many of those claims are
true — a claim is true only when the condition gave a definition of that name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import MetricInput


def attribution(claims: Any, given: Iterable[str]) -> dict[str, Any] | None:
    """The claims an answer makes (`definitions_used`) and how many name a definition the
    condition gave (label or CURIE)."""
    if not isinstance(claims, list) or not claims:
        return None
    names = [n.casefold() for n in given]
    true = [c for c in claims if isinstance(c, str) and any(
        c.casefold().strip() in n or n in c.casefold() for n in names if n)]
    return {"claims": len(claims), "true": len(true)}


class Attribution:
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
