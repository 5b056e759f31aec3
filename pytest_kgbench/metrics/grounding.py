"""Grounding: the tables (or classes and properties) the agent's queries read contain those the
gold query reads; equality is reported as grounding (exact)."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_kgbench.metrics.base import MetricInput, RateMetric


def grounding(gold_reads: Iterable[str], agent_reads: Iterable[str]) -> tuple[bool, bool]:
    """(read set contains the gold set, read set equals it)."""
    gold, got = set(gold_reads), set(agent_reads)
    return gold <= got, gold == got


def _reads(item: MetricInput) -> tuple[bool, bool] | None:
    if item.gold is None or item.last is None:
        return None
    reads = sorted({r for x in item.ran for r in x.reads})
    item.details.update({"reads": reads, "gold_reads": item.gold.reads})
    return grounding(item.gold.reads, reads)


class Grounding(RateMetric):
    name = "grounding"
    title = "grounding"
    help = "the tables (classes, properties) read contain the gold query's"
    order = 40

    def measure(self, item: MetricInput) -> bool | None:
        found = _reads(item)
        return None if found is None else found[0]


class GroundingExact(RateMetric):
    name = "grounding_exact"
    title = "grounding exact"
    help = "they equal the gold query's"
    order = 50

    def measure(self, item: MetricInput) -> bool | None:
        found = _reads(item)
        return None if found is None else found[1]


METRICS = (Grounding(), GroundingExact())
