"""Ctrl-C, with real processes and signals: the first SIGINT — to the session's process, or to
its whole process group as a terminal sends it, xdist's workers included — stops asking, drops
the item in flight (never banked, never graded), writes the report marked INTERRUPTED, prints
the resume command and exits 2 like pytest; `--resume` then asks exactly what was not banked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeMessagesAPI, stall, text

from conftest import subprocess_project, wait_until

A_PLUS = "A+.\n```json\n{\"rating\": \"A+\"}\n```"
SELECT = "Q01 or Q02 or Q03 or Q04 or Q05"


def _project(tmp_path: Path, kg_cache: Path) -> Path:
    # every answer is a request the fake counts: none from the response cache
    return subprocess_project(tmp_path, kg_cache, "kgbench_no_cache = true\n")


def _start(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """A session in a process group of its own (as a terminal's foreground job is)."""
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                             "-p", "no:hypothesispytest", "-p", "no:randomly", *args],
                            cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _report(root: Path, run: str) -> dict[str, Any]:
    return json.loads((root / "reports" / run / "report.json").read_text(encoding="utf-8"))


def _records(root: Path, run: str) -> list[dict[str, Any]]:
    path = root / "reports" / run / "answers.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _interrupted_cleanly(out: str, root: Path, run: str) -> dict[str, Any]:
    """What every interrupted run must show: its report marked INTERRUPTED (not halted, not
    complete), the resume command, no traceback, and every banked line whole and once."""
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    assert f"continue the run with: pytest --resume {run}" in out, out[-3000:]
    report = _report(root, run)
    assert report["interrupted"] and report["halted"] is None and not report["complete"]
    nodeids = [r["nodeid"] for r in _records(root, run)]  # every line parses: none torn
    assert len(set(nodeids)) == len(nodeids) == report["counts"]["items"]
    assert report["counts"]["expected"] == len(nodeids) + len(report["missing"])
    assert "INTERRUPTED" in (root / "reports" / run / "report.md").read_text(encoding="utf-8")
    assert "INTERRUPTED" in (root / "reports" / run / "report.html").read_text(encoding="utf-8")
    return report


def test_ctrl_c_stops_a_model_run_and_resume_asks_the_rest(tmp_path: Path, kg_cache: Path,
                                                          credit_base) -> None:
    """SIGINT to the process while the third item's request is in flight: the first two are
    kept, the third is dropped (its request is cut, not answered later), nothing else is
    asked, and the resume asks the three not banked, once each."""
    root = _project(tmp_path, kg_cache)
    with FakeMessagesAPI(default=lambda body: text(A_PLUS)) as api:
        env = {**os.environ, "ANTHROPIC_BASE_URL": api.url,
               "ANTHROPIC_API_KEY": "sk-test-not-a-secret"}
        api.push(text(A_PLUS), text(A_PLUS), stall(300))
        args = ("questions", "--model", "sonnet", "--condition", "R1", "-k", SELECT)
        proc = _start(root, env, *args, "--run-id", "run")
        assert wait_until(lambda: len(api.requests) >= 3, 120, proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
        report = _interrupted_cleanly(out, root, "run")
        assert len(api.requests) == 3  # nothing was asked after the Ctrl-C
        assert report["counts"]["items"] == 2 and len(report["missing"]) == 3
        why = {m["nodeid"].split("::")[1].split("[")[0]: m["why"] for m in report["missing"]}
        assert "while this item was asked" in why["credit-Q03"]  # in flight: dropped
        assert why["credit-Q05"].startswith("not asked: the run was interrupted")
        from pytest_kgbench import load_run

        summary = load_run(root / "reports" / "run").summary
        assert summary.status == "interrupted" and "pytest --resume run" in str(summary.reason)

        api.script.clear()
        resumed = _start(root, env, "--resume", "run")  # its selection restored: 3 items
        out, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, out[-3000:]
        final = _report(root, "run")
        assert final["complete"] and final["interrupted"] is None
        assert final["counts"]["items"] == 5 and len(api.requests) == 6


SLOW = """
- id: shop-Q9
  tier: L1
  text: How many of the first trillion numbers leave 3 when divided by 7?
  answer:
    n: {kind: integer}
  hand_key: {n: 142857142857}
  gold:
    sql: SELECT count(*) AS n FROM range(1000000000000) t(x) WHERE x % 7 = 3
"""

MARK = """
import os


def pytest_runtest_call(item):
    if "shop-Q9" in item.nodeid:
        open(os.environ["KGBENCH_TEST_MARK"], "w").close()
"""


def test_ctrl_c_inside_a_duckdb_query_is_never_graded(tmp_path: Path) -> None:
    """DuckDB turns a KeyboardInterrupt raised inside a query into RuntimeError("Query
    interrupted"), which the query's error handling would pass on as the query's result: the
    Ctrl-C used to be swallowed and the interrupted query graded. Now the item is dropped and
    the run stops."""
    from pytest_kgbench.cli import main

    assert main(["init", str(tmp_path / "shop")]) == 0
    questions = tmp_path / "shop" / "questions.yaml"
    questions.write_text(questions.read_text(encoding="utf-8") + SLOW, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(MARK)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nkgbench_cache = {tmp_path / 'cache'}\n")
    mark = tmp_path / "asking"
    env = {**os.environ, "KGBENCH_TEST_MARK": str(mark)}
    proc = _start(tmp_path, env, f"--pack={tmp_path / 'shop'}", "--agent", "gold",
                  "--condition", "D1", "-k", "shop-Q1 or shop-Q9", "--query-timeout", "600",
                  "--run-id", "slow")
    assert wait_until(mark.exists, 240, proc)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    report = _interrupted_cleanly(out, tmp_path, "slow")
    assert [i["question"] for i in report["items"]] == ["shop-Q1"]
    assert [m["nodeid"].split("::")[1] for m in report["missing"]] == ["shop-Q9[D1-gold-rep1]"]
    text_ = (tmp_path / "reports" / "slow" / "answers.jsonl").read_text(encoding="utf-8")
    assert "Query interrupted" not in text_


@pytest.mark.slow
@pytest.mark.parametrize("to", ["process group", "controller"])
def test_ctrl_c_stops_an_xdist_run(to: str, tmp_path: Path, kg_cache: Path,
                                   credit_base) -> None:
    """Under -n 2, the SIGINT a terminal sends to the whole process group (each worker gets
    one too), or one sent to the controller alone (passed on to its workers): both workers
    stop, each drops its item in flight, and the run is interrupted, not crashed."""
    root = _project(tmp_path, kg_cache)
    stalling = {"on": True}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        # the first four requests are answered; every later one stalls while `on`
        return stall(300) if stalling["on"] and len(api.requests) > 4 else text(A_PLUS)

    with FakeMessagesAPI(default=answer) as api:
        env = {**os.environ, "ANTHROPIC_BASE_URL": api.url,
               "ANTHROPIC_API_KEY": "sk-test-not-a-secret"}
        # two prompt contexts (R1, R4): one per worker
        args = ("questions", "--model", "sonnet", "--condition", "R1,R4", "-k", SELECT,
                "-n", "2")
        proc = _start(root, env, *args, "--run-id", "par")
        # the four answered items banked (a worker grading its answer when the Ctrl-C came
        # would rightly drop it: 3 banked, a race of the test's, not the run's) and each worker
        # waiting on its stalled request: the fifth and the sixth (each worker has five items,
        # so both ask again). Not `api.active >= 2`: the fake counts a request in flight until
        # its handler thread returns, after the client has its answer, so a loaded machine saw
        # "two in flight" with one stall and one finished reply, and the worker still free
        # asked a sixth after `asked` was read (CI-like load saw 6 for 5)
        answers = root / "reports" / "par" / "answers.jsonl"
        assert wait_until(lambda: len(api.requests) >= 6 and answers.is_file() and len(
            answers.read_text(encoding="utf-8").splitlines()) >= 4, 240, proc)
        asked = len(api.requests)
        if to == "controller":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
        report = _interrupted_cleanly(out, root, "par")
        assert report["counts"]["items"] == 4 and report["counts"]["expected"] == 10
        assert len(api.requests) == asked  # no worker asked anything after the Ctrl-C

        stalling["on"] = False
        resumed = _start(root, env, "--resume", "par", "-n", "2")
        out, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, out[-3000:]
        final = _report(root, "par")
        assert final["complete"] and final["counts"]["items"] == 10
        records = _records(root, "par")
        assert len(records) == 10 and len({r["nodeid"] for r in records}) == 10


def _delivered_after(land: Any) -> None:
    """`land(handle)` makes a SIGINT arrive, through `handle(frame)`, inside code that would
    swallow what it raised; the interrupt must not be raised there but once that code has
    returned, inside the abortable block."""
    import signal
    import time

    from pytest_kgbench.core.interrupt import Interrupt

    intr = Interrupt(hard_second=True)
    assert intr.install()
    raised_inside: list[BaseException] = []

    def handle(frame: Any) -> None:
        try:
            intr._handle(signal.SIGINT, frame)
        except BaseException as exc:  # noqa: BLE001 - what that code would swallow
            raised_inside.append(exc)

    try:
        with pytest.raises(KeyboardInterrupt):
            with intr.abortable():
                land(handle)
                for _ in range(500):
                    time.sleep(0.01)
        assert raised_inside == []
        assert intr.requested is not None
    finally:
        intr.uninstall()


def test_a_ctrl_c_that_lands_in_a_finalizer_is_delivered_after_it() -> None:
    """A SIGINT that arrives while a __del__ runs (an SDK client collected mid-request) must
    not raise there: Python prints such a KeyboardInterrupt as "Exception ignored" with a
    traceback and drops it. The interrupt comes once the finalizer has returned."""
    import sys

    def land(handle: Any) -> None:
        class Collected:
            def __del__(self) -> None:
                handle(sys._getframe())

        Collected()  # collected at once: its __del__ takes the signal

    _delivered_after(land)


def test_a_ctrl_c_that_lands_in_a_weakset_callback_is_delivered_after_it() -> None:
    """A SIGINT that arrives while a WeakSet drops a dead entry (its `_remove`, a weak
    reference's callback: not a __del__) must not raise there either: CI's Ctrl-C of an xdist
    run printed "Exception ignored in: <function WeakSet.__init__.<locals>._remove …>" with a
    KeyboardInterrupt traceback. The interrupt comes once the callback has returned."""
    import sys
    import weakref

    remove = weakref.WeakSet()._remove  # type: ignore[attr-defined]

    class InRemove:  # the frame the signal lands in: WeakSet's callback, called from here
        f_code = remove.__code__
        f_globals = remove.__globals__
        f_back = sys._getframe()

    _delivered_after(lambda handle: handle(InRemove()))


@pytest.mark.parametrize("agent", ["anthropic", "openai"])
def test_a_ctrl_c_while_an_sdk_client_is_made_raises_once_it_is_whole(
        agent: str, monkeypatch) -> None:
    """A SIGINT that lands in an SDK client's constructor must not leave it half-made: the
    anthropic SDK's client then fails in its __del__ ('SyncHttpxClientWrapper' object has no
    attribute '_state'), printed as "Exception ignored" with a traceback (CI's xdist Ctrl-C run).
    The agent makes its client whole and the interrupt is raised right after."""
    import signal

    import anthropic
    import openai

    from pytest_kgbench.agents.models import anthropic as anthropic_agent
    from pytest_kgbench.agents.models import openai as openai_agent
    from pytest_kgbench.core.interrupt import Interrupt
    from pytest_kgbench.core.settings import Settings

    made: list[Any] = []
    sdk = anthropic.Anthropic if agent == "anthropic" else openai.OpenAI

    class Interrupted(sdk):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the constructor starts
            for _ in range(1000):  # the handler runs between two bytecodes of these
                pass
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(anthropic if agent == "anthropic" else openai,
                        "Anthropic" if agent == "anthropic" else "OpenAI", Interrupted)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
    settings = Settings.at(".", agent=agent, base_url="http://127.0.0.1:9",
                           response_cache=False)
    client_of = (anthropic_agent.AnthropicAgent if agent == "anthropic"
                 else openai_agent.OpenAIAgent)(settings)
    intr = Interrupt(hard_second=True)
    assert intr.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            with intr.abortable():
                client_of.client()
        assert intr.requested is not None
        assert len(made) == 1 and client_of._client is made[0]  # whole, and kept
        assert made[0]._client is not None and not made[0].is_closed()
    finally:
        intr.uninstall()
