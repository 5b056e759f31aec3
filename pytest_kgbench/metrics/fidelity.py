"""Semantic fidelity: the definitions a question needs appear in the query that ran, as its
pack's `evidence:` declares them (packs/evidence.py: read from the parsed query, never its text).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import MetricInput, RateMetric
from pytest_kgbench.packs.evidence import facts_of, holds


def fidelity(needs: Sequence[str], statement: str, reference: str,
             evidence: Mapping[str, Mapping[str, Any]],
             prefixes: Mapping[str, str] | None = None) -> dict[str, bool | None]:
    """For each needed definition: its evidence holds in the parsed statement (True/False), or
    None when the pack declares no evidence for it on this kind of store. A statement that
    does not parse shows no evidence."""
    facts = None
    out: dict[str, bool | None] = {}
    for concept in needs:
        spec = (evidence.get(concept) or {}).get(reference)
        if spec is None:
            out[concept] = None
        elif spec is True:
            out[concept] = True
        else:
            facts = facts if facts is not None else facts_of(statement or "", reference)
            out[concept] = facts is not None and holds(spec, facts, prefixes)
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
                         item.evidence, item.prefixes)
        item.details["fidelity_by_definition"] = found
        measured = [v for v in found.values() if v is not None]
        return all(measured) if measured else None


METRICS = (Fidelity(),)
