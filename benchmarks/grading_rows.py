"""Grading a `rows` field of 1,000 rows (the ck25 and cwd-acme packs' kind): the answer against
its key, in the shapes that once recursed or took seconds, each timed as the grader runs it
(`grading.grade_field`, the registered kind).

    python benchmarks/grading_rows.py            # each shape 5 times, the best and the median
    python benchmarks/grading_rows.py --rows 5000 --repeats 3

Shapes (each answer is its key in another row and column order, cells written another way):
- distinct: 1,000 rows of an id, an amount and a date;
- repeated: one row 999 times and one more (the recursion that raised);
- numbers: 1,000 rows of four numbers with the same least, greatest and sum (every row in the
  one group of "same exact cells", so only the numbers' pruning separates them);
- near: 1,000 rows of numbers 0.001 apart under a relative tolerance of 1% (every row within
  the tolerance of many others: the pruning cannot help, the interval greedy and the flow do
  the work);
- one off: `distinct` with one amount off (the verdict is wrong; the time is the same).
A timing, not a test: the budget is a 1,000-row answer graded in under 0.5 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from machine import load, machine  # noqa: E402 - beside this script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_kgbench.core.questions import FieldSpec  # noqa: E402
from pytest_kgbench.scoring.grading import grade_field  # noqa: E402


def shapes(n: int) -> dict[str, tuple[FieldSpec, list[list[Any]], list[list[Any]], bool]]:
    """name -> (field, key, answer, whether the answer is right)."""
    rng = random.Random(7)
    exact = FieldSpec("rows", "rows", rel_tol=0.0, abs_tol=0.0)
    distinct = [[f"P{i:06d}", float(rng.randrange(10**6)) / 100, f"2019-{1 + i % 12:02d}-15"]
                for i in range(n)]
    written = [[r[2] + "T00:00:00", f"{r[1]:,.2f}", r[0].lower()] for r in distinct]
    rng.shuffle(written)
    repeated = [["31003000336", 20000.0]] * (n - 1) + [["31003000337", 12000.0]]
    repeated_got = [[20000, "31003000336"]] * (n - 1) + [["12,000.00", "31003000337"]]
    numbers = [[0.0, float(i), float(4 * n - i), float(4 * n)] for i in range(n)]
    numbers_got = [list(reversed(r)) for r in numbers]
    rng.shuffle(numbers_got)
    near_spec = FieldSpec("rows", "rows", rel_tol=0.01, abs_tol=0.0)
    near = [[1.0 + i / 1000] for i in range(n)]
    near_got = [[x[0] * 1.0049] for x in near]
    rng.shuffle(near_got)
    off = [list(r) for r in written]
    off[n // 2][1] = f"{float(off[n // 2][1].replace(',', '')) + 1:,.2f}"
    return {"distinct": (exact, distinct, written, True),
            "repeated": (exact, repeated, repeated_got, True),
            "numbers": (exact, numbers, numbers_got, True),
            "near": (near_spec, near, near_got, True),
            "one off": (exact, distinct, off, False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{machine()}; load {load()}")
    grade_field(FieldSpec("rows", "rows"), [[1]], [[1]], {})  # imports (scipy) out of the timing
    print(f"| shape ({args.rows:,} rows) | verdict | best | median |")
    print("|---|---|---|---|")
    for name, (spec, key, answer, right) in shapes(args.rows).items():
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            verdict = grade_field(spec, key, answer, {})
            times.append(time.perf_counter() - start)
        if verdict.ok is not right:
            raise SystemExit(f"{name}: graded {verdict.ok}, expected {right}")
        print(f"| {name} | {'right' if verdict.ok else 'wrong'} | {min(times):.3f} s | "
              f"{statistics.median(times):.3f} s |")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
