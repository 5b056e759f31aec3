"""The item record: what one item banks in answers.jsonl, typed once here and read by the run
folder, the report, rescore, replay and compare. It crosses from an xdist worker to the
controller as one JSON string (builtin types only).

Pure module: no pytest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict


class DatasetRef(TypedDict):
    """The built variant an item was asked about."""

    seed: int
    build: str
    pack_sha256: str | None


class PromptRef(TypedDict, total=False):
    """The item's prompt: hashes, its own question block, and its context — the full text on
    the way to the controller, then the file under prompts/ it was written to once."""

    sha256: str
    context_sha256: str
    question: str
    chars: int          # the whole prompt's length: system, context and question
    context: str
    context_file: str


class ItemRecord(TypedDict):
    """One item as it ran: what was asked, of whom, the answer, the key and the grade."""

    question: str
    tier: str
    pack: str
    variant: str
    condition: str
    condition_label: str
    mode: str
    model: str
    agent: str
    agent_kind: str        # registry.AGENT_KINDS
    simulated: bool        # the agent drew its answers (synthetic)
    repeat: int
    persona: str
    expect: str
    ask: str               # apart | together
    question_sha256: str
    question_file: str
    dataset: DatasetRef
    prompt: PromptRef
    key: dict[str, Any] | None
    answer: dict[str, Any]  # answers.Answer.to_dict()
    grade: str
    score: float | None
    status: str
    behaviour: str
    letter: str
    reason: str
    fields: list[dict[str, Any]]
    metrics: dict[str, Any]
    sent: dict[str, Any]    # what the model agent sent and was served (agents.Task.sent)
    started: str
    elapsed_s: float


class BankedRecord(ItemRecord, total=False):
    """A record as the controller banked it: with its node id and pytest's outcome."""

    nodeid: str
    outcome: str
    duration_s: float


def to_json(record: ItemRecord) -> str:
    """The record as the one JSON string that crosses processes (raises on a non-builtin)."""
    return json.dumps(record)


def record_line(record: Mapping[str, Any]) -> bytes:
    """A banked record as its answers.jsonl line: its node id first (a line a kill cuts short
    still names its item), then every other key sorted."""
    rest = {k: v for k, v in record.items() if k != "nodeid"}
    body = json.dumps(rest, ensure_ascii=False, sort_keys=True)
    head = json.dumps({"nodeid": record.get("nodeid")}, ensure_ascii=False)[:-1]
    return (head + (", " + body[1:] if rest else "}") + "\n").encode("utf-8")


class Unreadable(TypedDict):
    """A line of answers.jsonl that is not a record (cut short by a kill, or damaged)."""

    line: int            # its number, from 1
    chars: int           # its length
    nodeid: str | None   # the item it names, when the part left still names it
    last: bool           # the file's last line, without its newline (a torn write)


_NODEID = re.compile(r'"nodeid": "((?:[^"\\]|\\.)*)"')


def scan_answers(path: Path) -> tuple[list[BankedRecord], list[Unreadable]]:
    """Every banked record of an answers.jsonl, and the lines that are not records (each with
    the item it names, where the part of it left says)."""
    if not path.is_file():
        return [], []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    out: list[BankedRecord] = []
    bad: list[Unreadable] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            found = _NODEID.search(line)
            nodeid = json.loads(f'"{found.group(1)}"') if found else None
            bad.append(Unreadable(line=number, chars=len(line), nodeid=nodeid,
                                  last=number == len(lines)))
            continue
        out.append(record)  # type: ignore[arg-type]
    return out, bad


def read_answers(path: Path) -> list[BankedRecord]:
    """Every banked record of an answers.jsonl (a line that is not a record is passed over:
    `scan_answers` names it)."""
    return scan_answers(path)[0]


def unreadable_text(bad: Unreadable, path: Path) -> str:
    """One line saying which item a line that is not a record held (or could not say)."""
    what = (f"item {bad['nodeid']}" if bad["nodeid"] else
            "an item whose node id the part left does not hold")
    how = "cut short (a torn write)" if bad["last"] else "not a record"
    return (f"{path.name} line {bad['line']} is unreadable ({how}, {bad['chars']} characters): "
            f"{what} was never banked")


def latest(records: Iterable[BankedRecord]) -> list[BankedRecord]:
    """One record per item, the last banked (an item asked again after its question was
    edited is banked twice), in the order first banked."""
    out: dict[str, BankedRecord] = {}
    for rec in records:
        out[str(rec.get("nodeid"))] = rec
    return list(out.values())


NEVER_BANKED = "not in answers.jsonl: never banked, or its line was lost"


def run_gaps(meta: Mapping[str, Any], records: Iterable[Mapping[str, Any]],
             report: Mapping[str, Any] | None = None) -> list[dict[str, str]] | None:
    """The items a run was meant to have (meta.json's `expected`, written when it started)
    that it did not bank (answers.jsonl) nor skip unasked (meta.json's `unasked`), each with
    why (the report's reason where it gave one). None for a run that never recorded what it
    expected (written before it did, or killed before its first item): then only its report
    can say (`report["missing"]`)."""
    expected = meta.get("expected")
    if not isinstance(expected, list):
        if report is None:
            return None
        return [dict(m) for m in report.get("missing") or []]
    banked = {str(r.get("nodeid")) for r in records}
    unasked = {str(u.get("nodeid")) for u in meta.get("unasked") or [] if isinstance(u, dict)}
    said = {str(m.get("nodeid")): str(m.get("why")) for m in (report or {}).get("missing") or []}
    return [{"nodeid": n, "why": said.get(n, NEVER_BANKED)} for n in expected
            if n not in banked and n not in unasked]


def gaps_text(gaps: list[dict[str, str]], expected: int | None, shown: int = 5) -> str:
    """The missing items of a run in one line: how many of how many, the first few named."""
    names = ", ".join(g["nodeid"] for g in gaps[:shown])
    more = f" and {len(gaps) - shown} more" if len(gaps) > shown else ""
    of = f" of {expected}" if expected is not None else ""
    return f"{len(gaps)}{of} item(s) not banked: {names}{more}"


def question_key(rec: ItemRecord) -> str:
    """The unit of the statistics: one question of one pack. A question asked on two variants
    is one question (its score the mean over variants and repeats), never two independent
    pairs in a comparison."""
    return f"{rec['pack']}/{rec['question']}"


def questions_json(records: Iterable[ItemRecord]) -> list[dict[str, Any]]:
    """The questions as asked, with their keys per variant."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in records:
        k = (rec["pack"], rec["variant"], rec["question"])
        if k not in out:
            out[k] = {"question": rec["question"], "pack": rec["pack"], "variant": rec["variant"],
                      "tier": rec["tier"], "expect": rec["expect"],
                      "sha256": rec["question_sha256"], "key": rec["key"],
                      "text": rec["prompt"].get("question")}
    return [out[k] for k in sorted(out)]


GRADE_FIELDS = ("nodeid", "question", "pack", "variant", "condition", "model", "repeat", "grade",
                "score", "behaviour", "letter", "reason", "fields")


def grades_json(records: Iterable[BankedRecord]) -> list[dict[str, Any]]:
    """The grade of every item (grades.json)."""
    return [{f: rec.get(f) for f in GRADE_FIELDS} for rec in records]


JUNIT_FIELDS = ("grade", "score", "letter", "tier", "pack", "variant", "condition", "model",
                "agent", "repeat", "behaviour")


def junit_properties(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The item's grade, where it was asked and its metrics, as `kgbench.*` properties for
    --junitxml (CI dashboards that read JUnit show them)."""
    out = [(f"kgbench.{name}", str(record[name])) for name in JUNIT_FIELDS
           if record.get(name) is not None]
    for name, value in sorted((record.get("metrics") or {}).items()):
        if isinstance(value, (bool, int, float)) or value is None:
            out.append((f"kgbench.metric.{name}", "" if value is None else str(value)))
    return out
