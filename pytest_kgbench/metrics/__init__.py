"""The metrics beside the grade (execution accuracy, grounding, fidelity, citations,
attribution). One file per metric (or per family of metrics sharing their
inputs), each exposing `METRICS`; the registry finds them, and a plugin adds its own through
`pytest_kgbench_metrics`. `base.py` has what every metric reads.

Shipped: execution accuracy, the strict result set and the figure in the prose (execution.py),
grounding and its exact form (grounding.py), semantic fidelity (fidelity.py), attribution and
citations.
"""

from __future__ import annotations

from pytest_kgbench.metrics.base import (
    Metric,
    MetricInput,
    RateMetric,
    measure_all,
    ordered,
    summarise_all,
)

__all__ = ["Metric", "MetricInput", "RateMetric", "measure_all", "ordered", "summarise_all"]
