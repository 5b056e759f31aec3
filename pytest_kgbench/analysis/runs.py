"""Runs as data: the run folders of a reports folder listed (`kgbench runs`), one run found by
its id or path (`kgbench show`), loaded as plain records (`pytest_kgbench.load_run`) and
written one row per item (`kgbench export`, through DuckDB). docs/runs.md: Runs as data.

Pure module: no pytest. It only reads a run folder (meta.json, answers.jsonl, report.json);
DuckDB and pandas are imported only by the functions that need them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_kgbench.analysis.report import TIER_ORDER, pct
from pytest_kgbench.core.errors import KgbenchError
from pytest_kgbench.core.record import gaps_text, latest, read_answers, run_gaps
from pytest_kgbench.core.settings import find_run

STATUSES = ("complete", "halted", "interrupted", "incomplete", "unreadable")
FORMATS = ("csv", "parquet")


@dataclass(frozen=True)
class RunSummary:
    """One line of `kgbench runs`: who was asked what, how far it got, and its headline."""

    id: str
    path: str
    started: str | None
    finished: str | None
    agent: str | None
    models: tuple[str, ...]
    conditions: tuple[str, ...]
    variants: tuple[str, ...]
    items: int                  # items banked (answers.jsonl)
    expected: int | None        # items the run is meant to have (None when it cannot say)
    status: str                 # STATUSES
    reason: str | None          # why it is not complete
    headline: str               # the leading tier's accuracy per arm ("" without a report)
    missing: tuple[str, ...] = ()  # the items it was meant to have and did not bank

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Run:
    """One stored run as plain records: `items` one flat dict per banked item (the rows
    `kgbench export` writes), `records` the items as banked (answers.jsonl), `comparisons` the
    paired comparisons of report.json, `conditions` its per-arm summaries."""

    id: str
    path: Path
    summary: RunSummary
    meta: dict[str, Any]
    report: dict[str, Any] | None
    records: list[dict[str, Any]]
    missing: list[dict[str, str]] = field(default_factory=list)  # not banked, with why
    items: list[dict[str, Any]] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_pandas(self) -> Any:
        """The items as a pandas DataFrame, one row per item (needs pandas installed)."""
        return _frame(self.items, [name for name, _ in item_columns(self.items)])

    def comparisons_frame(self) -> Any:
        """The comparisons as a pandas DataFrame, one row per comparison."""
        return _frame([{**c, "ci95_low": (c.get("ci95") or [None, None])[0],
                        "ci95_high": (c.get("ci95") or [None, None])[1]}
                       for c in self.comparisons], None)


def _frame(rows: list[dict[str, Any]], columns: list[str] | None) -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise KgbenchError("pandas is not installed (pip install pandas): the same rows are "
                           "in Run.items and Run.comparisons as plain dicts") from exc
    return pandas.DataFrame.from_records(rows, columns=columns)


# --- finding and reading runs ----------------------------------------------------------------

def is_run(folder: Path) -> bool:
    return (folder / "meta.json").is_file() or (folder / "answers.jsonl").is_file()


def resolve(run: str | Path, reports: str | Path = "reports") -> Path:
    """A run folder named by its path or by its id under `reports`."""
    folder = find_run(Path("."), str(reports), str(run))
    if folder is None:
        raise KgbenchError(f"no run '{run}': neither a run folder nor a run id under "
                           f"{Path(reports).resolve()} (kgbench runs lists them)")
    return folder


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KgbenchError(f"{path}: cannot be read as JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise KgbenchError(f"{path}: not a JSON object")
    return value


def headline(report: Mapping[str, Any] | None) -> str:
    """Each arm's accuracy in the run's leading tier (L3 first, never pooled across tiers)."""
    conds: Mapping[str, Any] = (report or {}).get("conditions") or {}
    for tier in TIER_ORDER:
        cells = [f"{arm} {pct(c['by_tier'][tier].get('accuracy'))}" for arm, c in conds.items()
                 if tier in (c.get("by_tier") or {})]
        if cells:
            return f"{tier}: " + ", ".join(cells)
    return ""


def summarise(folder: Path) -> RunSummary:
    """The summary of one run folder; a folder whose files cannot be read is `unreadable`,
    with the file and the reason, so one broken run never hides the others."""
    try:
        meta = _read_json(folder / "meta.json") or {}
        report = _read_json(folder / "report.json")
    except KgbenchError as exc:
        return RunSummary(id=folder.name, path=str(folder), started=None, finished=None,
                          agent=None, models=(), conditions=(), variants=(), items=0,
                          expected=None, status="unreadable", reason=str(exc), headline="")
    return _summary(folder, meta, report, latest(read_answers(folder / "answers.jsonl")))


def _summary(folder: Path, meta: Mapping[str, Any], report: Mapping[str, Any] | None,
             records: list[Any]) -> RunSummary:
    """A run's status from what its folder holds: the items it was meant to have (meta.json,
    written when it started) against those answers.jsonl holds, whatever its report says (a
    line lost since the report makes it incomplete too)."""
    settings = (report or {}).get("settings") or meta.get("settings") or {}
    halted = (report or {}).get("halted") or meta.get("halted")
    interrupted = (report or {}).get("interrupted") or meta.get("interrupted")
    banked = len(records)
    gaps = run_gaps(meta, records, report)
    resume = f"pytest --resume {meta.get('run_id') or folder.name} continues it"
    expected = (len(meta["expected"]) if isinstance(meta.get("expected"), list) else
                (report or {}).get("counts", {}).get("expected"))
    if report is None:
        status, reason = "incomplete", "no report: the session did not finish (killed?)"
        reason += f"; {gaps_text(gaps, expected)}" if gaps else ""
        reason += f"; {resume}"
    elif halted:
        status, reason = "halted", str(halted)
    elif gaps and interrupted:
        status, reason = "interrupted", f"{interrupted}; {gaps_text(gaps, expected)}; {resume}"
    elif gaps or not report.get("complete", True):
        status = "incomplete"
        reason = gaps_text(gaps, expected) if gaps else \
            f"{len(report.get('missing') or [])} item(s) never reported"
    else:
        status, reason = "complete", None
    return RunSummary(
        id=str((report or {}).get("run_id") or meta.get("run_id") or folder.name),
        path=str(folder), started=meta.get("started") or (report or {}).get("started"),
        finished=meta.get("finished") or (report or {}).get("finished"),
        agent=settings.get("agent") or meta.get("agent"),
        models=tuple(map(str, settings.get("models") or meta.get("models") or ())),
        conditions=tuple(map(str, settings.get("condition_ids") or ())),
        variants=tuple(map(str, settings.get("variants") or ())),
        items=banked, expected=expected, status=status, reason=reason,
        headline=headline(report), missing=tuple(g["nodeid"] for g in gaps or ()))


def list_runs(reports: str | Path) -> list[RunSummary]:
    """Every run folder directly under `reports`, oldest first."""
    root = Path(reports)
    if not root.is_dir():
        raise KgbenchError(f"no reports folder {root.resolve()} (--reports names another)")
    found = [summarise(f) for f in root.iterdir() if f.is_dir() and is_run(f)]
    return sorted(found, key=lambda s: (s.started or "", s.id))


def load_run(run: str | Path, reports: str | Path = "reports") -> Run:
    """One stored run, given as a folder or a run id under `reports`, as plain records."""
    folder = resolve(run, reports)
    meta = _read_json(folder / "meta.json") or {}
    report = _read_json(folder / "report.json")
    records: list[dict[str, Any]] = [dict(r) for r in
                                     latest(read_answers(folder / "answers.jsonl"))]
    summary = _summary(folder, meta, report, records)
    return Run(id=summary.id, path=folder, summary=summary, meta=meta, report=report,
               records=records, missing=run_gaps(meta, records, report) or [],
               items=[item_row(r, summary.id) for r in records],
               comparisons=[dict(c) for c in (report or {}).get("comparisons") or []],
               conditions=dict((report or {}).get("conditions") or {}))


# --- one row per item -------------------------------------------------------------------------

_PLAIN = ("nodeid", "pack", "variant", "question", "tier", "persona", "expect", "condition",
          "condition_label", "mode", "model", "agent", "agent_kind", "simulated", "repeat",
          "ask", "grade", "score", "letter", "status", "behaviour", "reason", "outcome",
          "elapsed_s", "duration_s", "started", "question_sha256")
_TOKENS = ("input", "output", "cache_read", "cache_write")


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True,
                                                 default=str)


def item_row(record: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """One banked record as a flat row: where it was asked, the grade, the answer's text and
    block, its queries and tokens, the dataset and prompt hashes, and each scalar metric as a
    column `metric_<name>` (every metric also whole, as JSON, in `metrics`)."""
    answer = record.get("answer") or {}
    tokens = answer.get("tokens") or {}
    dataset = record.get("dataset") or {}
    metrics = record.get("metrics") or {}
    row: dict[str, Any] = {"run_id": run_id, **{k: record.get(k) for k in _PLAIN}}
    row.update({
        "answer_text": answer.get("text"), "answer_block": _json(answer.get("block")),
        "answer_error": answer.get("error"), "key": _json(record.get("key")),
        "queries": len(answer.get("queries") or []), "rounds": answer.get("rounds"),
        "latency_s": answer.get("latency_s"),
        **{f"{name}_tokens": tokens.get(name) for name in _TOKENS},
        "dataset_seed": dataset.get("seed"), "dataset_build": dataset.get("build"),
        "prompt_sha256": (record.get("prompt") or {}).get("sha256"),
        "metrics": _json(metrics) if metrics else None,
    })
    for name, value in sorted(metrics.items()):
        if value is None or isinstance(value, (bool, int, float, str)):
            row[f"metric_{name}"] = value
    return row


def _sql_type(values: Iterable[Any]) -> str:
    seen = [v for v in values if v is not None]
    if seen and all(isinstance(v, bool) for v in seen):
        return "BOOLEAN"
    if seen and all(isinstance(v, int) and not isinstance(v, bool) for v in seen):
        return "BIGINT"
    if seen and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
        return "DOUBLE"
    return "VARCHAR"


FIXED_TYPES = {"simulated": "BOOLEAN", "repeat": "BIGINT", "score": "DOUBLE",
               "elapsed_s": "DOUBLE", "duration_s": "DOUBLE", "latency_s": "DOUBLE",
               "queries": "BIGINT", "rounds": "BIGINT", "dataset_seed": "BIGINT",
               **{f"{name}_tokens": "BIGINT" for name in _TOKENS}}
"""The typed columns of every export; the other fixed columns are text, and each metric
column is typed by the values it holds."""


def item_columns(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The export's columns and their SQL types: the fixed columns (an empty run has them
    too), then every metric column in first-seen order."""
    names: dict[str, None] = dict.fromkeys(item_row({}, ""))
    for row in rows:
        names.update(dict.fromkeys(row))
    return [(name, FIXED_TYPES.get(name) or (_sql_type(row.get(name) for row in rows)
                                              if name.startswith("metric_") else "VARCHAR"))
            for name in names]


def _cell(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if sql_type == "VARCHAR" and not isinstance(value, str):
        return _json(value)
    return value


def export(run: Run, out: Path, fmt: str) -> int:
    """Write the run's items, one row per item, as CSV (with a header) or Parquet, through
    DuckDB; the number of rows written."""
    import duckdb

    if fmt not in FORMATS:
        raise KgbenchError(f"--format: '{fmt}' is not one of {', '.join(FORMATS)}")
    columns = item_columns(run.items)
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE items (" + ", ".join(f'"{n}" {t}' for n, t in columns) + ")")
        marks = "(" + ", ".join("?" for _ in columns) + ")"
        batch = 200
        for start in range(0, len(run.items), batch):
            chunk = run.items[start:start + batch]
            con.execute(f"INSERT INTO items VALUES {', '.join(marks for _ in chunk)}",
                        [_cell(row.get(n), t) for row in chunk for n, t in columns])
        target = str(out).replace("'", "''")
        options = "FORMAT parquet" if fmt == "parquet" else "FORMAT csv, HEADER true"
        order = "pack, variant, question, condition, model, repeat, nodeid"
        con.execute(f"COPY (SELECT * FROM items ORDER BY {order}) TO '{target}' ({options})")
    except duckdb.Error as exc:
        raise KgbenchError(f"cannot export run {run.id} to {out}: {exc}") from exc
    finally:
        con.close()
    return len(run.items)


# --- what the commands print ------------------------------------------------------------------

def _when(stamp: str | None) -> str:
    return (stamp or "—").replace("T", " ")[:16]


def runs_lines(summaries: Sequence[RunSummary]) -> list[str]:
    """`kgbench runs`: one line per run, oldest first, with a header."""
    header = ["id", "started (UTC)", "agent", "models", "conditions", "items", "status",
              "headline"]
    rows = [[s.id, _when(s.started), s.agent or "—", ",".join(s.models) or "—",
             ",".join(s.conditions) or "—",
             f"{s.items}/{s.expected}" if s.expected is not None else f"{s.items}/?",
             s.status.upper() if s.status != "complete" else s.status,
             s.headline if s.status == "complete" else
             "; ".join(x for x in (s.headline, s.reason or "") if x)]
            for s in summaries]
    if not rows:
        return ["no runs"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header[:-1])]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1]
            for r in [header, *rows]]


def show_lines(run: Run) -> list[str]:
    """`kgbench show`: the run's status line, then its headline table (report.terminal_lines)."""
    from pytest_kgbench.analysis.report import terminal_lines

    s = run.summary
    expected = "" if s.expected is None else f" of {s.expected}"
    status = "" if s.status == "complete" else f" — {s.status.upper()}: {s.reason}"
    out = [f"run {s.id}: {s.items}{expected} items banked{status}"]
    out += [f"  not banked: {g['nodeid']} ({g['why']})" for g in run.missing[:SHOWN]]
    if len(run.missing) > SHOWN:
        out.append(f"  … and {len(run.missing) - SHOWN} more (pytest_kgbench.load_run(...)"
                   ".missing lists them all)")
    if run.report is not None:
        out += terminal_lines(run.report)
    return out


SHOWN = 20  # missing items `kgbench show` names one per line
