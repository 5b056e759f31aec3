"""Ours against the alternative, as ratios in one run: the SHACL rules of a pack on rdflib's own
store against the Oxigraph store (oxrdflib), and every gold/trap SPARQL query on rdflib's engine
against Oxigraph. Both sides must give identical output; the script checks that before timing.

    python benchmarks/engines.py --pack credit --variant large --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from pytest_kgbench.answers import fields_from_rows
from pytest_kgbench.executors.guard import Guard
from pytest_kgbench.executors.sparql import SparqlExecutor
from pytest_kgbench.ontology import run_rules, to_sorted_ntriples
from pytest_kgbench.packs import build_variant, find_pack
from pytest_kgbench.questions import load_questions

ROOT = Path(__file__).resolve().parents[1]


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--variant", default="large")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    pack = find_pack(args.pack, ROOT / "datasets", ROOT / "ontology")
    built = build_variant(pack, args.variant, ROOT / ".kgbench-cache")
    shapes = pack.ontology_file("shapes.ttl")
    if shapes is not None:
        ttl = shapes.read_text(encoding="utf-8")
        t_rdflib, a = timed(lambda: run_rules(built.graph, ttl, store="default"), args.repeats)
        t_ox, b = timed(lambda: run_rules(built.graph, ttl, store="Oxigraph"), args.repeats)
        assert to_sorted_ntriples(a) == to_sorted_ntriples(b), "the two stores disagree"
        print(f"SHACL rules, {args.pack}/{args.variant} ({len(built.graph)} triples, "
              f"{len(a)} derived): rdflib {t_rdflib:.2f} s, Oxigraph {t_ox:.2f} s, "
              f"ratio rdflib/Oxigraph {t_rdflib / t_ox:.1f}")
    questions = [q for q in load_questions(ROOT / "questions" / f"{args.pack}.yaml").questions
                 if q.expect == "answer" and (q.variants is None or args.variant in q.variants)]
    graphs = {"rdflib": built.load_graph("rdflib"), "oxigraph": built.load_graph("oxigraph")}
    totals = {}
    for engine, graph in graphs.items():
        executor = SparqlExecutor(graph, Guard(reads_personal=True), timeout=600)

        def run_all() -> list:
            out = []
            for q in questions:
                for kind in ("gold", "trap"):
                    statement = getattr(q, kind).get("sparql")
                    if statement:
                        res = executor.run(statement)
                        out.append(fields_from_rows(q.fields, res.columns, res.rows))
            return out
        totals[engine] = timed(run_all, 1)
    assert totals["rdflib"][1] == totals["oxigraph"][1], "the two engines answered differently"
    t_r, t_o = totals["rdflib"][0], totals["oxigraph"][0]
    print(f"SPARQL gold+trap queries, {args.pack}/{args.variant} ({len(totals['rdflib'][1])} "
          f"queries): rdflib {t_r:.2f} s, Oxigraph {t_o:.2f} s, ratio {t_r / t_o:.1f}")


if __name__ == "__main__":
    main()
