"""Ours against the alternative, as ratios in one run: a pack's SHACL rules (SHACL-AF SPARQL
rules) run three ways on the same raw graph, in one process —

- `direct`: each rule's CONSTRUCT straight on a pyoxigraph store, in pyshacl's order (what the
  build runs, `ontology.run_rules(store="direct")`);
- `Oxigraph`: pyshacl itself on an oxrdflib store;
- `default`: pyshacl on rdflib's own memory store (the reference the design names).

All three must derive the same triples; the script checks that before it prints a time. The
gold and trap queries on each engine are timed by query_engines.py.

    python benchmarks/engines.py --pack credit --variant base --repeats 3
    python benchmarks/engines.py --pack credit --variant large --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import load, machine  # noqa: E402 - beside this script

from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.rdf.ontology import run_rules, to_sorted_ntriples
from pytest_kgbench.packs.schema import find_pack

ROOT = Path(__file__).resolve().parents[1]
STORES = ("direct", "Oxigraph", "default")


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The median seconds of `repeats` calls, and the last call's result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--variant", default="large")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=None, help="build cache (default: an empty folder)")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}; load average {load()}")
    pack = find_pack(args.pack, ROOT / "datasets", ROOT / "ontology")
    shapes = pack.ontology_file("shapes.ttl")
    if shapes is None:
        print(f"{args.pack} has no shapes.ttl: no rules to run")
        return 1
    ttl = shapes.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="kgbench-engines-") as tmp:
        built = build_variant(pack, args.variant, Path(args.cache or tmp))
        graph = built.graph
        runs = {store: timed(lambda s=store: run_rules(graph, ttl, store=s), args.repeats)
                for store in STORES}
    derived = {store: to_sorted_ntriples(result) for store, (_, result) in runs.items()}
    if len(set(derived.values())) != 1:
        sizes = {store: text.count("\n") for store, text in derived.items()}
        print(f"the stores disagree: {sizes} derived lines")
        return 1
    base = runs["default"][0]
    print(f"SHACL rules, {args.pack}/{args.variant}: {len(graph):,} triples, "
          f"{derived['direct'].count(chr(10)):,} derived, the same on every store "
          f"(median of {args.repeats}, load {load()})")
    print("| store | seconds | rdflib's / this |")
    print("|---|---|---|")
    for store, (secs, _) in runs.items():
        print(f"| {store} | {secs:.2f} | {base / secs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
