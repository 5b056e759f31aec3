"""DuckDB against PostgreSQL on every gold and trap SQL query (raw and executed tables): a thin
alias of query_engines.py, which measures it (and the SPARQL engines) with one code path.

    python benchmarks/sql_engines.py [--dsn postgresql://USER:PASSWORD@HOST:PORT/DB]
                                     [--variants credit/base,credit/large,research/large]
                                     [--repeats 5] [--limit 60]

is `query_engines.py --sparql '' --sql duckdb,postgres[=DSN] --kinds gold,trap --executed`;
without --dsn a throwaway server is started from the machine's initdb/postgres, as the tests
do (tests/pg_server.py). Any other option is passed on to query_engines.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--variants", default="credit/base,credit/large,research/large")
    ap.add_argument("--repeats", default="5")
    args, rest = ap.parse_known_args(argv)
    spec = importlib.util.spec_from_file_location("query_engines", HERE / "query_engines.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["query_engines"] = module
    spec.loader.exec_module(module)
    postgres = f"postgres={args.dsn}" if args.dsn else "postgres"
    return int(module.main(["--variants", args.variants, "--repeats", args.repeats,
                            "--sparql", "", "--sql", f"duckdb,{postgres}",
                            "--kinds", "gold,trap", "--executed", *rest]))


if __name__ == "__main__":
    sys.exit(main())
