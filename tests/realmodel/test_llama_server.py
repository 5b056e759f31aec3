"""The plugin's own agents against a real model: llama.cpp's llama-server serving Gemma 3 270M on
127.0.0.1 (tools/llama_server.py), asked as a user would, in a pytest session of its own.

What is checked is the harness, never the model's accuracy: every item ends as a grade or a
classified fault, tool calls the server parsed are executed and recorded, the tokens banked are
the tokens the server counted, the report is written, and a prompt past the server's context is
a skip. The server samples greedily (--temp 0), so the model's answers are the same run to run
on one machine; no assertion depends on what it answers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import llama_server  # noqa: E402

pytestmark = pytest.mark.realmodel

SERVER_LIFETIME = 3600.0  # seconds: a server older than this is stopped by the fixture's end
READY_TIMEOUT = 600.0     # loading the model under a loaded machine


def start_or_skip(ctx: int, log_path: Path) -> llama_server.Server:
    """A running llama-server with the cached model, or the test skipped with why not."""
    try:
        llama_server.ensure_server()
        llama_server.ensure_model()
        return llama_server.start(ctx=ctx, log_path=log_path, ready_timeout=READY_TIMEOUT)
    except llama_server.Unavailable as err:
        pytest.skip(f"no llama-server: {err}")


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama_server.Server]:
    """llama-server for the session (one per xdist worker), 8192 tokens of context, stopped by
    its pid at the end, or when it outlived SERVER_LIFETIME."""
    log_path = tmp_path_factory.mktemp("llama") / "llama-server.log"
    began = time.monotonic()
    server = start_or_skip(8192, log_path)
    try:
        yield server
    finally:
        server.stop()
    assert time.monotonic() - began < SERVER_LIFETIME, "the server outlived its lifetime"


@pytest.fixture(scope="session")
def small_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama_server.Server]:
    """A second llama-server asked for 128 tokens of context (llama.cpp makes it 256): every
    prompt of the starter pack is longer."""
    server = start_or_skip(128, tmp_path_factory.mktemp("llama-small") / "llama-server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter pack (`kgbench init`): four questions on two small tables, so a prompt is a
    few hundred tokens and a 270M model answers in seconds."""
    from pytest_kgbench.cli import main

    folder = tmp_path_factory.mktemp("packs") / "shop"
    assert main(["init", str(folder)]) == 0
    return folder

SESSION_TIMEOUT = 1800  # seconds for one asking session: bounded, generous on a loaded machine
ITEM_TIMEOUT = "600"
# the letters and statuses an item may end with (docs/models.md, "Faults")
LETTERS = set("CPWTABDMNZ")
MODEL_STATUSES = {"answered", "truncated", "refused", "empty", "timeout", "abstained",
                  "declined", "blocked"}
# one question of the starter pack (a lookup), under R1 and D1: two items a session; a 270M
# base model rarely stops by itself, so each call runs to the output limit
QUESTION = "shop-Q1"
ITEMS = 2
MAX_TOKENS = "256"  # each call's output limit: a call cut there may hold a cut tool call
# one tool without arguments, shown used once before (a base model copies what it was shown)
TOOLS = [{"type": "function", "function": {
    "name": "list_tables", "description": "List the tables of the shop's database.",
    "parameters": {"type": "object", "properties": {}}}}]
SHOWN = [{"role": "user", "content": "Which tables are there?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call1", "type": "function",
              "function": {"name": "list_tables", "arguments": "{}"}}]},
         {"role": "tool", "tool_call_id": "call1", "content": "customers, orders"},
         {"role": "assistant", "content": "There are two tables: customers and orders."},
         {"role": "user", "content": "Which tables are there now?"}]


def post(url: str, body: dict[str, Any], timeout: float = 600) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any provider's key or endpoint, plus `extra`, with
    this repository first on the path (its plugin is the one the session loads)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_", "GEMINI_", "GOOGLE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **extra}


def ask(folder: Path, pack: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """One pytest session asking the starter pack's items, in `folder`; its output is kept in
    folder/session.log."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--pack={pack}", "--no-cache", "--item-timeout", ITEM_TIMEOUT,
           "--model-reruns", "0", "--progress", "0", *args]
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=SESSION_TIMEOUT, check=False)
    (folder / "session.log").write_text(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return done


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "answers.jsonl").read_text().splitlines()]


def banked_tokens(items: list[dict[str, Any]]) -> dict[str, int]:
    total = {"input": 0, "output": 0, "cache_read": 0}
    for record in items:
        for name in total:
            total[name] += int(record["answer"]["tokens"].get(name) or 0)
    return total


def check_run(run: Path, done: subprocess.CompletedProcess) -> list[dict[str, Any]]:
    """What every run must show, whatever the model answered: each item banked once with a
    letter, every call's served model, report.md and report.json."""
    log = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, log
    items = records(run)
    assert len(items) == ITEMS, log
    assert len({r["nodeid"] for r in items}) == len(items)
    for r in items:
        assert r["letter"] in LETTERS and r["grade"], r
        assert r["status"] in MODEL_STATUSES, r
        assert r["sent"]["calls"], r  # what each call was served: the model, the stop reason
        assert all(c["model"] == llama_server.MODEL_ALIAS for c in r["sent"]["calls"]), r
    report = json.loads((run / "report.json").read_text())
    assert (run / "report.md").read_text().strip()
    assert report, "report.json is empty"
    return items


def tool_calls_executed(items: list[dict[str, Any]]) -> int:
    """The D1 items' tool calls, each of which the harness ran (a recorded result)."""
    calls = [c for r in items if r["condition"] == "D1" for c in r["answer"]["tool_calls"]]
    for call in calls:
        assert call.get("name") in {"list_tables", "describe", "run_query"}, call
    reading = [r for r in items if r["condition"] == "R1"]
    assert all(not r["answer"]["tool_calls"] for r in reading)
    return len(calls)


def test_the_template_takes_tools(llama) -> None:
    """--chat-template-file gives Gemma 3 a tool format llama.cpp parses (its own template
    has none): /props says so."""
    status, props = llama_server.get_json(llama.url + "/props", timeout=30)
    assert status == 200, props
    assert isinstance(props, dict)
    caps = props["chat_template_caps"]
    assert caps["supports_tools"] and caps["supports_tool_calls"], caps
    assert "<tool_call>" in props["chat_template"]


def test_a_tool_call_and_its_result_over_chat_completions(llama) -> None:
    """Tool calls come back parsed, as `tool_calls` with JSON-object arguments, and the next
    turn, which carries their results as role "tool" messages, is answered (Gemma's own
    template raises "Conversation roles must alternate", a 500). The model may go on calling
    until max_tokens (finish_reason "length"): that is the model's, not the parser's."""
    body: dict[str, Any] = {"model": llama_server.MODEL_ALIAS, "messages": SHOWN,
                            "tools": TOOLS, "max_tokens": 64, "temperature": 0}
    status, reply = post(llama.url + "/v1/chat/completions", body)
    assert status == 200, reply
    choice = reply["choices"][0]
    assert choice["finish_reason"] in ("tool_calls", "length"), reply
    calls = choice["message"]["tool_calls"]
    assert calls and all(c["function"]["name"] == "list_tables" for c in calls), reply
    assert all(json.loads(c["function"]["arguments"]) == {} for c in calls), reply
    messages = [*SHOWN, {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": c["id"], "content": "customers, orders"}
                  for c in calls)]
    status, reply = post(llama.url + "/v1/chat/completions", {**body, "messages": messages})
    assert status == 200, reply
    assert reply["usage"]["prompt_tokens"] > 0


def test_a_tool_use_and_its_result_over_messages(llama) -> None:
    """The same over the Anthropic Messages API the server also speaks: tool_use blocks with
    an `input` object, and a tool_result turn answered."""
    tools = [{"name": "list_tables", "description": TOOLS[0]["function"]["description"],
              "input_schema": TOOLS[0]["function"]["parameters"]}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Which tables are there?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "list_tables", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "customers, orders"}]},
        {"role": "assistant", "content": "There are two tables: customers and orders."},
        {"role": "user", "content": "Which tables are there now?"}]
    body = {"model": llama_server.MODEL_ALIAS, "max_tokens": 64, "tools": tools,
            "messages": messages}
    status, reply = post(llama.url + "/v1/messages", body)
    assert status == 200, reply
    assert reply["stop_reason"] in ("tool_use", "max_tokens"), reply
    uses = [b for b in reply["content"] if b["type"] == "tool_use"]
    assert uses and all(u["name"] == "list_tables" and u["input"] == {} for u in uses), reply
    messages += [{"role": "assistant", "content": reply["content"]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": u["id"], "content": "customers"}
                     for u in uses]}]
    status, reply = post(llama.url + "/v1/messages", {**body, "messages": messages})
    assert status == 200, reply
    assert reply["usage"]["input_tokens"] + reply["usage"].get("cache_read_input_tokens", 0) > 0


def metrics(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (started with --metrics), by name."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as reply:  # noqa: S310
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"(llamacpp:\w+)(?:\{[^}]*\})?\s+(\S+)", line.strip())
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def served_tokens(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    """The tokens the server counted in between: prompt tokens it evaluated ("excluding cached
    tokens"), prompt tokens it reused from its cache, and tokens it generated."""
    names = {"input": "llamacpp:prompt_tokens_total",
             "cache_read": "llamacpp:prompt_tokens_cached_total",
             "output": "llamacpp:tokens_predicted_total"}
    return {k: int(after[n] - before[n]) for k, n in names.items()}


@pytest.mark.parametrize("agent", ["openai", "anthropic"])
def test_an_agent_reads_and_queries_through_llama_server(agent, llama, starter,
                                                         tmp_path) -> None:
    """The starter pack's four questions under R1 (reading) and D1 (a tool loop over DuckDB),
    asked through `--agent openai --base-url` or `--agent anthropic` with ANTHROPIC_BASE_URL."""
    if agent == "openai":
        env = clean_env(OPENAI_API_KEY="sk-local-not-a-secret")
        args = ["--agent", "openai", "--base-url", llama.url + "/v1", "--temperature", "0"]
    else:
        env = clean_env(ANTHROPIC_BASE_URL=llama.url, ANTHROPIC_API_KEY="sk-local-not-a-secret")
        args = ["--agent", "anthropic"]
    before = metrics(llama.url)
    began = time.monotonic()
    done = ask(tmp_path, starter, env, *args, "--model", llama_server.MODEL_ALIAS,
               "--condition", "R1,D1", "-k", QUESTION, "--max-tokens", MAX_TOKENS,
               "--max-rounds", "2", "--run-id", agent)
    seconds = time.monotonic() - began
    after = metrics(llama.url)
    items = check_run(tmp_path / "reports" / agent, done)
    calls = tool_calls_executed(items)
    tokens = banked_tokens(items)
    served = served_tokens(before, after)
    print(f"{agent}: {len(items)} items in {seconds:.0f} s; {calls} tool calls; banked "
          f"{tokens}; the server counted {served}; letters "
          f"{''.join(r['letter'] for r in items)}")
    assert tokens == served


def test_a_prompt_past_the_context_is_skipped(small_llama, starter, tmp_path) -> None:
    """llama.cpp's 400 exceed_context_size_error is a skip with the reason, not a miss or an
    error, through either agent."""
    for agent, env, args in (
            ("openai", clean_env(OPENAI_API_KEY="sk-local-not-a-secret"),
             ["--agent", "openai", "--base-url", small_llama.url + "/v1"]),
            ("anthropic", clean_env(ANTHROPIC_BASE_URL=small_llama.url,
                                    ANTHROPIC_API_KEY="sk-local-not-a-secret"),
             ["--agent", "anthropic"])):
        folder = tmp_path / agent
        folder.mkdir()
        done = ask(folder, starter, env, *args, "--model", llama_server.MODEL_ALIAS,
                   "--condition", "R1", "-k", QUESTION, "--run-id", agent, "-rs")
        log = done.stdout[-4000:] + done.stderr[-2000:]
        assert done.returncode == 0, log
        assert "1 skipped" in done.stdout, log
        report = json.loads((folder / "reports" / agent / "report.json").read_text())
        (skipped,) = report["skipped"]
        assert "exceeds the available context size" in skipped["reason"], skipped


def test_the_server_s_names_window_and_speed(llama, starter, tmp_path) -> None:
    """What the harness reads off the real server before a run: the names it serves (its
    alias), the window it was started with (8192, llama.cpp's meta.n_ctx, not the model's
    32768 n_ctx_train), a speed measured from its own token counts; a name it does not serve
    is refused before any item, and the estimate of a local model is time, not dollars."""
    from pytest_kgbench.agents.support.served import measure_speed, served

    got = served(llama.url + "/v1")
    assert got.serves(llama_server.MODEL_ALIAS), got
    assert got.windows[llama_server.MODEL_ALIAS] == 8192, got
    speed = measure_speed(llama.url + "/v1", llama_server.MODEL_ALIAS)
    assert speed.prompt > 0 and speed.output > 0
    env = clean_env(OPENAI_API_KEY="sk-local-not-a-secret")
    args = ["--agent", "openai", "--base-url", llama.url + "/v1", "--condition", "R1,D1",
            "-k", QUESTION]
    refused = ask(tmp_path, starter, env, *args, "--model", "mistral")
    assert refused.returncode == 4, refused.stderr[-2000:]
    assert (f"'mistral' is not a model the server at {llama.url}/v1 serves (GET /models "
            f"lists: {llama_server.MODEL_ALIAS})") in refused.stderr
    assert not (tmp_path / "reports").exists()
    estimate = ask(tmp_path, starter, env, *args, "--model", llama_server.MODEL_ALIAS,
                   "--estimate")
    assert estimate.returncode == 0, estimate.stdout[-3000:]
    out = estimate.stdout
    assert "serves a 8,192-token window" in out, out[-3000:]
    assert "time on this machine, for the models served here with no price" in out
    assert not (tmp_path / "reports").exists()


def test_a_gguf_s_header_declares_its_size() -> None:
    """tools/gguf_parts.py sizes a GGUF from its header alone (the tensor table), as it must
    for a set of PyPI parts whose count nothing else gives: the model's own file, exactly."""
    import gguf_parts

    try:
        model = llama_server.ensure_model()
    except llama_server.Unavailable as err:
        pytest.skip(f"no model: {err}")
    with model.open("rb") as fh:
        assert gguf_parts.gguf_size(fh) == model.stat().st_size


def test_an_incomplete_part_set_is_refused_before_any_download(tmp_path) -> None:
    """The model's first 50 MB as part 0 of a set: the header needs 6 parts; an index holding
    parts 1 and 2 only is refused naming 3 of 6, and one holding all five others passes."""
    import gguf_parts

    try:
        model = llama_server.ensure_model()
    except llama_server.Unavailable as err:
        pytest.skip(f"no model: {err}")
    first = tmp_path / "model_part_0000"
    with model.open("rb") as src:
        first.write_bytes(src.read(50_000_000))
    asked: list[str] = []

    def held(upto: int):
        def exists(name: str) -> bool:
            asked.append(name)
            return int(name.rsplit("-", 1)[1]) <= upto
        return exists

    with pytest.raises(gguf_parts.Unavailable, match=r"the index holds 3 of the 6 parts"):
        gguf_parts.plan("some-model", first, held(2))
    assert asked[0] == "some-model-part-0001"
    assert gguf_parts.plan("some-model", first, held(5)) == 6


def test_the_ladder_script_runs_on_the_cpu(tmp_path) -> None:
    """benchmarks/local_model/ladder.sh with CPU_TEST=1, as small as it goes (credit, R4, one
    question per tier, 16 output tokens): it builds or reuses the server, serves the model,
    prints the estimate in time, runs, and stops the server; the run folder is complete."""
    reports = tmp_path / "reports"
    env = clean_env(CPU_TEST="1", PACKS="credit", CONDITIONS="R4", SAMPLE="1",
                    PORT=str(llama_server.free_port()), RUN_ID="ladder-test",
                    PY=sys.executable, PYTEST=f"{sys.executable} -m pytest",
                    EXTRA=f"--max-tokens 16 -o kgbench_reports={reports} --progress 0")
    done = subprocess.run(["bash", str(REPO / "benchmarks/local_model/ladder.sh")], env=env,
                          capture_output=True, text=True, timeout=SESSION_TIMEOUT,
                          check=False)
    log = done.stdout[-5000:] + done.stderr[-3000:]
    assert done.returncode == 0, log
    assert "(time)" in done.stdout and "serves a 32,768-token window" in done.stdout, log
    run = reports / "ladder-test"
    items = records(run)
    assert items and {r["condition"] for r in items} == {"R4"}, log
    assert all(r["letter"] in LETTERS and r["model"] == llama_server.MODEL_ALIAS
               for r in items)
    assert (run / "report.md").read_text().strip()
    assert "ladder.sh: pytest exited 0; the run is reports/ladder-test" in done.stdout
