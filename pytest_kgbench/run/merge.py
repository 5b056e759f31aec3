"""`kgbench merge RUN... --run-id OUT`: one run folder from the run folders of a run's shards
(run/shards.py), its report and statistics computed once over the union. docs/scale-out.md.

The merge is where shards that must not be mixed are caught, each in one line naming the
difference (MergeRefused; the command exits 4): shards cut from another selection, a shard
given twice or not at all, shards whose code, data, settings or models differ, an item two
shards banked or none was dealt, and a shard that is not whole (INCOMPLETE, HALTED,
INTERRUPTED) unless `allow_incomplete`, when the merged run lists what the shard did not bank
as a killed run does. A shard resumed as it was cut is one run; a shard resumed with
--force-resume under other settings or code is refused (its own items were not all asked
alike). Nothing is written unless every check passes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_kgbench.analysis.runs import RunSummary, summarise
from pytest_kgbench.core.errors import KgbenchError
from pytest_kgbench.core.files import write_atomic
from pytest_kgbench.core.record import (
    BankedRecord,
    grades_json,
    latest,
    questions_json,
    record_line,
    scan_answers,
)
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings, find_run
from pytest_kgbench.run.shards import SHARD_FILE, SPLIT_LIMITS

REFUSED = 4  # the exit status of a refused merge (as of a refused option)
LEDGER = "spend.json"  # agents/support/cache.py's spending ledger

PER_SHARD = frozenset({
    "run_id", "resume", "force_resume",  # each shard is a run of its own
    "max_cost", "rpm", "tpm",  # each shard's share of the run's (checked apart: `budget`)
    "concurrency", "progress", "batch_poll", "model_reruns", "response_cache",  # the pace
    "rootdir", "datasets_dir", "ontology_dir", "reports_dir", "cache_dir", "responses_dir",
    "external_dir", "packs", "question_dirs",  # where things are on each machine
})
"""Settings that may differ between shards: where things are and how fast they are asked.
Every other setting must be the same (a setting added later is compared by default)."""
ANY_SHARD = ("ablation", "compare_models", "strict")
"""What the report adds or checks and no answer depends on (a resume may leave it out): the
merged run has it when any shard had it."""
CODE = (("grader_sha256", "the grader's code"), ("prompts_sha256", "the prompts' code"))


class MergeRefused(KgbenchError):
    """Shards that must not be merged: the message names the shard and the difference."""


@dataclass
class ShardRun:
    """One shard's run folder as read: meta.json, shard.json, report.json (None without one),
    its records (the last of each item), and its status."""

    folder: Path
    meta: dict[str, Any]
    cut: dict[str, Any]
    report: dict[str, Any] | None
    records: list[BankedRecord]
    summary: RunSummary
    spent: float | None = None  # its spending ledger (--max-cost), when it kept one
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"shard {self.cut['index']}/{self.cut['count']} ({self.folder})"

    @property
    def index(self) -> int:
        return int(self.cut["index"])


def _json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MergeRefused(f"{path}: no {what}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise MergeRefused(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(value, dict):
        raise MergeRefused(f"{path}: not a JSON object")
    return value


def read_shard(run: str | Path, reports: str | Path = "reports") -> ShardRun:
    """A shard's run folder, given as a folder or a run id under `reports`."""
    folder = find_run(Path("."), str(reports), str(run))
    if folder is None:
        raise MergeRefused(f"no run '{run}': neither a run folder nor a run id under "
                           f"{Path(reports).resolve()}")
    meta = _json(folder / "meta.json", "meta.json (the run never began)")
    if not (folder / SHARD_FILE).is_file():
        raise MergeRefused(f"{folder}: not a shard (no {SHARD_FILE}: the run was not started "
                           "with --kgbench-shard I/N)")
    cut = _json(folder / SHARD_FILE, SHARD_FILE)
    kinds = {"index": int, "count": int, "selection_sha256": str, "selection": list,
             "questions": dict, "shards": dict, "budget": dict}
    for key, kind in kinds.items():
        if key not in cut:
            raise MergeRefused(f"{folder / SHARD_FILE}: field '{key}' is missing")
        if not isinstance(cut[key], kind) or isinstance(cut[key], bool):
            raise MergeRefused(f"{folder / SHARD_FILE}: field '{key}' is not a "
                               f"{'whole number' if kind is int else kind.__name__}")
    report = _json(folder / "report.json", "report.json") if (
        folder / "report.json").is_file() else None
    records, _ = scan_answers(folder / "answers.jsonl")
    spent = None
    if (folder / LEDGER).is_file():
        spent = float(_json(folder / LEDGER, LEDGER).get("spent") or 0.0)
    return ShardRun(folder, meta, cut, report, latest(records), summarise(folder), spent)


# --- the checks -------------------------------------------------------------------------------

def _shown(value: Any, width: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= width else text[:width - 1] + "…"


def check_cut(shards: Sequence[ShardRun]) -> None:
    """Every shard cut from the same selection into as many shards, each given once."""
    first = shards[0]
    for s in shards[1:]:
        if s.cut["count"] != first.cut["count"]:
            raise MergeRefused(f"{s.name} is one of {s.cut['count']} shards, {first.name} one "
                               f"of {first.cut['count']}: they were cut differently")
        if s.cut["selection_sha256"] == first.cut["selection_sha256"]:
            continue
        a, b = first.cut, s.cut
        questions = sorted(set(a["questions"]) | set(b["questions"]))
        differ = [q for q in questions if a["questions"].get(q) != b["questions"].get(q)]
        if differ:
            q = differ[0]
            how = ("is not in" if q not in b["questions"] else
                   "is missing from" if q not in a["questions"] else "was edited between")
            where = (f"{s.name}'s selection" if how == "is not in" else
                     f"{first.name}'s selection" if how == "is missing from" else
                     f"{first.name} and {s.name}")
            raise MergeRefused(f"{s.name} was cut from another selection than {first.name}: "
                               f"question {q} {how} {where}")
        only_a = [n for n in a["selection"] if n not in set(b["selection"])]
        only_b = [n for n in b["selection"] if n not in set(a["selection"])]
        named = (f"item {only_a[0]} is only in {first.name}'s" if only_a else
                 f"item {only_b[0]} is only in {s.name}'s" if only_b else
                 "the same items in another order")
        raise MergeRefused(f"{s.name} was cut from another selection than {first.name} "
                           f"({len(a['selection'])} items, then {len(b['selection'])}): "
                           f"{named}")
    seen: dict[int, ShardRun] = {}
    for s in shards:
        if s.index in seen:
            raise MergeRefused(f"shard {s.index}/{s.cut['count']} is given twice: "
                               f"{seen[s.index].folder} and {s.folder}")
        seen[s.index] = s
    absent = [i for i in range(int(first.cut["count"])) if i not in seen]
    if absent:
        raise MergeRefused(f"shard {absent[0]}/{first.cut['count']} is missing"
                           + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
                           + ": give the run folder of every shard, 0 to "
                           f"{int(first.cut['count']) - 1}")


def _settings(meta: Mapping[str, Any]) -> dict[str, Any]:
    stored = dict(meta.get("settings") or {})
    stored["models"] = meta.get("models") or stored.get("models")
    return stored


def _datasets(shard: ShardRun) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rec in shard.records:
        out.setdefault(f"{rec.get('pack')}/{rec.get('variant')}", rec.get("dataset"))
    return out


def check_alike(shards: Sequence[ShardRun]) -> None:
    """Every shard asked alike: the same grader and prompt code, the same settings (but
    PER_SHARD), models and whole budgets, the same data (each variant's build), and no
    shard resumed under other settings or code than it began with."""
    first = shards[0]
    for s in shards:
        forced = [r for r in s.meta.get("resumes") or [] if r.get("forced") and r.get("differs")]
        if forced:
            what = ", ".join(sorted(forced[0]["differs"]))
            raise MergeRefused(f"{s.name} was resumed with --force-resume under another {what} "
                               "than it began with: its items were not all asked alike")
    base_settings, base_data = _settings(first.meta), _datasets(first)
    for s in shards[1:]:
        for key, label in CODE:
            if first.meta.get(key) != s.meta.get(key):
                raise MergeRefused(f"{s.name} differs from {first.name} in {label}: "
                                   f"{str(first.meta.get(key))[:12]} there, "
                                   f"{str(s.meta.get(key))[:12]} here")
        mine = _settings(s.meta)
        for name in sorted((set(base_settings) | set(mine)) - PER_SHARD - set(ANY_SHARD)):
            if base_settings.get(name) != mine.get(name):
                label = "models" if name == "models" else f"setting '{name}'"
                raise MergeRefused(f"{s.name} differs from {first.name} in {label}: "
                                   f"{_shown(base_settings.get(name))} there, "
                                   f"{_shown(mine.get(name))} here")
        if first.cut["budget"] != s.cut["budget"]:
            raise MergeRefused(f"{s.name} was given other whole-run budgets than {first.name}: "
                               f"{_shown(first.cut['budget'])} there, "
                               f"{_shown(s.cut['budget'])} here")
        for variant, data in _datasets(s).items():
            if variant in base_data and base_data[variant] != data:
                raise MergeRefused(f"{s.name} differs from {first.name} in the data of "
                                   f"{variant}: {_shown(base_data[variant])} there, "
                                   f"{_shown(data)} here")
            base_data.setdefault(variant, data)


def check_items(shards: Sequence[ShardRun]) -> None:
    """Every item of the selection dealt to one shard and banked by that one only."""
    selection = list(shards[0].cut["selection"])
    chosen = set(selection)
    owner: dict[str, ShardRun] = {}
    for s in shards:
        expected = s.meta.get("expected")
        if not isinstance(expected, list):
            raise MergeRefused(f"{s.name}: meta.json has no 'expected' (the run never began)")
        for nodeid in expected:
            if nodeid not in chosen:
                raise MergeRefused(f"{s.name}: item {nodeid} is not in the selection the "
                                   "shards were cut from")
            if nodeid in owner:
                raise MergeRefused(f"item {nodeid} is on two shards: {owner[nodeid].name} and "
                                   f"{s.name}")
            owner[nodeid] = s
    banked_by: dict[str, ShardRun] = {}
    for s in shards:
        for rec in s.records:
            nodeid = str(rec.get("nodeid"))
            if nodeid in banked_by:
                raise MergeRefused(f"item {nodeid} was banked by two shards: "
                                   f"{banked_by[nodeid].name} and {s.name}")
            banked_by[nodeid] = s
            if owner.get(nodeid) is not s:
                raise MergeRefused(f"{s.name} banked item {nodeid}, which is not one of its "
                                   "items")
    for nodeid in selection:
        if nodeid not in owner:
            raise MergeRefused(f"item {nodeid} of the selection is on no shard")


def check_whole(shards: Sequence[ShardRun], allow_incomplete: bool) -> None:
    """A shard that is not complete is refused, unless `allow_incomplete`."""
    if allow_incomplete:
        return
    for s in shards:
        if s.summary.status != "complete":
            raise MergeRefused(f"{s.name} is {s.summary.status.upper()}: {s.summary.reason}; "
                               "finish it (pytest --resume), or pass --allow-incomplete to "
                               "merge what it banked (the merged run lists what is missing)")


# --- the merged run ----------------------------------------------------------------------------

@dataclass
class Merged:
    """What a merge wrote: the folder, the report, the items missing, the spending."""

    folder: Path
    report: dict[str, Any]
    missing: list[dict[str, str]]
    spent: float | None
    cap: float | None
    shards: list[ShardRun]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def merged_settings(shards: Sequence[ShardRun], run_id: str) -> Settings:
    """The merged run's settings: the shards' (they agree but for PER_SHARD and ANY_SHARD),
    as the first recorded them, named `run_id`, with the whole run's budgets, and each of
    ANY_SHARD when any shard had it."""
    first = shards[0]
    stored = dict(first.meta.get("settings") or {})
    stored.update(run_id=run_id, resume=False, force_resume=False)
    stored.update({name: any(bool((s.meta.get("settings") or {}).get(name)) for s in shards)
                   for name in ANY_SHARD})
    stored.update({k: v for k, v in first.cut["budget"].items() if k in SPLIT_LIMITS})
    return Settings.from_dict(stored)


def _prompts(shards: Sequence[ShardRun]) -> dict[str, Path]:
    """Every prompt file of the shards, by name; one name holding two texts is refused (a
    prompt file is named by its text's SHA-256)."""
    out: dict[str, Path] = {}
    for s in shards:
        folder = s.folder / "prompts"
        for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
            if path.name in out and out[path.name].read_bytes() != path.read_bytes():
                raise MergeRefused(f"{s.name}: prompts/{path.name} differs from "
                                   f"{out[path.name]}")
            out.setdefault(path.name, path)
    return out


def _missing(shards: Sequence[ShardRun], banked: Mapping[str, BankedRecord],
             skipped: set[str]) -> list[dict[str, str]]:
    """The items of the selection neither banked nor skipped unasked, each with why (its
    shard's report's reason where it gave one)."""
    owner = {n: s for s in shards for n in s.meta["expected"]}
    out = []
    for nodeid in shards[0].cut["selection"]:
        if nodeid in banked or nodeid in skipped:
            continue
        s = owner[nodeid]
        said = {str(m.get("nodeid")): str(m.get("why")) for m in
                (s.report or {}).get("missing") or []}
        out.append({"nodeid": nodeid, "why": said.get(
            nodeid, f"not banked by {s.name}, which is {s.summary.status.upper()}")})
    return sorted(out, key=lambda m: m["nodeid"])


def _shard_entry(s: ShardRun) -> dict[str, Any]:
    """meta.json's record of one shard of a merged run."""
    return {"index": s.index, "count": s.cut["count"], "run_id": s.meta.get("run_id"),
            "folder": str(s.folder), "status": s.summary.status, "reason": s.summary.reason,
            "items": len(s.records), "expected": len(s.meta["expected"]),
            "started": s.meta.get("started"), "finished": s.meta.get("finished"),
            "commit": s.meta.get("commit"), "dirty": s.meta.get("dirty"),
            "packages": s.meta.get("packages"), "resumes": len(s.meta.get("resumes") or []),
            "spent": s.spent, "share": s.cut.get("share")}


def merged_meta(shards: Sequence[ShardRun], settings: Settings,
                unasked: list[dict[str, Any]], spent: float | None) -> dict[str, Any]:
    """The merged run's meta.json (but its fingerprint): the first shard's, for the whole
    selection, with each shard's record and the spending against the whole run's budgets."""
    first = shards[0]
    meta = {k: v for k, v in first.meta.items() if k not in ("resumes", "first_settings",
                                                              "shard")}
    meta.update({
        "run_id": settings.plan.run_id, "settings": settings.to_dict(),
        "started": min(str(s.meta.get("started") or "") for s in shards) or None,
        "finished": max(str(s.meta.get("finished") or "") for s in shards) or None,
        "merged": _now(), "expected": list(first.cut["selection"]), "unasked": unasked,
        "halted": None, "interrupted": None,
        "clients": sorted({c for s in shards for c in s.meta.get("clients") or []}),
        "shards": [_shard_entry(s) for s in shards],
        "selection_sha256": first.cut["selection_sha256"],
        "budget": {**first.cut["budget"], "spent": spent},
    })
    return meta


def merge(runs: Sequence[str | Path], run_id: str, *, reports: str | Path = "reports",
          allow_incomplete: bool = False, registry: Registry | None = None) -> Merged:
    """Merge the shards' run folders `runs` into `reports/<run_id>`; MergeRefused (nothing
    written) when they must not be merged. The folder is written whole under another name,
    then renamed."""
    from pytest_kgbench.analysis.report import build_report

    if not runs:
        raise MergeRefused("no shard named: give the run folder of every shard")
    out = Path(reports) / run_id
    if find_run(Path("."), str(reports), run_id) is not None or out.exists():
        raise MergeRefused(f"--run-id: run '{run_id}' exists ({out}): name a fresh run id")
    shards = [read_shard(r, reports) for r in runs]
    check_cut(shards)
    shards.sort(key=lambda s: s.index)
    check_alike(shards)
    check_items(shards)
    check_whole(shards, allow_incomplete)
    prompts = _prompts(shards)
    by_id = {str(r["nodeid"]): r for s in shards for r in s.records}
    unasked = sorted((u for s in shards for u in s.meta.get("unasked") or []),
                     key=lambda u: str(u.get("nodeid")))
    missing = _missing(shards, by_id, {str(u.get("nodeid")) for u in unasked})
    settings = merged_settings(shards, run_id)
    records = [by_id[n] for n in sorted(by_id)]
    spent = (sum(s.spent or 0.0 for s in shards)
             if any(s.spent is not None for s in shards) else None)
    meta = merged_meta(shards, settings, unasked, spent)
    report = build_report(records, settings, missing=missing, meta=meta, registry=registry)
    report["halted"] = None
    report["interrupted"] = None
    meta["fingerprint"] = report["fingerprint"]
    ordered = [by_id[n] for n in shards[0].cut["selection"] if n in by_id]
    _write_run(out, meta, report, ordered, prompts, spent, registry)
    return Merged(out, report, missing, spent, shards[0].cut["budget"].get("max_cost"),
                  shards)


def _write_run(out: Path, meta: Mapping[str, Any], report: Mapping[str, Any],
               records: Sequence[BankedRecord], prompts: Mapping[str, Path],
               spent: float | None, registry: Registry | None) -> None:
    """The merged run folder, written under a temporary name beside `out`, then renamed."""
    from pytest_kgbench.analysis.html_report import render_html
    from pytest_kgbench.analysis.report import render_markdown

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "prompts").mkdir(parents=True)
    for name, path in prompts.items():
        write_atomic(tmp / "prompts" / name, path.read_text(encoding="utf-8"))
    write_atomic(tmp / "answers.jsonl", "".join(record_line(r).decode("utf-8") for r in records))
    if spent is not None:
        _write_json(tmp / LEDGER, {"spent": spent, "reserved": {},
                                   "shards": {str(s["index"]): s["spent"]
                                              for s in meta["shards"]}})
    by_node = sorted(records, key=lambda r: str(r["nodeid"]))
    _write_json(tmp / "questions.json", questions_json(by_node))
    _write_json(tmp / "grades.json", grades_json(by_node))
    _write_json(tmp / "report.json", report)
    write_atomic(tmp / "report.md", render_markdown(report, registry) + "\n".join(
        shard_lines(meta)) + "\n")
    write_atomic(tmp / "report.html", render_html(report, list(by_node)))
    _write_json(tmp / "meta.json", meta)
    tmp.rename(out)


def spend_line(spent: float | None, cap: float | None, report: Mapping[str, Any]) -> str:
    """The whole run's spending against its cap: the shards' ledgers when they kept one,
    else the report's cost at list prices."""
    if spent is None:
        arms = (report.get("conditions") or {}).values()
        listed = sum(((c.get("cost_usd") or {}).get("billed") or 0.0) for c in arms)
        spent_text = f"${listed:.4f} at list prices"
    else:
        spent_text = f"${spent:.4f} spent"
    return spent_text + (f" of the run's --max-cost ${cap:g}" if cap is not None else
                         " (no --max-cost)")


def shard_lines(meta: Mapping[str, Any]) -> list[str]:
    """report.md's section on the shards a merged run was joined from."""
    shards = meta.get("shards") or []
    budget = meta.get("budget") or {}
    lines = ["", "## Shards", "",
             f"Merged from {len(shards)} shard(s) on {meta.get('merged')}, cut from "
             f"{len(meta.get('expected') or [])} selected items (selection "
             f"{str(meta.get('selection_sha256'))[:12]}).", "",
             "| shard | run | status | items | started | commit | spent |",
             "|---|---|---|---|---|---|---|"]
    for s in shards:
        spent = "—" if s.get("spent") is None else f"${s['spent']:.4f}"
        lines.append(f"| {s['index']}/{s['count']} | {s['run_id']} | {s['status']} | "
                     f"{s['items']}/{s['expected']} | {s.get('started') or '—'} | "
                     f"{str(s.get('commit') or '—')[:12]} | {spent} |")
    if budget.get("max_cost") is not None:
        total = float(budget.get("spent") or 0.0)
        lines += ["", f"Spent ${total:.4f} of the run's --max-cost "
                  f"${budget['max_cost']:g}, each shard kept to its share."]
    return lines
