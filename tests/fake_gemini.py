"""A fake Gemini API: a real HTTP server on 127.0.0.1, scripted per test, for the real
`google-genai` SDK.

POST /{version}/models/{model}:generateContent answered as Google's API does: a
GenerateContentResponse (`candidates[0].content.parts` of `text` or `functionCall`, a
`finishReason`, `usageMetadata`, `modelVersion`, `responseId`); error statuses with Google's
error body (`{"error": {"code", "message", "status", "details"}}`: a RetryInfo on a 429, an
ErrorInfo API_KEY_INVALID on a bad key) and retry-after headers when asked; a 400 for a prompt
past the context; finishReason MAX_TOKENS, SAFETY (a refusal), MALFORMED_FUNCTION_CALL; a prompt
blocked (promptFeedback.blockReason, no candidate); an empty reply (no parts, or blank text); a
stall before the reply; a reply that trickles a byte at a time; a 200 whose JSON is cut in the
middle; a body cut short of its content-length; a reply with no candidate. Each request takes
the next scripted step; when the script is empty, `default` answers. Requests from the judge
(its system instruction) are answered by `judge` when it is set. `key_sent` reads the key a
request carried (its `x-goog-api-key` header, or a `?key=` query), `route` its version and model.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fake_api import JUDGE_MARK
from fake_server import FakeServer, Step

ROUTE = re.compile(r"^/(?P<version>v[^/]+)/models/(?P<model>[^/:]+):generateContent$")


def _usage(prompt: int, output: int, cached: int = 0, thoughts: int = 0) -> dict[str, int]:
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": output,
             "totalTokenCount": prompt + output + thoughts}
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def reply(parts: list[dict[str, Any]] | None, finish: str = "STOP", *, prompt_tokens: int = 100,
          output_tokens: int = 20, cached_tokens: int = 0, thoughts_tokens: int = 0,
          **candidate: Any) -> Step:
    """One candidate with `parts` (None: a candidate with no content at all)."""
    body: dict[str, Any] = {"finishReason": finish, "index": 0, **candidate}
    if parts is not None:
        body["content"] = {"role": "model", "parts": parts}
    return {"kind": "reply", "body": {
        "candidates": [body],
        "usageMetadata": _usage(prompt_tokens, output_tokens, cached_tokens, thoughts_tokens)}}


def text(body: str, *, prompt_tokens: int = 100, completion_tokens: int = 20,
         cached_tokens: int = 0, thoughts_tokens: int = 0) -> Step:
    """A final answer."""
    return reply([{"text": body}], prompt_tokens=prompt_tokens, output_tokens=completion_tokens,
                 cached_tokens=cached_tokens, thoughts_tokens=thoughts_tokens)


def function_call(name: str, args: dict[str, Any] | None = None, *, id: str | None = None,
                  signature: str | None = None,
                  more: list[tuple[str, dict[str, Any]]] = ()) -> Step:
    """A reply calling one function (or several, with `more`); `signature` is the thought
    signature a thinking model puts on its first call, which must come back with it."""
    parts = []
    for i, (n, a) in enumerate([(name, args), *more]):
        call: dict[str, Any] = {"name": n}
        if a is not None:
            call["args"] = a
        if id and i == 0:
            call["id"] = id
        part: dict[str, Any] = {"functionCall": call}
        if signature and i == 0:
            part["thoughtSignature"] = signature
        parts.append(part)
    return reply(parts, output_tokens=10)


def status(code: int, state: str, message: str | None = None, *,
           retry_after: str | None = None, details: list[dict[str, Any]] | None = None) -> Step:
    """An error status with Google's error body (`state`: RESOURCE_EXHAUSTED, ...)."""
    error: dict[str, Any] = {"code": code, "message": message or f"scripted {code}",
                             "status": state}
    if details:
        error["details"] = details
    return {"kind": "status", "status": code, "body": {"error": error},
            "headers": {"retry-after": retry_after} if retry_after is not None else {}}


def rate_limited(retry_delay: str | None = "0.01s", retry_after: str | None = None) -> Step:
    """Google's 429: the quota message (which names billing), a RetryInfo with the delay."""
    return status(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check "
                  "your plan and billing details. For more information on this error, head to: "
                  "https://ai.google.dev/gemini-api/docs/rate-limits.", retry_after=retry_after,
                  details=[{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                            "retryDelay": retry_delay}] if retry_delay else None)


def unavailable() -> Step:
    return status(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")


def internal() -> Step:
    return status(500, "INTERNAL", "An internal error has occurred. Please retry or report in "
                  "https://developers.generativeai.google/guide/troubleshooting")


def bad_key() -> Step:
    """Google's answer to a key it does not know: a 400 whose ErrorInfo says API_KEY_INVALID."""
    return status(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                  details=[{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                            "metadata": {"service": "generativelanguage.googleapis.com"}}])


def forbidden() -> Step:
    return status(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers "
                  "without established identity). Please use API Key or other form of API "
                  "consumer identity to call this API.")


def unauthenticated() -> Step:
    return status(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")


def not_found(model: str = "gemini-test-1") -> Step:
    return status(404, "NOT_FOUND", f"models/{model} is not found for API version v1beta, or is "
                  "not supported for generateContent. Call ListModels to see the list of "
                  "available models and their supported methods.")


def bad_request() -> Step:
    return status(400, "INVALID_ARGUMENT", "Invalid JSON payload received. Unknown name "
                  "\"frobnicate\" at 'generation_config': Cannot find field.")


def too_long(tokens: int = 1_200_293, window: int = 1_048_576) -> Step:
    """Google's 400 for a prompt longer than the model's context."""
    return status(400, "INVALID_ARGUMENT", f"The input token count ({tokens}) exceeds the "
                  f"maximum number of tokens allowed ({window}).")


def truncated(body: str = "The answer is cut off here because the", *,
              completion_tokens: int = 1000) -> Step:
    return reply([{"text": body}], "MAX_TOKENS", output_tokens=completion_tokens)


def refusal() -> Step:
    """Gemini's refusal: a candidate with no content, stopped for SAFETY."""
    return reply(None, "SAFETY", output_tokens=0, safetyRatings=[
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}])


def blocked(reason: str = "PROHIBITED_CONTENT") -> Step:
    """A prompt Gemini will not answer at all: no candidate, promptFeedback.blockReason."""
    return {"kind": "reply", "body": {"promptFeedback": {"blockReason": reason},
                                      "usageMetadata": _usage(100, 0)}}


def empty(blank: bool = False) -> Step:
    """A reply with nothing in it: a candidate with no parts (or, `blank`, an empty text)."""
    return reply([{"text": ""}] if blank else None, output_tokens=0)


def malformed_call() -> Step:
    """A function call Gemini could not form: finishReason MALFORMED_FUNCTION_CALL, no parts."""
    return reply(None, "MALFORMED_FUNCTION_CALL", output_tokens=0,
                 finishMessage="Malformed function call: print(default_api.run_query(query=")


def no_candidates() -> Step:
    """A 200 reply with no candidate and no blocked prompt (a proxy's broken reply)."""
    return {"kind": "reply", "body": {"usageMetadata": _usage(1, 0)}}


def stall(seconds: float) -> Step:
    """Nothing at all for `seconds`, then an answer (too late, as a rule)."""
    return {"kind": "stall", "seconds": seconds}


def malformed() -> Step:
    """A 200 whose JSON body is cut in the middle (its length as sent: the HTTP is whole)."""
    return {"kind": "malformed"}


def cut() -> Step:
    """A 200 whose connection closes short of the content-length it announced."""
    return {"kind": "cut"}


def trickle(step: Step, every: float = 0.1) -> Step:
    """`step`'s reply sent as a slow server or proxy may: the headers at once, then the JSON
    body one byte every `every` seconds."""
    return {"kind": "trickle", "step": step, "every": every}


def is_judge(body: dict[str, Any]) -> bool:
    return JUDGE_MARK in json.dumps(body.get("systemInstruction") or "")


def route(request: dict[str, Any]) -> dict[str, str]:
    """A recorded request's API version and model, from its path."""
    found = ROUTE.match(urlsplit(request["path"]).path)
    return found.groupdict() if found else {}


def key_sent(request: dict[str, Any]) -> str | None:
    """The key a recorded request carried: its x-goog-api-key header, else a ?key= query."""
    query = parse_qs(urlsplit(request["path"]).query)
    return request["headers"].get("x-goog-api-key") or (query.get("key") or [None])[0]


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every functionResponse a request sends back, in order."""
    return [p["functionResponse"] for c in body.get("contents") or []
            for p in c.get("parts") or [] if "functionResponse" in p]


class FakeGeminiAPI(FakeServer):
    """Start with `with FakeGeminiAPI() as api:`; `api.url` is the host's root (the SDK adds
    /v1beta/models/...)."""

    request_id_header = "x-request-id"

    def __init__(self, default: Callable[[dict[str, Any]], Step] | None = None) -> None:
        super().__init__(default or (lambda request: text("I do not know.\n```json\n{}\n```")),
                         is_judge)

    def post(self, handler: Any, raw: bytes) -> None:
        route = ROUTE.match(urlsplit(handler.path).path)
        if route is None:
            handler._send(404, {"error": {"code": 404, "status": "NOT_FOUND",
                                          "message": f"no route {handler.path}"}})
            return
        self.answer(handler, json.loads(raw or b"{}"), raw)

    def get(self, handler: Any, parts: list[str]) -> None:
        handler._send(404, {"error": {"code": 404, "status": "NOT_FOUND", "message": "no route"}})

    def _body(self, step: Step, request: dict[str, Any], route: str) -> dict[str, Any]:
        body = dict(step["body"])
        body.setdefault("modelVersion", route)
        body.setdefault("responseId", f"resp-{time.monotonic_ns()}")
        return body

    def _reply(self, handler: Any, step: Step, request: dict[str, Any]) -> None:
        kind = step["kind"]
        route = ROUTE.match(urlsplit(handler.path).path)
        model = route["model"] if route else "fake"
        if kind == "stall":
            time.sleep(step["seconds"])
            step, kind = text("too late"), "reply"
        if kind == "status":
            handler._send(step["status"], step["body"], step.get("headers"))
        elif kind == "malformed":
            handler._send(200, None, raw=b'{"candidates": [{"content": {"role": "model", '
                                         b'"parts": [{"text": "The ans')
        elif kind == "cut":
            data = json.dumps(self._body(text("never whole"), request, model)).encode()
            handler.send_response(200)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data[:len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
        elif kind == "trickle":
            self.trickle(handler, json.dumps(self._body(step["step"], request, model)).encode(),
                         step["every"])
        else:
            handler._send(200, self._body(step, request, model))
