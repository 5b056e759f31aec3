"""`gemini`: Google's Gemini API through the official `google-genai` SDK, in the API's own
format (`POST /v1beta/models/{model}:generateContent`), not an OpenAI-compatible layer.

The same run as the openai and anthropic agents: the same prompt (the system block as
`systemInstruction`, the data block then the question as the user turn, so Gemini's implicit
caching can reuse the data block), the same list_tables/describe/run_query tools
(asking/tools.py, as `functionDeclarations` carrying their JSON schema), the same --max-rounds
with the same last-round rule (told with the last round's results, then
`toolConfig.functionCallingConfig.mode` NONE), the same one deadline per item (--item-timeout
bounds every round and every retry: the SDK's own retries are off, faults.call_within makes
them), and the same fault classes (agents/support/faults.py):

- a rejected key (401, 403 PERMISSION_DENIED, or a 400 whose reason is API_KEY_INVALID), an
  unknown model (404 NOT_FOUND) or a request refused as malformed (400 INVALID_ARGUMENT) is
  `HarnessBroken`: the run halts;
- a rate limit or an exhausted quota (429 RESOURCE_EXHAUSTED, waiting what its RetryInfo or a
  retry-after header asks), a 408, 409 or 5xx (500 INTERNAL, 503 UNAVAILABLE), a reset, or a
  body that is not a reply, still failing after the retries, is `TransientModelError`: rerun,
  never graded;
- a prompt longer than the model's context ("The input token count (N) exceeds the maximum
  number of tokens allowed (M)") is `ItemSkipped`;
- an answer cut at --max-tokens (finishReason MAX_TOKENS) is `truncated`; a refusal
  (finishReason SAFETY, RECITATION, PROHIBITED_CONTENT, BLOCKLIST or SPII, or a prompt blocked
  with promptFeedback.blockReason) is `refused`; running past --item-timeout is `timeout`: the
  model's misses;
- an empty reply (no parts, blank text, or finishReason MALFORMED_FUNCTION_CALL, which carries
  no call to answer) is asked again within the deadline and never stored in the response
  cache; still empty, it is `empty` (a miss).

Tokens: promptTokenCount less cachedContentTokenCount is input, cachedContentTokenCount a cache
read (Gemini's implicit prompt cache), candidatesTokenCount plus thoughtsTokenCount output (a
thinking model's thoughts are billed as output). --effort is sent as thinkingConfig's
thinkingLevel. A reply's parts go back into the conversation as they came, with their thought
signatures, which Gemini's thinking models need to go on after a function call.

The key is GEMINI_API_KEY or GOOGLE_API_KEY (GOOGLE_API_KEY first when both are set, as the
SDK reads them), sent in the `x-goog-api-key` header. --base-url (or the SDK's
GOOGLE_GEMINI_BASE_URL) points the SDK at another host, a proxy or a local server, given as its
root (the SDK adds /v1beta/models/...); such a host needs no key. Gemini on Vertex AI is not
this agent. No batching: Gemini's Batch API is a job API of its own (uploaded files and
long-running operations), not the Batches the other two agents share, so --batch is refused.
Prices come from the settings ([tool.kgbench.prices."<model id>"]); a model without one has
its cost reported as unknown, never as $0. Requests go through the response cache and the
spending cap (agents/support/cache.py).
"""

from __future__ import annotations

import importlib
import json
import os
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import LAST_ROUND, BaseAgent, Completion, Task
from pytest_kgbench.agents.loop import ATTEMPTS, Dialect, ToolCall, Turn, run_loop, token_limit
from pytest_kgbench.agents.support import faults
from pytest_kgbench.agents.support.cache import cut_at
from pytest_kgbench.asking.tools import tools_for
from pytest_kgbench.core.errors import HarnessBroken, ItemSkipped, TransientModelError
from pytest_kgbench.core.settings import check_models
from pytest_kgbench.scoring.answers import Answer

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

API_VERSION = "v1beta"  # the version Google's REST reference documents generateContent under
NO_KEY = "no-key"  # the SDK's key for a host given with --base-url that takes none
KEYS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")  # the SDK's order: GOOGLE_API_KEY wins
NO_CREDENTIAL = ("no GEMINI_API_KEY (or GOOGLE_API_KEY) in the environment and no --base-url: "
                 "the gemini agent cannot call the Gemini API (a local server given with "
                 "--base-url needs no key)")
NO_SDK = ("the gemini agent needs the google-genai SDK: pip install 'pytest-kgbench[gemini]' "
          "(or pip install google-genai)")


def api_key() -> str | None:
    """The key the environment holds, as the SDK picks it."""
    return next((os.environ[k] for k in KEYS if os.environ.get(k)), None)


def function_declarations(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """asking/tools.py's specs (name, description, input_schema) as Gemini function
    declarations: the JSON schema as it is (`parametersJsonSchema`), which Gemini's OpenAPI
    `parameters` would refuse (additionalProperties; no properties at all)."""
    return [{"name": s["name"], "description": s["description"],
             "parameters_json_schema": s["input_schema"]} for s in specs]


def _http_errors(name: str) -> tuple[type[Exception], ...]:
    """The HTTP library's exception class `name`, of httpx2 and of httpx: the SDK sends with
    whichever is installed, and its timeouts and resets are that library's own exceptions.
    Looked up at each call, as the SDK itself is (the module the SDK raises from is the one
    imported now)."""
    found = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ImportError:
            continue
    return tuple(found)


def _error(exc: Any) -> dict[str, Any]:
    """The `error` object of a Google API error body (the SDK keeps the body as `details`)."""
    body = getattr(exc, "details", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    return inner if isinstance(inner, dict) else {}


def _message(exc: Any) -> str:
    """The API's own message (with its status, e.g. RESOURCE_EXHAUSTED), else the text."""
    message = str(getattr(exc, "message", None) or exc)
    status = getattr(exc, "status", None)
    return f"{status}: {message}" if status and status not in message else message


def _said(exc: Exception, kind: str) -> list[dict[str, Any]]:
    """The error's details of one google.rpc type (ErrorInfo, RetryInfo, ...)."""
    return [d for d in _error(exc).get("details") or []
            if isinstance(d, dict) and str(d.get("@type", "")).endswith(f"google.rpc.{kind}")]


def retry_delay(exc: Exception) -> float | None:
    """How long a 429's RetryInfo asks to wait before the next try ("32s"), or None."""
    for info in _said(exc, "RetryInfo"):
        try:
            return max(0.0, float(str(info.get("retryDelay", "")).rstrip("s")))
        except ValueError:
            continue
    return None


def classify(exc: Exception) -> Exception:
    """The exception a failed SDK call becomes: HarnessBroken, ItemSkipped or
    TransientModelError."""
    from google.genai import errors

    if not isinstance(exc, errors.APIError):
        return TransientModelError(f"{type(exc).__name__} after the retries: {exc}")
    code, message = int(exc.code or 0), _message(exc)
    if faults.too_long(message):
        return ItemSkipped(f"the prompt is longer than the model accepts ({code}): {message}")
    if any(i.get("reason") == "API_KEY_INVALID" for i in _said(exc, "ErrorInfo")):
        return HarnessBroken(f"the API rejected the credential ({code}): {message}")
    if code == 429:  # a rate limit or a quota: its message names billing, but it passes
        return TransientModelError(f"the API call failed (429) after the retries: {message}")
    return faults.classify_status(code, message)


def _retryable(exc: Exception) -> bool:
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        return faults.retry_status(int(exc.code or 0)) and not faults.too_long(_message(exc))
    return isinstance(exc, _http_errors("TransportError"))  # a reset, a refused connection


def _has_candidate(response: Any) -> None:
    data = _dump(response)
    if not data.get("candidates") and not (data.get("promptFeedback") or {}).get("blockReason"):
        raise TransientModelError(f"the API sent a reply with no candidate: {str(data)[:300]}")


def call_within(client: Any, deadline: float, *, pace: Any = None,
                **kwargs: Any) -> tuple[Any | None, int]:
    """One generateContent call within `deadline`, retried as faults.call_within says; a reply
    with no candidate (and no blocked prompt) is transient. Returns (the response, or None
    when the deadline passed; the attempts made)."""
    from google.genai import errors

    def create(*, model: str, contents: Any, config: dict[str, Any], timeout: float) -> Any:
        return client.models.generate_content(model=model, contents=contents, config={
            **config, "http_options": {"timeout": max(1, int(timeout * 1000))},  # ms
            "automatic_function_calling": {"disable": True}})  # the loop runs the tools

    sdk = faults.SdkFaults(timeout_error=_http_errors("TimeoutException"),
                           api_error=(errors.APIError, *_http_errors("TransportError")),
                           retryable=_retryable, classify=classify, check=_has_candidate,
                           said=retry_delay)
    return faults.call_within(create, deadline, sdk, attempts=ATTEMPTS, pace=pace,
                              cut=lambda seconds: cut_at(client, seconds), **kwargs)


def _dump(response: Any) -> dict[str, Any]:
    """A response as the API sent it (its JSON spelling), without the SDK's copy of the
    headers."""
    return dict(response.model_dump(mode="json", by_alias=True, exclude_none=True,
                                    exclude={"sdk_http_response"}))


def _load(data: dict[str, Any]) -> Any:
    from google.genai import types

    return types.GenerateContentResponse.model_validate(data)


def _candidate(data: dict[str, Any]) -> dict[str, Any]:
    candidates = data.get("candidates") or [{}]
    return candidates[0] if isinstance(candidates[0], dict) else {}


def _parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in (_candidate(data).get("content") or {}).get("parts") or []
            if isinstance(p, dict)]


def _text(data: dict[str, Any]) -> str:
    """The reply's text: its text parts, not its thoughts."""
    return "".join(str(p["text"]) for p in _parts(data) if p.get("text") and not p.get("thought"))


def usage_of(response: Any) -> dict[str, int]:
    """A reply's tokens as the harness counts them: prompt tokens served from Gemini's cache
    are cache reads, the rest plain input; the thoughts are output, as they are billed."""
    usage = _dump(response).get("usageMetadata") or {}
    prompt = int(usage.get("promptTokenCount") or 0)
    cached = int(usage.get("cachedContentTokenCount") or 0)
    return {"input": max(0, prompt - cached), "cache_read": cached, "cache_write": 0,
            "output": int(usage.get("candidatesTokenCount") or 0)
            + int(usage.get("thoughtsTokenCount") or 0)}


def served(response: Any, attempts: int, hit: bool = False) -> dict[str, Any]:
    """What one call was served: the model version, the finish reason (or why the prompt was
    blocked), the response id."""
    data = _dump(response)
    blocked = (data.get("promptFeedback") or {}).get("blockReason")
    out = {"model": data.get("modelVersion"),
           "stop_reason": f"blocked: {blocked}" if blocked else
           _candidate(data).get("finishReason"),
           "request_id": data.get("responseId"), "attempts": attempts}
    if hit:
        out["cache_hit"] = True
    return out


class GeminiAgent(Dialect, BaseAgent):
    name = "gemini"  # a model, threadsafe, a together session in one conversation (Dialect)
    completes = True  # the judge may ask through it (`complete`)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.base_url = settings.model.base_url
        self.connect(settings, "gemini-generate-content")

    def endpoint(self) -> str | None:
        """The host the SDK calls: --base-url, else the SDK's GOOGLE_GEMINI_BASE_URL, else
        (None) Google's own."""
        return self.base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or None

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        check_models(settings)
        try:
            from google.genai import types
        except ImportError:
            return NO_SDK if asking else None
        levels = [v.value.lower() for v in types.ThinkingLevel
                  if v is not types.ThinkingLevel.THINKING_LEVEL_UNSPECIFIED]
        if settings.model.effort and settings.model.effort.lower() not in levels:
            return (f"--effort {settings.model.effort}: the gemini agent sends it as "
                    f"thinkingLevel, which is one of {', '.join(levels)}")
        if asking and not api_key() and not settings.model.base_url and \
                not os.environ.get("GOOGLE_GEMINI_BASE_URL"):
            return NO_CREDENTIAL
        return None

    def new_client(self) -> Any:
        from google import genai
        from google.genai import types

        key = api_key()
        if not key and not self.endpoint():
            raise HarnessBroken(NO_CREDENTIAL)
        # retries are made by call_within, inside the item's one deadline (attempts=1: none)
        return genai.Client(api_key=key or NO_KEY, vertexai=False, http_options=types.HttpOptions(
            base_url=self.endpoint(), api_version=API_VERSION,
            retry_options=types.HttpRetryOptions(attempts=1)))

    def config(self, system: str, max_tokens: int) -> dict[str, Any]:
        """The settings every call sends: the system block, the output limit, --temperature,
        --top-p and --effort (thinkingLevel) when set."""
        config: dict[str, Any] = {"system_instruction": system, "max_output_tokens": max_tokens}
        if self.settings.model.temperature is not None:
            config["temperature"] = self.settings.model.temperature
        if self.settings.model.top_p is not None:
            config["top_p"] = self.settings.model.top_p
        if self.settings.model.effort:
            config["thinking_config"] = {"thinking_level": self.settings.model.effort.upper()}
        return config

    def _call(self, client: Any, deadline: float, request: dict[str, Any], repeat: int,
              max_tokens: int, use_cache: bool = True) -> tuple[Any, int, bool]:
        sent = json.loads(json.dumps(request))  # what is sent now (the contents grow later)
        return self.gate.call(
            sent, endpoint=self.endpoint(), repeat=repeat, model_id=sent["model"],
            max_tokens=max_tokens, use_cache=use_cache,
            send=lambda: call_within(client, deadline, pace=self.gate.ticket(sent, max_tokens),
                                     **sent),
            dump=_dump, load=_load, usage=usage_of)

    def ask(self, task: Task) -> Answer:
        return run_loop(self, task, self.client(), item_timeout=self.settings.limits.item_timeout,
                        max_rounds=self.settings.limits.max_rounds,
                        max_tokens=token_limit(self.settings.model.max_tokens, task), batched=False)

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion:
        """One plain call (the judge's), within `timeout` seconds, retries included. Never
        answered from the response cache: the judge's two passes must be two requests."""
        request = {"model": model, "contents": [{"role": "user", "parts": [{"text": text}]}],
                   "config": self.config(system, max_tokens)}
        response, attempts, _ = self._call(self.client(), self.gate.clock() + timeout, request,
                                           0, max_tokens, use_cache=False)
        if response is None:
            raise TransientModelError(f"the call ran past {timeout:g} s")
        used = usage_of(response)
        return Completion(text=_text(_dump(response)), sent=served(response, attempts),
                          tokens={"input": used["input"] + used["cache_read"],
                                  "output": used["output"]})

    # --- the tool loop's dialect (agents/loop.py) ----------------------------------------------

    def conversation(self, task: Task) -> list[dict[str, Any]]:
        from google import genai

        task.sent.update({"backend": "gemini-api", "client": f"google-genai-sdk "
                          f"{genai.__version__}", "base_url": self.endpoint(),
                          "api_version": API_VERSION, "model": self.settings.model_id(task.model),
                          "max_tokens": token_limit(self.settings.model.max_tokens, task),
                          "effort": self.settings.model.effort,
                          "temperature": self.settings.model.temperature,
                          "top_p": self.settings.model.top_p})
        return [{"role": "user",
                 "parts": [{"text": f"{task.prompt.context}\n\n{task.prompt.question}"}]}]

    def tools(self, task: Task) -> list[dict[str, Any]]:
        return function_declarations(tools_for(task.condition, together=bool(task.together)))

    def request(self, task: Task, conversation: Any, tools: list[dict[str, Any]],
                last: bool) -> dict[str, Any]:
        config = self.config(task.prompt.system, token_limit(self.settings.model.max_tokens, task))
        if tools:
            config["tools"] = [{"function_declarations": tools}]
            if last:
                config["tool_config"] = {"function_calling_config": {"mode": "NONE"}}
        return {"model": self.settings.model_id(task.model), "contents": conversation,
                "config": config}

    def call(self, client: Any, deadline: float, request: dict[str, Any],
             task: Task) -> tuple[Any, int, bool]:
        return self._call(client, deadline, request, task.repeat,
                          token_limit(self.settings.model.max_tokens, task))

    def from_batch(self, client: Any, request: dict[str, Any], task: Task
                   ) -> tuple[Any, int, bool]:
        raise HarnessBroken("the gemini agent has no batch API")  # never batched: `ask`

    def empty(self, response: Any) -> bool:
        return faults.empty_reply(_dump(response))

    def spend(self, conversation: Any, answer: Answer, response: Any) -> None:
        for name, value in usage_of(response).items():
            answer.tokens[name] += value

    def served(self, response: Any, attempts: int, hit: bool) -> dict[str, Any]:
        return served(response, attempts, hit)

    def read(self, response: Any, offered: bool) -> Turn:
        data = _dump(response)
        blocked = (data.get("promptFeedback") or {}).get("blockReason")
        if blocked:
            return Turn(text="", refused=f"the model refused to answer: the prompt was "
                                         f"blocked (promptFeedback.blockReason {blocked})")
        calls = []
        for part in _parts(data) if offered else []:
            call = part.get("functionCall")
            if not isinstance(call, dict):
                continue
            args = dict(call.get("args") or {})  # an object by the SDK's own schema
            calls.append(ToolCall(id=str(call.get("id") or ""), name=str(call.get("name")),
                                  arguments=args, raw=args))
        finish = _candidate(data).get("finishReason")
        return Turn(text=_text(data), calls=calls, truncated=finish == "MAX_TOKENS",
                    refused=f"the model refused to answer (finishReason {finish})"
                    if finish in faults.GEMINI_REFUSALS else None)

    def reply(self, conversation: Any, response: Any,
              results: list[tuple[ToolCall, str, bool]], last_round_next: bool) -> None:
        # the model's turn as it came: its thought signatures must go back with its calls
        conversation.append(response.candidates[0].content.model_dump(mode="json",
                                                                      exclude_none=True))
        parts: list[dict[str, Any]] = [
            {"function_response": {"name": call.name, **({"id": call.id} if call.id else {}),
                                   "response": {"error" if is_error else "result": text}}}
            for call, text, is_error in results]
        if last_round_next:
            parts.append({"text": LAST_ROUND})
        conversation.append({"role": "user", "parts": parts})


AGENTS = (GeminiAgent,)
