"""--batch end to end against the fake batch endpoints on 127.0.0.1 (tests/fake_api.py's
Message Batches API, tests/fake_openai.py's files and batches): a batch run grades as the
interactive run of the same fake, at the batch price; one batch per session; a killed run
resumes by batch id without submitting again; a second identical run asks nothing; an expired
request is asked interactively; a cut results stream is fetched again; an errored result of
the harness's own making halts; --max-cost refuses a batch whose worst case would pass it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import only_run, run_records, subprocess_project, wait_until

A_PLUS = "```json\n{\"rating\": \"A+\"}\n```"
SELECT = "Q01 or Q03 or Q04"
POLL = ("--batch-poll", "0.02")


def interactive_posts(api) -> int:
    return sum(1 for method, path in api.http
               if method == "POST" and path.rstrip("/").endswith("/v1/messages"))


def grades(folder: Path) -> dict[str, tuple[str, str]]:
    return {r["question"]: (r["answer"]["text"], r["grade"]) for r in
            (json.loads(x) for x in (folder / "answers.jsonl").read_text().splitlines())}


def banked(p) -> list[dict]:
    """The run's banked records ([] when it banked none)."""
    return run_records(p) if (only_run(p) / "answers.jsonl").is_file() else []


def run(p, *args: str):
    return p.runpytest("questions", "--model", "sonnet", "--condition", "R1", "-k", SELECT,
                       *args)


def test_a_batch_run_grades_as_the_interactive_run_at_half_the_price(project, api) -> None:
    from fake_api import text

    answers = {"Q01": A_PLUS, "Q03": "```json\n{\"rating\": \"B\"}\n```"}

    def answer(body: dict) -> dict:
        said = json.dumps(body["messages"])
        for q, reply in answers.items():
            if f"Question credit-{q}" in said:
                return text(reply, input_tokens=1000, output_tokens=50)
        return text("I do not know.\n```json\n{}\n```", input_tokens=1000, output_tokens=50)

    api.default = answer
    p = project()
    run(p, "--run-id", "live", "--no-cache").assert_outcomes(passed=3)
    assert interactive_posts(api) == 3 and api.batches_created == 0
    result = run(p, "--run-id", "batched", "--no-cache", "--batch", *POLL)
    result.assert_outcomes(passed=3)
    assert api.batches_created == 1  # the session's three requests, one batch
    assert interactive_posts(api) == 3  # nothing more asked one by one
    (batch,) = api.batches.values()
    assert len(batch["requests"]) == 3
    reports = p.path / "reports"
    assert grades(reports / "batched") == grades(reports / "live")
    records = [json.loads(x) for x in (reports / "batched" / "answers.jsonl")
               .read_text().splitlines()]
    ids = {r["sent"]["batch"]["id"] for r in records}
    assert ids == set(api.batches) and all(r["sent"]["batch"]["result"] == "succeeded"
                                           for r in records)
    assert {r["sent"]["batch"]["custom_id"] for r in records} == {
        q["custom_id"] for q in batch["requests"]}
    # the same tokens, billed at the batch price: half the interactive cost
    live, batched = (json.loads((reports / run_id / "report.json").read_text())
                     for run_id in ("live", "batched"))
    (live_arm,), (batch_arm,) = live["conditions"].values(), batched["conditions"].values()
    assert live_arm["tokens"] == batch_arm["tokens"]
    assert live_arm["cost_usd"]["billed"] == pytest.approx(3 * (1000 * 2.0 + 50 * 10.0) / 1e6)
    assert batch_arm["cost_usd"]["billed"] == pytest.approx(
        live_arm["cost_usd"]["billed"] / 2)
    state = json.loads((reports / "batched" / "batches.json").read_text())
    assert [b["id"] for b in state["batches"]] == list(api.batches)
    assert state["batches"][0]["ended"] is True
    result.stdout.fnmatch_lines(["*kgbench: submitted batch msgbatch_001_* 3 request(s)*"])


def test_a_second_identical_batch_run_asks_nothing(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    p = project()
    run(p, "--run-id", "first", "--batch", *POLL).assert_outcomes(passed=3)
    seen = len(api.http)
    assert api.batches_created == 1
    run(p, "--run-id", "second", "--batch", *POLL).assert_outcomes(passed=3)
    assert len(api.http) == seen  # no batch, no look, no message: the response cache
    records = [json.loads(x) for x in (p.path / "reports" / "second" / "answers.jsonl")
               .read_text().splitlines()]
    assert all(r["sent"]["response_cache"] == {"hits": 1, "misses": 0} for r in records)
    assert all(sum(r["answer"]["tokens"].values()) == 0 for r in records)
    # and an interactive run of the same items reads the batch's answers too
    run(p, "--run-id", "third").assert_outcomes(passed=3)
    assert len(api.http) == seen


def test_an_expired_request_is_asked_interactively_and_a_cut_stream_fetched_again(
        project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    api.batch_expire = lambda params: "Question credit-Q04" in json.dumps(params["messages"])
    api.batch_truncate = 1  # the first download stops in the middle of its first line
    p = project()
    result = run(p, "--batch", *POLL, "--no-cache")
    result.assert_outcomes(passed=3)
    assert result.parseoutcomes().get("rerun") == 1  # the item whose result was cut off
    assert api.batches_created == 1
    assert interactive_posts(api) == 1  # only the expired request, asked again
    records = {r["question"]: r for r in run_records(p)}
    assert len(records) == 3
    fallback = records["credit-Q04"]["sent"]["batch_fallback"]
    assert "expired" in fallback["reason"] and "interactive price" in fallback["reason"]
    assert "batch" not in records["credit-Q04"]["sent"]
    assert all("batch" in records[q]["sent"] for q in ("credit-Q01", "credit-Q03"))
    downloads = [path for method, path in api.http if path.endswith("/results")]
    assert len(downloads) == 2  # the cut one, then the whole


def test_an_errored_result_the_harness_caused_halts_the_run(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    api.batch_error = lambda params: {"type": "authentication_error",
                                      "message": "invalid x-api-key"}
    p = project()
    result = run(p, "--batch", *POLL, "--no-cache")
    assert result.ret == 3, result.stdout.str()
    result.stdout.fnmatch_lines(["*the API rejected the credential (401)*invalid x-api-key*"])
    assert banked(p) == [] and interactive_posts(api) == 0


def test_an_overloaded_result_is_asked_interactively(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    api.batch_error = lambda params: ({"type": "overloaded_error", "message": "Overloaded"}
                                      if "Question credit-Q03" in json.dumps(params["messages"])
                                      else None)
    p = project()
    run(p, "--batch", *POLL, "--no-cache").assert_outcomes(passed=3)
    assert interactive_posts(api) == 1
    records = {r["question"]: r for r in run_records(p)}
    assert "errored (529): Overloaded" in records["credit-Q03"]["sent"]["batch_fallback"][
        "reason"]


def test_max_cost_refuses_a_batch_whose_worst_case_passes_it(project, api) -> None:
    """Three requests of some 8,600 characters (about 2,150 tokens at the $1/M batch input
    price) with up to 4,096 output tokens at $5/M each: about $0.08 in the worst case; a cap
    of $0.05 cannot hold it, so nothing is submitted and the run halts, saying why."""
    p = project()
    result = run(p, "--batch", *POLL, "--no-cache", "--max-cost", "0.05")
    assert result.ret == 3, result.stdout.str()
    result.stdout.fnmatch_lines(["*a batch of 3 request(s) to claude-sonnet-5-5 is submitted "
                                 "at once and could cost up to $0.08* at batch prices; $0.0000 "
                                 "is spent of --max-cost $0.05: it is not submitted*"])
    assert api.batches_created == 0 and banked(p) == []


def test_max_cost_settles_each_result_at_the_batch_price(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS, input_tokens=1000, output_tokens=50)
    p = project()
    run(p, "--batch", *POLL, "--no-cache", "--max-cost", "1").assert_outcomes(passed=3)
    ledger = json.loads((only_run(p) / "spend.json").read_text())
    assert ledger["spent"] == pytest.approx(3 * (1000 * 1.0 + 50 * 5.0) / 1e6)
    assert ledger["reserved"] == {}  # each result settled its share of the batch's


def test_batch_is_refused_where_it_cannot_apply(project, api) -> None:
    p = project()
    result = run(p, "--batch", "--ask", "together")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--batch: a batch carries single-turn requests asked apart" in result.stderr.str()
    result = p.runpytest("questions", "--batch")  # the gold agent
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "agent has no batch API" in result.stderr.str()


def test_the_estimate_shows_batch_prices_beside_interactive_ones(project) -> None:
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1,D2",
                         "--estimate")
    out = result.stdout.str()
    header = next(line for line in out.splitlines() if line.startswith("condition"))
    assert header.split()[-4:] == ["cost", "no", "cache", "batch"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith(("R1 ", "D2 "))}
    cost, batch = float(rows["R1"][-3].strip("$")), float(rows["R1"][-1].strip("$"))
    assert cost > 0 and batch == pytest.approx(cost / 2, abs=0.011)
    assert rows["D2"][-1] == "-"  # a querying condition's tool loop is never batched


# --- killed after submission, resumed by batch id ------------------------------------------

def test_a_run_killed_after_submitting_resumes_without_submitting_again(
        tmp_path: Path, kg_cache: Path, credit_base) -> None:
    from fake_api import FakeMessagesAPI, text

    subprocess_project(tmp_path, kg_cache)
    with FakeMessagesAPI(default=lambda body: text(A_PLUS)) as api:
        api.batch_polls = 10 ** 9  # the batch does not end while the first process lives
        env = {**os.environ, "ANTHROPIC_BASE_URL": api.url,
               "ANTHROPIC_API_KEY": "sk-test-not-a-secret"}
        args = [sys.executable, "-m", "pytest", "questions", "--model", "sonnet",
                "--condition", "R1", "-k", SELECT, "-p", "no:cacheprovider", "-q",
                "-p", "no:hypothesispytest", "--batch", *POLL]
        first = subprocess.Popen([*args, "--run-id", "killed"], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        state = tmp_path / "reports" / "killed" / "batches.json"
        wait_until(lambda: state.is_file() and api.batches and
                   any(b["looks"] for b in api.batches.values()), 120, first)
        os.kill(first.pid, signal.SIGKILL)
        first.communicate()
        assert api.batches_created == 1
        assert not (tmp_path / "reports" / "killed" / "answers.jsonl").is_file() or \
            (tmp_path / "reports" / "killed" / "answers.jsonl").read_text() == ""
        api.batch_polls = 0  # the batch has ended by the time the run resumes
        resumed = subprocess.run([*args, "--resume", "killed"], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=300)
        assert resumed.returncode == 0, resumed.stdout
        assert api.batches_created == 1  # found by id in the run folder, never resubmitted
        assert interactive_posts(api) == 0
        records = [json.loads(x) for x in
                   (tmp_path / "reports" / "killed" / "answers.jsonl").read_text().splitlines()]
        assert sorted(r["question"] for r in records) == [
            "credit-Q01", "credit-Q03", "credit-Q04"]
        assert {r["sent"]["batch"]["id"] for r in records} == set(api.batches)


# --- the OpenAI Batch API ---------------------------------------------------------------------

def openai_run(p, api, *args: str):
    return p.runpytest("questions", "--agent", "openai", "--base-url", api.url,
                       "--model", "gpt-test-1", "--condition", "R1", "-k", SELECT, *args)


def chat_posts(api) -> int:
    return sum(1 for method, path in api.http
               if method == "POST" and path.endswith("/chat/completions"))


def test_an_openai_batch_run_grades_as_the_interactive_run(project, chat_api) -> None:
    from fake_openai import text

    def answer(body: dict) -> dict:
        good = "Question credit-Q01" in json.dumps(body["messages"])
        return text(A_PLUS if good else "```json\n{\"rating\": \"C\"}\n```",
                    prompt_tokens=1000, completion_tokens=50)

    chat_api.default = answer
    p = project()
    (p.path / "pyproject.toml").write_text(
        '[tool.kgbench.prices."gpt-test-1"]\ninput = 1.0\noutput = 10.0\n')
    openai_run(p, chat_api, "--run-id", "live", "--no-cache").assert_outcomes(passed=3)
    assert chat_posts(chat_api) == 3
    openai_run(p, chat_api, "--run-id", "batched", "--no-cache", "--batch", *POLL
               ).assert_outcomes(passed=3)
    assert chat_api.batches_created == 1 and chat_posts(chat_api) == 3
    (batch,) = chat_api.batches.values()
    assert batch["body"]["endpoint"] == "/v1/chat/completions"
    assert batch["body"]["completion_window"] == "24h"
    assert {r["url"] for r in batch["requests"]} == {"/v1/chat/completions"}
    reports = p.path / "reports"
    assert grades(reports / "batched") == grades(reports / "live")
    live, batched = (json.loads((reports / run_id / "report.json").read_text())
                     for run_id in ("live", "batched"))
    (live_arm,), (batch_arm,) = live["conditions"].values(), batched["conditions"].values()
    assert batch_arm["cost_usd"]["billed"] == pytest.approx(
        live_arm["cost_usd"]["billed"] / 2)
    # the runs above kept nothing (--no-cache): this one submits, the next asks nothing
    openai_run(p, chat_api, "--run-id", "cached", "--batch", *POLL).assert_outcomes(passed=3)
    assert chat_api.batches_created == 2
    def asked() -> int:  # every request but the list of models, asked before each run
        return sum(1 for _, path in chat_api.http if not path.endswith("/models"))

    seen = asked()
    openai_run(p, chat_api, "--run-id", "again", "--batch", *POLL).assert_outcomes(passed=3)
    assert asked() == seen and chat_api.batches_created == 2


def test_openai_expired_errored_and_cut_results(project, chat_api) -> None:
    from fake_openai import status, text

    chat_api.default = lambda body: text(A_PLUS)
    chat_api.batch_expire = lambda body: "Question credit-Q04" in json.dumps(body["messages"])
    chat_api.batch_error = lambda body: (status(500) if "Question credit-Q03" in
                                         json.dumps(body["messages"]) else None)
    chat_api.batch_truncate = 1
    p = project()
    result = openai_run(p, chat_api, "--batch", *POLL, "--no-cache")
    result.assert_outcomes(passed=3)
    assert result.parseoutcomes().get("rerun") == 1  # Q01's line was cut: fetched again
    assert chat_api.batches_created == 1
    assert chat_posts(chat_api) == 2  # Q03 (a 500) and Q04 (expired), asked interactively
    records = {r["question"]: r for r in run_records(p)}
    assert "batch" in records["credit-Q01"]["sent"]
    assert "expired" in records["credit-Q04"]["sent"]["batch_fallback"]["reason"]
    assert "errored (500)" in records["credit-Q03"]["sent"]["batch_fallback"]["reason"]


def test_openai_a_401_result_halts(project, chat_api) -> None:
    from fake_openai import unauthorized

    chat_api.batch_error = lambda body: unauthorized()
    p = project()
    result = openai_run(p, chat_api, "--batch", *POLL, "--no-cache")
    assert result.ret == 3, result.stdout.str()
    result.stdout.fnmatch_lines(["*the API rejected the credential (401)*"])
    assert chat_posts(chat_api) == 0


def test_under_xdist_one_worker_submits_and_every_worker_polls_it(project, api) -> None:
    from fake_api import text

    api.default = lambda body: text(A_PLUS)
    p = project()
    run(p, "-n", "2", "--batch", *POLL, "--no-cache").assert_outcomes(passed=3)
    assert api.batches_created == 1 and interactive_posts(api) == 0
    records = run_records(p)
    assert len(records) == 3 and len({r["sent"]["batch"]["id"] for r in records}) == 1
