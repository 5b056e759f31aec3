"""Semantic fidelity: the definitions a question needs appear in the query that ran.

How a pack declares the evidence of a definition: `evidence:` in its manifest maps a concept
CURIE to, per reference kind (`sql`, `sparql`, `executed`), a regular expression
(case-insensitive) that must match the query that ran — or `true` when the store already
applies the definition (the executed tables drop test records, so any query over them honours
that definition).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import MetricInput, RateMetric


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
            found = re.search(str(rule), statement or "", re.IGNORECASE | re.DOTALL)
            out[concept] = found is not None
    return out


class Fidelity(RateMetric):
    name = "fidelity"
    title = "fidelity"
    help = "every needed definition's evidence is in the query that ran"
    order = 60

    def measure(self, item: MetricInput) -> bool | None:
        if item.gold is None or item.last is None:
            return None
        found = fidelity(item.question.needs, item.ran[-1].statement, item.condition.reference,
                         item.evidence)
        item.details["fidelity_by_definition"] = found
        measured = [v for v in found.values() if v is not None]
        return all(measured) if measured else None


METRICS = (Fidelity(),)
