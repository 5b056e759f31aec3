"""`kgbench mcp`: a pack's store under one condition, offered as an MCP server over stdio.

The same tools the Messages API loop offers (`asking/tools.py`): list_tables, describe,
run_query — or run_query alone under the schema arms without discovery (`Condition.tools`) —
through the same executor and guard. The claude-cli agent starts it for querying
conditions; any MCP client (a desktop assistant, say) can use it to explore a pack's data under a
condition. With `--log FILE`, every call is appended to FILE as one JSON line (the tool, its
input, what the model saw, and the query's result as the model saw it: capped, with the row
count — never every row), so a run can bank the queries a CLI session made.
With `--closed-when FILE`, every call made once FILE exists is refused with the
last-round message (the claude-cli agent creates it when the model's rounds are used up, so its
final turn answers from what it has, as the Messages API loop's does).

The wire is JSON-RPC 2.0, one message a line, read here before the MCP SDK sees it (`screen`):
a line that is not UTF-8 JSON text (truncated, a lone surrogate, nested past the parser) is
answered -32700; one that is not a valid message (no method, a bad id or params, a batch: MCP
sends one message a line) -32600, params by position -32602; a message over
MAX_MESSAGE_BYTES -32600, its bytes dropped as they come. The SDK's own stdio reader drops
them all unanswered, and holds a message of any size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_kgbench.asking.tools import TOOL_NAMES, TOOLS, call_tool
from pytest_kgbench.engines import QueryResult


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
        # a lone surrogate (a SPARQL \\ud800 escape, say) cannot be sent as UTF-8 JSON
        return text.encode("utf-8", "replace").decode("utf-8")

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


# many parameters: keyword-only: the command's options, one each
def serve(*, runtime: Any, pack: str, variant: str, condition: str, persona: str,
          log: Path | None, together: bool = False, questions: tuple[str, ...] = (),
          closed: Path | None = None, instructions: bool = True) -> None:
    """Open the condition's store and serve it over stdio until the client closes. Without
    `instructions` the server sends no description of the store (a client whose prompt
    already holds it, as the claude-cli agent's does)."""
    from pytest_kgbench.core.conditions import SCHEMA_ARMS, by_id
    from pytest_kgbench.core.errors import InputError

    cond = by_id(condition, runtime.registry)
    if cond.mode != "querying":
        raise InputError("--condition", f"'{condition}' is not a querying condition")
    built = runtime.built(pack, variant)
    executor = runtime.executor(built, cond, persona)
    described = instructions and SCHEMA_ARMS[cond.schema].described
    server = build_server(executor, instructions=executor.store_block() if described else "",
                          log=log, together=together or bool(questions), questions=questions,
                          closed=closed, offered=cond.tools)
    import anyio

    anyio.run(serve_stdio, server)


# --- the wire -------------------------------------------------------------------------------

MAX_MESSAGE_BYTES = 1 << 20  # a message (one line) past this is answered -32600, never held
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
BATCH = "batches are not supported: MCP sends one message a line"


def error_reply(code: int, message: str, ident: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response."""
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _ident(message: Any) -> Any:
    """The id to answer `message` with: its own where it is one (a string or an integer),
    else null, as JSON-RPC 2.0 says for a request whose id cannot be read."""
    ident = message.get("id") if isinstance(message, dict) else None
    return ident if isinstance(ident, str) or (isinstance(ident, int)
                                              and not isinstance(ident, bool)) else None


def screen(raw: bytes | None) -> tuple[str | None, str | None]:
    """One line of the wire (None: one past MAX_MESSAGE_BYTES, not kept) as (the reply to send
    at once, or None; the line to hand the MCP SDK, or None). Every line that is not a valid
    message gets its error reply here; a notification and a response get none (JSON-RPC)."""
    if raw is None:
        return json.dumps(error_reply(INVALID_REQUEST, f"Invalid Request: the message is over "
                                      f"{MAX_MESSAGE_BYTES:,} bytes")), None
    if not raw.strip():
        return None, None  # a blank line: no message at all
    try:
        text = raw.decode("utf-8")
        message = json.loads(text)
        text.encode("utf-8")  # a lone surrogate written as a \\u escape fails here
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeError is a ValueError
        return json.dumps(error_reply(PARSE_ERROR, "Parse error: the line is not UTF-8 JSON "
                                      "text")), None
    if isinstance(message, list):
        if not message:
            return json.dumps(error_reply(INVALID_REQUEST, f"Invalid Request: {BATCH}")), None
        replies = [error_reply(INVALID_REQUEST, f"Invalid Request: {BATCH}", _ident(m))
                   for m in message if not (isinstance(m, dict) and "method" in m
                                            and "id" not in m)]
        return (json.dumps(replies) if replies else None), None
    from mcp_types import jsonrpc_message_adapter

    code, why = _invalid(message)
    if why is None:
        try:
            jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValueError as exc:  # pydantic's ValidationError
            why = f"not a message MCP reads ({str(exc).splitlines()[0][:120]})"
    if why is None:
        return None, text
    if isinstance(message, dict) and "method" in message and "id" not in message:
        return None, None  # a notification, even an invalid one, is never answered
    what = "Invalid params" if code == INVALID_PARAMS else "Invalid Request"
    return json.dumps(error_reply(code, f"{what}: {why}", _ident(message))), None


def _invalid(message: Any) -> tuple[int, str | None]:
    """The error code and why `message` is not a JSON-RPC 2.0 request, notification or
    response as MCP has them, or (INVALID_REQUEST, None) (the SDK's own validation follows).
    Params by position (an array) are JSON-RPC's but no MCP method's: invalid params."""
    if not isinstance(message, dict):
        return INVALID_REQUEST, f"a message is a JSON object, not {type(message).__name__}"
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, '"jsonrpc" must be "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str):
            return INVALID_REQUEST, '"method" must be a string'
        if "id" in message and _ident(message) is None:
            return INVALID_REQUEST, '"id" must be a string or an integer (MCP: never null)'
        if isinstance(message.get("params"), list):
            return INVALID_PARAMS, "MCP's params are named (an object), never by position"
        if "params" in message and not isinstance(message["params"], dict):
            return INVALID_REQUEST, '"params" must be an object'
        return INVALID_REQUEST, None
    if "id" not in message or not ("result" in message or "error" in message):
        return INVALID_REQUEST, ('a request needs "method" (a response, "id" and "result" or '
                                 '"error")')
    return INVALID_REQUEST, None


def split_lines(chunks: Iterator[bytes], limit: int = MAX_MESSAGE_BYTES
                ) -> Iterator[bytes | None]:
    """The lines of a byte stream (without their line ends), a line past `limit` bytes as None
    and its bytes dropped as they come: what is held never passes `limit` and a chunk."""
    held = bytearray()
    over = False
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not over:
                held += piece
                if len(held) > limit:
                    over = True
                    held.clear()
            if end < 0:
                break
            yield None if over else bytes(held).rstrip(b"\r")
            held.clear()
            over = False
            start = end + 1
    if over:
        yield None
    elif held:
        yield bytes(held)


class _Out:
    """The wire's writing end, shared by the SDK's writer and `screen`'s replies: one whole
    line at a time, in a thread (a client slow to read never stalls the event loop)."""

    def __init__(self, fd: int) -> None:
        import anyio

        self.fd = fd
        self.lock = anyio.Lock()

    async def write(self, text: str) -> None:
        import anyio

        data = text.encode("utf-8", "replace")
        async with self.lock:
            await anyio.to_thread.run_sync(_write_all, self.fd, data)

    async def flush(self) -> None:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _Lines:
    """The wire's reading end as the SDK's stdio reader takes it (an async iterator of lines):
    only the lines `screen` lets through; the others are answered on `out` here."""

    def __init__(self, fd: int, out: _Out) -> None:
        self.fd = fd
        self.out = out
        self.lines = split_lines(iter(lambda: os.read(fd, 1 << 16), b""))

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        import anyio

        while True:
            more, raw = await anyio.to_thread.run_sync(_next_line, self.lines,
                                                       abandon_on_cancel=True)
            if not more:
                raise StopAsyncIteration
            reply, line = screen(raw)
            if reply is not None:
                await self.out.write(reply + "\n")
            if line is not None:
                return line


def _next_line(lines: Iterator[bytes | None]) -> tuple[bool, bytes | None]:
    """(False, None) at the end of the wire, else (True, the next line)."""
    for line in lines:
        return True, line
    return False, None


@contextmanager
def _wire() -> Iterator[tuple[int, int]]:
    """The process's stdin and stdout as private descriptors, fd 0 on the null device and fd 1
    on stderr meanwhile (a stray print never reaches the wire); restored at the end."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for fd in (null, wire_in, wire_out):
            os.close(fd)


async def serve_stdio(server: Any) -> None:
    """`server` (an MCPServer) over this process's stdin and stdout, through `screen`: as
    MCPServer.run_stdio_async serves it, with the SDK's stdio transport given our streams."""
    from mcp.server.stdio import stdio_server

    with _wire() as (wire_in, wire_out):
        out = _Out(wire_out)
        streams: Any = (_Lines(wire_in, out), out)  # duck-typed as the SDK's AsyncFile[str]
        async with stdio_server(stdin=streams[0], stdout=streams[1]) as (read, write):
            lowlevel = server._lowlevel_server  # what run_stdio_async runs
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
