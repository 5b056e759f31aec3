"""The `kgbench` command: what one does beside a pytest run (build, check, show, compare,
rescore, import, the MCP server).

    kgbench init DIR                                 write a starter pack (your own data)
    kgbench validate DIR|PACK                        check a pack; every problem named
    kgbench build  --pack credit [--variant base] [--seed N]   build a variant, print where
    kgbench build  --pack credit --issuers 100000               a size the pack scales (its
                                                                `scale:`; or --scale P=N)
    kgbench check  --pack credit [--variant base] [--seed N]   key = gold SQL = gold SPARQL,
                                                                traps bite
    kgbench prompt --pack credit --question credit-Q10 --condition R5   print an item's prompt
    kgbench runs   [--reports reports]                          list the runs: status, headline
    kgbench show   RUN                                          a run's status and headline table
    kgbench export RUN --format csv|parquet [-o FILE]           one row per item
    kgbench power  --pack credit --tier L3 --effect 0.1 0.2 0.3 --repeats 3
                                                    chance the question set detects an effect
    kgbench compare reports/<run-a> reports/<run-b> [--force]   pair two runs question by question
    kgbench rescore reports/<run-id>                 regrade stored answers with today's grader
    kgbench merge RUN... --run-id NAME [--allow-incomplete]
                                                     one run from the run folders of its shards
    kgbench mcp --pack credit --condition D1         serve the store to an MCP client (stdio)
    kgbench query --pack credit --engine sql [--persona analyst] "SELECT ..."
                                                     run one query as an agent's would run, JSON
    kgbench list                                     the registered agents, engines, field kinds,
                                                     metrics and conditions
    kgbench import --format text2sparql FILE --pack ck25 --run-id NAME [--results FILE]
                                                     another harness's predictions as a run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import InputError, KgbenchError
from pytest_kgbench.core.registry import Registry


def _pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pack", required=True, help="pack name, or a folder holding a pack.yaml")
    p.add_argument("--variant", default="base")
    p.add_argument("--seed", type=int, default=None, help="dataset seed (default: the pack's)")
    p.add_argument("--root", default=".", help="repository root holding datasets/, ontology/, "
                   "questions/ (default: .)")
    p.add_argument("--cache", default=None, help="cache folder (default: <root>/.kgbench-cache)")
    p.add_argument("--datasets", default=None, help="packs folder (default: <root>/datasets)")
    p.add_argument("--ontology", default=None, help="definitions folder (default: <root>/ontology)")
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL)")


def _settings(args: argparse.Namespace, **values: Any) -> Any:
    """Settings over the repository at --root, with --pack (a name or a folder) selected."""
    from pytest_kgbench.core.settings import Settings, model_tables, read_tool_config
    from pytest_kgbench.packs.locate import pack_settings

    root = Path(args.root).resolve()
    table = read_tool_config(root)
    paths = {name: str(Path(value).resolve()) for name, value in (
        ("datasets_dir", getattr(args, "datasets", None)),
        ("ontology_dir", getattr(args, "ontology", None)),
        ("cache_dir", getattr(args, "cache", None))) if value}
    packs = pack_settings(getattr(args, "pack", None) or "", table.get("packs") or {}, root,
                          getattr(args, "external_data", None))
    return Settings.at(root, **model_tables(table, str(root / "pyproject.toml")),
                       **paths, **packs, **values)


def _pack(args: argparse.Namespace) -> Any:
    """The pack a command names (--pack), able to run here."""
    settings = _settings(args)
    return _runnable(settings, settings.plan.pack_names[0])


def _runnable(settings: Any, name: str) -> Any:
    """A pack a command was named, opened as every command opens packs (locate.open_pack):
    one that cannot run here (its external data absent, an optional dependency not installed)
    is one line saying why, the line a pytest run prints for it (cases.not_run)."""
    from pytest_kgbench.asking.cases import not_run
    from pytest_kgbench.packs.locate import open_pack

    pack = open_pack(settings, name)
    if pack.unavailable:
        raise KgbenchError(not_run(pack, ())[0])
    return pack


def _runnable_packs(settings: Any) -> list[Any]:
    """Every pack a command over several packs runs (--pack's, else every pack known), those
    that cannot run here left out with one line each on stderr (the line a pytest run prints
    for them); KgbenchError when none can."""
    from pytest_kgbench.asking.cases import not_run
    from pytest_kgbench.packs.locate import open_pack, selected

    out, left = [], []
    for name in selected(settings):
        pack = open_pack(settings, name)
        if pack.unavailable:
            left += not_run(pack, ())
        else:
            out.append(pack)
    for line in left:
        print(f"not run: {line}", file=sys.stderr)
    if not out:
        raise KgbenchError("no pack can run here" + (f": {'; '.join(left)}" if left else ""))
    return out


def _questions(pack: Any, registry: Registry) -> Any:
    """Every question of a pack's question files, as one QuestionSet."""
    from pytest_kgbench.core.questions import QuestionSet, load_questions, set_fingerprint

    if not pack.question_files:
        raise KgbenchError(f"pack {pack.name} has no question file (questions.yaml beside its "
                           "pack.yaml, or questions/<pack>.yaml in the repository)")
    sets = [load_questions(path, pack=pack.name, source=pack, registry=registry)
            for path in pack.question_files]
    questions = tuple(q for qs in sets for q in qs.questions)
    return QuestionSet(path=str(pack.question_files[0]), questions=questions,
                       sha256=set_fingerprint({q.id: q.sha256 for q in questions}))


def _built(args: argparse.Namespace) -> tuple[Any, Any, float]:  # (pack, built, seconds)
    from pytest_kgbench.packs.build import build_variant

    root = Path(args.root)
    pack = _pack(args)
    start = time.perf_counter()
    built = build_variant(pack, args.variant, Path(args.cache or root / ".kgbench-cache"),
                          seed=args.seed)
    return pack, built, time.perf_counter() - start


def scaled_variant(pack: Any, variant: str, scale: list[str], extra: list[str]) -> str:
    """The variant `kgbench build` builds: `--variant`, or a size of it the pack scales —
    `--scale PARAM=N` (repeatable), or `--PARAM N` for any PARAM of the manifest's `scale:`
    (so `--issuers 100000` comes from the credit pack, not from the plugin). Returns the
    scaled variant's name (`issuers=100000`), which the build resolves (Pack.params)."""
    sizes: dict[str, str] = {}
    for item in scale:
        for part in item.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise KgbenchError(f"--scale {item}: give PARAM=N (e.g. "
                                   f"{next(iter(pack.scale), 'issuers')}=1000)")
            sizes[name.strip()] = value.strip()
    rest = list(extra)
    while rest:
        flag = rest.pop(0)
        name, sep, value = flag.removeprefix("--").partition("=")
        if not flag.startswith("--") or name not in pack.scale:
            declared = ", ".join(f"--{p} N" for p in pack.scale) or "none"
            raise KgbenchError(f"unrecognised argument {flag} (the sizes pack {pack.name} "
                               f"scales: {declared})")
        if not sep:
            if not rest:
                raise KgbenchError(f"{flag} needs a number")
            value = rest.pop(0)
        sizes[name] = value
    if not sizes:
        return variant
    name = ",".join(f"{k}={sizes[k]}" for k in sorted(sizes))
    pack.params(name)  # checked here, with the pack's own words
    return name


def cmd_build(args: argparse.Namespace) -> int:
    pack = _pack(args)
    args.variant = scaled_variant(pack, args.variant, args.scale or [], args.extra or [])
    _, built, seconds = _built(args)
    print(f"{built.pack.name}/{built.variant} seed {built.seed}: {built.dir} ({seconds:.2f} s)")
    for name, info in built.manifest["tables"].items():
        print(f"  {name}: {info['rows']} rows")
    print(f"  triples: {built.manifest['triples']}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    """Write the starter pack into DIR: a few tables, SKOS definitions and questions."""
    import shutil

    target = Path(args.dir)
    if target.exists() and any(target.iterdir()):
        raise KgbenchError(f"{target} exists and is not empty: kgbench init writes a new pack")
    shutil.copytree(Path(__file__).parent.parent / "starter", target, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    manifest = target / "pack.yaml"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace("THIS_FOLDER", str(target)),
                        encoding="utf-8")
    print(f"wrote a starter pack in {target}:")
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        print(f"  {path.relative_to(target)}")
    print(f"next: kgbench validate {target} && pytest --pack={target} --agent gold")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Check a pack and print every problem with its file, question and field."""
    from pytest_kgbench.run.validate import validate_pack

    settings = _settings(args, engines=_engines(args))
    try:
        _runnable(settings, settings.plan.pack_names[0])  # one that cannot run here: its one line
    except InputError:
        pass  # a problem of the pack: validate reports it with every other
    report = validate_pack(settings, settings.plan.pack_names[0], needs=not args.no_needs,
                           registry=args.registry)
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    for note in report.notes:
        print(f"note    {note}")
    verdict = (f"{len(report.problems)} problem(s)" if report.problems else
               f"valid: {report.checked} question check(s) passed")
    print(f"pack {report.pack}: {verdict}")
    return 1 if report.problems else 0


def cmd_check(args: argparse.Namespace) -> int:
    """Keys, gold queries and traps on one variant; then, over every variant, each (question,
    need) pair tested by ablation or carrying its reason, and each reading condition's prompt
    size beside R1's (the Turtle ones within the pack's bound, and no prefix per id)."""
    from pytest_kgbench.packs import question_set
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.run.validate import (
        check_lines,
        check_needs,
        check_prompt_sizes,
        check_questions,
        per_id_prefixes,
    )

    pack, built, _ = _built(args)
    qset = _questions(pack, args.registry)
    checks = check_questions(list(qset.questions), built, engines=_engines(args),
                             registry=args.registry)
    bad = 0
    for c in checks:
        status = "ok " if c.ok else "BAD"
        print(f"{status} {c.question} {c.tier} key={json.dumps(c.key, default=str)[:100]}")
        for problem in c.problems:
            print(f"      {problem[:300]}")
        bad += not c.ok
    print(f"{len(checks) - bad} of {len(checks)} questions check out on "
          f"{built.pack.name}/{built.variant} (seed {built.seed})")
    worded, bad_wording = question_set.wording_lines(question_set.wording_flags(
        qset.questions, pack.manifest.get("distinguishing_terms"),
        {c.question: c.key for c in checks}), pack.name, len(qset.questions))
    print("\n".join(worded))
    bad += bad_wording
    if args.no_needs:
        return 1 if bad else 0
    cache = Path(args.cache or Path(args.root) / ".kgbench-cache")
    builts = [build_variant(pack, v, cache, seed=args.seed) for v in pack.variants]
    needs = check_needs(list(qset.questions), builts, every=True)
    sizes = check_prompt_sizes(list(qset.questions), builts, args.registry)
    per_id = {b.variant: per_id_prefixes(b) for b in builts}
    lines, failed = check_lines(pack, needs, sizes, per_id)
    print("\n".join(lines))
    failed = failed or bool(bad)
    return 1 if failed else 0


def _engines(args: argparse.Namespace) -> dict[str, str]:
    """The engines named on the command line, per language."""
    return {lang: str(getattr(args, f"{lang}_engine")) for lang in ("sql", "sparql")
            if getattr(args, f"{lang}_engine", None)}


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sparql-engine", default=None,
                   help="SPARQL engine (default: the language's own; kgbench list shows them)")
    p.add_argument("--sql-engine", default=None,
                   help="SQL engine (default: the language's own; kgbench list shows them)")


def _runtime(args: argparse.Namespace) -> Any:
    """A Runtime over the repository at --root, outside pytest (prompt, mcp, estimate), with
    the command's registry."""
    from pytest_kgbench.run.runtime import Runtime

    return Runtime(_settings(
        args, variants=(args.variant,), run_id="cli",
        query_timeout=float(getattr(args, "query_timeout", 60)), dataset_seed=args.seed,
        stats_seed=0, engines=_engines(args)), args.registry)


def cmd_prompt(args: argparse.Namespace) -> int:
    from pytest_kgbench.core import conditions
    from pytest_kgbench.core.pricing import tokens_of

    qset = _questions(_pack(args), args.registry)
    question = next((q for q in qset.questions if q.id == args.question), None)
    if question is None and (args.question or args.ask == "apart"):
        raise KgbenchError(f"no question {args.question} in {qset.path}")
    cond = conditions.by_id(args.condition, args.registry)
    runtime = _runtime(args)
    built = runtime.built(args.pack, args.variant)
    if args.ask == "together":  # the session of the question's persona (analyst by default)
        persona = question.persona if question is not None else "analyst"
        group = tuple(q for q in qset.questions if q.persona == persona
                      and (not q.variants or args.variant in q.variants))
        executor = runtime.executor(built, cond, persona) if cond.mode == "querying" else None
        text = runtime.together_prompt(cond, built, group, executor).text
    else:
        assert question is not None  # asked apart, a missing question was refused above
        executor = (runtime.executor(built, cond, question.persona)
                    if cond.mode == "querying" else None)
        text = runtime.prompt(cond, built, question, executor).text
    print(text)
    window = runtime.settings.window(args.model)
    if tokens_of(text) > window:
        print(f"kgbench prompt: WARNING: this prompt is about {tokens_of(text):,} tokens, more "
              f"than the {window:,}-token window of {runtime.settings.model_id(args.model)}: "
              "its items would be skipped, not asked", file=sys.stderr)
    runtime.close()
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from pytest_kgbench.agents.support.mcp_server import serve

    runtime = _runtime(args)
    try:
        serve(runtime=runtime, pack=args.pack, variant=args.variant, condition=args.condition,
              persona=args.persona, log=Path(args.log) if args.log else None,
              together=args.together,
              questions=tuple(q for q in (args.questions or "").split(",") if q),
              closed=Path(args.closed_when) if args.closed_when else None,
              instructions=not args.no_instructions)
    finally:
        runtime.close()
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    """One query through exactly the executor, guard and tool an agent uses; the result (or
    the refusal: a result too, exit 0) as JSON, with the text the model would have seen."""
    from pytest_kgbench.asking.tools import call_tool
    from pytest_kgbench.core import conditions
    from pytest_kgbench.engines.stores import store_kind

    query = sys.stdin.read() if args.query == "-" else args.query
    runtime = _runtime(args)
    try:
        built = runtime.built(args.pack, args.variant)
        if args.condition:
            cond = conditions.by_id(args.condition, args.registry)
            if cond.mode != "querying":
                raise KgbenchError(f"--condition: '{cond.id}' is not a querying condition")
            if args.engine and args.engine != cond.language:
                raise KgbenchError(f"--engine {args.engine} does not fit --condition {cond.id} "
                                   f"(a {cond.language} store)")
        else:
            cond = next(c for c in conditions.registered(args.registry).values()
                        if c.mode == "querying" and c.language == (args.engine or "sql")
                        and c.data == "raw" and not c.definitions)
        executor = runtime.executor(built, cond, args.persona)
        text, result = call_tool(executor, "run_query", {"query": query})
        worker = getattr(executor, "worker", None)
        out = {"pack": args.pack, "variant": args.variant, "persona": args.persona,
               "condition": cond.id, "language": cond.language,
               "engine": store_kind(cond.language, runtime.settings.engines_for(cond),
                                    runtime.registry).name,
               "sandbox": getattr(worker, "sandbox", None),
               "result": result.to_dict() if result else None, "shown": text}
        print(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    finally:
        runtime.close()
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from pytest_kgbench.asking.cases import Case, cases_for
    from pytest_kgbench.core import conditions
    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.core.settings import default_agent

    runtime = _runtime(args)
    models = tuple(m.strip() for m in ",".join(args.model).split(",") if m.strip())
    runtime.settings = runtime.settings.but(
        agent=default_agent(True, args.registry), models=models,
        repeats=args.repeats, condition_ids=tuple(c.id for c in conditions.select(
            args.condition, conditions.schema_arms(args.schema), registry=args.registry)))
    cases: list[Case] = []
    for pack in _runnable_packs(runtime.settings):
        for path in pack.question_files:
            cases += cases_for(load_questions(path, pack=pack.name, source=pack,
                                              registry=args.registry), pack,
                               runtime.settings, args.registry)
    from pytest_kgbench.run.estimate import estimate_report

    try:
        lines = estimate_report(runtime, cases, together=args.ask == "together", heading=(
            f"{args.repeats} repeat(s), variant {args.variant}, asked {args.ask}"))
    finally:
        runtime.close()
    print("\n".join(lines))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """Every registered piece: the shipped ones and those of installed plugins."""
    from pytest_kgbench.metrics import ordered
    from pytest_kgbench.packs.locate import open_pack, selected

    reg = args.registry
    settings = _settings(args)
    print("packs:")
    for name, source in sorted(selected(settings).items()):
        try:
            why = open_pack(settings, name).unavailable
        except KgbenchError as exc:
            why = f"cannot be read: {exc}"
        print(f"  {name:<12} {source.dir}" + (f" — not run here: {why}" if why else ""))
    print("agents:")
    for name, cls in sorted(reg.agents.items()):
        flags = [cls.kind] + [f for f, on in (("asks_together", cls.asks_together),
                                              ("judged", cls.judged), ("simulated", cls.simulated),
                                              ("must_pass", cls.must_pass)) if on]
        print(f"  {name:<12} {', '.join(flags):<40} {reg.sources[('agents', name)]}")
    print("stores (engines):")
    for name, kind in sorted(reg.stores.items()):
        what = kind.language + (", default" if kind.default else "")
        print(f"  {name:<12} {what:<40} {reg.sources[('stores', name)]}")
    print("field kinds:")
    for name in sorted(reg.field_kinds):
        print(f"  {name:<12} {'list' if reg.field_kinds[name].is_list else 'value':<40} "
              f"{reg.sources[('field_kinds', name)]}")
    print("metrics:")
    for metric in ordered(reg):
        print(f"  {metric.name:<22} {metric.title:<30} {reg.sources[('metrics', metric.name)]}")
    print("conditions:")
    for cid, cond in reg.conditions.items():
        print(f"  {cid:<5} {cond.label:<22} {cond.mode:<9} {cond.language:<7} "
              f"{reg.sources[('conditions', cid)]}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from pytest_kgbench.analysis.runs import load_run, show_lines

    print("\n".join(show_lines(load_run(args.run, args.reports))))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from pytest_kgbench.analysis.runs import list_runs, runs_lines

    print("\n".join(runs_lines(list_runs(args.reports))))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pytest_kgbench.analysis.runs import export, load_run

    run = load_run(args.run, args.reports)
    out = Path(args.output or f"{run.id}.{args.format}")
    rows = export(run, out, args.format)
    print(f"wrote {rows} item row(s) of run {run.id} to {out}")
    _say_incomplete(run)
    return 0


def _say_incomplete(run: Any) -> None:
    """A line when a run is not whole (what `kgbench show` says first), on stderr."""
    s = run.summary
    if s.status != "complete":
        print(f"kgbench: run {s.id} is {s.status.upper()}: {s.reason}", file=sys.stderr)


def cmd_power(args: argparse.Namespace) -> int:
    from pytest_kgbench.analysis.power import simulate

    settings = _settings(args)
    names = settings.plan.pack_names  # several (--pack a,b): their questions pooled into one set
    if args.condition and len(names) > 1:
        raise KgbenchError("--condition takes one pack: the trap's grades are read per pack")
    questions = [q for name in names
                 for q in _questions(_runnable(settings, name), args.registry).questions
                 if q.tier == args.tier and (q.variants is None or args.variant in q.variants)]
    if not questions:
        raise KgbenchError(f"pack {args.pack} has no {args.tier} question on {args.variant}")
    n = len(questions)
    trap_right: tuple[list[bool], list[bool]] = ([], [])
    if args.condition:
        trap_right = _trap_right(args, questions)
        note = (f"the trap answer is right for {sum(trap_right[0])} of them under "
                f"{args.condition[0]} and {sum(trap_right[1])} under {args.condition[1]}")
    else:
        note = "the trap answer taken as wrong everywhere (--condition A B uses its grades)"
    print(f"{'+'.join(names)}/{args.variant} {args.tier}: {n} questions x {args.repeats} repeats; "
          f"baseline accuracy {args.baseline:.2f}; {args.simulations} simulated runs of the "
          f"synthetic agent per effect; exact McNemar at p < 0.05; {note}")
    print(f"{'effect':>8}  {'detection probability':>22}  {'95% CI':>13}")
    for effect in args.effect:
        res = simulate(n, baseline=args.baseline, effect=effect, repeats=args.repeats,
                       simulations=args.simulations, seed=args.seed, trap_right=trap_right)
        lo, hi = res.ci95 or (0.0, 0.0)
        print(f"{effect:>8.2f}  {res.probability:>22.3f}  {lo:>6.3f}–{hi:<6.3f}")
    return 0


def _trap_right(args: argparse.Namespace, questions: list[Any]) -> tuple[list[bool], list[bool]]:
    """Whether each question's trap (naive) answer is graded correct under each of the two
    conditions, on the variant: the answer the synthetic agent gives when it misses."""
    from pytest_kgbench.agents import Task
    from pytest_kgbench.agents.reference import ReferenceAgent
    from pytest_kgbench.core import conditions
    from pytest_kgbench.engines.stores import guard_for
    from pytest_kgbench.run.items import ItemRunner

    # --seed is the simulation's here: the data is the pack's own
    runtime = _runtime(argparse.Namespace(**{**vars(args), "seed": None}))
    items = ItemRunner(runtime)
    naive = ReferenceAgent(runtime.settings)
    naive.which = "trap"
    built = runtime.built(args.pack, args.variant)
    out: tuple[list[bool], list[bool]] = ([], [])
    try:
        for side, cid in enumerate(args.condition):
            cond = conditions.by_id(cid, args.registry)
            for q in questions:
                executor = (runtime.executor(built, cond, q.persona)
                            if cond.mode == "querying" else None)
                prompt = runtime.prompt(cond, built, q, executor)
                answer = naive.ask(Task(question=q, condition=cond, prompt=prompt,
                                        guard=guard_for(built, q.persona), built=built,
                                        model="trap", repeat=1, executor=executor))
                graded = items.grade(q, cond, built, runtime.key(q, built), answer)
                out[side].append(graded.grade == "correct")
    finally:
        runtime.close()
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    from pytest_kgbench.analysis.report import discordant_text, p_text
    from pytest_kgbench.analysis.runs import load_run
    from pytest_kgbench.run.rescore import compare_runs, question_hashes

    for run in (args.run_a, args.run_b):  # each run as its folder has it, not as it reported
        _say_incomplete(load_run(run))
    a = json.loads((Path(args.run_a) / "report.json").read_text(encoding="utf-8"))
    b = json.loads((Path(args.run_b) / "report.json").read_text(encoding="utf-8"))
    comparisons = compare_runs(a, b, seed=args.seed, force=args.force, questions=(
        question_hashes(Path(args.run_a)), question_hashes(Path(args.run_b))))
    print(f"{'arm':<28} {'tier':<4} {'n':>3} {'diff':>7} {'95% CI':>15} {'+b / −a':>10} "
          f"{'McNemar p':>10} {'Holm p':>8}")
    for c in comparisons:
        ci = "—" if c.ci95 is None else f"{100 * c.ci95[0]:+.1f}..{100 * c.ci95[1]:+.1f}"
        diff = "—" if c.diff is None else f"{100 * c.diff:+.1f}"
        print(f"{c.a.split(':', 1)[1]:<28} {c.tier:<4} {c.n_questions:>3} {diff:>7} {ci:>15} "
              f"{discordant_text(c.discordant):>10} {p_text(c.mcnemar_p):>10} "
              f"{p_text(c.holm_p):>8}")
    if not comparisons:
        print("no condition and tier in common")
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from pytest_kgbench.core.record import gaps_text
    from pytest_kgbench.run.rescore import rescore

    result = rescore(Path(args.run), force=args.force, registry=args.registry)
    print(f"rescored {len(result.records)} items; {len(result.moved)} grades moved")
    if result.missing:
        expected = len(result.records) + len(result.missing)
        print(f"INCOMPLETE: {gaps_text(result.missing, expected)}; the rescore keeps them "
              "missing")
    for name, change in (result.data_changed or {}).items():
        print(f"DATA CHANGED since the run ({name}: build {change['run'].get('build')} then, "
              f"{change['now']['build']} now): graded against today's data, as forced")
    for nodeid, before, after in result.moved:
        print(f"  {nodeid}: {before} -> {after}")
    if result.changed_questions:
        print("questions changed since the run: " + ", ".join(result.changed_questions))
    for path in result.paths:
        print(f"wrote {path}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Join the shards' run folders into one run; a refusal is one line and exit 4."""
    from pytest_kgbench.core.record import gaps_text
    from pytest_kgbench.run.merge import REFUSED, MergeRefused, merge, spend_line

    try:
        done = merge(args.runs, args.run_id, reports=args.reports,
                     allow_incomplete=args.allow_incomplete, registry=args.registry)
    except MergeRefused as exc:
        print(f"kgbench: merge refused: {' '.join(str(exc).split())}", file=sys.stderr)
        return REFUSED
    report = done.report
    print(f"merged {len(done.shards)} shard(s) into {done.folder}: "
          f"{report['counts']['items']} item(s) banked, {report['counts']['skipped']} "
          f"skipped, {len(done.missing)} missing; {spend_line(done.spent, done.cap, report)}")
    if done.missing:
        print(f"INCOMPLETE: {gaps_text(done.missing, report['counts']['expected'])}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgbench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_pack_commands, _item_commands, _planning_commands, _run_commands):
        add(sub)
    from pytest_kgbench.run.importers import add_parser as add_import

    add_import(sub)  # kgbench import: run/importers.py holds the command
    return parser


def _pack_commands(sub: Any) -> None:
    """Build, init, validate and check: a pack, its data and its questions."""
    p = sub.add_parser("build", help="build (or load) a pack variant and print its tables; "
                       "--scale PARAM=N (or --PARAM N, the pack's `scale:`) builds a size")
    _pack_args(p)
    p.add_argument("--scale", action="append", metavar="PARAM=N",
                   help="build a size of a variant: a generator parameter the pack's "
                   "manifest names under `scale:` (e.g. issuers=100000); also as --PARAM N")
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("init", help="write a small commented starter pack into DIR")
    p.add_argument("dir")
    p.set_defaults(func=cmd_init)
    p = sub.add_parser("validate", help="check a pack (a folder or a name): manifest, data, "
                       "questions, keys = gold SQL = gold SPARQL, traps, needs, artefacts")
    p.add_argument("pack", help="a folder holding a pack.yaml, or a pack's name")
    p.add_argument("--root", default=".", help="project root (default: .)")
    p.add_argument("--cache", default=None, help="cache folder (default: <root>/.kgbench-cache)")
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL)")
    p.add_argument("--no-needs", action="store_true", help="skip the needs check")
    _engine_args(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("check", help="check every question's key, gold queries and trap, and "
                       "that the data exercises every question's needs")
    _pack_args(p)
    _engine_args(p)
    p.add_argument("--no-needs", action="store_true",
                   help="skip the needs check (it builds every variant of the pack)")
    p.set_defaults(func=cmd_check)


def _item_commands(sub: Any) -> None:
    """Prompt, mcp and query: what one item is shown, serves and runs."""
    p = sub.add_parser("prompt", help="print the prompt one item would get")
    _pack_args(p)
    p.add_argument("--question", default=None, help="the question (apart: required)")
    p.add_argument("--condition", required=True)
    p.add_argument("--ask", choices=("apart", "together"), default="apart",
                   help="together: the prompt of the session asking every question at once")
    p.add_argument("--model", default="sonnet",
                   help="the model whose context window the prompt is checked against")
    p.set_defaults(func=cmd_prompt)
    p = sub.add_parser("mcp", help="serve a pack's store under a querying condition over MCP "
                       "(stdio): list_tables, describe, run_query")
    _pack_args(p)
    p.add_argument("--condition", required=True,
                   help="D1 to D6, or an arm of one (D1.tools, D1.none: --schema)")
    p.add_argument("--persona", default="analyst")
    _engine_args(p)
    p.add_argument("--query-timeout", type=float, default=60.0)
    p.add_argument("--log", default=None, help="append every tool call to this JSON-lines file")
    p.add_argument("--together", action="store_true",
                   help="run_query also takes the id of the question a query serves "
                        "(a session answering many questions at once)")
    p.add_argument("--questions", default=None,
                   help="with --together: the session's question ids (comma list); a query "
                        "must name one of them")
    p.add_argument("--closed-when", default=None,
                   help="refuse every call once this file exists (the rounds are used up)")
    p.add_argument("--no-instructions", action="store_true",
                   help="send no store description as the server's instructions (the client's "
                        "prompt already holds it)")
    p.set_defaults(func=cmd_mcp)
    p = sub.add_parser("query", help="run one query through the executor and guard an agent "
                       "uses; print the result or refusal as JSON (exit 0 for a refusal)")
    _pack_args(p)
    p.add_argument("--engine", choices=("sql", "sparql"), default=None,
                   help="the store's language (default: sql, or the --condition's)")
    p.add_argument("--condition", default=None,
                   help="a querying condition (D1 to D6): its store, data and definitions")
    p.add_argument("--persona", default="analyst")
    _engine_args(p)
    p.add_argument("--query-timeout", type=float, default=60.0)
    p.add_argument("query", help="the query ('-' reads it from stdin)")
    p.set_defaults(func=cmd_query)


def _planning_commands(sub: Any) -> None:
    """Estimate, list and power: before a run."""
    p = sub.add_parser("estimate", help="tokens and dollars a run would take, before any call")
    p.add_argument("--model", action="append", default=None, required=True)
    p.add_argument("--condition", default="all")
    p.add_argument("--schema", default="prompt",
                   help="the querying conditions' schema arms: prompt, tools, none, floor, all")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ask", choices=("apart", "together"), default="apart",
                   help="together: one session per condition x repeat x model asks every question")
    p.add_argument("--pack", action="append", default=None, help="only these packs")
    p.add_argument("--variant", default="base")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--root", default=".")
    p.add_argument("--cache", default=None)
    p.add_argument("--datasets", default=None)
    p.add_argument("--ontology", default=None)
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL); a "
                   "pack that cannot run here is left out, saying why")
    p.set_defaults(func=cmd_estimate)
    p = sub.add_parser("list", help="list the packs (and which cannot run here, and why), the "
                       "registered agents, engines, field kinds, metrics and conditions (the "
                       "shipped ones and installed plugins')")
    p.add_argument("--root", default=".", help="project root (default: .)")
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL)")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("power", help="detection probability of an effect, by simulation")
    p.add_argument("--pack", required=True,
                   help="a pack, or several (credit,research): their questions pooled")
    p.add_argument("--variant", default="base")
    p.add_argument("--tier", default="L3")
    p.add_argument("--effect", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    p.add_argument("--baseline", type=float, default=0.5, help="accuracy of the baseline arm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--simulations", type=int, default=2000)
    p.add_argument("--seed", type=int, default=20261129)
    p.add_argument("--condition", nargs=2, default=None, metavar=("A", "B"),
                   help="the two conditions compared: the trap answer's actual grade under "
                        "each is used")
    p.add_argument("--root", default=".")
    p.add_argument("--cache", default=None)
    p.add_argument("--datasets", default=None)
    p.add_argument("--ontology", default=None)
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL)")
    p.set_defaults(func=cmd_power)


def _run_commands(sub: Any) -> None:
    """Show, runs, export, compare and rescore: after a run."""
    p = sub.add_parser("show", help="print a run's status and headline table")
    p.add_argument("run", help="a run id under --reports, or a run folder")
    p.add_argument("--reports", default="reports", help="the reports folder (default: reports)")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("runs", help="list the runs of the reports folder: id, date, agent, "
                       "models, conditions, items, status, headline")
    p.add_argument("--reports", default="reports", help="the reports folder (default: reports)")
    p.set_defaults(func=cmd_runs)
    p = sub.add_parser("export", help="write a run's items, one row per item, as CSV or Parquet")
    p.add_argument("run", help="a run id under --reports, or a run folder")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")
    p.add_argument("-o", "--output", default=None, help="the file (default: <run-id>.<format>)")
    p.add_argument("--reports", default="reports", help="the reports folder (default: reports)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("compare", help="pair two runs question by question")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--force", action="store_true", help="compare different question sets")
    p.add_argument("--seed", type=int, default=20261129)
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("rescore", help="regrade a run's stored answers with today's grader")
    p.add_argument("run", help="a run folder, e.g. reports/<run-id>")
    p.add_argument("--force", action="store_true",
                   help="regrade even when today's data differs from the run's (said loudly)")
    p.set_defaults(func=cmd_rescore)
    p = sub.add_parser("merge", help="one run folder from the run folders of a run's shards "
                       "(pytest --kgbench-shard I/N): its report computed once over the union; "
                       "refuses (exit 4) shards that must not be mixed")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="each shard's run folder, or its run id under --reports")
    p.add_argument("--run-id", required=True, help="the merged run's id (a fresh folder under "
                   "--reports)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="merge shards that are INCOMPLETE, HALTED or INTERRUPTED: the merged "
                   "run lists the items they did not bank")
    p.add_argument("--reports", default="reports", help="the reports folder (default: reports)")
    p.set_defaults(func=cmd_merge)


def main(argv: Sequence[str] | None = None) -> int:
    import signal

    from pytest_kgbench.run.shipped import installed

    if argv is None and hasattr(signal, "SIGPIPE"):
        # the console script: `kgbench prompt ... | head` ends quietly. Never when called in a
        # process of someone else's (a test, a notebook): a later write to a closed pipe
        # anywhere in it would kill that whole process without a word
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "build":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra  # build's --PARAM N, the sizes a pack declares (scaled_variant)
    try:
        # the pieces installed plugins register, as a run sees them: every command reads them
        # from here (args.registry), nothing from a global
        args.registry = installed()
        return int(args.func(args))
    except KgbenchError as exc:
        print(f"kgbench: {exc}", file=sys.stderr)
        return 2


