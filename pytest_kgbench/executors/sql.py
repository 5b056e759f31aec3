"""DuckDB: the SQL store kind (`duckdb`). Opened read-only on the persona's build of the data
(without the columns it may not read), external access off, memory, temp disk and threads
limited and the configuration then locked, so no statement can lift a limit; every query,
the guard's parse included, inside one deadline, and its result capped."""

from __future__ import annotations

import csv
import io
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.errors import HarnessBroken
from pytest_kgbench.executors import CAPS, Caps, QueryResult, TableInfo, fill_capped, jsonable
from pytest_kgbench.executors.guard import Guard, classify_sql
from pytest_kgbench.packs import TableSpec, parse_value

if TYPE_CHECKING:
    from pytest_kgbench.build import Built

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


def _ddl(spec: TableSpec) -> str:
    cols = ", ".join(f'"{c}" {t}' for c, t in spec.columns)
    return f'CREATE TABLE "{spec.name}" ({cols})'


def create_database(path: Path, specs: Mapping[str, TableSpec], csv_dir: Path, *,
                    withheld: Mapping[str, frozenset[str]] | None = None) -> None:
    """Write a DuckDB file holding every table, typed as the manifest declares; with
    `withheld` (table -> columns), the tables are written without those columns, so the file
    a restricted persona's store opens does not hold them at all."""
    import duckdb

    con = duckdb.connect(str(path))
    try:
        for spec in specs.values():
            drop = (withheld or {}).get(spec.name, frozenset())
            kept = replace(spec, columns=tuple((c, t) for c, t in spec.columns
                                               if c not in drop))
            con.execute(_ddl(kept))
            types = ", ".join(f"'{c}': '{t}'" for c, t in spec.columns)
            cols = ", ".join(f'"{c}"' for c, _ in kept.columns)
            con.execute(
                f'INSERT INTO "{spec.name}" SELECT {cols} FROM read_csv(?, header = true, '
                f"columns = {{{types}}}, auto_detect = false, nullstr = '')",
                [str(csv_dir / f"{spec.name}.csv")])
        con.execute("CHECKPOINT")
    finally:
        con.close()


def database_from_csv_text(tables: Mapping[str, tuple[TableSpec, str]]) -> Any:
    """An in-memory DuckDB holding tables given as CSV text (the reading gold agent's store).

    Rows are parsed in Python by the declared types and inserted; no file is touched, and
    external access is switched off before anyone queries it.
    """
    con = connect(":memory:", read_only=False)
    for spec, text in tables.values():
        con.execute(_ddl(spec))
        reader = csv.DictReader(io.StringIO(text))
        rows = [[parse_value(r.get(c) or "", t) for c, t in spec.columns] for r in reader]
        if rows:
            marks = ", ".join("?" for _ in spec.columns)
            con.executemany(f'INSERT INTO "{spec.name}" VALUES ({marks})', rows)
    return lock(con)


def _fetched(cursor: Any, chunk: int = 2048) -> Iterator[tuple[Any, ...]]:
    """A cursor's rows, fetched a chunk at a time (the cap stops fetching early)."""
    while True:
        batch = cursor.fetchmany(chunk)
        if not batch:
            return
        yield from batch


class SqlExecutor:
    """Runs SELECT statements on a DuckDB connection through a `Guard`, with a time bound.

    The run itself (the guard's verdict, the deadline, the capped result) is the same for every
    SQL engine; an engine of its own (executors/postgres.py) subclasses this and changes only
    where the guard parses (`_parser`), how a statement runs (`_execute`), how it is stopped
    (`_interrupt`, `_stopped`) and how a table is counted (`_count`)."""

    language = "sql"
    unit = "rows"
    title = "DuckDB"  # the engine, as the store block names it

    def __init__(self, con: Any, specs: Mapping[str, TableSpec], guard: Guard,
                 timeout: float = 60.0, caps: Caps = CAPS) -> None:
        self.con = con
        self.specs = dict(specs)
        self.guard = guard
        self.timeout = timeout
        self.caps = caps
        self._by_lower = {name.lower(): name for name in self.specs}
        self._catalog: list[TableInfo] | None = None
        # one connection, used by one thread at a time: --concurrency answers items on threads
        # of their own, and the item's grading reads the store too
        self._lock = threading.RLock()

    @classmethod
    def open(cls, path: Path, specs: Mapping[str, TableSpec], guard: Guard,
             timeout: float = 60.0) -> SqlExecutor:
        """Open a built database file read-only, external access off, limits locked."""
        return cls(lock(connect(str(path), read_only=True)), specs, guard, timeout)

    def close(self) -> None:
        self.con.close()

    def reads(self, statement: str) -> list[str]:
        """The pack tables a statement reads (CTE names and unknown names left out)."""
        with self._lock:
            return self._reads(classify_sql(self._parser(), statement, self.guard,
                                            self.caps).tables)

    def _reads(self, names: set[str]) -> list[str]:
        return sorted({self._by_lower[n.lower()] for n in names if n.lower() in self._by_lower})

    def refusal(self, statement: str) -> str | None:
        with self._lock:
            return classify_sql(self._parser(), statement, self.guard, self.caps).refused

    def run(self, statement: str) -> QueryResult:
        """Classify and run one statement within the deadline: at `timeout` seconds from the
        start the engine is interrupted, whether the guard's parse or the query is running."""
        with self._lock:
            return self._run(statement)

    def _run(self, statement: str) -> QueryResult:
        result = QueryResult(language="sql", statement=statement)
        start = time.perf_counter()
        timer = threading.Timer(self.timeout, self._interrupt)
        timer.daemon = True
        timer.start()
        try:
            verdict = classify_sql(self._parser(), statement, self.guard, self.caps)
            result.reads = self._reads(verdict.tables)
            if verdict.runs:
                self._execute(statement, result)
            else:
                result.refused, result.error = verdict.refused, verdict.error
        except HarnessBroken:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's error, or a value Python
            #                        cannot convert: the query's result either way
            if self._stopped(exc):
                result.timed_out = True
                result.error = f"stopped after {self.timeout:g} s"
            else:
                result.error = self._message(exc)
        finally:
            timer.cancel()
            timer.join()
            result.elapsed_s = round(time.perf_counter() - start, 4)
        if time.perf_counter() - start > self.timeout and not result.timed_out:
            result.rows, result.timed_out = [], True  # the deadline passed: nothing is late
            result.error = f"stopped after {self.timeout:g} s"
        result.cap_text(self.caps)
        return result

    # --- what an engine changes ----------------------------------------------------------------

    def _parser(self) -> Any:
        """The DuckDB connection the guard parses on (the store's own: the deadline
        interrupts the parse too)."""
        return self.con

    def _execute(self, statement: str, result: QueryResult) -> None:
        """Run a statement the guard let through and fill `result` with its capped rows."""
        cursor = self.con.execute(statement)
        columns = [d[0] for d in (cursor.description or [])]
        fill_capped(result, columns, _fetched(cursor), jsonable, self.caps)

    def _interrupt(self) -> None:
        """Stop what is running now (called from a timer thread at the deadline)."""
        self.con.interrupt()

    def _stopped(self, exc: BaseException) -> bool:
        """Whether `exc` is the engine saying the query was stopped at the deadline."""
        import duckdb

        return isinstance(exc, duckdb.InterruptException)

    def _message(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"

    def _count(self, name: str) -> int:
        return int(self.con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])

    def catalog(self) -> list[TableInfo]:
        """The tables, their visible columns and row counts (counted once: read-only)."""
        with self._lock:
            return self._catalog_locked()

    def _catalog_locked(self) -> list[TableInfo]:
        if self._catalog is not None:
            return self._catalog
        out = []
        for name, spec in self.specs.items():
            withheld = self.guard.withheld_columns(name)
            count = self._count(name)
            out.append(TableInfo(
                name=name, rows=int(count), withheld=tuple(sorted(withheld)),
                columns=tuple((c, t) for c, t in spec.columns if c not in withheld)))
        self._catalog = out
        return out

    def describe(self, name: str) -> str:
        for info in self.catalog():
            if info.name.lower() == name.lower():
                cols = "\n".join(f"  {c} {t}" for c, t in info.columns)
                note = (f"\n  (withheld from persona '{self.guard.persona}': "
                        f"{', '.join(info.withheld)})" if info.withheld else "")
                return f"table {info.name} ({info.rows} rows)\n{cols}{note}"
        return f"ERROR: no table named '{name}'"

    def store_block(self) -> str:
        lines = [f"## The store: {self.title} (SQL)", "",
                 "Tables, with their columns and row counts:", ""]
        for info in self.catalog():
            cols = ", ".join(f"{c} {t}" for c, t in info.columns)
            note = f" (withheld from you: {', '.join(info.withheld)})" if info.withheld else ""
            lines.append(f"- {info.name} ({info.rows} rows): {cols}{note}")
        return "\n".join(lines)


_PARSERS = threading.local()


def parser_connection() -> Any:
    """An empty in-memory DuckDB connection of this thread's, for classifying without a store
    (connecting costs tens of milliseconds; the parser holds no data)."""
    con = getattr(_PARSERS, "con", None)
    if con is None:
        con = _PARSERS.con = lock(connect(":memory:", read_only=False))
    return con


class DuckDBStore:
    """The `duckdb` store kind: a built variant's raw or executed tables."""

    name = "duckdb"
    language = "sql"
    default = True

    def open(self, built: Built, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> SqlExecutor:
        files = built.files(guard.view)  # the persona's build: withheld columns absent
        if data == "raw":
            return SqlExecutor.open(files.duckdb, built.pack.tables, guard, timeout)
        if data == "executed" and files.executed_duckdb is not None:
            return SqlExecutor.open(files.executed_duckdb, built.pack.executed_tables,
                                    guard, timeout)
        raise HarnessBroken(f"the DuckDB store has no '{data}' data (raw or executed)")

    def from_context(self, context: str, guard: Guard) -> SqlExecutor:
        from pytest_kgbench.reading import tables_from_text

        tables = tables_from_text(context)
        return SqlExecutor(database_from_csv_text(tables),
                           {n: s for n, (s, _) in tables.items()}, guard)

    def classify(self, guard: Guard, statement: str) -> str | None:
        return classify_sql(parser_connection(), statement, guard).refused

    def check(self) -> str | None:
        return None


STORES = (DuckDBStore(),)
