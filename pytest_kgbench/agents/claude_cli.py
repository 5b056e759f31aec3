"""`claude-cli`: Claude Code in print mode (`claude -p`), as a person connecting a client of their
own to the store would use it: somebody else's loop over our tools.

Each item runs from an empty temporary directory with every built-in tool disabled. For querying
conditions the store is offered as an MCP server (`kgbench mcp`, stdio); the session's init
event must list that server as connected with its three tools, or the harness is broken and the
run halts — a client that silently lost its tools would otherwise score as a weak model. The
MCP server logs every call, so the item banks the queries the session ran, with their results.

The binary is `claude` on PATH, `.tools/node_modules/.bin/claude` under the repository, or the
path in KGBENCH_CLAUDE. It reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL like the SDK.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.answers import Answer, extract_block
from pytest_kgbench.errors import HarnessBroken, TransientModelError
from pytest_kgbench.executors import QueryResult
from pytest_kgbench.settings import check_models
from pytest_kgbench.tools import TOOL_NAMES

if TYPE_CHECKING:
    from pytest_kgbench.settings import Settings

SERVER = "kgbench"
MCP_TOOLS = tuple(f"mcp__{SERVER}__{name}" for name in TOOL_NAMES)
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_ERROR_REPORTING": "1",
         # print mode reports stdio MCP servers as "pending" at init and never refreshes unless
         # told to wait for them (a regression of Claude Code since 2.1.162)
         "MCP_CONNECTION_NONBLOCKING": "false"}


MISSING = ("the claude CLI was not found (PATH, .tools/node_modules/.bin, KGBENCH_CLAUDE); "
           "install it: npm install --prefix .tools @anthropic-ai/claude-code")


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


def mcp_command(settings: Settings, task: Task, log: Path) -> dict[str, Any]:
    """The MCP server entry for this item's store."""
    args = ["-m", "pytest_kgbench.cli", "mcp", "--pack", task.question.pack,
            "--variant", task.built.variant, "--condition", task.condition.id,
            "--persona", task.question.persona, "--root", settings.rootdir,
            "--datasets", settings.datasets_dir, "--ontology", settings.ontology_dir,
            "--cache", settings.cache_dir,
            "--query-timeout", str(settings.query_timeout), "--log", str(log)]
    for language, engine in settings.engines.items():
        args += [f"--{language}-engine", engine]
    if settings.dataset_seed is not None:
        args += ["--seed", str(settings.dataset_seed)]
    if task.together:
        args += ["--together", "--questions", ",".join(task.together)]
    return {"mcpServers": {SERVER: {"command": sys.executable, "args": args}}}


class ClaudeCliAgent(BaseAgent):
    name = "claude-cli"
    kind = "model"
    asks_together = True  # answers a together session in one conversation
    judged = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.item_timeout = settings.item_timeout

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        check_models(settings)
        if asking and find_claude(settings.rootdir) is None:
            return MISSING
        return None

    def ask(self, task: Task) -> Answer:
        binary = find_claude(self.settings.rootdir)
        if binary is None:
            raise HarnessBroken(MISSING)
        querying = task.condition.mode == "querying"
        with tempfile.TemporaryDirectory(prefix="kgbench-cli-") as tmp:
            workdir = Path(tmp) / "work"
            workdir.mkdir()
            log = Path(tmp) / "tools.jsonl"
            cmd = [binary, "-p", "--output-format", "stream-json", "--verbose",
                   "--model", self.settings.model_id(task.model),
                   "--system-prompt", task.prompt.system, "--no-session-persistence",
                   "--tools", ""]
            if querying:
                cmd += ["--mcp-config", json.dumps(mcp_command(self.settings, task, log)),
                        "--strict-mcp-config", "--allowedTools", *MCP_TOOLS,
                        "--max-turns", str(self.settings.max_rounds * task.share + 1)]
            else:
                cmd += ["--max-turns", "1"]
            start = time.monotonic()
            try:
                done = subprocess.run(cmd, cwd=workdir, input=f"{task.prompt.context}\n\n"
                                      f"{task.prompt.question}", capture_output=True, text=True,
                                      timeout=self.item_timeout * task.share,
                                      env={**os.environ, **QUIET})
            except subprocess.TimeoutExpired:
                answer = Answer(status="timeout", error="the CLI ran past --item-timeout")
                answer.latency_s = round(time.monotonic() - start, 4)
                self._calls(answer, log)
                return answer
            answer = self._read(done, querying)
            answer.latency_s = round(time.monotonic() - start, 4)
            self._calls(answer, log)
        return answer

    @staticmethod
    def _read(done: subprocess.CompletedProcess[str], querying: bool) -> Answer:
        events = []
        for line in done.stdout.splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        init = next((e for e in events if e.get("type") == "system"
                     and e.get("subtype") == "init"), None)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        if init is None or result is None:
            raise HarnessBroken(f"the CLI gave no init or result event (exit {done.returncode}): "
                                f"{done.stderr.strip()[-500:]}")
        if querying:
            servers = {s.get("name"): s.get("status") for s in init.get("mcp_servers") or []}
            tools = set(init.get("tools") or [])
            if servers.get(SERVER) != "connected" or not set(MCP_TOOLS) <= tools:
                raise HarnessBroken(f"the MCP server did not connect with its tools: servers "
                                    f"{servers}, tools {sorted(tools)}")
        status = result.get("api_error_status")
        if result.get("is_error") and status in (401, 403):
            raise HarnessBroken(f"the API rejected the credential ({status}): "
                                f"{result.get('result')}")
        if result.get("is_error") and (status in (408, 429, 529) or (status or 0) >= 500):
            raise TransientModelError(f"the CLI's API call failed ({status}) after its retries")
        usage = result.get("usage") or {}
        answer = Answer(
            text=str(result.get("result") or ""), rounds=int(result.get("num_turns") or 0),
            tokens={"input": int(usage.get("input_tokens") or 0),
                    "output": int(usage.get("output_tokens") or 0),
                    "cache_read": int(usage.get("cache_read_input_tokens") or 0),
                    "cache_write": int(usage.get("cache_creation_input_tokens") or 0)})
        if result.get("is_error"):
            answer.status = "error"
            answer.error = f"{result.get('subtype')}: {result.get('result')}"
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


AGENTS = (ClaudeCliAgent,)
