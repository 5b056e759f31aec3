"""A fake Messages API: a real HTTP server on 127.0.0.1, scripted per test.

It speaks enough of the Anthropic Messages API for the real SDK and the real Claude Code CLI:
POST /v1/messages answered as plain JSON, or as server-sent events when the request asks to
stream; error statuses with the API's error body and retry-after headers; a stall (before the
reply, or mid-stream); a reply that trickles a byte at a time; a malformed body; an answer cut
at max_tokens; a refusal (stop_reason "refusal"); an empty reply (content []); a prompt too long
for the model's window. Each request takes the next scripted step; when the script is empty,
`default` answers. Requests from the judge (its system prompt) are answered by `judge` when it
is set, so a test can fail the judge alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fake_server import FakeServer, Step


def text(body: str, *, input_tokens: int = 100, output_tokens: int = 20) -> Step:
    """A final answer."""
    return {"kind": "message", "content": [{"type": "text", "text": body}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def tool_use(name: str, arguments: dict[str, Any], *, id: str | None = None) -> Step:
    """One tool call."""
    return {"kind": "message", "stop_reason": "tool_use",
            "content": [{"type": "text", "text": f"Calling {name}."},
                        {"type": "tool_use", "id": id or f"toolu_{name}_{time.monotonic_ns()}",
                         "name": name, "input": arguments}],
            "usage": {"input_tokens": 100, "output_tokens": 10}}


def status(code: int, *, retry_after_ms: int | None = 5, kind: str = "api_error") -> Step:
    """An error status with the API's error body."""
    headers = {"retry-after-ms": str(retry_after_ms)} if retry_after_ms is not None else {}
    return {"kind": "status", "status": code, "headers": headers,
            "body": {"type": "error", "error": {"type": kind, "message": f"scripted {code}"}}}


def truncated(body: str = "The answer is cut off here because the output", *,
              output_tokens: int = 1000) -> Step:
    """An answer the model stopped at max_tokens (stop_reason "max_tokens")."""
    return {"kind": "message", "content": [{"type": "text", "text": body}],
            "stop_reason": "max_tokens",
            "usage": {"input_tokens": 100, "output_tokens": output_tokens}}


def refusal(partial: str = "") -> Step:
    """The API's policy refusal: stop_reason "refusal", with what the model had written."""
    return {"kind": "message", "stop_reason": "refusal",
            "content": [{"type": "text", "text": partial}] if partial else [],
            "usage": {"input_tokens": 100, "output_tokens": 2}}


def empty() -> Step:
    """A reply with nothing in it: content [] and stop_reason end_turn."""
    return {"kind": "message", "content": [], "stop_reason": "end_turn",
            "usage": {"input_tokens": 100, "output_tokens": 0}}


def too_long(tokens: int = 221_000, window: int = 200_000) -> Step:
    """The API's 400 for a prompt longer than the model's context window."""
    step = status(400, retry_after_ms=None, kind="invalid_request_error")
    step["body"]["error"]["message"] = f"prompt is too long: {tokens} tokens > {window} maximum"
    return step


def bad_request(message: str = "messages.0.content: unexpected field") -> Step:
    """Any other 400: a request the API refuses as malformed."""
    step = status(400, retry_after_ms=None, kind="invalid_request_error")
    step["body"]["error"]["message"] = message
    return step


def stall(seconds: float) -> Step:
    """Nothing at all for `seconds`, then an answer (too late, as a rule)."""
    return {"kind": "stall", "seconds": seconds}


def stall_stream(seconds: float) -> Step:
    """A streamed reply that starts (headers, message_start) and then stalls for `seconds`; a
    plain JSON request stalls before its headers as `stall` does."""
    return {"kind": "stall_stream", "seconds": seconds}


JUDGE_MARK = "You grade one answer against a checklist"


def is_judge(body: dict[str, Any]) -> bool:
    """Whether a request comes from the judge (its system prompt)."""
    return JUDGE_MARK in json.dumps(body.get("system") or "")


def malformed() -> Step:
    return {"kind": "malformed"}


def trickle(step: Step, every: float = 0.1) -> Step:
    """`step`'s reply (a message) sent as a slow server or proxy may: the headers at once,
    then the JSON body one byte every `every` seconds."""
    return {"kind": "trickle", "step": step, "every": every}


class FakeMessagesAPI(FakeServer):
    """Start with `with FakeMessagesAPI() as api:`; `api.url` is the base URL."""

    def __init__(self, default: Callable[[dict[str, Any]], Step] | None = None) -> None:
        super().__init__(default or (lambda request: text("I do not know.\n```json\n{}\n```")),
                         is_judge)

    def post(self, handler: Any, raw: bytes) -> None:
        body = json.loads(raw or b"{}")
        if handler.path.rstrip("/").endswith("/v1/messages/batches"):
            handler._send(200, self._create_batch(body))
        else:
            self.answer(handler, body, raw)

    def get(self, handler: Any, parts: list[str]) -> None:
        if "batches" in parts:
            at = parts.index("batches") + 1
            batch_id = parts[at] if len(parts) > at else ""
            if batch_id in self.batches:
                if parts[-1] == "results":
                    handler._send(200, None, raw=self._results(batch_id),
                                  headers={"content-type": "application/binary"})
                else:
                    handler._send(200, self._look(batch_id, handler))
                return
        handler._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                       "message": handler.path}})

    # --- the Message Batches API --------------------------------------------------------------

    def _create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.batches_created += 1
            batch_id = f"msgbatch_{self.batches_created:03d}_{time.monotonic_ns()}"
            self.batches[batch_id] = {"requests": list(body.get("requests") or []), "looks": 0,
                                      "created": time.time()}
        return self._batch_object(batch_id, ended=False)

    def _batch_object(self, batch_id: str, *, ended: bool, base: str = "") -> dict[str, Any]:
        batch = self.batches[batch_id]
        n = len(batch["requests"])
        stamp = "2026-12-01T00:00:00Z"
        return {"id": batch_id, "type": "message_batch",
                "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else n,
                                   "succeeded": n if ended else 0, "errored": 0,
                                   "canceled": 0, "expired": 0},
                "ended_at": stamp if ended else None, "created_at": stamp,
                "expires_at": "2026-12-02T00:00:00Z", "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{base}/v1/messages/batches/{batch_id}/results" if ended
                else None}

    def _look(self, batch_id: str, handler: Any) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            batch["looks"] += 1
            ended = batch["looks"] > self.batch_polls
        return self._batch_object(batch_id, ended=ended, base=self.url)

    def _results(self, batch_id: str) -> bytes:
        """The batch's results as JSONL, answered once (a second download sends the same)."""
        batch = self.batches[batch_id]
        if "results" not in batch:
            batch["results"] = self._answer_batch(batch)
        data = batch["results"]
        with self._lock:
            cut = self.batch_truncate > 0
            self.batch_truncate -= 1 if cut else 0
        if cut:  # the stream stops in the middle of its first line
            data = data[:max(1, data.index(b"\n") // 2)]
        return data

    def _answer_batch(self, batch: dict[str, Any]) -> bytes:
        lines = []
        for request in batch["requests"]:
            params = request["params"]
            error = self.batch_error(params)
            if self.batch_expire(params):
                result: dict[str, Any] = {"type": "expired"}
            elif error is not None:
                result = {"type": "errored", "error": {"type": "error", "error": error}}
            else:
                with self._lock:
                    self.requests.append({"path": "batch", "body": params, "headers": {}})
                    step = self.next_step(params)
                result = {"type": "succeeded", "message": self._message(step, params)}
            lines.append(json.dumps({"custom_id": request["custom_id"], "result": result}))
        return ("\n".join(lines) + "\n").encode()

    # --- replies ------------------------------------------------------------------------------

    @staticmethod
    def _message(step: Step, request: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
                "model": request.get("model", "fake"), "content": step["content"],
                "stop_reason": step["stop_reason"], "stop_sequence": None,
                "usage": {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                          **step["usage"]}}

    def _reply(self, handler: Any, step: Step, request: dict[str, Any]) -> None:
        kind = step["kind"]
        if kind == "stall" or (kind == "stall_stream" and not request.get("stream")):
            time.sleep(step["seconds"])
            step = text("too late")
            kind = "message"
        if kind == "stall_stream":
            self._stalled_stream(handler, request, step["seconds"])
            return
        if kind == "status":
            handler._send(step["status"], step["body"], step.get("headers"))
            return
        if kind == "malformed":
            handler._send(200, None, raw=b'{"id": "msg_1", "type": "message", "content": [')
            return
        if kind == "trickle":
            data = json.dumps(self._message(step["step"], request)).encode()
            self.trickle(handler, data, step["every"])
            return
        message = self._message(step, request)
        if request.get("stream"):
            self._stream(handler, message)
        else:
            handler._send(200, message)

    @staticmethod
    def _stalled_stream(handler: Any, request: dict[str, Any], seconds: float) -> None:
        start = {"id": f"msg_{time.monotonic_ns()}", "type": "message", "role": "assistant",
                 "model": request.get("model", "fake"), "content": [], "stop_reason": None,
                 "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 1}}
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.end_headers()
        first = json.dumps({"type": "message_start", "message": start})
        try:
            handler.wfile.write(f"event: message_start\ndata: {first}\n\n".encode())
            handler.wfile.flush()
            time.sleep(seconds)
        except OSError:  # the client gave up first
            pass
        handler.close_connection = True

    @staticmethod
    def _stream(handler: Any, message: dict[str, Any]) -> None:
        events: list[tuple[str, dict[str, Any]]] = []
        start = dict(message, content=[], stop_reason=None,
                     usage=dict(message["usage"], output_tokens=1))
        events.append(("message_start", {"type": "message_start", "message": start}))
        for i, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(("content_block_start", {
                    "type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta",
                                                                 "text": block["text"]}}))
            else:
                events.append(("content_block_start", {
                    "type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": block["id"],
                                      "name": block["name"], "input": {}}}))
                events.append(("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta",
                              "partial_json": json.dumps(block["input"])}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": message["stop_reason"],
                                                   "stop_sequence": None},
                                         "usage": {"output_tokens":
                                                   message["usage"]["output_tokens"]}}))
        events.append(("message_stop", {"type": "message_stop"}))
        data = "".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n"
                       for name, payload in events).encode()
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("content-length", str(len(data)))
        handler.send_header("request-id", f"req_{time.monotonic_ns()}")
        handler.end_headers()
        handler.wfile.write(data)
