"""Executors: read-only, no external access, bounded in time, guarded, reporting reads."""

from __future__ import annotations

import pytest

from pytest_kgbench.executors.guard import Guard
from pytest_kgbench.executors.sparql import SparqlExecutor
from pytest_kgbench.executors.sql import SqlExecutor
from pytest_kgbench.stores import guard_for

ANALYST = "analyst"


@pytest.fixture
def sql(credit_base):
    ex = SqlExecutor.open(credit_base.duckdb_path, credit_base.pack.tables,
                          guard_for(credit_base, ANALYST), timeout=2.0)
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def sparql(credit_base):
    return SparqlExecutor(credit_base.graph, guard_for(credit_base, ANALYST), timeout=1.0)


def test_sql_runs_and_reports_the_tables_it_read(sql) -> None:
    res = sql.run("SELECT i.lei, count(*) AS n FROM issuers i JOIN instruments USING (issuer_id) "
                  "GROUP BY 1")
    assert res.ok and res.columns == ["lei", "n"] and res.rows
    assert res.reads == ["instruments", "issuers"]
    with_cte = sql.run("WITH x AS (SELECT * FROM countries) SELECT count(*) FROM x")
    assert with_cte.reads == ["countries"]


@pytest.mark.parametrize("statement", [
    "DELETE FROM rating_actions",
    "UPDATE countries SET name = 'x'",
    "INSERT INTO countries VALUES ('XZ', 'Nowhere', 'AAA', 0)",
    "DROP TABLE issuers",
    "CREATE TABLE t AS SELECT 1",
    "SELECT 1; DELETE FROM issuers",
    "ATTACH ':memory:' AS other",
    "COPY issuers TO '/tmp/kgbench-leak.csv'",
])
def test_sql_writes_are_refused(sql, statement: str) -> None:
    res = sql.run(statement)
    assert res.refused and "not allowed" in res.refused
    assert sql.run("SELECT count(*) FROM rating_actions").ok


def test_the_database_itself_is_read_only_beneath_the_guard(credit_base) -> None:
    import duckdb

    ex = SqlExecutor.open(credit_base.duckdb_path, credit_base.pack.tables,
                          Guard(persona="x"), timeout=2.0)
    with pytest.raises(duckdb.Error, match="read-only"):
        ex.con.execute("DELETE FROM countries")
    ex.close()


def test_sql_has_no_external_access(sql) -> None:
    res = sql.run("SELECT * FROM read_csv('/etc/passwd')")
    assert not res.ok and "disabled" in (res.error or "").lower()


def test_sql_timeout_stops_a_long_query(sql) -> None:
    res = sql.run("SELECT count(*) FROM range(1000000000000) a WHERE a.range % 7 = 3")
    assert res.timed_out and not res.ok
    assert res.elapsed_s < 10
    assert sql.run("SELECT 1 AS one").rows == [[1]]


def test_personal_columns_are_refused_to_an_analyst(sql, credit_base) -> None:
    for statement in ("SELECT email FROM contacts", "SELECT * FROM contacts",
                      "SELECT c.phone FROM contacts c JOIN issuers USING (issuer_id)"):
        res = sql.run(statement)
        assert res.refused and "personal data" in res.refused, statement
    assert sql.run("SELECT name, role FROM contacts").ok
    officer = SqlExecutor.open(credit_base.duckdb_path, credit_base.pack.tables,
                               guard_for(credit_base, "privacy_officer"))
    assert officer.run("SELECT email FROM contacts").ok
    officer.close()


def test_sql_catalog_withholds_personal_columns(sql) -> None:
    contacts = next(t for t in sql.catalog() if t.name == "contacts")
    assert "email" not in dict(contacts.columns) and contacts.withheld == ("email", "phone")
    assert "withheld" in sql.describe("contacts")


def test_sparql_runs_reports_reads_and_refuses_updates(sparql) -> None:
    res = sparql.run("PREFIX cr: <https://kgbench.example/credit/def#> "
                     "SELECT ?n WHERE { ?c a cr:Country ; cr:name ?n }")
    assert res.ok and len(res.rows) == 8
    assert res.reads == ["cr:Country", "cr:name"]
    upd = sparql.run("PREFIX cr: <https://kgbench.example/credit/def#> "
                     "DELETE WHERE { ?c cr:name ?n }")
    assert upd.refused and "not allowed" in upd.refused
    assert len(sparql.run("PREFIX cr: <https://kgbench.example/credit/def#> "
                          "SELECT ?n WHERE { ?c a cr:Country ; cr:name ?n }").rows) == 8


def test_sparql_personal_properties_are_refused(sparql) -> None:
    res = sparql.run("PREFIX cr: <https://kgbench.example/credit/def#> "
                     "SELECT ?e WHERE { ?c cr:email ?e }")
    assert res.refused and "personal data" in res.refused
    via_path = sparql.run("PREFIX cr: <https://kgbench.example/credit/def#> "
                          "SELECT ?e WHERE { ?i ^cr:issuer/cr:phone ?e }")
    assert via_path.refused


def test_sparql_timeout_stops_a_long_query(sparql) -> None:
    res = sparql.run("SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }")
    assert res.timed_out
    assert res.elapsed_s < 10


def test_syntax_errors_are_errors_not_refusals(sql, sparql) -> None:
    assert sql.run("SELEC 1").error and not sql.run("SELEC 1").refused
    assert sparql.run("SELECT ?x WHERE {").error
