"""Citations: precision and recall of the records an answer cites (`records_used`) against the
records its key depends on."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.metrics.base import Metric, MetricInput


def citations(cited: Any, records: Iterable[str], normalise: Callable[[str], str]
              ) -> dict[str, Any] | None:
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


class Citations(Metric):
    name = "citations"
    title = "citations P / R"
    help = "mean precision / recall of the records cited against the key's"
    order = 80

    def measure(self, item: MetricInput) -> dict[str, Any] | None:
        if not item.key_records:
            return None
        return citations(item.block.get("records_used"), item.key_records, item.canonical)

    def summarise(self, values: Sequence[Any]) -> dict[str, Any] | None:
        precision = [v["precision"] for v in values if v["precision"] is not None]
        return {"n": len(values),
                "precision": round(sum(precision) / len(precision), 6) if precision else None,
                "recall": round(sum(v["recall"] for v in values) / len(values), 6)}

    def cell(self, summary: Mapping[str, Any]) -> str:
        def pct(v: float | None) -> str:
            return "—" if v is None else f"{100 * v:.1f}%"

        return f"{pct(summary['precision'])} / {pct(summary['recall'])}"


METRICS = (Citations(),)
