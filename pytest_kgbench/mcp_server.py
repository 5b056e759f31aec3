"""`kgbench mcp`: a pack's store under one condition, offered as an MCP server over stdio.

The same tools the Messages API loop offers (`tools.py`): list_tables, describe,
run_query — or run_query alone under the schema arms without discovery (`Condition.tools`) —
through the same executor and guard. The claude-cli agent starts it for querying
conditions; any MCP client (a desktop assistant, say) can use it to explore a pack's data under a
condition. With `--log FILE`, every call is appended to FILE as one JSON line (the tool, its
input, what the model saw, and the query's result as the model saw it: capped, with the row
count — never every row), so a run can bank the queries a CLI session made.
With `--closed-when FILE`, every call made once FILE exists is refused with the
last-round message (the claude-cli agent creates it when the model's rounds are used up, so its
final turn answers from what it has, as the Messages API loop's does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_kgbench.executors import QueryResult
from pytest_kgbench.tools import TOOL_NAMES, TOOLS, call_tool


def log_line(name: str, arguments: dict[str, Any], text: str,
             result: QueryResult | None) -> str:
    """One tool call as the --log file keeps it (the result is already capped at its source)."""
    return json.dumps({"name": name, "input": arguments, "output": text[:4000],
                       "result": result.to_dict() if result else None}) + "\n"


def build_server(executor: Any, *, instructions: str, log: Path | None = None,
                 together: bool = False, questions: tuple[str, ...] = (),
                 closed: Path | None = None, offered: tuple[str, ...] = TOOL_NAMES) -> Any:
    """An MCPServer whose tools call `executor`: those of `offered` (the condition's
    `Condition.tools`). With `together`, run_query also takes the id of the question a query
    serves (tools.tools_for); with `questions`, it must be one of them. Once the file `closed`
    exists, every call is refused: the rounds are used up."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name="kgbench", instructions=instructions)
    descriptions = {t["name"]: t["description"] for t in TOOLS}

    def call(name: str, arguments: dict[str, Any]) -> str:
        if closed is not None and closed.exists():
            from pytest_kgbench.agents import LAST_ROUND

            return f"REFUSED: no rounds of tools are left. {LAST_ROUND}"
        text, result = call_tool(executor, name, arguments, questions=questions,
                                 offered=offered)
        if log is not None:
            with log.open("a", encoding="utf-8") as fh:
                fh.write(log_line(name, arguments, text, result))
        return text

    if "list_tables" in offered:
        @server.tool(name="list_tables", description=descriptions["list_tables"])
        def list_tables() -> str:
            return call("list_tables", {})

    if "describe" in offered:
        @server.tool(name="describe", description=descriptions["describe"])
        def describe(name: str) -> str:
            return call("describe", {"name": name})

    if together:
        @server.tool(name="run_query", description=descriptions["run_query"]
                     + " Give as 'question' the id of the question the query serves (e.g. Q07).")
        def run_query_for(query: str, question: str) -> str:
            return call("run_query", {"query": query, "question": question})
    else:
        @server.tool(name="run_query", description=descriptions["run_query"])
        def run_query(query: str) -> str:
            return call("run_query", {"query": query})

    return server


def serve(*, runtime: Any, pack: str, variant: str, condition: str, persona: str,
          log: Path | None, together: bool = False, questions: tuple[str, ...] = (),
          closed: Path | None = None, instructions: bool = True) -> None:
    """Open the condition's store and serve it over stdio until the client closes. Without
    `instructions` the server sends no description of the store (a client whose prompt
    already holds it, as the claude-cli agent's does)."""
    from pytest_kgbench.conditions import SCHEMA_ARMS, by_id
    from pytest_kgbench.errors import InputError

    cond = by_id(condition)
    if cond.mode != "querying":
        raise InputError("--condition", f"'{condition}' is not a querying condition")
    built = runtime.built(pack, variant)
    executor = runtime.executor(built, cond, persona)
    described = instructions and SCHEMA_ARMS[cond.schema].described
    server = build_server(executor, instructions=executor.store_block() if described else "",
                          log=log, together=together or bool(questions), questions=questions,
                          closed=closed, offered=cond.tools)
    server.run("stdio")
