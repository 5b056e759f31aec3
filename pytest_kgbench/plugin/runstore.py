"""The run folder, written by the controller only (docs/runs.md: Reading a run).

`RunStore` is registered as a plugin on the controller (serial session or xdist master). It
writes nothing until the session has collected its items and built what they need (`begin`):
a run that fails before then leaves no folder. `begin` writes meta.json with the items the run
is meant to have (`expected`) and the selection that chose them, which every reader of the run
compares with what it finds. It banks each item's record to `answers.jsonl` the moment its
report arrives (so a crash loses at most the item in flight), and at session end writes
questions.json, grades.json, report.json and report.md. A run is complete only when every
expected item was banked; otherwise the report lists what is missing and the run fails (exit 2
when it was interrupted, 3 when the harness broke).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from pytest_kgbench.core.files import write_atomic
from pytest_kgbench.core.fingerprints import code_fingerprints, grader_files
from pytest_kgbench.core.interrupt import INTERRUPTED
from pytest_kgbench.core.record import (
    BankedRecord,
    Unreadable,
    grades_json,
    latest,
    questions_json,
    record_line,
    scan_answers,
    unreadable_text,
)
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings, resume_differences, stored_meta
from pytest_kgbench.engines.stores import engine_labels

RECORD_PROPERTY = "kgbench"
LETTER_PROPERTY = "kgbench_letter"
BROKEN_PROPERTY = "kgbench_broken"
NOT_BANKED_PROPERTY = "kgbench_not_banked"  # why an item's answer was dropped: it is missing
HARNESS_BROKEN = 3  # the exit status of a run the harness could not finish
PACKAGES = ("pytest", "pytest-xdist", "pytest-rerunfailures", "rdflib", "duckdb", "pyshacl",
            "anthropic", "openai", "google-genai", "hypothesis", "scipy", "numpy", "pyyaml",
            "pytest-kgbench")
NOT_ASKED = "not asked: the run halted"
NOT_ASKED_INTERRUPTED = f"not asked: the run was {INTERRUPTED}"
FSYNC_EVERY = 0.5  # seconds between flushes of answers.jsonl under --concurrency


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def git_commit(root: str) -> dict[str, Any]:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if head.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def resumed_meta(old: dict[str, Any], settings: Settings, started: str,
                 registry: Registry | None = None) -> dict[str, Any]:
    """What a resumed run's meta.json keeps of the run it continues: when it began, the
    settings it was first asked under, and one entry per resume saying what differed (only
    with --force-resume can anything differ) and which items were asked again."""
    differs = resume_differences(old, settings, registry)
    return {"started": old.get("started") or started,
            "first_settings": old.get("first_settings") or old.get("settings"),
            "resumes": [*(old.get("resumes") or []),
                        {"started": started, "forced": settings.plan.force_resume,
                         "differs": differs, "reasked": []}]}


class RunStore:
    """Controller-side writer of one run folder; built from logreports only."""

    def __init__(self, settings: Settings, registry: Registry | None = None) -> None:
        self.settings = settings
        self.registry = registry
        self.dir = settings.run_dir
        self.answers_path = self.dir / "answers.jsonl"
        # --concurrency > 1 banks many items a second: the line is still written whole the
        # moment its item ends (a killed process loses nothing banked), but flushed to disk
        # at most every FSYNC_EVERY seconds and at the end (a power cut may lose the last
        # fraction of a second); one item at a time, each line goes to disk at once, as ever
        self.fsync_every = FSYNC_EVERY if settings.limits.concurrency > 1 else 0.0
        self._synced = 0.0
        self._fd: int | None = None  # answers.jsonl, opened at the first line, closed at the end
        self._prompts: set[Path] = set()  # prompt files known to be written
        self.records: dict[str, BankedRecord] = {}
        self.unreadable: list[Unreadable] = []  # lines of a resumed run's answers.jsonl
        old: dict[str, Any] = {}
        if settings.plan.resume:
            found, self.unreadable = scan_answers(self.answers_path)
            for rec in latest(found):
                self.records[rec["nodeid"]] = rec
            old = stored_meta(self.dir)
        self.expected: set[str] = set()  # the items this session selected
        self.planned: list[str] | None = None  # the items the run is meant to have (begun)
        self.begun = False  # the folder is made once the items are collected and built
        self.errors: dict[str, str] = {}
        self.unasked: dict[str, str] = {}  # nodeid -> why it was skipped unasked
        self.halted: str | None = None  # why the harness broke, when it did
        self.interrupted: str | None = None  # Ctrl-C stopped the session, when it did
        self.started = _now()
        self.report: dict[str, Any] | None = None
        self.nothing_left = False  # a resumed run whose selected items were all banked
        self.shard: dict[str, Any] | None = None  # a fresh shard's cut (run/shards.py)
        self.meta: dict[str, Any] = {
            "run_id": settings.plan.run_id, "started": self.started, "finished": None,
            "settings": settings.to_dict(), **git_commit(settings.paths.rootdir),
            "packages": package_versions(), "models": list(settings.plan.models),
            "agent": settings.plan.agent, "effort": settings.model.effort,
            "engines": engine_labels(settings.stores.engines, registry),
            # the engine arms (D4@oxigraph): language -> engine name -> how the run names it
            "engine_arms": {lang: {name: engine_labels({lang: value}, registry)[lang]
                                   for name, value in arms.items()}
                            for lang, arms in settings.stores.engine_arms.items()},
            **code_fingerprints(registry), "grader_files": grader_files(registry),
        }
        self.stored_expected: list[str] | None = None
        if settings.plan.resume and old:
            self.meta.update(resumed_meta(old, settings, self.started, registry))
            if isinstance(old.get("expected"), list):
                self.stored_expected = [str(n) for n in old["expected"]]
            if isinstance(old.get("selection"), dict):
                self.meta["selection"] = old["selection"]
            if isinstance(old.get("shard"), dict):  # a shard resumed: still that shard
                self.meta["shard"] = old["shard"]
            if self.unreadable:
                self.meta["resumes"][-1]["unreadable"] = [
                    unreadable_text(b, self.answers_path) for b in self.unreadable]

    def begin(self, selected: list[str], say: Callable[[str], None] | None = None) -> None:
        """The session collected `selected` and built what they need: make the run folder and
        write meta.json with the items the run is meant to have (a resumed run keeps those it
        was started with, and a forced resume adds what it selects beyond them). A new run that
        selected nothing makes no folder. Under xdist every worker's collection arrives here;
        the first makes the folder."""
        self.expected.update(selected)
        if self.begun:
            return
        if not self.settings.plan.resume and not selected and self.shard is None:
            return  # (a shard given no item still makes its folder: the merge needs it)
        self.begun = True
        if self.settings.plan.resume:
            base = self.stored_expected if self.stored_expected is not None else \
                sorted(set(self.records) | set(selected))
            self.planned = [*base, *(n for n in selected if n not in set(base))]
            self.nothing_left = not selected
        else:
            self.planned = list(selected)
        self.meta["expected"] = self.planned
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "prompts").mkdir(exist_ok=True)
        if self.shard is not None and not self.settings.plan.resume:
            from pytest_kgbench.run.shards import SHARD_FILE, meta_block

            self.meta["shard"] = meta_block(self.shard)
            self._write_json(SHARD_FILE, self.shard)
            self.nothing_left = not selected
        if self.settings.plan.resume:
            drop_torn_tail(self.answers_path)
            if self.unreadable:
                set_aside(self.answers_path, [b["line"] for b in self.unreadable])
            for bad in self.unreadable:
                line = (f"{unreadable_text(bad, self.answers_path)}: it is asked again (the "
                        f"line is kept in {self.answers_path.name}.unreadable)")
                if say is not None:
                    say(line)
        self._write_json("meta.json", self.meta)

    # --- hooks (this object is registered as a plugin on the controller) -----------------------

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest stopped on a KeyboardInterrupt (its Interrupted, xdist's, a second Ctrl-C):
        the run was interrupted, unless it is the halt of a broken harness."""
        if isinstance(excinfo.value, KeyboardInterrupt) and not self.halted:
            self.interrupted = self.interrupted or INTERRUPTED

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if str(report.outcome) == "rerun":  # pytest-rerunfailures' own outcome
            return  # a transient failure that will be retried: never banked
        props = dict(report.user_properties)
        if props.get(BROKEN_PROPERTY) and not self.halted:
            self.halted = str(props[BROKEN_PROPERTY])
        raw = props.get(RECORD_PROPERTY)
        if props.get(NOT_BANKED_PROPERTY):  # dropped: missing, asked again on --resume
            self.errors[report.nodeid] = str(props[NOT_BANKED_PROPERTY])
            return
        if raw is None:
            if report.skipped and report.nodeid not in self.records:
                # skipped before it was asked (a skip marker: no reference query for the
                # condition): reported as skipped with its reason, never missing
                longrepr = report.longrepr
                why = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
                self.unasked[report.nodeid] = str(why).removeprefix("Skipped: ")
                return
            if report.failed and report.nodeid not in self.records:
                # the fault first (the exception's own line; its traceback after it), never
                # a fragment of a frame's locals
                crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
                head = f"{crash}\n" if crash else ""
                self.errors.setdefault(report.nodeid,
                                       f"{report.when}: {head}{report.longreprtext[:2000]}")
            return
        record: BankedRecord = json.loads(str(raw))
        record["nodeid"] = report.nodeid
        record["outcome"] = report.outcome
        record["duration_s"] = round(report.duration, 4)
        self.bank(record)

    # --- banking --------------------------------------------------------------------------------

    def bank(self, record: BankedRecord) -> None:
        """Write the item's prompt context once and append its record, flushed to disk."""
        prompt = record.get("prompt") or {}
        context = prompt.pop("context", None)
        if context is not None:
            path = self.prompt_path(record["condition"], prompt["context_sha256"])
            if path not in self._prompts:  # looked at on disk once per context, not per item
                if not path.exists():
                    write_atomic(path, context + "\n\n<!-- followed by each item's question "
                                 "block: answers.jsonl, prompt.question -->\n")
                self._prompts.add(path)
            prompt["context_file"] = str(path.relative_to(self.dir))
        self.records[record["nodeid"]] = record
        line = record_line(record)
        if self._fd is None:  # kept open for the run (O_APPEND: each write lands at the end)
            self._fd = os.open(self.answers_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fd = self._fd
        # one write of the whole line, then to disk: a kill leaves it whole or torn last
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        now = time.monotonic()
        if now - self._synced >= self.fsync_every:
            os.fsync(fd)
            self._synced = now

    def sync(self) -> None:
        """Flush answers.jsonl to disk and close it (the end of the run; a line banked later
        opens it again)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self.fsync_every:  # one item at a time, every line is on disk already
                os.fsync(fd)
        finally:
            os.close(fd)

    def prompt_path(self, condition: str, context_sha: str) -> Path:
        return self.dir / "prompts" / f"{condition}-{context_sha[:12]}.md"

    # --- the end ----------------------------------------------------------------------------------

    def supersede(self, nodeids: list[str], why: str) -> None:
        """Drop banked records that must be asked again (their question was edited since):
        they are never graded against the old answers, and missing if not asked again."""
        for nodeid in nodeids:
            if self.records.pop(nodeid, None) is not None:
                self.errors[nodeid] = why
        if nodeids and self.meta.get("resumes"):
            self.meta["resumes"][-1]["reasked"] = sorted(nodeids)

    def missing(self) -> list[dict[str, str]]:
        """The items the run is meant to have that it neither banked nor skipped unasked."""
        planned = self.planned if self.planned is not None else sorted(self.expected)
        gone = sorted(set(planned) - set(self.records) - set(self.unasked))
        never = (NOT_ASKED if self.halted else NOT_ASKED_INTERRUPTED if self.interrupted else
                 "never reported (worker crash, or a record that did not cross processes)")
        return [{"nodeid": n, "why": self.errors.get(n, never if n in self.expected else
                                                     "not selected by the resumed session "
                                                     "(its question is gone, or forced)")}
                for n in gone]

    def finish(self, session: pytest.Session) -> None:
        from pytest_kgbench.analysis.report import build_report, render_markdown

        self.sync()
        if not self.begun:
            return  # nothing was asked: no run folder
        records = [self.records[n] for n in sorted(self.records)]
        missing = self.missing()
        if not missing:
            self.interrupted = None  # a Ctrl-C after the last item: nothing was lost
        self.meta["finished"] = _now()
        self.meta["halted"] = self.halted
        self.meta["unasked"] = [{"nodeid": n, "reason": why}
                                for n, why in sorted(self.unasked.items())]
        # the model clients the items went through, with their versions (SDK, Claude Code)
        self.meta["clients"] = sorted({str(r["sent"]["client"]) for r in records
                                       if (r.get("sent") or {}).get("client")})
        report = build_report(records, self.settings, missing=missing, meta=self.meta,
                              registry=self.registry)
        report["halted"] = self.halted
        report["interrupted"] = self.interrupted
        self.meta["interrupted"] = self.interrupted
        self.meta["fingerprint"] = report["fingerprint"]
        self._write_json("meta.json", self.meta)
        self._write_json("questions.json", questions_json(records))
        self._write_json("grades.json", grades_json(records))
        self._write_json("report.json", report)
        write_atomic(self.dir / "report.md", render_markdown(report, self.registry))
        from pytest_kgbench.analysis.html_report import render_html

        write_atomic(self.dir / "report.html", render_html(report, records))
        self.report = report
        if self.halted:
            session.exitstatus = HARNESS_BROKEN
        elif self.interrupted:
            session.exitstatus = pytest.ExitCode.INTERRUPTED
        elif missing and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif self.nothing_left and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK  # a finished run resumed: nothing to do

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_kgbench.analysis.report import terminal_lines

        if self.report is None:
            return
        terminalreporter.section("kgbench")
        shard = self.meta.get("shard") or {}
        if self.nothing_left and shard and not self.settings.plan.resume:
            terminalreporter.write_line(f"shard {shard['index']}/{shard['count']} was dealt no "
                                        "item (more shards than questions): nothing was asked")
        elif self.nothing_left:
            terminalreporter.write_line(f"run {self.settings.plan.run_id} is complete: every "
                                        "selected item was banked before; nothing was asked")
        if shard:
            terminalreporter.write_line(
                f"shard {shard['index']}/{shard['count']} of {shard['items_selected']} "
                f"selected item(s); join the shards with: kgbench merge RUN... --run-id NAME")
        for line in terminal_lines(self.report):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"run folder: {self.dir}")
        if self.halted:
            terminalreporter.write_line(f"{self.halted}; {len(self.records)} item(s) banked "
                                        f"and kept, exit status {HARNESS_BROKEN}", red=True)
        elif self.interrupted:
            terminalreporter.write_line(
                f"INTERRUPTED ({self.interrupted}): {len(self.records)} item(s) banked and kept, "
                f"{len(self.report['missing'])} not; continue the run with: "
                f"pytest --resume {self.settings.plan.run_id}", red=True)

    def _write_json(self, name: str, value: Any) -> None:
        write_atomic(self.dir / name,
                     json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def drop_torn_tail(path: Path) -> None:
    """Cut a last line a kill left unfinished (no newline) off answers.jsonl before a resume
    appends to it, keeping it in answers.jsonl.unreadable; its item was never banked and will
    be asked again."""
    if not path.is_file():
        return
    with path.open("rb+") as fh:
        data = fh.read()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            try:  # whole but for its newline (a kill between the two): a record, kept
                whole = isinstance(json.loads(data[cut:]), dict)
            except ValueError:
                whole = False
            if whole:
                fh.write(b"\n")
            else:
                _keep_aside(path, [data[cut:]])
                fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())


def set_aside(path: Path, numbers: list[int]) -> None:
    """Move the lines `numbers` (from 1) of answers.jsonl, which are not records, to
    answers.jsonl.unreadable, so the file holds records only and no later resume or reader
    meets them again (the file is rewritten whole, then renamed over the old)."""
    lines = path.read_bytes().split(b"\n")
    bad = set(numbers)
    _keep_aside(path, [line for n, line in enumerate(lines, 1) if n in bad and line])
    kept = b"".join(line + b"\n" for n, line in enumerate(lines, 1) if n not in bad and line)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(kept)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def _keep_aside(path: Path, lines: list[bytes]) -> None:
    if not lines:
        return
    with path.with_name(path.name + ".unreadable").open("ab") as fh:
        fh.write(b"".join(line.rstrip(b"\n") + b"\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())
