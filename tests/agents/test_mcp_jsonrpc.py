"""`kgbench mcp` speaks JSON-RPC 2.0 to the letter, as a real subprocess over stdio: every
request gets exactly one well-formed reply (-32700 for a line that is not UTF-8 JSON text,
-32600 for one that is not a valid message, the result otherwise), a notification and a
response get none, the server stays up, and its memory stays bounded whatever a line holds
(a message over the cap is answered without being held). hypothesis sends valid and malformed
messages side by side; the expected replies are worked out here from the JSON-RPC rules,
never from the server's own screening."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO

EXAMPLES = int(os.environ.get("KGBENCH_MCP_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
REPLY_WAIT = 120.0  # seconds a reply is waited for: a bound on a hang, not a timing claim
CODES = {-32700, -32600, -32601, -32602, -32603}
MIB = 1 << 20


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


class Wire:
    """`kgbench mcp` as a subprocess; raw lines in, reply lines out."""

    def __init__(self, kg_cache: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pytest_kgbench.cli", "mcp", "--pack", "credit",
             "--condition", "D4", "--root", str(REPO), "--cache", str(kg_cache),
             "--query-timeout", "10"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buf = b""
        self.n = 0

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def line(self, wait: float = REPLY_WAIT) -> bytes:
        assert self.proc.stdout is not None
        end = time.monotonic() + wait
        while b"\n" not in self.buf:
            left = max(0.0, end - time.monotonic())
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                raise AssertionError(f"no reply within {wait:g} s (server alive: "
                                     f"{self.proc.poll() is None})")
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise AssertionError(f"the server closed its stdout (exit {self.proc.poll()})")
            self.buf += chunk
        out, _, self.buf = self.buf.partition(b"\n")
        return out

    def exchange(self, data: bytes, expected: int) -> list[Any]:
        """Send `data` (one line or several), then a ping of our own; read until the ping's
        reply and `expected` other replies are in (replies to requests run concurrently
        may come in any order). A reply past those shows up at the next exchange."""
        self.n += 1
        sentinel = f"sentinel-{self.n}"
        self.send(data + json.dumps({"jsonrpc": "2.0", "id": sentinel,
                                     "method": "ping"}).encode() + b"\n")
        replies: list[Any] = []
        seen_sentinel = False
        while not seen_sentinel or len(replies) < expected:
            raw = self.line()
            reply = json.loads(raw)  # every reply is JSON text
            if isinstance(reply, dict) and reply.get("id") == sentinel:
                assert reply.get("result") == {}, reply
                seen_sentinel = True
            else:
                replies.append(reply)
            assert len(replies) <= expected, (data[:300], replies)
        return replies

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def wire(kg_cache, credit_base) -> Iterator[Wire]:
    server = Wire(kg_cache)
    init = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "fuzz", "version": "1"}}}
    server.send(json.dumps(init).encode() + b"\n")
    reply = json.loads(server.line(wait=600.0))  # the store is opened first
    assert reply["id"] == "init" and "result" in reply, reply
    server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    yield server
    server.close()


def well_formed(reply: Any, ident: Any) -> None:
    """A JSON-RPC 2.0 response to a request whose id is `ident` (None: unreadable)."""
    assert isinstance(reply, dict) and reply.get("jsonrpc") == "2.0", reply
    assert reply.get("id") == ident, (reply, ident)
    assert ("result" in reply) != ("error" in reply), reply
    if "error" in reply:
        error = reply["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
        assert error["code"] in CODES, reply


# --- what a message is, by JSON-RPC 2.0 (not by the server's code) -----------------------------

def valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def replies_due(message: Any) -> tuple[int, Any]:
    """How many reply lines one decoded message is owed, and the id the reply carries."""
    if isinstance(message, list):
        if not message:
            return 1, None
        owed = [m for m in message if not (isinstance(m, dict) and "method" in m
                                           and "id" not in m)]
        return (1 if owed else 0), None
    if isinstance(message, dict) and "method" in message and "id" not in message:
        return 0, None  # a notification
    if (isinstance(message, dict) and "method" not in message and valid_id(message.get("id"))
            and message.get("jsonrpc") == "2.0"
            and (("result" in message) != ("error" in message))):
        return 0, None  # a response from the client: not answered
    ident = message.get("id") if isinstance(message, dict) else None
    return 1, ident if valid_id(ident) else None


SPARQL = st.sampled_from([
    "SELECT ?s WHERE { ?s ?p ?o } LIMIT 3", "ASK { ?s ?p ?o }", "SELECT * WHERE {",
    "SELECT ?x WHERE { ?x a ?c } LIMIT 2", "DROP ALL", "SELECT ?s WHERE { SERVICE <x:y> {} }",
    'SELECT ("\\ud800" AS ?x) WHERE {}', "", "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"])
TEXT = st.text(max_size=40)
IDS = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=12))


STR_ID, INT_ID = "qid-mark", 987_654_321  # each example's ids, made unique as it is sent


@st.composite
def valid_requests(draw: Any) -> dict[str, Any]:
    ident = draw(st.sampled_from([STR_ID, INT_ID]))
    method, params = draw(st.sampled_from([
        ("ping", None), ("tools/list", {}),
        ("tools/call", {"name": "list_tables", "arguments": {}}),
        ("tools/call", {"name": "describe", "arguments": {"name": "cr:Issuer"}}),
        ("tools/call", {"name": "run_query", "arguments": {"query": "<q>"}}),
        ("tools/call", {"name": "nope", "arguments": {}}),
        ("resources/list", {}), ("no/such/method", {})]))
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        if method == "tools/call" and params["name"] == "run_query":
            params = {"name": "run_query", "arguments": {"query": draw(SPARQL | TEXT)}}
        elif method == "tools/call" and params["name"] == "describe":
            params = {"name": "describe", "arguments": {"name": draw(TEXT)}}
        message["params"] = params
    return message


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(
                           st.text(max_size=6), c, max_size=3), max_leaves=8)


@st.composite
def lines(draw: Any) -> bytes:
    """One line: a valid request, a notification, a response, or a malformed one."""
    request = draw(valid_requests())
    kind = draw(st.sampled_from([
        "valid", "notification", "response", "garbage", "truncated", "batch", "no_method",
        "bad_version", "bad_id", "bad_params", "surrogate", "not_object", "deep", "blank",
        "random_object"]))
    if kind == "valid":
        return json.dumps(request).encode()
    if kind == "notification":
        return json.dumps({"jsonrpc": "2.0", "method": draw(st.sampled_from(
            ["notifications/cancelled", "notifications/whatever"])),
            "params": {"requestId": "none", "reason": draw(TEXT)}}).encode()
    if kind == "response":
        return json.dumps({"jsonrpc": "2.0", "id": draw(IDS), "result": {}}).encode()
    if kind == "garbage":
        return draw(st.binary(max_size=60)).replace(b"\n", b" ")
    if kind == "truncated":
        text = json.dumps(request).encode()
        return text[:draw(st.integers(1, len(text) - 1))]
    if kind == "batch":
        return json.dumps(draw(st.lists(st.just(request) | st.just(
            {"jsonrpc": "2.0", "method": "notifications/x"}), max_size=3))).encode()
    if kind == "no_method":
        return json.dumps({k: v for k, v in request.items() if k != "method"}).encode()
    if kind == "bad_version":
        return json.dumps({**request, "jsonrpc": draw(st.sampled_from(["1.0", 2, None]))}
                          ).encode()
    if kind == "bad_id":
        return json.dumps({**request, "id": draw(st.sampled_from([None, 1.5, True, [1],
                                                                   {"a": 1}]))}).encode()
    if kind == "bad_params":
        return json.dumps({**request, "params": draw(st.sampled_from([5, "x", [], [1, 2],
                                                                       True]))}).encode()
    if kind == "surrogate":
        text = json.dumps(request)
        cut = draw(st.integers(0, len(text)))
        return json.dumps({**request, "extra": "\ud800"}).encode() if cut % 2 else \
            (text[:-1] + ', "x": "\\udc00"}').encode()
    if kind == "not_object":
        return json.dumps(draw(st.none() | st.integers() | st.text(max_size=5))).encode()
    if kind == "deep":
        depth = draw(st.integers(1_000, 200_000))
        return b"[" * depth + b"]" * depth
    if kind == "blank":
        return b" " * draw(st.integers(0, 3))
    return json.dumps(draw(st.dictionaries(st.text(max_size=8), JSONISH, max_size=4))).encode()


def expected_of(line: bytes) -> tuple[int, Any]:
    if not line.strip():
        return 0, None
    try:
        text = line.decode("utf-8")
        message = json.loads(text)
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):
        return 1, None  # not JSON text: a parse error, id null
    return replies_due(message)


@FUZZ
@given(data=st.data())
def test_every_line_gets_its_replies_and_the_server_stays_up(wire: Wire, data: Any) -> None:
    n = wire.n + 1
    line = data.draw(lines()).replace(STR_ID.encode(), f"q{n}".encode()).replace(
        str(INT_ID).encode(), str(INT_ID + n).encode())
    due, ident = expected_of(line)
    replies = wire.exchange(line + b"\n", due)
    assert len(replies) == due
    for reply in replies:
        if isinstance(reply, list):  # a batch's answer: one error per element owed one
            assert reply and all(isinstance(r, dict) for r in reply)
            for r in reply:
                well_formed(r, r.get("id"))
                assert r["error"]["code"] == -32600
        else:
            well_formed(reply, ident)
    assert wire.proc.poll() is None


def test_a_message_over_the_cap_is_answered_without_being_held(wire: Wire) -> None:
    """200 MiB on one line (a JSON string that never ends, sent a MiB at a time): one -32600,
    the server's peak memory grows by far less than the message, and the next request works.
    The bound is what the server held before it plus 64 MiB: the message's cap (1 MiB) and
    the chunks in flight, with room for the allocator."""
    pid = wire.proc.pid
    before = rss_kib(pid, "VmHWM")
    chunk = b"x" * MIB
    wire.send(b'{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"run_query",'
              b'"arguments":{"query":"')
    for _ in range(200):
        wire.send(chunk)
    replies = wire.exchange(b'"}}}\n', 1)
    assert replies[0]["error"]["code"] == -32600 and replies[0]["id"] is None, replies
    assert "over" in replies[0]["error"]["message"]
    peak = rss_kib(pid, "VmHWM")
    assert peak - before < 64 * 1024, (before, peak)
    assert wire.exchange(json.dumps({"jsonrpc": "2.0", "id": "after", "method": "tools/list"}
                                    ).encode() + b"\n", 1)[0]["id"] == "after"


@pytest.mark.parametrize("line,code,ident", [
    (b"not json", -32700, None),
    (b'{"jsonrpc":"2.0","id":5,"method":"ping"', -32700, None),  # truncated
    (b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"x":"\\ud800"}}', -32700, None),
    (b"\xff\xfe", -32700, None),
    (b"[]", -32600, None),
    (b'{"jsonrpc":"2.0","id":7}', -32600, 7),  # no method
    (b'{"jsonrpc":"1.0","id":10,"method":"ping"}', -32600, 10),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":5}', -32600, 13),
    (b'{"jsonrpc":"2.0","id":14,"method":"ping","params":[]}', -32602, 14),
    (b'"str"', -32600, None)])
def test_the_issue_s_lines_each_get_their_error(wire: Wire, line: bytes, code: int,
                                                 ident: Any) -> None:
    replies = wire.exchange(line + b"\n", 1)
    well_formed(replies[0], ident)
    assert replies[0]["error"]["code"] == code


def test_a_batch_is_answered_with_one_error_per_request_in_it(wire: Wire) -> None:
    batch = [{"jsonrpc": "2.0", "id": "b1", "method": "ping"},
             {"jsonrpc": "2.0", "method": "notifications/x"},
             {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"}]
    replies = wire.exchange(json.dumps(batch).encode() + b"\n", 1)
    assert [r["id"] for r in replies[0]] == ["b1", "b2"]
    assert {r["error"]["code"] for r in replies[0]} == {-32600}
