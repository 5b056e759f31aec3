"""The session's settings: command-line options over their ini twins, parsed once."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_kgbench import conditions
from pytest_kgbench.errors import InputError

# (option, ini name, help, default) — every option has an ini twin for pyproject/tox.ini
OPTIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ("--condition", "kgbench_condition",
     "conditions to run: ids (R1,D2), comma lists, 'reading', 'querying' or 'all'", "all"),
    ("--agent", "kgbench_agent",
     "who answers: gold (default when no --model), trap, ...", None),
    ("--model", "kgbench_model", "model alias or id; comma list or repeated", None),
    ("--repeats", "kgbench_repeats", "times each item is asked", "1"),
    ("--variant", "kgbench_variant", "pack variants to run: names, comma list or 'all'", "base"),
    ("--run-id", "kgbench_run_id", "name of the run folder under reports/", None),
    ("--query-timeout", "kgbench_query_timeout", "seconds before a query is stopped", "60"),
    ("--max-rounds", "kgbench_max_rounds", "tool-call rounds in a querying condition", "8"),
    ("--resume", "kgbench_resume", "RUN_ID: continue a run, skipping items already banked", None),
    ("--dataset-seed", "kgbench_dataset_seed",
     "generate every pack at this seed instead of the pack's own", None),
    ("--stats-seed", "kgbench_stats_seed", "seed of the bootstrap intervals", "20261129"),
    ("--sparql-engine", "kgbench_sparql_engine",
     "SPARQL engine of the graph conditions: rdflib (its own store) or oxigraph (via oxrdflib, "
     "much faster on the large variants)", "rdflib"),
    ("--synthetic", "kgbench_synthetic",
     "the synthetic agent's probability of a gold answer per condition, e.g. D1=0.45,D2=0.7 "
     "(default for unnamed conditions: *=0.5)", None),
)
FLAGS: tuple[tuple[str, str, str], ...] = (
    # pytest itself owns --strict, so ours carries the plugin's name
    ("--kgbench-strict", "kgbench_strict", "fail every item whose answer is not correct"),
    ("--ablation", "kgbench_ablation",
     "report paired comparisons: the first-listed condition against every other, plus the "
     "design's named pairs (R1-R4, D1-D2, D3-D6, ...)"),
)
PATHS: tuple[tuple[str, str, str], ...] = (
    ("kgbench_datasets", "folder holding one folder per pack (pack.yaml inside)", "datasets"),
    ("kgbench_ontology", "folder holding one folder of definitions per pack", "ontology"),
    ("kgbench_questions", "name of the folders whose *.yaml files are question files",
     "questions"),
    ("kgbench_reports", "folder of run folders", "reports"),
    ("kgbench_cache", "folder of built variants (shared by workers, locked)", ".kgbench-cache"),
)


def add_options(parser: pytest.Parser) -> None:
    """Register the `kgbench` option group and every ini twin."""
    group = parser.getgroup("kgbench", "pytest-kgbench: semantic-layer benchmark")
    for opt, ini, help_text, default in OPTIONS:
        group.addoption(opt, action="append" if opt == "--model" else "store", default=None,
                        dest=ini, help=f"{help_text} (ini: {ini})")
        parser.addini(ini, help_text, default=default)
    for opt, ini, help_text in FLAGS:
        group.addoption(opt, action="store_true", default=None, dest=ini, help=help_text)
        parser.addini(ini, help_text, type="bool", default=False)
    for ini, help_text, default in PATHS:
        parser.addini(ini, help_text, default=default)


def _value(config: pytest.Config, ini: str) -> Any:
    value = config.getoption(ini, default=None)
    return config.getini(ini) if value is None else value


@dataclass
class Settings:
    """Everything a session needs to know, as builtin values (sent to workers as-is)."""

    condition_ids: tuple[str, ...]
    agent: str
    models: tuple[str, ...]
    repeats: int
    variants: tuple[str, ...]
    run_id: str
    query_timeout: float
    max_rounds: int
    strict: bool
    resume: bool
    ablation: bool
    dataset_seed: int | None
    stats_seed: int
    sparql_engine: str
    rootdir: str
    datasets_dir: str
    ontology_dir: str
    question_dirs: tuple[str, ...]
    reports_dir: str
    cache_dir: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def conditions(self) -> tuple[conditions.Condition, ...]:
        return tuple(conditions.BY_ID[i] for i in self.condition_ids)

    @property
    def run_dir(self) -> Path:
        return Path(self.reports_dir) / self.run_id

    @property
    def must_pass(self) -> bool:
        """Gold must score 100%; --strict makes any agent's wrong answer a failure."""
        return self.strict or self.agent == "gold"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, config: pytest.Config) -> "Settings":
        root = Path(config.inipath).parent if config.inipath else Path(config.rootpath)

        def path(ini: str) -> str:
            return str((root / str(config.getini(ini))).resolve())

        models_raw = _value(config, "kgbench_model")
        if isinstance(models_raw, list):
            models_raw = ",".join(models_raw)
        models = tuple(m.strip() for m in (models_raw or "").split(",") if m.strip())
        agent = _value(config, "kgbench_agent") or ("anthropic" if models else "gold")
        if not models:
            models = (agent,)
        try:
            repeats = int(_value(config, "kgbench_repeats"))
            timeout = float(_value(config, "kgbench_query_timeout"))
            rounds = int(_value(config, "kgbench_max_rounds"))
            stats_seed = int(_value(config, "kgbench_stats_seed"))
            seed_raw = _value(config, "kgbench_dataset_seed")
            dataset_seed = int(seed_raw) if seed_raw not in (None, "") else None
        except ValueError as exc:
            raise InputError("options", f"expected a number: {exc}") from exc
        if repeats < 1:
            raise InputError("--repeats", "must be at least 1")
        resume = _value(config, "kgbench_resume")
        run_id = resume or _value(config, "kgbench_run_id") or (
            dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{agent}")
        variants = tuple(v.strip() for v in str(_value(config, "kgbench_variant")).split(",")
                         if v.strip())
        strict = config.getoption("kgbench_strict", default=None)
        ablation = config.getoption("kgbench_ablation", default=None)
        synthetic = _value(config, "kgbench_synthetic")
        return cls(
            condition_ids=tuple(c.id for c in conditions.select(_value(config, "kgbench_condition"))),
            agent=agent, models=models, repeats=repeats, variants=variants or ("base",),
            run_id=str(run_id), query_timeout=timeout, max_rounds=rounds,
            strict=bool(config.getini("kgbench_strict") if strict is None else strict),
            resume=bool(resume),
            ablation=bool(config.getini("kgbench_ablation") if ablation is None else ablation),
            dataset_seed=dataset_seed, stats_seed=stats_seed,
            sparql_engine=str(_value(config, "kgbench_sparql_engine")),
            rootdir=str(root), datasets_dir=path("kgbench_datasets"),
            ontology_dir=path("kgbench_ontology"),
            question_dirs=tuple(str(config.getini("kgbench_questions")).split(",")),
            reports_dir=path("kgbench_reports"), cache_dir=path("kgbench_cache"),
            extra={"synthetic": synthetic} if synthetic else {},
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Settings":
        data = dict(data)
        for name in ("condition_ids", "models", "variants", "question_dirs"):
            data[name] = tuple(data[name])
        return cls(**data)
