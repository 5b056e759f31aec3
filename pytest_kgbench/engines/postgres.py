"""PostgreSQL: the SQL store kind `postgres` (`--sql-engine postgres=DSN`), a real server behind
the same guard as DuckDB.

The DSN names a database and a user that may create schemas and roles there (the loader). A
variant's tables (raw or executed) are loaded once per build fingerprint and data into a schema
of their own, typed as the pack declares (text in the "C" collation, so strings compare and
sort byte by byte as in DuckDB), in one transaction under an advisory lock: two xdist workers
opening the same variant at once load it once, and a schema that exists is complete (its row in
`kgbench.loads` is the marker). Each persona has a login role of its own: a persona that
withholds columns reads views without them (the restricted build's tables, as DuckDB has them),
and its role's column privileges on the tables under the views grant only the other columns, so
PostgreSQL itself refuses a withheld column however a query reaches it. The functions outside
the guard's list (`guard.POSTGRES_FUNCTIONS`: no session signals, advisory locks, large
objects, NOTIFY, transaction ids, settings or SQL text run by a function) are not executable by
PUBLIC in the database, so a persona role may not call one the guard let through
(`revoke_functions`; it takes a superuser loader). A query runs as that role, one statement
(the extended protocol) in a READ ONLY transaction with `SET LOCAL statement_timeout`, after
the guard's classification (the guard classifies; the engine defends); its result is capped as
DuckDB's is (`executors.fill_capped`), the rows past the cap counted on the server (MOVE), not
sent. The client runs in a worker process (`sql.WorkerSqlExecutor`: memory limited, killed at
the deadline). A query that ends its own session (pg_terminate_backend) is that query's error:
the connection is opened again and the store goes on; a server that cannot be reached again
halts the run.

Nothing this module records (a store's `label`, an error message) shows the DSN's password.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.core.settings import REDACTED, redact_secrets
from pytest_kgbench.engines import CAPS, Caps, QueryResult, fill_capped, jsonable
from pytest_kgbench.engines.guard import FULL, POSTGRES_FUNCTIONS, Guard, classify_sql
from pytest_kgbench.engines.sql import (
    SqlExecutor,
    WorkerSqlExecutor,
    chunks,
    parser_connection,
)
from pytest_kgbench.engines.stores import StoreKind
from pytest_kgbench.packs.schema import TableSpec

if TYPE_CHECKING:
    from pytest_kgbench.packs.build import StoreSource

INSTALL = "pip install 'pytest-kgbench[postgres]'"
USAGE = "--sql-engine postgres=postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
LOAD_FORMAT = 1  # bump when what a load writes changes: every variant is then loaded afresh
LOCK_KEY = 0x6B6762656E6368  # one advisory lock ('kgbench') for every load into a database
PG_TYPES = {
    "VARCHAR": 'text COLLATE "C"',  # byte order, as DuckDB compares and sorts strings
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "DOUBLE": "double precision",
    "DECIMAL": "numeric(18,3)",     # DuckDB's DECIMAL without a width is DECIMAL(18,3)
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "BOOLEAN": "boolean",
}


def _psycopg() -> Any:
    import psycopg

    return psycopg


def ident(*parts: str, limit: int = 63) -> str:
    """A lower-case identifier ([a-z0-9_]) of `parts` joined by `_`, cut to PostgreSQL's 63
    bytes with a hash of the whole when longer (so it needs no quoting anywhere)."""
    text = "_".join(re.sub(r"[^a-z0-9_]+", "_", p.lower()).strip("_") for p in parts if p)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 9]}_{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def schema_of(source: StoreSource, data: str) -> str:
    """The schema holding a build's `data` tables: named from the build's fingerprint (it
    changes whenever one of the build's files does), so a changed build loads afresh."""
    digest = hashlib.sha256(f"{LOAD_FORMAT}|{source.fingerprint}".encode()).hexdigest()[:12]
    return ident("kgb", source.pack, source.variant, str(source.seed), digest, data)


def withheld_of(guard: Guard, specs: Mapping[str, TableSpec]) -> dict[str, frozenset[str]]:
    """table -> the columns of it `guard`'s persona may not read (tables withholding none left
    out)."""
    out = {}
    for name, spec in specs.items():
        cols = guard.withheld_columns(name) & {c for c, _ in spec.columns}
        if cols:
            out[name] = frozenset(cols)
    return out


@dataclass(frozen=True)
class Layout:
    """A loaded variant's data on the server: its schema, and the secret persona roles' names
    and passwords derive from (kept in the database, readable only by the loader)."""

    schema: str
    secret: str
    pack: str

    def role(self, persona: str) -> str:
        tag = hashlib.sha256(self.secret.encode()).hexdigest()[:6]
        return ident("kgb", tag, self.pack, persona)

    def password(self, persona: str) -> str:
        return hmac.new(self.secret.encode(), self.role(persona).encode(),
                        hashlib.sha256).hexdigest()[:32]

    def search_path(self, guard: Guard, specs: Mapping[str, TableSpec]) -> str:
        """Where the persona's queries find the tables: the views without its withheld
        columns, or the tables themselves when it withholds none."""
        return ident(self.schema, guard.persona) if withheld_of(guard, specs) else self.schema


_LOADED: dict[tuple[str, str], Layout] = {}
_LOADING = threading.Lock()


def ensure_loaded(dsn: str, source: StoreSource, data: str, specs: Mapping[str, TableSpec]
                  ) -> Layout:
    """Load `data` ("raw" or "executed") of a build into the server, unless it is there
    already; once per process and schema (a load in another process is found by its marker)."""
    schema = schema_of(source, data)
    with _LOADING:
        if (dsn, schema) in _LOADED:
            return _LOADED[(dsn, schema)]
        psycopg = _psycopg()
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10,
                             application_name="kgbench-load") as con:
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
                layout = Layout(schema=schema, secret=_secret(con), pack=source.pack)
                revoke_functions(con)
                done = con.execute("SELECT 1 FROM kgbench.loads WHERE schema_name = %s",
                                   [schema]).fetchone()
                if done is None:
                    _load(con, source, data, specs, layout)
        _LOADED[(dsn, schema)] = layout
        return layout


def _secret(con: Any) -> str:
    """The database's kgbench secret (made on the first load): persona roles' names and
    passwords derive from it, so every process computes them and nobody else can."""
    con.execute("CREATE SCHEMA IF NOT EXISTS kgbench")
    con.execute("REVOKE ALL ON SCHEMA kgbench FROM PUBLIC")
    con.execute("CREATE TABLE IF NOT EXISTS kgbench.secret (value text NOT NULL)")
    con.execute("CREATE TABLE IF NOT EXISTS kgbench.loads (schema_name text PRIMARY KEY, "
                "pack text, variant text, seed integer, data text, tables jsonb, "
                "loaded_at timestamptz NOT NULL DEFAULT now())")
    row = con.execute("SELECT value FROM kgbench.secret LIMIT 1").fetchone()
    if row is not None:
        return str(row[0])
    value = secrets.token_hex(32)
    con.execute("INSERT INTO kgbench.secret VALUES (%s)", [value])
    return value


# what PostgreSQL calls the guard's functions where its own names differ (count(*) is count,
# EXTRACT extract (PostgreSQL 14 on), TRIM btrim, SUBSTRING(x FROM 2) substr, LIKE ... ESCAPE
# like_escape, percentile_cont WITHIN GROUP percentile_cont, SIMILAR TO similar_to_escape)
PG_SPELLINGS = frozenset({"count", "extract", "btrim", "substr", "strpos", "percentile_cont",
                          "percentile_disc", "similar_to_escape", "like_escape"})
WALLS_FORMAT = 1  # bump when what revoke_functions takes changes: every database is redone
# the functions PostgreSQL calls for something else than a call by name: an operator's (a
# comparison, a LIKE, an addition) and its estimators, a cast's, a type's input, output and
# subscript, an index's support, an aggregate's steps, a range's, an encoding conversion's
SUPPORT = """
    SELECT oprcode::oid AS f FROM pg_operator
    UNION SELECT oprrest::oid FROM pg_operator UNION SELECT oprjoin::oid FROM pg_operator
    UNION SELECT castfunc FROM pg_cast
    UNION SELECT unnest(ARRAY[typinput::oid, typoutput::oid, typreceive::oid, typsend::oid,
                              typmodin::oid, typmodout::oid, typanalyze::oid{subscript}])
          FROM pg_type
    UNION SELECT amproc::oid FROM pg_amproc
    UNION SELECT unnest(ARRAY[aggtransfn::oid, aggfinalfn::oid, aggcombinefn::oid,
                              aggserialfn::oid, aggdeserialfn::oid, aggmtransfn::oid,
                              aggminvtransfn::oid, aggmfinalfn::oid]) FROM pg_aggregate
    UNION SELECT unnest(ARRAY[rngcanonical::oid, rngsubdiff::oid]) FROM pg_range
    UNION SELECT conproc::oid FROM pg_conversion
"""


def kept_functions() -> frozenset[str]:
    """The functions (by PostgreSQL's names) a persona role may still execute: the guard's."""
    return POSTGRES_FUNCTIONS.names | PG_SPELLINGS


def revoke_functions(con: Any) -> bool:
    """Within the caller's transaction (under the load's lock): take EXECUTE from PUBLIC on
    every function of pg_catalog and information_schema PUBLIC may execute, but those the
    guard admits (by PostgreSQL's names: `kept_functions`) and those PostgreSQL calls for an
    operator, a cast, a type, an index or an aggregate's steps (`SUPPORT`); give it back on
    those the list has come to admit since. So a function the guard's list forgets — or a text
    DuckDB's parser reads otherwise than PostgreSQL's — is still denied to the persona roles
    by PostgreSQL itself. Once per database and list (`kgbench.revoked` keeps what was taken;
    pg_proc is each database's own, so no other database changes). PUBLIC's grants on
    pg_catalog are the bootstrap superuser's: a loader that is not a superuser cannot take
    them, and False says the guard's list alone then refuses those functions."""
    from psycopg import sql

    if not con.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
                       ).fetchone()[0]:
        return False
    keep = sorted(kept_functions())
    digest = hashlib.sha256(json.dumps([WALLS_FORMAT, keep]).encode()).hexdigest()
    con.execute("CREATE TABLE IF NOT EXISTS kgbench.revoked (signature text PRIMARY KEY)")
    con.execute("CREATE TABLE IF NOT EXISTS kgbench.walls (digest text NOT NULL)")
    if con.execute("SELECT 1 FROM kgbench.walls WHERE digest = %s", [digest]).fetchone():
        return True
    back = [r[0] for r in con.execute(
        "SELECT r.signature FROM kgbench.revoked r JOIN pg_proc p "
        "ON p.oid = to_regprocedure(r.signature) WHERE p.proname = ANY(%s)", [keep])]
    subscript = ", typsubscript::oid" if int(con.info.server_version) >= 140000 else ""
    take = [r[0] for r in con.execute(
        f"WITH support AS ({SUPPORT.format(subscript=subscript)}) "
        "SELECT p.oid::regprocedure::text FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname IN ('pg_catalog', 'information_schema') "
        "AND p.proname <> ALL(%s) "
        "AND p.oid NOT IN (SELECT f FROM support WHERE f IS NOT NULL) "
        "AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner)))"
        " a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE') ORDER BY 1", [keep])]
    for how, signatures in (("GRANT EXECUTE ON ROUTINE {} TO PUBLIC", back),
                            ("REVOKE EXECUTE ON ROUTINE {} FROM PUBLIC", take)):
        for i in range(0, len(signatures), 500):
            con.execute(sql.SQL(how).format(sql.SQL(", ").join(
                sql.SQL(s) for s in signatures[i:i + 500])))
    con.execute("DELETE FROM kgbench.revoked WHERE signature = ANY(%s)", [back])
    with con.cursor() as cursor:
        cursor.executemany("INSERT INTO kgbench.revoked VALUES (%s) ON CONFLICT DO NOTHING",
                           [[s] for s in take])
    con.execute("DELETE FROM kgbench.walls")
    con.execute("INSERT INTO kgbench.walls VALUES (%s)", [digest])
    return True


def _load(con: Any, source: StoreSource, data: str, specs: Mapping[str, TableSpec],
          layout: Layout) -> None:
    """Within the caller's transaction: the schema, its tables filled from the build's full
    DuckDB file, the personas' roles, views and grants, and the marker row."""
    from psycopg import sql

    from pytest_kgbench.engines.sql import connect, lock

    files = source.files(FULL)
    duckdb_file = files.duckdb if data == "raw" else files.executed_duckdb
    if duckdb_file is None:
        raise HarnessBroken(f"{source.label} has no executed tables to load")
    schema = sql.Identifier(layout.schema)
    con.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(schema))  # not kgbench's
    con.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    counts: dict[str, int] = {}
    duck = lock(connect(str(duckdb_file), read_only=True))
    try:
        for name, spec in specs.items():
            table = sql.Identifier(layout.schema, name)
            cols = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(PG_TYPES[t]))
                for c, t in spec.columns)
            con.execute(sql.SQL("CREATE TABLE {} ({})").format(table, cols))
            names = sql.SQL(", ").join(sql.Identifier(c) for c, _ in spec.columns)
            quoted = ", ".join(f'"{c}"' for c, _ in spec.columns)
            cursor = duck.execute(f'SELECT {quoted} FROM "{name}"')
            count = 0
            with con.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, names)) \
                    as copy:
                while batch := cursor.fetchmany(4096):
                    for row in batch:
                        copy.write_row(row)
                    count += len(batch)
            counts[name] = count
            con.execute(sql.SQL("ANALYZE {}").format(table))
    finally:
        duck.close()
    invoker = int(con.info.server_version) >= 150000  # views checking the reader's privileges
    for persona, reads in source.readers.items():
        guard = Guard(persona=persona, reads_personal=reads, personal=dict(source.personal))
        _grant(con, layout, guard, specs, invoker)
    con.execute("INSERT INTO kgbench.loads (schema_name, pack, variant, seed, data, tables) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                [layout.schema, source.pack, source.variant, source.seed, data,
                 json.dumps(counts)])


def _grant(con: Any, layout: Layout, guard: Guard, specs: Mapping[str, TableSpec],
           invoker: bool) -> None:
    """The persona's role (made if new: a login role that can do nothing but read what it is
    granted, its transactions read-only by default) and what it may read of this schema."""
    from psycopg import sql

    role = layout.role(guard.persona)
    ident_role = sql.Identifier(role)
    if con.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone() is None:
        con.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                            "NOINHERIT NOREPLICATION NOBYPASSRLS PASSWORD {}").format(
            ident_role, sql.Literal(layout.password(guard.persona))))
        con.execute(sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(
            ident_role))
        try:
            with con.transaction():  # a superuser's setting: skipped when the loader is not
                con.execute(sql.SQL("ALTER ROLE {} SET temp_file_limit = '1GB'").format(
                    ident_role))
        except _psycopg().Error:
            pass
    base = sql.Identifier(layout.schema)
    con.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(base, ident_role))
    withheld = withheld_of(guard, specs)
    if not withheld:
        con.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
            base, ident_role))
        return
    views = layout.search_path(guard, specs)
    con.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(views)))
    con.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(views),
                                                                 ident_role))
    options = sql.SQL(" WITH (security_invoker = true)" if invoker else "")
    for name, spec in specs.items():
        kept = sql.SQL(", ").join(sql.Identifier(c) for c, _ in spec.columns
                                  if c not in withheld.get(name, frozenset()))
        table, view = sql.Identifier(layout.schema, name), sql.Identifier(views, name)
        con.execute(sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(kept, table, ident_role))
        con.execute(sql.SQL("CREATE VIEW {}{} AS SELECT {} FROM {}").format(
            view, options, kept, table))
        con.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(view, ident_role))


class SessionEnded(Exception):
    """The query ended its own session on the server (pg_terminate_backend): its error; the
    store has opened a new one."""


class PostgresExecutor(SqlExecutor):
    """The DuckDB executor's run (guard, deadline, caps) on a persona's connection to
    PostgreSQL: each statement alone in a READ ONLY transaction, stopped by the server's
    statement_timeout (and, at the same deadline, a cancel from this side). As a store's
    worker runs it (`sql_worker`), or in-process for the tests (`PostgresStore.local`)."""

    title = "PostgreSQL"
    functions = POSTGRES_FUNCTIONS

    # many parameters: SqlExecutor's five, then keyword-only options
    def __init__(self, con: Any, specs: Mapping[str, TableSpec], guard: Guard,
                 timeout: float = 60.0, caps: Caps = CAPS, *, label: str = "postgres",
                 hide: tuple[str, ...] = (), params: Mapping[str, Any] | None = None) -> None:
        super().__init__(con, specs, guard, timeout, caps)
        self.label = label
        self._hide = tuple(h for h in hide if h)
        self._params = dict(params or {})  # how to connect again
        self._parsing: Any = None

    @classmethod
    def connect(cls, params: Mapping[str, Any], specs: Mapping[str, TableSpec], guard: Guard,
                timeout: float = 60.0, caps: Caps = CAPS, *, label: str = "postgres",
                hide: tuple[str, ...] = ()) -> PostgresExecutor:
        """A persona's connection made from `params` (psycopg.connect's keywords)."""
        ex = cls(None, specs, guard, timeout, caps, label=label, hide=hide, params=params)
        try:
            ex.con = ex._open()
        except _psycopg().Error as exc:
            raise HarnessBroken(f"cannot connect to PostgreSQL at {label}: "
                                f"{ex._message(exc)}") from exc
        return ex

    def _open(self) -> Any:
        return _psycopg().connect(**self._params, autocommit=True, connect_timeout=10)

    def _parser(self) -> Any:
        self._parsing = parser_connection()  # this thread's: the timer interrupts it
        return self._parsing

    def _execute(self, statement: str, result: QueryResult) -> None:
        """The statement as the body of a cursor (DECLARE takes one SELECT or VALUES, sent by
        the extended protocol: never a batch), in a READ ONLY transaction, fetched a few rows
        at a time while the cap wants more and the rest counted on the server; each FETCH under
        `statement_timeout` set to what is left of the store's timeout, so the server stops the
        query at the deadline."""
        psycopg = _psycopg()
        deadline = time.monotonic() + self.timeout
        self._begin()
        try:
            try:
                self._time_left(deadline)
                with self.con.cursor(name="kgbench_result", binary=True) as cursor:
                    cursor.execute(statement)
                    columns = [d.name for d in cursor.description or []]
                    rows = _Rows(self, cursor, deadline)
                    fill_capped(result, columns, rows, jsonable, self.caps, skip=rows.skip)
            finally:
                if not self.con.broken:
                    self._rollback()
        except psycopg.OperationalError as exc:
            if not self.con.broken:
                raise
            why = self._message(exc)
            self._reconnect(why)
            raise SessionEnded(f"{why} (the query ended its own session on the server; the "
                               f"store opened a new one)") from exc

    def _begin(self) -> None:
        """BEGIN READ ONLY, on a connection opened again first if the last one was lost
        between queries (a server restart, an administrator): not the next query's doing."""
        psycopg = _psycopg()
        if self.con.closed:
            self._reconnect("the connection was closed")
        try:
            self.con.execute("BEGIN READ ONLY")
        except psycopg.OperationalError as exc:
            if not self.con.broken:
                raise
            self._reconnect(self._message(exc))
            self.con.execute("BEGIN READ ONLY")

    def _reconnect(self, why: str) -> None:
        """The persona's connection made again; HarnessBroken if the server does not take it
        (the store is gone: a broken harness, never a graded query)."""
        psycopg = _psycopg()
        try:
            self.con.close()
        except psycopg.Error:
            pass
        try:
            self.con = self._open()
        except psycopg.Error as exc:
            raise HarnessBroken(f"the PostgreSQL server of {self.label} stopped answering: "
                                f"{why}; connecting again failed: {self._message(exc)}"
                                ) from exc

    def _time_left(self, deadline: float) -> None:
        milliseconds = max(1, round((deadline - time.monotonic()) * 1000))
        self.con.execute(f"SET LOCAL statement_timeout = {milliseconds}")

    def _rollback(self) -> None:
        psycopg = _psycopg()
        for _ in range(2):  # a cancel at the deadline may land on the first
            try:
                self.con.execute("ROLLBACK")
                return
            except psycopg.Error:
                if self.con.broken:
                    raise
        self.con.execute("ROLLBACK")

    def _interrupt(self) -> None:
        parsing = self._parsing
        if parsing is not None:
            parsing.interrupt()
        try:
            self.con.cancel_safe(timeout=5.0)
        except Exception:  # noqa: BLE001 - nothing running, or the server gone: run() says
            pass

    def _timed_out(self, exc: BaseException) -> bool:
        """The server's statement_timeout; a cancel the query sent itself
        (pg_cancel_backend) is its own error, with the server's words."""
        return (isinstance(exc, _psycopg().errors.QueryCanceled)
                and "statement timeout" in str(exc))

    def _message(self, exc: BaseException) -> str:
        text = (str(exc) if isinstance(exc, SessionEnded)
                else f"{type(exc).__name__}: {exc}".strip())
        for secret in self._hide:
            text = text.replace(secret, REDACTED)
        return redact_secrets(text)

    def _count(self, name: str) -> int:
        from psycopg import sql

        row = self.con.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(name))).fetchone()
        return int(row[0])

    def settings(self) -> dict[str, Any]:
        return {"database": self.label,
                "server_version": int(self.con.info.server_version)}


class _Rows:
    """A server cursor's rows, fetched a few at a time while the cap wants them (each FETCH
    under what is left of the deadline); `skip` passes over the rest on the server (MOVE),
    counting them without sending them."""

    def __init__(self, executor: PostgresExecutor, cursor: Any, deadline: float) -> None:
        self.executor = executor
        self.cursor = cursor
        self.deadline = deadline
        self.buffer: deque[Any] = deque()
        self.sizes = chunks()
        self.done = False

    def __iter__(self) -> Iterator[Any]:
        while True:
            if not self.buffer:
                if self.done:
                    return
                size = next(self.sizes)
                self.executor._time_left(self.deadline)
                batch = self.cursor.fetchmany(size)
                self.done = len(batch) < size
                self.buffer.extend(batch)
                if not self.buffer:
                    return
            yield self.buffer.popleft()

    def skip(self, wanted: int) -> int:
        from psycopg import sql

        passed = min(wanted, len(self.buffer))
        for _ in range(passed):
            self.buffer.popleft()
        if passed == wanted or self.done:
            return passed
        self.executor._time_left(self.deadline)
        moved = self.executor.con.execute(sql.SQL("MOVE FORWARD {} FROM {}").format(
            sql.Literal(wanted - passed), sql.Identifier(self.cursor.name)))
        return passed + max(0, int(moved.rowcount))


class PostgresStore(StoreKind):
    """The `postgres` store kind: a built variant's raw or executed tables on a PostgreSQL
    server, named by `--sql-engine postgres=DSN` (the bound kind's `label` shows the DSN
    with its password as ***)."""

    name = "postgres"
    language = "sql"
    default = False

    def __init__(self, dsn: str = "") -> None:
        self.dsn = dsn

    @property
    def label(self) -> str:
        return f"{self.name}={redact_secrets(self.dsn)}" if self.dsn else self.name

    def __repr__(self) -> str:
        return f"PostgresStore({self.label})"

    def configure(self, argument: str) -> PostgresStore:
        return PostgresStore(argument.strip())

    def check(self) -> str | None:
        try:
            psycopg = _psycopg()
        except ImportError:
            return f"the postgres engine needs psycopg 3: {INSTALL}"
        if not self.dsn:
            return f"the postgres engine needs a DSN: {USAGE}"
        if re.search(r":\*\*\*@|password\s*=\s*\*\*\*", self.dsn):
            return (f"{self.label}: the DSN's password is redacted (a stored run keeps it so): "
                    f"name the engine again with its password, or leave the password out of "
                    f"the DSN and set PGPASSWORD or ~/.pgpass")
        try:
            with psycopg.connect(self.dsn, connect_timeout=10) as con:
                con.execute("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - any failure: the server cannot be used
            return f"cannot connect to PostgreSQL at {self.label}: {self._redact(str(exc))}"
        return None

    def _redact(self, text: str) -> str:
        password = _password(self.dsn)
        if password:
            text = text.replace(password, REDACTED)
        return redact_secrets(text)

    def open(self, source: StoreSource, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> WorkerSqlExecutor:
        """The persona's store: its connection held by a worker process (memory limited,
        killed at a query's deadline), made now, so a server that refuses it stops the run
        here with the reason."""
        specs, params, hide = self._session(source, data, guard)
        executor = WorkerSqlExecutor.start(
            "postgres", {"connect": params, "label": self.label, "hide": list(hide)}, specs,
            guard, timeout, title="PostgreSQL", functions=POSTGRES_FUNCTIONS, network=True)
        try:
            executor.info  # noqa: B018
        except HarnessBroken:
            executor.close()
            raise
        return executor

    def local(self, source: StoreSource, data: str, guard: Guard, *,
              timeout: float = 60.0) -> PostgresExecutor:
        """The executor a store's worker runs, in this process (the tests reach the
        database beneath the guard through it)."""
        specs, params, hide = self._session(source, data, guard)
        return PostgresExecutor.connect(params, specs, guard, timeout, label=self.label,
                                        hide=hide)

    def _session(self, source: StoreSource, data: str, guard: Guard
                 ) -> tuple[Mapping[str, TableSpec], dict[str, Any], tuple[str, ...]]:
        """The tables of `data`, loaded; how the persona's role connects; the secrets no
        message may show."""
        if not self.dsn:
            raise HarnessBroken(f"the postgres engine needs a DSN: {USAGE}")
        if data == "raw":
            specs = source.tables
        elif data == "executed" and source.executed_tables:
            specs = source.executed_tables
        else:
            raise HarnessBroken(f"the PostgreSQL store has no '{data}' data (raw or executed)")
        psycopg = _psycopg()
        try:
            layout = ensure_loaded(self.dsn, source, data, specs)
        except psycopg.Error as exc:
            raise HarnessBroken(f"{source.label} cannot be opened on "
                                f"{self.label}: {self._redact(str(exc))}") from exc
        params = {"conninfo": self.dsn, "user": layout.role(guard.persona),
                  "password": layout.password(guard.persona), "application_name": "kgbench",
                  "options": f"-c search_path={layout.search_path(guard, specs)} "
                             "-c default_transaction_read_only=on"}
        return specs, params, (_password(self.dsn), layout.password(guard.persona))

    def from_context(self, context: str, guard: Guard, caps: Caps = CAPS) -> None:
        return None  # the reading gold agent's store is the default engine's

    def classify(self, guard: Guard, statement: str) -> str | None:
        return classify_sql(parser_connection(), statement, guard,
                            functions=POSTGRES_FUNCTIONS).refused


def _password(dsn: str) -> str:
    """The password a DSN carries ('' if none, or if it cannot be read)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        return str(conninfo_to_dict(dsn).get("password") or "")
    except Exception:  # noqa: BLE001 - no psycopg, or a DSN libpq cannot parse
        return ""


STORES = (PostgresStore(),)
