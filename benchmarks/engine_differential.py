"""The engine differential across every SPARQL engine: each gold and trap SPARQL query of every
pack and variant, and the TEXT2SPARQL'25 systems' 424 published CK25 queries, run on rdflib,
Oxigraph in process, the Oxigraph server and Virtuoso (both throwaway servers, started as the
tests start them), through the executor and guard a model's query goes through. Each engine's
outcome is compared with rdflib's, and each difference is named by kind.

    KGBENCH_EXTERNAL=/path/to/external python benchmarks/engine_differential.py \\
        [--engines rdflib,oxigraph,endpoint,virtuoso] [--timeout 60] [--no-ck25]

The pack queries: the answer fields (what gold is graded on) and the rows as a multiset
(numbers within 1e-9 relative); a difference whose rows agree once every cell is read as its
string is "typing", one under LIMIT or of GROUP_CONCAT/SAMPLE is "ties" (which rows, or which
order, SPARQL leaves to the engine). The CK25 queries: the result set the challenge's metric
reads (metrics/text2sparql.py), with the row cap lifted, classified by ck25_scoreboard's
`why_differ`. Packs whose data is not here (ck25 and cwd-acme without KGBENCH_EXTERNAL) are
skipped with the reason. Nothing here is a test: benchmarks/README.md keeps the table and
tests/engines/test_virtuoso_differences.py pins each Virtuoso difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ck25_scoreboard import _close, _num, outcome, why_differ  # noqa: E402 - beside this
from query_engines import Servers, queries_of, same_answer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _cells(result: Any, as_text: bool = False) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> Any:
        return str(v) if as_text and v is not None else _num(v)

    return sorted((tuple(norm(c) for c in row) for row in result.rows or []), key=repr)


def same_rows(a: Any, b: Any, as_text: bool = False) -> bool:
    ra, rb = _cells(a, as_text), _cells(b, as_text)
    return len(ra) == len(rb) and all(len(x) == len(y) and all(map(_close, x, y))
                                      for x, y in zip(ra, rb, strict=True))


_STATE = re.compile(r"Virtuoso (\w{5}) Error (\w+)")
_DIVISION = re.compile(r"(\?\w+|\))\s*/\s*(\?\w+|\(|COUNT|SUM|xsd:)", re.I)


def _error_kind(result: Any) -> str:
    """A failed result's kind as the table groups it: Virtuoso's SQL state and error code,
    or the first words of the refusal/error."""
    text = str(result.refused or result.error or "") if result is not None else ""
    found = _STATE.search(text)
    if found:
        return f"Virtuoso {found.group(1)} {found.group(2)}"
    return " ".join(text.split()[:6])[:60]


def _bool_as_int(a: Any, b: Any) -> bool:
    """Every cell where `a` (rdflib) has a boolean holds an integer in `b`, all else equal."""
    if len(a.rows) != len(b.rows) or not any(isinstance(c, bool) for r in a.rows for c in r):
        return False
    for ra, rb in zip(a.rows, b.rows, strict=True):
        for x, y in zip(ra, rb, strict=False):
            if isinstance(x, bool) and not (type(y) is int and (y != 0) == x):
                return False
    return True


def kind_of(statement: str, base: Any, other: Any, fields: Any = None,
            base_fields: Any = None) -> str:
    """'same', or the kind of difference between `other`'s result and `base`'s (rdflib)."""
    ob, oo = outcome(base), outcome(other)
    if ob != oo:
        why = f" ({_error_kind(other)})" if oo in ("error", "refused") else \
            f" ({_error_kind(base)})" if ob in ("error", "refused") else ""
        return f"rdflib {ob}, this engine {oo}{why}"
    if ob != "ok":
        return "same" if ob != "timeout" else "both timeout"
    if base_fields is not None and not same_answer(base_fields, fields):
        pass  # the rows below say which kind
    elif base_fields is not None and same_rows(base, other):
        return "same"
    if base_fields is None and same_rows(base, other):
        return "same"
    if _bool_as_int(base, other):
        return "a boolean as an integer (1/0; IN: the position)"
    if not base.rows and other.rows and all(c is None for r in other.rows for c in r):
        return "an aggregate over no match: one unbound row (SPARQL's), rdflib none"
    if list(base.columns) == list(other.columns) and same_rows(base, other, as_text=True):
        return "typing (the same values, another datatype or lexical form)"
    why = why_differ(statement, base, other)
    if why == "other" and len(base.rows) == len(other.rows) and \
            _DIVISION.search(re.sub(r"<[^>]*>", "", statement)):
        return "a division, integers divided as SQL does (read from the text)"
    return why


DETAILS: list[dict[str, Any]] = []  # every difference, for --details


def _detail(engine: str, kind: str, key: str, statement: str, base: Any,
            other: Any) -> dict[str, Any]:
    def shown(r: Any) -> Any:
        if r is None:
            return None
        return {"outcome": outcome(r), "error": r.refused or r.error,
                "rows": [list(map(str, row)) for row in (r.rows or [])[:5]],
                "count": r.row_count}

    return {"engine": engine, "kind": kind, "query": key, "text": statement,
            "rdflib": shown(base), "engine_result": shown(other)}


def pack_queries(external: str | None, kinds: Sequence[str]) -> list[tuple[str, Any, list]]:
    """(pack/variant, the built variant, its reference SPARQL queries) for every pack and
    variant whose data is here; a pack that cannot be built is reported and skipped."""
    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.packs.locate import pack_settings
    from pytest_kgbench.run.runtime import Runtime

    out = []
    for qfile in sorted((ROOT / "questions").glob("*.yaml")):
        name = qfile.stem
        try:
            settings = Settings.at(ROOT, run_id="differential", stats_seed=0,
                                   **pack_settings(name, {}, ROOT, external))
            runtime = Runtime(settings)
            pack = runtime.pack(name)
            qset = load_questions(qfile, pack=name, source=pack, registry=runtime.registry)
            for variant in pack.variants:
                built = runtime.built(name, variant)
                queries = queries_of(qset.questions, "sparql", variant, kinds)
                if queries:
                    out.append((f"{name}/{variant}", built, queries))
        except Exception as exc:  # noqa: BLE001 - a pack without its data: said, skipped
            print(f"{name}: skipped, {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    return out


def run_packs(engines: Mapping[str, str], packs: list, timeout: float,
              table: dict[str, Counter[str]], examples: dict[tuple[str, str], list[str]]
              ) -> int:
    from pytest_kgbench.engines.stores import open_store
    from pytest_kgbench.scoring.answers import fields_from_rows

    n = 0
    for name, built, queries in packs:
        results: dict[str, dict[str, tuple[Any, Any]]] = {}
        for engine, spec in engines.items():
            stores: dict[str, Any] = {}
            got = results.setdefault(engine, {})
            try:
                for q in queries:
                    if q.persona not in stores:
                        stores[q.persona] = open_store(built, "sparql", q.persona,
                                                       engines={"sparql": spec},
                                                       timeout=timeout)
                    r = stores[q.persona].run(q.statement)
                    f = fields_from_rows(q.fields, r.columns, r.rows) if r.ok else None
                    got[f"{q.label}"] = (r, f)
            finally:
                for s in stores.values():
                    s.close()
            print(f"{name}: {engine} done ({len(queries)} queries)", file=sys.stderr,
                  flush=True)
        for q in queries:
            n += 1
            base, bf = results["rdflib"][q.label]
            for engine in engines:
                if engine == "rdflib":
                    continue
                r, f = results[engine][q.label]
                k = kind_of(q.statement, base, r, f, bf)
                table.setdefault(engine, Counter())[k] += 1
                if k != "same":
                    examples.setdefault((engine, k), []).append(f"{name} {q.label}")
                    DETAILS.append(_detail(engine, k, f"{name} {q.label}", q.statement,
                                           base, r))
    return n


def run_ck25(engines: Mapping[str, str], external: str, timeout: float,
             table: dict[str, Counter[str]], examples: dict[tuple[str, str], list[str]]
             ) -> int:
    from pytest_kgbench.core.conditions import by_id
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.metrics import text2sparql as t2s
    from pytest_kgbench.packs.locate import pack_settings
    from pytest_kgbench.run.importers import FORMATS, _pack_questions, full_executor
    from pytest_kgbench.run.runtime import Runtime

    results_dir = Path(external) / "text2sparql25-results"
    settings = Settings.at(ROOT, run_id="differential", query_timeout=timeout, stats_seed=0,
                           **pack_settings("ck25", {}, ROOT, external))
    runtime = Runtime(settings)
    questions = _pack_questions(runtime.pack("ck25"), runtime.registry)
    built = runtime.built("ck25", "base")
    teams = sorted(p.name for p in results_dir.iterdir()
                   if (p / "ck25_answers.json").is_file())
    preds = {t: FORMATS["text2sparql"].read(results_dir / t / "ck25_answers.json",
                                            questions, "ck25") for t in teams}
    ran: dict[str, dict[str, Any]] = {}
    for engine, spec in engines.items():
        ex = full_executor(built, by_id("D4"), "analyst", {"sparql": spec}, timeout)
        start = time.perf_counter()
        try:
            ran[engine] = {f"{t}/{p.source}": ex.run(p.statement) if p.statement else None
                           for t in teams for p in preds[t]}
        finally:
            ex.close()
        print(f"ck25: {engine} done in {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
    statements = {f"{t}/{p.source}": p.statement for t in teams for p in preds[t]}
    n = 0
    for key, statement in statements.items():
        if not statement:
            continue
        n += 1
        base = ran["rdflib"][key]
        for engine in engines:
            if engine == "rdflib":
                continue
            r = ran[engine][key]
            if outcome(base) == outcome(r) == "ok":
                same = t2s.from_query_result(base) == t2s.from_query_result(r)
                k = "same" if same else kind_of(statement, base, r)
            else:
                k = kind_of(statement, base, r)
            table.setdefault(engine, Counter())[k] += 1
            if k != "same":
                examples.setdefault((engine, k), []).append(key)
                DETAILS.append(_detail(engine, k, key, statement, base, r))
    runtime.close()
    return n


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--engines", default="rdflib,oxigraph,endpoint,virtuoso")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--kinds", default="gold,trap")
    ap.add_argument("--external-data", default=os.environ.get("KGBENCH_EXTERNAL"))
    ap.add_argument("--no-ck25", action="store_true")
    ap.add_argument("--details", default=None, help="write every difference here (JSON)")
    args = ap.parse_args(argv)
    servers = Servers(args.timeout)
    names = ["rdflib"] + [e for e in args.engines.split(",") if e and e != "rdflib"]
    engines: dict[str, str] = {}
    started = time.perf_counter()
    try:
        for name in names:
            spec = servers.engine(name)
            if spec is not None:
                engines[name] = spec
        packs = pack_queries(args.external_data, args.kinds.split(","))
        tables: dict[str, dict[str, Counter[str]]] = {"packs": {}, "ck25": {}}
        examples: dict[str, dict[tuple[str, str], list[str]]] = {"packs": {}, "ck25": {}}
        counts = {"packs": run_packs(engines, packs, args.timeout, tables["packs"],
                                     examples["packs"])}
        if args.external_data and not args.no_ck25:
            counts["ck25"] = run_ck25(engines, args.external_data, args.timeout,
                                      tables["ck25"], examples["ck25"])
    finally:
        servers.stop()
    others = [e for e in engines if e != "rdflib"]
    print(f"packs: {', '.join(p[0] for p in packs)}")
    for part, n in counts.items():
        what = ("gold and trap SPARQL queries of every pack and variant" if part == "packs"
                else "the systems' published CK25 queries")
        print(f"\n### {n} {what}, against rdflib ({args.timeout:g} s per query)\n")
        kinds = sorted({k for e in others for k in tables[part].get(e, {})},
                       key=lambda k: (k != "same", k))
        print("| outcome against rdflib | " + " | ".join(others) + " |")
        print("|---|" + "---|" * len(others))
        for k in kinds:
            print(f"| {k} | " + " | ".join(str(tables[part].get(e, Counter())[k])
                                           for e in others) + " |")
        print()
        for (engine, k), keys in sorted(examples[part].items()):
            shown = ", ".join(keys[:10]) + (" ..." if len(keys) > 10 else "")
            print(f"- {engine}, {k}: {shown}")
    for what, version in servers.versions.items():
        print(f"\n{what}: {version}")
    for what, why in servers.skipped.items():
        print(f"\n{what}: skipped, {why}")
    if args.details:
        Path(args.details).write_text(json.dumps(DETAILS, indent=1, default=str))
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
