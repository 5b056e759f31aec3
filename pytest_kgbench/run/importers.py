"""Foreign answers in: another harness's predictions turned into a run folder of ours.

`kgbench import --format FORMAT FILE --pack PACK --run-id NAME` reads a predictions file in
one of the registered formats, runs each predicted query through the executor and guard a
model's query goes through (the store of the condition, under --query-timeout), and writes a
stored run of those answers that the plugin then grades as a replay (`--agent replay`): the
run folder is an ordinary one, so `kgbench show`, `compare` and the report work on it.

A format is an object with `name`, `language`, `help` and `read(path, questions, pack)`, which
gives one `Prediction` per question of the pack (a question the file does not answer has no
statement). `FORMATS` holds them; `register` adds one. Two ship:

- `text2sparql`: the TEXT2SPARQL challenge client's answers file (a JSON list of
  {qname, query, ...}, qname `<prefix>:<id>-<lang>`, question `<prefix>-<id>` of the pack);
- `sql-lines`: a Spider/BIRD predictions file, one SQL query per line in question order (a
  BIRD line's tab-separated tail, `\\t----- bird -----\\t<db>`, is dropped).

For SPARQL answers the importer also scores them with the TEXT2SPARQL challenge's own metric
(metrics/text2sparql.py) against `--truth` (a result-set file like the challenge's reference
results) or, without it, the pack's reference queries run on the same engine; `--results`
scores the result sets the challenge's endpoint returned (the client's `--pred_result` file)
instead of ours. The scores go to `text2sparql.json` in the run folder, in the client's own
shape. Pure module: no pytest (the grading runs pytest in a process of its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_kgbench.core.errors import InputError, KgbenchError
from pytest_kgbench.core.registry import Registry, given


@dataclass(frozen=True)
class Prediction:
    """One question's predicted query (None: the file gives none for it)."""

    question: str          # the pack's question id
    statement: str | None
    source: str            # where in the file: the qname, or the line number


class Format(Protocol):
    name: str
    language: str  # "sparql" or "sql": the store the statements run on
    help: str

    def read(self, path: Path, questions: Sequence[Any], pack: str) -> list[Prediction]:
        ...


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(str(path), f"is not a JSON file: {exc}") from exc


def split_qname(qname: str) -> tuple[str, str, str]:
    """`ck25:12-en` -> ("ck25", "12", "en")."""
    prefix, sep, rest = qname.partition(":")
    number, dash, lang = rest.rpartition("-")
    if not (sep and dash and prefix and number and lang):
        raise ValueError(qname)
    return prefix, number, lang


class Text2Sparql:
    name = "text2sparql"
    language = "sparql"
    help = ("the TEXT2SPARQL client's answers JSON: [{qname: '<prefix>:<id>-<lang>', query}], "
            "question <prefix>-<id> of the pack")

    def read(self, path: Path, questions: Sequence[Any], pack: str) -> list[Prediction]:
        data = _load_json(path)
        if not isinstance(data, list):
            raise InputError(str(path), "must be a JSON list of answers ({qname, query, ...})")
        ids = {q.id for q in questions}
        by_question: dict[str, Prediction] = {}
        for i, entry in enumerate(data):
            qname = entry.get("qname") if isinstance(entry, dict) else None
            if not isinstance(qname, str):
                raise InputError(str(path), f"answer {i} has no qname")
            try:
                prefix, number, _lang = split_qname(qname)
            except ValueError:
                raise InputError(str(path), f"answer {i}: qname {qname!r} is not "
                                 "<prefix>:<id>-<lang>") from None
            qid = f"{prefix}-{number}"
            if qid not in ids:
                raise InputError(str(path), f"answer {i}: {qname} names no question of pack "
                                 f"{pack} ({qid})")
            if qid in by_question:
                raise InputError(str(path), f"answer {i}: {qname} answers {qid} a second time")
            query = entry.get("query")
            by_question[qid] = Prediction(qid, query if isinstance(query, str) else None, qname)
        return [by_question.get(q.id, Prediction(q.id, None, "(no answer)")) for q in questions]


class SqlLines:
    name = "sql-lines"
    language = "sql"
    help = "Spider/BIRD predictions: one SQL query per line, in the pack's question order"

    def read(self, path: Path, questions: Sequence[Any], pack: str) -> list[Prediction]:
        lines = path.read_text(encoding="utf-8").splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        if len(lines) != len(questions):
            raise InputError(str(path), f"has {len(lines)} lines for the {len(questions)} "
                             f"questions of pack {pack} (one query per line, in order)")
        out = []
        for n, (line, q) in enumerate(zip(lines, questions, strict=True), start=1):
            statement = line.split("\t", 1)[0].strip()
            out.append(Prediction(q.id, statement or None, f"line {n}"))
        return out


FORMATS: dict[str, Format] = {f.name: f for f in (Text2Sparql(), SqlLines())}


def register(fmt: Format) -> None:
    """Add a predictions format (its name must be new)."""
    if fmt.name in FORMATS:
        raise KgbenchError(f"a predictions format named {fmt.name!r} exists already")
    FORMATS[fmt.name] = fmt


def get_format(name: str) -> Format:
    if name not in FORMATS:
        raise InputError("--format", f"unknown format {name!r} (known: "
                         f"{', '.join(sorted(FORMATS))})")
    return FORMATS[name]


# --- running the predictions ---------------------------------------------------------------

def full_executor(built: Any, cond: Any, persona: str, engines: Mapping[str, str],
                  timeout: float, registry: Registry | None = None) -> Any:
    """The store of `cond` as a model's query meets it (same executor class, files, guard and
    engine), with the row cap lifted so a whole result set comes back for the challenge's
    metric."""
    # every row before the challenge metric reads it (the record keeps the capped result a
    # model would have seen, as a model's run does)
    from pytest_kgbench.engines import WHOLE as full
    from pytest_kgbench.engines.sparql import GraphStore, SparqlExecutor, turtle_prefixes
    from pytest_kgbench.engines.stores import guard_for, open_store, store_kind

    kind = store_kind(cond.language, engines, registry)
    guard = guard_for(built, persona)
    if isinstance(kind, GraphStore):
        files = built.files(guard.view)
        load: list[tuple[Path, str]] = [(files.data, files.data_format)]
        if cond.data == "derived" and files.derived_nt is not None:
            load.append((files.derived_nt, "nt"))
        if cond.load_ontology:
            load.append((built.pack.definitions_ttl, "turtle"))
        return SparqlExecutor.over(kind.plugin, load, guard, timeout=timeout,
                                   parsers=kind.parsers, caps=full,
                                   prefixes=turtle_prefixes(files.prefixes))
    executor = open_store(built, cond, persona, engines=engines, timeout=timeout,
                          registry=registry)
    executor.caps = full  # in-process engines: caps per query
    return executor


def capped(result: Any) -> Any:
    """The result as a model would have seen it: the standard caps applied to its rows."""
    from pytest_kgbench.engines import CAPS, QueryResult, fill_capped

    out = QueryResult(**{**result.to_dict(), "rows": [], "columns": []})
    if result.columns:
        fill_capped(out, result.columns, result.rows, lambda v: v, CAPS)
    out.row_count = result.row_count if result.row_count is not None else out.row_count
    return out


def answer_of(pred: Prediction, result: Any | None, question: Any) -> dict[str, Any]:
    """The stored answer of one imported prediction (answers.Answer's dict): the answer's
    fields are what the query's result gives, read as a reference query's are."""
    from pytest_kgbench.scoring.answers import Answer, fields_from_rows

    if pred.statement is None or result is None:
        return Answer(text=f"The predictions file gives no query for this question "
                      f"({pred.source}).", status="answered").to_dict()
    shown = capped(result)
    if result.refused:
        return Answer(text=f"The executor refused the system's query: {result.refused}",
                      block={"declined": True}, queries=[shown], rounds=1).to_dict()
    if not result.ok:
        return Answer(text=f"The system's query failed on the executor: {result.error}",
                      block={"rows": []}, queries=[shown], rounds=1).to_dict()
    try:
        block = fields_from_rows(question.fields, shown.columns, shown.rows)
    except KeyError as exc:
        return Answer(text=f"The system's query's result does not give the answer's fields: "
                      f"{exc}", block={}, queries=[shown], rounds=1).to_dict()
    return Answer(text=f"The system's query ({pred.source}) gave {len(result.rows)} rows.",
                  block=block, queries=[shown], rounds=1).to_dict()


@dataclass
class Imported:
    run_dir: Path
    scores: dict[str, Any] | None  # the challenge's metric (text2sparql.json), SPARQL only
    pytest_exit: int
    failed: dict[str, str]         # question -> why its query failed or was refused


# many parameters: the keyword-only options of one `kgbench import` (its flags)
def import_run(settings: Any, fmt: Format, path: Path, *, condition: str = "D4",
               model: str | None = None, results: Path | None = None,
               truth: Path | None = None, questions_file: Path | None = None,
               variant: str = "base", persona: str = "analyst",
               registry: Registry | None = None) -> Imported:
    """Import `path` as run `settings.plan.run_id` of the one pack `settings` selects, with the
    pieces of `registry` (the command's; the shipped ones where none is passed)."""
    from pytest_kgbench.core import conditions
    from pytest_kgbench.run.runtime import Runtime

    registry = given(registry)

    if not settings.plan.pack_names or len(settings.plan.pack_names) != 1:
        raise InputError("--pack", "name exactly one pack to import into")
    pack_name = settings.plan.pack_names[0]
    cond = conditions.by_id(condition, registry)
    if cond.mode != "querying" or cond.language != fmt.language:
        raise InputError("--condition", f"{cond.id} is not a querying {fmt.language} condition "
                         f"(the {fmt.name} format's statements are {fmt.language})")
    runtime = Runtime(settings, registry)
    try:
        pack = runtime.pack(pack_name)
        if pack.unavailable:
            raise KgbenchError(f"pack {pack.name} cannot run here: {pack.unavailable}")
        questions = _pack_questions(pack, registry)
        preds = fmt.read(path, questions, pack.name)
        built = runtime.built(pack_name, variant)
        executor = full_executor(built, cond, persona, settings.stores.engines,
                                 settings.limits.query_timeout, registry)
        run = _Importing(fmt, pack.name, cond.id, model or f"{fmt.name}:{path.parent.name}",
                         variant, {q.id: q for q in questions}, with_truth=truth is None)
        try:
            for pred in preds:
                run.run(executor, pred)
        finally:
            executor.close()
    finally:
        runtime.close()
    scores = None
    if fmt.language == "sparql":
        scores = challenge_scores(preds, run.got, pack.name, results=results, truth=truth,
                                  ours_truth=run.ours_truth, questions_file=questions_file)
    run_dir, code = grade(settings, run.records, cond.id, run.model, variant, pack.question_files)
    if scores is not None:
        (run_dir / "text2sparql.json").write_text(json.dumps(scores, indent=2) + "\n",
                                                  encoding="utf-8")
    return Imported(run_dir, scores, code, run.failed)


@dataclass
class _Importing:
    """One import's answers, a prediction at a time: the records banked, and for the
    challenge's metric each query's result set (and the reference query's, `with_truth`)."""

    fmt: Format
    pack: str
    condition: str
    model: str
    variant: str
    questions: dict[str, Any]  # the pack's questions by id
    with_truth: bool           # no --truth given: the pack's reference queries are the truth
    records: list[dict[str, Any]] = field(default_factory=list)
    got: dict[str, dict[str, int]] = field(default_factory=dict)
    ours_truth: dict[str, dict[str, int]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def run(self, executor: Any, pred: Prediction) -> None:
        """Run one prediction's query on `executor` and bank its answer."""
        from pytest_kgbench.metrics import text2sparql as t2s

        result = executor.run(pred.statement) if pred.statement else None
        if result is not None and not result.ok:
            self.failed[pred.question] = (result.refused or result.error or "failed")
        if self.fmt.language == "sparql":
            self.got[pred.source if ":" in pred.source else pred.question] = (
                t2s.from_query_result(result))
            if self.with_truth:
                q = self.questions[pred.question]
                gold = executor.run(q.gold["sparql"]) if "sparql" in q.gold else None
                self.ours_truth[_qname_of(pred, self.pack)] = t2s.from_query_result(gold)
        self.records.append({
            "pack": self.pack, "variant": self.variant, "question": pred.question,
            "condition": self.condition, "model": self.model, "repeat": 1, "grade": "imported",
            "answer": answer_of(pred, result, self.questions[pred.question])})


def _pack_questions(pack: Any, registry: Registry) -> list[Any]:
    from pytest_kgbench.core.questions import load_questions

    out: list[Any] = []
    for path in pack.question_files:
        out += list(load_questions(path, pack=pack.name, source=pack,
                                   registry=registry).questions)
    return out


def _qname_of(pred: Prediction, pack: str) -> str:
    if ":" in pred.source:
        return pred.source
    prefix, _, number = pred.question.rpartition("-")
    return f"{prefix}:{number}-en"


def ordered_qnames(questions_file: Path | None) -> list[str]:
    """The qnames of the questions whose `features` list RESULT_ORDER_MATTERS, read from the
    challenge's questions file as the client's evaluate command reads it."""
    if questions_file is None:
        return []
    import yaml

    data = yaml.safe_load(questions_file.read_text(encoding="utf-8")) or {}
    prefix = (data.get("dataset") or {}).get("prefix")
    return [f"{prefix}:{q['id']}-en" for q in data.get("questions") or []
            if "RESULT_ORDER_MATTERS" in (q.get("features") or [])]


def challenge_scores(preds: Sequence[Prediction], got: Mapping[str, Mapping[str, int]],
                     pack: str, *, results: Path | None, truth: Path | None,
                     ours_truth: Mapping[str, Mapping[str, int]],
                     questions_file: Path | None) -> dict[str, Any]:
    """The challenge's evaluate output for these answers: our executed result sets, or the
    file `results` gives, against `truth` (or our reference results)."""
    from pytest_kgbench.metrics import text2sparql as t2s

    true_sets = _result_sets(truth) if truth is not None else dict(ours_truth)
    predicted: Mapping[str, Mapping[str, int]]
    if results is not None:
        predicted = _result_sets(results)
        unknown = sorted(set(predicted) - set(true_sets))
        if unknown:
            raise InputError(str(results), f"holds result sets of questions the truth lacks: "
                             f"{unknown[:5]}")
    else:
        predicted = {k: v for k, v in got.items() if k in true_sets}
    return t2s.evaluate(predicted, true_sets, ordered_qnames(questions_file))


def _result_sets(path: Path) -> dict[str, dict[str, int]]:
    data = _load_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(str(path), "must map each qname to its result set ({value: 1})")
    return {str(k): {str(d): int(r) for d, r in v.items()} for k, v in data.items()}


def grade(settings: Any, records: list[dict[str, Any]], condition: str, model: str,
          variant: str, question_files: Sequence[Path]) -> tuple[Path, int]:
    """Grade the imported answers with the plugin, as a replay of a stored run holding them:
    the run folder is `reports/<run-id>`, written by the plugin itself."""
    with tempfile.TemporaryDirectory(prefix="kgbench-import-") as tmp:
        stored = Path(tmp) / "imported"
        stored.mkdir()
        with (stored / "answers.jsonl").open("w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec) + "\n")
        meta = {"models": [model], "agent": "replay",
                "settings": {"condition_ids": [condition], "variants": [variant],
                             "repeats": 1, "models": [model]}}
        (stored / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        cmd = [sys.executable, "-m", "pytest", *map(str, question_files),
               f"--pack={records[0]['pack']}",
               "--agent", "replay", "--replay-run", str(stored), "--model", model,
               "--condition", condition, "--run-id", str(settings.plan.run_id), "-q",
               "-p", "no:randomly", "-p", "no:cacheprovider",
               "--query-timeout", f"{settings.limits.query_timeout:g}"]
        for language, engine in settings.stores.engines.items():
            cmd += [f"--{language}-engine", engine]
        cmd += ["-o", f"kgbench_reports={settings.paths.reports_dir}",
                "-o", f"kgbench_cache={settings.paths.cache_dir}"]
        env = dict(os.environ)
        if settings.paths.external_dir:
            env["KGBENCH_EXTERNAL"] = str(settings.paths.external_dir)
        proc = subprocess.run(cmd, cwd=settings.paths.rootdir, env=env, capture_output=True,
                              text=True, check=False)
    run_dir = Path(settings.paths.reports_dir) / str(settings.plan.run_id)
    if not (run_dir / "answers.jsonl").is_file():
        raise KgbenchError(f"grading the imported answers wrote no run folder ({run_dir}): "
                           f"pytest exited {proc.returncode}:\n{proc.stdout[-3000:]}"
                           f"{proc.stderr[-2000:]}")
    return run_dir, proc.returncode


# --- the command ----------------------------------------------------------------------------

def add_parser(sub: Any) -> None:
    """`kgbench import`: the subcommand's arguments (cli/__init__.py calls this once)."""
    p = sub.add_parser("import", help="turn another harness's predictions into a run folder, "
                       "graded by this instrument")
    p.add_argument("file", help="the predictions file")
    p.add_argument("--format", required=True, help="one of: " + "; ".join(
        f"{f.name} ({f.help})" for f in FORMATS.values()))
    p.add_argument("--pack", required=True, help="pack name, or a folder holding a pack.yaml")
    p.add_argument("--run-id", required=True, help="name of the run folder under reports/")
    p.add_argument("--model", default=None,
                   help="the system's name in the run (default: FORMAT:<the file's folder>)")
    p.add_argument("--condition", default="D4", help="the querying condition whose store the "
                   "queries run on (default: D4)")
    p.add_argument("--results", default=None, help="text2sparql: score these result sets "
                   "(the challenge endpoint's, {qname: {value: 1}}) instead of ours")
    p.add_argument("--truth", default=None, help="text2sparql: the reference result sets "
                   "to score against (default: the pack's reference queries, run here)")
    p.add_argument("--questions-file", default=None, help="text2sparql: the challenge's "
                   "questions YAML (its RESULT_ORDER_MATTERS questions get nDCG)")
    p.add_argument("--query-timeout", type=float, default=60.0,
                   help="seconds before a query is stopped (default: 60)")
    p.add_argument("--sparql-engine", default=None)
    p.add_argument("--sql-engine", default=None)
    p.add_argument("--root", default=".", help="repository root (default: .)")
    p.add_argument("--reports", default=None, help="folder of run folders (default: "
                   "<root>/reports)")
    p.add_argument("--cache", default=None, help="build cache (default: <root>/.kgbench-cache)")
    p.add_argument("--external-data", default=None,
                   help="folder holding packs' external data (default: $KGBENCH_EXTERNAL)")
    p.set_defaults(func=cmd_import)


def cmd_import(args: Any) -> int:
    from pytest_kgbench.core.settings import Settings, engine_value, read_tool_config
    from pytest_kgbench.packs.locate import pack_settings

    root = Path(args.root).resolve()
    table = read_tool_config(root)
    engines = {lang: engine_value(v) for lang, v in
               (("sparql", args.sparql_engine), ("sql", args.sql_engine)) if v}
    packs = pack_settings(args.pack, table.get("packs") or {}, root, args.external_data)
    paths = {name: str(Path(value).resolve()) for name, value in
             (("reports_dir", args.reports), ("cache_dir", args.cache)) if value}
    settings = Settings.at(root, run_id=args.run_id, query_timeout=float(args.query_timeout),
                           engines=engines, stats_seed=0, **packs, **paths)
    fmt = get_format(args.format)
    path = Path(args.file)
    if not path.is_file():
        raise InputError(str(path), "no such predictions file")
    def named(name: str) -> Path | None:
        value = getattr(args, name)
        return Path(value) if value else None

    out = import_run(settings, fmt, path, condition=args.condition, model=args.model,
                     results=named("results"), truth=named("truth"),
                     questions_file=named("questions_file"), registry=args.registry)
    print(f"imported {path} as {out.run_dir} (grading exited {out.pytest_exit})")
    if out.failed:
        print(f"{len(out.failed)} queries failed or were refused on the executor:")
        for qid, why in out.failed.items():
            print(f"  {qid}: {why.splitlines()[0][:160]}")
    if out.scores is not None:
        avg = out.scores["average"]
        print("challenge metric: " + ", ".join(f"{k} {v:.4f}" for k, v in avg.items()))
    return 0
