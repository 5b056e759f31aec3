"""A fixed pack's data read through DuckDB: a folder of CSV or Parquet files, a DuckDB file,
optionally a DDL file that declares the tables first (docs/packs.md, "Data").

The table specs (columns and SQL types) are what DuckDB holds once the data is loaded: the
DDL's types where a DDL is given, else DuckDB's detection over the files. The rows come back
as Python values of the pack's types (Decimals as floats). Pure module: no pytest.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import InputError

SQL_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "DATE", "TIMESTAMP", "BOOLEAN")


@dataclass(frozen=True)
class TableSpec:
    """A table of a pack: its columns with SQL types, in order."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_key: str | None = None
    description: str = ""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)


# DuckDB's type names -> the pack's SQL types (packs.SQL_TYPES)
_INTEGER = {"TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT"}
_BIGINT = {"BIGINT", "HUGEINT", "UINTEGER", "UBIGINT", "UHUGEINT"}
_DOUBLE = {"FLOAT", "DOUBLE", "REAL"}


def pack_type(duckdb_type: str) -> str:
    """The pack's SQL type for a column DuckDB holds as `duckdb_type`."""
    base = duckdb_type.upper().split("(", 1)[0].strip()
    if base in _INTEGER:
        return "INTEGER"
    if base in _BIGINT:
        return "BIGINT"
    if base in _DOUBLE or base == "DECIMAL":
        return "DOUBLE"
    if base in ("DATE", "BOOLEAN"):
        return base
    if base.startswith("TIMESTAMP"):
        return "TIMESTAMP"
    return "VARCHAR"


@dataclass(frozen=True)
class DataSpec:
    """Where a fixed pack's data lives (a manifest's `data` entry, resolved)."""

    path: Path                      # a folder of CSV/Parquet files, or a .duckdb file
    ddl: Path | None = None         # SQL run first: it creates the tables with their types
    files: Mapping[str, str] = field(default_factory=dict)  # table -> file name, when they differ
    where: str = "pack.yaml"        # the manifest, for errors
    loader: str = ""                # a pack's "module:function" that loads the data itself


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def statements(ddl: str) -> list[str]:
    """The statements of a DDL file: comments dropped, split on semicolons outside quotes."""
    text = re.sub(r"--[^\n]*", "", ddl)
    out: list[str] = []
    buf: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ";":
            out.append("".join(buf).strip())
            buf = []
            continue
        buf.append(ch)
    out.append("".join(buf).strip())
    return [s for s in out if s]


def table_file(spec: DataSpec, table: str) -> Path | None:
    """The file a table is read from: the one `files` names, else <table>.csv or .parquet in
    the data folder (any case); None when there is none."""
    named = spec.files.get(table)
    if named:
        return spec.path / named
    for suffix in (".csv", ".parquet"):
        for candidate in (spec.path / f"{table}{suffix}", *spec.path.glob(f"*{suffix}")):
            if candidate.is_file() and candidate.stem.lower() == table.lower():
                return candidate
    return None


def _reader(path: Path) -> str:
    if path.suffix == ".parquet":
        return f"read_parquet({_sql_string(str(path))})"
    return f"read_csv({_sql_string(str(path))}, header = true)"


def load(spec: DataSpec, *, schema_only: bool = False,
         loader: Callable[[Any, Path], None] | None = None) -> Any:
    """An in-memory DuckDB connection holding the pack's tables (with `schema_only`, empty
    tables of the same columns and types: what a manifest without `tables` declares).

    With `loader` (the pack's `data.loader` function), the pack loads its data itself:
    `loader(con, folder)` creates and fills the tables of `con` from the data folder, for data
    the generic paths cannot read (a DDL that must be adapted first, files loaded under other
    names). Its tables are then read like any others (`schema_only` loads them all the same:
    the caller reads only their columns)."""
    import duckdb

    limit = " LIMIT 0" if schema_only else ""

    if not spec.path.exists():
        raise InputError(spec.where, f"the data {spec.path} does not exist", field="data")
    con = duckdb.connect(":memory:")
    if spec.loader:
        _load_by_loader(con, spec, loader)
    elif spec.path.is_file():
        _load_database(con, spec, limit)
    elif spec.ddl is not None:
        _load_by_ddl(con, spec, schema_only)
    else:
        _load_files(con, spec, limit)
    return con


def _load_by_loader(con: Any, spec: DataSpec,
                    loader: Callable[[Any, Path], None] | None) -> None:
    """Fill `con` through the pack's own loader (`data.loader`, resolved as `loader`)."""
    import duckdb

    if loader is None:
        raise InputError(spec.where, f"names the loader {spec.loader}, which was not "
                         "resolved", field="data.loader")
    try:
        loader(con, spec.path)
    except duckdb.Error as exc:
        raise InputError(spec.where, f"the pack's loader {spec.loader} failed: {exc}",
                         field="data.loader") from exc


def _load_database(con: Any, spec: DataSpec, limit: str) -> None:
    """Fill `con` with a copy of every table of the .duckdb file the data is."""
    if spec.path.suffix != ".duckdb":
        raise InputError(spec.where, f"{spec.path} is neither a folder of CSV/Parquet files "
                         "nor a .duckdb file", field="data")
    con.execute(f"ATTACH {_sql_string(str(spec.path))} AS src (READ_ONLY)")
    for (name,) in con.execute("SELECT table_name FROM information_schema.tables "
                               "WHERE table_catalog = 'src' AND table_schema = 'main' "
                               "ORDER BY table_name").fetchall():
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM src.main."{name}"{limit}')
    con.execute("DETACH src")


def _load_by_ddl(con: Any, spec: DataSpec, schema_only: bool) -> None:
    """Fill `con` with the tables the DDL declares, each loaded from its file (when it has
    one, and not `schema_only`)."""
    import duckdb

    assert spec.ddl is not None
    if not spec.ddl.is_file():
        raise InputError(spec.where, f"the DDL {spec.ddl} does not exist", field="data.ddl")
    for statement in statements(spec.ddl.read_text(encoding="utf-8")):
        try:
            con.execute(statement)
        except duckdb.Error as exc:
            raise InputError(str(spec.ddl), f"DuckDB cannot run '{statement[:80]}…': "
                             f"{exc}") from exc
    for name in table_names(con):
        path = table_file(spec, name)
        if path is None or schema_only:
            continue  # a table the DDL declares and the data leaves empty
        try:
            con.execute(f'INSERT INTO "{name}" BY NAME SELECT * FROM {_reader(path)}')
        except duckdb.Error as exc:
            raise InputError(str(path), f"cannot be loaded into table {name}: {exc}") from exc


def _load_files(con: Any, spec: DataSpec, limit: str) -> None:
    """Fill `con` with a table per CSV or Parquet file of the data folder, typed by DuckDB."""
    import duckdb

    found = sorted(p for p in spec.path.iterdir() if p.suffix in (".csv", ".parquet"))
    if not found:
        raise InputError(spec.where, f"{spec.path} holds no .csv or .parquet file", field="data")
    for path in found:
        try:
            con.execute(f'CREATE TABLE "{path.stem}" AS SELECT * FROM {_reader(path)}{limit}')
        except duckdb.Error as exc:
            raise InputError(str(path), f"DuckDB cannot read it: {exc}") from exc


def table_names(con: Any) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "ORDER BY table_name").fetchall()]


def columns(con: Any, table: str) -> list[tuple[str, str]]:
    """(column, pack SQL type) of a loaded table, in order."""
    rows = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                       "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position",
                       [table]).fetchall()
    return [(str(c), pack_type(str(t))) for c, t in rows]


def _plain(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0)
    return value


def rows(con: Any, table: str, names: list[str]) -> list[dict[str, Any]]:
    cols = ", ".join(f'"{c}"' for c in names)
    result = con.execute(f'SELECT {cols} FROM "{table}"').fetchall()
    return [{c: _plain(v) for c, v in zip(names, row)} for row in result]


def ddl(spec: TableSpec) -> str:
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
            con.execute(ddl(kept))
            types = ", ".join(f"'{c}': '{t}'" for c, t in spec.columns)
            cols = ", ".join(f'"{c}"' for c, _ in kept.columns)
            con.execute(
                f'INSERT INTO "{spec.name}" SELECT {cols} FROM read_csv(?, header = true, '
                f"columns = {{{types}}}, auto_detect = false, nullstr = '')",
                [str(csv_dir / f"{spec.name}.csv")])
        con.execute("CHECKPOINT")
    finally:
        con.close()
