"""The pytest plugin: its hooks, items, options, the run folder and the progress line; the
only layer that imports pytest. Thin: each hook calls a plain function.

Process roles (as in pytest's junitxml and pytest-randomly): settings are parsed and checked
on the controller at configure time — a bad option is one line and exit status 4 before
anything is collected — and sent to xdist workers through `workerinput`, so every process
agrees on the run id; the run folder is written by the controller only, from logreports.
Every process builds the registry of the session (the shipped pieces plus what plugins
register through the hooks of `core/hookspecs.py`).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from pytest_kgbench.core.errors import InputError, KgbenchError
from pytest_kgbench.core.settings import Settings, check_fresh_run, stored_meta
from pytest_kgbench.plugin import keys
from pytest_kgbench.plugin.options import add_options, settings_from_config
from pytest_kgbench.plugin.runstore import (
    BROKEN_PROPERTY,
    LETTER_PROPERTY,
    NOT_BANKED_PROPERTY,
    RECORD_PROPERTY,
    RunStore,
)
from pytest_kgbench.run.config import check_settings
from pytest_kgbench.run.shipped import fill

WORKER_SETTINGS = "kgbench_settings"
WORKER_SELECTION = "kgbench_selection"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The plugin's hooks, and the shipped pieces registered through them first."""
    from pytest_kgbench.run import shipped

    shipped.register(pluginmanager)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """--estimate asks nothing: it is a collect-only run (set before xdist looks)."""
    if config.getoption("kgbench_estimate", default=None):
        config.option.collectonly = True


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        registry = fill(config.pluginmanager)
    except InputError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[keys.REGISTRY] = registry
    notes: list[str] = []
    selection: dict[str, Any] = {}
    differs: dict[str, Any] = {}
    if _is_worker(config):
        settings = Settings.from_dict(json.loads(config.workerinput[WORKER_SETTINGS]))  # type: ignore[attr-defined]
        chosen = config.workerinput.get(WORKER_SELECTION)  # type: ignore[attr-defined]
        if chosen:  # the controller's selection (a resumed run's is restored there)
            _apply_selection(config, json.loads(chosen), tuple(SELECTION))
    else:
        try:
            settings = settings_from_config(config, registry)
            _point_at_packs(config, settings)
            selection, differs = _resume_selection(config, settings)
            settings = _shard(config, settings, registry)
            collects = _collects_questions(config, settings)
            check_settings(settings, registry, asking=not config.option.collectonly
                           and collects)
            if collects:
                if not config.option.collectonly:
                    check_fresh_run(settings)
                notes = _preflight(config, settings)
        except KgbenchError as exc:
            raise pytest.UsageError(" ".join(str(exc).split())) from exc
    config.stash[keys.SETTINGS] = settings
    from pytest_kgbench.asking.cases import marker_lines

    for line in marker_lines(settings, registry):
        config.addinivalue_line("markers", line)
    if not _is_worker(config) and not config.option.collectonly and \
            _collects_questions(config, settings):
        store = RunStore(settings, registry)
        store.meta["not_run"] = notes
        store.meta["selection"] = selection
        if differs and store.meta.get("resumes"):
            store.meta["resumes"][-1]["selection_differs"] = differs
        config.stash[keys.RUNSTORE] = store
        config.pluginmanager.register(store, "kgbench-runstore")
        if settings.limits.progress > 0 and config.get_verbosity() >= 0:
            config.pluginmanager.register(ProgressHooks(config, settings, store),
                                          "kgbench-progress")
    if keys.RUNSTORE in config.stash or (_is_worker(config) and
                                         _collects_questions(config, settings)):
        from pytest_kgbench.core.interrupt import Interrupt

        interrupt = Interrupt(hard_second=not _is_worker(config))
        if interrupt.install():
            config.stash[keys.INTERRUPT] = interrupt
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "kgbench-xdist")
        if not _is_worker(config) and _collects_questions(config, settings):
            _schedule_by_context(config, settings)


def pytest_unconfigure(config: pytest.Config) -> None:
    interrupt = config.stash.get(keys.INTERRUPT, None)
    if interrupt is not None:
        interrupt.uninstall()
    for key in (keys.PREBUILT, keys.CUT_RUNTIME):
        prebuilt = config.stash.get(key, None)
        if prebuilt is not None:  # no item asked for the session's runtime
            prebuilt.close()


def pytest_sessionstart(session: pytest.Session) -> None:
    """The first Ctrl-C stops the session after the item in flight (core/interrupt.py): on the
    controller, the run store records it and xdist stops sending items."""
    config = session.config
    interrupt = config.stash.get(keys.INTERRUPT, None)
    if interrupt is None:
        return

    def stop(why: str) -> None:
        session.shouldstop = f"kgbench: {why}"
        dsession = config.pluginmanager.get_plugin("dsession")
        if dsession is not None:
            dsession.shouldstop = f"kgbench: {why}"

    interrupt.on_request.append(stop)
    store = config.stash.get(keys.RUNSTORE, None)
    if store is not None:
        interrupt.on_request.append(lambda why: setattr(store, "interrupted", why))


# --- the run's selection: part of the run, restored and checked on --resume --------------------

SELECTION = {"args": "the path list", "keyword": "-k", "markexpr": "-m", "deselect": "--deselect"}


def _selection(config: pytest.Config) -> dict[str, Any]:
    """What chose the session's items besides kgbench's own options: the paths (relative to
    the rootdir where they lie in it), -k, -m and --deselect."""
    root = Path(config.rootpath).resolve()

    def relative(arg: str) -> str:
        path, sep, rest = str(arg).partition("::")
        full = Path(config.invocation_params.dir, path).resolve()
        try:
            shown = full.relative_to(root).as_posix() or "."
        except ValueError:
            shown = str(full)
        return shown + sep + rest

    return {"args": sorted(relative(a) for a in config.args),
            "keyword": config.option.keyword or "", "markexpr": config.option.markexpr or "",
            "deselect": sorted(str(d) for d in config.getoption("deselect", None) or [])}


def _apply_selection(config: pytest.Config, selection: dict[str, Any],
                     names: tuple[str, ...]) -> None:
    """Make `selection`'s `names` the session's (paths relative to the rootdir)."""
    root = Path(config.rootpath)
    if "args" in names and selection.get("args"):
        config.args = [str(root / a.partition("::")[0]) + "".join(a.partition("::")[1:])
                       for a in selection["args"]]
    if "keyword" in names:
        config.option.keyword = selection.get("keyword") or ""
    if "markexpr" in names:
        config.option.markexpr = selection.get("markexpr") or ""
    if "deselect" in names:
        config.option.deselect = list(selection.get("deselect") or [])


def _resume_selection(config: pytest.Config, settings: Settings
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The session's selection, and what it changes of the resumed run's. A resumed run
    continues the items it was started with: what the command line leaves out is restored
    from meta.json, and what it gives otherwise is refused (InputError, one line) unless
    --force-resume, which records both."""
    now = _selection(config)
    if not settings.plan.resume:
        return now, {}
    stored = stored_meta(settings.run_dir).get("selection")
    if not isinstance(stored, dict):
        return now, {}  # a run from before its selection was recorded
    given = {"args": config.args_source == pytest.Config.ArgsSource.ARGS,
             "keyword": bool(now["keyword"]), "markexpr": bool(now["markexpr"]),
             "deselect": bool(now["deselect"])}
    differs = {SELECTION[k]: {"stored": stored.get(k), "now": now[k]} for k in SELECTION
               if given[k] and stored.get(k) != now[k]}
    if differs and not settings.plan.force_resume:
        def shown(value: Any) -> str:
            if isinstance(value, list):
                return ",".join(value) or "none"
            return f"'{value}'" if value else "none"

        what = "; ".join(f"{label} was {shown(v['stored'])}, now {shown(v['now'])}"
                         for label, v in differs.items())
        raise InputError("--resume", f"run '{settings.plan.run_id}' was started with another "
                         f"selection ({what}): leave them out to continue it as it was started "
                         "(its selection is restored), or pass --force-resume to change it "
                         "(both are recorded in meta.json)")
    _apply_selection(config, stored, tuple(k for k in SELECTION if not given[k]))
    return _selection(config), differs


def _shard(config: pytest.Config, settings: Settings, registry: Any) -> Settings:
    """--kgbench-shard (run/shards.py): the session's shard, stashed with the run's whole
    budgets; the settings it runs under (its share of --max-cost, --rpm and --tpm)."""
    from pytest_kgbench.asking.cases import asks_together
    from pytest_kgbench.plugin.options import shard_from_config
    from pytest_kgbench.run.shards import resolve, split_limits, totals

    stored = stored_meta(settings.run_dir).get("shard") if settings.plan.resume else None
    shard = resolve(shard_from_config(config), stored if isinstance(stored, dict) else None,
                    run_id=settings.plan.run_id, resume=settings.plan.resume,
                    distributed=config.getoption("dist", default="no") != "no" or bool(
                        config.getoption("tx", default=None)),
                    together=asks_together(settings, registry))
    if shard is None:
        return settings
    config.stash[keys.SHARD] = (shard, totals(settings))
    return split_limits(settings, shard.share)


def _cut(config: pytest.Config, items: list[pytest.Item]) -> list[pytest.Item]:
    """The items a sharded session leaves to the other shards: a fresh run cuts its
    selection (building every variant it asks about, to weigh the questions); a resumed one
    keeps the items it was cut with (meta.json's `expected`), even when forced."""
    from pytest_kgbench.run.shards import cut, mine

    shard, limits = config.stash[keys.SHARD]
    settings: Settings = config.stash[keys.SETTINGS]
    cases = [(item, item.stash[keys.CASE]) for item in items if keys.CASE in item.stash]
    if settings.plan.resume:
        planned = set(stored_meta(settings.run_dir).get("expected") or ())
        return [item for item, _ in cases if item.nodeid not in planned]
    runtime = _prebuild(config, {(c.question.pack, c.variant) for _, c in cases})
    config.stash[keys.CUT_RUNTIME] = runtime
    try:
        record = cut(runtime, [(item.nodeid, case, item.get_closest_marker("skip") is None)
                               for item, case in cases], shard, limits)
    except KgbenchError as exc:
        raise pytest.UsageError(" ".join(str(exc).split())) from exc
    store = config.stash.get(keys.RUNSTORE, None)
    if store is not None:
        store.shard = record
    return [item for item, case in cases if not mine(record, case)]


def _preflight(config: pytest.Config, settings: Settings) -> list[str]:
    from pytest_kgbench.plugin.collect import preflight

    paths = [Path(config.invocation_params.dir, a.split("::", 1)[0]) for a in config.args]
    return preflight(config, settings, paths)


def _schedule_by_context(config: pytest.Config, settings: Settings) -> None:
    """Under -n, every item of a prompt context goes to one worker, which asks them one after
    another (its provider's prompt cache then holds their data block): loadgroup scheduling
    keyed by the context (`XdistHooks.pytest_xdist_make_scheduler`), the default when the
    command line names no --dist. Asked together, it is required (a session's items share one
    conversation); otherwise `--dist load` spreads a context's items over the workers."""
    from pytest_kgbench.asking.cases import asks_together

    dist = config.getoption("dist", default="no")
    given = getattr(config.known_args_namespace, "dist", "no")  # before -n made it "load"
    if dist in ("no", "loadgroup"):
        return
    together = asks_together(settings, config.stash[keys.REGISTRY])
    if dist == "load" and (given in (None, "no") or together):
        config.option.dist = "loadgroup"
        return
    if not together:
        return
    raise pytest.UsageError(f"--ask together shares one model session among its items, which "
                            f"needs --dist loadgroup (or plain -n), not --dist {dist}")


def _point_at_packs(config: pytest.Config, settings: Settings) -> None:
    """`--pack` without paths on the command line collects the selected packs' question files
    (a folder pack's may lie outside the project)."""
    from pytest_kgbench.packs.locate import selected

    if not settings.plan.pack_names or config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    config.args = [str(f) for source in selected(settings).values()
                   for f in source.question_files]


def _is_question_file(path: Path, settings: Settings) -> bool:
    from pytest_kgbench.packs.locate import source_of_file

    return path.suffix in (".yaml", ".yml") and (
        path.parent.name in settings.paths.question_dirs
        or source_of_file(settings, path) is not None)


def _collects_questions(config: pytest.Config, settings: Settings) -> bool:
    """Whether this session may collect question files (so a run folder is worth making).

    `pytest tests/` (the plugin's own tests) makes no run folder; `pytest`, `pytest questions`
    or `pytest questions/credit.yaml` does.
    """
    args = [a.split("::", 1)[0] for a in config.args] or ["."]
    for arg in args:
        path = Path(config.invocation_params.dir, arg).resolve()
        if path.is_file():
            if _is_question_file(path, settings):
                return True
            continue
        if path.name in settings.paths.question_dirs or any(
                (path / d).is_dir() for d in settings.paths.question_dirs):
            return True
    return False


class XdistHooks:
    """Registered only when pytest-xdist is present."""

    prebuilt = False

    def pytest_configure_node(self, node: Any) -> None:
        from pytest_kgbench.plugin.collect import BY_CONTEXT

        settings: Settings = node.config.stash[keys.SETTINGS]
        node.workerinput[WORKER_SETTINGS] = json.dumps(settings.to_dict(secrets=True))
        if _collects_questions(node.config, settings):  # a resumed run's, restored
            node.workerinput[WORKER_SELECTION] = json.dumps(_selection(node.config))
        # a worker then knows a context's items all come to it (--concurrency looks ahead)
        node.workerinput[BY_CONTEXT] = node.config.getoption("dist") == "loadgroup"
        interrupt = node.config.stash.get(keys.INTERRUPT, None)
        spec = getattr(node.gateway, "spec", None)
        if interrupt is not None and getattr(spec, "popen", False) and not getattr(
                spec, "via", None):
            try:  # a local worker: a Ctrl-C sent to the controller alone is passed on to it
                interrupt.forward_to.add(int(node.gateway._rinfo().pid))
            except (AttributeError, TypeError, ValueError, OSError):
                pass  # no pid to be had: the worker stops when the controller shuts it down

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller builds the variants the items ask about once, before any is sent
        to a worker (which then finds them cached), saying so on the terminal."""
        config = node.config
        if keys.RUNSTORE not in config.stash:
            return
        store: RunStore = config.stash[keys.RUNSTORE]
        if not self.prebuilt:
            self.prebuilt = True
            from pytest_kgbench.asking.cases import built_by

            _prebuild(config, built_by(ids, config.stash[keys.SETTINGS])).close()
        store.begin(list(ids), _say(config))

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """xdist's loadgroup scheduling, keyed by the item's prompt context (cases.context_scope:
        its file, variant, condition and model), which holds its together sessions too, cut
        into one slice per worker when there are fewer contexts than workers
        (cases.scope_groups). Not
        xdist_group markers: loadgroup renames the items of those (`nodeid@group`), which
        would give a run under -n other node ids than a serial one (--resume, rerun)."""
        if config.getoption("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadGroupScheduling

        from pytest_kgbench.asking.cases import asks_together, context_scope, scope_groups

        split = not asks_together(config.stash[keys.SETTINGS], config.stash[keys.REGISTRY])

        class ContextScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: untyped
            scopes: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self.scopes is None and self.collection is not None:  # once, collected
                    self.scopes = scope_groups(self.collection, len(self.nodes), split=split)
                return ((self.scopes or {}).get(nodeid) or context_scope(nodeid)
                        or super()._split_scope(nodeid))

        return ContextScheduling(config, log)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    from pytest_kgbench.plugin.collect import QuestionFile

    settings: Settings = parent.config.stash[keys.SETTINGS]
    if _is_question_file(file_path, settings):
        return QuestionFile.from_parent(parent, path=file_path,
                                        nodeid=outside_nodeid(file_path, parent.config.rootpath,
                                                              settings))
    return None


def outside_nodeid(path: Path, rootpath: Path, settings: Settings) -> str | None:
    """The node id of a question file outside the project (a folder pack given by its path):
    `<pack>/<file>`, the file's path in its pack named by the pack, so every item's id keeps a
    file part (pytest gives such a file, when it is one of the paths collected, the id "",
    and each item `::credit-Q01[…]`). None inside the project: pytest's own, the path from the
    rootdir."""
    from pytest_kgbench.packs.locate import source_of_file

    try:
        path.resolve().relative_to(rootpath.resolve())
        return None
    except ValueError:
        pass
    source = source_of_file(settings, path)
    if source is None:
        return None
    try:
        inside = path.resolve().relative_to(source.dir.resolve()).as_posix()
    except ValueError:  # a question file kept apart from its pack's folder
        inside = path.name
    return f"{source.name}/{inside}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Items the agent cannot answer (a replay: what its run never asked) are not asked; with
    --resume, items already banked are not asked again (those whose question was edited since
    are); the items left run a prompt context after another (collect.order_by_context); with
    --ask together, they are shared out into sessions."""
    from pytest_kgbench.asking.cases import asks_together
    from pytest_kgbench.core.record import read_answers
    from pytest_kgbench.plugin.collect import (
        assign_sessions,
        not_answerable,
        not_planned,
        not_rerun,
        not_sampled,
        order_by_context,
        resume_split,
    )

    settings: Settings = config.stash[keys.SETTINGS]
    store = config.stash.get(keys.RUNSTORE, None)
    unasked = (not_answerable(items, settings, config.stash[keys.REGISTRY])
               + not_sampled(items, settings) + not_rerun(items, settings)
               + not_planned(items, settings))
    if settings.plan.resume:
        done, again = resume_split(items, read_answers(settings.run_dir / "answers.jsonl"))
        if store is not None:
            store.supersede(again, "its question was edited since it was banked: asked again")
        unasked += done
    if keys.SHARD in config.stash:
        cut = {id(i) for i in unasked}
        unasked += _cut(config, [i for i in items if id(i) not in cut])
    if unasked:
        gone = {id(i): i for i in unasked}
        config.hook.pytest_deselected(items=list(gone.values()))
        items[:] = [i for i in items if id(i) not in gone]
    order_by_context(items)
    if asks_together(settings, config.stash[keys.REGISTRY]):
        assign_sessions(items)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> Generator[None, None, None]:
    """Before any item runs, the controller builds the variants the selected items ask about,
    saying so on the terminal ("building credit/large (seed N)…", then its time). --estimate:
    the items' tokens and dollars, without the collected-items tree (only each file's count)."""
    config = session.config
    estimate = config.getoption("kgbench_estimate", default=None)
    verbose = config.option.verbose
    if estimate:
        config.option.verbose = min(verbose, -2)
    try:
        yield
    finally:
        config.option.verbose = verbose
    if _is_worker(config) or not (estimate or keys.RUNSTORE in config.stash):
        return
    cases = [i.stash[keys.CASE] for i in session.items if keys.CASE in i.stash]
    # this process asks the items (no xdist workers): the fixture takes this runtime
    keep = not estimate and config.getoption("dist", default="no") == "no"
    runtime = config.stash.get(keys.CUT_RUNTIME, None)  # a shard's: every variant built
    config.stash[keys.CUT_RUNTIME] = None
    if runtime is None:
        runtime = _prebuild(config, {(c.question.pack, c.variant) for c in cases})
    if keep:
        config.stash[keys.PREBUILT] = runtime
    else:
        try:
            if estimate:
                _estimate(config, runtime, cases)
        finally:
            runtime.close()
    store = config.stash.get(keys.RUNSTORE, None)
    if store is not None:
        store.begin([item.nodeid for item in session.items], _say(config))


def _prebuild(config: pytest.Config, pairs: Any) -> Any:
    """Build the (pack, variant) pairs the items ask about before the first item, saying so
    on the terminal; a variant that cannot be built stops the session here, one line and
    exit status 4, before any item and before the run folder is made (a Ctrl-C stops it at
    once). Returns the runtime that built them, open."""
    from pytest_kgbench.run.runtime import Runtime

    runtime = Runtime(config.stash[keys.SETTINGS], config.stash[keys.REGISTRY])
    interrupt = config.stash.get(keys.INTERRUPT, None)
    try:
        with interrupt.abortable() if interrupt is not None else nullcontext():
            runtime.prebuild(pairs, _say(config))
    except KgbenchError as exc:
        runtime.close()
        raise pytest.UsageError(" ".join(str(exc).split())) from exc
    except BaseException:
        runtime.close()
        raise
    return runtime


def _estimate(config: pytest.Config, runtime: Any, cases: list[Any]) -> None:
    from pytest_kgbench.asking.cases import asks_together
    from pytest_kgbench.run.estimate import estimate_report

    settings: Settings = config.stash[keys.SETTINGS]
    config.stash[keys.ESTIMATE] = estimate_report(
        runtime, cases, together=asks_together(settings, runtime.registry),
        heading=f"{len(cases)} selected item(s), asked {settings.plan.ask}")


def _say(config: pytest.Config) -> Any:
    """A line on the terminal from the controller, whatever pytest is capturing."""
    from contextlib import nullcontext

    def say(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else nullcontext():
            reporter.write_line(f"kgbench: {line}")
            reporter.flush()

    return say


class ProgressHooks:
    """The live progress line (plugin/progress.py), on the controller: fed by what the run store
    banked, written between pytest's own lines every --progress seconds."""

    def __init__(self, config: pytest.Config, settings: Settings, store: RunStore) -> None:
        from pytest_kgbench.plugin.progress import Progress

        self.store, self.config = store, config
        self.progress = Progress(settings.limits.progress,
                                 lambda m: settings.model.prices.get(settings.model_id(m)))

    @pytest.hookimpl(trylast=True)  # after the run store banked the record
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.outcome) == "rerun" or not (report.when == "call" or (
                report.when == "setup" and not report.passed)):
            return  # one count per item: its call, or the setup that stopped it
        self.progress.expect(len(self.store.expected))
        node = getattr(report, "node", None)  # pytest-xdist's worker, on the controller
        worker = getattr(getattr(node, "gateway", None), "id", None)
        self.progress.add(self.store.records.get(report.nodeid), worker)
        if self.progress.due():
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is None:
                return
            capture = self.config.pluginmanager.get_plugin("capturemanager")
            with capture.global_and_fixture_disabled() if capture else nullcontext():
                text = f"kgbench: {self.progress.line()}"
                if reporter.currentfspath is not None:  # letters after a file's name
                    reporter.ensure_newline()
                    # no newline: pytest starts its next file-name line (or its closing
                    # summary) with one
                    reporter.write(text)
                else:  # xdist's letters: a line of its own, between lines of letters
                    if reporter._tw.width_of_current_line:
                        reporter.line("")
                    reporter.line(text)
                reporter.flush()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(keys.ESTIMATE, None)
    if lines:
        terminalreporter.section("kgbench estimate")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def kgbench_runtime(request: pytest.FixtureRequest) -> Generator[Any, None, None]:
    """The process's packs, built variants, stores, prompts and agents (built once); it knows
    the session's items (--batch submits them at once) and, on the controller and unless -q,
    the terminal (the batch's progress line)."""
    from pytest_kgbench.run.runtime import Runtime

    config = request.config
    runtime = config.stash.get(keys.PREBUILT, None)  # serial: the prebuild's, packs loaded
    config.stash[keys.PREBUILT] = None
    if runtime is None:
        runtime = Runtime(config.stash[keys.SETTINGS], config.stash[keys.REGISTRY])
    runtime.session_cases = [i.stash[keys.CASE] for i in request.session.items
                             if keys.CASE in i.stash]
    if config.option.verbose >= 0 and not _is_worker(config):
        runtime.say = _say(config)
    yield runtime
    runtime.close()


@pytest.fixture(scope="session")
def kgbench_items(kgbench_runtime: Any) -> Any:
    """The process's item runner (run/items.py): asks and grades each item on the runtime's
    caches."""
    from pytest_kgbench.run.items import ItemRunner

    return ItemRunner(kgbench_runtime)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if keys.CASE in item.stash:
        item.stash[keys.RECORD] = None  # a rerun starts clean


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call" and keys.BROKEN in item.stash:
        report.user_properties.append((BROKEN_PROPERTY, item.stash[keys.BROKEN]))
    if call.when == "call" and keys.NOT_BANKED in item.stash:
        report.user_properties.append((NOT_BANKED_PROPERTY, item.stash[keys.NOT_BANKED]))
    if call.when == "call":
        record = item.stash.get(keys.RECORD, None)
        if record is not None:
            from pytest_kgbench.core.record import to_json

            try:
                text = to_json(record)
            except (TypeError, ValueError) as exc:
                # a value xdist could not carry would drop the item silently: fail it loudly
                report.outcome = "failed"
                report.longrepr = f"kgbench: the item's record is not JSON-serialisable: {exc}"
            else:
                report.user_properties.append((RECORD_PROPERTY, text))
                report.user_properties.append((LETTER_PROPERTY, record["letter"]))
    if call.when == "teardown":
        record = item.stash.get(keys.RECORD, None)
        if record is not None:  # what --junitxml records of the item (teardown's properties)
            from pytest_kgbench.core.record import junit_properties

            report.user_properties.extend(junit_properties(record))
    return report


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config
                             ) -> tuple[str, str, str] | None:
    """The grade as the status letter: C P W T A B D (F still means a must-pass failure); -
    for an item whose answer was not banked (Ctrl-C, a replay with nothing to give)."""
    if report.when == "call" and any(k == NOT_BANKED_PROPERTY for k, _ in
                                     report.user_properties):
        return "missing", "-", "MISSING"
    if report.when != "call" or not report.passed:
        return None
    letter = dict(report.user_properties).get(LETTER_PROPERTY)
    if letter is None:
        return None
    return "passed", str(letter), f"PASSED [{letter}]"
