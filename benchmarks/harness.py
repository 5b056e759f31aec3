"""The harness against its limits, as ratios in one run: what the plugin itself costs per item
with the gold agent (serial and on two workers), and the peak memory of a process holding the
largest variants.

    python benchmarks/harness.py            # credit and research, every condition
    python benchmarks/harness.py --quick    # D1 and D4 only

Each figure is a whole `pytest` process (its peak RSS from /usr/bin/time, or getrusage where
that is missing), after one warm-up run that builds the variants into the cache, so builds are
not counted. Per item, from the run's answers.jsonl:
- item: pytest's duration of the item (setup, call, teardown);
- agent: the gold agent's own time (its reference query and answer), `elapsed_s`;
- harness: item minus agent, what the plugin adds (prompt, grading, banking the record).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]



def run(args: list[str], run_id: str, reports: Path) -> dict:
    """One pytest process: wall seconds, peak RSS (MiB, the largest process of its tree) and
    its items' records."""
    cmd = [sys.executable, "-m", "pytest", *args, "--run-id", run_id, "-q", "-p", "no:randomly",
           "--progress", "0", "-o", f"kgbench_reports={reports}"]
    timer = shutil.which("time") and Path("/usr/bin/time").exists()
    full = ["/usr/bin/time", "-f", "MAXRSS %M", *cmd] if timer else cmd
    start = time.perf_counter()
    done = subprocess.run(full, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}"
                         f"\n{done.stderr[-2000:]}")
    found = re.search(r"MAXRSS (\d+)", done.stderr)
    rss = int(found.group(1)) / 1024 if found else float("nan")
    records = [json.loads(x) for x in
               (reports / run_id / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    return {"wall": wall, "rss": rss, "records": records}


def per_item(result: dict) -> tuple[float, float, float]:
    items = [r["duration_s"] for r in result["records"]]
    agent = [r.get("elapsed_s") or 0.0 for r in result["records"]]
    harness = [i - a for i, a in zip(items, agent)]
    return statistics.median(items), statistics.median(agent), statistics.median(harness)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="D1 and D4 only")
    args = ap.parse_args()
    select = ["--condition", "D1,D4"] if args.quick else []
    base = ["questions/credit.yaml", "questions/research.yaml", "--agent", "gold", *select]
    # rdflib takes minutes on some large-variant queries: the large run is about memory
    large = [*base, "--variant", "large", "--sparql-engine", "oxigraph", "--query-timeout", "600"]
    with tempfile.TemporaryDirectory(prefix="kgbench-bench-") as tmp:
        reports = Path(tmp)
        print(f"machine: {machine()}; load average {load()}")
        run(base, "warm-base", reports)       # builds the variants: not counted
        run(large, "warm-large", reports)
        serial = run(base, "serial", reports)
        parallel = run([*base, "-n", "2"], "parallel", reports)
        biggest = run(large, "large", reports)
        print(f"measured at load average {os.getloadavg()[0]:.2f}")
    n = len(serial["records"])
    print(f"\ngold agent, credit and research base, {n} items (builds cached)\n")
    print("| run | wall | wall per item | item (median) | agent (median) | "
          "harness (median) | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name, res in (("serial", serial), ("-n 2", parallel)):
        item, agent, harness = per_item(res)
        print(f"| {name} | {res['wall']:.1f} s | {1000 * res['wall'] / len(res['records']):.1f} ms"
              f" | {1000 * item:.1f} ms | {1000 * agent:.1f} ms | {1000 * harness:.1f} ms | "
              f"{res['rss']:.0f} MiB |")
    print(f"\nserial / -n 2 wall: {serial['wall'] / parallel['wall']:.2f}")
    item, agent, harness = per_item(biggest)
    print(f"\nthe large variants ({len(biggest['records'])} items, one process): wall "
          f"{biggest['wall']:.1f} s, peak RSS {biggest['rss']:.0f} MiB; per item {1000 * item:.1f}"
          f" ms (agent {1000 * agent:.1f} ms, harness {1000 * harness:.1f} ms)")


if __name__ == "__main__":
    main()
