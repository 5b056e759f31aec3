"""The SPARQL engines' limits, measured (docs/engines.md): what the guard's parse costs on the
shapes rdflib's parser is slowest on, at sizes around the term cap; and what an Oxigraph
server does once the endpoint engine's client gave up on a query.

    python benchmarks/sparql_limits.py --parse-cost 600,1200,2400
    python benchmarks/sparql_limits.py --after-timeout 10,5 --limit 5
    python benchmarks/sparql_limits.py --after-timeout 10,5 --limit 5 --server virtuoso

`--parse-cost` classifies each shape (guard.classify_sparql: rdflib's parser and algebra) and
reports the CPU time of the classifying thread. `--after-timeout` starts a throwaway Oxigraph
server (tests/oxigraph_server.py; its address space capped at 4 GiB) with each `--timeout-s`,
loads credit/base (`--pack`, `--variant`) through the endpoint engine held to `--limit`
seconds, and reports, per query, what the client saw and the server's CPU seconds from the
client's return until none of its threads runs, and its peak memory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]


# --- the guard's parse: what rdflib's parser costs per term, on the worst shapes ---------------

# (head, unit, tail): a query made of `unit` repeated; the worst shapes found for rdflib's
# parser and algebra (an expression's list of operands, the triples of one group, whose
# ordering is quadratic), and the ones the issue named (VALUES, FILTERs, nesting, paths)
PARSE_SHAPES: dict[str, tuple[str, str, str]] = {
    "COALESCE(1,1,…)": ("SELECT ?s WHERE { ?s ?p ?o FILTER(COALESCE(1", ",1", ")) }"),
    "?o IN (1,1,…)": ("SELECT ?s WHERE { ?s ?p ?o FILTER(?o IN (1", ",1", ")) }"),
    "1+1+…": ("SELECT ?s WHERE { ?s ?p ?o FILTER(1", "+1", ") }"),
    "FILTER(true) …": ("SELECT ?s WHERE { ?s ?p ?o ", "FILTER(true) ", "}"),
    "?s ?p ?o,?o,… (one group)": ("SELECT ?s WHERE { ?s ?p ?o", ",?o", " }"),
    "?s ?p ?o;?p ?o… (one group)": ("SELECT ?s WHERE { ?s ?p ?o", ";?p ?o", " }"),
    "ORDER BY ?s ?s …": ("SELECT ?s WHERE { ?s ?p ?o } ORDER BY ?s", " ?s", ""),
    "VALUES ?x { 1 1 … }": ("SELECT ?x WHERE { VALUES ?x { ", "1 ", "} }"),
    "{…} UNION {…} …": ("SELECT ?s WHERE { {?s ?p ?o}", " UNION {?s ?p ?o}", " }"),
    "<p>/<p>/… (a path)": ("SELECT ?s WHERE { ?s <urn:p>", "/<urn:p>", " ?o }"),
    "{ { { … } } } (nested groups)": ("SELECT ?s WHERE ", "{ ", "?s ?p ?o"),
    "((( … ))) (deep parentheses)": ("SELECT ?s WHERE { ?s ?p ?o FILTER", "(", "?o"),
}


def shaped(shape: str, terms: int) -> str:
    """A query of `shape` holding about `terms` terms (guard.sparql_terms); nested shapes are
    closed as deep as they were opened."""
    from pytest_kgbench.engines.guard import sparql_terms

    head, unit, tail = PARSE_SHAPES[shape]
    closing = {"{ ": " }", "(": ")"}.get(unit, "")

    def text(n: int) -> str:
        return head + unit * n + tail + closing * n + (" }" if unit == "(" else "")

    per = max(1, sparql_terms(text(2)) - sparql_terms(text(1)))
    return text(max(1, 1 + (terms - sparql_terms(text(1))) // per))


def parse_cost_rows(sizes: Sequence[int]) -> list[str]:
    """The guard's classification (rdflib's parse and algebra, guard.classify_sparql) of each
    shape at each size: its terms, characters, the verdict, and the CPU seconds it took."""
    from pytest_kgbench.engines.guard import Guard, classify_sparql, sparql_terms

    guard = Guard(reads_personal=True)
    classify_sparql("ASK { ?s ?p ?o }", guard)  # the grammar is built once, untimed
    out = ["| shape | terms | characters | verdict | CPU s |", "|---|---|---|---|---|"]
    for shape in PARSE_SHAPES:
        for size in sizes:
            text = shaped(shape, size)
            start = time.thread_time()
            verdict = classify_sparql(text, guard)
            took = time.thread_time() - start
            what = ("refused: over the cap" if verdict.refused
                    else (verdict.error or "runs")[:40])
            out.append(f"| {shape} | {sparql_terms(text):,} | {len(text):,} | {what} | "
                       f"{took:.3f} |")
    return out


# --- the endpoint's server after its client gave up -------------------------------------------

AFTER_QUERIES = {  # what a client timeout leaves the server doing, by kind of query
    "COUNT over a 3-way cross join (reads the store)":
        "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }",
    "SELECT * over a 2-way cross join (streamed)":
        "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f }",
    "ORDER BY over a 2-way cross join (a sort)":
        "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f } ORDER BY ?a",
    "200 copies of one pattern (Oxigraph's preparation)":
        "SELECT ?s WHERE { ?s ?p ?o" + ",?o" * 200 + " }",
}


def _cpu(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _running(pid: int) -> bool:
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                return True
        except (OSError, IndexError):
            continue
    return False


def after_timeout_rows(built: Any, server_limits: Sequence[int], deadline: float,
                       wait: float = 60.0, server_kind: str = "oxigraph") -> list[str]:
    """Each query of AFTER_QUERIES on a throwaway server (`server_kind`: Oxigraph,
    tests/oxigraph_server.py, its address space capped at 4 GiB, started with each
    `--timeout-s`; or Virtuoso, tests/virtuoso_server.py, with each as its [SPARQL]
    MaxQueryExecutionTime, and the engine's per-request `timeout`), through the endpoint
    engine held to `deadline`: what the client saw, and the server's CPU seconds from the
    client's return until none of its threads runs (at most `wait` s), and its peak memory."""
    import resource

    sys.path.insert(0, str(ROOT / "tests"))
    from oxigraph_server import OxigraphServer, oxigraph_binary
    from virtuoso_server import VirtuosoServer
    from virtuoso_server import missing as virtuoso_missing

    from pytest_kgbench.engines.stores import find_kind, guard_for
    from pytest_kgbench.run.shipped import shipped

    binary = oxigraph_binary()
    if server_kind == "oxigraph" and binary is None:
        raise SystemExit("the oxigraph CLI is not installed (pip install -e '.[dev]')")
    if server_kind == "virtuoso" and virtuoso_missing():
        raise SystemExit(virtuoso_missing())
    head = "--timeout-s" if server_kind == "oxigraph" else "MaxQueryExecutionTime"
    out = [f"| server {head} | query | client | client wall | server CPU after the client "
           "returned | server peak RSS |", "|---|---|---|---|---|---|"]
    for limit in server_limits:
        with tempfile.TemporaryDirectory(prefix="kgbench-after-") as tmp:
            server: Any = (OxigraphServer(binary or "", Path(tmp) / "store", timeout_s=limit)
                           if server_kind == "oxigraph" else VirtuosoServer(timeout_s=limit))
            server.start()
            assert server.proc is not None
            pid = server.proc.pid
            resource.prlimit(pid, resource.RLIMIT_AS, (4 << 30, 4 << 30))
            try:
                kind = find_kind(shipped(), "sparql", server.engine)
                ex = kind.open(built.source, "raw", guard_for(built, "analyst"), timeout=deadline)
                for name, query in AFTER_QUERIES.items():
                    started = time.monotonic()
                    result = ex.run(query)
                    took = time.monotonic() - started
                    before, quiet, waited = _cpu(pid), 0, 0.0
                    while quiet < 2 and waited < wait:
                        quiet = 0 if _running(pid) else quiet + 1
                        time.sleep(0.1)
                        waited += 0.1
                    spent = _cpu(pid) - before
                    after = f"{spent:.2f} s" + (f" (still running at {wait:g} s)"
                                                if quiet < 2 else "")
                    seen = ((result.error or "timeout") if result.timed_out
                            else result.error[:60] if result.error
                            else f"{result.row_count} rows")
                    peak = next((int(x.split()[1]) >> 10 for x in Path(
                        f"/proc/{pid}/status").read_text().splitlines()
                        if x.startswith("VmHWM")), 0)
                    out.append(f"| {limit} | {name} | {seen} | {took:.1f} s | {after} | "
                               f"{peak} MiB |")
                    sys.stdout.flush()
                ex.close()
            finally:
                server.stop()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--parse-cost", default=None, metavar="TERMS,...",
                    help="time the guard's parse of the worst shapes at these sizes")
    ap.add_argument("--after-timeout", default=None, metavar="SECONDS,...",
                    help="what an Oxigraph server started with each --timeout-s does after "
                         "the endpoint's client (held to --limit) gave up")
    ap.add_argument("--limit", type=float, default=5.0, help="the client's deadline (s)")
    ap.add_argument("--server", default="oxigraph", choices=("oxigraph", "virtuoso"),
                    help="the server --after-timeout starts")
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--variant", default="base")
    ap.add_argument("--cache", default=str(ROOT / ".kgbench-cache"))
    args = ap.parse_args(argv)
    print(f"machine: {machine()}\nat the start: {load()}")
    if args.parse_cost:
        print("\n".join(parse_cost_rows([int(x) for x in args.parse_cost.split(",")])))
    if args.after_timeout:
        from pytest_kgbench.packs.build import build_variant
        from pytest_kgbench.packs.schema import find_pack

        print(f"client deadline {args.limit:g} s")
        built = build_variant(find_pack(args.pack, ROOT / "datasets", ROOT / "ontology"),
                              args.variant, Path(args.cache))
        limits = [int(x) for x in args.after_timeout.split(",")]
        print("\n".join(after_timeout_rows(built, limits, args.limit,
                                           server_kind=args.server)))
    print(f"\nat the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
