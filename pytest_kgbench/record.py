"""The item record: what one item banks in answers.jsonl, typed once here and read by the run
folder, the report, rescore, replay and compare. It crosses from an xdist worker to the
controller as one JSON string (builtin types only).

Pure module: no pytest.
"""

from __future__ import annotations

import json
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


def read_answers(path: Path) -> list[BankedRecord]:
    """Every banked record of an answers.jsonl (a torn last line is skipped, not fatal)."""
    if not path.is_file():
        return []
    out: list[BankedRecord] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


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
