"""The guard and the persona's store against the attack classes of the audit (issue 13): each
class by name, on DuckDB, rdflib and Oxigraph, through the executors the agents use.

The defence of withheld data is the store: the analyst's is built without the personal
columns and triples, so every route below returns no withheld value whatever the guard
thinks of it. The guard is the classifier in front: it refuses what must never run and names
the column when a query asks for withheld data.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_kgbench.engines.guard import Guard, classify_sparql, classify_sql
from pytest_kgbench.engines.stores import guard_for, open_store

CR = "PREFIX cr: <https://kgbench.example/credit/def#>\n"


@pytest.fixture(scope="module")
def withheld(credit_base) -> set[str]:
    """Every email and phone of credit/base: what the analyst must never see."""
    return {str(r[c]) for r in credit_base.tables["contacts"] for c in ("email", "phone")
            if r[c]}


# These tests are about what the guard refuses and what a result leaks, not about deadlines (the
# fuzz and limit tests are): a deadline of a few seconds would make a refusal read as a timeout
# whenever the machine held the parse back that long, so each store has a minute.
QUIET = 60.0


@pytest.fixture(scope="module")
def sql(credit_base):
    ex = open_store(credit_base, "sql", "analyst", timeout=QUIET)
    yield ex
    ex.close()


@pytest.fixture(scope="module", params=["rdflib", "oxigraph"])
def sparql(request, credit_base):
    ex = open_store(credit_base, "sparql", "analyst", engines={"sparql": request.param},
                    timeout=QUIET)
    yield ex
    ex.close()


def _leaks(result, values: set[str]) -> list[str]:
    text = str(result.to_dict()).casefold()
    return [v for v in values if v.casefold() in text]


# --- D1-D3: SQL routes to personal data -----------------------------------------------------

SQL_ROUTES = [
    "SELECT c FROM contacts c",                                   # whole-row reference
    "SELECT to_json(c) FROM contacts c",
    "SELECT c::VARCHAR FROM contacts c",
    "SELECT c['email'] FROM contacts c",                          # struct access
    "SELECT unnest(c) FROM contacts c",
    "SELECT * FROM contacts AS t(a, b, n, r, e, p)",              # alias list
    "SELECT e FROM contacts AS t(a, b, n, r, e, p)",
    "SELECT #5, #6 FROM contacts",                                # positional
    "SELECT COLUMNS('.*') FROM contacts",
    "SELECT COLUMNS('e.*|p.*') FROM contacts",
    "SELECT (c::VARCHAR)::INTEGER FROM contacts c",               # error carrying the value
    "SELECT CAST(c AS INTEGER) FROM contacts c",
    "SELECT string_agg(c::VARCHAR, ',') FROM contacts c",
    "SELECT * FROM contacts NATURAL JOIN (SELECT 'x@y.example' AS email)",  # yes/no probe
    "SELECT count(*) FROM contacts c WHERE c::VARCHAR LIKE '%@%'",
    "SELECT * FROM (SELECT * FROM contacts) s",
    "WITH x AS (SELECT * FROM contacts) SELECT x FROM x",
    "SELECT * EXCLUDE (name) FROM contacts",
    "SELECT hex(c::VARCHAR) FROM contacts c",
]


@pytest.mark.parametrize("statement", SQL_ROUTES)
def test_no_sql_route_reaches_a_withheld_value(sql, withheld, statement: str) -> None:
    res = sql.run(statement)
    assert not _leaks(res, withheld), (statement, res.rows[:2], res.error)
    if "x@y" in statement:
        assert not res.ok  # the analyst's contacts have no email to join on


def test_the_probe_gives_the_same_answer_for_a_true_and_a_false_guess(sql, credit_base) -> None:
    true = credit_base.tables["contacts"][0]["email"]
    answers = [sql.run(f"SELECT count(*) FROM contacts c WHERE contains(c::VARCHAR, '{g}')")
               for g in (true, "nobody@nowhere.example")]
    assert answers[0].rows == answers[1].rows == [[0]]


@pytest.mark.parametrize("statement, says", [
    ("SELECT * FROM query_table('contacts')", "query_table"),
    ("SELECT * FROM query('SELECT em' || 'ail FROM contacts')", "query"),
    ("SELECT * FROM pragma_storage_info('contacts')", "pragma_storage_info"),
    ("SELECT * FROM duckdb_columns()", "duckdb_columns"),
    ("SELECT * FROM information_schema.columns", "information_schema"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT * FROM read_text('/etc/hostname')", "read_text"),
    ("SELECT * FROM glob('/*')", "glob"),
    ("SELECT current_setting('memory_limit')", "current_setting"),
    ("PRAGMA storage_info('contacts')", "PRAGMA"),
    ("SET threads = 8", "SET"),
    ("RESET memory_limit", "SET"),
    ("SET VARIABLE x = (SELECT 1)", "SET"),
    ("CALL pragma_version()", "CALL"),
    ("EXPLAIN SELECT 1", "EXPLAIN"),
    ("DESCRIBE contacts", "describe tools"),
    ("SUMMARIZE contacts", "describe tools"),
    ("SHOW TABLES", "describe tools"),
    ("UPDATE EXTENSIONS", "not recognise"),
    ("WITH d AS (DELETE FROM contacts RETURNING *) SELECT * FROM d", "DELETE_QUERY_NODE"),
    ("SELECT 1; SELECT 2", "batches"),
    ("SELECT 1; DELETE FROM contacts", "batches"),
    ("ATTACH '/tmp/x.duckdb' AS x", "ATTACH"),
    ("LOAD httpfs", "LOAD"),
    ("INSTALL httpfs", "not allowed"),
    ("EXPORT DATABASE '/tmp/kgbench-export'", "EXPORT"),
    ("CHECKPOINT", "CALL"),
    ("SELECT email FROM contacts", "Access Denied: Cannot select from columns [email] in "
                                   "table contacts"),
    ("SELECT c.phone, c.email FROM contacts c", "columns [email, phone] in table contacts"),
    ("SELECT 'x' FROM contacts " + "x" * 25_000, "characters long"),
])
def test_sql_the_classifier_refuses(sql, statement: str, says: str) -> None:
    res = sql.run(statement)
    assert res.refused and says in res.refused, res.refused or res.error
    assert not res.rows


def test_sql_parser_errors_and_odd_text_are_errors_never_exceptions(sql) -> None:
    for statement in ("SELEC 1", "", "-- only a comment", "SELECT (" * 5000, "\x00",
                      "SELECT '\udcff'"):
        res = sql.run(statement)
        assert not res.ok and not res.rows, statement[:40]


# --- D4-D6: SPARQL routes ---------------------------------------------------------------------

SPARQL_ROUTES = [
    "SELECT ?o WHERE { ?s ?p ?o }",                                   # variable predicate
    "SELECT ?p ?o WHERE { ?s a <https://kgbench.example/credit/def#Contact> ; ?p ?o }",
    CR + "SELECT ?o WHERE { ?s !(cr:name|cr:role|a) ?o }",            # negated property set
    CR + "SELECT ?o WHERE { BIND(IRI(CONCAT(STR(cr:), 'em', 'ail')) AS ?p) ?s ?p ?o }",
    "SELECT ?o WHERE { ?s ?p ?o FILTER(CONTAINS(STR(?o), '@')) }",    # a filter on '@'
    "SELECT ?o WHERE { ?s ?p ?o FILTER(REGEX(STR(?o), '^[+][0-9]')) }",
    "SELECT (GROUP_CONCAT(STR(?o)) AS ?all) WHERE { ?s ?p ?o }",
    CR + "SELECT ?o WHERE { ?c a cr:Contact ; (!a)* ?o }",
]


@pytest.mark.parametrize("statement", SPARQL_ROUTES)
def test_no_sparql_route_reaches_a_withheld_value(sparql, withheld, statement: str) -> None:
    res = sparql.run(statement)
    assert not _leaks(res, withheld), (statement, res.rows[:2], res.error)


def test_an_ask_probe_is_false_for_a_true_guess(sparql, credit_base) -> None:
    true = credit_base.tables["contacts"][0]["email"]
    for guess in (true, "nobody@nowhere.example"):
        res = sparql.run(f"ASK {{ ?s ?p '{guess}' }}")
        assert res.ok and res.rows == [[False]]


@pytest.mark.parametrize("statement, says", [
    ("SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }", "SERVICE"),
    ("SELECT * WHERE { ?s ?p ?o OPTIONAL { SERVICE <http://127.0.0.1:9/> { ?s ?q ?r } } }",
     "SERVICE"),
    ("SELECT * WHERE { ?s ?p ?o FILTER EXISTS { SERVICE <http://127.0.0.1:9/> { ?s ?q ?r } } }",
     "SERVICE"),
    ("SELECT * WHERE { ?s ?p ?o MINUS { SERVICE SILENT <http://127.0.0.1:9/> { ?s ?p ?o } } }",
     "SERVICE"),
    ("SELECT * WHERE { GRAPH ?g { SERVICE ?x { ?s ?p ?o } } }", "SERVICE"),
    ("SELECT * WHERE { { SELECT * WHERE { SERVICE <http://127.0.0.1:9/> { ?s ?p ?o } } } }",
     "SERVICE"),
    ("SELECT * WHERE { SERVICE <file:///etc/passwd#> { ?s ?p ?o } }", "SERVICE"),
    ("SELECT * WHERE { \\u0053ERVICE <http://127.0.0.1:9/> { ?s ?p ?o } }", "SERVICE"),
    ("SELECT * FROM <http://127.0.0.1:9/data> WHERE { ?s ?p ?o }", "FROM"),
    ("SELECT * FROM NAMED <file:///etc/passwd> WHERE { GRAPH ?g { ?s ?p ?o } }", "FROM"),
    ("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", "CONSTRUCT"),
    ("DESCRIBE <https://kgbench.example/credit/id/contact/CT-0001>", "DESCRIBE"),
    ("DELETE WHERE { ?s ?p ?o }", "updates"),
    ("LOAD <http://127.0.0.1:9/x>", "updates"),
    ("CLEAR ALL", "updates"),
    (CR + "SELECT ?e WHERE { ?c cr:email ?e }", "Access Denied: Cannot select from columns "
                                                "[email] in table contacts (cr:email"),
    ("SELECT ?e WHERE { ?c cr:phone ?e }", "[phone]"),                # prefix of the store
    (CR + "SELECT ?e WHERE { ?i ^cr:issuer/(cr:email|cr:role) ?e }", "[email]"),
    ("SELECT * WHERE { ?s ?p 'x' } " + "#" * 25_000, "characters long"),
])
def test_sparql_the_classifier_refuses(sparql, statement: str, says: str) -> None:
    res = sparql.run(statement)
    assert res.refused and says in res.refused, res.refused or res.error
    assert not res.rows


@pytest.mark.parametrize("statement", [
    'VERSION "1.2" SELECT * WHERE { ?s ?p ?o }',                      # Oxigraph's SPARQL 1.2
    "SELECT * WHERE { ?s ?p ?o LATERAL { SELECT ?o WHERE { } } }",
    "SELECT * WHERE { ?s ?p ?o FILTER(isTRIPLE(?o)) }",
    "SELECT * WHERE { ?s ?p 'x'@en-US--ltr }",
    "SELECT * WHERE { <<( ?s ?p ?o )>> ?q ?r }",
    "SELECT * WHERE " + "{" * 60 + " ?s ?p ?o " + "}" * 60,           # RecursionError
    "SELECT * WHERE { ?s ?p ?o",
    "",
])
def test_sparql_what_a_parser_rejects_is_not_run(sparql, statement: str) -> None:
    """Never 'allow if unparseable': rdflib's parser (and on Oxigraph, Oxigraph's too) must
    accept a query for it to run; what it rejects is the query's error."""
    res = sparql.run(statement)
    assert not res.ok and not res.rows and (res.error or res.refused)


def test_a_query_both_parsers_accept_runs_on_both(credit_base) -> None:
    for engine in ("rdflib", "oxigraph"):
        ex = open_store(credit_base, "sparql", "analyst", engines={"sparql": engine})
        res = ex.run(CR + "SELECT (COUNT(?c) AS ?n) WHERE { ?c a cr:Country }")
        assert res.ok and res.rows == [[8]], engine
        ex.close()


# --- the classifier, without a store ----------------------------------------------------------

GUARD = Guard(persona="analyst", personal={"contacts": frozenset({"email", "phone"})})


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=300))
def test_the_classifiers_never_raise(text: str) -> None:
    import duckdb

    con = duckdb.connect(":memory:")
    for verdict in (classify_sql(con, text, GUARD), classify_sparql(text, GUARD)):
        assert verdict.runs or verdict.refused or verdict.error
    con.close()


def test_one_reading_of_a_text_serves_every_persona_and_store(credit_base) -> None:
    """rdflib's reading of a text is made once per process (evidence.read_sparql) and shared:
    each persona still gets its own verdict, whichever asked first, and bindings the text does
    not use do not change it."""
    from pytest_kgbench.packs.evidence import read_sparql

    read_sparql.cache_clear()
    ns = {"cr": "https://kgbench.example/credit/def#"}
    more = {**ns, "skos": "http://www.w3.org/2004/02/skos/core#", "owl": "http://x.invalid/#"}
    text = "SELECT ?o WHERE { ?c cr:email ?o }"
    analyst, officer = guard_for(credit_base, "analyst"), guard_for(credit_base, "privacy_officer")
    for order in ((analyst, officer), (officer, analyst)):
        verdicts = {g.persona: classify_sparql(text, g, ns if g is analyst else more)
                    for g in order}
        assert "Access Denied" in (verdicts["analyst"].refused or ""), verdicts
        assert verdicts["privacy_officer"].runs, verdicts
        assert verdicts["analyst"].iris == verdicts["privacy_officer"].iris
    assert read_sparql.cache_info().misses == 1  # one parse for all four verdicts


def test_a_store_prefix_spelt_with_escapes_is_bound_as_the_engine_binds_it(credit_base) -> None:
    """rdflib expands \\u escapes before it parses, so `\\u0063r:email` is `cr:email`: the
    reading is made with the store's `cr` bound, and the analyst is refused by name, not told
    the query cannot be read."""
    ns = {"cr": "https://kgbench.example/credit/def#", "x": "http://x.invalid/#"}
    verdict = classify_sparql("SELECT ?o WHERE { ?c \\u0063r:email ?o }",
                              guard_for(credit_base, "analyst"), ns)
    assert verdict.error is None and "Access Denied" in (verdict.refused or ""), verdict


def test_a_privacy_officers_store_holds_the_personal_data(credit_base, withheld) -> None:
    assert guard_for(credit_base, "privacy_officer").view == "full"
    assert guard_for(credit_base, "analyst").view == "restricted"
    for lang in ("sql", "sparql"):
        ex = open_store(credit_base, lang, "privacy_officer")
        query = ("SELECT email FROM contacts" if lang == "sql" else
                 CR + "SELECT ?e WHERE { ?c cr:email ?e }")
        res = ex.run(query)
        assert res.ok and {r[0] for r in res.rows} <= withheld and res.rows
        ex.close()


# --- issue 32: functions are admitted by list, per engine -------------------------------------

def _reference_sql(pack_name: str) -> list[tuple[str, str]]:
    """(where, text) of every gold and trap SQL query of a pack's questions."""
    import os
    from pathlib import Path

    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.packs.schema import find_pack

    repo = Path(__file__).resolve().parents[2]
    external = os.environ.get("KGBENCH_EXTERNAL")
    pack = find_pack(pack_name, repo / "datasets", repo / "ontology",
                     external=Path(external) if external else None)
    if pack.unavailable:
        pytest.skip(f"{pack_name}: {pack.unavailable}")
    out = []
    for path in pack.question_files:
        for q in load_questions(path, pack=pack_name, source=pack).questions:
            for refs in (q.gold, q.trap):
                out += [(f"{q.id} {where}", text) for where, text in (refs or {}).items()
                        if where in ("sql", "executed") and text]
    return out


@pytest.mark.parametrize("pack_name", ["credit", "research", "cwd-acme"])  # ck25's: SPARQL
def test_every_reference_query_passes_both_engines_lists(pack_name: str) -> None:
    """The lists are derived from what the packs' gold and trap SQL calls: no reference query
    is refused for a function, on DuckDB's guard or PostgreSQL's (a write the question expects
    refused is refused as a write)."""
    import duckdb

    from pytest_kgbench.engines.guard import DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS

    con = duckdb.connect(":memory:")
    queries = _reference_sql(pack_name)
    assert queries
    for where, text in queries:
        for functions in (DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS):
            verdict = classify_sql(con, text, Guard(reads_personal=True), functions=functions)
            assert verdict.runs or "statements are not allowed" in (verdict.refused or "") \
                or "batches" in (verdict.refused or ""), (where, functions.engine, verdict)
    con.close()


# what ran at d89df2a (issue 32, item 2), and what DuckDB's list leaves out the same way
OUTSIDE_THE_LISTS = [
    ("SELECT pg_terminate_backend(pg_backend_pid())", "pg_terminate_backend"),
    ("SELECT pg_cancel_backend(pg_backend_pid())", "pg_cancel_backend"),
    ("SELECT query_to_xml('SELECT rolname FROM pg_roles', true, true, '')", "query_to_xml"),
    ("SELECT database_to_xml(true, true, '')", "database_to_xml"),
    ("SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    ("SELECT pg_try_advisory_xact_lock(1)", "pg_try_advisory_xact_lock"),
    ("SELECT lo_creat(-1)", "lo_creat"),
    ("SELECT pg_notify('a', 'b')", "pg_notify"),
    ("SELECT txid_current()", "txid_current"),
    ("SELECT set_config('work_mem', '1TB', true)", "set_config"),
    ("SELECT current_setting('data_directory')", "current_setting"),
    ("SELECT * FROM query('SELECT 1')", "query"),
    ("SELECT getvariable('x')", "getvariable"),
    ("SELECT nextval('s')", "nextval"),
    ("SELECT version()", "version"),
    ("SELECT count(*) OVER (), pg_sleep(10)", "pg_sleep"),
    ("SELECT xpath('/a', '<a/>')", "xpath"),
    ("SELECT public.count(1)", "public.count"),
    ("SELECT * FROM contacts WHERE name = pg_read_file('/etc/passwd')", "pg_read_file"),
]


@pytest.mark.parametrize("statement, name", OUTSIDE_THE_LISTS)
def test_a_function_outside_the_list_is_refused_by_name_on_both_engines(statement: str,
                                                                         name: str) -> None:
    import duckdb

    from pytest_kgbench.engines.guard import DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS

    con = duckdb.connect(":memory:")
    for functions in (DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS):
        verdict = classify_sql(con, statement, GUARD, functions=functions)
        assert verdict.refused and f"{name}()" in verdict.refused, (functions.engine, verdict)
    con.close()


def test_the_lists_differ_where_the_engines_do(sql) -> None:
    """A DuckDB-only function is offered on DuckDB and refused by name on PostgreSQL's list,
    and the other way round; the store runs what its list offers."""
    import duckdb

    from pytest_kgbench.engines.guard import DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS

    con = duckdb.connect(":memory:")
    for statement, offered, refused in (
            ("SELECT median(amount_mn) FROM instruments", DUCKDB_FUNCTIONS, POSTGRES_FUNCTIONS),
            ("SELECT to_char(issue_date, 'YYYY') FROM instruments", POSTGRES_FUNCTIONS,
             DUCKDB_FUNCTIONS)):
        assert classify_sql(con, statement, GUARD, functions=offered).runs
        assert "()" in (classify_sql(con, statement, GUARD, functions=refused).refused or "")
    con.close()
    res = sql.run("SELECT median(amount_mn) AS m, count(*) AS n, "
                  "row_number() OVER () AS r FROM instruments")
    assert res.ok and res.rows, res.error


def test_docs_list_every_function_each_engine_offers() -> None:
    """docs/safety.md lists the functions a query may call, per engine, as the guard has them."""
    import re
    from pathlib import Path

    from pytest_kgbench.engines import guard

    text = (Path(__file__).resolve().parents[2] / "docs" / "safety.md").read_text("utf-8")
    sections = {
        "Both engines": guard.SQL_COMMON, "DuckDB also": guard.DUCKDB_ONLY,
        "PostgreSQL also": guard.POSTGRES_ONLY}
    for title, names in sections.items():
        block = re.split(r"\n- \*\*|\n\n", text[text.index(f"- **{title}") + 3:])[0]
        words = {w for item in re.findall(r"`([^`]+)`", block) for w in item.split()}
        assert set(names) <= words, (title, sorted(set(names) - words))
