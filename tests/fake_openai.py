"""A fake OpenAI-compatible Chat Completions API: a real HTTP server on 127.0.0.1, scripted per
test, for the real `openai` SDK.

POST /v1/chat/completions (or /chat/completions, as a base URL without /v1 gives) answered as
OpenAI does: a completion with tool calls or with text, `finish_reason` "length" for an answer
cut at the output limit; error statuses with OpenAI's error body (`{"error": {"message",
"type", "code"}}`) and retry-after headers; a 400 `context_length_exceeded`, and the local
servers' own too-long bodies (LOCAL_TOO_LONG: llama.cpp, vLLM, Ollama, LM Studio, SGLang); a
stall before the reply; a reply that trickles a byte at a time; a refusal (`message.refusal`);
an empty reply; a body cut in the middle; a completion with no choices. Each request takes the
next scripted step; when the script is empty, `default` answers. Requests from the judge (its
system prompt) are answered by `judge` when it is set.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fake_api import JUDGE_MARK
from fake_server import FakeServer, Step


def text(body: str, *, prompt_tokens: int = 100, completion_tokens: int = 20,
         cached_tokens: int = 0) -> Step:
    """A final answer."""
    return {"kind": "completion", "message": {"role": "assistant", "content": body},
            "finish_reason": "stop",
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens}}}


def tool_call(name: str, arguments: dict[str, Any] | str, *, id: str | None = None,
              more: list[tuple[str, dict[str, Any]]] = ()) -> Step:
    """One tool call (or several, with `more`); `arguments` as a string is sent as is."""
    calls = [(name, arguments)] + list(more)
    return {"kind": "completion", "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": None, "tool_calls": [
                {"id": id if (id and i == 0) else f"call_{n}_{i}_{time.monotonic_ns()}",
                 "type": "function",
                 "function": {"name": n, "arguments": a if isinstance(a, str)
                              else json.dumps(a)}} for i, (n, a) in enumerate(calls)]},
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


def status(code: int, *, retry_after: str | None = "0.01", type: str = "server_error",
           error_code: str | None = None, message: str | None = None) -> Step:
    """An error status with OpenAI's error body."""
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return {"kind": "status", "status": code, "headers": headers,
            "body": {"error": {"message": message or f"scripted {code}", "type": type,
                               "param": None, "code": error_code}}}


def rate_limited(retry_after: str = "0.01") -> Step:
    return status(429, retry_after=retry_after, type="requests",
                  error_code="rate_limit_exceeded",
                  message="Rate limit reached for requests per min (RPM)")


def unauthorized() -> Step:
    return status(401, retry_after=None, type="invalid_request_error",
                  error_code="invalid_api_key", message="Incorrect API key provided: sk-test")


def too_long(tokens: int = 140_000, window: int = 128_000) -> Step:
    """OpenAI's 400 for a prompt longer than the model's context."""
    return status(400, retry_after=None, type="invalid_request_error",
                  error_code="context_length_exceeded",
                  message=f"This model's maximum context length is {window} tokens. However, "
                          f"your messages resulted in {tokens} tokens.")


# The status and body each local server sends for a prompt longer than its context, as their
# code writes them (the numbers are this prompt's): llama.cpp's server (tools/server:
# format_error_response with ERROR_TYPE_EXCEED_CONTEXT_SIZE, older builds' message without the
# counts), vLLM (serving_engine's ValueError as an ErrorResponse), Ollama (the runner's
# errorInputTooLong through openai.NewError), LM Studio (an "error" string), SGLang (an
# ErrorResponse at the top level, not under "error").
LOCAL_TOO_LONG: dict[str, tuple[int, dict[str, Any]]] = {
    "llama.cpp": (400, {"error": {
        "code": 400, "message": "request (5299 tokens) exceeds the available context size "
        "(4096 tokens), try increasing it", "type": "exceed_context_size_error",
        "n_prompt_tokens": 5299, "n_ctx": 4096}}),
    "llama.cpp-older": (400, {"error": {
        "code": 400, "message": "the request exceeds the available context size, try "
        "increasing it", "type": "exceed_context_size_error"}}),
    "vllm": (400, {"error": {
        "message": "This model's maximum context length is 4096 tokens. However, you "
        "requested 1024 output tokens and your prompt contains at least 5299 input tokens, "
        "for a total of at least 6323 tokens. Please reduce the length of the input prompt or "
        "the number of requested output tokens. (parameter=input_tokens, value=5299)",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}),
    "ollama": (400, {"error": {"message": "the input length exceeds the context length",
                               "type": "invalid_request_error", "param": None, "code": None}}),
    "lm-studio": (400, {"error": "Trying to keep the first 5299 tokens when context the "
                        "overflows. However, the model is loaded with context length of only "
                        "4096 tokens, which is not enough. Try to load the model with a "
                        "larger context length, or provide a shorter input"}),
    "sglang": (400, {"object": "error", "message": "The input (5299 tokens) is longer than "
                     "the model's context length (4096 tokens).", "type": "BadRequestError",
                     "param": None, "code": 400}),
}


def local_too_long(server: str) -> Step:
    """A local server's reply to a prompt longer than its context (LOCAL_TOO_LONG)."""
    code, body = LOCAL_TOO_LONG[server]
    return {"kind": "status", "status": code, "headers": {}, "body": body}


def truncated(body: str = "The answer is cut off here because the", *,
              completion_tokens: int = 1000) -> Step:
    step = text(body, completion_tokens=completion_tokens)
    step["finish_reason"] = "length"
    return step


def refusal(says: str = "I'm sorry, but I can't help with that.") -> Step:
    """OpenAI's refusal: the message's `refusal` set, its content null."""
    return {"kind": "completion", "finish_reason": "stop",
            "message": {"role": "assistant", "content": None, "refusal": says},
            "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109}}


def empty() -> Step:
    """A completion with nothing in it: content "" and finish_reason "stop"."""
    return text("", completion_tokens=0)


def stall(seconds: float, then: Step | None = None) -> Step:
    """Nothing at all for `seconds`, then an answer (too late, as a rule; `then`: this one)."""
    return {"kind": "stall", "seconds": seconds, "then": then}


def malformed() -> Step:
    """A 200 whose JSON body is cut in the middle."""
    return {"kind": "malformed"}


def trickle(step: Step, every: float = 0.1) -> Step:
    """`step`'s completion sent as a slow server or proxy may: the headers at once, then the
    JSON body one byte every `every` seconds."""
    return {"kind": "trickle", "step": step, "every": every}


def no_choices() -> Step:
    """A 200 completion holding no choices (a proxy's broken reply)."""
    return {"kind": "no_choices"}


def is_judge(body: dict[str, Any]) -> bool:
    return JUDGE_MARK in json.dumps(body.get("messages") or [])


class FakeChatAPI(FakeServer):
    """Start with `with FakeChatAPI() as api:`; `api.url` is the base URL (ending in /v1)."""

    request_id_header = "x-request-id"
    url_path = "/v1"

    def __init__(self, default: Callable[[dict[str, Any]], Step] | None = None) -> None:
        super().__init__(default or (lambda request: text("I do not know.\n```json\n{}\n```")),
                         is_judge)
        self.files: dict[str, bytes] = {}  # the Batch API's uploaded files
        # as llama.cpp's server: a 500 for a conversation whose tool call arguments (sent back
        # in an assistant turn) are not a JSON object (common/chat.cpp)
        self.strict_arguments = False
        # GET /v1/models: the names this server serves (the agent refuses any other before the
        # first item); `model_meta` adds fields to each entry (a server's window: llama.cpp's
        # meta.n_ctx, vLLM's max_model_len); `models_status` answers the list with an error
        self.models: list[str] = ["gpt-test-1", "qwen-test-7b"]
        self.model_meta: dict[str, Any] = {}
        self.models_status: int | None = None
        # POST /tokenize as llama.cpp ("llama": {"content"} -> {"tokens"}) or vLLM ("vllm":
        # {"model", "prompt"} -> {"count"}) answer it, a token every two characters; None: 404
        self.tokenizer: str | None = None
        self.tokenized: list[str] = []

    def post(self, handler: Any, raw: bytes) -> None:
        path = handler.path.rstrip("/")
        if path.endswith("/files"):
            handler._send(200, self._upload(raw))
            return
        body = json.loads(raw or b"{}")
        if path.endswith("/tokenize"):
            self._tokenize(handler, body)
            return
        if path.endswith("/batches"):
            handler._send(200, self._create_batch(body))
        elif path.endswith("/chat/completions"):
            bad = self._unparsed_arguments(body) if self.strict_arguments else None
            if bad is not None:
                self.requests.append({"body": body, "refused": bad})
                handler._send(500, {"error": {"code": 500, "type": "server_error", "message":
                                              "Failed to parse tool call arguments as JSON: "
                                              f"{bad}"}})
                return
            self.answer(handler, body, raw)
        else:
            handler._send(404, self._no_route(handler.path))

    def get(self, handler: Any, parts: list[str]) -> None:
        if parts and parts[-1] == "models":
            if self.models_status is not None:
                handler._send(self.models_status, self._no_route(handler.path))
            else:
                handler._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "owned_by": "fake", **self.model_meta}
                    for m in self.models]})
        elif len(parts) >= 2 and parts[-2] == "batches" and parts[-1] in self.batches:
            handler._send(200, self._look(parts[-1]))
        elif len(parts) >= 3 and parts[-1] == "content" and parts[-2] in self.files:
            handler._send(200, None, raw=self._content(parts[-2]))
        else:
            handler._send(404, self._no_route(handler.path))

    def _tokenize(self, handler: Any, body: dict[str, Any]) -> None:
        text = body.get("content") if self.tokenizer == "llama" else (
            body.get("prompt") if self.tokenizer == "vllm" and body.get("model") else None)
        if not isinstance(text, str):
            handler._send(404, self._no_route(handler.path))
            return
        self.tokenized.append(text)
        n = max(1, len(text) // 2)
        handler._send(200, {"tokens": list(range(n))} if self.tokenizer == "llama" else
                      {"count": n, "max_model_len": 8192, "tokens": list(range(n))})

    @staticmethod
    def _unparsed_arguments(body: dict[str, Any]) -> str | None:
        """The first tool call arguments of the conversation that are not a JSON object."""
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                raw = call["function"]["arguments"]
                try:
                    if isinstance(json.loads(raw), dict):
                        continue
                except ValueError:
                    pass
                return raw
        return None

    @staticmethod
    def _no_route(path: str) -> dict[str, Any]:
        return {"error": {"message": f"no route {path}", "type": "invalid_request_error",
                          "code": "unknown_url"}}

    # --- the Batch API ---------------------------------------------------------------------

    def _upload(self, raw: bytes) -> dict[str, Any]:
        """A multipart upload: the JSONL lines of its file part are kept."""
        lines = [line for line in raw.split(b"\r\n") if line.startswith(b'{"custom_id"')]
        with self._lock:
            file_id = f"file-{len(self.files) + 1:03d}"
            self.files[file_id] = b"\n".join(lines) + b"\n"
        return {"id": file_id, "object": "file", "bytes": len(raw), "created_at": 0,
                "filename": "kgbench-batch.jsonl", "purpose": "batch", "status": "processed"}

    def _create_batch(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.batches_created += 1
            batch_id = f"batch_{self.batches_created:03d}"
            requests = [json.loads(x) for x in self.files[body["input_file_id"]].splitlines()
                        if x.strip()]
            self.batches[batch_id] = {"requests": requests, "looks": 0, "body": body}
        return self._batch_object(batch_id)

    def _batch_object(self, batch_id: str) -> dict[str, Any]:
        batch = self.batches[batch_id]
        done = batch.get("output") is not None
        n = len(batch["requests"])
        return {"id": batch_id, "object": "batch", "endpoint": batch["body"]["endpoint"],
                "input_file_id": batch["body"]["input_file_id"],
                "completion_window": batch["body"]["completion_window"],
                "status": "completed" if done else "in_progress", "created_at": 0,
                "output_file_id": batch.get("output"), "error_file_id": batch.get("errors"),
                "request_counts": {"total": n, "completed": batch.get("ok", 0) if done else 0,
                                   "failed": n - batch.get("ok", 0) if done else 0}}

    def _look(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            batch["looks"] += 1
            if batch["looks"] > self.batch_polls and batch.get("output") is None:
                self._answer_batch(batch_id, batch)
        return self._batch_object(batch_id)

    def _answer_batch(self, batch_id: str, batch: dict[str, Any]) -> None:
        out, errors = [], []
        for line in batch["requests"]:
            body = line["body"]
            if self.batch_expire(body):
                errors.append({"id": f"req_{len(errors)}", "custom_id": line["custom_id"],
                               "response": None, "error": {
                                   "code": "batch_expired",
                                   "message": "This request could not be executed before "
                                              "the completion window expired."}})
                continue
            step = self.batch_error(body)
            if step is None:
                self.requests.append({"path": "batch", "body": body, "t": time.monotonic(),
                                      "headers": {}})
                step = self.script.popleft() if self.script else self.default(body)
            if step["kind"] == "status":
                errors.append({"id": f"req_{len(errors)}", "custom_id": line["custom_id"],
                               "response": {"status_code": step["status"],
                                            "request_id": "r", "body": step["body"]},
                               "error": None})
                continue
            out.append({"id": f"req_{len(out)}", "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "request_id": f"r{len(out)}",
                                     "body": self._completion(step, body)}, "error": None})
        batch["ok"] = len(out)
        batch["output"] = f"file-{batch_id}-out"
        self.files[batch["output"]] = "".join(json.dumps(x) + "\n" for x in out).encode()
        if errors:
            batch["errors"] = f"file-{batch_id}-err"
            self.files[batch["errors"]] = "".join(json.dumps(x) + "\n" for x in errors).encode()

    def _content(self, file_id: str) -> bytes:
        data = self.files[file_id]
        with self._lock:
            cut = self.batch_truncate > 0 and file_id.endswith("-out")
            self.batch_truncate -= 1 if cut else 0
        return data[:max(1, data.index(b"\n") // 2)] if cut and data else data

    @staticmethod
    def _completion(step: Step, request: dict[str, Any]) -> dict[str, Any]:
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion",
            "created": int(time.time()), "model": request.get("model", "fake"),
            "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                     "total_tokens": 1}}
        if step["kind"] == "completion":
            completion["choices"] = [{"index": 0, "message": step["message"],
                                      "finish_reason": step["finish_reason"], "logprobs": None}]
            completion["usage"] = step["usage"]
        return completion

    def _reply(self, handler: Any, step: Step, request: dict[str, Any]) -> None:
        kind = step["kind"]
        if kind == "stall":
            time.sleep(step["seconds"])
            step = step.get("then") or text("too late")
            kind = step["kind"]
        if kind == "status":
            handler._send(step["status"], step["body"], step.get("headers"))
            return
        if kind == "malformed":
            handler._send(200, None, raw=b'{"id": "chatcmpl-1", "object": "chat.completion", '
                                         b'"choices": [{"index": 0, "message": {"role": "assi')
            return
        if kind == "trickle":
            data = json.dumps(self._completion(step["step"], request)).encode()
            self.trickle(handler, data, step["every"])
            return
        handler._send(200, self._completion(step, request))
