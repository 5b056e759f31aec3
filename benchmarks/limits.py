"""The stores' limits against queries built to break them (issue 32): each query through
`kgbench query` — exactly the executor, guard and tool a model's query meets — timed and
watched, and the table docs/safety.md shows.

    python benchmarks/limits.py [--timeout 5] [--engines duckdb,postgres]
                                [--source DIR --label NAME] [--out FILE]

Per query: its wall from arrival to answer (`elapsed_s`, as the executor reports it), the whole
`kgbench query` process's wall (its start and the store's open included), how it ended, and
the peak resident memory (VmHWM, polled from /proc every 20 ms) of every process it ran in —
the `kgbench query` process, its store's worker (where there is one) and, on PostgreSQL, the
server's processes. `--source DIR` runs another checkout of the package (a folder holding
`pytest_kgbench/`, put first on PYTHONPATH), e.g. the commit before the fix:

    git -C . archive d89df2a pytest_kgbench | tar -x -C /tmp/kgbench-base
    python benchmarks/limits.py --source /tmp/kgbench-base --label d89df2a

A query still running past --kill-after seconds, or whose processes hold more than
--kill-above GiB, is killed by the benchmark (the machine is shared): the row says so. The
PostgreSQL rows use a throwaway server (tests/pg_server.py), a fresh database per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from peaks import PeakRss, tree, vm_hwm  # noqa: E402

QUERIES: dict[str, list[str]] = {
    "duckdb": [
        "SELECT unnest(range(50000000)) AS n",
        "SELECT unnest(range(500000000)) AS n",
        "SELECT repeat('x', 1000000000) AS x",
        "SELECT string_agg(CAST(x AS VARCHAR), ',') AS s FROM range(300000000) t(x)",
        "SELECT * FROM rating_actions, countries",
    ],
    "postgres": [
        "SELECT pg_terminate_backend(pg_backend_pid())",
        "SELECT pg_cancel_backend(pg_backend_pid())",
        "SELECT repeat('x', 500000000) AS x",
        "SELECT repeat('x', 1000000) AS x FROM generate_series(1, 100000)",
        "SELECT string_agg(CAST(x AS text), ',') AS s FROM generate_series(1, 300000000) x",
        "SELECT * FROM rating_actions, countries",
    ],
}
MAIN = "import sys; from pytest_kgbench.cli import main; sys.exit(main(sys.argv[1:]))"


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f}"


def one(query: str, args: argparse.Namespace, cache: Path, engine: str | None,
        server: Any) -> dict[str, Any]:
    """`kgbench query` on `query`: its result, walls and peaks."""
    cmd = [sys.executable, "-c", MAIN, "query", "--pack", "credit", "--root", str(ROOT),
           "--cache", str(cache), "--query-timeout", f"{args.timeout:g}"]
    if engine:
        cmd += ["--sql-engine", engine]
    env = dict(os.environ)
    if args.source:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (args.source, env.get("PYTHONPATH"))
                                            if p)
    out = tempfile.TemporaryFile()
    started = time.monotonic()
    # run from outside the repository: `python -c` puts its folder first on the path
    proc = subprocess.Popen([*cmd, query], stdout=out, stderr=subprocess.STDOUT, env=env,
                            cwd=tempfile.gettempdir())
    killed = ""

    server_pids: set[int] = set()  # every server process seen (a backend may end first)
    # a server process from before this query counts only if its peak grew during it
    before = {p: vm_hwm(p) or 0 for p in (tree(server.proc.pid) if server is not None else [])}

    def watched() -> list[int]:
        if server is not None:
            server_pids.update(tree(server.proc.pid))
        return tree(proc.pid) + sorted(server_pids)

    with PeakRss(watched) as peak:
        while proc.poll() is None:
            time.sleep(0.05)
            held = sum(peak.peaks.get(p, 0) for p in tree(proc.pid))
            if time.monotonic() - started > args.kill_after:
                killed = f"killed by the benchmark after {args.kill_after:g} s"
            elif held > args.kill_above * (1 << 30):
                killed = f"killed by the benchmark at {gib(held)} GiB"
            if killed:
                for pid in reversed(tree(proc.pid)):
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
                proc.wait()
    wall = time.monotonic() - started
    out.seek(0)
    text = out.read().decode("utf-8", "replace")
    main_peak = peak.peaks.get(proc.pid, 0)
    worker_peak = max((v for p, v in peak.peaks.items()
                       if p != proc.pid and p not in server_pids), default=0)
    server_peak = max((v for p, v in peak.peaks.items()
                       if p in server_pids and v > before.get(p, 0)), default=0)
    row: dict[str, Any] = {"query": query, "wall_process": wall, "main": main_peak,
                           "worker": worker_peak, "server": server_peak}
    if killed:
        row.update(outcome=killed, elapsed=None)
        return row
    try:
        result = json.loads(text[text.index("{"):])["result"]
    except (ValueError, KeyError):
        row.update(outcome=f"exit {proc.returncode}: {text.strip().splitlines()[-1][:80]}",
                   elapsed=None)
        return row
    if result["refused"]:
        outcome = "refused: " + result["refused"].split(":")[0]
    elif result["timed_out"]:
        outcome = f"timed out ({result['error']})"
    elif result["error"]:
        outcome = "error: " + result["error"].splitlines()[0][:70]
    else:
        outcome = (f"{len(result['rows'])} of {result['row_count']} rows shown"
                   + (" (capped)" if result["truncated"] else ""))
    row.update(outcome=outcome, elapsed=result["elapsed_s"])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=5.0, help="--query-timeout (seconds)")
    ap.add_argument("--engines", default="duckdb,postgres")
    ap.add_argument("--source", default=None, help="a checkout of pytest_kgbench to run")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--kill-after", type=float, default=120.0)
    ap.add_argument("--kill-above", type=float, default=8.0, help="GiB")
    ap.add_argument("--out", default=None, help="append the table to this file")
    args = ap.parse_args(argv)
    lines = [f"`{args.label}`, --query-timeout {args.timeout:g}; {machine()}; "
             f"load {load()} at the start", "",
             "| engine | query | answered in (s) | process (s) | how it ended | peak RSS GiB: "
             "kgbench / its worker / largest server process |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="kgbench-limits-") as cache:
        for engine in args.engines.split(","):
            server = None
            if engine == "postgres":
                from pg_server import PgServer

                server = PgServer().start()
            try:
                spec = f"postgres={server.database()}" if server is not None else None
                one("SELECT 1", args, Path(cache), spec, server)  # the build, the load
                for query in QUERIES[engine]:
                    row = one(query, args, Path(cache), spec, server)
                    elapsed = "—" if row["elapsed"] is None else f"{row['elapsed']:.2f}"
                    peaks = " / ".join(gib(row[k]) if row[k] else "—"
                                       for k in ("main", "worker", "server"))
                    lines.append(f"| {engine} | `{query}` | {elapsed} | "
                                 f"{row['wall_process']:.1f} | {row['outcome']} | {peaks} |")
                    print(lines[-1], flush=True)
            finally:
                if server is not None:
                    server.stop()
    lines += ["", f"load {load()} at the end"]
    table = "\n".join(lines)
    print("\n" + table)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(table + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
