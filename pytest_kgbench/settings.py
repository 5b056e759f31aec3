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
    ("--item-timeout", "kgbench_item_timeout",
     "wall-clock seconds a model may take for one item; past it the item is a timeout (a miss)",
     "600"),
    ("--effort", "kgbench_effort", "effort passed to models that support it (low ... max)", None),
    ("--max-tokens", "kgbench_max_tokens", "output token limit per model call", "4096"),
    ("--model-reruns", "kgbench_model_reruns",
     "reruns of an item whose model call failed transiently (429, 529, 5xx, reset)", "2"),
    ("--replay-run", "kgbench_replay_run", "RUN_ID: the run whose answers the replay agent gives",
     None),
    ("--ask", "kgbench_ask",
     "apart: one model session per item; together: one session per condition x repeat x model "
     "answers every selected question of the variant at once", "apart"),
    ("--judge-model", "kgbench_judge_model",
     "the model that grades 'why' questions against their checklist (twice)", "sonnet"),
    ("--synthetic", "kgbench_synthetic",
     "the synthetic agent's probability of a gold answer per condition, e.g. D1=0.45,D2=0.7 "
     "(default for unnamed conditions: *=0.5)", None),
)
FLAGS: tuple[tuple[str, str, str], ...] = (
    # pytest itself owns --strict, so ours carries the plugin's name
    ("--kgbench-strict", "kgbench_strict", "fail every item whose answer is not correct"),
    ("--floor", "kgbench_floor",
     "the floor arm: a minimal instruction with nothing about definitions, checking or citing"),
    ("--estimate", "kgbench_estimate",
     "print the estimated tokens and dollars of the selected items before any call, and ask "
     "nothing (implies --collect-only)"),
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


# Model aliases and list prices (dollars per million tokens), overridable in pyproject.toml:
#   [tool.kgbench.models]   sonnet = "claude-..."
#   [tool.kgbench.prices."claude-..."]  input = 3.0  output = 15.0
# Check both against the provider's current model list and price page before a paid run.
DEFAULT_ALIASES = {"sonnet": "claude-sonnet-5-5", "haiku": "claude-haiku-5-5",
                   "opus": "claude-opus-5-5"}
# dollars per million tokens; cache writes at 1.25x input, cache reads at 0.1x input
DEFAULT_PRICES = {
    "claude-sonnet-5-5": {"input": 2.0, "output": 10.0, "cache_write": 2.5, "cache_read": 0.2},
    "claude-haiku-5-5": {"input": 0.10, "output": 0.50, "cache_write": 0.125, "cache_read": 0.01},
}


def read_tool_config(root: Path) -> dict[str, Any]:
    """The [tool.kgbench] table of the project's pyproject.toml ({} when there is none)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise InputError(str(path), f"cannot be read: {exc}") from exc
    table = data.get("tool", {}).get("kgbench", {})
    return table if isinstance(table, dict) else {}


def stored_settings(root: Path, reports: str, run: str) -> dict[str, Any]:
    """The settings of a stored run (meta.json), which a replay of it, or a resume, asks again
    by default: its agent, models, conditions, variants, repeats, dataset seed, way of asking
    and floor. {} when the run has no meta.json."""
    import json

    for folder in (Path(run), root / reports / run):
        meta = folder / "meta.json"
        if meta.is_file():
            data = json.loads(meta.read_text(encoding="utf-8"))
            stored = dict(data.get("settings") or {})
            stored["models"] = data.get("models") or stored.get("models") or []
            return stored
    return {}


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


def _given(config: pytest.Config, ini: str, fallback: Any) -> Any:
    """The command line's value; else `fallback` (a replayed run's own) when it has one; else
    the ini value or default."""
    value = config.getoption(ini, default=None)
    if value is not None:
        return value
    return fallback if fallback not in (None, "", ()) else config.getini(ini)


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

        config_table = read_tool_config(root)
        models_raw = _value(config, "kgbench_model")
        if isinstance(models_raw, list):
            models_raw = ",".join(models_raw)
        models = tuple(m.strip() for m in (models_raw or "").split(",") if m.strip())
        reports = str(_value(config, "kgbench_reports"))
        resume = _value(config, "kgbench_resume")
        # a resumed run continues as it began; a replay asks what the replayed run asked
        stored = stored_settings(root, reports, resume) if resume else {}
        agent = _value(config, "kgbench_agent") or stored.get("agent") or (
            "anthropic" if models else "gold")
        replay_run = _value(config, "kgbench_replay_run") or \
            (stored.get("extra") or {}).get("replay_run")
        if not stored and agent == "replay" and replay_run:
            stored = stored_settings(root, reports, replay_run)
        stored_extra = stored.get("extra") or {}
        if not models and stored:
            models = tuple(stored.get("models") or ())
        if not models:
            models = (agent,)
        try:
            repeats = int(_given(config, "kgbench_repeats", stored.get("repeats")))
            timeout = float(_value(config, "kgbench_query_timeout"))
            rounds = int(_value(config, "kgbench_max_rounds"))
            stats_seed = int(_value(config, "kgbench_stats_seed"))
            seed_raw = _given(config, "kgbench_dataset_seed", stored.get("dataset_seed"))
            dataset_seed = int(seed_raw) if seed_raw not in (None, "") else None
        except ValueError as exc:
            raise InputError("options", f"expected a number: {exc}") from exc
        if repeats < 1:
            raise InputError("--repeats", "must be at least 1")
        run_id = resume or _value(config, "kgbench_run_id") or (
            dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{agent}")
        variants = tuple(v.strip() for v in str(_given(
            config, "kgbench_variant", ",".join(stored.get("variants") or ()))).split(",")
            if v.strip())
        strict = config.getoption("kgbench_strict", default=None)
        ablation = config.getoption("kgbench_ablation", default=None)
        synthetic = _value(config, "kgbench_synthetic")
        ask = str(_given(config, "kgbench_ask", stored_extra.get("ask"))).strip().lower()
        if ask not in ("apart", "together"):
            raise InputError("--ask", f"'{ask}' is neither 'apart' nor 'together'")
        return cls(
            condition_ids=tuple(c.id for c in conditions.select(_given(
                config, "kgbench_condition", ",".join(stored.get("condition_ids") or ())))),
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
            extra={
                "synthetic": synthetic,
                "item_timeout": float(_value(config, "kgbench_item_timeout")),
                "effort": _value(config, "kgbench_effort"),
                "max_tokens": int(_value(config, "kgbench_max_tokens")),
                "model_reruns": int(_value(config, "kgbench_model_reruns")),
                "replay_run": replay_run,
                "judge_model": _value(config, "kgbench_judge_model"),
                "ask": ask,
                "floor": bool(config.getoption("kgbench_floor", default=None)
                              or stored_extra.get("floor") or config.getini("kgbench_floor")),
                "aliases": {**DEFAULT_ALIASES, **(config_table.get("models") or {})},
                "prices": {**DEFAULT_PRICES, **(config_table.get("prices") or {})},
            },
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Settings":
        data = dict(data)
        for name in ("condition_ids", "models", "variants", "question_dirs"):
            data[name] = tuple(data[name])
        return cls(**data)
