"""Every gold query of a pack's variants on each engine of its language, as ratios in one run:
the median time per query on each engine against the language's default (rdflib for SPARQL,
DuckDB for SQL), each query held to `--limit` seconds by the store's own deadline, as an
agent's query is. A query an engine cannot finish in time shows as "> limit"; an engine whose
answer differs from the default's on a query is named in the table, never silently timed.

    python benchmarks/query_engines.py --variants credit/chains,research/large \\
        --sparql rdflib,oxigraph,endpoint --sql duckdb,postgres --limit 60 --repeats 3
    python benchmarks/query_engines.py --variants credit/issuers=10000 \\
        --sparql rdflib,oxigraph,endpoint=http://127.0.0.1:7878/query \\
        --sql duckdb,postgres=postgresql://kgbench@127.0.0.1:5432/kgbench

A bare `endpoint` starts a throwaway Oxigraph server on 127.0.0.1 (the dev extra's `oxigraph
serve`, with its own `--timeout-s` at the limit, so a query the client gave up on stops there
too), a bare `virtuoso` a throwaway Virtuoso from the machine's package (its
MaxQueryExecutionTime at the limit; tests/virtuoso_server.py), and a bare `postgres` a
throwaway PostgreSQL server from the machine's initdb/postgres,
both as the tests start them (tests/oxigraph_server.py, tests/pg_server.py); where one cannot
be started, its column is skipped with the reason. `endpoint=URL` and `postgres=DSN` use yours.

Each store is opened once per (engine, persona, data) and waited for until loaded: the load is
not timed (it is reported, per engine). Each query then runs once, its answer fields checked
against the default engine's (numbers within 1e-9 relative); unless it hit the limit, or its
first run took `--repeat-under` seconds (2) or more, it runs `--repeats - 1` more times and
the median of all its runs is kept. A query past the limit kills the in-process engine's
worker, which loads its store again before the next query (not timed either). `--kinds
gold,trap --executed` times the trap queries and the SQL over the executed tables too (what
sql_engines.py timed). Progress goes to stderr, one line per query; the tables to stdout.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {"sparql": "rdflib", "sql": "duckdb"}
SERVER_KINDS = {"endpoint": "sparql", "virtuoso": "sparql",  # bare names: a throwaway server
                "postgres": "sql"}
WHERE = {"sparql": ("sparql",), "sql": ("sql", "executed")}  # a language's reference queries
OK = "ok"
OVER = "> limit"


# --- pure helpers (tests/test_benchmarks_engines.py) ------------------------------------------

@dataclass(frozen=True)
class Query:
    """One reference query: its question, which reference (gold/trap, sql/executed/sparql), the
    persona it runs for, its text, and the question's answer fields."""

    qid: str
    kind: str
    where: str
    persona: str
    statement: str
    fields: tuple = ()

    @property
    def label(self) -> str:
        parts = [self.qid] + ([self.kind] if self.kind != "gold" else []) + \
            ([self.where] if self.where == "executed" else [])
        return " ".join(parts)


@dataclass
class Timing:
    """One query on one engine: how it ended (ok, > limit, refused, error), what it answered
    (the answer fields, or the refusal/error's first line), and the seconds of each run."""

    outcome: str
    answer: Any = None
    runs: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.runs) if self.outcome != OVER and self.runs else None


def queries_of(questions: Iterable[Any], language: str, variant: str,
               kinds: Sequence[str] = ("gold",), executed: bool = False) -> list[Query]:
    """The reference queries of `language` among `questions` asked on `variant`: each
    question's `kinds` (gold, trap) in the language's reference names (`sql`, and `executed`
    when asked; `sparql`). Questions marked skip, or asked only on other variants, are left
    out, and gold queries only of questions expecting an answer."""
    out = []
    wheres = [w for w in WHERE[language] if executed or w != "executed"]
    for q in questions:
        if q.skip or (q.variants is not None and variant not in q.variants):
            continue
        for kind in kinds:
            if kind == "gold" and q.expect != "answer":
                continue
            refs = getattr(q, kind)
            for where in wheres:
                if where in refs:
                    out.append(Query(q.id, kind, where, q.persona, refs[where],
                                     tuple(q.fields)))
    return out


def outcome_of(result: Any, fields: Callable[[Any], Any]) -> tuple[str, Any]:
    """(how a QueryResult ended, what it answered): ok and its answer fields (`fields(result)`),
    the limit, or a refusal/error with its message's first line (engines word errors apart,
    so two errors compare by kind only: see `agrees`)."""
    if result.timed_out:
        return OVER, None
    if result.refused:
        return "refused", str(result.refused).splitlines()[0]
    if result.error:
        return "error", str(result.error).splitlines()[0]
    return OK, fields(result)


def same_answer(a: Any, b: Any, rel: float = 1e-9) -> bool:
    """Equal answer fields, numbers within `rel` of each other (engines sum floats in their own
    order: 3.0583333333333336 and 3.058333333333333 are one answer); ints and bools exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            (isinstance(a, float) or isinstance(b, float)):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_answer(a[k], b[k], rel) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_answer(x, y, rel) for x, y in zip(a, b))
    return bool(a == b)


def agrees(default: Timing | None, other: Timing) -> str:
    """`same`, `differs`, or `unchecked` (either side past the limit, or no default)."""
    if default is None or OVER in (default.outcome, other.outcome):
        return "unchecked"
    if default.outcome != other.outcome:
        return "differs"
    if default.outcome == OK and not same_answer(default.answer, other.answer):
        return "differs"
    return "same"


def shown_answer(timing: Timing, width: int = 300) -> str:
    text = f"{timing.outcome}: {timing.answer!r}"
    return text if len(text) <= width else text[:width] + f"… ({len(text)} characters)"


def differences(engines: Sequence[str], queries: Sequence[Query],
                timings: Mapping[str, Mapping[str, Timing]]) -> list[str]:
    """A line per query and engine whose answer differs from the default's, with both."""
    out = []
    for q in queries:
        base = timings[engines[0]].get(q.label)
        for e in engines[1:]:
            t = timings[e].get(q.label)
            if base is not None and t is not None and agrees(base, t) == "differs":
                out.append(f"- {q.label}: {label_of(engines[0])} {shown_answer(base)}; "
                           f"{label_of(e)} {shown_answer(t)}")
    return out


def cell(timing: Timing | None, limit: float) -> str:
    """A table cell: the median in ms (s past 10 s), `> 60 s` past the limit, `error`/`refused`
    after the time where the query did not answer."""
    if timing is None:
        return "—"
    if timing.outcome == OVER:
        return f"> {limit:g} s"
    seconds = timing.median or 0.0
    text = f"{seconds:.2f} s" if seconds >= 1 else f"{1000 * seconds:.1f} ms"
    return text if timing.outcome == OK else f"{text} ({timing.outcome})"


def ratio(default: Timing | None, other: Timing | None) -> float | None:
    """default / other, where both finished (> 1: the other engine is faster)."""
    if default is None or other is None or default.median is None or other.median is None \
            or other.median <= 0:
        return None
    return default.median / other.median


def summary(default: Mapping[str, Timing], other: Mapping[str, Timing]) -> dict[str, Any]:
    """An engine against the default over one set of queries: how many it finished, its median
    per query over those, the queries both finished and the ratio of the default's median to
    its median over them, the queries past the limit, and those whose answers differ."""
    done = [k for k, t in other.items() if t.median is not None]
    both = [k for k in done if k in default and default[k].median is not None]
    med = statistics.median(other[k].median for k in done) if done else None  # type: ignore
    r = None
    if both:
        d = statistics.median(default[k].median for k in both)  # type: ignore[misc]
        o = statistics.median(other[k].median for k in both)  # type: ignore[misc]
        r = d / o if o > 0 else None
    return {"queries": len(other), "finished": len(done), "median": med, "both": len(both),
            "ratio": r, "total": sum(other[k].median for k in done),  # type: ignore[misc]
            "over": sorted(k for k, t in other.items() if t.outcome == OVER),
            "differ": sorted(k for k, t in other.items()
                             if agrees(default.get(k), t) == "differs"),
            "unchecked": sorted(k for k, t in other.items()
                                if agrees(default.get(k), t) == "unchecked")}


def engine_list(spec: str, language: str) -> list[str]:
    """The engines of a comma list, the language's default first (added if absent), each once."""
    named = [e.strip() for e in spec.split(",") if e.strip()]
    if not named:
        return []
    default = DEFAULTS[language]
    out = [default] + [e for e in named if e != default]
    return list(dict.fromkeys(out))


def label_of(engine: str) -> str:
    """An engine as the table names it: its kind, and `(throwaway)` or `=…` for a server."""
    base, eq, _ = engine.partition("=")
    if base in SERVER_KINDS:
        return f"{base} ({'yours' if eq else 'throwaway'})"
    return base




# --- the servers ---------------------------------------------------------------------------------

class Servers:
    """The throwaway servers a bare `endpoint` or `postgres` asks for, started on first use and
    stopped at the end; `engine(name)` is the engine spec to open (or None and `skipped[name]`
    saying why)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.started: dict[str, Any] = {}
        self.specs: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.versions: dict[str, str] = {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def engine(self, name: str) -> str | None:
        if name not in SERVER_KINDS:
            return name
        if name in self.specs or name in self.skipped:
            return self.specs.get(name)
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            self.specs[name] = {"endpoint": self._oxigraph, "virtuoso": self._virtuoso,
                                "postgres": self._postgres}[name]()
        except Exception as exc:  # noqa: BLE001 - any failure: the column is skipped, said why
            self.skipped[name] = f"{type(exc).__name__}: {exc}"
        return self.specs.get(name)

    def _oxigraph(self) -> str:
        import subprocess

        from oxigraph_server import OxigraphServer, oxigraph_binary

        binary = oxigraph_binary()
        if binary is None:
            raise RuntimeError("the oxigraph CLI is not installed (pip install -e '.[dev]')")
        self._tmp = tempfile.TemporaryDirectory(prefix="kgbench-oxigraph-")
        server = OxigraphServer(binary, Path(self._tmp.name) / "store",
                                timeout_s=math.ceil(self.limit) + 1).start()
        self.started["endpoint"] = server
        self.versions["endpoint"] = subprocess.run(
            [binary, "--version"], capture_output=True, text=True).stdout.strip()
        return str(server.engine)

    def _virtuoso(self) -> str:
        from virtuoso_server import VirtuosoServer, missing

        why = missing()
        if why:
            raise RuntimeError(why)
        server = VirtuosoServer(timeout_s=math.ceil(self.limit) + 1)
        self.started["virtuoso"] = server
        server.start()
        import subprocess

        said = subprocess.run([server.server_bin, "-?"], capture_output=True, text=True)
        self.versions["virtuoso"] = " ".join((said.stdout + said.stderr).splitlines()[:2])
        return f"endpoint={server.query_url};store={server.store_url}"

    def _postgres(self) -> str:
        from pg_server import PgServer, missing

        why = missing()
        if why:
            raise RuntimeError(why)
        server = PgServer()
        self.started["postgres"] = server
        server.start()
        import psycopg

        with psycopg.connect(server.dsn) as con:
            self.versions["postgres"] = str(con.execute("SHOW server_version").fetchone()[0])
        return f"postgres={server.database()}"

    def stop(self) -> None:
        for server in self.started.values():
            server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


# --- the measurement -----------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f} s] {text}", file=sys.stderr, flush=True)


def wait_loaded(store: Any) -> None:
    """Wait until an in-process graph store's worker has loaded its graph (untimed)."""
    worker = getattr(store, "worker", None)
    if worker is not None:
        worker.ready()


def time_engine(built: Any, language: str, engine: str, queries: Sequence[Query],
                limit: float, repeats: int, clock: Clock, name: str,
                repeat_under: float = math.inf, shown: str = ""
                ) -> tuple[dict[str, Timing], float]:
    """query label -> its Timing on `engine`, and the seconds spent opening and loading the
    stores (once per persona and data)."""
    from pytest_kgbench.engines.stores import open_store
    from pytest_kgbench.scoring.answers import fields_from_rows

    shown = shown or label_of(engine)
    out: dict[str, Timing] = {}
    stores: dict[tuple[str, str], Any] = {}
    loading = 0.0
    try:
        for i, q in enumerate(queries, 1):
            key = (q.where, q.persona)
            if key not in stores:
                started = time.perf_counter()
                stores[key] = open_store(built, q.where, q.persona,
                                         engines={language: engine}, timeout=limit)
                wait_loaded(stores[key])
                took = time.perf_counter() - started
                loading += took
                clock.say(f"{name}: {shown} opened for {q.persona} ({q.where}) "
                          f"in {took:.1f} s")
            store = stores[key]
            timing = Timing("")
            for n in range(repeats):
                start = time.perf_counter()
                result = store.run(q.statement)
                timing.runs.append(time.perf_counter() - start)
                if n == 0:
                    timing.outcome, timing.answer = outcome_of(
                        result, lambda r, q=q: fields_from_rows(q.fields, r.columns, r.rows))
                if result.timed_out:
                    timing.outcome, timing.answer = OVER, None
                    started = time.perf_counter()
                    wait_loaded(store)  # the worker was killed: a fresh one loads the store
                    loading += time.perf_counter() - started
                    break
                if timing.runs[0] >= repeat_under:  # a long query: one run says enough
                    break
            out[q.label] = timing
            clock.say(f"{name}: {shown} {i}/{len(queries)} {q.label}: "
                      f"{cell(timing, limit)} ({len(timing.runs)} run(s))")
    finally:
        for store in stores.values():
            store.close()
    return out, loading


def table(engines: Sequence[str], queries: Sequence[Query],
          timings: Mapping[str, Mapping[str, Timing]], limit: float) -> list[str]:
    """The per-query table of one variant and language: each engine's median and its ratio to
    the default, and where its answer differs from the default's."""
    default = engines[0]
    head = ["query", "persona", label_of(default)]
    for e in engines[1:]:
        head += [label_of(e), "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for q in queries:
        base = timings[default].get(q.label)
        row = [q.label, q.persona, cell(base, limit)]
        for e in engines[1:]:
            t = timings[e].get(q.label)
            r = ratio(base, t)
            mark = " **differs**" if t is not None and agrees(base, t) == "differs" else ""
            row += [cell(t, limit) + mark, "—" if r is None else f"{r:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def summary_rows(name: str, language: str, engines: Sequence[str],
                 timings: Mapping[str, Mapping[str, Timing]], loads: Mapping[str, float],
                 limit: float) -> list[str]:
    out = []
    default = timings[engines[0]]
    for e in engines:
        s = summary(default, timings[e])
        med = "—" if s["median"] is None else cell(Timing(OK, runs=[s["median"]]), limit)
        answers = "default" if e == engines[0] else (
            ("differ: " + ", ".join(s["differ"])) if s["differ"] else "all the same") + (
            f"; not compared: {', '.join(s['unchecked'])}" if s["unchecked"] else "")
        r = "1.00" if e == engines[0] else ("—" if s["ratio"] is None else f"{s['ratio']:.2f}")
        out.append(f"| {name} | {language} | {label_of(e)} | {s['finished']}/{s['queries']} | "
                   f"{', '.join(s['over']) or '—'} | {med} | {s['total']:.2f} s | "
                   f"{r} ({s['both']}) | {loads[e]:.1f} s | {answers} |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--variants", default=None,
                    help="pack/variant,... (default: --pack/--variant)")
    ap.add_argument("--pack", default="credit")
    ap.add_argument("--variant", default="base")
    ap.add_argument("--sparql", default="rdflib,oxigraph",
                    help="SPARQL engines; '' for none; bare 'endpoint': a throwaway server")
    ap.add_argument("--sql", default="duckdb",
                    help="SQL engines; '' for none; bare 'postgres': a throwaway server")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0,
                    help="seconds a query may run, enforced by the store's own deadline")
    ap.add_argument("--repeat-under", type=float, default=2.0,
                    help="a query whose first run takes this long or more runs once")
    ap.add_argument("--kinds", default="gold", help="gold, or gold,trap")
    ap.add_argument("--executed", action="store_true",
                    help="the SQL over the executed tables too")
    ap.add_argument("--cache", default=str(ROOT / ".kgbench-cache"))
    args = ap.parse_args(argv)

    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import find_pack
    clock = Clock()
    names = (args.variants or f"{args.pack}/{args.variant}").split(",")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    servers = Servers(args.limit)
    summaries: list[str] = []
    print(f"machine: {machine()}")
    print(f"at the start: {load()}; limit {args.limit:g} s per query, median of up to "
          f"{args.repeats} runs per query (one run where the first took "
          f"{args.repeat_under:g} s or more)")
    try:
        for name in names:
            pack_name, _, variant = name.strip().partition("/")
            pack = find_pack(pack_name, ROOT / "datasets", ROOT / "ontology")
            clock.say(f"{name}: building (or from the cache)")
            built = build_variant(pack, variant or "base", Path(args.cache))
            qset = load_questions(ROOT / "questions" / f"{pack_name}.yaml")
            for language, spec in (("sparql", args.sparql), ("sql", args.sql)):
                queries = queries_of(qset.questions, language, variant or "base", kinds,
                                     args.executed)
                engines, timings, loads = [], {}, {}
                for engine in engine_list(spec, language):
                    opened = servers.engine(engine)
                    if opened is None:
                        continue
                    timings[engine], loads[engine] = time_engine(
                        built, language, opened, queries, args.limit, args.repeats, clock,
                        name, args.repeat_under, label_of(engine))
                    engines.append(engine)
                if not engines:
                    continue
                summaries += summary_rows(name, language, engines, timings, loads, args.limit)
                print(f"\n### {name}, {language} ({len(queries)} queries; {load()})\n")
                print("\n".join(table(engines, queries, timings, args.limit)))
                differ = differences(engines, queries, timings)
                if differ:
                    print("\nAnswers that differ from the default's:\n\n" + "\n".join(differ))
                sys.stdout.flush()
    finally:
        servers.stop()
    print("\n| variant | language | engine | finished | past the limit | median per query "
          "| total (finished) | ratio to the default (queries both finished) "
          "| loading (untimed, reloads after a kill included) | answers as the default's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(summaries))
    for what, version in servers.versions.items():
        print(f"\n{what}: {version}")
    for what, why in servers.skipped.items():
        print(f"\n{what}: skipped, {why}")
    print(f"\nat the end: {load()}; ratio > 1: faster than the default; median and ratio "
          "over the queries each engine finished within the limit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
