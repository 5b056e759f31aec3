"""Crash and resume, kill-tested: a session in a subprocess is SIGKILLed mid-item, between
items and while writing its report, then resumed with --resume. Every item is graded exactly
once, no banked item is asked again (the fake Messages API counts the requests), and the
final report equals an uninterrupted run's, timings aside."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeMessagesAPI, stall

from conftest import credit_question, subprocess_project, untimed, wait_until
from pytest_kgbench.core.record import read_answers

QUESTIONS = ("credit-Q01", "credit-Q02", "credit-Q03", "credit-Q04", "credit-Q05")
SELECT = " or ".join(q.split("-")[1] for q in QUESTIONS)

# a plugin of the project under test: SIGKILL itself at a chosen point, as a crash would
KILLER = '''
import os, signal

_seen = {"items": 0}


def pytest_runtest_logfinish(nodeid, location):
    _seen["items"] += 1  # the item is banked by now (answers.jsonl, fsynced)
    if os.environ.get("KILL_AFTER_ITEMS") == str(_seen["items"]):
        os.kill(os.getpid(), signal.SIGKILL)


def pytest_configure(config):
    where = os.environ.get("KILL_IN_REPORT")
    if where:
        import pytest_kgbench.analysis.html_report as html
        import pytest_kgbench.analysis.report as report

        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        if where == "md":
            report.render_markdown = die
        else:
            html.render_html = die
'''


@pytest.fixture
def session(tmp_path: Path, kg_cache: Path, credit_base):
    """Run (or start) the benchmark in a subprocess against a fake Messages API."""
    # the requests are what is counted: none may be answered from the response cache
    subprocess_project(tmp_path, kg_cache, "kgbench_no_cache = true\n")
    (tmp_path / "conftest.py").write_text(KILLER)
    with FakeMessagesAPI() as api:
        env = {**os.environ, "ANTHROPIC_BASE_URL": api.url,
               "ANTHROPIC_API_KEY": "sk-test-not-a-secret"}

        def start(run_id: str, *extra: str, **env_extra: str) -> subprocess.Popen[str]:
            args = [sys.executable, "-m", "pytest", "questions", "--model", "sonnet",
                    "--condition", "R1", "-k", SELECT, "-p", "no:cacheprovider", "-q",
                    "-p", "no:hypothesispytest",
                    *(("--resume", run_id) if "resume" in extra else ("--run-id", run_id))]
            return subprocess.Popen(args, cwd=tmp_path, env={**env, **env_extra},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        yield api, start, tmp_path / "reports"


def _asked(api: FakeMessagesAPI, since: int) -> dict[str, int]:
    """How many requests named each question, from request number `since` on."""
    texts = {q: credit_question(q).text for q in QUESTIONS}
    out = {q: 0 for q in QUESTIONS}
    for request in api.requests[since:]:
        body = json.dumps(request["body"], ensure_ascii=False)
        for q, text in texts.items():
            out[q] += text in body
    return out


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def _report(reports: Path, run_id: str) -> dict[str, Any]:
    return json.loads((reports / run_id / "report.json").read_text(encoding="utf-8"))


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its timings and its run's name."""
    drop = ("elapsed_s", "outcome", "duration_s")
    items = sorted(({k: v for k, v in i.items() if k not in drop} for i in report["items"]),
                   key=lambda i: i["nodeid"])
    return {"items": items, "conditions": untimed(report["conditions"]),
            "counts": report["counts"],
            "complete": report["complete"], "missing": report["missing"]}


def _banked_once(reports: Path, run_id: str) -> None:
    path = reports / run_id / "answers.jsonl"
    lines = path.read_bytes().splitlines()
    records = read_answers(path)
    nodeids = [r["nodeid"] for r in records]
    assert len(records) == len(lines) == len(QUESTIONS), "a torn or doubled line"
    assert sorted(set(nodeids)) == sorted(nodeids)
    for name in ("report.json", "report.md", "report.html", "grades.json", "meta.json"):
        assert (reports / run_id / name).is_file(), name
    assert not list((reports / run_id).glob(".*.tmp"))


@pytest.mark.slow
def test_killed_sessions_resume_to_the_uninterrupted_report(session) -> None:
    """One run killed three times — mid-item, between items, writing its report — and
    resumed after each, beside one run never interrupted."""
    api, start, reports = session
    out = _finish(start("whole"))
    assert "5 passed" in out, out
    reference = _comparable(_report(reports, "whole"))
    assert reference["complete"] and len(reference["items"]) == len(QUESTIONS)
    assert _asked(api, 0) == {q: 1 for q in QUESTIONS}
    since = len(api.requests)

    # 1. mid-item: the third question's request is in flight (the model stalls)
    api.push(*[api.default({})] * 2, stall(120))
    proc = start("run")
    wait_until(lambda: len(api.requests) >= since + 3, 120, proc)
    proc.send_signal(signal.SIGKILL)
    _finish(proc)
    assert proc.returncode == -signal.SIGKILL
    assert [r["question"] for r in read_answers(reports / "run" / "answers.jsonl")] == \
        list(QUESTIONS[:2])
    api.script.clear()

    # 2. between items: the resumed run is killed right after banking one more item
    proc = start("run", "resume", KILL_AFTER_ITEMS="1")
    _finish(proc)
    assert proc.returncode == -signal.SIGKILL
    assert len(read_answers(reports / "run" / "answers.jsonl")) == 3
    assert not (reports / "run" / "report.json").exists()

    # 3. during the report: the next resume asks the last two, then dies writing report.md
    proc = start("run", "resume", KILL_IN_REPORT="md")
    _finish(proc)
    assert proc.returncode == -signal.SIGKILL
    json.loads((reports / "run" / "report.json").read_text())  # whole: written, then renamed
    assert not (reports / "run" / "report.md").exists()

    # 4. the last resume has nothing left to ask, and writes the report
    out = _finish(start("run", "resume"))
    assert "deselected" in out and "passed" not in out, out
    asked = _asked(api, since)
    assert asked.pop(QUESTIONS[2]) == 2  # asked, killed unanswered, asked again
    assert asked == {q: 1 for q in QUESTIONS if q != QUESTIONS[2]}  # no banked item again
    assert _comparable(_report(reports, "run")) == reference
    _banked_once(reports, "run")
