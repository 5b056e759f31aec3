"""--concurrency, --rpm and --tpm (asking/inflight.py, asking/pacing.py) and the order of items by
prompt
context: the pieces alone, then whole runs against the fake servers on 127.0.0.1 answering
after a fixed delay — N requests really in flight, the same grades as one at a time, a 429
that pauses every thread, a broken harness met ahead of its turn halting the run as it would
serially, and --rpm spacing the requests the fake saw."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from peaks import Lateness

from conftest import only_run, run_records, wait_until

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"


def inflight_threads() -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.name.startswith("kgbench-inflight") and t.is_alive()]


# --- the pace -------------------------------------------------------------------------------------

def test_rpm_spaces_requests_across_threads() -> None:
    from pytest_kgbench.asking.pacing import Pace

    pace = Pace(rpm=600)  # one request every 0.1 s
    times: list[float] = []
    asked: list[float] = []
    lock = threading.Lock()

    def one() -> None:
        with lock:
            asked.append(time.monotonic())
        pace.acquire()
        with lock:
            times.append(time.monotonic())

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    times.sort()
    # the k-th thread let through went at least 0.1·k s after the first asked: a loaded
    # machine only makes a thread later (the gaps between them bound nothing: a thread slowed
    # after its release comes close to the next)
    assert all(t - min(asked) >= 0.1 * k - 0.005 for k, t in enumerate(times)), \
        [t - min(asked) for t in times]


def test_rpm_is_shared_by_the_workers_of_a_run(monkeypatch) -> None:
    from pytest_kgbench.asking.pacing import Pace
    from pytest_kgbench.core.settings import Settings

    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    pace = Pace.from_settings(Settings.at(".", rpm=240.0, tpm=8000.0))
    assert pace.rpm == 60.0 and pace.tpm == 2000.0


def test_tpm_holds_the_next_request_back_by_the_tokens_sent_then_by_the_usage() -> None:
    from pytest_kgbench.asking.pacing import Pace

    pace = Pace(tpm=60_000)  # a thousand tokens a second
    pace.acquire(200)  # at once
    t0 = time.monotonic()
    pace.acquire(100)  # held back 0.2 s by the first request's 200 tokens
    assert time.monotonic() - t0 >= 0.18
    pace.correct(100, 400)  # it used 400, not 100: the next one waits for 0.4 s
    t1 = time.monotonic()
    pace.acquire(1)
    assert time.monotonic() - t1 >= 0.38
    assert pace.held >= 0.5  # the item's clock does not count the time held back
    assert time.monotonic() - pace.clock() == pytest.approx(pace.held, abs=0.01)


def test_a_rate_limit_pauses_every_thread_and_a_cancel_wakes_them() -> None:
    from pytest_kgbench.asking.pacing import Pace
    from pytest_kgbench.core.errors import Cancelled

    pace = Pace()
    limited = type("E", (Exception,), {"status_code": 429})()
    pace.pause(0.3)
    t0 = time.monotonic()
    pace.acquire()  # another thread's 429: this one waits too, though no limit is set
    assert time.monotonic() - t0 >= 0.28
    pace.backoff(type("E", (Exception,), {"status_code": 500})(), 0.0)  # no pause for a 500
    t1 = time.monotonic()
    pace.acquire()
    assert time.monotonic() - t1 < 0.2
    box: dict[str, BaseException] = {}

    def sleeper() -> None:
        try:
            pace.backoff(limited, 30.0)
        except Cancelled as exc:
            box["exc"] = exc

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.05)
    pace.cancel()
    thread.join(5)
    assert not thread.is_alive() and isinstance(box.get("exc"), Cancelled)
    with pytest.raises(Cancelled):
        pace.acquire()


# --- the pool -------------------------------------------------------------------------------------

def test_inflight_keeps_n_in_flight_and_hands_each_answer_to_its_own_key() -> None:
    from pytest_kgbench.asking.inflight import Inflight

    pool = Inflight(3, window=5)
    gate = threading.Event()

    def make(i: int):
        def run() -> int:
            gate.wait(5)
            if i == 2:
                raise ValueError("two")
            return i * 10
        return run

    pool.start_many((i, make(i)) for i in range(7))
    assert [pool.started(i) for i in range(7)] == [True] * 5 + [False] * 2  # the window
    time.sleep(0.1)
    assert pool.pending() == 5 and pool.peak == 3  # five queued, three being made at once
    assert pool.start(6, make(6), force=True)  # the running item's own: queued even so
    gate.set()
    assert pool.take(0) == 0 and pool.take(1) == 10
    with pytest.raises(ValueError, match="two"):  # the failure is its own key's
        pool.take(2)
    assert pool.take(6) == 60 and pool.peak == 3
    pool.close()
    assert pool.discarded == 2  # made, never taken: dropped, not handed to anyone
    assert pool.alive() == 0 and not pool.start(5, make(5))


@pytest.mark.parametrize("sdk", ["openai", "gemini"])
def test_close_cuts_a_request_in_flight(sdk, request) -> None:
    """A stopping run cuts the connection of a request in flight (its thread wakes at once)
    rather than waiting for a model that may take minutes: the connection pool under each SDK's
    client is found (google-genai keeps its HTTP client elsewhere than openai's) and tracked."""
    import importlib

    from pytest_kgbench.agents.models.gemini import GeminiAgent
    from pytest_kgbench.agents.models.openai import OpenAIAgent
    from pytest_kgbench.asking.inflight import Inflight
    from pytest_kgbench.asking.pacing import Pace
    from pytest_kgbench.core.settings import Settings

    api = request.getfixturevalue("chat_api" if sdk == "openai" else "gemini_api")
    stall = importlib.import_module(f"fake_{sdk}").stall
    agent = (OpenAIAgent if sdk == "openai" else GeminiAgent)(
        Settings.at(".", base_url=api.url, response_cache=False))
    pace = Pace()
    agent.gate.pace = pace
    api.push(stall(20))
    pool = Inflight(2, pace)
    pool.abort_hooks.append(agent.abort)
    try:
        pool.start("k", lambda: agent.complete("s", "t", model="m", max_tokens=5, timeout=30))
        # the request's arrival (a loaded machine may take seconds to make the client): the
        # bound only says how long a broken run may hang
        assert wait_until(lambda: api.requests, 60)
        with Lateness() as late:
            t0 = time.monotonic()
            pool.close(timeout=10)
            took = time.monotonic() - t0
        # cut at once, not after the server's 20 s stall: 5 s plus the time the machine held
        # this process back
        assert took < 5 + late.seconds and pool.alive() == 0
        assert len(api.requests) == 1  # the cut call was not asked again
    finally:
        pool.close(timeout=10)  # no thread of this test left for the next one to count


def test_the_pool_starts_its_threads_at_the_first_answer_and_ends_them_at_close() -> None:
    """All N threads start with the first answer (before any is busy building a request: one
    started later waits for the GIL behind them, and the items' own thread with it)."""
    from pytest_kgbench.asking.inflight import Inflight

    pool = Inflight(4)
    assert pool.alive() == 0
    pool.start("a", lambda: "A")
    assert pool.alive() == 4 and len(inflight_threads()) == 4
    pool.start_many((k, lambda k=k: k.upper()) for k in "bcdef")
    assert [pool.take(k) for k in "abcdef"] == list("ABCDEF") and pool.alive() == 4
    pool.close(timeout=5)
    assert pool.alive() == 0 and inflight_threads() == []


def test_close_with_nothing_in_flight_ends_the_idle_threads_without_cutting() -> None:
    """The end of a run whose every answer was taken: the idle threads end, and the agents'
    connections (idle, kept alive) are not shut down one by one on the run's last item."""
    from pytest_kgbench.asking.inflight import Inflight

    pool = Inflight(4)
    cut: list[str] = []
    pool.abort_hooks.append(lambda: cut.append("abort"))
    pool.start_many((i, lambda i=i: i) for i in range(4))
    assert [pool.take(i) for i in range(4)] == [0, 1, 2, 3]
    assert wait_until(lambda: pool._running == 0, 5)
    pool.close(timeout=5)
    assert cut == [] and pool.alive() == 0 and pool.discarded == 0
    busy = Inflight(2)  # an answer still being made: its connection is cut
    busy.abort_hooks.append(lambda: cut.append("abort"))
    gate = threading.Event()
    busy.start("k", lambda: gate.wait(5))
    assert wait_until(lambda: busy._running == 1, 5)
    busy.abort_hooks.append(gate.set)  # what an agent's abort does: the request ends at once
    busy.close(timeout=5)
    assert cut == ["abort"] and busy.alive() == 0


# --- order and scheduling ---------------------------------------------------------------------

def test_context_scope_drops_the_question_and_the_repeat() -> None:
    from pytest_kgbench.asking.cases import context_scope

    scope = context_scope("questions/credit.yaml::credit-Q01[chains-D1-sonnet-rep2]")
    assert scope == "questions/credit.yaml::[chains-D1-sonnet]"
    assert context_scope("questions/credit.yaml::credit-Q07[chains-D1-sonnet-rep1]") == scope
    assert context_scope("questions/credit.yaml::credit-Q01[D1-sonnet-rep2]") != scope
    assert context_scope("questions/credit.yaml::credit-Q01[chains-D2-sonnet-rep2]") != scope
    assert context_scope("tests/test_x.py::test_a") is None


def test_items_sharing_a_prompt_context_run_one_after_another(project) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "gold", "--condition", "R1,D1",
                         "--repeats", "2", "-k", "Q01 or Q02 or Q03", "--collect-only", "-q")
    ids = [line for line in result.stdout.lines if "::" in line]
    assert len(ids) == 12
    contexts = [i.split("[", 1)[1].rsplit("-rep", 1)[0] for i in ids]
    # each context's items together, once: R1 (6 items), then D1 (6 items)
    assert [c for i, c in enumerate(contexts) if i == 0 or contexts[i - 1] != c] == \
        ["R1-gold", "D1-gold"]
    # within a context, the file's order: question, then repeat
    assert [i.split("::")[1].split("[")[0] for i in ids[:6]] == \
        ["credit-Q01", "credit-Q01", "credit-Q02", "credit-Q02", "credit-Q03", "credit-Q03"]


def test_under_n_a_context_goes_to_one_worker_by_default(project) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "gold", "--condition", "R1,D1",
                                    "-k", "Q01 or Q02 or Q03", "-n", "2", "-v")
    assert result.ret == 0, result.stdout.str()
    assert "scheduling tests via ContextScheduling" in result.stdout.str()
    workers: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        if line.startswith("[gw") and "PASSED" in line:
            gw, nodeid = line.split("]", 1)[0][1:], line.split()[-1]
            context = nodeid.split("[", 1)[1].rsplit("-rep", 1)[0]
            workers.setdefault(context, set()).add(gw)
    assert set(workers) == {"R1-gold", "D1-gold"}
    assert all(len(w) == 1 for w in workers.values()), workers
    # node ids are the serial run's (no @group suffix): --resume and reruns match them
    assert all("@" not in r["nodeid"] for r in run_records(p))


def test_scope_groups_cut_contexts_into_slices_only_when_workers_would_idle() -> None:
    from pytest_kgbench.asking.cases import scope_groups

    one = [f"questions/credit.yaml::credit-Q0{q}[R1-sonnet-rep{r}]" for q in range(1, 6)
           for r in (1, 2)]
    two = [n.replace("R1", "D1") for n in one]
    # one context, two workers: two consecutive slices of five, in the items' order
    groups = scope_groups(one, 2)
    assert [groups[n] for n in one] == ["questions/credit.yaml::[R1-sonnet]#1"] * 5 + \
        ["questions/credit.yaml::[R1-sonnet]#2"] * 5
    # as many contexts as workers, or asked together, or serial: contexts stay whole
    assert set(scope_groups(one + two, 2).values()) == {"questions/credit.yaml::[R1-sonnet]",
                                                         "questions/credit.yaml::[D1-sonnet]"}
    assert set(scope_groups(one, 2, split=False).values()) == {"questions/credit.yaml::[R1-sonnet]"}
    assert set(scope_groups(one, 1).values()) == {"questions/credit.yaml::[R1-sonnet]"}
    # two contexts, three workers: three slices each, none empty; not an item's: absent
    groups = scope_groups([*one, *two, "tests/test_x.py::test_y"], 3)
    assert len(set(groups.values())) == 6 and "tests/test_x.py::test_y" not in groups


def test_under_n_one_prompt_context_keeps_every_worker_busy(project) -> None:
    """All items of one context went to one worker (264 R1 items, one of two workers idle):
    with fewer contexts than workers each gets a consecutive slice of it."""
    p = project()
    result = p.runpytest_subprocess("questions", "--agent", "gold", "--condition", "R1",
                                    "-k", "Q01 or Q02 or Q03", "--repeats", "2", "-n", "2", "-v")
    assert result.ret == 0, result.stdout.str()
    by_worker: dict[str, list[str]] = {}
    for line in result.stdout.lines:
        if line.startswith("[gw") and "PASSED" in line:
            by_worker.setdefault(line.split("]", 1)[0][1:], []).append(line.split()[-1])
    assert sorted(len(ids) for ids in by_worker.values()) == [3, 3], by_worker
    # each a consecutive run of the context (the serial order: question, then repeat)
    order = [r["nodeid"] for r in sorted(run_records(p), key=lambda r: r["nodeid"])]
    halves = {tuple(sorted(ids)) for ids in by_worker.values()}
    assert halves == {tuple(order[:3]), tuple(order[3:])}


# --- whole runs against the fakes ---------------------------------------------------------------

def _grades(p, run: str) -> dict[str, tuple[str, str]]:
    from pytest_kgbench.core.record import read_answers

    return {r["nodeid"]: (r["grade"], r["answer"]["text"])
            for r in read_answers(p.path / "reports" / run / "answers.jsonl")}


def _check_prompt_hashes(p, runs: tuple[str, ...]) -> None:
    """Each banked prompt hash (the head hashed once per context, asking/prompts.py) is the hash of
    the prompt as the run shows it: its context file's text, then the item's question block."""
    import hashlib

    from pytest_kgbench.core.record import read_answers

    seen: dict[str, str] = {}
    for run in runs:
        folder = p.path / "reports" / run
        for r in read_answers(folder / "answers.jsonl"):
            shown = (folder / r["prompt"]["context_file"]).read_text(encoding="utf-8")
            head = shown.split("\n\n<!-- followed by each item's question block")[0]
            text = f"{head}\n\n{r['prompt']['question']}\n"
            assert r["prompt"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
            assert seen.setdefault(r["nodeid"], r["prompt"]["sha256"]) == r["prompt"]["sha256"]


def test_concurrency_8_has_8_requests_in_flight_and_grades_as_one_at_a_time(
        project, api) -> None:
    from fake_api import text

    api.default = lambda body: text("Caldera is rated A+.\n" + A_PLUS)
    api.delay = 0.2
    p = project()
    args = ("questions", "--model", "sonnet", "--condition", "R1", "--repeats", "2",
            "-k", "Q01 or Q02 or Q03 or Q04 or Q05 or Q06 or Q07 or Q08", "--no-cache")
    serial = p.runpytest(*args, "--run-id", "serial")
    assert serial.ret == 0, serial.stdout.str()
    assert api.peak == 1
    asked = len(api.requests)
    assert asked == 16
    # a second per answer: eight threads' requests overlap even on a busy machine (at 0.2 s
    # one thread's could end before the eighth had started)
    api.delay = 1.0
    many = p.runpytest(*args, "--run-id", "many", "--concurrency", "8")
    assert many.ret == 0, many.stdout.str()
    assert api.peak == 8  # the fake saw eight requests at once
    assert len(api.requests) == 2 * asked  # each item asked once, none twice
    assert _grades(p, "many") == _grades(p, "serial")
    _check_prompt_hashes(p, ("serial", "many"))
    reports = {run: json.loads((p.path / "reports" / run / "report.json").read_text())
               for run in ("serial", "many")}
    # how fast is not what was asked: the same fingerprint, and the setting recorded
    assert reports["many"]["fingerprint"] == reports["serial"]["fingerprint"]
    assert reports["many"]["settings"]["concurrency"] == 8
    meta = json.loads((p.path / "reports" / "many" / "meta.json").read_text())
    assert meta["settings"]["concurrency"] == 8
    # the Messages API reports cache reads (none here): a known 0%, in report.json and .md
    assert reports["many"]["conditions"]["R1"]["cache_read_share"] == 0.0
    assert "cache-read share" in (p.path / "reports" / "many" / "report.md").read_text()
    assert inflight_threads() == []


def test_a_429_under_concurrency_is_retried_and_pauses_every_thread(project, chat_api) -> None:
    from fake_openai import rate_limited, text

    chat_api.default = lambda body: text(A_PLUS)
    chat_api.delay = 0.5
    chat_api.push(rate_limited(retry_after="1.0"))  # the first request: at once
    p = project()
    result = p.runpytest("questions", "--agent", "openai", "--base-url", chat_api.url,
                         "--model", "gpt-test-1", "--condition", "R1", "--concurrency", "2",
                         "-k", "Q01 or Q02 or Q03 or Q04")
    result.assert_outcomes(passed=4)
    assert len(chat_api.requests) == 5  # four items, one of them retried
    times = sorted(r["t"] for r in chat_api.requests)
    t429 = times[0]
    # the other thread's item ended at +0.5 s; its next request had to wait out the pause
    # the 429 set (+1.0 s) though it had no 429 of its own
    assert all(t >= t429 + 0.9 for t in times[2:]), [round(t - t429, 2) for t in times]
    assert all(r["grade"] in ("correct", "wrong") for r in run_records(p))


def test_a_broken_harness_met_ahead_of_its_turn_halts_as_it_would_serially(
        project, chat_api) -> None:
    from fake_openai import text, unauthorized

    def answer(body):
        return unauthorized() if "Question credit-Q05" in json.dumps(body) else text(A_PLUS)

    chat_api.default = answer
    chat_api.delay = 0.1
    p = project()
    result = p.runpytest("questions", "--agent", "openai", "--base-url", chat_api.url,
                         "--model", "gpt-test-1", "--condition", "R1", "--concurrency", "4",
                         "-k", " or ".join(f"Q0{i}" for i in range(1, 10)), "--no-cache")
    assert result.ret == 3, result.stdout.str()  # halted: the harness broke
    banked = {r["question"] for r in run_records(p)}
    # the items before it banked, the one that met it halted, none after it banked
    assert banked == {f"credit-Q0{i}" for i in range(1, 5)}
    report = json.loads((only_run(p) / "report.json").read_text())
    assert "rejected the credential" in report["halted"]
    assert inflight_threads() == []  # no thread is left asking


def test_rpm_spaces_the_requests_the_server_sees(project, chat_api, monkeypatch) -> None:
    """150 a minute lets a request go every 0.4 s, so the k-th request the server gets comes
    at least 0.4·k s after the first thread asked the pace. The gaps between arrivals bound
    nothing: a thread held up between its release and its send (by a loaded machine; here, on
    purpose, the first one by 0.25 s) arrives late, close to the next one, and a check of the
    gaps failed under load."""
    from fake_openai import text
    from openai.resources.chat.completions import Completions

    from pytest_kgbench.asking.pacing import Pace

    asked: list[float] = []
    real_acquire, real_create = Pace.acquire, Completions.create

    def acquire(self, tokens: int = 0) -> int:
        asked.append(time.monotonic())  # before the pace spaces it: no later than its release
        return real_acquire(self, tokens)

    slowed: list[bool] = []

    def create(self, *args, **kwargs):
        if not slowed:  # the first request, held up after its release
            slowed.append(True)
            time.sleep(0.25)
        return real_create(self, *args, **kwargs)

    monkeypatch.setattr(Pace, "acquire", acquire)
    monkeypatch.setattr(Completions, "create", create)
    chat_api.default = lambda body: text(A_PLUS)
    p = project()
    result = p.runpytest("questions", "--agent", "openai", "--base-url", chat_api.url,
                         "--model", "gpt-test-1", "--condition", "R1", "--concurrency", "4",
                         "--rpm", "150", "-k", "Q01 or Q02 or Q03 or Q04")
    result.assert_outcomes(passed=4)
    times = sorted(r["t"] for r in chat_api.requests)  # the fake's clock is this process's
    assert len(times) == 4 and slowed
    # a machine's load can only make a request later than its release, never earlier
    assert [round(t - min(asked), 3) >= round(0.4 * k - 0.005, 3)
            for k, t in enumerate(times)] == [True] * 4, [t - min(asked) for t in times]
    meta = json.loads((only_run(p) / "meta.json").read_text())
    assert meta["settings"]["rpm"] == 150.0


def test_a_querying_run_under_concurrency_shares_its_store_safely(project, chat_api) -> None:
    """Four items' tool loops query one DuckDB store at once: each gets its own rows."""
    from fake_openai import text, tool_call

    from conftest import credit_question

    ids = ("credit-Q01", "credit-Q02", "credit-Q03", "credit-Q04")

    def answer(body):
        msgs = body["messages"]
        qid = next(i for i in ids if f"Question {i}" in msgs[1]["content"])
        if msgs[-1]["role"] != "tool":
            return tool_call("run_query", {"query": credit_question(qid).gold["sql"]})
        return text(f"{qid}: from the rows.\n```json\n{{}}\n```")

    chat_api.default = answer
    chat_api.delay = 0.1
    p = project()
    args = ("questions", "--agent", "openai", "--base-url", chat_api.url, "--model",
            "gpt-test-1", "--condition", "D1", "-k", " or ".join(i[-3:] for i in ids),
            "--no-cache")
    assert p.runpytest(*args, "--run-id", "one").ret in (0, 1)
    assert p.runpytest(*args, "--run-id", "four", "--concurrency", "4").ret in (0, 1)
    assert chat_api.peak >= 2

    def rows(run: str) -> dict[str, list]:
        from pytest_kgbench.core.record import read_answers

        return {r["question"]: [q["rows"] for q in r["answer"]["queries"]]
                for r in read_answers(p.path / "reports" / run / "answers.jsonl")}

    assert rows("four") == rows("one") and len(rows("one")) == 4
    assert all(r for r in rows("one").values())


# --- what the prompt cache rewards ----------------------------------------------------------------

def test_the_estimate_assumes_no_cache_hit_on_a_prefix_below_the_minimum() -> None:
    from pytest_kgbench.core.pricing import Estimate

    small = Estimate("D1", "m", cache_minimum=1024)  # a ~500-token data block: not cacheable
    for _ in range(3):
        small.add(mode="reading", context="x" * 2000, question="q" * 40, system="s" * 40)
    assert small.cache_read == small.cache_write == 0
    assert small.input == 3 * (500 + 20)
    large = Estimate("D1", "m", cache_minimum=1024)  # 2,000 tokens: written once, then read
    for _ in range(3):
        large.add(mode="reading", context="x" * 8000, question="q" * 40, system="s" * 40)
    assert large.cache_write == 2000 and large.cache_read == 2 * 2000
    # a querying loop's rolling prefix is cached only once it has grown past the minimum
    loop = Estimate("D1", "m", cache_minimum=1024)
    loop.add(mode="querying", context="x" * 2000, question="q" * 40, system="s" * 40)
    # rounds 1-2 resend 520 and 970 tokens as plain input; round 2's step takes the
    # conversation to 1,420 tokens, cached from then on (written in rounds 2-3, read in 3)
    assert loop.cache_read == 520 + 2 * 450 and loop.cache_write == 2 * 450


def test_the_minimum_is_the_model_s_own() -> None:
    from pytest_kgbench.core.settings import Settings

    s = Settings.at(".", cache_minimums={"claude-opus-5-5": 4096})
    assert s.cache_minimum("sonnet") == 1024 and s.cache_minimum("haiku") == 2048
    assert s.cache_minimum("opus") == 4096


def test_the_cache_read_share_is_unknown_where_no_backend_reported_it() -> None:
    from pytest_kgbench.agents.models.openai import unknown_cache
    from pytest_kgbench.analysis.report import cache_read_share, share_text
    from pytest_kgbench.scoring.answers import Answer

    def rec(**tokens):
        return {"answer": {"tokens": tokens}}

    assert cache_read_share([rec(input=100, cache_read=300, cache_write=100, output=9),
                             rec(input=500, output=9)]) == pytest.approx(0.6)
    assert cache_read_share([rec(input=100, cache_read=0, cache_write=0)]) == 0.0
    assert cache_read_share([rec(input=500, output=9)]) is None  # not reported: unknown
    assert share_text(None) == "n/a" and share_text(0.0) == "0.0%"
    unreported = unknown_cache(Answer(tokens={"input": 5, "cache_read": 0}), known=False)
    assert "cache_read" not in unreported.tokens
    reported = unknown_cache(Answer(tokens={"input": 5, "cache_read": 0}), known=True)
    assert reported.tokens["cache_read"] == 0


def test_under_n_a_worker_answers_ahead_within_its_context(project, api) -> None:
    """-n 2 --concurrency 4: the worker that has a context's items asks four of them at once
    (it looks ahead within the scope the scheduler sent it wholly)."""
    from fake_api import text

    api.default = lambda body: text("Caldera is rated A+.\n" + A_PLUS)
    api.delay = 0.3
    p = project()
    result = p.runpytest_subprocess("questions", "--model", "sonnet", "--condition", "R1",
                                    "-n", "2", "--concurrency", "4", "--no-cache",
                                    "-k", " or ".join(f"Q0{i}" for i in range(1, 9)))
    assert result.ret == 0, result.stdout.str()
    # one context and two workers: each worker gets a slice of four (cases.scope_groups) and
    # looks ahead within it only, so no item is asked twice
    assert len(run_records(p)) == 8 and len(api.requests) == 8
    assert 4 <= api.peak <= 8


# --- the items' own thread: work done once per context, not per item --------------------------

def test_a_prompt_s_hashes_are_its_text_s_and_a_shared_head_is_hashed_once(monkeypatch) -> None:
    import hashlib

    from pytest_kgbench.asking.prompts import Prompt

    context = "| issuer | rating |\n" + "| Caldera | A+ |\n" * 2000  # unique to this test
    prompts = [Prompt("You answer questions.", context, f"## Question Q{i:02d}") for i in range(3)]
    other = Prompt("You answer questions.", context.replace("A+", "BB"), "## Question Q00")
    sha = hashlib.sha256
    expected = [(sha(p.text.encode()).hexdigest(), sha(p.context.encode()).hexdigest())
                for p in [*prompts, other]]
    hashed: list[int] = []

    def counting(data: bytes = b"") -> Any:
        hashed.append(len(data))
        return sha(data)

    monkeypatch.setattr(hashlib, "sha256", counting)
    for _ in range(2):
        got = [(p.sha256, p.context_sha256) for p in [*prompts, other]]
        assert got == expected
    # per context: its head once and the context once, whatever the items and repeats
    assert len([n for n in hashed if n > len(context) // 2]) == 4, hashed


def test_the_run_store_banks_each_line_at_once_and_a_prompt_file_once(tmp_path) -> None:
    import hashlib

    from pytest_kgbench.core.record import read_answers
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.plugin.runstore import RunStore

    store = RunStore(Settings.at(tmp_path, concurrency=4, run_id="banked"))
    store.begin([f"q.yaml::Q{n:02d}" for n in (1, 2, 3, 4)])  # the items collected: the folder

    def record(n: int, context: str) -> dict[str, Any]:
        sha = hashlib.sha256(context.encode()).hexdigest()
        return {"nodeid": f"q.yaml::Q{n:02d}", "condition": "R1", "grade": "correct",
                "prompt": {"context_sha256": sha, "question": f"Q{n}", "context": context}}

    store.bank(record(1, "the first context"))
    # in the file the moment it is banked, before the run's end (another reader sees it)
    assert [r["nodeid"] for r in read_answers(store.answers_path)] == ["q.yaml::Q01"]
    prompt_file = store.dir / store.records["q.yaml::Q01"]["prompt"]["context_file"]
    assert prompt_file.read_text().startswith("the first context")
    store.bank(record(2, "the first context"))
    store.bank(record(3, "a second context"))
    assert len(list((store.dir / "prompts").iterdir())) == 2
    store.sync()  # the end of the run: flushed and closed
    store.bank(record(4, "a second context"))  # a line after it is still banked, appended
    store.sync()
    assert [r["nodeid"] for r in read_answers(store.answers_path)] == [
        f"q.yaml::Q{n:02d}" for n in (1, 2, 3, 4)]
    assert all(r["prompt"]["context_file"].startswith("prompts/R1-")
               for r in read_answers(store.answers_path))
