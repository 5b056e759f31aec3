"""The graph store: SPARQL over an rdflib Graph, held by rdflib's own memory store (`rdflib`)
or by Oxigraph through oxrdflib (`oxigraph`, native code, much faster on large graphs). Queries
only (updates refused), every query bounded in time."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pytest_kgbench.errors import HarnessBroken
from pytest_kgbench.executors import (
    QueryResult,
    QueryTimeout,
    TableInfo,
    jsonable,
    run_with_timeout,
)
from pytest_kgbench.executors.guard import Guard, query_iris

if TYPE_CHECKING:
    from pytest_kgbench.build import Built

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def _cell(value: Any) -> Any:
    if value is None:
        return None
    from rdflib import Literal

    if isinstance(value, Literal):
        return jsonable(value.toPython())
    return str(value)


class SparqlExecutor:
    """Runs SPARQL queries on an rdflib Graph through a `Guard`, with a time bound."""

    language = "sparql"
    unit = "instances"

    def __init__(self, graph: Any, guard: Guard, timeout: float = 60.0,
                 max_rows: int = 10_000) -> None:
        self.graph = graph
        self.guard = guard
        self.timeout = timeout
        self.max_rows = max_rows
        self._catalog: list[TableInfo] | None = None

    def close(self) -> None:
        pass

    def reads(self, statement: str) -> list[str]:
        """The classes and properties (as CURIEs) a query mentions."""
        iris = query_iris(statement)
        return sorted(self._curie(i) for i in iris if i in self._vocabulary and i != RDF_TYPE)

    @cached_property
    def _vocabulary(self) -> frozenset[str]:
        """Every predicate and class IRI of the graph, once per executor."""
        return frozenset({str(p) for p in self.graph.predicates()}
                         | {str(o) for o in self.graph.objects(None, _uri(RDF_TYPE))})

    def _curie(self, iri: str) -> str:
        from rdflib import URIRef

        try:
            return self.graph.namespace_manager.curie(URIRef(iri), generate=False)
        except (ValueError, KeyError):
            return iri

    def refusal(self, statement: str) -> str | None:
        return self.guard.check_sparql(statement)

    def run(self, statement: str) -> QueryResult:
        result = QueryResult(language="sparql", statement=statement)
        start = time.perf_counter()
        refusal = self.refusal(statement)
        result.reads = self.reads(statement)
        if refusal:
            result.refused = refusal
            return result

        def evaluate() -> tuple[list[str], list[list[Any]]]:
            res = self.graph.query(statement)
            if res.type == "ASK":
                return ["ask"], [[bool(res.askAnswer)]]
            if res.type != "SELECT":
                raise ValueError("only SELECT and ASK queries are supported")
            names = [str(v) for v in (res.vars or [])]
            rows = []
            for i, row in enumerate(res):
                if i > self.max_rows:
                    break
                rows.append([_cell(row[j]) for j in range(len(names))])
            return names, rows

        try:
            columns, rows = run_with_timeout(evaluate, self.timeout)
            result.columns = columns
            result.truncated = len(rows) > self.max_rows
            result.rows = rows[: self.max_rows]
        except QueryTimeout:
            result.timed_out = True
            result.error = f"stopped after {self.timeout:g} s"
        except Exception as exc:  # noqa: BLE001 - rdflib raises many kinds; all are the query's
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.elapsed_s = round(time.perf_counter() - start, 4)
        return result

    def prefixes(self) -> dict[str, str]:
        return {p: str(ns) for p, ns in self.graph.namespace_manager.namespaces()
                if p and p not in ("brick", "csvw", "dc", "dcat", "dcam", "doap", "foaf", "geo",
                                   "odrl", "org", "prof", "prov", "qb", "schema", "sh", "sosa",
                                   "ssn", "time", "vann", "void", "wgs", "dcmitype")}

    def catalog(self) -> list[TableInfo]:
        """Classes with instance counts; each 'column' is a property used on its instances."""
        if self._catalog is not None:
            return self._catalog
        from rdflib import URIRef

        withheld = self.guard.withheld_predicates()
        rdf_type = URIRef(RDF_TYPE)
        members: dict[str, list[Any]] = {}
        for s, o in self.graph.subject_objects(rdf_type):
            members.setdefault(str(o), []).append(s)
        out = []
        for cls in sorted(members):
            props: Counter[str] = Counter()
            hidden: set[str] = set()
            for s in members[cls]:
                for p in set(self.graph.predicates(s)):
                    if str(p) == RDF_TYPE:
                        continue
                    if str(p) in withheld:
                        hidden.add(self._curie(str(p)))
                    else:
                        props[self._curie(str(p))] += 1
            out.append(TableInfo(name=self._curie(cls), rows=len(members[cls]),
                                 columns=tuple((p, f"{n} uses") for p, n in sorted(props.items())),
                                 withheld=tuple(sorted(hidden))))
        self._catalog = out
        return out

    def describe(self, name: str) -> str:
        for info in self.catalog():
            if name in (info.name, self._curie(name)):
                cols = "\n".join(f"  {p} ({n})" for p, n in info.columns)
                note = (f"\n  (withheld from persona '{self.guard.persona}': "
                        f"{', '.join(info.withheld)})" if info.withheld else "")
                return f"class {info.name} ({info.rows} instances)\n{cols}{note}"
        return f"ERROR: no class named '{name}'"


    def store_block(self) -> str:
        lines = ["## The store: an RDF graph (SPARQL)", "", "Prefixes:", ""]
        for prefix, ns in sorted(self.prefixes().items()):
            lines.append(f"- PREFIX {prefix}: <{ns}>")
        lines += ["", "Classes, with their instance counts and the properties they use:", ""]
        for info in self.catalog():
            props = ", ".join(p for p, _ in info.columns)
            note = f" (withheld from you: {', '.join(info.withheld)})" if info.withheld else ""
            lines.append(f"- {info.name} ({info.rows} instances): {props}{note}")
        return "\n".join(lines)


class GraphStore:
    """A SPARQL store kind: a built variant's graph held by one rdflib store plugin."""

    language = "sparql"

    def __init__(self, name: str, plugin: str, *, default: bool = False,
                 needs: str | None = None) -> None:
        self.name = name
        self.plugin = plugin    # the rdflib store plugin holding the triples
        self.default = default
        self.needs = needs      # the module the plugin comes from

    def open(self, built: Built, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> SparqlExecutor:
        if data not in ("raw", "derived"):
            raise HarnessBroken(f"the graph store has no '{data}' data (raw or derived)")
        graph = built.load_graph(self.plugin, derived=data == "derived", ontology=ontology)
        return SparqlExecutor(graph, guard, timeout)

    def from_context(self, context: str, guard: Guard) -> SparqlExecutor:
        import rdflib

        from pytest_kgbench.reading import turtle_blocks

        graph = rdflib.Graph(store=self.plugin)
        for body in turtle_blocks(context):
            graph.parse(data=body, format="turtle")
        return SparqlExecutor(graph, guard)

    def classify(self, guard: Guard, statement: str) -> str | None:
        return guard.check_sparql(statement)

    def check(self) -> str | None:
        if self.needs is None:
            return None
        import importlib.util

        if importlib.util.find_spec(self.needs) is None:
            return f"the {self.name} engine needs the package {self.needs} (pip install it)"
        return None


STORES = (GraphStore("rdflib", "default", default=True),
          GraphStore("oxigraph", "Oxigraph", needs="oxrdflib"))


def _uri(iri: str) -> Any:
    from rdflib import URIRef

    return URIRef(iri)


def personal_predicates(personal: Mapping[str, frozenset[str]], rdf: Mapping[str, Any]
                        ) -> frozenset[str]:
    """The predicate IRIs that personal columns map to under a pack's RDF mapping."""
    from pytest_kgbench.rdfmap import camel, expand

    prefixes = dict(rdf.get("prefixes") or {})
    vocab = rdf.get("vocab")
    out = set()
    for table, cols in personal.items():
        tmap = (rdf.get("tables") or {}).get(table) or {}
        columns = tmap.get("columns") or {}
        for col in cols:
            entry = columns.get(col)
            if entry == "skip":
                continue
            pred = entry if isinstance(entry, str) else (entry or {}).get("predicate")
            if pred is None and vocab:
                pred = f"{vocab}:{camel(col)}"
            if pred:
                out.add(expand(pred, prefixes))
    return frozenset(out)
