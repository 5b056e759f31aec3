"""`kgbench query`: one query through exactly the executor, guard and tool an agent uses,
printed as JSON; a refusal is a result (exit 0)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pytest_kgbench.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def query(kg_cache: Path, capsys: pytest.CaptureFixture[str], credit_base):
    def run(*args: str) -> tuple[int, dict]:
        code = main(["query", "--pack", "credit", "--root", str(REPO), "--cache",
                     str(kg_cache), *args])
        got = capsys.readouterr()
        return code, (json.loads(got.out) if code == 0 else {"stderr": got.err})
    return run


def test_the_issues_three_commands(query, credit_base) -> None:
    emails = {r["email"] for r in credit_base.tables["contacts"]}
    code, out = query("DELETE FROM issuers")
    assert code == 0 and "DELETE statements are not allowed" in out["result"]["refused"]
    assert out["shown"].startswith("REFUSED")
    code, out = query("SELECT * FROM read_csv('/etc/passwd')")
    assert code == 0 and "read_csv" in out["result"]["refused"]
    code, out = query("--persona", "analyst", "SELECT c FROM contacts c")
    assert code == 0 and out["result"]["rows"] and out["result"]["refused"] is None
    assert not [e for e in emails if e in json.dumps(out)]


def test_sparql_on_oxigraph_says_its_sandbox(query) -> None:
    code, out = query("--engine", "sparql", "--sparql-engine", "oxigraph",
                      "SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }")
    assert code == 0 and out["engine"] == "oxigraph" and "SERVICE" in out["result"]["refused"]
    assert "network namespace" in out["sandbox"]
    code, out = query("--condition", "D6", "--query-timeout", "1",
                      "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }")
    assert code == 0 and out["condition"] == "D6" and out["result"]["timed_out"]


def test_a_condition_picks_the_store_and_a_mismatch_is_a_usage_error(query) -> None:
    code, out = query("--condition", "D3", "SELECT count(*) AS n FROM rating_periods")
    assert code == 0 and out["result"]["rows"][0][0] > 0 and out["language"] == "sql"
    code, out = query("--condition", "D4", "--engine", "sql", "SELECT 1")
    assert code == 2 and "does not fit" in out["stderr"]
    code, out = query("--condition", "R1", "SELECT 1")
    assert code == 2 and "not a querying condition" in out["stderr"]


def test_a_query_that_would_end_the_session_is_a_result_on_postgres(query, pg_server) -> None:
    """Issue 32, item 1: on PostgreSQL `pg_terminate_backend(pg_backend_pid())` made `kgbench
    query` exit 2 (the harness broken). It is the query's own result, refused by name."""
    engine = f"postgres={pg_server.database()}"
    for statement in ("SELECT pg_terminate_backend(pg_backend_pid())",
                      "SELECT pg_cancel_backend(pg_backend_pid())"):
        code, out = query("--sql-engine", engine, statement)
        assert code == 0, out
        name = statement.split("(")[0].split()[-1]
        assert f"{name}()" in out["result"]["refused"] and not out["result"]["timed_out"]
    code, out = query("--sql-engine", engine, "SELECT count(*) AS n FROM issuers")
    assert code == 0 and out["result"]["rows"][0][0] > 0


def test_a_result_blowup_is_stopped_at_the_deadline(query) -> None:
    """Issue 32, item 3: a result DuckDB builds past its memory limit ends at --query-timeout,
    in a worker without network."""
    started = time.monotonic()
    code, out = query("--query-timeout", "2", "SELECT unnest(range(50000000)) AS n")
    assert time.monotonic() - started < 60  # the store's open and build included
    assert code == 0 and out["result"]["timed_out"], out
    assert out["result"]["elapsed_s"] <= 3.0
    assert out["shown"].startswith("FAILED: the query was stopped after the time limit")
    assert "network namespace" in out["sandbox"]
