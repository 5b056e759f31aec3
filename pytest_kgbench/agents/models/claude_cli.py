"""`claude-cli`: Claude Code in print mode (`claude -p`), as a person connecting a client of their
own to the store would use it: somebody else's loop over our tools.

Each item runs from an empty temporary directory with every built-in tool disabled, and asks
the way the `anthropic` agent asks:
- the prompt goes in as the same two blocks, the data block (its own cache breakpoint, so
  sibling items share it) and the question (stream-json input), under our system prompt; the
  store is described once, in the prompt (the MCP server sends no instructions);
- --effort is passed through, --max-tokens bounds each call (CLAUDE_CODE_MAX_OUTPUT_TOKENS),
  thinking is off, and the CLI retries a failed call twice, as the SDK does;
- querying conditions get at most --max-rounds rounds of tools; a model still calling tools
  then is told LAST_ROUND and answers in a final turn in which every tool call is refused;
- --item-timeout bounds the whole item: the CLI is stopped at the deadline (a timeout, a miss).

Claude Code puts a system block naming itself before our system prompt and a first user block
with today's date (agents.framing); no option leaves them out, so the anthropic agent sends the
same, and both record them (`sent.framing`).

Claude Code is isolated from the user's own instructions: no setting sources (no
~/.claude/CLAUDE.md, no CLAUDE.md in the folders above, no user or project settings) and no
auto-memory. For querying conditions the store is offered as an MCP server (`kgbench mcp`,
stdio), waited for at start for as long as the item may last (MCP_CONNECTION_NONBLOCKING=false
and MCP_CONNECT_TIMEOUT_MS: print mode otherwise gives a server 5 s, reports one still starting
`pending` and never looks again); the session's init event must list it as
connected with the tools its condition offers, or the harness is broken and the run halts — a
client that silently lost its tools would otherwise score as a weak model. The MCP server logs
every call, so the item banks the queries the session ran, with their results.

Errors are classified as the anthropic agent's are (agents/support/faults.py): not logged in, a
rejected key, no credit -> halt (a 401 or 403 the CLI starts retrying stops it at once); a
prompt too long for the window -> skipped; a malformed request or unknown model -> halt; overload
and the rest -> rerun, never graded. A policy refusal (the result's stop_reason "refusal") is
the model's answer, status `refused`, banked once; an empty reply (Claude Code asks once more
itself) is status `empty`.

The binary is `claude` on PATH, `.tools/node_modules/.bin/claude` under the repository, or the
path in KGBENCH_CLAUDE. It reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL like the SDK, or the
user's own login.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_kgbench.agents import LAST_ROUND, BaseAgent, Completion, Task, framing
from pytest_kgbench.agents.loop import token_limit
from pytest_kgbench.agents.support.faults import classify_status
from pytest_kgbench.asking.tools import TOOL_NAMES
from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.core.settings import check_models
from pytest_kgbench.engines import QueryResult
from pytest_kgbench.scoring.answers import Answer, extract_block

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

SERVER = "kgbench"
MCP_TOOLS = tuple(f"mcp__{SERVER}__{name}" for name in TOOL_NAMES)


def mcp_tools(condition: Any) -> tuple[str, ...]:
    """The MCP tool names a querying condition's session is allowed (`Condition.tools`)."""
    return tuple(f"mcp__{SERVER}__{name}" for name in condition.tools)
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_ERROR_REPORTING": "1"}
ASKS_AS_THE_SDK = {
    "MCP_CONNECTION_NONBLOCKING": "false",  # wait for the MCP server at start (see above)
    "MCP_TIMEOUT": "60000",                 # each request to it other than a tool call
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",  # nothing of the user's carried in
    "CLAUDE_CODE_DISABLE_THINKING": "1",     # the anthropic agent sends no thinking either
    "MAX_THINKING_TOKENS": "0",
    "CLAUDE_CODE_MAX_RETRIES": "2",          # the SDK's two retries
}
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # what `claude --effort` takes
CUT = "output token maximum"  # the CLI's words for an answer cut at the output limit

MISSING = ("the claude CLI was not found (PATH, .tools/node_modules/.bin, KGBENCH_CLAUDE); "
           "install it: npm install --prefix .tools @anthropic-ai/claude-code@2.1.197")
POSTINSTALL = ("npm may have left its placeholder in place (the package's postinstall script "
               "puts the native binary there, and an npm that does not run install scripts "
               "skips it): run `node .tools/node_modules/@anthropic-ai/claude-code/install.cjs` "
               "(the folder of the claude you use)")


def cli_version(binary: str) -> tuple[str | None, str]:
    """The CLI's version (`claude --version`: "2.1.197 (Claude Code)"), or None and what the
    binary said instead (a placeholder npm left prints how to install the real one)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             timeout=60, env={**os.environ, **QUIET})
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    words = out.stdout.split()
    if out.returncode != 0 or not words or not words[0][:1].isdigit():
        said = " ".join((out.stderr or out.stdout).split())
        return None, f"exit {out.returncode}: {said[:200]}"
    return words[0], ""


def find_claude(root: str) -> str | None:
    """The Claude Code binary: KGBENCH_CLAUDE, then PATH, then <root>/.tools/node_modules/.bin."""
    explicit = os.environ.get("KGBENCH_CLAUDE")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    found = shutil.which("claude")
    if found:
        return found
    local = Path(root) / ".tools" / "node_modules" / ".bin" / "claude"
    return str(local) if local.is_file() else None


def mcp_command(settings: Settings, task: Task, log: Path, closed: Path) -> dict[str, Any]:
    """The MCP server entry for this item's store."""
    args = ["-m", "pytest_kgbench.cli", "mcp", "--pack", task.question.pack,
            "--variant", task.built.variant, "--condition", task.condition.id,
            "--persona", task.question.persona, "--root", settings.paths.rootdir,
            "--datasets", settings.paths.datasets_dir, "--ontology", settings.paths.ontology_dir,
            "--cache", settings.paths.cache_dir,
            "--query-timeout", str(settings.limits.query_timeout), "--log", str(log),
            "--closed-when", str(closed), "--no-instructions"]
    for language, engine in settings.engines_for(task.condition).items():
        args += [f"--{language}-engine", engine]
    if settings.plan.dataset_seed is not None:
        args += ["--seed", str(settings.plan.dataset_seed)]
    if task.together:
        args += ["--together", "--questions", ",".join(task.together)]
    return {"mcpServers": {SERVER: {"command": sys.executable, "args": args}}}


def user_message(*blocks: dict[str, Any]) -> str:
    """One stream-json input line: a user message of these content blocks."""
    return json.dumps({"type": "user", "message": {"role": "user", "content": list(blocks)}})


@dataclass
class Stream:
    """What one CLI process printed (stream-json), and how it ended."""

    init: dict[str, Any] | None = None
    assistant: list[dict[str, Any]] = field(default_factory=list)  # assistant messages
    results: list[dict[str, Any]] = field(default_factory=list)
    timed_out: bool = False
    returncode: int | None = None
    stderr: str = ""
    # the CLI retrying a call the credential decides (401, 403): stopped at once, as more
    # tries cannot succeed (it retried a 401 twice)
    rejected: dict[str, Any] | None = None


REJECTED = (401, 403)  # statuses the CLI retries that no retry can change


def converse(cmd: list[str], *, cwd: Path, env: dict[str, str], first: str, deadline: float,
             follow_up: Any = None) -> Stream:
    """Run the CLI with stream-json input and output until it exits or `deadline`
    (time.monotonic()) passes, when it is stopped (with the MCP server it started). After each
    result event `follow_up(stream)` may return one more input line; otherwise input ends."""
    out = Stream()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        assert proc.stdin is not None and proc.stdout is not None
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
        _send(proc.stdin, first)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    out.timed_out = True
                    _stop(proc)
                    break
                try:
                    line = lines.get(timeout=min(remaining, 1.0))
                except queue.Empty:
                    continue
                if line is None:
                    break
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                kind = event.get("type")
                if kind == "system" and event.get("subtype") == "init" and out.init is None:
                    out.init = event
                elif kind == "system" and event.get("subtype") == "api_retry" and \
                        event.get("error_status") in REJECTED:
                    out.rejected = event
                    _stop(proc)
                    break
                elif kind == "assistant":
                    out.assistant.append(event.get("message") or {})
                elif kind == "result":
                    out.results.append(event)
                    more = follow_up(out) if follow_up else None
                    if more:
                        _send(proc.stdin, more)
                    else:
                        _close(proc.stdin)
        except BaseException:
            _stop(proc)  # Ctrl-C or a failure of ours: the CLI and its MCP server go too
            raise
        try:
            out.returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out.timed_out = True
            _stop(proc)
        err.seek(0)
        out.stderr = err.read()[-2000:]
    return out


def _pump(stdout: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stdout:
        lines.put(line)
    lines.put(None)


def _send(stdin: IO[str], line: str) -> None:
    try:
        stdin.write(line + "\n")
        stdin.flush()
    except (BrokenPipeError, ValueError):  # the CLI has exited; its output says why
        pass


def _close(stdin: IO[str]) -> None:
    try:
        stdin.close()
    except (BrokenPipeError, ValueError):
        pass


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop the CLI and what it started (its process group: the MCP server)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


class ClaudeCliAgent(BaseAgent):
    name = "claude-cli"
    kind = "model"
    asks_together = True  # answers a together session in one conversation
    judged = True
    completes = True  # the judge may ask through it (`complete`)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.item_timeout = settings.limits.item_timeout
        self._version: str | None = None

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        check_models(settings)
        if settings.model.effort and settings.model.effort not in EFFORTS:
            return (f"--effort {settings.model.effort}: the claude CLI takes "
                    f"{', '.join(EFFORTS)}")
        given = [flag for flag, value in (("--temperature", settings.model.temperature),
                                          ("--top-p", settings.model.top_p),
                                          ("--max-cost", settings.limits.max_cost))
                 if value is not None]
        if given:  # never ignored in silence: Claude Code takes no sampling settings, and its
            # calls are its own (no cap can stand before them)
            return f"{', '.join(given)}: the claude CLI agent cannot honour it"
        if not asking:
            return None
        binary = find_claude(settings.paths.rootdir)
        if binary is None:
            return MISSING
        version, said = cli_version(binary)
        if version is None:  # checked before the run, not met as a broken harness per item
            return f"the claude CLI at {binary} does not run (`claude --version`, {said}): " \
                   + POSTINSTALL
        return None

    def base_command(self, binary: str, model: str, system: str) -> list[str]:
        """What every call of this agent runs: print mode, our system prompt, no built-in
        tools, no setting sources, the run's effort."""
        cmd = [binary, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
               "--verbose", "--model", model, "--system-prompt", system,
               "--no-session-persistence", "--tools", "", "--setting-sources", ""]
        if self.settings.model.effort:
            cmd += ["--effort", self.settings.model.effort]
        return cmd

    def environment(self, max_tokens: int, budget: float) -> dict[str, str]:
        """The CLI's environment for a call of at most `budget` seconds. Claude Code 2.1 waits
        MCP_CONNECT_TIMEOUT_MS (5 s unless set; MCP_TIMEOUT is each request's) for its MCP
        servers before it starts, then reports one still starting as `pending` and never
        looks again: it may wait the whole budget, the deadline that stops it anyway."""
        return {**os.environ, **QUIET, **ASKS_AS_THE_SDK,
                "MCP_CONNECT_TIMEOUT_MS": str(max(1000, int(budget * 1000))),
                "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_tokens)}

    def token_limit(self, task: Task) -> int:
        """The output limit of each call, as the anthropic agent's (room for every question of
        a together session: loop.token_limit)."""
        return token_limit(self.settings.model.max_tokens, task)

    def ask(self, task: Task) -> Answer:
        binary = find_claude(self.settings.paths.rootdir)
        if binary is None:
            raise HarnessBroken(MISSING)
        querying = task.condition.mode == "querying"
        model = self.settings.model_id(task.model)
        max_tokens = self.token_limit(task)
        rounds = self.settings.limits.max_rounds * task.share
        frame = framing("vertex" if os.environ.get("CLAUDE_CODE_USE_VERTEX") else "anthropic")
        task.sent.update({"backend": "claude-code", "model": model, "max_tokens": max_tokens,
                          "effort": self.settings.model.effort, "thinking": "disabled",
                          "temperature": None, "max_rounds": rounds if querying else 0,
                          # what Claude Code puts around our prompt (the anthropic agent sends
                          # the same): it cannot be told to leave them out
                          "framing": {"identity": frame["identity"], "date": frame["date"],
                                      "added_by": "claude-code"}})
        with tempfile.TemporaryDirectory(prefix="kgbench-cli-") as tmp:
            workdir = Path(tmp) / "work"
            workdir.mkdir()
            log, closed = Path(tmp) / "tools.jsonl", Path(tmp) / "closed"
            cmd = self.base_command(binary, model, task.prompt.system)
            if querying:
                cmd += ["--mcp-config", json.dumps(mcp_command(self.settings, task, log, closed)),
                        "--strict-mcp-config", "--allowedTools", *mcp_tools(task.condition),
                        "--max-turns", str(rounds)]
            else:
                cmd += ["--max-turns", "1"]

            def last_round(stream: Stream) -> str | None:
                """Out of rounds while still calling tools: close the tools, ask for the
                answer (once)."""
                if not querying or closed.exists() or \
                        stream.results[-1].get("subtype") != "error_max_turns":
                    return None
                closed.touch()
                task.sent["last_round"] = True
                return user_message({"type": "text", "text": LAST_ROUND})

            start = time.monotonic()
            first = user_message(
                {"type": "text", "text": task.prompt.context,
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": task.prompt.question})
            budget = self.item_timeout * task.share
            stream = converse(cmd, cwd=workdir, env=self.environment(max_tokens, budget),
                              first=first, deadline=start + budget, follow_up=last_round)
            self._record(task.sent, stream)
            if stream.timed_out:
                answer = Answer(status="timeout", error="the CLI ran past --item-timeout")
            else:
                answer = self._read(stream, querying, tools=mcp_tools(task.condition))
            answer.latency_s = round(time.monotonic() - start, 4)
            self._calls(answer, log)
        return answer

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion:
        """One plain call (the judge's) through the CLI: one turn, no tools."""
        binary = find_claude(self.settings.paths.rootdir)
        if binary is None:
            raise HarnessBroken(MISSING)
        with tempfile.TemporaryDirectory(prefix="kgbench-cli-") as tmp:
            cmd = self.base_command(binary, model, system) + ["--max-turns", "1"]
            stream = converse(cmd, cwd=Path(tmp), env=self.environment(max_tokens, timeout),
                              first=user_message({"type": "text", "text": text}),
                              deadline=time.monotonic() + timeout)
        sent: dict[str, Any] = {}
        self._record(sent, stream)
        if stream.timed_out:
            from pytest_kgbench.core.errors import TransientModelError

            raise TransientModelError(f"the CLI ran past {timeout:g} s")
        answer = self._read(stream, querying=False)
        return Completion(text=answer.text, tokens={"input": answer.tokens["input"],
                                                    "output": answer.tokens["output"]},
                          sent=sent)

    @staticmethod
    def _record(sent: dict[str, Any], stream: Stream) -> None:
        """What the CLI says it sent and was served: its version, each model message's id and
        model, the stop reason. (Claude Code's stream gives no HTTP request ids.)"""
        seen: dict[str, str | None] = {}
        for message in stream.assistant:
            if message.get("model") != "<synthetic>" and message.get("id"):
                seen.setdefault(str(message["id"]), message.get("model"))
        final = stream.results[-1] if stream.results else {}
        sent.update({
            "client": f"claude-code {(stream.init or {}).get('claude_code_version')}",
            "calls": [{"model": m, "message_id": i, "request_id": None}
                      for i, m in seen.items()],
            "stop_reason": "max_tokens" if CUT in str(final.get("result") or "")
            else final.get("stop_reason"),
            "session_id": final.get("session_id")})

    @staticmethod
    def _read(stream: Stream, querying: bool, tools: tuple[str, ...] = MCP_TOOLS) -> Answer:
        """The answer of a finished session. Querying, the MCP server must have connected
        offering exactly `tools` of ours (a schema arm without discovery offers run_query
        alone: a list_tables there would be a broken harness, not a model's choice)."""
        init, results = stream.init, stream.results
        if stream.rejected is not None:
            raise classify_status(stream.rejected.get("error_status"),
                                  str(stream.rejected.get("error") or "a rejected credential"))
        if init is None or not results:
            raise HarnessBroken(f"the CLI gave no init or result event (exit "
                                f"{stream.returncode}): {stream.stderr.strip()[-500:]}")
        if querying:
            servers = {s.get("name"): s.get("status") for s in init.get("mcp_servers") or []}
            offered = set(init.get("tools") or [])
            ours = {t for t in offered if t.startswith(f"mcp__{SERVER}__")}
            if servers.get(SERVER) != "connected" or ours != set(tools):
                raise HarnessBroken(f"the MCP server did not connect with its tools "
                                    f"({', '.join(tools)}): servers {servers}, tools "
                                    f"{sorted(offered)} (Claude Code "
                                    f"{init.get('claude_code_version')})")
        result = results[-1]
        usage = [r.get("usage") or {} for r in results]
        answer = Answer(
            text=str(result.get("result") or ""),
            rounds=len({m.get("id") for m in stream.assistant
                        if m.get("model") != "<synthetic>"}),
            tokens={"input": sum(int(u.get("input_tokens") or 0) for u in usage),
                    "output": sum(int(u.get("output_tokens") or 0) for u in usage),
                    "cache_read": sum(int(u.get("cache_read_input_tokens") or 0) for u in usage),
                    "cache_write": sum(int(u.get("cache_creation_input_tokens") or 0)
                                       for u in usage)})
        if result.get("stop_reason") == "refusal":  # the model's own: banked, never retried
            answer.text = _last_text(stream)
            answer.status = "refused"
            answer.error = ("the model refused to answer (stop_reason refusal): "
                            + str(result.get("result") or "").splitlines()[0][:300]
                            if result.get("result") else
                            "the model refused to answer (stop_reason refusal)")
        elif result.get("is_error"):
            message = str(result.get("result") or result.get("subtype") or "")
            if CUT in message:  # the CLI's own continuations were cut too
                answer.text = _last_text(stream)
                answer.status = "truncated"
                answer.error = f"the answer was cut at the output limit: {message}"
            elif result.get("subtype") == "error_max_turns":
                answer.text = _last_text(stream)  # it kept calling refused tools: no answer
            else:
                raise classify_status(result.get("api_error_status"), message)
        elif not answer.text.strip():
            # Claude Code itself asks once more when a reply has no visible output
            answer.status = "empty"
            answer.error = "the model's reply was empty (no text), after Claude Code asked again"
        answer.block = extract_block(answer.text)
        return answer

    @staticmethod
    def _calls(answer: Answer, log: Path) -> None:
        """The tool calls the MCP server logged, with the queries' full results."""
        if not log.is_file():
            return
        for line in log.read_text(encoding="utf-8").splitlines():
            call = json.loads(line)
            answer.tool_calls.append({k: call[k] for k in ("name", "input", "output")})
            if call.get("result"):
                answer.queries.append(QueryResult(**call["result"]))


def _last_text(stream: Stream) -> str:
    """The text the model wrote after its last tool call."""
    texts: list[str] = []
    for message in stream.assistant:
        if message.get("model") == "<synthetic>":
            continue
        for block in message.get("content") or []:
            if block.get("type") == "tool_use":
                texts = []
            elif block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
    return "".join(texts)


AGENTS = (ClaudeCliAgent,)
