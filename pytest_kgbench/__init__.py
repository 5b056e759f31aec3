"""pytest-kgbench: does giving an LLM the meaning of data make it answer more accurately?

Every question of a pack is a pytest item (question x condition x model x repeat); agents answer,
code grades, and the controller writes a run folder with a report. See README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_kgbench.analysis.runs import Run

from pytest_kgbench import _moved
from pytest_kgbench.core import registry as _registry
from pytest_kgbench.core.version import __version__

_moved.install()


def _shipped() -> _registry.Registry:
    from pytest_kgbench.run.shipped import shipped

    return shipped()


# The composition root: outside a session or a `kgbench` command (a script, a notebook), the
# registry is the shipped pieces. Set here, above every layer, so that core/registry.py reaches
# for nothing above it.
_registry.outside_a_session(_shipped)

__all__ = ["__version__", "load_run"]


def load_run(run: str | Path, reports: str | Path = "reports") -> Run:
    """One stored run (a folder, or a run id under `reports`) as plain records: its items, one
    flat dict per item, its comparisons, and the items it was meant to have and did not bank
    (`.missing`, from meta.json against answers.jsonl; `.summary.status` is then incomplete);
    `.to_pandas()` when pandas is installed. See pytest_kgbench.analysis.runs.load_run (imported
    here only when called: the plugin starts light)."""
    from pytest_kgbench.analysis.runs import load_run as load

    return load(run, reports)
