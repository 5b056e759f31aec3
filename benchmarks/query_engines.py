"""Every gold query of a pack's variant on each engine of its language, as ratios in one run:
the median time per query on each engine against the language's default (rdflib for SPARQL,
DuckDB for SQL). Every engine must give the same answer fields as the default on every query;
the script says which differ before it times anything.

    python benchmarks/query_engines.py --pack credit --variant chains \\
        --sparql rdflib,oxigraph,endpoint=http://127.0.0.1:7878/query \\
        --sql duckdb,postgres=postgresql://kgbench@127.0.0.1:5432/kgbench

Each store is opened once per persona (loading it is not timed); each query runs `--repeats`
times through the store's guard, exactly as an agent's query would, and its median is kept.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from pytest_kgbench.answers import fields_from_rows
from pytest_kgbench.build import build_variant
from pytest_kgbench.packs import find_pack
from pytest_kgbench.questions import load_questions
from pytest_kgbench.registry import Registry, activate
from pytest_kgbench.stores import open_store

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, load average {os.getloadavg()[0]:.2f}")


def time_engine(built, questions, language: str, engine: str, repeats: int
                ) -> tuple[dict[str, float], dict[str, object]]:
    """query id -> median seconds, and query id -> the answer fields it gave."""
    times: dict[str, float] = {}
    fields: dict[str, object] = {}
    stores = {}
    try:
        for q in questions:
            if q.persona not in stores:
                stores[q.persona] = open_store(built, language, q.persona,
                                               engines={language: engine}, timeout=600)
            store = stores[q.persona]
            runs = []
            for _ in range(repeats):
                start = time.perf_counter()
                result = store.run(q.gold[language])
                runs.append(time.perf_counter() - start)
            times[q.id] = statistics.median(runs)
            fields[q.id] = (fields_from_rows(q.fields, result.columns, result.rows)
                            if result.ok else {"failed": result.error or result.refused
                                               or "timeout"})
    finally:
        for store in stores.values():
            store.close()
    return times, fields


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--variant", default="base")
    ap.add_argument("--sparql", default="rdflib,oxigraph")
    ap.add_argument("--sql", default="duckdb")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=str(ROOT / ".kgbench-cache"))
    args = ap.parse_args()
    activate(Registry.shipped())
    pack = find_pack(args.pack, ROOT / "datasets", ROOT / "ontology")
    built = build_variant(pack, args.variant, Path(args.cache))
    qset = load_questions(ROOT / "questions" / f"{args.pack}.yaml")
    print(f"machine: {machine()}")
    print(f"{args.pack}/{args.variant}, median of {args.repeats} runs per query\n")
    print("| language | engine | queries | median per query | total | ratio to the default "
          "(median per query) | answers as the default's |")
    print("|---|---|---|---|---|---|---|")
    for language, spec in (("sparql", args.sparql), ("sql", args.sql)):
        engines = [e for e in spec.split(",") if e]
        if not engines:
            continue
        questions = [q for q in qset.questions if language in q.gold and q.expect == "answer"
                     and not q.skip and (q.variants is None or args.variant in q.variants)]
        base_times, base_fields = time_engine(built, questions, language, engines[0],
                                              args.repeats)
        base_median = statistics.median(base_times.values())
        for engine in engines:
            times, fields = (base_times, base_fields) if engine == engines[0] else \
                time_engine(built, questions, language, engine, args.repeats)
            differ = [q for q in fields if fields[q] != base_fields.get(q)]
            median = statistics.median(times.values())
            label = engine.split("=")[0] + ("=…" if "=" in engine else "")
            print(f"| {language} | {label} | {len(times)} | {1000 * median:.2f} ms | "
                  f"{sum(times.values()):.2f} s | {base_median / median:.2f} | "
                  f"{'all' if not differ else 'differ: ' + ', '.join(differ)} |")
    print(f"\nmeasured at load average {os.getloadavg()[0]:.2f}; ratio > 1: faster than the "
          "default")


if __name__ == "__main__":
    main()
