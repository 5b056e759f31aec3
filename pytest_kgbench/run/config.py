"""Settings from what the user gave: command-line options, ini values, pyproject's
[tool.kgbench] table, a resumed run's stored settings and the packs installed or named.
Above packs (it finds them) and the agents and engines (`check_settings` asks each), so it is not
in core/settings, which holds the settings' shape.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_kgbench.agents import agent_class
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import (
    ASK_MODES,
    PROVIDER_ALIASES,
    PROVIDERS,
    Settings,
    check_resume,
    default_agent,
    engine_list,
    find_run,
    fresh_run_id,
    model_tables,
    read_tool_config,
    replays,
    rerun_ids,
    stored_settings,
    words,
)
from pytest_kgbench.engines.stores import find_kind
from pytest_kgbench.packs.locate import pack_settings


def _number(option: str, text: Any, kind: Callable[[str], Any], what: str,
            minimum: float | None = None, above: float | None = None) -> Any:
    try:
        value = kind(str(text).strip())
    except ValueError:
        raise InputError(option, f"'{text}' is not {what}") from None
    if isinstance(value, float) and value != value:  # NaN
        raise InputError(option, f"'{text}' is not {what}")
    if minimum is not None and value < minimum:
        raise InputError(option, f"must be at least {minimum:g}, got {text}")
    if above is not None and value <= above:
        raise InputError(option, f"must be more than {above:g}, got {text}")
    return value


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


Given = Callable[..., Any]
"""given(option, stored value=None): the command line's value; else the stored run's; else the
ini value or default."""


def build_settings(cli: Mapping[str, Any], ini: Mapping[str, Any], *, root: Path,
                   paths: Mapping[str, str], now: dt.datetime | None = None,
                   registry: Registry | None = None) -> Settings:
    """Settings from the command line's values (`cli`, None where not given), the ini file's
    (`ini`, with every default) and, for --resume or a replay, the stored run's; each value is
    parsed and range-checked here, naming its option. One part per concern: who answers, the
    run's plan, the model's settings, the limits, the engines, the folders. `registry`: the
    session's pieces (agents and conditions are named from it)."""
    table = read_tool_config(root)

    def given(name: str, stored_value: Any = None) -> Any:
        if cli.get(name) is not None:
            return cli[name]
        if stored_value not in (None, "", (), []):
            return stored_value
        return ini.get(name)

    reports = paths["kgbench_reports"]
    resume = given("kgbench_resume")
    folder, stored = _resumed(root, reports, resume)
    agent, models, replay_run, stored = _who_answers(given, stored, root, reports, registry)
    engines, engine_arms = _engines(cli, ini, stored)
    run_id = resume or given("kgbench_run_id") or fresh_run_id(
        root / reports, (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S") + f"-{agent}")
    if not re.fullmatch(r"[A-Za-z0-9][\w.+-]*", str(run_id)) and not resume:
        raise InputError("--run-id", f"'{run_id}' is not a folder name (letters, digits, "
                         "'.', '_', '+', '-')")
    provider = str(given("kgbench_provider", stored.get("provider")) or "anthropic"
                   ).strip().lower()
    if provider not in PROVIDERS:
        raise InputError("--provider", f"'{provider}' is none of {', '.join(PROVIDERS)}")
    settings = Settings.flat(
        agent=agent, models=models, run_id=str(run_id), resume=bool(resume),
        replay_run=str(replay_run) if replay_run else None, provider=provider,
        engines=engines, engine_arms=engine_arms,
        **_plan(given, stored, engine_arms, root, reports, registry),
        **_model_settings(given, stored),
        **_limits(given, stored),
        **_folders(root, paths),
        **model_tables(table, str(root / "pyproject.toml"),
                       PROVIDER_ALIASES.get(provider, {})),
        **pack_settings(given("kgbench_pack", ",".join(stored.get("pack_names") or ())),
                        table.get("packs") or {}, root,
                        given("kgbench_external_data", stored.get("external_dir"))),
    )
    if folder is not None:
        check_resume(folder, settings, registry)
    return settings


def _resumed(root: Path, reports: str, resume: Any) -> tuple[Path | None, dict[str, Any]]:
    """The folder of the run --resume names and its stored settings (none for a new run)."""
    if not resume:
        return None, {}
    folder = find_run(root, reports, str(resume))
    if folder is None:
        raise InputError("--resume", f"no run '{resume}' under {root / reports} (nothing "
                         "to resume; leave --resume out to start a new run)")
    return folder, stored_settings(folder)


def _who_answers(given: Given, stored: dict[str, Any], root: Path, reports: str,
                 registry: Registry | None) -> tuple[str, tuple[str, ...], Any, dict[str, Any]]:
    """(the agent, the models, the run a replay answers from, the stored settings: a replay's
    are the run's it replays)."""
    models = words(given("kgbench_model"))
    agent = str(given("kgbench_agent", stored.get("agent")) or
                default_agent(bool(models), registry)).strip()
    replay_run = given("kgbench_replay_run", stored.get("replay_run"))
    if not stored and replay_run and replays(agent, registry):
        stored = stored_settings(find_run(root, reports, str(replay_run)), "--replay-run")
    if not models:
        models = tuple(stored.get("models") or ()) or (agent,)
    return agent, models, replay_run, stored


def _engines(cli: Mapping[str, Any], ini: Mapping[str, Any], stored: Mapping[str, Any]
             ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(the engine of each language, the engine arms of a language given several)."""
    engines = dict(stored.get("engines") or {})
    engine_arms: dict[str, dict[str, str]] = {}
    for language in ("sparql", "sql"):
        flag = f"--{language}-engine"
        named = cli.get(f"kgbench_{language}_engine")
        stored_arms = (stored.get("engine_arms") or {}).get(language)
        if not named and stored_arms:
            listed = dict(stored_arms)
        else:
            value = named or engines.get(language) or ini.get(f"kgbench_{language}_engine")
            listed = engine_list(value, flag) if value else {}
        if listed:
            engines[language] = next(iter(listed.values()))  # an URL or DSN keeps its case
        if len(listed) > 1:
            engine_arms[language] = listed
    return engines, engine_arms


def _plan(given: Given, stored: Mapping[str, Any], engine_arms: Mapping[str, Mapping[str, str]],
          root: Path, reports: str, registry: Registry | None) -> dict[str, Any]:
    """What the run asks: conditions and their arms, variants, repeats, how items are asked,
    which items (a sample, a rerun), the seeds, and how the report compares."""
    from pytest_kgbench.core.conditions import schema_arms, select

    schema = schema_arms(given("kgbench_schema", ",".join(stored.get("schema") or ())))
    ask = str(given("kgbench_ask", stored.get("ask"))).strip().lower()
    if ask not in ASK_MODES:
        raise InputError("--ask", f"'{ask}' is neither 'apart' nor 'together'")
    seed = given("kgbench_dataset_seed", stored.get("dataset_seed"))
    sample = given("kgbench_sample", stored.get("sample"))
    synthetic = given("kgbench_synthetic", stored.get("synthetic"))
    return dict(
        condition_ids=tuple(c.id for c in select(
            given("kgbench_condition", ",".join(stored.get("condition_ids") or ())), schema,
            {lang: tuple(arms) for lang, arms in engine_arms.items()}, registry)),
        schema=schema,
        variants=words(given("kgbench_variant", ",".join(stored.get("variants") or ())))
        or ("base",),
        repeats=_number("--repeats", given("kgbench_repeats", stored.get("repeats")), int,
                        "a whole number", minimum=1),
        ask=ask,
        dataset_seed=(None if seed in (None, "") else
                      _number("--dataset-seed", seed, int, "a whole number")),
        stats_seed=_number("--stats-seed", given("kgbench_stats_seed"), int, "a whole number"),
        strict=_flag(given("kgbench_strict")),
        force_resume=_flag(given("kgbench_force_resume")),
        ablation=_flag(given("kgbench_ablation")),
        compare_models=_flag(given("kgbench_compare_models")),
        floor=_flag(given("kgbench_floor")) or bool(stored.get("floor")),
        synthetic=str(synthetic) if synthetic else None,
        rerun=(rerun_ids(root, reports, given("kgbench_rerun")) if given("kgbench_rerun")
               or not stored.get("rerun") else tuple(stored["rerun"])),
        sample=(None if sample in (None, "") else
                _number("--sample", sample, int, "a whole number", minimum=1)),
    )


def _model_settings(given: Given, stored: Mapping[str, Any]) -> dict[str, Any]:
    """How the model is asked: where, with what sampling, effort and output limit, and which
    model judges."""
    sampling: dict[str, float | None] = {}
    for name in ("temperature", "top_p"):
        value = given(f"kgbench_{name}", stored.get(name))
        sampling[name] = (None if value in (None, "") else _number(
            f"--{name.replace('_', '-')}", value, float, "a number", minimum=0))
    effort = given("kgbench_effort", stored.get("effort"))
    base_url = given("kgbench_base_url", stored.get("base_url"))
    return dict(
        base_url=str(base_url).strip() or None if base_url else None,
        effort=(str(effort).strip() or None) if effort else None,
        temperature=sampling["temperature"], top_p=sampling["top_p"],
        max_tokens=_number("--max-tokens", given("kgbench_max_tokens", stored.get("max_tokens")),
                           int, "a whole number", minimum=1),
        judge_model=str(given("kgbench_judge_model", stored.get("judge_model")) or "sonnet"),
        batch=_flag(given("kgbench_batch", stored.get("batch"))),
        response_cache=not _flag(given("kgbench_no_cache")),
    )


def _limits(given: Given, stored: Mapping[str, Any]) -> dict[str, Any]:
    """What bounds the run: per query, per item, per round, in dollars, per minute, at once."""
    rates: dict[str, float | None] = {}
    for name in ("rpm", "tpm"):
        value = given(f"kgbench_{name}")
        rates[name] = (None if value in (None, "") else
                       _number(f"--{name}", value, float, "a number per minute", above=0))
    max_cost = given("kgbench_max_cost")
    progress = given("kgbench_progress")
    return dict(
        query_timeout=_number("--query-timeout",
                              given("kgbench_query_timeout", stored.get("query_timeout")), float,
                              "a number of seconds", above=0),
        item_timeout=_number("--item-timeout",
                             given("kgbench_item_timeout", stored.get("item_timeout")), float,
                             "a number of seconds", above=0),
        max_rounds=_number("--max-rounds", given("kgbench_max_rounds", stored.get("max_rounds")),
                           int, "a whole number", minimum=1),
        model_reruns=_number("--model-reruns", given("kgbench_model_reruns"), int,
                             "a whole number", minimum=0),
        max_cost=(None if max_cost in (None, "") else
                  _number("--max-cost", max_cost, float, "a number of dollars", above=0)),
        rpm=rates["rpm"], tpm=rates["tpm"],
        concurrency=_number("--concurrency", given("kgbench_concurrency") or 1, int,
                            "a whole number", minimum=1),
        batch_poll=_number("--batch-poll", given("kgbench_batch_poll"), float,
                           "a number of seconds", above=0),
        progress=(30.0 if progress in (None, "") else
                  _number("--progress", progress, float, "a number of seconds", minimum=0)),
    )


def _folders(root: Path, paths: Mapping[str, str]) -> dict[str, Any]:
    """Where the packs, the questions, the reports and the caches are."""
    return dict(
        rootdir=str(root),
        datasets_dir=str((root / paths["kgbench_datasets"]).resolve()),
        ontology_dir=str((root / paths["kgbench_ontology"]).resolve()),
        question_dirs=words(paths["kgbench_questions"]) or ("questions",),
        reports_dir=str((root / paths["kgbench_reports"]).resolve()),
        cache_dir=str((root / paths["kgbench_cache"]).resolve()),
        responses_dir=str((root / paths.get("kgbench_responses", ".kgbench-responses")
                           ).resolve()),
    )


def check_settings(settings: Settings, registry: Registry, *, asking: bool) -> None:
    """What needs the registry: the agent, the engines, and whatever the agent itself checks
    (the model names, its credential, the run it replays). `asking` is False when nothing
    will be asked (--collect-only, --estimate): credentials are not needed then."""
    agent = agent_class(settings.plan.agent, registry)
    named = list(settings.stores.engines.items())
    named += [(lang, v) for lang, arms in settings.stores.engine_arms.items()
              for v in arms.values()]
    for language, name in named:
        kind = find_kind(registry, language, name)
        problem = kind.check()
        if problem:
            raise InputError(f"--{language}-engine", problem)
    if settings.limits.max_cost is not None and agent.kind == "model":
        unpriced = [m for m in settings.plan.models
                    if not settings.model.prices.get(settings.model_id(m))]
        if unpriced:
            raise InputError("--max-cost", f"no price for {', '.join(unpriced)} "
                             "([tool.kgbench.prices]): what it spends is unknown, so no cap "
                             "can hold it")
    if settings.model.batch and not agent.batches:
        raise InputError("--batch", f"the {settings.plan.agent} agent has no batch API (the "
                         "anthropic and openai agents have)")
    if settings.model.batch and settings.plan.ask == "together":
        raise InputError("--batch", "a batch carries single-turn requests asked apart; --ask "
                         "together asks a session in one conversation: choose one")
    for name in settings.agents_used():  # each agent checks the models it asks
        used = agent_class(name, registry)
        mine = tuple(m for m in settings.plan.models if settings.agent_for(m) == name)
        problem = used.check(settings.but(agent=name, models=mine or settings.plan.models),
                             asking)
        if problem:
            where = f"--agent {name}" if name == settings.plan.agent else \
                f"[tool.kgbench.models] {', '.join(mine)} (agent {name})"
            raise InputError(where, problem)
