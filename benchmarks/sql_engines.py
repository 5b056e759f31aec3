"""The SQL engines side by side: every gold and trap SQL query (raw and executed, each for its
question's persona) on DuckDB and on PostgreSQL, checked for identical results, then timed.

    python benchmarks/sql_engines.py [--dsn postgresql://USER:PASSWORD@HOST:PORT/DB]
                                     [--variants credit/base,credit/large,research/large]
                                     [--repeats 5]

Without --dsn it starts a throwaway server from the machine's initdb/postgres, as the tests do
(tests/pg_server.py). Each query runs through the store's `run` (guard, deadline, caps), as an
agent's does; the table gives the median per query of each engine, their ratio, the total, and
how long the first open of the variant took on PostgreSQL (the load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def queries(pack: str, variant: str) -> list[tuple[str, str, str, str]]:
    """(question id, where, persona, statement) of every gold and trap SQL query."""
    from pytest_kgbench.questions import load_questions

    out = []
    for q in load_questions(ROOT / "questions" / f"{pack}.yaml").questions:
        if q.variants and variant not in q.variants:
            continue
        for refs in (q.gold, q.trap):
            for where in ("sql", "executed"):
                if where in refs:
                    out.append((q.id, where, q.persona, refs[where]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--variants", default="credit/base,credit/large,research/large")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cache", default=str(ROOT / ".kgbench-cache"))
    args = ap.parse_args()

    from pytest_kgbench.build import build_variant
    from pytest_kgbench.packs import find_pack
    from pytest_kgbench.settings import redact_secrets
    from pytest_kgbench.stores import open_store

    server = None
    dsn = args.dsn
    if dsn is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from pg_server import PgServer, missing

        if missing():
            print(f"no PostgreSQL: {missing()}", file=sys.stderr)
            return 2
        server = PgServer().start()
        dsn = server.database()
    engines = {"sql": f"postgres={dsn}"}
    print(f"# {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"PostgreSQL at {redact_secrets(dsn)}; {args.repeats} repeats")
    print("| variant | queries | DuckDB median | PostgreSQL median | ratio PG/DuckDB | "
          "DuckDB total | PostgreSQL total | PostgreSQL load |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for name in args.variants.split(","):
            pack_name, variant = name.split("/")
            pack = find_pack(pack_name, ROOT / "datasets", ROOT / "ontology")
            built = build_variant(pack, variant, Path(args.cache))
            todo = queries(pack_name, variant)
            stores: dict = {}
            started = time.perf_counter()
            for _, where, persona, _ in todo:  # the first opens load the variant
                if (where, persona) not in stores:
                    stores[(where, persona)] = (
                        open_store(built, where, persona, engines=engines),
                        open_store(built, where, persona))
            load = time.perf_counter() - started
            times: dict[str, list[float]] = {"pg": [], "duck": []}
            for qid, where, persona, statement in todo:
                pg, duck = stores[(where, persona)]
                a, b = pg.run(statement), duck.run(statement)
                if (a.columns, a.error, a.refused, len(a.rows)) != \
                        (b.columns, b.error, b.refused, len(b.rows)):
                    print(f"  {qid} {where}: results differ: {a.error or a.refused} / "
                          f"{b.error or b.refused}", file=sys.stderr)
                for label, store in (("pg", pg), ("duck", duck)):
                    runs = []
                    for _ in range(args.repeats):
                        t = time.perf_counter()
                        store.run(statement)
                        runs.append(time.perf_counter() - t)
                    times[label].append(statistics.median(runs))
            for pair in stores.values():
                for store in pair:
                    store.close()
            md, mp = statistics.median(times["duck"]), statistics.median(times["pg"])
            print(f"| {name} | {len(todo)} | {md * 1000:.1f} ms | {mp * 1000:.1f} ms | "
                  f"{mp / md:.2f} | {sum(times['duck']):.2f} s | {sum(times['pg']):.2f} s | "
                  f"{load:.2f} s |")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
