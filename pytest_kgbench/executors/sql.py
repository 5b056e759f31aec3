"""DuckDB: the SQL store kind (`duckdb`). Opened read-only, external access off, every query
bounded in time."""

from __future__ import annotations

import csv
import io
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.errors import HarnessBroken
from pytest_kgbench.executors import QueryResult, TableInfo, jsonable
from pytest_kgbench.executors.guard import Guard, sql_tables, sql_tree
from pytest_kgbench.packs import TableSpec, parse_value

if TYPE_CHECKING:
    from pytest_kgbench.build import Built

SAFE_CONFIG = {
    "enable_external_access": False,   # no files, no network, no ATTACH
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}


def _ddl(spec: TableSpec) -> str:
    cols = ", ".join(f'"{c}" {t}' for c, t in spec.columns)
    return f'CREATE TABLE "{spec.name}" ({cols})'


def create_database(path: Path, specs: Mapping[str, TableSpec], csv_dir: Path) -> None:
    """Write a DuckDB file holding every table, typed as the manifest declares."""
    import duckdb

    con = duckdb.connect(str(path))
    try:
        for spec in specs.values():
            con.execute(_ddl(spec))
            types = ", ".join(f"'{c}': '{t}'" for c, t in spec.columns)
            con.execute(
                f'INSERT INTO "{spec.name}" SELECT * FROM read_csv(?, header = true, '
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
    import duckdb

    con = duckdb.connect(":memory:", config=dict(SAFE_CONFIG))
    for spec, text in tables.values():
        con.execute(_ddl(spec))
        reader = csv.DictReader(io.StringIO(text))
        rows = [[parse_value(r.get(c) or "", t) for c, t in spec.columns] for r in reader]
        if rows:
            marks = ", ".join("?" for _ in spec.columns)
            con.executemany(f'INSERT INTO "{spec.name}" VALUES ({marks})', rows)
    return con


class SqlExecutor:
    """Runs SELECT statements on a DuckDB connection through a `Guard`, with a time bound."""

    language = "sql"
    unit = "rows"

    def __init__(self, con: Any, specs: Mapping[str, TableSpec], guard: Guard,
                 timeout: float = 60.0, max_rows: int = 10_000) -> None:
        self.con = con
        self.specs = dict(specs)
        self.guard = guard
        self.timeout = timeout
        self.max_rows = max_rows
        self._by_lower = {name.lower(): name for name in self.specs}

    @classmethod
    def open(cls, path: Path, specs: Mapping[str, TableSpec], guard: Guard,
             timeout: float = 60.0) -> SqlExecutor:
        """Open a built database file read-only, with external access disabled."""
        import duckdb

        con = duckdb.connect(str(path), read_only=True, config=dict(SAFE_CONFIG))
        return cls(con, specs, guard, timeout)

    def close(self) -> None:
        self.con.close()

    def reads(self, statement: str) -> list[str]:
        """The pack tables a statement reads (CTE names and unknown names left out)."""
        tree = sql_tree(self.con, statement)
        names = sql_tables(tree) if tree is not None else set()
        return sorted({self._by_lower[n.lower()] for n in names if n.lower() in self._by_lower})

    def refusal(self, statement: str) -> str | None:
        return self.guard.check_sql(self.con, statement)

    def run(self, statement: str) -> QueryResult:
        import duckdb

        result = QueryResult(language="sql", statement=statement)
        start = time.perf_counter()
        refusal = self.refusal(statement)
        result.reads = self.reads(statement)
        if refusal:
            result.refused = refusal
            return result
        timer = threading.Timer(self.timeout, self.con.interrupt)
        timer.start()
        try:
            cursor = self.con.execute(statement)
            result.columns = [d[0] for d in (cursor.description or [])]
            rows = cursor.fetchmany(self.max_rows + 1)
            result.truncated = len(rows) > self.max_rows
            result.rows = [[jsonable(v) for v in row] for row in rows[: self.max_rows]]
        except duckdb.InterruptException:
            result.timed_out = True
            result.error = f"stopped after {self.timeout:g} s"
        except duckdb.Error as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            timer.cancel()
            result.elapsed_s = round(time.perf_counter() - start, 4)
        return result

    def catalog(self) -> list[TableInfo]:
        out = []
        for name, spec in self.specs.items():
            withheld = self.guard.withheld_columns(name)
            count = self.con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
            out.append(TableInfo(
                name=name, rows=int(count), withheld=tuple(sorted(withheld)),
                columns=tuple((c, t) for c, t in spec.columns if c not in withheld)))
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
        lines = ["## The store: DuckDB (SQL)", "", "Tables, with their columns and row counts:",
                 ""]
        for info in self.catalog():
            cols = ", ".join(f"{c} {t}" for c, t in info.columns)
            note = f" (withheld from you: {', '.join(info.withheld)})" if info.withheld else ""
            lines.append(f"- {info.name} ({info.rows} rows): {cols}{note}")
        return "\n".join(lines)


class DuckDBStore:
    """The `duckdb` store kind: a built variant's raw or executed tables."""

    name = "duckdb"
    language = "sql"
    default = True

    def open(self, built: Built, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> SqlExecutor:
        if data == "raw":
            return SqlExecutor.open(built.duckdb_path, built.pack.tables, guard, timeout)
        if data == "executed":
            return SqlExecutor.open(built.executed_duckdb_path, built.pack.executed_tables,
                                    guard, timeout)
        raise HarnessBroken(f"the DuckDB store has no '{data}' data (raw or executed)")

    def from_context(self, context: str, guard: Guard) -> SqlExecutor:
        from pytest_kgbench.reading import tables_from_text

        tables = tables_from_text(context)
        return SqlExecutor(database_from_csv_text(tables),
                           {n: s for n, (s, _) in tables.items()}, guard)

    def classify(self, guard: Guard, statement: str) -> str | None:
        import duckdb

        con = duckdb.connect(":memory:")
        try:
            return guard.check_sql(con, statement)
        finally:
            con.close()

    def check(self) -> str | None:
        return None


STORES = (DuckDBStore(),)
