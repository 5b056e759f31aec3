"""The TEXT2SPARQL'25 scoreboard on CK25, reproduced from the answers the nine systems
published, and the engine differential over their queries (rdflib against Oxigraph).

    KGBENCH_EXTERNAL=/path/to/external python benchmarks/ck25_scoreboard.py [--timeout 60]

For each system (a folder of text2sparql25-results/ with ck25_answers.json) it prints:

- the published average set_F, where the challenge published the system's evaluation;
- ours from the challenge's result sets: the client's metric (metrics/text2sparql.py) over the
  result sets the challenge's endpoint returned for the system (ck25_system_result_set.json),
  against the challenge's reference result sets (ck25_true_result_set.json);
- ours executed: each query run on the pack's D4 store (the executor and guard a model's query
  goes through, row cap lifted, --timeout seconds) on Oxigraph and on rdflib, scored the same
  way against the same reference sets;
- how many per-question set_F differ from the published ones (the evaluation where given, else
  the scores of the published result sets), by more than 0.01, and why where the script can
  tell (the query failed or was refused here, it timed out, or the result set differs).

Then the differential: how many of the queries give a different result set on rdflib and on
Oxigraph, by kind (one fails and the other not, both succeed with different sets).
Nothing here is a test: the pack's README records what it printed and why each difference is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from pytest_kgbench.core.conditions import by_id
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.metrics import text2sparql as t2s
from pytest_kgbench.packs.locate import pack_settings
from pytest_kgbench.run.importers import FORMATS, full_executor, ordered_qnames
from pytest_kgbench.run.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("oxigraph", "rdflib")


def outcome(result) -> str:
    if result is None:
        return "no query"
    if result.timed_out:
        return "timeout"
    if result.refused:
        return "refused"
    if result.error:
        return "error"
    return "ok"


def _num(v):
    try:
        return float(v) if not isinstance(v, bool) else v
    except (TypeError, ValueError):
        return v


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def why_differ(statement: str, a, b) -> str:
    """Why two engines' results of one query differ, as far as the text and rows tell."""
    import re

    text = re.sub(r"#[^\n]*", "", statement).upper()
    ra = sorted((tuple(_num(c) for c in row) for row in a.rows), key=repr)
    rb = sorted((tuple(_num(c) for c in row) for row in b.rows), key=repr)
    if len(ra) == len(rb) and all(len(x) == len(y) and all(map(_close, x, y))
                                  for x, y in zip(ra, rb, strict=True)):
        return "the same rows, numbers written differently"
    if len(a.rows) == len(b.rows) and a.columns == b.columns and len(a.rows) > 0 and (
            "LIMIT" in text or "SAMPLE" in text or "GROUP_CONCAT" in text):
        if "GROUP_CONCAT" in text or "SAMPLE" in text:
            return "GROUP_CONCAT/SAMPLE order (SPARQL leaves it undefined)"
        if "ORDER BY" in text:
            return "a tie at ORDER BY ... LIMIT"
        return "LIMIT without ORDER BY"
    return "other"


def _first(result) -> str:
    return str(result.refused or result.error or "").splitlines()[0][:100]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per query")
    ap.add_argument("--external-data", default=os.environ.get("KGBENCH_EXTERNAL"))
    ap.add_argument("--json", default=None, help="write every per-question score here")
    args = ap.parse_args()
    if not args.external_data:
        print("set KGBENCH_EXTERNAL (or --external-data) to the folder holding ck25-dataset "
              "and text2sparql25-results", file=sys.stderr)
        return 2
    external = Path(args.external_data)
    results_dir = external / "text2sparql25-results"
    questions_file = external / "ck25-dataset" / "questions.yml"
    truth = json.loads((results_dir / "ck25_true_result_set.json").read_text())
    ordered = ordered_qnames(questions_file)
    settings = Settings.at(ROOT, run_id="scoreboard", query_timeout=args.timeout,
                           stats_seed=0, **pack_settings("ck25", {}, ROOT, str(external)))
    runtime = Runtime(settings)
    pack = runtime.pack("ck25")
    built = runtime.built("ck25", "base")
    from pytest_kgbench.run.importers import _pack_questions

    questions = _pack_questions(pack)
    fmt = FORMATS["text2sparql"]
    teams = sorted(p.name for p in results_dir.iterdir() if (p / "ck25_answers.json").is_file())
    preds = {t: fmt.read(results_dir / t / "ck25_answers.json", questions, "ck25")
             for t in teams}
    ran: dict[str, dict[str, dict[str, object]]] = {e: {t: {} for t in teams} for e in ENGINES}
    seconds: dict[str, float] = {}
    for engine in ENGINES:
        ex = full_executor(built, by_id("D4"), "analyst", {"sparql": engine}, args.timeout)
        start = time.perf_counter()
        try:
            for team in teams:
                for p in preds[team]:
                    ran[engine][team][p.source] = ex.run(p.statement) if p.statement else None
        finally:
            ex.close()
        seconds[engine] = time.perf_counter() - start

    rows, dump, details = [], {}, []
    for team in teams:
        folder = results_dir / team
        published = (json.loads((folder / "ck25_eval.json").read_text())
                     if (folder / "ck25_eval.json").is_file() else None)
        sys_sets = (json.loads((folder / "ck25_system_result_set.json").read_text())
                    if (folder / "ck25_system_result_set.json").is_file() else None)
        from_sets = t2s.evaluate(sys_sets, truth, ordered) if sys_sets is not None else None
        reference = published or from_sets  # the published per-question scores, or the sets'
        row = {"team": team, "published": published["average"]["set_F"] if published else None,
               "sets": from_sets["average"]["set_F"] if from_sets else None,
               "sets_exact": (from_sets == published) if (from_sets and published) else None}
        dump[team] = {"published": published, "from_result_sets": from_sets}
        for engine in ENGINES:
            got = {q: t2s.from_query_result(r) for q, r in ran[engine][team].items()
                   if q in truth}
            ours = t2s.evaluate(got, truth, ordered)
            row[engine] = ours["average"]["set_F"]
            dump[team][engine] = ours
            if reference is not None and engine == "oxigraph":
                why: Counter[str] = Counter()
                for q in truth:
                    if abs(ours[q]["set_F"] - reference[q]["set_F"]) > 0.01:
                        res = ran[engine][team].get(q)
                        kind = outcome(res)
                        if kind == "ok" and sys_sets is not None:
                            kind = ("same set, other score" if set(got.get(q, {}))
                                    == set(sys_sets.get(q, {})) else "result set differs")
                        why[kind] += 1
                        failed = kind != "ok" and res is not None and not res.ok
                        details.append(f"  {team} {q}: published {reference[q]['set_F']:.3f}, "
                                       f"ours {ours[q]['set_F']:.3f} ({kind}"
                                       f"{': ' + _first(res) if failed else ''})")
                row["diffs"] = sum(why.values())
                row["why"] = ", ".join(f"{k} {n}" for k, n in sorted(why.items()))
        rows.append(row)

    def f(v: object) -> str:
        return "-" if v is None else f"{v:.3f}"

    print(f"{'system':8} {'published':>9} {'ours(sets)':>10} {'exact':>5} "
          f"{'ours(oxigraph)':>14} {'ours(rdflib)':>12} {'diffs':>5}  why (oxigraph vs published)")
    for r in rows:
        exact = "-" if r["sets_exact"] is None else ("yes" if r["sets_exact"] else "NO")
        print(f"{r['team']:8} {f(r['published']):>9} {f(r['sets']):>10} {exact:>5} "
              f"{f(r['oxigraph']):>14} {f(r['rdflib']):>12} "
              f"{r.get('diffs', '-')!s:>5}  {r.get('why', '')}")
    # within 0.01, over the per-question scores with a published reference
    within = total = 0
    for team in teams:
        ref = dump[team]["published"] or dump[team]["from_result_sets"]
        if ref is None:
            continue
        for q in truth:
            total += 1
            within += abs(dump[team]["oxigraph"][q]["set_F"] - ref[q]["set_F"]) <= 0.01
    print("\nper-question differences (Oxigraph, > 0.01):")
    print("\n".join(details))
    print(f"\nper-question set_F within 0.01 of the published (Oxigraph): {within}/{total}")

    kinds: Counter[str] = Counter()
    n = 0
    examples: dict[str, list[str]] = {}
    for team in teams:
        for p in preds[team]:
            if not p.statement:
                continue
            n += 1
            a, b = ran["rdflib"][team][p.source], ran["oxigraph"][team][p.source]
            oa, ob = outcome(a), outcome(b)
            if oa == ob == "ok":
                same = t2s.from_query_result(a) == t2s.from_query_result(b)
                kind = "same" if same else "both ran, result sets differ: " + why_differ(
                    p.statement, a, b)
            elif oa == ob:
                kind = f"both {oa}"
            else:
                kind = f"rdflib {oa}, oxigraph {ob}"
            kinds[kind] += 1
            if kind != "same" and not kind.startswith("both error") and \
                    not kind.startswith("both refused"):
                examples.setdefault(kind, []).append(f"{team}/{p.source}")
    print(f"\nengine differential over {n} foreign queries (rdflib vs Oxigraph, "
          f"{args.timeout:g} s per query):")
    for kind, count in kinds.most_common():
        print(f"  {kind}: {count}")
    for kind, names in sorted(examples.items()):
        print(f"  {kind}: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}")
    print(f"\nwall time: oxigraph {seconds['oxigraph']:.1f} s, rdflib {seconds['rdflib']:.1f} s "
          f"(ratio {seconds['rdflib'] / max(seconds['oxigraph'], 1e-9):.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1, default=str))
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
