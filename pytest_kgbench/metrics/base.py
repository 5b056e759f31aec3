"""What every metric reads (`MetricInput`) and the shapes most metrics share (`RateMetric`).

A metric is measured per item and summarised per arm; one that cannot be measured for an item
is None there, never a guess. The inputs that several metrics share — the agent's last query,
re-run when a stored run is rescored, and the gold query's result — are computed once per
item, on first use. Pure module: no pytest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from pytest_kgbench.core.registry import Registry, given

if TYPE_CHECKING:
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.core.questions import Question
    from pytest_kgbench.engines import Executor, QueryResult
    from pytest_kgbench.scoring.answers import Answer


@dataclass
class MetricInput:
    """One item as the metrics see it."""

    question: Question
    condition: Condition
    answer: Answer
    executor: Executor | None = None      # the item's store (querying conditions)
    definitions_given: Sequence[str] = ()  # names (labels, CURIEs) of the definitions shown
    key_records: Sequence[str] = ()        # the records the key depends on
    canonical: Callable[[str], str] = str  # a record id as its entity's canonical id
    evidence: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # the pack's
    prefixes: Mapping[str, str] = field(default_factory=dict)  # the pack's RDF prefixes
    rerun: bool = False                    # re-run the last statement (a rescore)
    details: dict[str, Any] = field(default_factory=dict)  # what metrics noted beside values

    @property
    def block(self) -> Mapping[str, Any]:
        return self.answer.block or {}

    @property
    def gold_statement(self) -> str | None:
        return self.question.gold.get(self.condition.reference)

    @property
    def queried(self) -> bool:
        """Whether the execution metrics apply: a querying condition, an answerable question
        with a gold query for this store."""
        return (self.condition.mode == "querying" and self.question.expect == "answer"
                and bool(self.gold_statement) and self.executor is not None)

    @cached_property
    def ran(self) -> list[QueryResult]:
        """The agent's statements, in order."""
        return [q for q in self.answer.queries if q.statement]

    @cached_property
    def last(self) -> QueryResult | None:
        """The agent's last statement's result (run again on a rescore); None if none ran."""
        if not self.ran:
            return None
        if self.rerun and self.executor is not None:
            return self.executor.run(self.ran[-1].statement)
        return self.ran[-1]

    @cached_property
    def gold(self) -> QueryResult | None:
        """The gold query's result on the item's store: None when execution cannot be
        measured — no gold query here, or one that returned no non-null value (then any
        query, `SELECT NULL` included, would "carry" it). A gold query that fails is the
        harness failing, never a pass or a miss: it raises HarnessBroken."""
        if not self.queried or self.executor is None:
            return None
        if self.last is not None and self.last.statement == self.gold_statement:
            result = self.last
        else:
            result = self.executor.run(str(self.gold_statement))
        if not result.ok:
            from pytest_kgbench.core.errors import HarnessBroken

            raise HarnessBroken(f"the gold query of {self.question.id} failed under "
                                f"{self.condition.id}: {result.refused or result.error}")
        if not any(v is not None for row in result.rows for v in row):
            self.details["note"] = "the gold query returned no value: execution is undefined"
            return None
        return result

    @property
    def tolerance(self) -> dict[str, float]:
        fields = self.question.fields
        return {"rel": max((f.rel_tol for f in fields), default=0.005),
                "abs_tol": max((f.abs_tol for f in fields), default=0.0)}

    @property
    def ordered(self) -> bool:
        return any(f.ordered for f in self.question.fields)


class Metric(ABC):
    """A measurement beside the grade, per item, summarised per arm in the report. The
    shipped ones are the modules of this package; a plugin registers its own subclass's
    instances through `pytest_kgbench_metrics`."""

    name: str = ""   # its key in the item's `metrics`
    title: str = ""  # its column in the report
    help: str = ""   # one line under the report's table saying what it measures
    order: int = 100  # columns sort by it

    @abstractmethod
    def measure(self, item: MetricInput) -> Any:
        """The item's value (builtin JSON types), or None when it cannot be measured."""

    @abstractmethod
    def summarise(self, values: Sequence[Any]) -> dict[str, Any] | None:
        """The arm's summary of its items' values (those not None), or None."""

    @abstractmethod
    def cell(self, summary: Mapping[str, Any]) -> str:
        """The summary as the report's table shows it."""


class RateMetric(Metric):
    """A yes/no metric: the arm's summary is the share of measured items where it held."""

    def summarise(self, values: Sequence[Any]) -> dict[str, Any] | None:
        if not values:
            return None
        return {"rate": round(sum(bool(v) for v in values) / len(values), 6), "n": len(values)}

    def cell(self, summary: Mapping[str, Any]) -> str:
        return f"{100 * summary['rate']:.1f}% ({summary['n']})"


def ordered(registry: Registry | None = None) -> list[Metric]:
    """The metrics of `registry` (the shipped ones where none is passed), in their columns'
    order."""
    metrics = cast("list[Metric]", list(given(registry).metrics.values()))
    return sorted(metrics, key=lambda m: (m.order, m.name))


def measure_all(item: MetricInput, metrics: Sequence[Metric]) -> dict[str, Any]:
    """Every registered metric's value for one item (those measured), plus the details they
    noted under "details"."""
    out: dict[str, Any] = {}
    for metric in metrics:
        value = metric.measure(item)
        if value is not None:
            out[metric.name] = value
    if item.details:
        out["details"] = dict(item.details)
    return out


def summarise_all(records: Sequence[Mapping[str, Any]], metrics: Sequence[Metric]
                  ) -> dict[str, Any]:
    """Each metric's summary over the items where it was measured."""
    out: dict[str, Any] = {}
    for metric in metrics:
        values = [r["metrics"][metric.name] for r in records
                  if (r.get("metrics") or {}).get(metric.name) is not None]
        summary = metric.summarise(values) if values else None
        if summary is not None:
            out[metric.name] = summary
    return out
