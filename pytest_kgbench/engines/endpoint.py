"""The SPARQL endpoint engine (`--sparql-engine endpoint=URL`): any SPARQL 1.1 Protocol server
(Oxigraph server, Fuseki, GraphDB, QLever, Virtuoso) holds the graphs; only the engine changes.

The argument is the query URL, `endpoint=QUERY_URL`, or `endpoint=QUERY_URL;store=GSP_URL`
naming the server's Graph Store Protocol URL too. Without `;store=`, a query URL whose last
path segment is `query` gives the store URL with `store` in its place (Oxigraph server's
layout: `/query` and `/store`); any other layout must name its store URL.

Opening a store loads the persona's view of the variant (the very files `GraphStore.open`
loads: withheld triples absent) into a named graph of its own, one per (build, view, data,
ontology), through the Graph Store Protocol: the first file PUT (replacing whatever a failed
load left), the others POSTed, then a marker graph saying the load finished. A graph whose
marker is there is not loaded again; a file lock beside the build keeps two workers of one
machine from loading the same graph at once. Nothing else is loaded: no inference.

Every query is sent with the protocol's `default-graph-uri` set to that graph and no
`named-graph-uri`, so the server evaluates it over exactly the persona's graph: FROM is
overridden by the protocol's dataset, and GRAPH sees no named graph. Before a query leaves
the process the guard classifies it (rdflib's parser, as for the other engines; texts over
`sparql.PARSE_HERE` characters in a worker process of their own), and Oxigraph's parser must
accept the exact text sent (the store's prefixes declared ahead of it, as the server binds
none), in that worker, within the deadline: a refused query, or one Oxigraph cannot prepare
in time, is never sent.

Time: the client holds each query to its deadline (connection, request and every read of the
reply); past it the query is a timeout, as on the other engines, and the connection is
closed. The server is given what is left of the deadline as the query's own limit where its
protocol takes one (`ServerLimit`: Virtuoso's and Fuseki's `timeout`, the server's kind told
by its first reply's headers); Oxigraph takes none (0.5): only `oxigraph serve --timeout-s`,
set at the server's start, ends a query its client gave up on (docs/engines.md).

Failures: the server rejecting a query (4xx) is the query's error, seen by the model; the
server not answering, a load failing, a server error (5xx) or a reply that is not SPARQL JSON
is a broken harness (`HarnessBroken`: the run halts).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from pytest_kgbench.core.errors import HarnessBroken, InputError
from pytest_kgbench.engines import CAPS, Caps, QueryResult, QueryTimeout
from pytest_kgbench.engines.guard import Guard, Verdict, classify_sparql
from pytest_kgbench.engines.sparql import (
    PARSE_HERE,
    RDF_TYPE,
    WORKER_MODULE,
    SparqlExecutor,
    graph_files,
)
from pytest_kgbench.engines.sparql_results import ResultStream, fill_results
from pytest_kgbench.engines.stores import StoreKind

if TYPE_CHECKING:
    from pytest_kgbench.engines.worker import Worker
    from pytest_kgbench.packs.build import StoreSource

STORE_ARG = ";store="
CONTENT_TYPES = {"turtle": "text/turtle", "nt": "application/n-triples",
                 "xml": "application/rdf+xml", "n3": "text/n3"}
RESULTS_JSON = "application/sparql-results+json"
LOADED = "urn:kgbench:loaded"  # the marker graph's predicate: <graph> LOADED "n files"
HARNESS_TIMEOUT = 600.0        # seconds for a load or a survey query of the harness's own
MAX_REPLY_BYTES = 256 << 20    # a reply past this is cut off (the caps keep far less)
_TIMED_OUT = re.compile(r"time ?out|timed out|cancel", re.I)
_VIRTUOSO_STATE = re.compile(r"^Virtuoso (\w{5}) Error ", re.M)
_GRAPH_WORD = re.compile(r"(?<![\w:/#<])graph(?![\w:/#>])", re.I)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    cut: bool = False  # the reply passed MAX_REPLY_BYTES and was not read further
    headers: tuple[tuple[str, str], ...] = ()  # (lower-cased name, value)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def header(self, name: str) -> str:
        """The value of the header `name` (any case), or ''."""
        return next((v for k, v in self.headers if k == name.lower()), "")


@dataclass(frozen=True)
class ServerLimit:
    """One kind of SPARQL server, as the engine treats it (the per-server dialect, told by the
    server's first reply, `server_limit`): how it takes a per-query time limit through the
    protocol (the request parameter and its unit, or none: `param` None, only the server's
    own setting bounds a query and the client can only close its connection), the header
    that flags a result it cut short, the parameter of its own row limit, and whether each
    graph is kept readable by a user of its own (`private`: Virtuoso's graph-level security,
    since its protocol dataset does not override a query's FROM or GRAPH)."""

    name: str
    param: str | None = None
    unit: str = "s"           # "ms", or "s" (a decimal)
    partial: str | None = None  # a header saying the result was cut short ("S1TAT": by time)
    rows: str | None = None   # the request parameter of the server's own row limit
    private: bool = False     # graphs read as a user of their own (`private_url`, `secure`)
    ask_var: str | None = None  # an ASK answered as a SELECT of this variable: a row is true
    no_graph: str | None = None  # why a GRAPH pattern is refused on this server, or None
    states: bool = False      # a 500 naming an SQL state may be the query's error

    def query_error(self, status: int, text: str) -> bool:
        """Whether a 5xx reply is the query's own failure, not the server's: Virtuoso answers
        a query it cannot compile or evaluate (37000, a transitive path with neither end
        bound; 22xxx, a division by zero; 42000, a procedure the reader may not execute)
        with 500 and "Virtuoso <SQLSTATE> Error"; a state of a connection (08), a transaction
        (40), the driver (HY) or a resource (53) is the server's."""
        if not self.states or status != 500:
            return False
        found = _VIRTUOSO_STATE.search(text)
        return found is not None and not found.group(1).startswith(("08", "40", "HY", "53"))

    def message(self, text: str) -> str:
        """A failed reply's message as the model is shown it: a server naming SQL states
        (Virtuoso) puts its error first and echoes the whole query after "SPARQL query:",
        which is left out; any other reply's last 1,000 characters."""
        if self.states:
            return text.split("SPARQL query:", 1)[0].strip()[:1000]
        return text[-1000:]

    def params(self, seconds: float) -> dict[str, str]:
        """The request parameter giving the server `seconds`, or none."""
        if self.param is None:
            return {}
        value = str(max(1, math.ceil(seconds * 1000))) if self.unit == "ms" else \
            f"{max(seconds, 0.001):.3f}"
        return {self.param: value}


# each server kind, told by its replies' headers (`server_limit`): Oxigraph 0.5 takes no
# per-query limit (its only parameters are default-graph-uri, named-graph-uri and
# union-default-graph; `oxigraph serve --timeout-s` bounds every query); Virtuoso 7.2's
# /sparql takes `timeout` in milliseconds, answers a query it cut short with 200, the rows it
# had and `X-SQL-State: S1TAT` (tests/engines/test_virtuoso.py), takes `maxrows` and says it
# cut there with `X-SPARQL-MaxRows`; Fuseki takes `timeout` in seconds (a decimal), up to its
# own maximum
OXIGRAPH = ServerLimit("Oxigraph")
VIRTUOSO = ServerLimit(
    "Virtuoso", "timeout", "ms", partial="x-sql-state", rows="maxrows", private=True,
    states=True,
    ask_var="__ASK_RETVAL",  # 7.2 writes ASK in SPARQL JSON as one row (true) or none (false)
    no_graph=("GRAPH is not offered on this server: the store's graph is the query's default "
              "graph and it has no named graph (Virtuoso 7.2 answers a GRAPH over a graph "
              "outside the dataset with one empty solution, ASK true, instead of none)"))
FUSEKI = ServerLimit("Apache Jena Fuseki", "timeout", "s")
UNKNOWN = ServerLimit("a server of unknown kind")
# IRIs of these schemes are a server's own extensions (Virtuoso's `bif:` built-ins and `sql:`
# procedures), no SPARQL 1.1: a query naming one is refused on every endpoint
EXTENSION_SCHEMES = ("bif:", "sql:")
NO_NAMED = "urn:kgbench:no-named-graph"  # the named graph a private server's queries get: none


def server_limit(reply: Reply) -> ServerLimit:
    """The kind of server that sent `reply`, by its Server header (Fuseki also by its
    Fuseki-Request-Id header); UNKNOWN gets no parameter, which it might read otherwise."""
    server = reply.header("server").lower()
    if server.startswith("oxigraph"):
        return OXIGRAPH
    if server.startswith("virtuoso"):
        return VIRTUOSO
    if "fuseki" in server or reply.header("fuseki-request-id"):
        return FUSEKI
    return UNKNOWN


def as_boolean(doc: dict[str, Any], limit: ServerLimit | None) -> dict[str, Any]:
    """A server's SPARQL JSON with an ASK written as a SELECT of `limit.ask_var` (Virtuoso's)
    made the protocol's boolean document; any other document as it is."""
    if limit is None or limit.ask_var is None or "boolean" in doc:
        return doc
    if [str(v) for v in (doc.get("head") or {}).get("vars") or []] != [limit.ask_var]:
        return doc
    return {"head": {}, "boolean": bool((doc.get("results") or {}).get("bindings"))}


def extension_refusal(iris: Iterable[str]) -> str | None:
    """Why a query naming `iris` is not sent to a server: a server's own extension, or None."""
    named = sorted(i for i in iris if i.lower().startswith(EXTENSION_SCHEMES))
    if not named:
        return None
    return (f"{named[0]} is a server's own extension (Virtuoso's bif: built-ins and sql: "
            "procedures are not offered): write standard SPARQL 1.1")


class Auth:
    """A user and password for HTTP authentication: Digest (RFC 7616, MD5 with qop=auth, as
    Virtuoso's /sparql-auth and /sparql-graph-crud-auth ask) once a server's challenge is
    known, Basic where that is what it asks for. Thread-safe: the challenge is shared."""

    def __init__(self, user: str, password: str) -> None:
        self.user = user
        self.password = password
        self._challenge: dict[str, str] | None = None
        self._basic = False
        self._count = 0
        self._lock = threading.Lock()

    def learn(self, header: str) -> bool:
        """Take a 401's WWW-Authenticate header; False when it asks for nothing this knows."""
        scheme, _, rest = header.strip().partition(" ")
        with self._lock:
            if scheme.lower() == "basic":
                self._basic = True
                return True
            if scheme.lower() != "digest":
                return False
            self._challenge = {m[0].lower(): m[1] or m[2] for m in re.findall(
                r'(\w+)\s*=\s*(?:"([^"]*)"|([^,\s]+))', rest)}
            self._count = 0
            return "nonce" in self._challenge

    def header(self, method: str, target: str) -> str | None:
        """The Authorization header of a request, or None before any challenge."""
        import base64
        import os

        with self._lock:
            if self._basic:
                token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
                return f"Basic {token}"
            c = self._challenge
            if c is None:
                return None
            self._count += 1
            count = f"{self._count:08x}"

        def md5(text: str) -> str:
            return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()

        cnonce = os.urandom(8).hex()
        ha1 = md5(f"{self.user}:{c.get('realm', '')}:{self.password}")
        ha2 = md5(f"{method}:{target}")
        parts = [f'username="{self.user}"', f'realm="{c.get("realm", "")}"',
                 f'nonce="{c["nonce"]}"', f'uri="{target}"', 'algorithm="MD5"']
        if "auth" in c.get("qop", "").split(","):
            digest = md5(f"{ha1}:{c['nonce']}:{count}:{cnonce}:auth:{ha2}")
            parts += ["qop=auth", f"nc={count}", f'cnonce="{cnonce}"']
        else:
            digest = md5(f"{ha1}:{c['nonce']}:{ha2}")
        parts.append(f'response="{digest}"')
        if "opaque" in c:
            parts.append(f'opaque="{c["opaque"]}"')
        return "Digest " + ", ".join(parts)


def url_auth(url: str) -> tuple[str, Auth | None]:
    """`url` without the user and password in it, and those as an `Auth` (or None)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return (urlunsplit(parts._replace(netloc=netloc)),
            Auth(unquote(parts.username), unquote(parts.password or "")))


class Unreachable(Exception):
    """The server did not answer (refused, reset, not HTTP)."""


def request(method: str, url: str, *, body: bytes | Any = None,
            headers: Mapping[str, str] | None = None, timeout: float,
            sink: Callable[[bytes], bool] | None = None, auth: Auth | None = None) -> Reply:
    """One HTTP request within `timeout` seconds in all (every read of the reply is bounded by
    what is left); raises `QueryTimeout` past it and `Unreachable` if the server does not
    answer. `body`: bytes, or an open file (sent with its length). `sink`: a 200 reply's body
    goes to it chunk by chunk (not kept in the Reply) until it returns False, which ends the
    read and closes the connection. `auth`: answered a 401's challenge once (the request sent
    again, within the same time), and sent ahead once the challenge is known."""
    deadline = time.monotonic() + timeout
    for attempt in (0, 1):
        sent = dict(headers or {})
        if auth is not None:
            target = urlunsplit(("", "", urlsplit(url).path or "/", urlsplit(url).query, ""))
            value = auth.header(method, target)
            if value is not None:
                sent["Authorization"] = value
        if attempt and hasattr(body, "seek"):
            body.seek(0)
        reply = _request(method, url, body=body, headers=sent, sink=sink,
                         timeout=max(deadline - time.monotonic(), 0.001))
        if reply.status != 401 or auth is None or attempt or \
                not auth.learn(reply.header("www-authenticate")):
            return reply
    return reply


def _request(method: str, url: str, *, body: bytes | Any, headers: Mapping[str, str],
             timeout: float, sink: Callable[[bytes], bool] | None) -> Reply:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Unreachable(f"not an http(s) URL: {url}")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    deadline = time.monotonic() + timeout
    conn = cls(parts.hostname, parts.port, timeout=timeout)
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        conn.request(method, target, body=body, headers=dict(headers or {}))
        if conn.sock is not None:
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        resp = conn.getresponse()
        got = tuple((k.lower(), v) for k, v in resp.getheaders())
        chunks: list[bytes] = []
        size = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                return Reply(resp.status, b"".join(chunks), cut=True, headers=got)
            if sink is not None and resp.status == 200:
                if not sink(chunk):
                    break
                continue
            chunks.append(chunk)
        return Reply(resp.status, b"".join(chunks), headers=got)
    except TimeoutError:
        raise QueryTimeout(f"stopped after {timeout:g} s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def with_params(url: str, **params: str) -> str:
    return url + ("&" if urlsplit(url).query else "?") + urlencode(params)


def redacted(url: str) -> str:
    """`url` with any password in it hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class Endpoint:
    """A SPARQL 1.1 Protocol server: its query URL and its Graph Store Protocol URL (a user and
    password in the store URL authenticate the loads, and on a `private` server create and
    grant each graph's reader)."""

    def __init__(self, query_url: str, store_url: str) -> None:
        self.query_url = query_url
        self.store_url, self.admin = url_auth(store_url)
        self.limit: ServerLimit | None = None  # the server's kind, from its first reply
        self._readers: dict[str, Auth] = {}

    @property
    def private_url(self) -> str:
        """A private server's authenticated query URL: Virtuoso's /sparql-auth beside the
        /sparql the engine is given."""
        parts = urlsplit(self.query_url)
        return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "-auth"))

    def kind(self) -> ServerLimit:
        """The server's kind, asking it `ASK {}` if no reply has told it yet."""
        if self.limit is None:
            self.select("ASK {}", LOADED, admin=False)
        return self.limit or UNKNOWN

    def reader(self, graph: str) -> Auth:
        """The user that may read `graph` alone on a private server: its name from the graph's,
        its password derived from the loader's (so every worker and every later run finds the
        same without storing one)."""
        if graph not in self._readers:
            if self.admin is None:
                raise HarnessBroken(
                    f"{self.kind().name} keeps each persona's graph readable by a user of its "
                    "own, which the engine creates as the server's administrator: name the "
                    "store URL with its credentials, endpoint=QUERY_URL;store=http://dba:"
                    "PASSWORD@HOST:PORT/sparql-graph-crud-auth")
            digest = hashlib.sha256(graph.encode()).hexdigest()[:20]
            password = hmac.new(self.admin.password.encode(), graph.encode(),
                                hashlib.sha256).hexdigest()[:32]
            self._readers[graph] = Auth(f"kgb_{digest}", password)
        return self._readers[graph]

    def post_query(self, text: str, graph: str, timeout: float, *, bounded: bool = False,
                   sink: Callable[[bytes], bool] | None = None, rows: int | None = None,
                   admin: bool = False) -> Reply:
        """`text` evaluated over `graph` alone: the protocol's dataset is that default graph
        and no named graph (it overrides any FROM of the query's on a server that keeps the
        protocol; on a `private` one, the query is sent as the user that may read `graph`
        alone, or as the loader with `admin`). `bounded`: the server is given `timeout` as
        the query's own limit too, and `rows` as its row limit, where its protocol takes
        them. `sink`: reads a 200 reply as it comes (`request`)."""
        params = {"query": text, "default-graph-uri": graph}
        url, auth = self.query_url, None
        if self.limit is not None and self.limit.private:
            params["named-graph-uri"] = NO_NAMED
            url, auth = self.private_url, (self.admin if admin else self.reader(graph))
        if bounded and self.limit is not None:
            params.update(self.limit.params(timeout))
            if rows is not None and self.limit.rows:
                params[self.limit.rows] = str(rows)
        reply = request("POST", url, body=urlencode(params).encode(), auth=auth,
                        timeout=timeout, sink=sink, headers={
                            "Accept": RESULTS_JSON,
                            "Content-Type": "application/x-www-form-urlencoded"})
        if self.limit is None:
            self.limit = server_limit(reply)
        return reply

    def select(self, text: str, graph: str, *, admin: bool = False) -> dict[str, Any]:
        """A query of the harness's own (a survey, a marker): its SPARQL JSON; any failure is
        a broken harness."""
        try:
            reply = self.post_query(text, graph, HARNESS_TIMEOUT, admin=admin)
        except (QueryTimeout, Unreachable) as exc:
            raise HarnessBroken(f"the SPARQL endpoint {redacted(self.query_url)} failed a "
                                f"query of the harness: {exc}") from None
        if reply.status != 200:
            raise HarnessBroken(f"the SPARQL endpoint {redacted(self.query_url)} answered "
                                f"{reply.status} to a query of the harness: {reply.text[:500]}")
        try:
            return as_boolean(dict(json.loads(reply.body)), self.limit)
        except ValueError:
            raise HarnessBroken(f"the SPARQL endpoint {redacted(self.query_url)} sent a reply "
                                f"that is not SPARQL JSON: {reply.text[:300]}") from None

    def put(self, method: str, graph: str, path: Path, fmt: str) -> None:
        """One file into `graph` through the Graph Store Protocol (PUT replaces, POST adds)."""
        content_type = CONTENT_TYPES.get(fmt)
        if content_type is None:
            raise HarnessBroken(f"no media type for the RDF format '{fmt}' of {path}")
        url = with_params(self.store_url, graph=graph)
        try:
            with path.open("rb") as fh:
                reply = request(method, url, body=fh, timeout=HARNESS_TIMEOUT, auth=self.admin,
                                headers={"Content-Type": content_type,
                                         "Content-Length": str(path.stat().st_size)})
        except (QueryTimeout, Unreachable, OSError) as exc:
            raise HarnessBroken(f"loading {path.name} into {redacted(self.store_url)} failed: "
                                f"{exc}") from None
        if reply.status not in (200, 201, 204):
            raise HarnessBroken(f"the Graph Store Protocol at {redacted(self.store_url)} "
                                f"answered {reply.status} to {method} {path.name}: "
                                f"{reply.text[:500]}")

    def secure(self, graph: str) -> None:
        """On a private server, `graph`'s reader: created (or its password set again), granted
        SPARQL_SELECT alone (no SPARQL_UPDATE: no write, no LOAD), and read permission on
        `graph` alone (Virtuoso's graph-level security: every other graph, the full view's
        among them, is empty to it whatever the query names: FROM, GRAPH, `define input:`);
        the anonymous user ('nobody') may read no graph. Run by the loader as SQL procedures
        called from SPARQL, the one channel the protocol has (each an error halts the run)."""
        if not self.kind().private:
            return
        user = self.reader(graph)
        calls = [(f"USER_CREATE('{user.user}', '{user.password}')", "already exists"),
                 (f"bif:user_set_password('{user.user}', '{user.password}')", None),
                 (f"USER_GRANT_ROLE('{user.user}', 'SPARQL_SELECT')", "already"),
                 ("RDF_DEFAULT_USER_PERMS_SET('nobody', 0)", None),
                 (f"RDF_DEFAULT_USER_PERMS_SET('{user.user}', 0)", None),
                 (f"RDF_GRAPH_USER_PERMS_SET('{graph}', '{user.user}', 1)", None)]
        for call, tolerated in calls:
            name, _, args = call.partition("(")
            function = name if name.startswith("bif:") else f"<sql:{name}>"
            reply = self.post_query(f"SELECT ({function}({args} AS ?done) WHERE {{}}",
                                    graph, HARNESS_TIMEOUT, admin=True)
            if reply.status != 200 and not (tolerated and tolerated in reply.text):
                shown = call.replace(user.password, "***")
                raise HarnessBroken(f"the SPARQL endpoint {redacted(self.query_url)} answered "
                                    f"{reply.status} to the loader's {shown}: "
                                    f"{reply.text.replace(user.password, '***')[:500]}")


def graph_name(source: StoreSource, view: str, data: str, ontology: bool) -> str:
    """The named graph of one (build, view, data, ontology): the build's fingerprint changes
    whenever one of its files does, so a changed build loads into a graph of its own."""
    key = f"{source.fingerprint}|{view}|{data}|{ontology}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    tail = "+ontology" if ontology else ""
    return f"urn:kgbench:graph:{source.pack}:{source.variant}:{view}:{data}{tail}:{digest}"


def local_namespaces(prefixes: Mapping[str, str], files: list[tuple[Path, str]]) -> Any:
    """An empty rdflib graph bound as the in-process engines bind theirs (the store's prefixes,
    then each Turtle file's): its namespace manager names the CURIEs, the guard reads with
    its namespaces."""
    import rdflib

    from pytest_kgbench.engines.sparql import turtle_prefixes

    graph = rdflib.Graph()
    for prefix, ns in prefixes.items():
        graph.bind(prefix, ns)
    for path, fmt in files:
        if fmt == "turtle":
            for prefix, ns in turtle_prefixes(path).items():
                graph.bind(prefix, ns)
    return graph


def survey(endpoint: Endpoint, graph: str, guard: Guard, local: Any,
           hidden: Iterable[str] = ()) -> dict[str, Any]:
    """What the store reports (`SparqlExecutor.info`), counted by the server over `graph`:
    the same catalog the in-process engines count (`sparql_worker.catalog_entries`); the
    namespaces in `hidden` are left out of its prefixes."""
    from rdflib import URIRef

    from pytest_kgbench.engines.sparql_worker import catalog_entries, store_info

    def rows(text: str) -> list[dict[str, Any]]:
        return list(endpoint.select(text, graph).get("results", {}).get("bindings", []))

    def curie(iri: str) -> str:
        try:
            return str(local.namespace_manager.curie(URIRef(iri), generate=False))
        except (ValueError, KeyError):
            return iri

    triples = rows("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }")
    members = {str(b["c"]["value"]): int(b["n"]["value"]) for b in rows(
        f"SELECT ?c (COUNT(?s) AS ?n) WHERE {{ ?s <{RDF_TYPE}> ?c }} GROUP BY ?c")}
    uses: dict[str, Counter[str]] = {}
    for b in rows(f"SELECT ?c ?p (COUNT(DISTINCT ?s) AS ?n) WHERE {{ ?s <{RDF_TYPE}> ?c . "
                  f"?s ?p ?o . FILTER(?p != <{RDF_TYPE}>) }} GROUP BY ?c ?p"):
        uses.setdefault(str(b["c"]["value"]), Counter())[str(b["p"]["value"])] = \
            int(b["n"]["value"])
    predicates = {str(b["p"]["value"]) for b in rows("SELECT DISTINCT ?p WHERE { ?s ?p ?o }")}
    namespaces = {p: str(ns) for p, ns in local.namespace_manager.namespaces()}
    return store_info(catalog_entries(members, uses, guard, curie),
                      int(triples[0]["n"]["value"]) if triples else 0, namespaces,
                      predicates | set(members), curie, hidden)


class EndpointExecutor(SparqlExecutor):
    """A persona's graph on a SPARQL endpoint, behind the guard: the catalog, the description
    and the store block are `SparqlExecutor`'s, over what the server counted. A server's
    answers are checked against each question's key before the question is asked
    (`checks_reference`): Virtuoso divides integers as SQL does, and its compiler fails on
    some queries SPARQL 1.1 allows."""

    checks_reference = True

    def __init__(self, endpoint: Endpoint, graph: str, info: dict[str, Any], guard: Guard,
                 timeout: float = 60.0, caps: Caps = CAPS) -> None:
        self.endpoint = endpoint
        self.graph = graph
        self._info = info
        self.guard = guard
        self.timeout = timeout
        self.caps = caps
        self._owned = ()
        self._guard_json = json.dumps(guard.to_json(), sort_keys=True)
        # the server binds no prefixes: the store's are declared ahead of each query, on one
        # line (a server's error message counts one line more)
        self.prologue = " ".join(f"PREFIX {p}: <{ns}>" for p, ns in
                                 sorted(info["namespaces"].items()))
        # the worker process that reads what cannot be read here within a deadline: a text
        # too long for rdflib's parser here, and every text with Oxigraph's parser, whose
        # query preparation is native code no thread can stop (100 copies of one triple
        # pattern take it 2.6 s, 200 take 42 s): killed at the deadline, so a text Oxigraph
        # cannot prepare in time is never sent to the server either
        self._apart: Worker | None = self._apart_worker()

    @property
    def info(self) -> dict[str, Any]:
        return self._info

    def engine_name(self) -> str:
        return f"{self.endpoint.kind().name} at {redacted(self.endpoint.query_url)}"

    def close(self) -> None:
        if self._apart is not None:
            self._apart.close()
            self._apart = None

    def _apart_worker(self) -> Worker:
        from pytest_kgbench.engines.worker import Worker

        return Worker(WORKER_MODULE, {
            "plugin": "default", "files": [], "prefixes": self.info["namespaces"],
            "guard": self.guard.to_json(), "caps": asdict(self.caps), "parsers": []})

    def _call_apart(self, request: Mapping[str, Any], timeout: float) -> dict[str, Any] | None:
        """The apart worker's reply, or None past `timeout` (the worker is killed)."""
        from pytest_kgbench.engines.worker import WorkerDied

        if self._apart is None:
            self._apart = self._apart_worker()
        try:
            return self._apart.call(request, timeout)
        except WorkerDied as exc:
            return {"error": str(exc), "rejects": str(exc)}

    def classify_apart(self, statement: str, timeout: float) -> Verdict | None:
        """The guard's verdict on a long text by rdflib's parser in the worker process (killed
        at `timeout`: no parser outlasts it), or None past the deadline."""
        reply = self._call_apart({"op": "classify", "statement": statement}, timeout)
        if reply is None:
            return None
        return Verdict(refused=reply.get("refused"), error=reply.get("error"),
                       iris=frozenset(reply.get("iris") or ()))

    def oxigraph_apart(self, statement: str, timeout: float) -> tuple[bool, str | None]:
        """(False, None) past `timeout`, else (True, why Oxigraph's parser rejects the exact
        text sent for `statement`, or None)."""
        reply = self._call_apart({"op": "rejects", "parser": "oxigraph",
                                  "statement": self.text_sent(statement)}, timeout)
        if reply is None:
            return False, None
        if "rejects" not in reply:  # the worker failed the request: never sent unchecked
            return True, str(reply.get("error") or "Oxigraph's parser check failed")
        return True, reply.get("rejects")

    def dialect_refusal(self, statement: str, verdict: Verdict) -> str | None:
        """Why a query the guard lets through is not sent to this server: a server's own
        extension (any server), or a GRAPH pattern where the server cannot answer one right
        (`ServerLimit.no_graph`); None to send it."""
        why = extension_refusal(verdict.iris)
        limit = self.endpoint.limit
        if why is None and limit is not None and limit.no_graph and self._graph(statement):
            why = limit.no_graph
        return why

    def _graph(self, statement: str) -> bool:
        """Whether `statement` holds a GRAPH pattern: by rdflib's reading the guard made (a
        cached one) for a text read here, by its words for a longer one (read apart: a word
        GRAPH outside an IRI or a prefixed name counts, so a false match only refuses)."""
        if len(statement) > PARSE_HERE:
            return _GRAPH_WORD.search(statement) is not None
        from pytest_kgbench.engines.guard import _prefixes_named
        from pytest_kgbench.packs.evidence import read_sparql

        reading = read_sparql(statement, _prefixes_named(statement, self.info["namespaces"]))
        return "Graph" in reading.names

    def text_sent(self, statement: str) -> str:
        """The exact text the server is sent for `statement`."""
        return f"{self.prologue}\n{statement}"

    def run(self, statement: str) -> QueryResult:
        """One query within the deadline: classified here (or apart), then sent; a refused
        one is never sent."""
        if self._apart is not None:
            self._apart.ready()  # a worker still starting (after a kill) is not the query's time
        start = time.perf_counter()
        result = QueryResult(language="sparql", statement=statement)
        verdict: Verdict | None
        try:
            if len(statement) <= PARSE_HERE:
                verdict = self.classify(statement)  # cached: shared, never changed here
            else:
                verdict = self.classify_apart(statement, self.timeout)
        except QueryTimeout:
            verdict = None
        if verdict is not None and verdict.runs:
            verdict = replace(verdict, refused=self.dialect_refusal(statement, verdict))
        if verdict is not None and verdict.runs:
            done, rejected = self.oxigraph_apart(
                statement, self.timeout - (time.perf_counter() - start))
            verdict = replace(verdict, error=rejected) if done else None
        if verdict is None:
            result.timed_out, result.error = True, f"stopped after {self.timeout:g} s"
        else:
            result.reads = self._reads(verdict)
            if verdict.refused or verdict.error:
                result.refused, result.error = verdict.refused, verdict.error
            else:
                left = self.timeout - (time.perf_counter() - start)
                self._ask(result, statement, left)
        result.elapsed_s = round(time.perf_counter() - start, 4)
        result.cap_text(self.caps)
        return result

    def send(self, statement: str, timeout: float,
             sink: Callable[[bytes], bool] | None = None) -> Reply:
        """`statement` to the server over the persona's graph, unguarded (the tests call it to
        show what the protocol's dataset alone lets through)."""
        return self.endpoint.post_query(self.text_sent(statement), self.graph, timeout,
                                        bounded=True, sink=sink, rows=self.caps.count_rows + 1)

    def _ask(self, result: QueryResult, statement: str, left: float) -> None:
        url = redacted(self.endpoint.query_url)
        stopped = f"stopped after {self.timeout:g} s"
        try:
            if left <= 0:
                raise QueryTimeout(stopped)
            stream = ResultStream(self.caps)
            reply = self.send(statement, left, stream.feed)
        except QueryTimeout:
            result.timed_out, result.error = True, stopped
            return
        except Unreachable as exc:
            raise HarnessBroken(f"the SPARQL endpoint {url} is not answering: {exc}") from None
        limit = self.endpoint.limit
        text = stream.tail if reply.status == 200 else (
            limit.message(reply.text) if limit is not None else reply.text[-1000:])
        flagged = reply.header(limit.partial) if limit is not None and limit.partial else ""
        cut_at = reply.header("x-sparql-maxrows")
        if flagged == "S1TAT":
            # Virtuoso's own limit: a partial result, never shown as if it were the whole
            result.timed_out, result.error = True, f"{stopped} (by the server)"
        elif flagged:
            raise HarnessBroken(f"the SPARQL endpoint {url} flagged its result as incomplete "
                                f"({limit.partial if limit else ''}: {flagged}, "
                                f"{reply.header('x-sql-message')[:300]})")
        elif cut_at and cut_at != str(self.caps.count_rows + 1):
            raise HarnessBroken(f"the SPARQL endpoint {url} cut a result at {cut_at} rows, "
                                f"its own row limit (Virtuoso's [SPARQL] ResultSetMaxRows): "
                                f"raise it past {self.caps.count_rows + 1} or remove it")
        elif reply.status == 200 and reply.cut:  # the query's doing, not the server's
            result.error = (f"the result passed {MAX_REPLY_BYTES >> 20} MiB before its end: "
                            "aggregate or filter")
        elif reply.status == 200:
            try:
                doc = stream.finish()
            except ValueError:
                if _TIMED_OUT.search(text):  # Oxigraph's own limit cuts the stream short
                    result.timed_out, result.error = True, f"{stopped} (by the server)"
                    return
                raise HarnessBroken(f"the SPARQL endpoint {url} sent a reply that is not "
                                    f"SPARQL JSON: {text[:300]}") from None
            ask = limit is not None and limit.ask_var is not None and \
                stream.vars == [limit.ask_var]
            if doc is None and ask:
                fill_results(result, {"boolean": stream.count > 0}, self.caps)
            elif doc is None:
                stream.fill(result)
            else:
                fill_results(result, as_boolean(doc, limit), self.caps)
        elif reply.status == 408 or (reply.status >= 500 and _TIMED_OUT.search(text)):
            result.timed_out, result.error = True, f"{stopped} (by the server)"
        elif 400 <= reply.status < 500 and reply.status not in (401, 403, 404, 405, 407):
            result.error = f"the SPARQL endpoint rejects the query ({reply.status}): {text}"
        elif limit is not None and limit.query_error(reply.status, text):
            result.error = f"the SPARQL endpoint rejects the query ({reply.status}): {text}"
        else:
            raise HarnessBroken(f"the SPARQL endpoint {url} answered {reply.status}: "
                                f"{text[:500]}")


class EndpointStore(StoreKind):
    """The `endpoint` SPARQL store kind; `configure(URL)` binds it to a server."""

    name = "endpoint"
    language = "sparql"
    default = False

    def __init__(self, query_url: str | None = None, store_url: str | None = None) -> None:
        self.query_url = query_url
        self.store_url = store_url

    @property
    def label(self) -> str:
        """The engine as a run's settings and report name it (any password hidden)."""
        if self.query_url is None:
            return self.name
        return f"{self.name}={redacted(self.query_url)}"

    def configure(self, argument: str) -> EndpointStore:
        query_url, sep, store_url = argument.strip().partition(STORE_ARG)
        query_url = query_url.strip()
        for url in (query_url, store_url) if sep else (query_url,):
            parts = urlsplit(url.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise InputError("--sparql-engine", f"endpoint={argument}: '{url}' is not an "
                                 "http(s) URL (endpoint=QUERY_URL or "
                                 "endpoint=QUERY_URL;store=GSP_URL)")
        if not sep:
            parts = urlsplit(query_url)
            head, _, last = parts.path.rstrip("/").rpartition("/")
            if last != "query":
                raise InputError("--sparql-engine", f"endpoint={argument}: no Graph Store "
                                 "Protocol URL can be derived from a query URL not ending in "
                                 "/query; name it: endpoint=QUERY_URL;store=GSP_URL")
            store_url = urlunsplit(parts._replace(path=f"{head}/store"))
        return EndpointStore(query_url, store_url.strip())

    def endpoint(self) -> Endpoint:
        if self.query_url is None or self.store_url is None:
            raise InputError("--sparql-engine", "the endpoint engine needs the server's URL: "
                             "--sparql-engine endpoint=QUERY_URL")
        return Endpoint(self.query_url, self.store_url)

    def open(self, source: StoreSource, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> EndpointExecutor:
        endpoint = self.endpoint()
        load, prefixes, hidden = graph_files(source, data, guard, ontology=ontology)
        graph = graph_name(source, guard.view, data, ontology)
        ensure_loaded(endpoint, graph, load, source.home)
        info = survey(endpoint, graph, guard, local_namespaces(prefixes, load), hidden)
        return EndpointExecutor(endpoint, graph, info, guard, timeout=timeout)

    def from_context(self, context: str, guard: Guard, caps: Caps = CAPS) -> None:
        return None  # a reading prompt's store is the default engine's

    def classify(self, guard: Guard, statement: str) -> str | None:
        return classify_sparql(statement, guard).refused

    def check(self) -> str | None:
        try:
            endpoint = self.endpoint()
        except InputError:
            return "the endpoint engine needs the server's URL: --sparql-engine endpoint=URL"
        try:
            reply = endpoint.post_query("ASK {}", LOADED, 30.0)
        except (QueryTimeout, Unreachable) as exc:
            return f"the SPARQL endpoint {redacted(endpoint.query_url)} is not answering: {exc}"
        if reply.status != 200:
            return (f"the SPARQL endpoint {redacted(endpoint.query_url)} answered "
                    f"{reply.status} to ASK {{}}: {reply.text[:300]}")
        return None


def marker(graph: str) -> str:
    return f"{graph}:loaded"


def ensure_loaded(endpoint: Endpoint, graph: str, load: list[tuple[Path, str]],
                  lock_dir: Path) -> bool:
    """Load `load` into `graph` unless its marker says a load finished; True if it loaded.
    Under a file lock in `lock_dir` (the build's directory): two workers never load at once."""
    from filelock import FileLock

    def loaded() -> bool:
        endpoint.kind()  # a private server's marker is read as the loader
        doc = endpoint.select(f"ASK {{ <{graph}> <{LOADED}> ?n }}", marker(graph), admin=True)
        return bool(doc.get("boolean"))

    if loaded():
        return False
    key = hashlib.sha256(f"{endpoint.store_url}|{graph}".encode()).hexdigest()[:16]
    with FileLock(str(lock_dir / f".endpoint-{key}.lock")):
        if loaded():
            return False
        for i, (path, fmt) in enumerate(load):
            endpoint.put("PUT" if i == 0 else "POST", graph, path, fmt)
        endpoint.secure(graph)
        note = lock_dir / f".endpoint-{key}.nt"
        note.write_text(f'<{graph}> <{LOADED}> "{len(load)} files" .\n', encoding="utf-8")
        try:
            endpoint.put("PUT", marker(graph), note, "nt")
        finally:
            note.unlink(missing_ok=True)
    return True


STORES = (EndpointStore(),)
