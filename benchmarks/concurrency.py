"""--concurrency against the ideal, as ratios in one run: N reading items of one worker asked
of a fake Messages API (tests/fake_api.py, in a process of its own on 127.0.0.1) that answers
every request after a fixed latency L, at concurrency 1, 4, 16 and 64. The ideal wall time is
N·L/c; efficiency = ideal / wall. No schedule can beat ⌈N/c⌉·L (c requests at a time, each
taking L: 198 items at 64 take four rounds, 1.00 s, where N·L/c is 0.77 s), so the table shows
the wall against that bound too. "median ask" is an item's own request as its thread timed
it (L plus the client's and the fake's own time). Wall is the run loop's (every item asked,
graded and banked to answers.jsonl), measured by a hook around pytest_runtestloop, after the
SDK is imported (seconds under load, once per process, the same at every level; with the
modules its first client imports); the whole
process (start, collection, the build cache, the report) is shown beside it. CPU: the items'
own thread (the main thread), the process's other threads (the answers in flight), and the
fake's process, over the loop: one Python process runs one thread at a time (the GIL), so
when the first two add up to the wall the process, not the latency, sets the pace.

The fake's server (tests/fake_server.py) is set as a real API's is: each reply sent at once
(TCP_NODELAY) and a listen backlog for every connection opened at once. `--old-fake` puts back
http.server's defaults, as the fake had them until 2026-12-02: its replies wait about 40 ms
each for the client's delayed ACK (Nagle's algorithm: the headers and the body are two writes),
and with a backlog of 5 the SYNs of more connections at once are dropped and retried a second
later — the figures measured on 2026-12-01 before the fix were against it.

    python benchmarks/concurrency.py                  # 200 items, L = 0.25 s
    python benchmarks/concurrency.py --items 200 --latency 0.25 --levels 1,4,16,64 --profile 64
    python benchmarks/concurrency.py --old-fake       # the fake's server as it was before
    python benchmarks/concurrency.py --workers 2 --levels 16   # -n 2: two worker processes

--workers W runs the items on W xdist workers (-n W): the ideal is then N·L/(c·W), and the run
loop is the controller's, which holds the workers' start and collection too; "asking" is from
the first request the fake got to its last answer, the part the scheduling decides. The items
are all of one prompt context (credit, R1), the case that once put every item on one worker.

--profile C prints where the run loop's time goes at concurrency C (cProfile, top functions by
own time): the items' own thread, then the threads answering ahead, merged (their lock waits
and socket reads are waiting, not work).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import load, machine  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]

SERVER = """
import json, sys, time
sys.path.insert(0, {tests!r})
from fake_api import FakeMessagesAPI, text
ANSWER = "The rating is A+.\\n```json\\n{{\\"rating\\": \\"A+\\"}}\\n```"
api = FakeMessagesAPI(lambda body: text(ANSWER))
api.delay = {latency!r}
if {old_fake!r}:
    # http.server's defaults: Nagle's algorithm on the replies (the body waits for the client's
    # delayed ACK, about 40 ms) and a listen backlog of 5 (more SYNs at once are dropped)
    api.server.RequestHandlerClass.disable_nagle_algorithm = False
    api.server.socket.listen(5)
api.__enter__()
print(api.url, flush=True)
for line in sys.stdin:  # each line: the first and last arrival of the requests since the last
    with api._lock:
        ts = [r["t"] for r in api.requests]
        api.requests.clear()
    print(json.dumps([min(ts), max(ts), len(ts)] if ts else None), flush=True)
"""

TIMER = """
import json, os, threading, time, pytest

def pytest_collection_finish(session):
    # the SDK's import (seconds, once per process) is not the loop's; nor are the modules its
    # HTTP transport imports when the first client is made (httpcore, h11: ~80 ms)
    import anthropic
    anthropic.Anthropic(api_key="sk-bench-not-a-key", base_url="http://127.0.0.1:9").close()


_profiles = []
_lock = threading.Lock()


def _profiled_run(run):
    # every thread started in the loop (the answers in flight) under a profiler of its own
    def wrapped(self):
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
        try:
            run(self)
        finally:
            prof.disable()
            with _lock:
                _profiles.append(prof)
    return wrapped


def _print(stats, title, rows):
    import io, pstats
    out = io.StringIO()
    print(title)
    pstats.Stats(*stats, stream=out).sort_stats("tottime").print_stats(rows)
    print(out.getvalue().split("Ordered by")[-1])


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    prof = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile
        prof = cProfile.Profile()
        run = threading.Thread.run
        threading.Thread.run = _profiled_run(run)
        prof.enable()
    t0, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
    try:
        return (yield)
    finally:
        wall = time.perf_counter() - t0
        cpu, main = time.process_time() - cpu0, time.thread_time() - main0
        if prof is not None:
            prof.disable()
            threading.Thread.run = run
            rows = int(os.environ["BENCH_PROFILE"])
            _print([prof], "-- the items' own thread (the main thread), by own time:", rows)
            with _lock:
                if _profiles:
                    _print(_profiles, f"-- the {len(_profiles)} threads answering ahead, "
                           "merged, by own time (lock waits and recv are waiting):", rows)
        with open(os.environ["BENCH_OUT"], "w") as fh:
            json.dump({"loop_s": wall, "items": len(session.items), "cpu_s": cpu,
                       "main_cpu_s": main}, fh)
"""


def cpu_of(pid: int) -> float:
    """A process's CPU seconds so far (user + system, Linux's /proc), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



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


def arrivals(server: subprocess.Popen[str]) -> tuple[float, float, int] | None:
    """The first and last arrival (the fake's clock) and the count of the requests the fake
    got since the last look."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("\n")
    server.stdin.flush()
    got = json.loads(server.stdout.readline())
    return (float(got[0]), float(got[1]), int(got[2])) if got else None


def run(folder: Path, url: str, c: int, repeats: int, profile: int | None,
        server_pid: int, workers: int = 0) -> dict[str, float]:
    run_id = f"c{c}" + ("-profile" if profile else "")
    out = folder / f"loop-{run_id}.json"
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
           "BENCH_OUT": str(out), "PYTHONDONTWRITEBYTECODE": "1"}
    if profile:
        env["BENCH_PROFILE"] = str(profile)
    cmd = [sys.executable, "-m", "pytest", "questions", "--model", "sonnet", "--condition",
           "R1", "--repeats", str(repeats), "--concurrency", str(c), "--no-cache", "-q",
           "-p", "no:randomly", "-p", "no:cacheprovider", "--run-id", run_id, "-rN"]
    if workers:
        cmd += ["-n", str(workers)]
    fake0 = cpu_of(server_pid)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    whole = time.perf_counter() - t0
    fake = cpu_of(server_pid) - fake0
    if done.returncode != 0:
        raise SystemExit(f"concurrency {c}: pytest exited {done.returncode}\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if profile:
        print(f"--- where the run loop's time goes at concurrency {c} (cProfile)")
        print(done.stdout.split("========")[0].split("-- the items' own thread", 1)[-1][-30000:])
    loop = json.loads(out.read_text())
    banked = [json.loads(x) for x in
              (folder / "reports" / run_id / "answers.jsonl").read_text().splitlines()]
    # under -n the controller collects nothing itself: its items are the banked ones
    assert workers or len(banked) == loop["items"], (len(banked), loop["items"])
    asks = sorted(r["elapsed_s"] for r in banked)
    return {"loop_s": loop["loop_s"], "whole_s": whole, "items": len(banked),
            "ask_s": asks[len(asks) // 2], "cpu_s": loop["cpu_s"],
            "main_cpu_s": loop["main_cpu_s"], "fake_cpu_s": fake}


def client_alone(url: str, n: int, c: int, context: str) -> dict[str, float]:
    """The client without the harness: c threads sharing one SDK client ask n requests of the
    fake (the items' own prompt context), each thread the next the moment its last ends.
    What the SDK and the fake alone leave of N·L/c at this level, on this machine now."""
    import statistics
    import threading

    import anthropic

    client = anthropic.Anthropic(api_key="sk-bench-not-a-key", base_url=url, max_retries=0)
    client.messages.create(model="claude-sonnet-5-5", max_tokens=16,  # its first use: once
                           messages=[{"role": "user", "content": "warm"}])
    left, lock, asks = list(range(n)), threading.Lock(), []

    def work() -> None:
        while True:
            with lock:
                if not left:
                    return
                i = left.pop()
            t0 = time.perf_counter()
            client.messages.create(
                model="claude-sonnet-5-5", max_tokens=4096,
                system=[{"type": "text", "text": "You answer questions about the data."}],
                messages=[{"role": "user", "content": [
                    {"type": "text", "text": context, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": f"## Question {i}"}]}])
            with lock:
                asks.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=work) for _ in range(c)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0,
            "ask_s": statistics.median(asks)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200, help="about how many items (whole "
                    "repeats of credit's reading questions)")
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--profile", type=int, default=None, help="profile the run loop at this "
                    "concurrency (every thread)")
    ap.add_argument("--rows", type=int, default=25, help="functions shown per profile")
    ap.add_argument("--workers", type=int, default=0, help="run on W xdist workers (-n W)")
    ap.add_argument("--old-fake", action="store_true", help="the fake's HTTP server with "
                    "http.server's defaults, as it was until 2026-12-02: Nagle's algorithm on "
                    "its replies (about 40 ms a reply) and a listen backlog of 5")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    from pytest_kgbench.core.questions import load_questions

    reading = sum("reading" in q.modes and (q.variants is None or "base" in q.variants)
                  for q in load_questions(ROOT / "questions" / "credit.yaml").questions)
    repeats = max(1, round(args.items / reading))
    print(f"{machine()}; load average {load()}")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(tests=str(ROOT / "tests"), latency=args.latency,
                                             old_fake=args.old_fake)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            project(folder)
            for c in levels:
                arrivals(server)
                got = run(folder, url, c, repeats, None, server.pid, args.workers)
                first, last, _count = arrivals(server) or (0.0, 0.0, 0)
                got["asking_s"] = last - first + args.latency  # the last answer takes L too
                n = got["items"]
                slots = c * max(1, args.workers)  # requests in flight at once, at most
                ideal = n * args.latency / slots
                bound = math.ceil(n / slots) * args.latency
                rows.append((c, got, ideal, bound))
            context = next((folder / "reports" / f"c{levels[0]}" / "prompts").glob("*.md"))
            alone = {c: client_alone(url, rows[0][1]["items"], c * max(1, args.workers),
                                     context.read_text())
                     for c in levels}
            if args.profile:
                run(folder, url, args.profile, repeats, args.rows, server.pid)
    finally:
        server.kill()
    n = rows[0][1]["items"]
    fake = "with http.server's defaults: Nagle on, backlog 5" if args.old_fake else \
        "replying at once (TCP_NODELAY) with a listen backlog of 1024"
    where = f"{args.workers} xdist workers (-n {args.workers})" if args.workers else \
        "one worker"
    print(f"\n{n} items (credit R1 x {repeats} repeats), {where}, a fake Messages API "
          f"answering after L = {args.latency:g} s ({fake})")
    per = "c·W" if args.workers else "c"
    print(f"| concurrency | wall (run loop) | ideal N·L/{per} | efficiency | bound ⌈N/{per}⌉·L | "
          "wall vs bound | asking (first request to last answer) | its efficiency | "
          "median ask | CPU: items' thread | other threads | fake | whole process |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, got, ideal, bound in rows:
        wall = got["loop_s"]
        print(f"| {c} | {wall:.2f} s | {ideal:.2f} s | {ideal / wall:.2f} | {bound:.2f} s | "
              f"{bound / wall:.2f} | {got['asking_s']:.2f} s | {ideal / got['asking_s']:.2f} | "
              f"{got['ask_s']:.3f} s | {got['main_cpu_s']:.2f} s | "
              f"{got['cpu_s'] - got['main_cpu_s']:.2f} s | {got['fake_cpu_s']:.2f} s | "
              f"{got['whole_s']:.1f} s |")
    print(f"\nthe client alone (no harness: {per} threads of one SDK client asking the {n} "
          "requests of the same fake, the items' prompt context):")
    print(f"| concurrency | wall | efficiency (N·L/{per}) | vs bound | median ask | CPU |")
    print("|---:|---:|---:|---:|---:|---:|")
    for c, _got, ideal, bound in rows:
        a = alone[c]
        print(f"| {c} | {a['wall_s']:.2f} s | {ideal / a['wall_s']:.2f} | "
              f"{bound / a['wall_s']:.2f} | {a['ask_s']:.3f} s | {a['cpu_s']:.2f} s |")
    for c, got, _ideal, _bound in rows:
        if c == 1:  # one in flight: an item's time is L + the request's overhead + the harness
            per = got["loop_s"] / got["items"]
            print(f"\nat concurrency 1 an item takes {per * 1e3:.1f} ms of the loop: L "
                  f"{args.latency * 1e3:.0f} ms + the request's overhead (client and fake, "
                  f"median ask - L) {(got['ask_s'] - args.latency) * 1e3:.1f} ms + the harness "
                  f"around it (prompt, grade, bank, pytest) "
                  f"{(per - got['ask_s']) * 1e3:.1f} ms")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
