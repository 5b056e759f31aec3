"""`kgbench query`: one query through exactly the executor, guard and tool an agent uses,
printed as JSON; a refusal is a result (exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_kgbench.cli import main

REPO = Path(__file__).resolve().parents[1]


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
