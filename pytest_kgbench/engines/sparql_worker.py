"""The graph engine as it runs inside its worker process (`python -m
pytest_kgbench.engines.sparql_worker`, started by `sparql.SparqlExecutor` through
`worker.Worker`): it loads the persona's graph, then classifies, runs and caps one query at a
time. The worker has no network (its own network namespace); on top of that, rdflib may not
load graphs named in a query, and Python's audit hook refuses every socket, URL and process the
engine could try to open once the graph is loaded.

On Oxigraph a query runs only if both rdflib's parser (whose algebra the guard reads) and
Oxigraph's own accept it, so a text the two read differently is never run.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.engines import (
    Caps,
    QueryResult,
    fill_from_engine,
    jsonable,
)
from pytest_kgbench.engines.guard import Guard, Verdict, classify_sparql

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
# rdflib's own bindings, left out of the prefixes a store block shows
HIDDEN_PREFIXES = frozenset({"brick", "csvw", "dc", "dcat", "dcam", "doap", "foaf", "geo", "odrl",
                             "org", "prof", "prov", "qb", "schema", "sh", "sosa", "ssn", "time",
                             "vann", "void", "wgs", "dcmitype"})
_PREFIX = re.compile(r"^@prefix\s+([\w.-]*):\s*<([^>]*)>\s*\.", re.M)
BLOCKED_EVENTS = ("socket.", "urllib.", "http.", "ftplib.", "smtplib.", "subprocess.",
                  "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "ctypes.dlopen",
                  "webbrowser.")


def _cell(value: Any) -> Any:
    if value is None:
        return None
    from rdflib import Literal

    if isinstance(value, Literal):
        return jsonable(value.toPython())
    if isinstance(value, (bool, int, float)):
        return value
    return str(value)


def oxigraph_rejects(statement: str, prefixes: Mapping[str, str]) -> str | None:
    """Oxigraph's parser on `statement` (on an empty store: nothing is read), or None."""
    import pyoxigraph

    try:
        pyoxigraph.Store().query(statement, prefixes=dict(prefixes))
    except SyntaxError as exc:
        return f"Oxigraph's parser rejects the query: {exc}"
    except Exception as exc:  # noqa: BLE001 - any refusal of Oxigraph's is a rejection
        return f"Oxigraph rejects the query: {type(exc).__name__}: {exc}"
    return None


PARSERS = {"oxigraph": oxigraph_rejects}  # an engine's own parser, beside rdflib's


def catalog_entries(members: Mapping[str, int], uses: Mapping[str, Mapping[str, int]],
                    guard: Guard, curie: Callable[[str], str]) -> list[dict[str, Any]]:
    """A store's catalog from its counts, whichever engine counted them: `members` (class IRI
    -> instances), `uses` (class IRI -> predicate IRI, never rdf:type -> instances using it).
    A withheld predicate is named as withheld (a full view holds it), never as a column."""
    withheld = guard.withheld_predicates()
    by_class = guard.withheld_by_class()
    out = []
    for cls in sorted(members):
        props: Counter[str] = Counter()
        hidden = {curie(p) for p in by_class.get(cls, ())}
        for p, n in (uses.get(cls) or {}).items():
            if p in withheld:
                hidden.add(curie(p))
            else:
                props[curie(p)] += n
        out.append({"name": curie(cls), "rows": members[cls],
                    "columns": [[p, f"{n} uses"] for p, n in sorted(props.items())],
                    "withheld": sorted(hidden)})
    return out


def store_info(catalog: list[dict[str, Any]], triples: int, namespaces: Mapping[str, str],
               vocabulary: Iterable[str], curie: Callable[[str], str],
               hidden: Iterable[str] = ()) -> dict[str, Any]:
    """What a graph store reports once loaded (`sparql.SparqlExecutor.info`). Its prefixes,
    which a description shows, leave out rdflib's own and the namespaces in `hidden`; the
    store binds them all (`namespaces`)."""
    unshown = set(hidden)
    return {"catalog": catalog, "triples": triples, "namespaces": dict(namespaces),
            "vocabulary": {i: curie(i) for i in sorted(vocabulary)},
            "prefixes": {p: ns for p, ns in namespaces.items()
                         if p and p not in HIDDEN_PREFIXES and ns not in unshown}}


OX_FORMATS = {"nt": "ox-ntriples", "ntriples": "ox-ntriples", "turtle": "ox-turtle",
              "ttl": "ox-turtle", "xml": "ox-xml", "nquads": "ox-nquads", "trig": "ox-trig"}


class GraphEngine:
    """One graph held by one rdflib store plugin, behind the guard."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        import rdflib
        import rdflib.plugins.sparql as rdflib_sparql

        rdflib_sparql.SPARQL_LOAD_GRAPHS = False  # FROM <url> never fetches anything
        self.guard = Guard.from_json(config["guard"])
        self.caps = Caps(**config["caps"])
        self.plugin = str(config["plugin"])
        self.parsers = [PARSERS[p] for p in config.get("parsers") or ()]
        graph = rdflib.Graph(store=self.plugin)
        for prefix, ns in (config.get("prefixes") or {}).items():
            graph.bind(prefix, ns)
        for path, fmt in config["files"]:
            if fmt == "turtle":
                with open(path, encoding="utf-8") as fh:
                    for prefix, ns in _PREFIX.findall(fh.read(1 << 16)):
                        graph.bind(prefix, ns)
            # Oxigraph's store parses with Oxigraph's own parser, straight into the store (8x
            # faster than rdflib's parser handing over each triple)
            graph.parse(path, format=OX_FORMATS.get(fmt, fmt) if self.plugin == "Oxigraph"
                        else fmt)
        self.graph = graph
        self.namespaces = {p: str(ns) for p, ns in graph.namespace_manager.namespaces()}
        self.hidden = frozenset(config.get("hidden") or ())
        predicates, counts, uses = self._census()
        self.vocabulary = frozenset(predicates | set(counts))
        self.catalog = catalog_entries(counts, uses, self.guard, self.curie)
        # the query engine's own set-up on its first query (rdflib's algebra and evaluation
        # machinery; the census above walks the store without it) is the harness's time, spent
        # here while the store loads, never out of a first query's deadline
        graph.query("ASK { }")

    def curie(self, iri: str) -> str:
        from rdflib import URIRef

        try:
            return str(self.graph.namespace_manager.curie(URIRef(iri), generate=False))
        except (ValueError, KeyError):
            return iri

    def info(self) -> dict[str, Any]:
        return store_info(self.catalog, len(self.graph), self.namespaces, self.vocabulary,
                          self.curie, self.hidden)

    def _census(self) -> tuple[set[str], dict[str, int], dict[str, Counter[str]]]:
        """The graph's predicates; its classes with their instance counts; and for each class,
        how many of its instances use each property (rdf:type aside) — what the catalog and
        the vocabulary are made of. Oxigraph counts them in three SPARQL queries of its own
        (every triple handed to Python through rdflib's terms costs seconds a million);
        rdflib's own store is walked in Python, faster there than its SPARQL engine."""
        from rdflib import URIRef

        if self.plugin == "Oxigraph":
            def rows(query: str) -> list[list[str]]:
                return [[str(v) for v in row]  # type: ignore[union-attr]
                        for row in self.graph.query(query)]

            predicates = {r[0] for r in rows("SELECT DISTINCT ?p WHERE { ?s ?p ?o }")}
            counts = {r[0]: int(r[1]) for r in rows(
                f"SELECT ?c (COUNT(?s) AS ?n) WHERE {{ ?s <{RDF_TYPE}> ?c }} GROUP BY ?c")}
            uses: dict[str, Counter[str]] = {c: Counter() for c in counts}
            for c, prop, n in rows(f"SELECT ?c ?p (COUNT(DISTINCT ?s) AS ?n) WHERE {{ ?s "
                                   f"<{RDF_TYPE}> ?c ; ?p ?o . FILTER(?p != <{RDF_TYPE}>) }} "
                                   "GROUP BY ?c ?p"):
                uses[c][prop] = int(n)
            return predicates, counts, uses
        members: dict[str, list[Any]] = {}
        for s, o in self.graph.subject_objects(URIRef(RDF_TYPE)):
            members.setdefault(str(o), []).append(s)
        uses = {}
        for cls, subjects in members.items():
            used = uses.setdefault(cls, Counter())
            for s in subjects:
                for p in set(self.graph.predicates(s)):
                    if str(p) != RDF_TYPE:
                        used[str(p)] += 1
        return ({str(p) for p in self.graph.predicates()},
                {c: len(m) for c, m in members.items()}, uses)

    def classify(self, statement: str, *, read: bool = False) -> Verdict:
        """The guard's verdict. `read`: the parent has classified the text with rdflib's
        parser already (sparql.SparqlExecutor, which caches it); an engine that parses the
        text itself only needs its own parser's word then. rdflib always reads it here: it
        evaluates the algebra the guard read."""
        if read and self.plugin != "default":
            verdict = Verdict()
        else:
            verdict = classify_sparql(statement, self.guard, self.namespaces, self.caps)
        if verdict.runs:
            for rejects in self.parsers:
                verdict.error = rejects(statement, self.namespaces)
                if verdict.error:
                    break
        return verdict

    def run(self, statement: str, *, read: bool = False) -> dict[str, Any]:
        result = QueryResult(language="sparql", statement=statement)
        start = time.perf_counter()
        try:
            verdict = self.classify(statement, read=read)
            result.reads = sorted(self.curie(i) for i in verdict.iris
                                  if i in self.vocabulary and i != RDF_TYPE)
            if not verdict.runs:
                result.refused, result.error = verdict.refused, verdict.error
            else:
                # rdflib evaluates the very algebra the guard read; Oxigraph parses the text
                # itself, and ran only because its parser accepted it too
                res = self.graph.query(verdict.query if self.plugin == "default" else statement)
                self._fill(result, res)
        except HarnessBroken:
            raise
        except RecursionError:
            result.error = "the query is nested too deeply to evaluate"
        except MemoryError:
            result.error = "the query ran out of the store's memory limit"
        except Exception as exc:  # noqa: BLE001 - the engines raise many kinds; all the query's
            result.error = f"{type(exc).__name__}: {exc}"
        result.elapsed_s = round(time.perf_counter() - start, 4)
        result.cap_text(self.caps)
        return result.to_dict()

    def _fill(self, result: QueryResult, res: Any) -> None:
        """`result` filled with the engine's answer `res`, capped. What the engine raises
        while it evaluates (a SELECT's rows are evaluated as they are read) is the query's
        result; the harness's own conversion of them failing is HarnessBroken."""
        if res.type not in ("ASK", "SELECT"):  # pragma: no cover - the guard refuses the rest
            result.refused = "only SELECT and ASK queries are offered"
            return
        names = ["ask"] if res.type == "ASK" else [str(v) for v in (res.vars or [])]
        rows = _ask(res) if res.type == "ASK" else _rows(res, len(names))
        fill_from_engine(result, names, rows, _cell, self.caps, "graph store",
                         (RecursionError, MemoryError))  # its nesting, its size: the query's

    def reply(self, request: Mapping[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "run":
            if request.get("caps"):  # the executor's caps, per query (Executor.caps)
                self.caps = Caps(**request["caps"])
            return self.run(str(request["statement"]), read=bool(request.get("read")))
        if op == "classify":
            verdict = self.classify(str(request["statement"]))
            return {"refused": verdict.refused, "error": verdict.error,
                    "iris": sorted(verdict.iris)}
        if op == "rejects":  # an engine's own parser on the exact text (no prefixes bound)
            return {"rejects": PARSERS[str(request["parser"])](str(request["statement"]), {})}
        return {"error": f"unknown request {op!r}"}


def _ask(res: Any) -> Iterator[list[Any]]:
    yield [bool(res.askAnswer)]


def _rows(res: Any, width: int) -> Iterator[list[Any]]:
    for row in res:
        yield [row[j] for j in range(width)]


def _audit(event: str, args: Any) -> None:
    """Refuse, inside the worker, every network, URL and process event (the sandbox's second
    wall: it holds where no network namespace could be made, for Python-level code)."""
    if event.startswith(BLOCKED_EVENTS):
        raise PermissionError(f"{event} is not allowed in the store's worker")


def start(config: Mapping[str, Any]) -> GraphEngine:
    engine = GraphEngine(config)
    sys.addaudithook(_audit)
    return engine


if __name__ == "__main__":  # pragma: no cover - run in the worker process
    from pytest_kgbench.engines.worker import serve

    serve(start)
