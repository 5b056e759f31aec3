"""The graph store: SPARQL over an rdflib Graph, held by rdflib's own memory store (`rdflib`)
or by Oxigraph through oxrdflib (`oxigraph`, native code, much faster on large graphs).

The engine runs in a worker process of its own (`sparql_worker`, through `worker.Worker`): the
persona's graph (without the triples it may not read) loaded once, no network, killed at each
query's deadline and restarted. This side is the executor the agents, the checks and the MCP
server hold: it sends one query at a time and turns the reply into a `QueryResult`."""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.engines import (
    CAPS,
    Caps,
    Executor,
    QueryResult,
    QueryTimeout,
    TableInfo,
    run_with_timeout,
)
from pytest_kgbench.engines.guard import Guard, Verdict, classify_sparql
from pytest_kgbench.engines.stores import StoreKind
from pytest_kgbench.engines.worker import Worker, WorkerDied
from pytest_kgbench.packs.rdf.mapping import per_id_namespaces

if TYPE_CHECKING:
    from pytest_kgbench.packs.build import StoreSource

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
# texts up to this long are classified here (cached, in a thread stopped at the deadline);
# longer ones in the worker, whose kill at the deadline nothing in a parser can outlast
PARSE_HERE = 4_000
WORKER_MODULE = "pytest_kgbench.engines.sparql_worker"


class SparqlExecutor(Executor):
    """Runs SPARQL queries on a graph in its worker process, through a `Guard`, with a time
    bound the operating system enforces (the worker is killed at the deadline)."""

    language = "sparql"
    unit = "instances"

    def __init__(self, worker: Worker, guard: Guard, timeout: float = 60.0,
                 caps: Caps = CAPS, owned: tuple[Path, ...] = ()) -> None:
        self.worker = worker
        self.guard = guard
        self.timeout = timeout
        self.caps = caps
        self._owned = owned  # temporary files the worker loads, removed on close

    @classmethod
    # many parameters: keyword-only options with defaults
    def over(cls, plugin: str, files: list[tuple[Path, str]], guard: Guard, *,
             timeout: float = 60.0, parsers: tuple[str, ...] = (), caps: Caps = CAPS,
             owned: tuple[Path, ...] = (), prefixes: Mapping[str, str] | None = None,
             hidden: Iterable[str] = ()) -> SparqlExecutor:
        """An executor over `files` ((path, rdflib format) pairs) loaded into one graph held
        by the rdflib store `plugin`, with `prefixes` bound (those of the namespaces in
        `hidden` left out of its description); `parsers`: engines' own parsers that must
        accept a query too (sparql_worker.PARSERS)."""
        config = {"plugin": plugin, "files": [[str(p), f] for p, f in files],
                  "prefixes": dict(prefixes or {}), "hidden": sorted(hidden),
                  "guard": guard.to_json(),
                  "caps": asdict(caps), "parsers": list(parsers)}
        return cls(Worker(WORKER_MODULE, config), guard, timeout, caps, owned)

    @property
    def info(self) -> dict[str, Any]:
        return self.worker.ready()

    @property
    def triples(self) -> int:
        """How many triples the store holds."""
        return int(self.info["triples"])

    def close(self) -> None:
        self.worker.close()
        for path in self._owned:
            path.unlink(missing_ok=True)

    def classify(self, statement: str, timeout: float | None = None) -> Verdict:
        """The guard's verdict with rdflib's parser, here, once per text (cached), stopped at
        `timeout` (pyparsing is pure Python: the thread really stops)."""
        namespaces = self.info["namespaces"]
        _warm_parser()
        return run_with_timeout(
            lambda: classify_sparql(statement, self.guard, namespaces, self.caps),
            self.timeout if timeout is None else timeout)

    def reads(self, statement: str) -> list[str]:
        """The classes and properties (as CURIEs) a query mentions."""
        return self._reads(self.classify(statement))

    def _reads(self, verdict: Verdict) -> list[str]:
        vocabulary = self.info["vocabulary"]
        return sorted(vocabulary[i] for i in verdict.iris
                      if i in vocabulary and i != RDF_TYPE)

    def refusal(self, statement: str) -> str | None:
        try:
            return self.classify(statement).refused
        except QueryTimeout:
            return None

    def run(self, statement: str) -> QueryResult:
        """One query within the deadline: the guard's parse (here) and the engine's parse and
        evaluation (in the worker) both count; past it the worker is killed, so nothing runs
        on. A query the guard refuses never reaches the worker."""
        self.info  # noqa: B018 - a worker still loading its store (a replacement after a kill,
        #            say) is waited for first: its load is not the query's time
        _warm_parser()
        start = time.perf_counter()
        result = QueryResult(language="sparql", statement=statement)
        # rdflib's own store reads the text in its worker whatever is done here (it evaluates
        # the algebra it read): one parse, not two, counts against the deadline
        here = len(statement) <= PARSE_HERE and self.worker.config.get("plugin") != "default"
        try:
            verdict = self.classify(statement) if here else Verdict()
        except QueryTimeout:
            result.timed_out, result.error = True, f"stopped after {self.timeout:g} s"
            verdict = Verdict(error=result.error)
        result.reads = self._reads(verdict)
        if verdict.refused or verdict.error:
            result.refused, result.error = verdict.refused, result.error or verdict.error
        else:
            left = self.timeout - (time.perf_counter() - start)
            request = {"op": "run", "statement": statement, "read": here,
                       "caps": asdict(self.caps)}  # caps per query, as the SQL worker's
            try:
                reply = self.worker.call(request, left) if left > 0 else None
            except WorkerDied as exc:
                result.error = str(exc)
            else:
                if reply is None:
                    result.timed_out = True
                    result.error = f"stopped after {self.timeout:g} s"
                elif "language" in reply:
                    reads, result = result.reads, QueryResult(**reply)
                    result.reads = reads if here else result.reads
                else:
                    result.error = str(reply.get("error") or "the store's worker failed")
        result.elapsed_s = round(time.perf_counter() - start, 4)
        result.cap_text(self.caps)
        return result

    def prefixes(self) -> dict[str, str]:
        return dict(self.info["prefixes"])

    def catalog(self) -> list[TableInfo]:
        """Classes with instance counts; each 'column' is a property used on its instances."""
        return [TableInfo(name=t["name"], rows=int(t["rows"]),
                          columns=tuple((p, n) for p, n in t["columns"]),
                          withheld=tuple(t["withheld"])) for t in self.info["catalog"]]

    def _curie(self, iri: str) -> str:
        for prefix, ns in self.prefixes().items():
            if iri.startswith(ns) and len(iri) > len(ns):
                return f"{prefix}:{iri[len(ns):]}"
        return iri

    def describe(self, name: str) -> str:
        wanted = {name, self._curie(name.strip("<>"))}  # a CURIE, or a full IRI
        for info in self.catalog():
            if info.name in wanted:
                return info.described("class", "instances", self.guard.persona, "{0} ({1})")
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


_PREFIX = re.compile(r"^@prefix\s+([\w.-]*):\s*<([^>]*)>\s*\.", re.M)


def graph_files(source: StoreSource, data: str, guard: Guard, *, ontology: bool = False
                ) -> tuple[list[tuple[Path, str]], dict[str, str], set[str]]:
    """What a graph store of `source` loads for `guard`'s persona: (path, rdflib format) pairs
    of the persona's view (withheld triples absent) — its data, the rule-derived triples for
    `derived`, the definitions' triples with `ontology` — the prefixes it binds, and the
    namespaces among them its description leaves out (`rdfmap.per_id_namespaces`)."""
    if data not in ("raw", "derived"):
        raise HarnessBroken(f"the graph store has no '{data}' data (raw or derived)")
    files = source.files(guard.view)  # the persona's build: withheld triples absent
    load: list[tuple[Path, str]] = [(files.data, files.data_format)]
    if data == "derived":
        if files.derived_nt is None:
            raise HarnessBroken(f"{source.pack} has no rule-derived graph")
        load.append((files.derived_nt, "nt"))
    if ontology:
        if source.ontology is None:
            raise HarnessBroken(f"{source.pack} has no definitions' triples (definitions.ttl)")
        load.append((source.ontology, "turtle"))
    prefixes = turtle_prefixes(files.prefixes)
    return load, prefixes, per_id_namespaces(prefixes.values(), source.rdf)


def turtle_prefixes(path: Path) -> dict[str, str]:
    """The @prefix declarations at the head of a Turtle file."""
    with path.open(encoding="utf-8") as fh:
        return dict(_PREFIX.findall(fh.read(1 << 16)))


_WARM: list[bool] = []


def _warm_parser() -> None:
    """Build rdflib's query grammar once per process, outside any query's deadline (the first
    parse pays for it: a tenth of a second, more on a busy machine)."""
    if not _WARM:
        classify_sparql("ASK { ?s ?p ?o }", Guard(reads_personal=True))
        _WARM.append(True)


class GraphStore(StoreKind):
    """A SPARQL store kind: a built variant's graph held by one rdflib store plugin, in a
    worker process."""

    language = "sparql"

    def __init__(self, name: str, plugin: str, *, default: bool = False,
                 needs: str | None = None, parsers: tuple[str, ...] = ()) -> None:
        self.name = name
        self.plugin = plugin    # the rdflib store plugin holding the triples
        self.default = default
        self.needs = needs      # the module the plugin comes from
        self.parsers = parsers  # the engine's own parser, which must accept a query too

    def open(self, source: StoreSource, data: str, guard: Guard, *, ontology: bool = False,
             timeout: float = 60.0) -> SparqlExecutor:
        load, prefixes, hidden = graph_files(source, data, guard, ontology=ontology)
        return SparqlExecutor.over(self.plugin, load, guard, timeout=timeout,
                                   parsers=self.parsers, prefixes=prefixes, hidden=hidden)

    def from_context(self, context: str, guard: Guard, caps: Caps = CAPS) -> SparqlExecutor:
        from pytest_kgbench.packs.reading import turtle_blocks

        owned = []
        for body in turtle_blocks(context):
            fd, name = tempfile.mkstemp(prefix="kgbench-context-", suffix=".ttl")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(body)
            owned.append(Path(name))
        return SparqlExecutor.over(self.plugin, [(p, "turtle") for p in owned], guard,
                                   parsers=self.parsers, owned=tuple(owned), caps=caps)

    def classify(self, guard: Guard, statement: str) -> str | None:
        return classify_sparql(statement, guard).refused

    def check(self) -> str | None:
        if self.needs is None:
            return None
        import importlib.util

        if importlib.util.find_spec(self.needs) is None:
            return f"the {self.name} engine needs the package {self.needs} (pip install it)"
        return None


STORES = (GraphStore("rdflib", "default", default=True),
          GraphStore("oxigraph", "Oxigraph", needs="oxrdflib", parsers=("oxigraph",)))


def personal_predicates(personal: Mapping[str, frozenset[str]], rdf: Mapping[str, Any]
                        ) -> frozenset[str]:
    """The predicate IRIs that personal columns map to under a pack's RDF mapping."""
    from pytest_kgbench.packs.rdf.mapping import personal_properties

    return frozenset(p for p, _, _, _ in personal_properties(personal, rdf))
