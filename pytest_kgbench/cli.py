"""The `kgbench` console script: the things one does beside a pytest run.

    kgbench build  --pack credit [--variant base] [--seed N]   build a variant, print where
    kgbench check  --pack credit [--variant base] [--seed N]   key = gold SQL = gold SPARQL, traps bite
    kgbench prompt --pack credit --question credit-Q10 --condition R5   print an item's prompt
    kgbench show   reports/<run-id>                             print a run's headline table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from pytest_kgbench.errors import KgbenchError


def _pack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pack", required=True, help="pack name (a folder under --datasets)")
    p.add_argument("--variant", default="base")
    p.add_argument("--seed", type=int, default=None, help="dataset seed (default: the pack's)")
    p.add_argument("--root", default=".", help="repository root holding datasets/, ontology/, "
                   "questions/ (default: .)")
    p.add_argument("--cache", default=None, help="cache folder (default: <root>/.kgbench-cache)")


def _built(args: argparse.Namespace):  # noqa: ANN202 - returns (pack, built, seconds)
    from pytest_kgbench.packs import build_variant, find_pack

    root = Path(args.root)
    pack = find_pack(args.pack, root / "datasets", root / "ontology")
    start = time.perf_counter()
    built = build_variant(pack, args.variant, Path(args.cache or root / ".kgbench-cache"),
                          seed=args.seed)
    return pack, built, time.perf_counter() - start


def cmd_build(args: argparse.Namespace) -> int:
    _, built, seconds = _built(args)
    print(f"{built.pack.name}/{built.variant} seed {built.seed}: {built.dir} ({seconds:.2f} s)")
    for name, info in built.manifest["tables"].items():
        print(f"  {name}: {info['rows']} rows")
    print(f"  triples: {built.manifest['triples']}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from pytest_kgbench.questions import load_questions
    from pytest_kgbench.validate import check_questions

    _, built, _ = _built(args)
    qset = load_questions(Path(args.root) / "questions" / f"{args.pack}.yaml")
    checks = check_questions(list(qset.questions), built)
    bad = 0
    for c in checks:
        status = "ok " if c.ok else "BAD"
        print(f"{status} {c.question} {c.tier} key={json.dumps(c.key, default=str)[:100]}")
        for problem in c.problems:
            print(f"      {problem[:300]}")
        bad += not c.ok
    print(f"{len(checks) - bad} of {len(checks)} questions check out on "
          f"{built.pack.name}/{built.variant} (seed {built.seed})")
    return 1 if bad else 0


def cmd_prompt(args: argparse.Namespace) -> int:
    from pytest_kgbench import conditions
    from pytest_kgbench.questions import load_questions
    from pytest_kgbench.runtime import Runtime
    from pytest_kgbench.settings import Settings

    root = Path(args.root).resolve()
    qset = load_questions(root / "questions" / f"{args.pack}.yaml")
    question = next((q for q in qset.questions if q.id == args.question), None)
    if question is None:
        raise KgbenchError(f"no question {args.question} in {qset.path}")
    cond = conditions.BY_ID[args.condition.upper()]
    settings = Settings(
        condition_ids=(cond.id,), agent="gold", models=("gold",), repeats=1,
        variants=(args.variant,), run_id="prompt", query_timeout=60, max_rounds=8, strict=False,
        resume=False, dataset_seed=args.seed, stats_seed=0, rootdir=str(root),
        datasets_dir=str(root / "datasets"), ontology_dir=str(root / "ontology"),
        question_dirs=("questions",), reports_dir=str(root / "reports"),
        cache_dir=str(Path(args.cache) if args.cache else root / ".kgbench-cache"))
    runtime = Runtime(settings)
    built = runtime.built(args.pack, args.variant)
    executor = runtime.executor(built, cond, question.persona) if cond.mode == "querying" else None
    print(runtime.prompt(cond, built, question, executor).text)
    runtime.close()
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from pytest_kgbench.report import terminal_lines

    report = json.loads((Path(args.run) / "report.json").read_text(encoding="utf-8"))
    print(f"run {report['run_id']}: {report['counts']['items']} items"
          + ("" if report["complete"] else " (INCOMPLETE)"))
    for line in terminal_lines(report):
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgbench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="build (or load) a pack variant and print its tables")
    _pack_args(p)
    p.set_defaults(func=cmd_build)
    p = sub.add_parser("check", help="check every question's key, gold queries and trap")
    _pack_args(p)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("prompt", help="print the prompt one item would get")
    _pack_args(p)
    p.add_argument("--question", required=True)
    p.add_argument("--condition", required=True)
    p.set_defaults(func=cmd_prompt)
    p = sub.add_parser("show", help="print the headline of a finished run")
    p.add_argument("run", help="a run folder, e.g. reports/<run-id>")
    p.set_defaults(func=cmd_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KgbenchError as exc:
        print(f"kgbench: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
