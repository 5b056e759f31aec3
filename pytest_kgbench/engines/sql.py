"""DuckDB: the SQL store kind (`duckdb`). Opened read-only on the persona's build of the data
(without the columns it may not read), external access off, memory, temp disk and threads
limited and the configuration then locked, so no statement can lift a limit; every query,
the guard's parse included, inside one deadline, and its result capped.

The store a model queries runs in a worker process of its own (`sql_worker`, through
`worker.Worker`, as the graph engines do): no network, an address-space limit the operating
system enforces, and killed at the query's deadline, so a result that DuckDB materialises past
its `memory_limit` (an `unnest` of a huge list, a gigabyte string) or converts for longer than
the deadline stops there. `SqlExecutor` is the engine as the worker runs it (and as the
reading gold agent's store from a prompt's text runs in-process: only reference queries reach
it); `WorkerSqlExecutor` is the side the agents, the checks and the MCP server hold."""

from __future__ import annotations

import csv
import io
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.engines import (
    CAPS,
    Caps,
    Executor,
    QueryResult,
    TableInfo,
    fill_from_engine,
    jsonable,
)
from pytest_kgbench.engines.guard import (
    DUCKDB_FUNCTIONS,
    Guard,
    SqlFunctions,
    Verdict,
    classify_sql,
)
from pytest_kgbench.engines.stores import StoreKind
from pytest_kgbench.engines.worker import START_TIMEOUT, Worker, WorkerDied
from pytest_kgbench.packs.schema import TableSpec, parse_value
from pytest_kgbench.packs.tables import ddl

if TYPE_CHECKING:
    from pytest_kgbench.packs.build import StoreSource

SAFE_CONFIG = {
    "enable_external_access": False,   # no files, no network, no ATTACH
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}
LIMITS: dict[str, Any] = {
    "memory_limit": "1GB",             # a query past it fails with DuckDB's out-of-memory error
    "max_temp_directory_size": "0B",   # nothing spills to disk
    "threads": 1,                      # a query keeps at most one core busy
}


def connect(path: str, *, read_only: bool) -> Any:
    """A connection with external access off and the limits set; the caller locks it."""
    import duckdb

    return duckdb.connect(path, read_only=read_only, config={**SAFE_CONFIG, **LIMITS})


def lock(con: Any) -> Any:
    """Lock the connection's configuration: no SET or RESET can lift a limit afterwards. A
    second connection to a file this process has open shares its database, locked already
    (by `connect`'s settings: it is the only way this package opens one)."""
    if con.execute("SELECT current_setting('lock_configuration')").fetchone()[0]:
        return con
    con.execute("SET enable_progress_bar = false")
    con.execute("SET lock_configuration = true")
    return con


def database_from_csv_text(tables: Mapping[str, tuple[TableSpec, str]]) -> Any:
    """An in-memory DuckDB holding tables given as CSV text (the reading gold agent's store).

    Rows are parsed in Python by the declared types and inserted; no file is touched, and
    external access is switched off before anyone queries it.
    """
    con = connect(":memory:", read_only=False)
    for spec, text in tables.values():
        con.execute(ddl(spec))
        reader = csv.DictReader(io.StringIO(text))
        rows = [[parse_value(r.get(c) or "", t) for c, t in spec.columns] for r in reader]
        if rows:
            marks = ", ".join("?" for _ in spec.columns)
            con.executemany(f'INSERT INTO "{spec.name}" VALUES ({marks})', rows)
    return lock(con)


def chunks(first: int = 16, most: int = 2048) -> Iterator[int]:
    """How many rows to fetch each time: few at first (wide rows are not fetched 2,048 at a
    time to show a handful), then more while the cap wants them."""
    size = first
    while True:
        yield size
        size = min(most, size * 4)


def _fetched(cursor: Any) -> Iterator[tuple[Any, ...]]:
    """A cursor's rows, fetched a chunk at a time (the cap stops fetching early)."""
    for size in chunks():
        batch = cursor.fetchmany(size)
        if not batch:
            return
        yield from batch


class Deadline:
    """One long-lived thread per executor that stops the query running past its deadline: a
    query arms it (`arm`), the thread waits for that moment and calls the stop it was given,
    and the query disarms it when done (`disarm`, which waits out a stop being sent). No
    thread is started per query: a worker whose address space a big query has filled (its
    RLIMIT_AS) can still be held to a deadline, where a new thread's stack could not be mapped.
    The thread starts with the executor; one that cannot start is the harness's failure."""

    def __init__(self, name: str = "kgbench-deadline") -> None:
        self.name = name
        self._cond = threading.Condition()
        self._due = 0.0                         # time.monotonic() of the armed deadline
        self._stop: Callable[[], None] | None = None  # armed: what to call at `_due`
        self._firing = False
        self.fired = False                      # the armed deadline passed and its stop was sent
        self.failed: BaseException | None = None  # what the stop raised
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The watching thread, started if it is not running; HarnessBroken if it cannot be."""
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return
            self._closed = False
            thread = threading.Thread(target=self._watch, daemon=True, name=self.name)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread can be started: no deadline can be held
                raise HarnessBroken(f"the store's deadline thread could not start: {exc}"
                                    ) from exc
            self._thread = thread

    def arm(self, seconds: float, stop: Callable[[], None]) -> None:
        """Call `stop` in `seconds` unless disarmed first."""
        self.start()
        with self._cond:
            self._due, self._stop = time.monotonic() + seconds, stop
            self.fired, self.failed = False, None
            self._cond.notify_all()

    def disarm(self) -> None:
        """No stop is sent after this returns (one being sent is waited for)."""
        with self._cond:
            self._stop = None
            while self._firing:
                self._cond.wait()

    def close(self) -> None:
        with self._cond:
            self._closed, self._stop = True, None
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                left = self._due - time.monotonic()
                if self._stop is None or left > 0:
                    self._cond.wait(None if self._stop is None else left)
                    continue
                stop, self._stop = self._stop, None
                self.fired = self._firing = True
                self._cond.release()
                try:
                    stop()
                except BaseException as exc:  # noqa: BLE001 - the query's run reports it
                    self.failed = exc
                finally:
                    self._cond.acquire()
                    self._firing = False
                    self._cond.notify_all()


class SqlStore(Executor):
    """What every SQL store shows, whichever engine runs its queries and wherever: the
    catalog, a table's description, the store block, and the guard's reading of a statement
    (`reads`, `refusal`, with the engine's own list of functions). An engine gives `_count`."""

    language = "sql"
    unit = "rows"
    title = "DuckDB"  # the engine, as the store block names it
    functions: SqlFunctions = DUCKDB_FUNCTIONS  # the functions its guard admits

    def __init__(self, specs: Mapping[str, TableSpec], guard: Guard, timeout: float = 60.0,
                 caps: Caps = CAPS) -> None:
        self.specs = dict(specs)
        self.guard = guard
        self.timeout = timeout
        self.caps = caps
        self._by_lower = {name.lower(): name for name in self.specs}
        self._catalog: list[TableInfo] | None = None
        # one connection, used by one thread at a time: --concurrency answers items on threads
        # of their own, and the item's grading reads the store too
        self._lock = threading.RLock()

    def _parser(self) -> Any:
        """The DuckDB connection the guard parses on: an empty one of this thread's."""
        return parser_connection()

    def _count(self, name: str) -> int:
        raise NotImplementedError

    def _classify(self, statement: str) -> Verdict:
        return classify_sql(self._parser(), statement, self.guard, self.caps, self.functions)

    def reads(self, statement: str) -> list[str]:
        """The pack tables a statement reads (CTE names and unknown names left out)."""
        with self._lock:
            return self._reads(self._classify(statement).tables)

    def _reads(self, names: set[str]) -> list[str]:
        return sorted({self._by_lower[n.lower()] for n in names if n.lower() in self._by_lower})

    def refusal(self, statement: str) -> str | None:
        with self._lock:
            return self._classify(statement).refused

    def catalog(self) -> list[TableInfo]:
        """The tables, their visible columns and row counts (counted once: read-only)."""
        with self._lock:
            if self._catalog is None:
                self._catalog = [
                    TableInfo(name=name, rows=self._count(name),
                              withheld=tuple(sorted(self.guard.withheld_columns(name))),
                              columns=tuple((c, t) for c, t in spec.columns
                                            if c not in self.guard.withheld_columns(name)))
                    for name, spec in self.specs.items()]
            return self._catalog

    def describe(self, name: str) -> str:
        for info in self.catalog():
            if info.name.lower() == name.lower():
                return info.described("table", "rows", self.guard.persona, "{0} {1}")
        return f"ERROR: no table named '{name}'"

    def store_block(self) -> str:
        lines = [f"## The store: {self.title} (SQL)", "",
                 "Tables, with their columns and row counts:", ""]
        for info in self.catalog():
            cols = ", ".join(f"{c} {t}" for c, t in info.columns)
            note = f" (withheld from you: {', '.join(info.withheld)})" if info.withheld else ""
            lines.append(f"- {info.name} ({info.rows} rows): {cols}{note}")
        return "\n".join(lines)


class SqlExecutor(SqlStore):
    """Runs SELECT statements on a DuckDB connection in this process through a `Guard`, with
    a time bound: the engine as a store's worker runs it (`sql_worker`), and the reading gold
    agent's store.

    The run itself (the guard's verdict, the deadline, the capped result) is the same for every
    SQL engine; an engine of its own (engines/postgres.py) subclasses this and changes only
    how a statement runs (`_execute`), how it is stopped (`_interrupt`, `_timed_out`) and how a
    table is counted (`_count`)."""

    def __init__(self, con: Any, specs: Mapping[str, TableSpec], guard: Guard,
                 timeout: float = 60.0, caps: Caps = CAPS) -> None:
        super().__init__(specs, guard, timeout, caps)
        self.con = con
        # the deadline's one thread, started now (a worker starts it as it loads, while its
        # address space is free); it ends when the executor is closed or dropped
        self.deadline = Deadline()
        weakref.finalize(self, self.deadline.close)
        self.deadline.start()

    @classmethod
    def open(cls, path: Path, specs: Mapping[str, TableSpec], guard: Guard,
             timeout: float = 60.0, caps: Caps = CAPS) -> SqlExecutor:
        """Open a built database file read-only, external access off, limits locked, in this
        process (a store a model queries runs in a worker: `WorkerSqlExecutor`)."""
        return cls(lock(connect(str(path), read_only=True)), specs, guard, timeout, caps)

    def close(self) -> None:
        self.deadline.close()
        self.con.close()

    def _parser(self) -> Any:
        """The store's own connection (the deadline interrupts the parse too)."""
        return self.con

    def run(self, statement: str) -> QueryResult:
        """Classify and run one statement within the deadline: at `timeout` seconds from the
        start the engine is interrupted, whether the guard's parse or the query is running.
        The engine's errors are the query's result; anything of the harness's own that fails
        on the way (its deadline, its conversion of the rows) raises HarnessBroken."""
        with self._lock:
            try:
                return self._run(statement)
            except HarnessBroken:
                raise
            except Exception as exc:  # noqa: BLE001 - the engine's own are caught in _run
                raise HarnessBroken(f"the {self.title} store's own code failed on a query: "
                                    f"{type(exc).__name__}: {exc}") from exc

    def _run(self, statement: str) -> QueryResult:
        result = QueryResult(language="sql", statement=statement)
        start = time.perf_counter()
        self.deadline.arm(self.timeout, self._interrupt)  # its thread: HarnessBroken if none
        try:
            verdict = self._classify(statement)
            result.reads = self._reads(verdict.tables)
            if verdict.runs:
                self._execute(statement, result)
            else:
                result.refused, result.error = verdict.refused, verdict.error
        except HarnessBroken:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's error (a value Python cannot
            #                        convert included): the query's result
            if self.deadline.fired or self._timed_out(exc):
                result.timed_out = True
                result.error = f"stopped after {self.timeout:g} s"
            else:
                result.error = self._message(exc)  # its own reason, a cancel it sent included
        finally:
            self.deadline.disarm()
            result.elapsed_s = round(time.perf_counter() - start, 4)
        if self.deadline.failed is not None:
            failed = self.deadline.failed
            raise HarnessBroken(f"the {self.title} store's deadline could not stop the query: "
                                f"{type(failed).__name__}: {failed}") from failed
        if time.perf_counter() - start > self.timeout and not result.timed_out:
            result.rows, result.timed_out = [], True  # the deadline passed: nothing is late
            result.error = f"stopped after {self.timeout:g} s"
        result.cap_text(self.caps)
        return result

    # --- what an engine changes ----------------------------------------------------------------

    def _execute(self, statement: str, result: QueryResult) -> None:
        """Run a statement the guard let through and fill `result` with its capped rows."""
        cursor = self.con.execute(statement)
        columns = [d[0] for d in (cursor.description or [])]
        fill_from_engine(result, columns, _fetched(cursor), jsonable, self.caps,
                         f"{self.title} store")

    def _interrupt(self) -> None:
        """Stop what is running now (called from the deadline's thread)."""
        self.con.interrupt()

    def _timed_out(self, exc: BaseException) -> bool:
        """Whether `exc` is the engine itself saying the query ran out of its time (beside
        the deadline's own interrupt, which `_run` knows of)."""
        return False

    def _message(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"

    def _count(self, name: str) -> int:
        return int(self.con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])

    def settings(self) -> dict[str, Any]:
        """The limits the engine holds, as it reports them (what a worker says it runs with)."""
        names = ("threads", "memory_limit", "max_temp_directory_size", "lock_configuration",
                 "enable_external_access")
        row = self.con.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
                               ).fetchone()
        opened = self.con.execute("SELECT path FROM duckdb_databases() WHERE NOT internal"
                                  ).fetchone()
        return {**dict(zip(names, row)), "database": opened[0] if opened else None}


WORKER_MODULE = "pytest_kgbench.engines.sql_worker"
GRACE = 0.5  # seconds before the deadline the worker's own engine interrupts the query


class WorkerSqlExecutor(SqlStore):
    """A SQL store whose engine runs in a worker process of its own (`sql_worker`): DuckDB on
    the persona's file, or a PostgreSQL client on the persona's role. The operating system
    holds what the engine cannot promise: the worker may map `worker.WORKER_MEMORY` bytes, and
    a query past its deadline is ended by killing the worker (a fresh one loads the store while
    the model reads the failure). The engine interrupts the query itself a little earlier
    (`GRACE`), so a query that stops when asked costs no restart."""

    def __init__(self, worker: Worker, specs: Mapping[str, TableSpec], guard: Guard,
                 timeout: float = 60.0, caps: Caps = CAPS, *, title: str = "DuckDB",
                 functions: SqlFunctions = DUCKDB_FUNCTIONS) -> None:
        super().__init__(specs, guard, timeout, caps)
        self.worker = worker
        self.title = title
        self.functions = functions
        self._counts: dict[str, int] | None = None

    @classmethod
    # many parameters: the engine's options, keyword-only with defaults
    def start(cls, engine: str, config: Mapping[str, Any], specs: Mapping[str, TableSpec],
              guard: Guard, timeout: float = 60.0, caps: Caps = CAPS, *,
              title: str = "DuckDB", functions: SqlFunctions = DUCKDB_FUNCTIONS,
              network: bool = False) -> WorkerSqlExecutor:
        """A worker running `engine` ("duckdb", "postgres") over `config` (what the engine
        opens), started now; it loads in the background. `network`: the engine needs one (a
        database server); else the worker has none."""
        worker = Worker(WORKER_MODULE, {
            **dict(config), "engine": engine, "guard": guard.to_json(), "caps": asdict(caps),
            "tables": {name: [list(col) for col in spec.columns]
                       for name, spec in specs.items()}}, network=network)
        return cls(worker, specs, guard, timeout, caps, title=title, functions=functions)

    @property
    def info(self) -> dict[str, Any]:
        """What the worker reported once its store was open (the limits it runs with)."""
        return self.worker.ready()

    def close(self) -> None:
        self.worker.close()

    def _count(self, name: str) -> int:
        """A table's rows, counted by the worker once for all tables (the catalog keeps them:
        a worker started again after a kill does not count them again)."""
        if self._counts is None:
            reply = self.worker.call({"op": "counts"}, START_TIMEOUT)
            if reply is None or "counts" not in reply:
                raise HarnessBroken(f"the {self.title} store could not count its tables: "
                                    f"{(reply or {}).get('error') or 'no reply in time'}")
            self._counts = {str(k): int(v) for k, v in reply["counts"].items()}
        return self._counts[name]

    def run(self, statement: str) -> QueryResult:
        """One query within the deadline, from its arrival to its answer: the guard's parse,
        the engine's run and the conversion of its rows, all in the worker; past the deadline
        the worker is killed, so nothing runs on. A worker still loading its store (a
        replacement after a kill) is waited for first: its load is not the query's time."""
        self.info  # noqa: B018
        start = time.perf_counter()
        result = QueryResult(language="sql", statement=statement)
        request = {"op": "run", "statement": statement, "caps": asdict(self.caps),
                   "timeout": max(self.timeout - GRACE, self.timeout * 0.8)}
        try:
            reply = self.worker.call(request, self.timeout)
        except WorkerDied as exc:
            result.error = str(exc)
        else:
            if reply is None:
                result.timed_out = True
            elif "language" in reply:
                result = QueryResult(**reply)
            else:  # the worker failed the request itself (a "broken" reply raised already)
                raise HarnessBroken(f"the {self.title} store's worker failed a query: "
                                    f"{reply.get('error') or reply}")
        if result.timed_out:
            result.rows, result.error = [], f"stopped after {self.timeout:g} s"
        result.elapsed_s = round(time.perf_counter() - start, 4)
        result.cap_text(self.caps)
        return result


_PARSERS = threading.local()


def parser_connection() -> Any:
    """An empty in-memory DuckDB connection of this thread's, for classifying without a store
    (connecting costs tens of milliseconds; the parser holds no data)."""
    con = getattr(_PARSERS, "con", None)
    if con is None:
        con = _PARSERS.con = lock(connect(":memory:", read_only=False))
    return con


class DuckDBStore(StoreKind):
    """The `duckdb` store kind: a built variant's raw or executed tables."""

    name = "duckdb"
    language = "sql"
    default = True

    def open(self, source: StoreSource, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> WorkerSqlExecutor:
        files = source.files(guard.view)  # the persona's build: withheld columns absent
        if data == "raw":
            path, specs = files.duckdb, source.tables
        elif data == "executed" and files.executed_duckdb is not None:
            path, specs = files.executed_duckdb, source.executed_tables
        else:
            raise HarnessBroken(f"the DuckDB store has no '{data}' data (raw or executed)")
        return WorkerSqlExecutor.start("duckdb", {"path": str(path)}, specs, guard, timeout)

    def from_context(self, context: str, guard: Guard, caps: Caps = CAPS) -> SqlExecutor:
        from pytest_kgbench.packs.reading import tables_from_text

        tables = tables_from_text(context)
        return SqlExecutor(database_from_csv_text(tables),
                           {n: s for n, (s, _) in tables.items()}, guard, caps=caps)

    def classify(self, guard: Guard, statement: str) -> str | None:
        return classify_sql(parser_connection(), statement, guard).refused

    def check(self) -> str | None:
        return None


STORES = (DuckDBStore(),)
