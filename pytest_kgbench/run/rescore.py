"""Rescoring a finished run with today's grader, and comparing two runs.

`rescore` replays the stored answers: each stored query is re-run (its stored result is not
trusted) on the store the item had — the condition's executor for a querying item, a store
rebuilt from the stored prompt for a reading item — the key is recomputed from the data, and the
answer is graded again. The new grades and report are written beside the old ones, never over
them. A rescore keeps what the run did not bank (its report's missing items, and the items it
skipped), and refuses a pack whose build differs from the one the run was asked about unless
forced, when its report says so loudly. `compare_runs` pairs two runs question by question, one
model with the same model, and refuses runs over different questions or data unless forced,
naming what differs.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_kgbench.analysis import stats
from pytest_kgbench.core.conditions import by_id
from pytest_kgbench.core.errors import KgbenchError
from pytest_kgbench.core.questions import TIERS, Question, load_questions
from pytest_kgbench.core.record import BankedRecord, grades_json, latest, read_answers, run_gaps
from pytest_kgbench.core.registry import Registry, given
from pytest_kgbench.core.settings import Settings, stored_meta, stored_settings
from pytest_kgbench.scoring.answers import Answer


@dataclass
class Rescored:
    records: list[BankedRecord]
    moved: list[tuple[str, str, str]]  # nodeid, old grade, new grade
    changed_questions: list[str]
    paths: list[Path]
    data_changed: dict[str, Any] | None = None  # pack/variant -> the run's build and today's
    missing: list[dict[str, str]] | None = None


def changed_data(records: list[BankedRecord], runtime: Any) -> dict[str, Any]:
    """The variants whose build today differs from the one the run's items were asked about
    (the build folder's name fingerprints the pack, the variant, the seed and the format)."""
    out: dict[str, Any] = {}
    for rec in records:
        name = f"{rec['pack']}/{rec['variant']}"
        if name in out:
            continue
        built = runtime.built(rec["pack"], rec["variant"])
        now = {"seed": built.seed, "build": built.dir.name,
               "pack_sha256": built.manifest.get("pack_sha256")}
        then = dict(rec["dataset"])
        if then.get("build") != now["build"] or then.get("pack_sha256") != now["pack_sha256"]:
            out[name] = {"run": then, "now": now}
    return {k: v for k, v in out.items() if v}


def stored_missing(run_dir: Path, meta: dict[str, Any],
                   records: list[BankedRecord]) -> list[dict[str, str]]:
    """What the run did not bank: the items it was meant to have (meta.json's `expected`)
    that answers.jsonl does not hold, whatever its report says (a line lost since is missing
    too); a run that never recorded them falls back on its report, and one that wrote no
    report cannot say, and is then not called complete."""
    path = run_dir / "report.json"
    report = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    gaps = run_gaps(meta, records, report)
    if gaps is not None:
        return gaps
    return [{"nodeid": "(unknown)", "why": "the run never finished: it wrote no report.json, "
             "so what it did not bank is unknown"}]


def _questions(settings: Settings, records: list[BankedRecord], registry: Registry
               ) -> dict[tuple[str, str], Question]:
    out: dict[tuple[str, str], Question] = {}
    from pytest_kgbench.packs.locate import open_pack, question_file

    for pack, name in sorted({(r["pack"], r["question_file"]) for r in records}):
        path = question_file(settings, pack, name)
        if path is None:
            raise KgbenchError(f"question file {name} of pack {pack} not found under "
                               f"{settings.paths.rootdir} (a folder pack: pass it with --pack)")
        for q in load_questions(path, pack=pack, source=open_pack(settings, pack),
                                registry=registry).questions:
            out[(q.pack, q.id)] = q
    return out


def rescore(run_dir: Path, *, stamp: str | None = None, force: bool = False,
            registry: Registry | None = None) -> Rescored:
    """Regrade every banked item of a run; write grades-<stamp>.json and report-<stamp>.*.
    Refuses (KgbenchError naming the variants) when today's data differs from the run's,
    unless `force`. `registry`: the pieces to grade with (the command's: the shipped ones and
    installed plugins'; the shipped ones where none is passed)."""
    from pytest_kgbench.analysis.report import build_report
    from pytest_kgbench.core.fingerprints import grader_sha256

    meta = stored_meta(run_dir, "rescore")
    settings = Settings.from_dict(stored_settings(run_dir, "rescore"))
    records = _banked(run_dir)
    registry = given(registry)
    done = _regrade_all(run_dir, settings, records, force, registry)
    stamp = stamp or dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    meta = dict(meta, rescored=stamp, grader_sha256=grader_sha256(registry))
    missing = stored_missing(run_dir, meta, records)
    report = build_report(done.records, settings, missing=missing, meta=meta,
                          registry=registry)
    report["rescored"] = {"stamp": stamp, "moved": [list(m) for m in done.moved],
                          "questions_changed_since_run": sorted(done.changed),
                          "data_changed_since_run": done.data}
    paths = _write_rescore(run_dir, stamp, done, report, registry)
    return Rescored(done.records, done.moved, sorted(done.changed), paths, done.data, missing)


def _banked(run_dir: Path) -> list[BankedRecord]:
    """The run's banked records, in its own order (by node id, as its grades.json): answers.jsonl
    is in the order the items ran (by prompt context, across workers, resumes); an item asked
    again after its question was edited counts once, as last banked. Raises when there are none."""
    records = sorted(latest(read_answers(run_dir / "answers.jsonl")),
                     key=lambda r: r.get("nodeid", ""))
    if not records:
        raise KgbenchError(f"{run_dir / 'answers.jsonl'} holds no banked answers")
    return records


@dataclass
class _Regrading:
    """What regrading a run gives: the new records, the grades that moved, the questions
    edited since the run, and the variants whose data changed (changed_data)."""

    records: list[BankedRecord] = field(default_factory=list)
    moved: list[tuple[str, str, str]] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Regrader:
    """Regrades a run's records one by one into `done`, on the stores `runtime` opens today
    (a reading item's store rebuilt once per stored prompt and persona)."""

    run_dir: Path
    settings: Settings
    runtime: Any
    items: Any  # the item runner over `runtime` (run/items.py): grades and measures
    questions: dict[tuple[str, str], Question]
    done: _Regrading = field(default_factory=_Regrading)
    stores: dict[tuple[str, str], Any] = field(default_factory=dict)

    def store(self, rec: BankedRecord, q: Question, cond: Any, built: Any) -> Any:
        """The store the item's queries run on again: the condition's executor for a querying
        item (capped, as a model's), else one rebuilt from the stored prompt (whole, as the
        reading gold agent's was: `store_from_context`)."""
        from pytest_kgbench.engines.stores import guard_for, store_from_context

        if cond.mode == "querying":
            return self.runtime.executor(built, cond, q.persona)
        ctx_file = self.run_dir / rec["prompt"]["context_file"]
        key = (str(ctx_file), q.persona)
        if key not in self.stores:
            self.stores[key] = store_from_context(
                ctx_file.read_text(encoding="utf-8"), cond.language,
                guard_for(built, q.persona), self.settings.stores.engines, self.runtime.registry)
        return self.stores[key]

    def regrade(self, rec: BankedRecord) -> None:
        """Regrade one record (a skipped one is kept as it is) and note what moved."""
        from pytest_kgbench.scoring.answer_key import compute_key

        if rec["grade"] == "skipped":  # never asked: nothing to regrade
            self.done.records.append(BankedRecord(**rec))
            return
        q = self.questions.get((rec["pack"], rec["question"]))
        if q is None:
            raise KgbenchError(f"question {rec['question']} is no longer in "
                               f"{rec['question_file']}")
        if q.sha256 != rec["question_sha256"]:
            self.done.changed.add(q.id)
        cond = by_id(rec["condition"], self.runtime.registry)
        runtime = self.runtime
        built = runtime.built(rec["pack"], rec["variant"])
        answer = Answer.from_dict(rec["answer"])
        if answer.queries:
            store = self.store(rec, q, cond, built)
            answer.queries = [store.run(old.statement) for old in answer.queries]
        key_fields = compute_key(q, built)
        g = self.items.grade(q, cond, built, key_fields, answer)
        executor = runtime.executor(built, cond, q.persona) if cond.mode == "querying" else None
        metrics = self.items.metrics(q, cond, built, answer, executor)
        new = BankedRecord(**rec)
        new.update({"key": key_fields, "answer": answer.to_dict(), "grade": g.grade,
                    "score": g.score, "behaviour": g.behaviour, "letter": g.letter,
                    "reason": g.reason, "fields": [f.__dict__ for f in g.fields],
                    "metrics": metrics})
        if g.grade != rec["grade"]:
            self.done.moved.append((rec["nodeid"], rec["grade"], g.grade))
        self.done.records.append(new)


def _regrade_all(run_dir: Path, settings: Settings, records: list[BankedRecord],
                 force: bool, registry: Registry) -> _Regrading:
    """Every record regraded on today's stores; refused when today's data is not the run's,
    unless `force`."""
    from pytest_kgbench.run.items import ItemRunner
    from pytest_kgbench.run.runtime import Runtime

    questions = _questions(settings, records, registry)
    runtime = Runtime(settings, registry)
    regrader = _Regrader(run_dir, settings, runtime, ItemRunner(runtime), questions)
    try:
        data = changed_data(records, runtime)
        regrader.done.data = data
        if data and not force:
            what = "; ".join(f"{name}: build {v['run'].get('build')} then, {v['now']['build']} "
                             f"now" for name, v in data.items())
            raise KgbenchError(f"today's data is not what the run was asked about ({what}): a "
                               "rescore would grade its answers against other keys; pass --force "
                               "to do it anyway (the rescore's report says so)")
        for rec in records:
            regrader.regrade(rec)
    finally:
        for store in regrader.stores.values():
            store.close()
        runtime.close()
    return regrader.done


def _write_rescore(run_dir: Path, stamp: str, done: _Regrading,
                   report: dict[str, Any], registry: Registry) -> list[Path]:
    """The rescore's grades, report.json and report.md, written beside the run's (never over
    a file): their paths."""
    from pytest_kgbench.analysis.report import render_markdown

    paths = [run_dir / f"grades-{stamp}.json", run_dir / f"report-{stamp}.json",
             run_dir / f"report-{stamp}.md"]
    for path in paths:
        if path.exists():
            raise KgbenchError(f"{path} exists: a rescore never writes over earlier grades")
    paths[0].write_text(json.dumps(grades_json(done.records), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(report, registry) + _rescore_sections(run_dir, report, done)
    paths[2].write_text(md, encoding="utf-8")
    return paths


def _rescore_sections(run_dir: Path, report: dict[str, Any], done: _Regrading) -> str:
    """What report-<stamp>.md adds to the report: the instrument before and after (when the
    run wrote a report), the data changed (when forced), and the grades that moved."""
    md = ""
    old_report = run_dir / "report.json"
    if old_report.is_file():
        from pytest_kgbench.analysis.report import moved_lines

        before = json.loads(old_report.read_text(encoding="utf-8"))
        md += ("\n## The instrument, before and after\n\nThe stored report (its grader "
               f"`{str(before.get('fingerprint', {}).get('grader_sha256'))[:12]}`) beside this "
               f"rescore (`{str(report['fingerprint'].get('grader_sha256'))[:12]}`); metrics "
               "listed only where they moved.\n\n")
        md += "\n".join(moved_lines(before, report)) + "\n"
    if done.data:
        md += ("\n## DATA CHANGED SINCE THE RUN\n\n**Forced: these answers were graded against "
               "today's data, not the data they were asked about.**\n\n")
        md += "".join(f"- {name}: build `{v['run'].get('build')}` then, `{v['now']['build']}` "
                      f"now\n" for name, v in done.data.items())
    if done.moved:
        md += "\n## What moved in this rescore\n\n| item | before | after |\n|---|---|---|\n"
        md += "".join(f"| `{n}` | {a} | {b} |\n" for n, a, b in done.moved)
    else:
        md += "\n## What moved in this rescore\n\nNothing: every grade is as it was.\n"
    return md


def question_hashes(run_dir: Path) -> dict[str, str]:
    """Each question a run asked (pack/question) and the SHA-256 it was asked under."""
    return {f"{r['pack']}/{r['question']}": r["question_sha256"]
            for r in read_answers(run_dir / "answers.jsonl")}


def _differing(qa: dict[str, str], qb: dict[str, str]) -> str:
    edited = sorted(q for q in set(qa) & set(qb) if qa[q] != qb[q])
    only_a, only_b = sorted(set(qa) - set(qb)), sorted(set(qb) - set(qa))
    parts = [f"{label}: {', '.join(qs[:10])}{' ...' if len(qs) > 10 else ''}"
             for label, qs in (("edited", edited), ("only in the first", only_a),
                               ("only in the second", only_b)) if qs]
    return "; ".join(parts)


def compare_runs(a: dict[str, Any], b: dict[str, Any], *, seed: int, force: bool = False,
                 questions: tuple[dict[str, str], dict[str, str]] | None = None
                 ) -> list[stats.Comparison]:
    """Pair two runs' reports condition by condition and tier by tier (Holm across all), one
    arm's model with the same arm's model of the other run. Refuses runs that asked different
    questions (naming them, from `questions`: each run's question_hashes) or about different
    data, unless `force`."""
    fa, fb = a["fingerprint"], b["fingerprint"]
    if fa["questions_sha256"] != fb["questions_sha256"] and not force:
        which = _differing(*questions) if questions else ""
        raise KgbenchError(
            f"the runs asked different question sets ({fa['questions_count']} questions, "
            f"{fa['questions_sha256'][:12]} vs {fb['questions_count']} questions, "
            f"{fb['questions_sha256'][:12]}{'; ' + which if which else ''}); pass --force to "
            "compare them anyway")
    data = {name: (da, fb["datasets"][name]) for name, da in fa.get("datasets", {}).items()
            if name in fb.get("datasets", {})
            and (da.get("seed"), da.get("build")) != (fb["datasets"][name].get("seed"),
                                                      fb["datasets"][name].get("build"))}
    if data and not force:
        what = "; ".join(f"{name}: seed {x.get('seed')} build {x.get('build')} vs seed "
                         f"{y.get('seed')} build {y.get('build')}" for name, (x, y) in data.items())
        raise KgbenchError(f"the runs asked about different data ({what}); pass --force to "
                           "compare them anyway")

    def scores(report: dict[str, Any], cond: str, model: str, tier: str
               ) -> dict[str, list[float | None]]:
        out: dict[str, list[float | None]] = {}
        for item in report["items"]:
            if item["condition"] == cond and item["model"] == model and item["tier"] == tier:
                key = f"{item['pack']}/{item['question']}"  # record.question_key
                out.setdefault(key, []).append(item["score"])
        return out

    family = []
    common = [c for c in a["conditions"] if c in b["conditions"]]
    for arm in common:
        arm_a, arm_b = a["conditions"][arm], b["conditions"][arm]
        cond = arm_a["condition"]
        for tier in TIERS:
            sa = scores(a, cond, arm_a["model"], tier)
            sb = scores(b, cond, arm_b["model"], tier)
            if set(sa) & set(sb):
                family.append(stats.compare(sa, sb, a=f"{a['run_id']}:{arm}",
                                            b=f"{b['run_id']}:{arm}", tier=tier, seed=seed))
    return stats.holm_adjust(family)
