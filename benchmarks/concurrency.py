"""--concurrency against the ideal, as ratios in one run: N reading items of one worker asked
of a fake Messages API (tests/fake_api.py, in a process of its own on 127.0.0.1) that answers
every request after a fixed latency L, at concurrency 1, 4, 16 and 64. The ideal wall time is
N·L/c; efficiency = ideal / wall; "median ask" is an item's own request as its thread timed
it (L plus the client's and the fake's own time). Wall is the run loop's (every item asked,
graded and banked to answers.jsonl), measured by a hook around pytest_runtestloop, after the
SDK is imported (seconds under load, once per process, the same at every level); the whole
process (start, collection, the build cache, the report) is shown beside it.

    python benchmarks/concurrency.py                  # 200 items, L = 0.25 s
    python benchmarks/concurrency.py --items 200 --latency 0.25 --levels 1,4,16,64 --profile 64

--profile C prints where the run loop's time goes at concurrency C (cProfile, top functions by
own time) — what the items' own thread spends that the ideal does not count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SERVER = """
import sys, time
sys.path.insert(0, {tests!r})
from fake_api import FakeMessagesAPI, text
ANSWER = "The rating is A+.\\n```json\\n{{\\"rating\\": \\"A+\\"}}\\n```"
api = FakeMessagesAPI(lambda body: text(ANSWER))
api.delay = {latency!r}
api.__enter__()
print(api.url, flush=True)
sys.stdin.read()
"""

TIMER = """
import json, os, time, pytest

def pytest_collection_finish(session):
    import anthropic  # the SDK's import (seconds, once per process) is not the loop's


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    prof = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    try:
        return (yield)
    finally:
        wall = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            import pstats, io
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
            print(out.getvalue())
        with open(os.environ["BENCH_OUT"], "w") as fh:
            json.dump({"loop_s": wall, "items": len(session.items)}, fh)
"""


def machine() -> str:
    load = os.getloadavg()
    cpu = platform.processor() or platform.machine()
    return (f"{platform.node()}: {os.cpu_count()} cores, {cpu}, Python "
            f"{platform.python_version()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def project(folder: Path) -> None:
    (folder / "questions").mkdir()
    (folder / "questions" / "credit.yaml").write_text(
        (ROOT / "questions" / "credit.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "pytest.ini").write_text(
        "[pytest]\n"
        f"kgbench_datasets = {ROOT / 'datasets'}\n"
        f"kgbench_ontology = {ROOT / 'ontology'}\n"
        f"kgbench_cache = {ROOT / '.kgbench-cache'}\n", encoding="utf-8")
    (folder / "conftest.py").write_text(TIMER, encoding="utf-8")


def run(folder: Path, url: str, c: int, repeats: int, profile: bool) -> dict[str, float]:
    run_id = f"c{c}" + ("-profile" if profile else "")
    out = folder / f"loop-{run_id}.json"
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
           "BENCH_OUT": str(out), "PYTHONDONTWRITEBYTECODE": "1"}
    if profile:
        env["BENCH_PROFILE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "questions", "--model", "sonnet", "--condition",
           "R1", "--repeats", str(repeats), "--concurrency", str(c), "--no-cache", "-q",
           "-p", "no:randomly", "-p", "no:cacheprovider", "--run-id", run_id, "-rN"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"concurrency {c}: pytest exited {done.returncode}\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if profile:
        print(f"--- where the run loop's time goes at concurrency {c} (cProfile, own time)")
        print(done.stdout.split("========")[0][-6000:])
    loop = json.loads(out.read_text())
    banked = [json.loads(x) for x in
              (folder / "reports" / run_id / "answers.jsonl").read_text().splitlines()]
    assert len(banked) == loop["items"], (len(banked), loop["items"])
    asks = sorted(r["elapsed_s"] for r in banked)
    return {"loop_s": loop["loop_s"], "whole_s": whole, "items": loop["items"],
            "ask_s": asks[len(asks) // 2]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200, help="about how many items (whole "
                    "repeats of credit's reading questions)")
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--profile", type=int, default=None, help="profile the run loop at this "
                    "concurrency")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    from pytest_kgbench.questions import load_questions

    reading = sum("reading" in q.modes and (q.variants is None or "base" in q.variants)
                  for q in load_questions(ROOT / "questions" / "credit.yaml").questions)
    repeats = max(1, round(args.items / reading))
    print(machine())
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(tests=str(ROOT / "tests"), latency=args.latency)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            project(folder)
            for c in levels:
                got = run(folder, url, c, repeats, profile=False)
                ideal = got["items"] * args.latency / c
                rows.append((c, got["items"], got["loop_s"], ideal, ideal / got["loop_s"],
                             got["ask_s"], got["whole_s"]))
            if args.profile:
                run(folder, url, args.profile, repeats, profile=True)
    finally:
        server.kill()
    print(f"\n{rows[0][1]} items (credit R1 x {repeats} repeats), one worker, a fake Messages "
          f"API answering after L = {args.latency:g} s")
    print("| concurrency | wall (run loop) | ideal N·L/c | efficiency | median ask | "
          "whole process |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c, _n, wall, ideal, eff, ask, whole in rows:
        print(f"| {c} | {wall:.2f} s | {ideal:.2f} s | {eff:.2f} | {ask:.3f} s | "
              f"{whole:.1f} s |")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
