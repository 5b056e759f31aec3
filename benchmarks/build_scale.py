"""How a build grows: credit built from scratch at several sizes, a fresh process each, with
each artefact's seconds and the process's peak memory when it was done (the manifest's
build_seconds and build_peak_rss_mib), the whole process's wall time and peak RSS, and the
growth from one size to the next as the factor doubling the size costs; then every shipped
variant of every generated pack rebuilt from scratch in one process; then, at one size, the
executed tables and the rule-derived graph checked to agree (the pack's facts:
tests/pack_declared.py).

    python benchmarks/build_scale.py                                  # 1k, 2k, 10k, 20k, 100k
    python benchmarks/build_scale.py --sizes 1000,10000 --agree 10000
    python benchmarks/build_scale.py --sizes 100000,100000,100000 --shipped --agree 0  # repeats
    nice -n 10 python benchmarks/build_scale.py --sizes 1000000 --shipped --agree 0 --timeout 3600

Each size runs as `python -m pytest_kgbench.cli build --pack credit --issuers N` (the pack's
own `scale:` flag) into an empty cache. Peak RSS is that of the build and every process below
it (a big build runs its rules in a worker process, build.RULES_APART) added up, sampled every
0.1 s by a thread of the wrapper, and never below the build's own getrusage(RUSAGE_SELF)
high-water mark; the per-artefact peaks are the build process's own. The load average is
printed with every row: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, os, resource, sys, threading, time
from pytest_kgbench.cli import main

def tree_rss():
    # resident memory of this process and every process below it (the rules' worker), MiB
    pids, total = [os.getpid()], 0
    while pids:
        pid = pids.pop()
        try:
            with open(f"/proc/{pid}/status") as fh:
                total += next(int(x.split()[1]) for x in fh if x.startswith("VmRSS:"))
            with open(f"/proc/{pid}/task/{pid}/children") as fh:
                pids += [int(x) for x in fh.read().split()]
        except (OSError, StopIteration):
            pass
    return total / 1024

peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], tree_rss())
        time.sleep(0.1)
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
code = main(sys.argv[1:])
wall = time.perf_counter() - start
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("KGBENCH-CHILD " + json.dumps({"code": code, "wall": wall, "own_peak_mib": own,
      "peak_mib": max(peak[0], own)}))
"""




def available_mib() -> float:
    """/proc/meminfo's MemAvailable, MiB (infinite where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            return next(int(x.split()[1]) for x in fh if x.startswith("MemAvailable:")) / 1024
    except (OSError, StopIteration):
        return math.inf


def child(args: list[str], timeout: float, floor_mib: float = 0) -> dict:
    """Run the CLI in a fresh process (a session of its own); its exit code, wall time and
    peak RSS (MiB). The watchdog: when the machine's available memory falls below
    `floor_mib`, the process and every one below it are killed (code "watchdog"), and so
    they are at the timeout; the lowest available memory seen is returned too."""
    import os
    import signal

    started = time.perf_counter()
    low = available_mib()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=ROOT, stdout=out,
                                stderr=err, text=True, start_new_session=True)
        code: int | str | None = None
        while (code := proc.poll()) is None:
            free = available_mib()
            low = min(low, free)
            killed = "watchdog" if free < floor_mib else "timeout" \
                if time.perf_counter() - started > timeout else None
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = killed
                break
            time.sleep(0.2)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    for line in stdout.splitlines():
        if line.startswith("KGBENCH-CHILD ") and not isinstance(code, str):
            res = json.loads(line.split(" ", 1)[1])
            res.update(stdout=stdout, low_mib=low)
            return res
    # the error's own line (a traceback's last line may be advice, as DuckDB's is)
    errors = [x for x in stderr.splitlines() if "Error" in x or "Exception" in x]
    return {"code": code, "wall": wall, "peak_mib": None, "low_mib": low,
            "stderr": (errors[-1] if errors else stderr.strip()[-300:]) if code != "watchdog"
            else f"killed: MemAvailable fell below {floor_mib:.0f} MiB ({low:.0f} MiB)"}


def manifest(cache: Path, pack: str, variant: str = "") -> dict:
    found = sorted((cache / pack).glob(f"{variant}*/manifest.json"))
    return json.loads(found[-1].read_text(encoding="utf-8")) if found else {}


def growth(rows: list[dict], key: str) -> list[str]:
    """For consecutive sizes: the cost of doubling the size, (t2/t1)^(log 2 / log(n2/n1)). A
    size given more than once (repeats) counts by its median."""
    import statistics

    by_size: dict[int, list[float]] = {}
    for row in rows:
        if row.get(key):
            by_size.setdefault(row["n"], []).append(row[key])
    points = sorted((n, statistics.median(v)) for n, v in by_size.items())
    out = []
    for (n1, t1), (n2, t2) in zip(points, points[1:]):
        factor = (t2 / t1) ** (math.log(2) / math.log(n2 / n1))
        out.append(f"{n1:,} -> {n2:,}: {t2 / t1:.2f}x for {n2 / n1:.0f}x the size, "
                   f"{factor:.2f}x per doubling")
    return out


def scale(args: argparse.Namespace) -> list[dict]:
    rows = []
    print(f"\ncredit at {args.param}=N, a fresh process and an empty cache each")
    stages = ("raw", "executed", "shacl_rules", "restricted")
    head = " | ".join(f"{s} s (peak MiB)" for s in stages)
    print(f"| {args.param} | triples | {head} | wall s | peak RSS MiB | lowest MemAvailable "
          "MiB | load 1/5/15 |")
    print("|" + "---|" * (6 + len(stages)))
    for n in args.sizes:
        with tempfile.TemporaryDirectory(prefix="kgbench-scale-") as scratch:
            # --keep: the build stays in that cache (emptied of this variant first), for the
            # queries after it; otherwise in an empty folder that goes with the run
            cache = args.keep or scratch
            if args.keep:
                import shutil

                for old in Path(cache, args.pack).glob(f"{args.param}={n}-*"):
                    shutil.rmtree(old) if old.is_dir() else old.unlink()
            before = load()
            res = child(["build", "--pack", args.pack, f"--{args.param}", str(n), "--cache",
                         cache], args.timeout, args.min_available_mib)
            man = manifest(Path(cache), args.pack, f"{args.param}={n}-")
        secs, peaks = man.get("build_seconds", {}), man.get("build_peak_rss_mib", {})
        cells = " | ".join(f"{secs[s]:.1f} ({peaks.get(s) or 0:.0f})" if s in secs else "-"
                           for s in stages)
        peak = f"{res['peak_mib']:.0f}" if res.get("peak_mib") else "-"
        status = "" if res["code"] == 0 else f" **{res['code']}**"
        triples = f"{man['triples']:,}" if "triples" in man else "-"
        print(f"| {n:,} | {triples} | {cells} | {res['wall']:.1f}{status} | "
              f"{peak} | {res['low_mib']:.0f} | {before} -> {load()} |", flush=True)
        if res["code"] != 0:
            print("   ", res.get("stderr") or "", flush=True)
        rows.append({"n": n, "wall": res["wall"] if res["code"] == 0 else None,
                     "peak": res.get("peak_mib") if res["code"] == 0 else None})
    print("\ngrowth, time:   " + "; ".join(growth(rows, "wall")))
    print("growth, memory: " + "; ".join(growth(rows, "peak")))
    return rows


SHIPPED = """
import json, sys, time
from pathlib import Path
from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.schema import find_pack
root, cache = Path(sys.argv[1]), Path(sys.argv[2])
out, start = {}, time.perf_counter()
for name in sys.argv[3:]:
    pack = find_pack(name, root / "datasets", root / "ontology")
    for variant in pack.variants:
        t = time.perf_counter()
        build_variant(pack, variant, cache)
        out[f"{name}/{variant}"] = time.perf_counter() - t
print("KGBENCH-CHILD " + json.dumps({"code": 0, "wall": time.perf_counter() - start,
      "variants": out}))
"""


def shipped(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kgbench-shipped-") as cache:
        before = load()
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", SHIPPED, str(ROOT), cache, *args.shipped],
                              cwd=ROOT, capture_output=True, text=True)
        total = time.perf_counter() - started
    line = next((x for x in proc.stdout.splitlines() if x.startswith("KGBENCH-CHILD ")), None)
    if line is None:
        print("shipped variants: FAILED", proc.stderr[-2000:])
        return
    res = json.loads(line.split(" ", 1)[1])
    print(f"\nevery shipped variant from scratch, one process (load {before} -> {load()}):")
    for name, secs in res["variants"].items():
        print(f"  {name}: {secs:.2f} s")
    print(f"  all: {res['wall']:.1f} s of building, {total:.1f} s with the process's start")


def agree(args: argparse.Namespace) -> None:
    """The executed tables and the rule-derived graph hold the same facts at this size."""
    import pyoxigraph as ox

    sys.path.insert(0, str(ROOT / "tests"))
    from pack_declared import FACTS

    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import find_pack

    class Term:
        def __init__(self, term: object) -> None:
            self.term = term

        def toPython(self) -> object:  # noqa: N802 - rdflib's name, which the facts call
            t = self.term
            if isinstance(t, ox.Literal):
                kind = t.datatype.value.rsplit("#", 1)[-1]
                return (int(t.value) if kind == "integer" else t.value == "true"
                        if kind == "boolean" else t.value)
            return t.value

    class Graph:  # what a pack's facts.from_graph asks of an rdflib graph: query() rows
        def __init__(self, store: object) -> None:
            self.store = store

        def query(self, text: str) -> list[tuple]:
            res = self.store.query(text)
            names = [v.value for v in res.variables]
            return [tuple(None if s[n] is None else Term(s[n]) for n in names) for s in res]

    pack = find_pack(args.pack, ROOT / "datasets", ROOT / "ontology")
    facts = FACTS[args.pack]  # what the pack's definitions derive, read from both sides
    with tempfile.TemporaryDirectory(prefix="kgbench-agree-") as tmp:
        started = time.perf_counter()
        built = build_variant(pack, f"{args.param}={args.agree}", Path(args.cache or tmp))
        store = ox.Store()
        for name in ("data.ttl", "derived.nt"):
            store.load(path=str(built.dir / name), format=ox.RdfFormat.from_extension(
                name.rsplit(".", 1)[1]))
        from_graph = facts.from_graph(Graph(store))
        from_tables = facts.from_tables(built.executed)
        print(f"\nexecuted tables and rule-derived graph, {args.param}={args.agree:,} "
              f"({time.perf_counter() - started:.0f} s):")
        ok = True
        for fact, expected in from_tables.items():
            got = from_graph[fact]
            same = got == expected and bool(expected)
            ok &= same
            print(f"  {fact}: {len(expected):,} from the tables, {len(got):,} from the graph, "
                  f"{'the same' if same else 'DIFFERENT'}")
        print("  agree" if ok else "  DISAGREE")
        if not ok:
            sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--param", default="issuers", help="the pack's scale: parameter")
    ap.add_argument("--sizes", default="1000,2000,10000,20000,100000",
                    type=lambda s: [int(x) for x in s.split(",") if x],
                    help="issuers (or --param) per run, comma-separated; '' for none")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per size")
    ap.add_argument("--min-available-mib", type=float, default=3072,
                    help="the watchdog: a size's build is killed when the machine's available "
                    "memory (MemAvailable) falls below this (0: never)")
    ap.add_argument("--shipped", nargs="*", default=["credit", "research"],
                    help="the packs whose every variant is rebuilt (none: skip)")
    ap.add_argument("--cache", default=None, help="the agreement check's build cache "
                    "(default: an empty folder; the sizes always build from scratch)")
    ap.add_argument("--keep", default=None, help="build the sizes into this cache and keep "
                    "them there (each size's earlier build removed first), e.g. for "
                    "query_engines.py --cache")
    ap.add_argument("--agree", type=int, default=10000, help="the size to check agreement at "
                    "(0: skip)")
    args = ap.parse_args()
    print(f"machine: {machine()}; load average {load()}")
    if args.shipped:
        shipped(args)
    if args.sizes:
        scale(args)
    if args.agree:
        agree(args)


if __name__ == "__main__":
    main()
