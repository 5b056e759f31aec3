"""The module paths of 0.x, kept for one release: `import pytest_kgbench.settings` still works,
warns once that it moved, and hands back the module at its new place
(`pytest_kgbench.core.settings`). The package was reorganised into sub-packages by layer;
docs/extending.md has the map. `pytest_kgbench.packs` needs no entry: it is the package now,
and still offers every name the module did.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

MOVED: dict[str, str] = {
    "errors": "core.errors",
    "version": "core.version",
    "interrupt": "core.interrupt",
    "record": "core.record",
    "costs": "core.pricing",
    "conditions": "core.conditions",
    "questions": "core.questions",
    "registry": "core.registry",
    "hookspecs": "core.hookspecs",
    "fingerprints": "core.fingerprints",
    "settings": "core.settings",
    "tabledata": "packs.tables",
    "evidence": "packs.evidence",
    "build": "packs.build",
    "reading": "packs.reading",
    "locate": "packs.locate",
    "question_set": "packs.question_set",
    "rdfmap": "packs.rdf.mapping",
    "r2rml": "packs.rdf.r2rml",
    "ontology": "packs.rdf.ontology",
    "executors": "engines",
    "executors.endpoint": "engines.endpoint",
    "executors.guard": "engines.guard",
    "executors.postgres": "engines.postgres",
    "executors.sparql": "engines.sparql",
    "executors.sparql_results": "engines.sparql_results",
    "executors.sparql_worker": "engines.sparql_worker",
    "executors.sql": "engines.sql",
    "executors.sql_worker": "engines.sql_worker",
    "executors.worker": "engines.worker",
    "stores": "engines.stores",
    "answers": "scoring.answers",
    "grading": "scoring.grading",
    "judge": "scoring.judge",
    "fieldkinds": "scoring.fieldkinds",
    "answer_key": "scoring.answer_key",
    "report": "analysis.report",
    "html_report": "analysis.html_report",
    "comparisons": "analysis.comparisons",
    "stats": "analysis.stats",
    "power": "analysis.power",
    "runs": "analysis.runs",
    "prompts": "asking.prompts",
    "tools": "asking.tools",
    "together": "asking.together",
    "inflight": "asking.inflight",
    "pacing": "asking.pacing",
    "cases": "asking.cases",
    "agents.anthropic": "agents.models.anthropic",
    "agents.openai": "agents.models.openai",
    "agents.claude_cli": "agents.models.claude_cli",
    "agents.gold": "agents.reference.gold",
    "agents.trap": "agents.reference.trap",
    "agents.synthetic": "agents.reference.synthetic",
    "agents.cache": "agents.support.cache",
    "agents.batch": "agents.support.batch",
    "agents.faults": "agents.support.faults",
    "mcp_server": "agents.support.mcp_server",
    "runtime": "run.runtime",
    "rescore": "run.rescore",
    "importers": "run.importers",
    "validate": "run.validate",
    "collect": "plugin.collect",
    "runstore": "plugin.runstore",
    "options": "plugin.options",
    "keys": "plugin.keys",
    "progress": "plugin.progress",
}
"""old module (under pytest_kgbench.) -> its new place"""

_ROOT = "pytest_kgbench."


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path and loads it as the module at its new place."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(_ROOT) and fullname[len(_ROOT):] in MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = _ROOT + MOVED[spec.name[len(_ROOT):]]
        warnings.warn(f"{spec.name} moved to {new}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__  # the import system overwrites it with the alias's
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module is the one at the new place, already run: its own spec goes back."""
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


def install() -> None:
    """First on the path of finders: an old sub-module's parent is the new package, whose
    `__path__` the standard finder would search, loading a second copy under the old name."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
