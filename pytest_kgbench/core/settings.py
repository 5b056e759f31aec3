"""The session's settings: typed, built once from the command line, the ini file and (for a
resumed or replayed run) the stored run, and checked before anything runs.

Pure module: no pytest. `plugin/options.py` wires `OPTIONS` to pytest's parser and calls
`build_settings` and `run.config.check_settings` at configure time; the `kgbench` command
builds settings the same way. Every problem is an `InputError` naming the option (or file and
field), which the plugin turns into one line and pytest's usage-error exit status (4).
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.conditions import Condition, by_id
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry, given

# Model aliases and list prices (dollars per million tokens), overridable in pyproject.toml:
#   [tool.kgbench.models]   sonnet = "claude-..."
#   [tool.kgbench.prices."claude-..."]  input = 3.0  output = 15.0
# Check both against the provider's current model list and price page before a paid run.
DEFAULT_ALIASES = {"sonnet": "claude-sonnet-5-5", "haiku": "claude-haiku-5-5",
                   "opus": "claude-opus-5-5"}
# dollars per million tokens; cache writes at 1.25x input, cache reads at 0.1x input
# The batch prices (`batch_<kind>`): the Message Batches API and OpenAI's Batch API bill every
# token kind at 50% of its interactive price ("cutting costs by 50%",
# https://platform.claude.com/docs/build-with-claude/batch-processing; OpenAI: "50% cost
# discount compared to synchronous APIs", its Batch FAQ as quoted on
# https://community.openai.com/t/why-batch-api-over-synchronous-apis/866627/8); a model priced
# without them is billed at BATCH_SHARE of each (costs.batch_price).
DEFAULT_PRICES = {
    "claude-sonnet-5-5": {"input": 2.0, "output": 10.0, "cache_write": 2.5, "cache_read": 0.2,
                          "batch_input": 1.0, "batch_output": 5.0, "batch_cache_write": 1.25,
                          "batch_cache_read": 0.1},
    "claude-haiku-5-5": {"input": 0.10, "output": 0.50, "cache_write": 0.125, "cache_read": 0.01,
                         "batch_input": 0.05, "batch_output": 0.25, "batch_cache_write": 0.0625,
                         "batch_cache_read": 0.005},
}
# Claude on Amazon Bedrock and Google Vertex AI (--provider): the same models under the
# platform's ids, priced as the first-party API. Check them against the platform's model list.
PROVIDERS = ("anthropic", "bedrock", "vertex")
PROVIDER_ALIASES = {
    "bedrock": {"sonnet": "anthropic.claude-sonnet-5-5-v1:0",
                "haiku": "anthropic.claude-haiku-5-5-v1:0",
                "opus": "anthropic.claude-opus-5-5-v1:0"},
    "vertex": {"sonnet": "claude-sonnet-5-5", "haiku": "claude-haiku-5-5",
               "opus": "claude-opus-5-5"},
}
for _table in PROVIDER_ALIASES.values():
    for _alias, _id in _table.items():
        if DEFAULT_ALIASES[_alias] in DEFAULT_PRICES:
            DEFAULT_PRICES.setdefault(_id, DEFAULT_PRICES[DEFAULT_ALIASES[_alias]])
ASK_MODES = ("apart", "together")


def model_tables(table: Mapping[str, Any], source: str = "pyproject.toml",
                 provider_aliases: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The model settings of a [tool.kgbench] table, as Settings takes them: `aliases`
    (alias -> model id), `model_agents` (alias -> the agent that asks it) and `model_urls`
    (alias -> the endpoint it is served at), prices and context windows. An alias of
    [tool.kgbench.models] is a model id, or a table naming the agent and endpoint too:
    `local = {id = "qwen2.5:7b", agent = "openai", base_url = "http://localhost:11434/v1"}`, so
    one run's `--model sonnet,local` asks each model through its own agent. `provider_aliases`
    (--provider bedrock|vertex) name the provider's own ids for the default aliases."""
    aliases: dict[str, str] = {**DEFAULT_ALIASES, **(provider_aliases or {})}
    agents: dict[str, str] = {}
    urls: dict[str, str] = {}
    for alias, value in (table.get("models") or {}).items():
        if isinstance(value, str):
            aliases[str(alias)] = value
            continue
        if not isinstance(value, Mapping) or not isinstance(value.get("id"), str) or \
                set(value) - {"id", "agent", "base_url"}:
            raise InputError(source, f"[tool.kgbench.models] {alias} is neither a model id nor "
                             "a table of id, agent and base_url", field=f"models.{alias}")
        aliases[str(alias)] = value["id"]
        if value.get("agent"):
            agents[str(alias)] = str(value["agent"])
        if value.get("base_url"):
            urls[str(alias)] = str(value["base_url"])
    return {"aliases": aliases, "model_agents": agents, "model_urls": urls,
            "prices": {**DEFAULT_PRICES, **(table.get("prices") or {})},
            "windows": {str(k): int(v) for k, v in (table.get("windows") or {}).items()},
            "cache_minimums": {str(k): int(v)
                               for k, v in (table.get("cache_minimums") or {}).items()}}


# The shortest prompt prefix a provider caches, in tokens: a shorter one is processed (and
# billed) in full even when marked for caching. Anthropic's prompt-caching page
# (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching, "minimum cacheable
# prompt length") gives 1024 tokens for its Sonnet and Opus models and 2048 for Haiku, as
# quoted by https://developers.llamaindex.ai/python/examples/llm/anthropic_prompt_caching and
# https://docs.truefoundry.com/gateway/chat-completions-prompt-caching; later models are listed
# higher (2048 for Sonnet 4.6, 4096 for Opus 4.5 and Haiku 4.5:
# https://docs.orq.ai/docs/proxy/prompt-caching). OpenAI caches prompts of 1024 tokens or more
# (https://litellm.vercel.app/docs/completion/prompt_caching). Check the provider's page for
# the model you run and set its own in [tool.kgbench.cache_minimums] ("<model id>" = tokens).
DEFAULT_CACHE_MINIMUM = 1024
HAIKU_CACHE_MINIMUM = 2048
DEFAULT_WINDOW = 200_000  # a model's context window in tokens, unless [tool.kgbench.windows] says

# a password in a URL or DSN (scheme://user:PASSWORD@host) or a key=value connection string
# (password=PASSWORD): what `redact_secrets` hides
_URI_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/?#@\s]*:)([^@\s/]+)(?=@)", re.I)
_KEY_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.I)
REDACTED = "***"


def redact_secrets(text: str) -> str:
    """`text` with every password a URL or DSN in it carries shown as ***: what is recorded
    (meta.json, report.json, a store's label, an error message) never holds one."""
    text = _URI_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return _KEY_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)


def engine_value(value: str) -> str:
    """An engine as an option names it: the name lower-cased, an argument after `=` (an URL
    or DSN) kept as given."""
    name, eq, argument = str(value).strip().partition("=")
    return name.strip().lower() + eq + argument.strip()


def engine_list(value: str, flag: str) -> dict[str, str]:
    """The engines an option value names, by name (`rdflib,oxigraph`,
    `duckdb,postgres=DSN`): one, or several when each comma-separated part begins with an
    engine's name (an URL or DSN holding a comma is one engine)."""
    parts = [p for p in str(value).split(",") if p.strip()]
    if len(parts) < 2 or not all(re.match(r"\s*[A-Za-z][\w-]*\s*(=|$)", p) for p in parts):
        parts = [str(value)]
    out: dict[str, str] = {}
    for part in parts:
        engine = engine_value(part)
        name = engine.partition("=")[0]
        if name in out:
            raise InputError(flag, f"'{name}' is named twice: each engine is an arm of its own, "
                             "named by its engine")
        out[name] = engine
    return out


@dataclass(frozen=True)
class Option:
    """One command-line option and its ini twin (`kgbench_<name>`)."""

    flag: str
    help: str
    default: str | None = None
    flag_only: bool = False   # a store_true flag (its ini twin is a bool)
    repeatable: bool = False  # may be given more than once (--model)

    @property
    def ini(self) -> str:
        return "kgbench_" + self.flag.lstrip("-").replace("kgbench-", "").replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("--condition", "conditions to run: ids (R1,D2), comma lists, 'reading', 'querying' "
           "or 'all'", "all"),
    Option("--schema", "how a querying condition's model learns the store: prompt (described "
           "in the prompt, and the discovery tools), tools (list_tables and describe only), "
           "none (run_query alone), floor (run_query alone, minimal instruction); comma list "
           "or 'all'", "prompt"),
    Option("--agent", "who answers (kgbench list shows every registered agent); default: the "
           "gold reference agent, or the model agent when --model names a model"),
    Option("--model", "model alias or id; comma list or repeated", repeatable=True),
    Option("--repeats", "times each item is asked", "1"),
    Option("--variant", "pack variants to run: names, comma list or 'all'", "base"),
    Option("--kgbench-rerun", "RUN: ask again, in a new run, the items RUN graded wrong, "
           "partial or timed out (pytest's --lf reruns only must-pass failures)"),
    Option("--sample", "ask a seeded sample of N questions per pack and tier (a cheap first "
           "look; the seed is --stats-seed)"),
    Option("--pack", "packs to run: names, or folders holding a pack.yaml; comma list or "
           "repeated (default: every pack found)", repeatable=True),
    Option("--external-data", "folder holding packs' external data (a conformance pack's "
           "published files); default: $KGBENCH_EXTERNAL"),
    Option("--run-id", "name of the run folder under reports/"),
    Option("--query-timeout", "seconds before a query is stopped", "60"),
    Option("--max-rounds", "tool-call rounds in a querying condition", "8"),
    Option("--resume", "RUN_ID: continue a run, skipping items already banked"),
    Option("--force-resume", "with --resume: continue even when the command line changes what "
           "the stored run asked (seed, variants, models, prompt, grader); both are recorded in "
           "meta.json", flag_only=True),
    Option("--dataset-seed", "generate every pack at this seed instead of the pack's own"),
    Option("--stats-seed", "seed of the bootstrap intervals", "20261129"),
    Option("--sparql-engine", "engine of the SPARQL conditions (kgbench list shows them; "
           "default: the language's own)"),
    Option("--sql-engine", "engine of the SQL conditions (kgbench list shows them; default: "
           "the language's own)"),
    Option("--item-timeout", "wall-clock seconds a model may take for one item; past it the "
           "item is a timeout (a miss)", "600"),
    Option("--effort", "effort passed to models that support it (low ... max)"),
    Option("--max-tokens", "output token limit per model call", "4096"),
    Option("--model-reruns", "reruns of an item whose model call failed transiently (429, 529, "
           "5xx, reset)", "2"),
    Option("--replay-run", "RUN_ID: the run whose answers the replay agent gives"),
    Option("--ask", "apart: one model session per item; together: one session per condition x "
           "repeat x model answers every selected question of the variant at once", "apart"),
    Option("--judge-model", "the model that grades 'why' questions against their checklist "
           "(twice)", "sonnet"),
    Option("--synthetic", "the synthetic agent's probability of a gold answer per condition, "
           "e.g. D1=0.45,D2=0.7 (default for unnamed conditions: *=0.5)"),
    # pytest itself owns --strict, so ours carries the plugin's name
    Option("--kgbench-strict", "fail every item whose answer is not correct", flag_only=True),
    Option("--floor", "the floor arm: a minimal instruction with nothing about definitions, "
           "checking or citing", flag_only=True),
    Option("--estimate", "print the estimated tokens and dollars of the selected items before "
           "any call, and ask nothing (implies --collect-only)", flag_only=True),
    Option("--base-url", "base URL of the OpenAI-compatible endpoint --agent openai calls "
           "(default: OpenAI's own; e.g. http://localhost:11434/v1 for Ollama), or of the host "
           "--agent gemini calls (default: Google's)"),
    Option("--temperature", "sampling temperature sent to the model (default: the "
           "provider's)"),
    Option("--top-p", "nucleus sampling top_p sent to the model (default: the provider's)"),
    Option("--max-cost", "DOLLARS: halt the run, keeping what was banked, before the next "
           "model request could take its spending at list prices past this"),
    Option("--progress", "SECONDS between the live progress lines (items banked, grades, "
           "tokens, dollars, time left); 0 for none; none under -q (default: 30)"),
    Option("--batch", "send the single-turn requests (reading conditions) through the "
           "provider's batch API at its batch price (half the interactive one); results come "
           "within 24 hours, most within one; each item waits for its own", flag_only=True),
    Option("--batch-poll", "seconds between two looks at a submitted batch", "30"),
    Option("--provider", "where the anthropic agent reaches Claude: anthropic (the API), "
           "bedrock (Amazon Bedrock: AWS credentials and region), vertex (Google Vertex AI: "
           "project and region)", "anthropic"),
    Option("--concurrency", "N: model requests in flight at once per worker process (items "
           "answered ahead of their turn, each still graded and banked by its own item)", "1"),
    Option("--rpm", "requests per minute the whole run may send (client-side; each of -n W "
           "workers keeps to RPM/W)"),
    Option("--tpm", "tokens per minute the whole run may send (estimated before a request, "
           "corrected by its usage; each of -n W workers keeps to TPM/W)"),
    Option("--no-cache", "ask the model again even when the response cache holds this exact "
           "request (and do not store the responses)", flag_only=True),
    Option("--ablation", "report paired comparisons: the first-listed condition against every "
           "other, plus the design's named pairs (R1-R4, D1-D2, D3-D6, ...)", flag_only=True),
    Option("--compare-models", "report paired comparisons between models: the first model "
           "named by --model against every other, on each condition, per tier",
           flag_only=True),
)
PATHS: tuple[tuple[str, str, str], ...] = (
    ("kgbench_datasets", "folder holding one folder per pack (pack.yaml inside)", "datasets"),
    ("kgbench_ontology", "folder holding one folder of definitions per pack", "ontology"),
    ("kgbench_questions", "name of the folders whose *.yaml files are question files",
     "questions"),
    ("kgbench_reports", "folder of run folders", "reports"),
    ("kgbench_cache", "folder of built variants (shared by workers, locked)", ".kgbench-cache"),
    ("kgbench_responses", "folder of the response cache: model responses keyed by the "
     "SHA-256 of their exact request", ".kgbench-responses"),
)


@dataclass(frozen=True)
class RunPlan:
    """What the run asks: the conditions, who answers, the packs, variants, questions and
    repeats, how they are asked and compared."""

    condition_ids: tuple[str, ...]
    agent: str
    models: tuple[str, ...]
    run_id: str = "run"
    resume: bool = False
    force_resume: bool = False
    replay_run: str | None = None
    repeats: int = 1
    variants: tuple[str, ...] = ("base",)
    pack_names: tuple[str, ...] = ()  # the packs --pack selects (none: every pack found)
    sample: int | None = None  # --sample: questions per pack and tier
    rerun: tuple[str, ...] | None = None  # --kgbench-rerun: the node ids to ask again
    ask: str = "apart"
    floor: bool = False
    schema: tuple[str, ...] = ("prompt",)  # --schema: the arms of the querying conditions
    synthetic: str | None = None
    strict: bool = False
    ablation: bool = False
    compare_models: bool = False  # pair the first model against each other, per condition
    dataset_seed: int | None = None
    stats_seed: int = 20261129


@dataclass(frozen=True)
class ModelConfig:
    """How a model is asked: its ids, endpoints, prices and windows, its sampling and output
    limit, the provider, the response cache, the batch API and the judge."""

    aliases: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_ALIASES))
    model_agents: Mapping[str, str] = field(default_factory=dict)  # alias -> its agent
    model_urls: Mapping[str, str] = field(default_factory=dict)    # alias -> its endpoint
    prices: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_PRICES.items()})
    windows: Mapping[str, int] = field(default_factory=dict)  # model id -> context tokens
    cache_minimums: Mapping[str, int] = field(default_factory=dict)  # model id -> tokens
    base_url: str | None = None  # --base-url: the endpoint of --agent openai (or gemini)
    provider: str = "anthropic"  # --provider: anthropic, bedrock or vertex (anthropic agent)
    effort: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int = 4096
    judge_model: str = "sonnet"
    response_cache: bool = True  # --no-cache turns it off
    batch: bool = False          # --batch: single-turn requests through the batch API


@dataclass(frozen=True)
class Limits:
    """How long, how much and how fast: the deadlines, rounds, reruns, the spending cap, and
    the pace (none of the last changes what an item is asked: not in a request's cache key,
    the report's fingerprint or what --resume compares)."""

    query_timeout: float = 60.0
    item_timeout: float = 600.0
    max_rounds: int = 8
    model_reruns: int = 2
    max_cost: float | None = None  # --max-cost: dollars at list prices the run may spend
    concurrency: int = 1           # --concurrency: model requests in flight per process
    rpm: float | None = None       # --rpm: requests per minute, the whole run
    tpm: float | None = None       # --tpm: tokens per minute, the whole run
    batch_poll: float = 30.0       # --batch-poll: seconds between two looks at a batch
    progress: float = 30.0         # --progress: seconds between the live lines (0: none)


@dataclass(frozen=True)
class Engines:
    """The engine of each query language, and the engine arms an option names."""

    engines: Mapping[str, str] = field(default_factory=dict)  # language -> engine name
    # language -> engine name -> its value, when an option names several (the engine arms:
    # "D4@oxigraph"); `engines` holds the first, the engine of the references and the keys
    engine_arms: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Paths:
    """Where things are: the project, the packs and their data, the questions, the run
    folders and the caches."""

    rootdir: str
    datasets_dir: str
    ontology_dir: str
    reports_dir: str
    cache_dir: str
    question_dirs: tuple[str, ...] = ("questions",)
    responses_dir: str = ""        # where the response cache lives ("" : nowhere, no cache)
    packs: Mapping[str, str] = field(default_factory=dict)  # folder packs: name -> folder
    external_dir: str | None = None   # where packs' external data lives


GROUPS: dict[str, type] = {"plan": RunPlan, "model": ModelConfig, "limits": Limits,
                           "stores": Engines, "paths": Paths}
GROUP_OF: dict[str, str] = {f.name: group for group, kind in GROUPS.items()
                            for f in fields(kind)}
"""Each setting's name (as meta.json, the command line's dest and Settings.flat name it) ->
the part of Settings that holds it."""
_TUPLES = ("condition_ids", "models", "variants", "question_dirs", "pack_names", "rerun",
           "schema")


@dataclass(frozen=True)
class Settings:
    """Everything a session needs to know, by concern, as builtin values (sent to workers as
    JSON). Stored flat (`to_dict`, meta.json), one name per setting (`GROUP_OF`)."""

    plan: RunPlan
    paths: Paths
    model: ModelConfig = field(default_factory=ModelConfig)
    limits: Limits = field(default_factory=Limits)
    stores: Engines = field(default_factory=Engines)

    @classmethod
    def flat(cls, **values: Any) -> Settings:
        """Settings from flat names (`GROUP_OF`), as meta.json and the options name them."""
        unknown = sorted(set(values) - set(GROUP_OF))
        if unknown:
            raise TypeError(f"no such setting: {', '.join(unknown)}")
        parts: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        for name, value in values.items():
            parts[GROUP_OF[name]][name] = value
        return cls(**{group: GROUPS[group](**part) for group, part in parts.items()})

    def but(self, **values: Any) -> Settings:
        """These settings with the flat-named `values` changed."""
        return Settings.flat(**{**self._flat(), **values})

    def get(self, name: str) -> Any:
        """One setting by its flat name."""
        return getattr(getattr(self, GROUP_OF[name]), name)

    def _flat(self) -> dict[str, Any]:
        return {f.name: getattr(getattr(self, group), f.name)
                for group, kind in GROUPS.items() for f in fields(kind)}

    if not TYPE_CHECKING:  # the flat names of 0.x, for one release (unseen by the type check)
        def __getattr__(self, name: str) -> Any:
            group = GROUP_OF.get(name)
            if group is None or name.startswith("__"):
                raise AttributeError(f"'Settings' object has no attribute '{name}'")
            warnings.warn(f"Settings.{name} is Settings.{group}.{name} now; the flat name "
                          "goes in the next release", DeprecationWarning, stacklevel=2)
            return getattr(object.__getattribute__(self, group), name)

    def conditions(self, registry: Registry | None = None) -> tuple[Condition, ...]:
        """The run's conditions, read from `registry` (the session's; the shipped ladder where
        none is passed)."""
        return tuple(by_id(i, registry) for i in self.plan.condition_ids)

    @property
    def run_dir(self) -> Path:
        return Path(self.paths.reports_dir) / self.plan.run_id

    def model_id(self, model: str) -> str:
        """A model alias (sonnet, haiku, opus, or one set in [tool.kgbench.models]) as its id."""
        return self.model.aliases.get(model, model)

    def agent_for(self, model: str) -> str:
        """The agent that asks `model`: the one its [tool.kgbench.models] table names, else
        the run's (--agent)."""
        return self.model.model_agents.get(model) or self.plan.agent

    def agents_used(self) -> list[str]:
        """Every agent the run's models are asked through, the run's own first."""
        models = self.plan.models or (self.plan.agent,)
        return list(dict.fromkeys(self.agent_for(m) for m in models))

    def base_url_for(self, model: str) -> str | None:
        """The endpoint `model` is asked at: its table's base_url, else --base-url."""
        return self.model.model_urls.get(model) or self.model.base_url

    def window(self, model: str) -> int:
        """A model's context window in tokens ([tool.kgbench.windows], else DEFAULT_WINDOW)."""
        return int(self.model.windows.get(self.model_id(model), DEFAULT_WINDOW))

    def cache_minimum(self, model: str) -> int:
        """The shortest prefix the model's provider caches, in tokens
        ([tool.kgbench.cache_minimums], else 2048 for a Haiku model, else 1024)."""
        model_id = self.model_id(model)
        if model_id in self.model.cache_minimums:
            return int(self.model.cache_minimums[model_id])
        return HAIKU_CACHE_MINIMUM if "haiku" in model_id.lower() else DEFAULT_CACHE_MINIMUM

    def engine(self, language: str) -> str | None:
        """The engine named for a query language, or None for the language's default."""
        return self.stores.engines.get(language)

    def engines_for(self, cond: Condition) -> Mapping[str, str]:
        """The engines a condition's store runs on: the session's, with an engine arm's own
        for its language ("D4@oxigraph")."""
        name, engines = cond.engine, self.stores.engines
        if not name:
            return engines
        value = self.stores.engine_arms.get(cond.language, {}).get(name)
        if value is None:  # an arm named on its own (--condition D4@oxigraph), or in a
            current = engines.get(cond.language) or ""  # process given its one engine
            value = current if current.partition("=")[0] == name else name
        return {**engines, cond.language: value}

    def to_dict(self, *, secrets: bool = False) -> dict[str, Any]:
        """The settings as builtin values: what meta.json and report.json record, a password
        in an engine's DSN or the base URL shown as *** (`redact_secrets`). With `secrets`,
        as they are: the hop to an xdist worker, which must connect too."""
        data = asdict(self.plan) | asdict(self.model) | asdict(self.limits) | \
            asdict(self.stores) | asdict(self.paths)
        if not secrets:
            data["engines"] = {k: redact_secrets(v) for k, v in data["engines"].items()}
            data["engine_arms"] = {k: {n: redact_secrets(v) for n, v in arms.items()}
                                   for k, arms in data["engine_arms"].items()}
            if data.get("base_url"):
                data["base_url"] = redact_secrets(data["base_url"])
        return data

    @classmethod
    def at(cls, root: Path | str, **values: Any) -> Settings:
        """Settings for a repository laid out as the defaults say (datasets/, ontology/,
        reports/, .kgbench-cache/ under `root`): the `kgbench` command's, and tests'."""
        base = Path(root).resolve()
        defaults: dict[str, Any] = {
            "condition_ids": (), "agent": default_agent(False), "models": (),
            "rootdir": str(base),
            "datasets_dir": str(base / "datasets"), "ontology_dir": str(base / "ontology"),
            "reports_dir": str(base / "reports"), "cache_dir": str(base / ".kgbench-cache"),
            "responses_dir": str(base / ".kgbench-responses")}
        return cls.flat(**{**defaults, **values})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        values = {k: v for k, v in data.items() if k in GROUP_OF}
        for name in _TUPLES:
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls.flat(**values)


# --- building: the command line over the stored run over the ini file --------------------------

def read_tool_config(root: Path) -> dict[str, Any]:
    """The [tool.kgbench] table of the project's pyproject.toml ({} when there is none)."""
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise InputError(str(path), f"cannot be read: {exc}") from exc
    table = data.get("tool", {}).get("kgbench", {})
    return table if isinstance(table, dict) else {}


def find_run(root: Path, reports: str, run: str) -> Path | None:
    """The folder of a stored run, given as a path or as a run id under the reports folder."""
    for folder in (Path(run), root / reports / run):
        if (folder / "meta.json").is_file() or (folder / "answers.jsonl").is_file():
            return folder
    return None


def stored_meta(folder: Path | None, option: str = "--resume") -> dict[str, Any]:
    """A stored run's meta.json ({} when it has none); InputError naming `option` (the option
    that named the run) when it cannot be read: the run's answers are kept, but it cannot be
    continued or replayed from settings nobody can read."""
    meta = folder / "meta.json" if folder else None
    if meta is None or not meta.is_file():
        return {}
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(option, f"{meta} cannot be read as JSON ({exc}): the run's settings "
                         "are lost, so it cannot be continued; start a new run") from None
    if not isinstance(data, dict):
        raise InputError(option, f"{meta} is not a JSON object: the run's settings are lost, "
                         "so it cannot be continued; start a new run")
    return data


def stored_settings(folder: Path | None, option: str = "--resume") -> dict[str, Any]:
    """The settings of a stored run (meta.json), which a replay of it, or a resume, asks again
    by default; {} when there is none. Runs written before settings were flat kept some of
    them under "extra"."""
    data = stored_meta(folder, option)
    if not data:
        return {}
    stored = dict(data.get("settings") or {})
    stored.update({k: v for k, v in (stored.pop("extra", None) or {}).items() if k not in stored})
    if "sparql_engine" in stored and "engines" not in stored:
        stored["engines"] = {"sparql": stored.pop("sparql_engine")}
    stored["models"] = data.get("models") or stored.get("models") or []
    return stored


def fresh_run_id(reports: Path, stamp: str) -> str:
    """A run id no run under `reports` has: the time and agent, with -2, -3 ... when two runs
    start in the same second."""
    run_id, n = stamp, 1
    while find_run(reports.parent, reports.name, run_id) is not None:
        n += 1
        run_id = f"{stamp}-{n}"
    return run_id


def check_fresh_run(settings: Settings) -> None:
    """A run id is used once: a run that is not a resume may not write into a run folder
    that exists (it would mix its answers with the old run's under two settings)."""
    if settings.plan.resume:
        return
    reports = Path(settings.paths.reports_dir)
    folder = find_run(reports.parent, reports.name,
                      settings.plan.run_id)
    if folder is not None:
        raise InputError("--run-id", f"run '{settings.plan.run_id}' exists ({folder}): continue it "
                         f"with --resume {settings.plan.run_id}, or name a fresh run id")


# what --kgbench-rerun asks again: every miss of the model's own -- wrong, partial, timed out,
# cut at the output limit, refused, an empty reply
RERUN_LETTERS = ("W", "P", "T", "M", "N", "Z")


def rerun_ids(root: Path, reports: str, run: Any) -> tuple[str, ...] | None:
    """The node ids of a stored run's misses (--kgbench-rerun RUN): `RERUN_LETTERS`."""
    if not run:
        return None
    from pytest_kgbench.core.record import read_answers

    folder = find_run(root, reports, str(run))
    if folder is None:
        raise InputError("--kgbench-rerun", f"no run '{run}' under {root / reports}")
    records = read_answers(folder / "answers.jsonl")
    return tuple(sorted(r["nodeid"] for r in records if r.get("letter") in RERUN_LETTERS))


RESUME_CHECKED = (  # (setting, how the one line names it): what an item was asked under,
    # and which items the run has (its selection: the pytest one, -k, -m and the paths, is
    # checked by the plugin)
    ("condition_ids", "--condition"), ("schema", "--schema"), ("repeats", "--repeats"),
    ("pack_names", "--pack"), ("rerun", "--kgbench-rerun"),
    ("dataset_seed", "--dataset-seed"), ("variants", "--variant"), ("agent", "--agent"),
    ("models", "--model"), ("effort", "--effort"), ("max_tokens", "--max-tokens"),
    ("ask", "--ask"), ("floor", "--floor"), ("max_rounds", "--max-rounds"),
    ("judge_model", "--judge-model"), ("synthetic", "--synthetic"), ("sample", "--sample"),
    ("base_url", "--base-url"), ("temperature", "--temperature"), ("top_p", "--top-p"),
    ("provider", "--provider"))
CODE_CHECKED = (("grader_sha256", "the grader's code"), ("prompts_sha256", "the prompts' code"))


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def resume_differences(meta: Mapping[str, Any], settings: Settings,
                       registry: Registry | None = None) -> dict[str, Any]:
    """What the resumed session would ask differently from the stored run (meta.json): each
    as {"stored": ..., "now": ...}, named as the command line names it. A setting the stored
    run did not record is not compared."""
    stored = dict(meta.get("settings") or {})
    stored["models"] = meta.get("models") or stored.get("models")
    out: dict[str, Any] = {}
    for name, label in RESUME_CHECKED:
        if name not in stored:
            continue
        old, new = _plain(stored[name]), _plain(settings.get(name))
        if old != new:
            out[label] = {"stored": old, "now": new}
    from pytest_kgbench.core.fingerprints import code_fingerprints

    now = code_fingerprints(registry)
    for key, label in CODE_CHECKED:
        old = meta.get(key)
        if old and old != now[key]:
            out[label] = {"stored": str(old)[:12], "now": now[key][:12]}
    return out


def check_resume(folder: Path, settings: Settings, registry: Registry | None = None) -> None:
    """Refuse to resume a run under other settings than it was asked with (one line naming
    what differs), unless --force-resume."""
    meta = stored_meta(folder)
    if settings.plan.force_resume or not meta:
        return
    differs = resume_differences(meta, settings, registry)
    if differs:
        what = "; ".join(f"{label} was {_shown(v['stored'])}, now {_shown(v['now'])}"
                         for label, v in differs.items())
        raise InputError("--resume", f"run '{folder.name}' was asked otherwise ({what}): leave "
                         "those out to continue as it began, or pass --force-resume to mix "
                         "them (both are recorded in meta.json)")


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "none"
    return "none" if value is None else str(value)


def replays(agent: str, registry: Registry | None = None) -> bool:
    """Whether the agent answers from a stored run (its settings are then the run's)."""
    cls = given(registry).agents.get(agent)
    return cls is not None and cls.kind == "replay"


def default_agent(models_named: bool, registry: Registry | None = None) -> str:
    """The agent of a run that names none: the registered agent that is the default with
    models named (`default_with_models`), or without (`default_without_models`)."""
    for name, cls in given(registry).agents.items():
        if cls.default_with_models if models_named else cls.default_without_models:
            return name
    raise InputError("--agent", "no agent is registered as the default: name one")


MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")


def check_models(settings: Settings, served: Collection[str] | None = None,
                 at: str = "") -> None:
    """Every model named is an alias of [tool.kgbench.models] or looks like a full model id
    (a word with a digit or one of - . : / @ in it): a misspelt alias ("sonet") is caught
    before a run, not at its first call. Asked at a server that said which names it serves
    (`served`, the server at `at`), a name passes if the server serves it (or the id its alias
    stands for), whatever it looks like, and is refused if not."""
    for model in settings.plan.models:
        if served is not None:
            if model in served or settings.model_id(model) in served:
                continue
            raise InputError("--model", f"'{model}' is not a model the server at {at} serves "
                             f"(GET /models lists: {', '.join(served) or 'none'})")
        if model not in settings.model.aliases and not (
                MODEL_ID.fullmatch(model) and re.search(r"[-.:/@\d]", model)):
            raise InputError("--model", f"'{model}' is neither an alias ("
                             f"{', '.join(sorted(settings.model.aliases))}) nor a model id")


def words(value: Any) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return tuple(v.strip() for v in str(value or "").split(",") if v.strip())
