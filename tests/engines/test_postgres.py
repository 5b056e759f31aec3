"""The `postgres` SQL engine against a real PostgreSQL server the session starts
(tests/pg_server.py): the same answers as DuckDB, and the database's own defences beneath the
guard — the persona's role cannot read a withheld column, nothing it runs can write, a query
stops at statement_timeout — with the DSN's password in nothing recorded."""

from __future__ import annotations

import json
import multiprocessing
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO
from pytest_kgbench.asking.tools import call_tool
from pytest_kgbench.core.settings import Settings, redact_secrets
from pytest_kgbench.engines import QueryResult
from pytest_kgbench.engines.stores import open_store

ANALYST, OFFICER = "analyst", "privacy_officer"


@pytest.fixture(scope="module")
def dsn(pg_server) -> str:
    """A database of this module's own on the session's server (its loader's DSN)."""
    return pg_server.database()


def pg_store(built, where, persona, dsn, timeout=60.0):
    return open_store(built, where, persona, engines={"sql": f"postgres={dsn}"},
                      timeout=timeout)


@pytest.fixture
def both(credit_base, dsn):
    """The analyst's raw store on PostgreSQL and on DuckDB."""
    pg = pg_store(credit_base, "sql", ANALYST, dsn, timeout=1.0)
    duck = open_store(credit_base, "sql", ANALYST, timeout=1.0)
    yield pg, duck
    pg.close()
    duck.close()


@pytest.fixture
def local(credit_base, dsn):
    """The executor the analyst's store worker runs, in this process: the database beneath
    the guard (`_execute` runs a statement the guard never saw)."""
    from pytest_kgbench.engines.postgres import PostgresStore
    from pytest_kgbench.engines.stores import guard_for

    ex = PostgresStore(dsn).local(credit_base.source, "raw", guard_for(credit_base, ANALYST),
                                  timeout=1.0)
    yield ex
    ex.close()


@contextmanager
def granted(dsn: str, built, persona: str, *functions: str):
    """EXECUTE on `functions` (signatures) given to the persona's role for the block: what
    the database refuses it otherwise, to test what lies past that wall."""
    import psycopg

    role = _role_dsn(dsn, built, persona)["user"]
    with psycopg.connect(dsn, autocommit=True) as con:
        for f in functions:
            con.execute(f'GRANT EXECUTE ON FUNCTION {f} TO "{role}"')
    try:
        yield
    finally:
        with psycopg.connect(dsn, autocommit=True) as con:
            for f in functions:
                con.execute(f'REVOKE EXECUTE ON FUNCTION {f} FROM "{role}"')


def _schema(built, data="raw") -> str:
    from pytest_kgbench.engines.postgres import schema_of

    return schema_of(built.source, data)


def _role_dsn(dsn: str, built, persona: str) -> dict:
    """How the persona's own role logs in (the executor's connection, opened by hand)."""
    from pytest_kgbench.engines.postgres import _LOADED

    layout = next(v for (d, s), v in _LOADED.items() if d == dsn and s == _schema(built))
    return {"conninfo": dsn, "user": layout.role(persona),
            "password": layout.password(persona), "autocommit": True}


# --- what the stores show --------------------------------------------------------------------

@pytest.mark.parametrize("where", ["sql", "executed"])
@pytest.mark.parametrize("persona", [ANALYST, OFFICER])
def test_catalog_description_and_store_block_are_duckdbs(credit_base, dsn, where,
                                                         persona) -> None:
    pg = pg_store(credit_base, where, persona, dsn)
    duck = open_store(credit_base, where, persona)
    try:
        assert pg.catalog() == duck.catalog()
        assert pg.catalog() and all(t.rows for t in pg.catalog())
        for info in duck.catalog():
            assert pg.describe(info.name) == duck.describe(info.name)
        assert pg.store_block().splitlines()[0] == "## The store: PostgreSQL (SQL)"
        assert pg.store_block().splitlines()[1:] == duck.store_block().splitlines()[1:]
    finally:
        pg.close()
        duck.close()


def test_typed_values_caps_and_byte_order_are_duckdbs(both) -> None:
    """Dates, doubles, booleans, NULLs and strings come back as DuckDB gives them; a result
    past the row cap is capped and counted the same; strings sort byte by byte ('A+' < 'A-'
    < 'AA', as in DuckDB; a linguistic collation would not)."""
    pg, duck = both
    for statement in (
            "SELECT isin, issue_date, maturity_date, amount_mn, amount_mn > 100 AS big "
            "FROM instruments ORDER BY isin",
            "SELECT a.action_id, c.country_code, a.action_date, a.outlook FROM rating_actions a, "
            "countries c ORDER BY 1, 2",
            "SELECT DISTINCT rating FROM rating_actions WHERE rating IS NOT NULL ORDER BY 1",
            "SELECT sum(amount_mn) AS total, avg(ceiling_uplift) AS uplift, count(*) AS n "
            "FROM instruments, countries",
            "SELECT country_code FROM countries WHERE sovereign_rating <= 'A-' ORDER BY 1",
            "SELECT isin FROM instruments WHERE isin = 'nothing'"):
        a, b = pg.run(statement), duck.run(statement)
        assert a.ok, (statement, a.error)
        assert (a.columns, a.rows, a.row_count, a.row_count_exact, a.truncated, a.reads) == \
            (b.columns, b.rows, b.row_count, b.row_count_exact, b.truncated, b.reads), statement
    capped = pg.run("SELECT a.action_id FROM rating_actions a, countries c")
    assert capped.truncated and len(capped.rows) == pg.caps.rows < capped.row_count


def test_every_pack_type_comes_back_as_duckdbs(dsn) -> None:
    """Each SQL type a pack may declare, stored as the loader stores it (its PostgreSQL type,
    filled by COPY from DuckDB's values) and read back as a result cell, plain and aggregated,
    is DuckDB's cell."""
    import datetime as dt

    import duckdb
    import psycopg

    from pytest_kgbench.engines import jsonable
    from pytest_kgbench.engines.postgres import PG_TYPES
    from pytest_kgbench.packs.schema import SQL_TYPES

    assert set(PG_TYPES) == set(SQL_TYPES)
    values = {"VARCHAR": "Zoë's", "INTEGER": 7, "BIGINT": 2 ** 40, "DOUBLE": 0.1,
              "DECIMAL": "12.345", "DATE": dt.date(2024, 2, 29),
              "TIMESTAMP": dt.datetime(2024, 2, 29, 23, 59, 58), "BOOLEAN": True}
    cols = [(f"c_{t.lower()}", t) for t in SQL_TYPES]
    duck = duckdb.connect()
    duck.execute("CREATE TABLE t (" + ", ".join(f"{c} {t}" for c, t in cols) + ")")
    duck.execute("INSERT INTO t VALUES (" + ", ".join("?" for _ in cols) + ")",
                 [values[t] for _, t in cols])
    duck.execute("INSERT INTO t SELECT * FROM t")  # two rows, for the aggregates
    duck.execute("INSERT INTO t (c_varchar) VALUES (NULL)")  # and a row of NULLs
    queries = ["SELECT * FROM t ORDER BY c_varchar NULLS LAST",
               "SELECT sum(c_integer) AS a, sum(c_bigint) AS b, sum(c_double) AS c, "
               "sum(c_decimal) AS d, avg(c_integer) AS e, max(c_date) AS f, "
               "max(c_timestamp) AS g, bool_and(c_boolean) AS h, count(c_varchar) AS i FROM t"]
    want = [[[jsonable(v) for v in row] for row in duck.execute(q).fetchall()] for q in queries]
    with psycopg.connect(dsn, autocommit=True) as con, con.transaction(force_rollback=True):
        con.execute("CREATE TEMP TABLE t (" + ", ".join(f"{c} {PG_TYPES[t]}" for c, t in cols)
                    + ")")
        with con.cursor().copy("COPY t FROM STDIN") as copy:
            for row in duck.execute("SELECT * FROM t").fetchall():
                copy.write_row(row)
        cursor = con.cursor(binary=True)
        got = [[[jsonable(v) for v in row] for row in cursor.execute(q).fetchall()]
               for q in queries]
    assert got == want


# --- the database's own defences, beneath the guard ---------------------------------------------

def test_a_withheld_column_is_refused_by_postgres_itself(credit_base, dsn, both, local) -> None:
    import psycopg

    pg, _ = both
    # the guard refuses first, naming the column
    assert "Cannot select from columns [email]" in pg.run("SELECT email FROM contacts").refused
    # past the guard: the analyst's tables are views without the column ...
    with pytest.raises(psycopg.errors.UndefinedColumn):
        local._execute("SELECT email FROM contacts", QueryResult("sql", ""))
    # ... and the table beneath them grants its role every column but the withheld ones
    schema = _schema(credit_base)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        local._execute(f"SELECT email FROM {schema}.contacts", QueryResult("sql", ""))
    with psycopg.connect(**_role_dsn(dsn, credit_base, ANALYST)) as con:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute(f"SELECT phone FROM {schema}.contacts")
    with psycopg.connect(**_role_dsn(dsn, credit_base, ANALYST)) as con:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute(f"SELECT * FROM {schema}.contacts")
    with psycopg.connect(**_role_dsn(dsn, credit_base, ANALYST)) as con:
        allowed = con.execute(f"SELECT count(contact_id) FROM {schema}.contacts").fetchone()
        assert allowed[0] == credit_base.manifest["tables"]["contacts"]["rows"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the loader's own schema
            con.execute("SELECT * FROM kgbench.secret")
    # the persona who may read it reads it, from the same table
    officer = pg_store(credit_base, "sql", OFFICER, dsn)
    try:
        res = officer.run("SELECT email FROM contacts WHERE email IS NOT NULL LIMIT 1")
        assert res.ok and "@" in res.rows[0][0]
    finally:
        officer.close()


def test_a_write_is_refused_by_the_database_even_past_the_guard(credit_base, dsn, both,
                                                                local) -> None:
    import psycopg

    pg, _ = both
    assert pg.run("INSERT INTO contacts (contact_id) VALUES ('x')").refused  # the guard
    # past the guard: every statement runs in a READ ONLY transaction (the role may read the
    # setting only when granted it: current_setting is not the guard's to offer) ...
    shown = QueryResult("sql", "")
    with granted(dsn, credit_base, ANALYST, "current_setting(text)"):
        local._execute("SELECT current_setting('transaction_read_only') AS ro", shown)
    assert shown.rows == [["on"]]
    # ... as the body of a cursor, which takes one query and no data-modifying WITH ...
    for statement in ("CREATE TABLE kept (a integer)",
                      "WITH w AS (INSERT INTO contacts (contact_id) VALUES ('x') RETURNING 1) "
                      "SELECT * FROM w",
                      "SELECT 1; CREATE TABLE kept (a integer)"):
        with pytest.raises((psycopg.errors.SyntaxError, psycopg.errors.FeatureNotSupported)):
            local._execute(statement, QueryResult("sql", ""))
    # ... and is rolled back: what a read-only transaction still lets a SELECT do (create a
    # large object: the role may not, unless granted it) does not outlive it
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="lo_create"):
        local._execute("SELECT lo_create(0) AS oid", QueryResult("sql", ""))
    with granted(dsn, credit_base, ANALYST, "lo_create(oid)"):
        local._execute("SELECT lo_create(0) AS oid", QueryResult("sql", ""))
    with psycopg.connect(dsn) as con:
        assert con.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
    # the role's own sessions are read-only too, whatever it sends
    schema = _schema(credit_base)
    with psycopg.connect(**_role_dsn(dsn, credit_base, ANALYST)) as con:
        for statement in ("CREATE TEMP TABLE kept (a integer)",
                          f"INSERT INTO {schema}.contacts (contact_id) VALUES ('x')",
                          f"CREATE TABLE {schema}.kept (a integer)"):
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                con.execute(statement)
    # nothing was written
    assert pg.run("SELECT count(*) AS n FROM contacts").rows == \
        [[credit_base.manifest["tables"]["contacts"]["rows"]]]
    assert pg.run("SELECT 1 AS one").rows == [[1]]  # and the store goes on


def test_a_slow_query_stops_at_statement_timeout(credit_base, dsn, both, local) -> None:
    import psycopg

    pg, duck = both
    started = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
        local._execute("SELECT count(*) FROM generate_series(1, 10000000000)",
                       QueryResult("sql", ""))  # no guard, no client timer
    assert time.monotonic() - started < 4
    # through the guard, a query too big for its time ends as DuckDB's does
    huge = ("SELECT count(*) FROM rating_actions a, rating_actions b, rating_actions c, "
            "rating_actions d, rating_actions e")
    a, b = pg.run(huge), duck.run(huge)
    assert a.timed_out and b.timed_out
    assert (a.error, a.rows, a.ok) == (b.error, b.rows, b.ok) == ("stopped after 1 s", [], False)
    assert a.elapsed_s < 5
    assert pg.run("SELECT 1 AS one").rows == [[1]]


def test_a_server_that_is_gone_halts_the_run_not_the_grade(pg_server, credit_base) -> None:
    """The store's connection lost is the harness's failure (HarnessBroken), never a query
    error the model would be graded on."""
    import psycopg

    from pytest_kgbench.core.errors import HarnessBroken

    dsn = pg_server.database()
    store = pg_store(credit_base, "sql", ANALYST, dsn)
    name = dsn.rsplit("/", 1)[1]
    with psycopg.connect(pg_server.dsn, autocommit=True) as con:  # the database is gone
        con.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        con.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE usename LIKE 'kgb\\_%%' AND datname = %s", [name])
    with pytest.raises(HarnessBroken, match="stopped answering"):
        store.run("SELECT count(*) FROM issuers")
    store.close()


def test_a_connection_lost_between_queries_is_opened_again(pg_server, credit_base) -> None:
    """The store's session ended from outside (an administrator, a restart) while no query
    ran: the next query opens a new one and is answered, neither a halt nor a graded error."""
    import psycopg

    dsn = pg_server.database()
    store = pg_store(credit_base, "sql", ANALYST, dsn)
    assert store.run("SELECT count(*) AS n FROM issuers").ok
    with psycopg.connect(dsn, autocommit=True) as con:
        ended = con.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE usename LIKE 'kgb\\_%' AND datname = current_database()"
                            ).fetchone()[0]
    assert ended == 1
    res = store.run("SELECT count(*) AS n FROM issuers")
    assert res.ok and res.rows == [[credit_base.manifest["tables"]["issuers"]["rows"]]]
    store.close()


# --- issue 32: a query cannot stop the run, nor call what the list does not offer -------------

SESSION_KILL = "SELECT pg_terminate_backend(pg_backend_pid()) AS ended"
SELF_CANCEL = "SELECT pg_cancel_backend(pg_backend_pid()) AS cancelled"
# what ran on PostgreSQL at d89df2a (issue 32, item 2), each with the signature to grant it by
OUTSIDE_THE_LIST = {
    "pg_terminate_backend": (SESSION_KILL, "pg_terminate_backend(integer, bigint)"),
    "pg_cancel_backend": (SELF_CANCEL, "pg_cancel_backend(integer)"),
    "query_to_xml": ("SELECT query_to_xml('SELECT rolname FROM pg_roles', true, true, '')",
                     "query_to_xml(text, boolean, boolean, text)"),
    "database_to_xml": ("SELECT database_to_xml(true, true, '')",
                        "database_to_xml(boolean, boolean, text)"),
    "pg_advisory_lock": ("SELECT pg_advisory_lock(30240810224169832)",
                         "pg_advisory_lock(bigint)"),
    "lo_creat": ("SELECT lo_creat(-1)", "lo_creat(integer)"),
    "pg_notify": ("SELECT pg_notify('kgbench', 'x')", "pg_notify(text, text)"),
    "txid_current": ("SELECT txid_current()", "txid_current()"),
    "current_setting": ("SELECT current_setting('data_directory')", "current_setting(text)"),
    "pg_sleep": ("SELECT pg_sleep(0)", "pg_sleep(double precision)"),
}


def test_a_query_that_ends_its_own_session_is_its_own_failed_query(credit_base, dsn) -> None:
    """Issue 32, item 1: `pg_terminate_backend(pg_backend_pid())` halted the run (HarnessBroken,
    and the MCP server failed every later call). Through the tool, as the MCP server runs it,
    the guard refuses it by name; the store goes on either way."""
    pg = pg_store(credit_base, "sql", ANALYST, dsn, timeout=5.0)
    try:
        for statement in (SESSION_KILL, SELF_CANCEL):
            text, res = call_tool(pg, "run_query", {"query": statement})
            assert res is not None and not res.ok and not res.timed_out, text
            assert statement.split("(")[0].split()[-1] in text  # the function, by name
            after = pg.run("SELECT count(*) AS n FROM issuers")
            assert after.ok and after.rows == [[credit_base.manifest["tables"]["issuers"]["rows"]]]
    finally:
        pg.close()


def test_past_the_guard_and_the_grant_a_session_kill_is_still_the_querys_error(
        credit_base, dsn, local) -> None:
    """The wall beneath both others: a role that could end its own session (granted it here,
    the guard's list widened) gets its query's error with the server's own words, the
    connection is opened again, and the next query is answered; a cancel it sends itself is
    reported as what it is, not as the deadline (it came back in 0.1 s labelled 'stopped after
    5 s' at d89df2a)."""
    from dataclasses import replace

    local.functions = replace(local.functions, names=local.functions.names
                              | {"pg_terminate_backend", "pg_cancel_backend", "pg_backend_pid"})
    local.timeout = 5.0
    with granted(dsn, credit_base, ANALYST, "pg_terminate_backend(integer, bigint)",
                 "pg_cancel_backend(integer)", "pg_backend_pid()"):
        first = local.con.info.backend_pid
        res = local.run(SESSION_KILL)
        assert not res.ok and not res.timed_out and not res.refused, res
        assert "terminating connection" in res.error and "ended its own session" in res.error
        assert local.con.info.backend_pid != first  # a new session
        assert local.run("SELECT count(*) AS n FROM issuers").ok
        res = local.run(SELF_CANCEL)
        assert not res.ok and not res.timed_out, res
        assert "canceling statement due to user request" in res.error
        assert local.run("SELECT 1 AS one").rows == [[1]]


def test_functions_outside_the_list_are_refused_by_name_and_denied_by_postgres(
        credit_base, dsn, local, pg_server) -> None:
    """Issue 32, item 2: each function that ran at d89df2a is refused by the guard, naming it,
    and — past the guard — denied by PostgreSQL itself to the persona's role; no advisory lock
    outlives the query; every function the list offers stays executable by the role."""
    import psycopg

    from pytest_kgbench.engines.postgres import kept_functions

    pg = pg_store(credit_base, "sql", ANALYST, dsn)
    try:
        for name, (statement, _) in OUTSIDE_THE_LIST.items():
            res = pg.run(statement)
            assert res.refused and f"{name}()" in res.refused, (name, res)
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=name):
                local._execute(statement, QueryResult("sql", ""))
    finally:
        pg.close()
    role = _role_dsn(dsn, credit_base, ANALYST)["user"]
    with psycopg.connect(dsn, autocommit=True) as con:
        assert con.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                           ).fetchone() == (0,)
        refused = con.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'pg_catalog' AND p.proname = ANY(%s) "
            "AND NOT has_function_privilege(%s, p.oid, 'EXECUTE')",
            [sorted(kept_functions()), role]).fetchall()
        assert refused == []
        offered = con.execute("SELECT count(DISTINCT p.proname) FROM pg_proc p "
                              "WHERE p.proname = ANY(%s)", [sorted(kept_functions())]
                              ).fetchone()[0]
        assert offered > 80


# --- loading --------------------------------------------------------------------------------------

def _load(dsn: str, cache: str, seen) -> None:
    from pytest_kgbench.engines.postgres import ensure_loaded
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import find_pack

    pack = find_pack("credit", REPO / "datasets", REPO / "ontology")
    built = build_variant(pack, "base", Path(cache))
    seen.wait()  # both processes load at the same moment
    ensure_loaded(dsn, built.source, "raw", pack.tables)


def test_two_processes_loading_at_once_load_once(pg_server, credit_base, kg_cache) -> None:
    """What two xdist workers do on their first item: the advisory lock makes one load and
    the other find it loaded (without it the second would fail on CREATE SCHEMA, or load the
    rows twice)."""
    import psycopg

    from pytest_kgbench.engines import postgres

    dsn = pg_server.database()
    # spawn, not fork: this process has DuckDB's and pyoxigraph's threads running, and a
    # forked child inherits their locks held and their objects half-made (it crashed in the
    # garbage collector on CI); a fresh interpreter is what an xdist worker is anyway
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_load, args=(dsn, str(kg_cache), barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    schema = _schema(credit_base)
    with psycopg.connect(dsn) as con:
        loads = con.execute("SELECT schema_name, tables FROM kgbench.loads").fetchall()
        assert [row[0] for row in loads] == [schema]
        for name, meta in credit_base.manifest["tables"].items():
            count = con.execute(f'SELECT count(*) FROM {schema}."{name}"').fetchone()[0]
            assert count == meta["rows"] == loads[0][1][name], name
        stamp = con.execute("SELECT loaded_at FROM kgbench.loads").fetchone()
        # strings in the "C" collation: compared and sorted byte by byte, as DuckDB does,
        # whatever the database's own locale
        assert con.execute("SELECT DISTINCT collation_name FROM information_schema.columns "
                           "WHERE table_schema = %s AND data_type = 'text'",
                           [schema]).fetchall() == [("C",)]
    # a process that never saw it loads nothing again: the marker is found
    postgres._LOADED.pop((dsn, schema), None)
    postgres.ensure_loaded(dsn, credit_base.source, "raw", credit_base.pack.tables)
    with psycopg.connect(dsn) as con:
        assert con.execute("SELECT loaded_at FROM kgbench.loads").fetchone() == stamp


# --- the DSN's password --------------------------------------------------------------------------

def test_a_dsns_password_is_redacted_wherever_it_is_shown(pg_server) -> None:
    from pytest_kgbench.core.registry import default
    from pytest_kgbench.engines.postgres import PostgresStore
    from pytest_kgbench.engines.stores import find_kind

    secret = "s3cr3t-pw"
    assert redact_secrets(f"postgresql://me:{secret}@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert redact_secrets(f"host=db user=me password={secret} dbname=x") == \
        "host=db user=me password=*** dbname=x"
    assert redact_secrets(f"postgresql://db/x?user=me&password={secret}") == \
        "postgresql://db/x?user=me&password=***"
    assert redact_secrets("postgresql://me@db/x") == "postgresql://me@db/x"
    kind = find_kind(default(), "sql", f"postgres=postgresql://me:{secret}@127.0.0.1:1/x")
    assert kind.name == "postgres"
    assert kind.label == "postgres=postgresql://me:***@127.0.0.1:1/x"
    assert secret not in repr(kind)
    # the settings record it redacted, and hand workers the real one
    settings = Settings.at(REPO, engines={"sql": f"postgres=postgresql://me:{secret}@h/x"})
    assert settings.to_dict()["engines"] == {"sql": "postgres=postgresql://me:***@h/x"}
    assert secret not in json.dumps(settings.to_dict())
    assert Settings.from_dict(json.loads(json.dumps(settings.to_dict(secrets=True)))) == settings
    # an error names the server, never the password
    wrong = pg_server.dsn.replace(pg_server.password, secret)
    problem = PostgresStore().configure(wrong).check()
    assert problem and "cannot connect" in problem and "***" in problem
    assert secret not in problem and pg_server.password not in problem
    redacted = PostgresStore().configure(redact_secrets(pg_server.dsn)).check()
    assert redacted and "redacted" in redacted


def test_check_says_what_is_missing(monkeypatch) -> None:
    """Each missing piece is named, whether or not psycopg is installed here (the README's
    first command does not install the postgres extra: this failed on such a clone)."""
    from pytest_kgbench.engines import postgres

    monkeypatch.setattr(postgres, "_psycopg", lambda: object())  # psycopg present
    assert "needs a DSN" in postgres.PostgresStore().check()

    def no_psycopg():
        raise ImportError("No module named 'psycopg'")

    monkeypatch.setattr(postgres, "_psycopg", no_psycopg)
    assert "pytest-kgbench[postgres]" in postgres.PostgresStore("postgresql://h/x").check()


# --- the gold agent on PostgreSQL: DuckDB's answers -------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("pack", ["credit", "research"])
def test_every_reference_query_gives_duckdbs_result(request, dsn, pack) -> None:
    """Every gold and trap query of the shipped SQL packs, raw and executed, for its own
    persona, on PostgreSQL and on DuckDB: the same columns, rows, errors and refusals (the
    packs' SQL is written to run on both: no DuckDB-only syntax)."""
    from pytest_kgbench.core.questions import load_questions

    built = request.getfixturevalue(f"{pack}_base")
    stores: dict = {}
    compared = 0
    try:
        for q in load_questions(REPO / "questions" / f"{pack}.yaml").questions:
            if q.variants and built.variant not in q.variants:
                continue
            for kind, refs in (("gold", q.gold), ("trap", q.trap)):
                for where in ("sql", "executed"):
                    if where not in refs:
                        continue
                    if (where, q.persona) not in stores:
                        stores[(where, q.persona)] = (pg_store(built, where, q.persona, dsn),
                                                      open_store(built, where, q.persona))
                    pg, duck = stores[(where, q.persona)]
                    a, b = pg.run(refs[where]), duck.run(refs[where])
                    assert (a.columns, a.rows, a.error, a.refused, a.row_count) == \
                        (b.columns, b.rows, b.error, b.refused, b.row_count), \
                        (q.id, kind, where, a.error)
                    compared += 1
    finally:
        for pair in stores.values():
            for store in pair:
                store.close()
    assert compared > 60


def _answers(run: Path) -> dict[str, tuple]:
    out = {}
    for line in (run / "answers.jsonl").read_text().splitlines():
        r = json.loads(line)
        queries = [(q["columns"], q["rows"], q["error"], q["refused"], q["timed_out"],
                    q["truncated"], q["row_count"]) for q in r["answer"]["queries"]]
        out[r["nodeid"]] = (r["grade"], r["answer"]["block"], queries,
                            [(f["name"], f["got"], f["ok"]) for f in r["fields"]])
    return out


@pytest.mark.slow
def test_gold_passes_on_postgres_with_duckdbs_answers(project, pg_server) -> None:
    """`pytest --agent gold --condition D1,D2,D3 --sql-engine postgres=DSN` on the credit and
    research packs (a sample of each tier), two workers loading a fresh database at once:
    every item passes, every graded answer (grade, fields, each query's result) is the DuckDB
    run's, and the run folder names the engine without its password."""
    dsn = pg_server.database()
    p = project()
    (p.path / "questions" / "research.yaml").write_text(
        (REPO / "questions" / "research.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    args = ("questions", "--agent", "gold", "--condition", "D1,D2,D3", "--sample", "2",
            "-p", "no:cacheprovider", "-p", "no:randomly")
    duck = p.runpytest_subprocess(*args, "--run-id", "duckdb")
    pg = p.runpytest_subprocess(*args, "--run-id", "postgres", "--sql-engine",
                                f"postgres={dsn}", "-n", "2")
    assert duck.ret == 0 and pg.ret == 0, pg.stdout.str()[-3000:]
    passed = duck.parseoutcomes()["passed"]
    assert passed >= 50 and pg.parseoutcomes() == {"passed": passed}
    a, b = _answers(p.path / "reports" / "postgres"), _answers(p.path / "reports" / "duckdb")
    assert a.keys() == b.keys() and len(a) == passed
    assert {k for k in a if a[k] != b[k]} == set()
    assert {v[0] for v in a.values()} == {"correct"}
    assert {k.split("::")[0] for k in a} == {"questions/credit.yaml", "questions/research.yaml"}
    # the run folder records the engine with the password redacted, and nowhere the password
    run = p.path / "reports" / "postgres"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["settings"]["engines"]["sql"] == "postgres=" + redact_secrets(dsn)
    assert "***@127.0.0.1" in meta["settings"]["engines"]["sql"]
    for path in run.rglob("*"):
        if path.is_file():
            assert pg_server.password not in path.read_text(errors="replace"), path


PG_BLOWUPS = [
    "SELECT repeat('x', 500000000) AS x",                          # a half-gigabyte cell
    "SELECT repeat('x', 1000000) AS x FROM generate_series(1, 100000)",  # 100 GB of rows
    "SELECT string_agg(CAST(x AS text), ',') AS s FROM generate_series(1, 300000000) x",
    "SELECT count(*) AS n FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
]


def test_a_result_blowup_on_postgres_stops_at_the_deadline_within_the_memory_cap(
        credit_base, dsn) -> None:
    """Issue 32, item 3 on PostgreSQL: the server's statement_timeout stops the query, and the
    client that receives its rows runs in a worker held to WORKER_MEMORY and killed at the
    deadline, so a gigabyte cell or a flood of wide rows neither outlives the deadline nor
    comes into this process; the rows past the cap are counted on the server, not sent."""
    import resource

    from peaks import address_space_limit, watched_run

    from pytest_kgbench.engines.worker import WORKER_MEMORY

    timeout = 2.0
    pg = pg_store(credit_base, "sql", ANALYST, dsn, timeout=timeout)
    try:
        assert address_space_limit(pg.worker.pid) == WORKER_MEMORY
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        for statement in PG_BLOWUPS:
            res, spent, peak, late = watched_run(pg, statement)
            assert spent <= timeout + 1.0 + late, (statement, spent, late)
            assert res.timed_out or (res.ok and res.truncated), (statement, res.error)
            assert 0 < peak.most <= WORKER_MEMORY, (statement, peak.peaks)
            assert pg.run("SELECT count(*) AS n FROM issuers").rows == \
                [[credit_base.manifest["tables"]["issuers"]["rows"]]]
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        assert grown < 256 << 20, grown
    finally:
        pg.close()


def test_what_the_model_reads_on_postgres_is_within_the_stated_cap(both) -> None:
    """Issue 32, item 5 on PostgreSQL: the tool's text within 30,000 characters, the rows past
    the cap counted on the server as DuckDB counts them."""
    from pytest_kgbench.engines import CAPS

    pg, duck = both
    pg.timeout = duck.timeout = 30.0
    for statement in ("SELECT * FROM rating_actions, countries",
                      "SELECT a.*, b.* FROM issuers a, issuers b",
                      "SELECT repeat('x', 5000) AS a, repeat('y', 5000) AS b "
                      "FROM generate_series(1, 50)",
                      "SELECT a.action_id FROM rating_actions a, rating_actions b, countries c"):
        text, res = call_tool(pg, "run_query", {"query": statement})
        assert res is not None and res.ok and res.truncated, (statement, res.error)
        assert len(text) <= CAPS.result_chars, (statement, len(text))
        if "generate_series" not in statement:
            other = duck.run(statement)
            assert (res.row_count, res.row_count_exact) == \
                (other.row_count, other.row_count_exact), statement
