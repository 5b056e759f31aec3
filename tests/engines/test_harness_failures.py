"""A harness failure is never a grade: what fails of the harness's own on a query's way (the
thread holding its deadline, the conversion of the engine's rows, a worker's answer) halts the
run with HarnessBroken, in process and in a store's worker; the engine's own errors stay the
query's result. CI once graded a query wrong with `RuntimeError: can't start new thread`: a
worker whose 4 GiB of address space a blow-up had filled could not map the stack of the timer
thread each query started. The deadline is now one thread per executor, started with it."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import duckdb
import pytest

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.engines import CAPS, run_with_timeout
from pytest_kgbench.engines.guard import Guard
from pytest_kgbench.engines.sql import SqlExecutor, WorkerSqlExecutor, connect, lock
from pytest_kgbench.engines.stores import open_store
from pytest_kgbench.engines.worker import Worker
from pytest_kgbench.packs.schema import TableSpec

SPECS = {"t": TableSpec(name="t", columns=(("n", "INTEGER"), ("s", "VARCHAR")))}
ROWS = [[1, "a"], [2, "b"], [3, "c"]]
SLOW = "SELECT count(*) FROM range(1000000000000) a WHERE a.range % 7 = 3"
NO_THREAD = "can't start new thread"


def _refuse(self: threading.Thread) -> None:
    raise RuntimeError(NO_THREAD)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("harness-failures") / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute('CREATE TABLE t (n INTEGER, s VARCHAR)')
    con.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    con.close()
    return path


def executor(database: Path, timeout: float = 5.0) -> SqlExecutor:
    return SqlExecutor(lock(connect(str(database), read_only=True)), SPECS,
                       Guard(reads_personal=True), timeout=timeout)


def test_a_query_starts_no_thread_of_its_own(database, monkeypatch) -> None:
    """Once the executor is open, no query needs a new thread, the one its deadline stops
    included (a Timer per query before: its start failed as RuntimeError out of run)."""
    ex = executor(database, timeout=0.5)
    try:
        monkeypatch.setattr(threading.Thread, "start", _refuse)
        for _ in range(20):
            assert ex.run("SELECT n, s FROM t ORDER BY n").rows == ROWS
        slow = ex.run(SLOW)
        assert slow.timed_out and slow.error == "stopped after 0.5 s"
        assert ex.run("SELECT count(*) FROM t").rows == [[3]]
    finally:
        ex.close()


def test_no_thread_for_the_deadline_is_harness_broken_never_a_result(database,
                                                                      monkeypatch) -> None:
    monkeypatch.setattr(threading.Thread, "start", _refuse)
    with pytest.raises(HarnessBroken, match=NO_THREAD):
        executor(database).run("SELECT 1 AS one")


def test_the_harness_converting_rows_wrongly_is_broken_the_engines_errors_are_results(
        database, monkeypatch) -> None:
    """The engine's errors — its parser's, its execution's, a value Python cannot convert
    as DuckDB hands it over — are the query's result; the harness's own conversion failing
    on a row is HarnessBroken."""
    ex = executor(database)
    try:
        for statement, error in [
                ("SELEC 1", "ParserException"),
                ("SELECT CAST(s AS INTEGER) FROM t", "ConversionException"),
                ("SELECT CAST('100000000 years' AS INTERVAL) AS i", "OverflowError")]:
            res = ex.run(statement)
            assert res.error is not None and res.error.startswith(error), res.error
        import pytest_kgbench.engines.sql as sql

        def broken(value: object) -> object:
            raise TypeError("a bug of the harness's")

        monkeypatch.setattr(sql, "jsonable", broken)
        with pytest.raises(HarnessBroken, match="a bug of the harness's"):
            ex.run("SELECT n FROM t")
    finally:
        ex.close()


# a store's worker as sql_worker runs it, broken in one way (KGBENCH_TEST_BREAK) for the tests
BROKEN_WORKER = textwrap.dedent("""
    import os, threading
    import pytest_kgbench.engines.sql as sql
    from pytest_kgbench.engines.sql_worker import SqlEngine
    from pytest_kgbench.engines.worker import serve

    HOW = os.environ["KGBENCH_TEST_BREAK"]

    def refuse(self):
        raise RuntimeError("can't start new thread")

    def start(config):
        if HOW == "threads-before-load":
            threading.Thread.start = refuse
        engine = SqlEngine(config)
        if HOW == "threads-after-load":
            threading.Thread.start = refuse
        if HOW == "conversion":
            def broken(value):
                raise TypeError("a bug of the harness's")
            sql.jsonable = broken
        if HOW == "reply":
            def reply(request):
                raise KeyError("a bug of the harness's")
            engine.reply = reply
        return engine

    serve(start)
""")


def worker_store(database: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
                 timeout: float = 5.0) -> WorkerSqlExecutor:
    """A DuckDB store in a real worker process (as `WorkerSqlExecutor.start` makes one),
    running BROKEN_WORKER broken `how`."""
    (tmp_path / "kgbench_broken_worker.py").write_text(BROKEN_WORKER)
    monkeypatch.setenv("PYTHONPATH", ":".join([str(tmp_path), *sys.path]))
    monkeypatch.setenv("KGBENCH_TEST_BREAK", how)
    guard = Guard(reads_personal=True)
    worker = Worker("kgbench_broken_worker", {
        "path": str(database), "engine": "duckdb", "guard": guard.to_json(),
        "caps": asdict(CAPS), "tables": {n: [list(c) for c in s.columns]
                                         for n, s in SPECS.items()}})
    return WorkerSqlExecutor(worker, SPECS, guard, timeout)


def test_a_worker_that_cannot_start_a_thread_still_answers_and_holds_its_deadline(
        database, tmp_path, monkeypatch) -> None:
    ex = worker_store(database, tmp_path, monkeypatch, "threads-after-load", timeout=2.0)
    try:
        for _ in range(10):
            res = ex.run("SELECT n, s FROM t ORDER BY n")
            assert res.error is None and res.rows == ROWS
        slow = ex.run(SLOW)
        assert slow.timed_out and slow.error == "stopped after 2 s"
        assert ex.worker.kills == 0  # its engine stopped it (the deadline's thread), not a kill
    finally:
        ex.close()


@pytest.mark.parametrize("how", ["threads-before-load", "conversion", "reply"])
def test_the_harness_failing_in_the_worker_is_harness_broken(database, tmp_path, monkeypatch,
                                                             how: str) -> None:
    """No deadline thread, a conversion bug, a request the worker raised on: the parent
    raises HarnessBroken, never a result the model is graded on."""
    ex = worker_store(database, tmp_path, monkeypatch, how)
    try:
        with pytest.raises(HarnessBroken, match=NO_THREAD if how.startswith("threads")
                           else "a bug of the harness's"):
            ex.run("SELECT n FROM t")
    finally:
        ex.close()


def test_no_thread_to_bound_the_guards_parse_is_harness_broken(monkeypatch) -> None:
    """run_with_timeout (the guard's parse of a SPARQL text, in the harness's process)."""
    monkeypatch.setattr(threading.Thread, "start", _refuse)
    with pytest.raises(HarnessBroken, match=NO_THREAD):
        run_with_timeout(lambda: 1, 1.0)


@pytest.fixture(scope="module")
def graph_engine(credit_base):
    """The graph engine a SPARQL store's worker runs, made in this process from the very
    configuration its worker got."""
    from pytest_kgbench.engines.sparql_worker import GraphEngine

    ex = open_store(credit_base, "sparql", "analyst", timeout=5.0)
    try:
        yield GraphEngine(ex.worker.config)
    finally:
        ex.close()


def test_a_graph_engines_error_is_a_result_the_harness_converting_wrongly_is_broken(
        graph_engine, monkeypatch) -> None:
    from pytest_kgbench.engines import sparql_worker

    query = "SELECT ?s WHERE { ?s ?p ?o } LIMIT 3"
    assert len(graph_engine.run(query)["rows"]) == 3

    def evaluation(res: object, width: int) -> Iterator[list[object]]:
        raise ValueError("the engine's own failure")  # rdflib evaluates rows as they are read
        yield []

    monkeypatch.setattr(sparql_worker, "_rows", evaluation)
    assert graph_engine.run(query)["error"] == "ValueError: the engine's own failure"
    monkeypatch.undo()

    def broken(value: object) -> object:
        raise TypeError("a bug of the harness's")

    monkeypatch.setattr(sparql_worker, "_cell", broken)
    with pytest.raises(HarnessBroken, match="a bug of the harness's"):
        graph_engine.run(query)
