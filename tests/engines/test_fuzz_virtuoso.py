"""The guard's fuzz (tests/engines/test_fuzz_guard.py) on Virtuoso: the same hostile SPARQL,
at least 2,000 examples, against the analyst's store on a real Virtuoso server that also holds
the privacy officer's graph with the planted sentinels, plus Virtuoso's own extensions
(`define input:`, `bif:` and `sql:` functions, its graph names) as explicit examples. Every
example is held to the fuzz's checks (no sentinel in anything the model sees, a probe answers
a true guess as a false one, the sentinel HTTP server gets no request, the deadline, no thread
left); at the end the server's graphs hold the triples they held before (no write)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest
from hypothesis import example, given
from test_fuzz_guard import (  # noqa: F401 - the fixtures are used by name
    EXAMPLES,
    FUZZ,
    PROBE,
    SPARQL_QUERIES,
    TIMEOUT,
    Harness,
    _hashes,
    sentinel,
    sentinel_built,
)
from virtuoso_server import session_server

from pytest_kgbench.engines.stores import open_store

virtuoso = pytest.fixture(scope="module")(session_server)

# Virtuoso's own ways past a dataset, and its SQL beneath SPARQL ({fullgraph}: the privacy
# officer's graph on the same server)
EXTENSIONS = [
    "define input:default-graph-uri <{fullgraph}> SELECT ?o WHERE { ?s ?p ?o }",
    "define input:named-graph-uri <{fullgraph}> SELECT ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
    "define input:same-as \"yes\" SELECT ?o WHERE { ?s ?p ?o }",
    "define get:soft \"replace\" SELECT * FROM <{url}/x.ttl> WHERE { ?s ?p ?o }",
    "SELECT ?o WHERE { GRAPH <{fullgraph}> { ?s ?p ?o } }",
    "SELECT ?g ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT ?o FROM <{fullgraph}> WHERE { ?s ?p ?o }",
    "SELECT ?o FROM NAMED <{fullgraph}> WHERE { GRAPH ?g { ?s ?p ?o } }",
    "SELECT (<bif:delay>(30) AS ?x) WHERE {}",
    "PREFIX b: <bif:> SELECT ?o WHERE { ?s ?p ?o . ?o b:contains '\"leak*\"' }",
    "SELECT (bif:file_to_string('/etc/passwd') AS ?x) WHERE {}",
    "SELECT (<sql:SPARQL_EVAL>('SELECT * FROM <{fullgraph}> WHERE { ?s ?p ?o }', '', 1) AS ?x)"
    " WHERE {}",
    "SELECT (<sql:RDF_GRAPH_USER_PERMS_SET>('{fullgraph}', 'nobody', 1) AS ?x) WHERE {}",
    "SELECT (<bif:http_get>('{url}/x') AS ?x) WHERE {}",
    "LOAD <{url}/x.ttl> INTO GRAPH <urn:x>",
    "SPARQL_UPDATE INSERT DATA { <x:a> <x:b> 'c' }",
    "SELECT * WHERE { SERVICE <{url}/sparql> { ?s ?p ?o } }",
    f"ASK {{ GRAPH <{{fullgraph}}> {{ ?s ?p '{PROBE}' }} }}",
    f"define input:default-graph-uri <{{fullgraph}}> ASK {{ ?s ?p '{PROBE}' }}",
]


class VirtuosoHarness(Harness):
    fullgraph = ""

    def fill(self, template: str) -> str:
        return super().fill(template.replace("{fullgraph}", self.fullgraph)
                            .replace("{FULLGRAPH}", self.fullgraph))


def graph_counts(server) -> dict[str, int]:
    """Every graph on the server and its triples, counted as the server's administrator."""
    from pytest_kgbench.engines.endpoint import Auth, request

    body = urllib.parse.urlencode({"query": "SELECT ?g (COUNT(*) AS ?n) WHERE { GRAPH ?g "
                                            "{ ?s ?p ?o } } GROUP BY ?g"}).encode()
    reply = request("POST", f"{server.query_url}-auth", body=body, timeout=60,
                    auth=Auth("dba", server.password),
                    headers={"Accept": "application/sparql-results+json",
                             "Content-Type": "application/x-www-form-urlencoded"})
    assert reply.status == 200, reply.text
    rows = json.loads(reply.body)["results"]["bindings"]
    return {r["g"]["value"]: int(r["n"]["value"]) for r in rows}


@pytest.fixture(scope="module")
def virtuoso_store(sentinel_built, sentinel, virtuoso):  # noqa: F811 - the fixtures above
    engines = {"sparql": virtuoso.engine}
    full = open_store(sentinel_built, "sparql", "privacy_officer", engines=engines,
                      timeout=TIMEOUT)
    store = open_store(sentinel_built, "sparql", "analyst", engines=engines, timeout=TIMEOUT)
    h = VirtuosoHarness(store, sentinel_built, sentinel)
    h.fullgraph = full.graph
    # the sentinels are on the server, in the privacy officer's graph: a leak would show
    assert "sntnl" in json.dumps(full.run("SELECT ?o WHERE { ?s ?p ?o }").rows)
    before = graph_counts(virtuoso)
    assert before[full.graph] > before[store.graph] > 0
    files = _hashes(sentinel_built)
    yield h
    store.close()
    full.close()
    assert _hashes(sentinel_built) == files
    assert graph_counts(virtuoso) == before  # no write reached the server
    if h.examples:  # the fuzz ran (not only the test of the extensions): all its examples
        assert h.examples >= EXAMPLES


def every_extension(test):
    for template in EXTENSIONS:
        test = example(template=template)(test)
    return test


def test_the_extensions_are_refused_or_never_parse(virtuoso_store) -> None:
    """Each of Virtuoso's own constructs ends before the server: refused by the guard (bif:,
    sql:, FROM, SERVICE, updates) or not SPARQL 1.1 (`define`, SPARQL_UPDATE)."""
    for template in EXTENSIONS:
        result = virtuoso_store.executor.run(virtuoso_store.fill(template)
                                             .replace(PROBE, "x"))
        assert not result.ok or result.rows in ([], [[False]]), (template, result)
        if "GRAPH" not in template or "FROM" in template or "define" in template:
            assert result.refused or result.error, (template, result)


@pytest.mark.slow
@FUZZ
@given(template=SPARQL_QUERIES)
@every_extension
def test_fuzz_virtuoso(virtuoso_store, template: str) -> None:
    virtuoso_store.check(template)
