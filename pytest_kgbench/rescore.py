"""Rescoring a finished run with today's grader, and comparing two runs.

`rescore` replays the stored answers: each stored query is re-run (its stored result is not
trusted) on the store the item had — the condition's executor for a querying item, a store
rebuilt from the stored prompt for a reading item — the key is recomputed from the data, and the
answer is graded again. The new grades and report are written beside the old ones, never over
them. `compare_runs` pairs two runs question by question.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_kgbench import stats
from pytest_kgbench.answers import Answer
from pytest_kgbench.conditions import by_id
from pytest_kgbench.errors import KgbenchError
from pytest_kgbench.questions import TIERS, Question, load_questions
from pytest_kgbench.record import BankedRecord, grades_json, read_answers
from pytest_kgbench.settings import Settings, stored_settings


@dataclass
class Rescored:
    records: list[BankedRecord]
    moved: list[tuple[str, str, str]]  # nodeid, old grade, new grade
    changed_questions: list[str]
    paths: list[Path]


def _questions(settings: Settings, records: list[BankedRecord]) -> dict[tuple[str, str], Question]:
    out: dict[tuple[str, str], Question] = {}
    for name in sorted({r["question_file"] for r in records}):
        for qdir in settings.question_dirs:
            path = Path(settings.rootdir) / qdir / name
            if path.is_file():
                for q in load_questions(path).questions:
                    out[(q.pack, q.id)] = q
                break
        else:
            raise KgbenchError(f"question file {name} not found under {settings.rootdir}")
    return out


def rescore(run_dir: Path, *, stamp: str | None = None) -> Rescored:
    """Regrade every banked item of a run; write grades-<stamp>.json and report-<stamp>.*."""
    from pytest_kgbench.answer_key import compute_key
    from pytest_kgbench.grading import grader_sha256
    from pytest_kgbench.report import build_report, render_markdown
    from pytest_kgbench.runtime import Runtime
    from pytest_kgbench.stores import guard_for, store_from_context

    meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    settings = Settings.from_dict(stored_settings(run_dir))
    records = read_answers(run_dir / "answers.jsonl")
    if not records:
        raise KgbenchError(f"{run_dir / 'answers.jsonl'} holds no banked answers")
    questions = _questions(settings, records)
    runtime = Runtime(settings)
    new_records: list[BankedRecord] = []
    moved: list[tuple[str, str, str]] = []
    changed: set[str] = set()
    stores: dict[tuple[str, str], Any] = {}
    try:
        for rec in records:
            q = questions.get((rec["pack"], rec["question"]))
            if q is None:
                raise KgbenchError(f"question {rec['question']} is no longer in "
                                   f"{rec['question_file']}")
            if q.sha256 != rec["question_sha256"]:
                changed.add(q.id)
            cond = by_id(rec["condition"])
            built = runtime.built(rec["pack"], rec["variant"])
            answer = Answer.from_dict(rec["answer"])
            if answer.queries:
                if cond.mode == "querying":
                    store = runtime.executor(built, cond, q.persona)
                else:
                    ctx_file = run_dir / rec["prompt"]["context_file"]
                    key = (str(ctx_file), q.persona)
                    if key not in stores:
                        stores[key] = store_from_context(
                            ctx_file.read_text(encoding="utf-8"), cond.language,
                            guard_for(built, q.persona), settings.engines)
                    store = stores[key]
                answer.queries = [store.run(old.statement) for old in answer.queries]
            key_fields = compute_key(q, built)
            g = runtime.grade(q, cond, built, key_fields, answer)
            executor = runtime.executor(built, cond, q.persona) if cond.mode == "querying" else None
            metrics = runtime.metrics(q, cond, built, answer, executor)
            new = BankedRecord(**rec)
            new.update({"key": key_fields, "answer": answer.to_dict(), "grade": g.grade,
                        "score": g.score, "behaviour": g.behaviour, "letter": g.letter,
                        "reason": g.reason, "fields": [f.__dict__ for f in g.fields],
                        "metrics": metrics})
            if g.grade != rec["grade"]:
                moved.append((rec["nodeid"], rec["grade"], g.grade))
            new_records.append(new)
    finally:
        runtime.close()
    stamp = stamp or dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    meta = dict(meta, rescored=stamp, grader_sha256=grader_sha256())
    report = build_report(new_records, settings, missing=[], meta=meta)
    report["rescored"] = {"stamp": stamp, "moved": [list(m) for m in moved],
                          "questions_changed_since_run": sorted(changed)}
    paths = [run_dir / f"grades-{stamp}.json", run_dir / f"report-{stamp}.json",
             run_dir / f"report-{stamp}.md"]
    for path in paths:
        if path.exists():
            raise KgbenchError(f"{path} exists: a rescore never writes over earlier grades")
    paths[0].write_text(json.dumps(grades_json(new_records), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(report)
    old_report = run_dir / "report.json"
    if old_report.is_file():
        from pytest_kgbench.report import moved_lines

        before = json.loads(old_report.read_text(encoding="utf-8"))
        md += ("\n## The instrument, before and after\n\nThe stored report (its grader "
               f"`{str(before.get('fingerprint', {}).get('grader_sha256'))[:12]}`) beside this "
               f"rescore (`{str(report['fingerprint'].get('grader_sha256'))[:12]}`); metrics "
               "listed only where they moved.\n\n")
        md += "\n".join(moved_lines(before, report)) + "\n"
    if moved:
        md += "\n## What moved in this rescore\n\n| item | before | after |\n|---|---|---|\n"
        md += "".join(f"| `{n}` | {a} | {b} |\n" for n, a, b in moved)
    else:
        md += "\n## What moved in this rescore\n\nNothing: every grade is as it was.\n"
    paths[2].write_text(md, encoding="utf-8")
    return Rescored(new_records, moved, sorted(changed), paths)


def compare_runs(a: dict[str, Any], b: dict[str, Any], *, seed: int, force: bool = False
                 ) -> list[stats.Comparison]:
    """Pair two runs' reports condition by condition and tier by tier (Holm across all)."""
    fa, fb = a["fingerprint"], b["fingerprint"]
    if fa["questions_sha256"] != fb["questions_sha256"] and not force:
        raise KgbenchError(
            f"the runs asked different question sets ({fa['questions_count']} questions, "
            f"{fa['questions_sha256'][:12]} vs {fb['questions_count']} questions, "
            f"{fb['questions_sha256'][:12]}); pass --force to compare them anyway")

    def scores(report: dict[str, Any], cond: str, tier: str) -> dict[str, list[float | None]]:
        out: dict[str, list[float | None]] = {}
        for item in report["items"]:
            if item["condition"] == cond and item["tier"] == tier:
                key = f"{item['pack']}/{item['question']}"  # record.question_key
                out.setdefault(key, []).append(item["score"])
        return out

    family = []
    common = [c for c in a["conditions"] if c in b["conditions"]]
    for arm in common:
        cond = a["conditions"][arm]["condition"]
        for tier in TIERS:
            sa, sb = scores(a, cond, tier), scores(b, cond, tier)
            if set(sa) & set(sb):
                family.append(stats.compare(sa, sb, a=f"{a['run_id']}:{arm}",
                                            b=f"{b['run_id']}:{arm}", tier=tier, seed=seed))
    return stats.holm_adjust(family)
