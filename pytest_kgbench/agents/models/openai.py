"""`openai`: any OpenAI-compatible Chat Completions endpoint through the official `openai` SDK —
OpenAI itself, or with --base-url vLLM, Ollama, llama.cpp's server, LM Studio, OpenRouter, a
LiteLLM proxy.

The same run as the anthropic agent: the same prompt (the system block as the system message,
the data block then the question as the user message, so the provider's automatic prefix
caching can reuse the data block), the same list_tables/describe/run_query tools
(asking/tools.py, as Chat Completions `function` tools), the same --max-rounds with the same
last-round rule (told with the last round's results, then `tool_choice: "none"`), the same one
deadline per item
(--item-timeout bounds every round and every retry), and the same fault classes
(agents/support/faults.py):

- a rejected credential (401/403), an exhausted quota (429 `insufficient_quota`), an unknown
  model (404) or a request refused as malformed (400/422) is `HarnessBroken`: the run halts;
- a rate limit (429, honouring retry-after), an overload or a 5xx still failing after the
  retries, a reset, or a body that is not a completion, is `TransientModelError`: rerun, never
  graded;
- a prompt longer than the model's context is `ItemSkipped`, in the words of OpenAI
  (`context_length_exceeded`) and of the servers run behind --base-url: llama.cpp
  (`exceed_context_size_error`), vLLM, Ollama, LM Studio, SGLang (agents/support/faults.py);
- an answer cut at --max-tokens (finish_reason `length`) is `truncated`, a refusal
  (`message.refusal`, or finish_reason `content_filter`) is `refused`, and running past
  --item-timeout is `timeout`: the model's misses;
- an empty reply (no content, no tool call) is asked again within the deadline and never
  stored in the response cache; still empty, it is `empty` (a miss).

The key is OPENAI_API_KEY; a local server (--base-url) needs none. Prices come from the
settings ([tool.kgbench.prices."<model id>"]); a model without one (a local model, as a rule)
has its cost reported as unknown, never as $0. Requests go through the response cache and the
spending cap (agents/support/cache.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import LAST_ROUND, BaseAgent, Completion, Task
from pytest_kgbench.agents.loop import ATTEMPTS, Dialect, ToolCall, Turn, run_loop, token_limit
from pytest_kgbench.agents.support import faults
from pytest_kgbench.agents.support import served as serving
from pytest_kgbench.agents.support.batch import Batching, OpenAIBatches
from pytest_kgbench.agents.support.cache import cut_at
from pytest_kgbench.agents.support.faults import classify_status
from pytest_kgbench.asking.tools import tools_for
from pytest_kgbench.core.errors import HarnessBroken, ItemSkipped, TransientModelError
from pytest_kgbench.core.settings import check_models
from pytest_kgbench.scoring.answers import Answer

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

NO_KEY = "no-key"  # the SDK's key for a local server that takes none (the server ignores it)
NO_CREDENTIAL = ("no OPENAI_API_KEY in the environment and no --base-url: the openai agent "
                 "cannot call OpenAI (a local server given with --base-url needs no key)")


@dataclass
class _Chat:
    """One item's conversation: its messages, and whether any completion said how many prompt
    tokens its provider's cache served (unknown_cache)."""

    messages: list[dict[str, Any]]
    known: bool = False


def _opening(task: Task) -> list[dict[str, Any]]:
    """The system message, then the data block and the question as the user message (so the
    provider's automatic prefix caching can reuse the data block)."""
    return [{"role": "system", "content": task.prompt.system},
            {"role": "user", "content": f"{task.prompt.context}\n\n{task.prompt.question}"}]


def chat_tools(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """asking/tools.py's specs (name, description, input_schema) as Chat Completions tools."""
    return [{"type": "function",
             "function": {"name": s["name"], "description": s["description"],
                          "parameters": s["input_schema"]}} for s in specs]


def classify(exc: Exception) -> Exception:
    """The exception a failed SDK call becomes: HarnessBroken, ItemSkipped or
    TransientModelError."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        message = _message(exc)
        code = getattr(exc, "code", None)
        if faults.too_long(message, code, getattr(exc, "type", None)):
            return ItemSkipped(f"the prompt is longer than the model accepts "
                               f"({exc.status_code}): {message}")
        if code == "insufficient_quota":
            return HarnessBroken(f"the account cannot pay for the call ({exc.status_code}): "
                                 f"{message}")
        return classify_status(exc.status_code, message)
    return TransientModelError(f"{type(exc).__name__} after the retries: {exc}")


def _message(exc: Any) -> str:
    """The API's own error message (OpenAI's body is {"error": {...}}; the SDK hands the
    inner object, other servers may hand the whole body or a string: LM Studio's is
    {"error": "..."}, which the SDK hands as the string)."""
    body = getattr(exc, "body", None)
    if isinstance(body, str) and body.strip():
        return body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(exc, "message", None) or exc)


def _retryable(exc: Exception) -> bool:
    import openai

    if isinstance(exc, openai.APIStatusError):
        if getattr(exc, "code", None) == "insufficient_quota" or faults.too_long(
                _message(exc), getattr(exc, "code", None), getattr(exc, "type", None)):
            return False  # as long the second time (a local server may say it with a 500)
        should = exc.response.headers.get("x-should-retry")
        if should in ("true", "false"):
            return should == "true"
        return faults.retry_status(exc.status_code)
    return isinstance(exc, openai.APIConnectionError)  # a reset, a refused connection


def _has_choices(response: Any) -> None:
    if not getattr(response, "choices", None):
        raise TransientModelError(f"the API sent a completion with no choices: "
                                  f"{str(response)[:300]}")


def call_within(client: Any, deadline: float, *, pace: Any = None,
                **kwargs: Any) -> tuple[Any | None, int]:
    """One Chat Completions call within `deadline` (time.monotonic()), retried as
    faults.call_within says; a completion with no choices is transient. Returns (the
    completion, or None when the deadline passed; the attempts made)."""
    import openai

    sdk = faults.SdkFaults(timeout_error=openai.APITimeoutError, api_error=openai.APIError,
                           retryable=_retryable, classify=classify, check=_has_choices)
    return faults.call_within(client.chat.completions.create, deadline, sdk, attempts=ATTEMPTS,
                              pace=pace, cut=lambda seconds: cut_at(client, seconds), **kwargs)


def usage_of(response: Any) -> dict[str, int]:
    """A completion's tokens as the harness counts them: prompt tokens served from the
    provider's prefix cache are cache reads, the rest plain input."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return {"input": max(0, prompt - cached), "output":
            int(getattr(usage, "completion_tokens", 0) or 0), "cache_read": cached,
            "cache_write": 0}


def reports_cache(response: Any) -> bool:
    """Whether a completion says how many prompt tokens came from the provider's cache (a
    local server may not): without it the cache-read share is unknown, not 0%."""
    usage = getattr(response, "usage", None)
    return getattr(usage, "prompt_tokens_details", None) is not None


def unknown_cache(answer: Answer, known: bool) -> Answer:
    """An answer none of whose completions reported cached prompt tokens has no `cache_read`
    count (unknown, where 0 would claim nothing was cached)."""
    if not known and not answer.tokens.get("cache_read"):
        answer.tokens.pop("cache_read", None)
    return answer


def served(response: Any, attempts: int, hit: bool = False) -> dict[str, Any]:
    """What one call was served: the model id, the finish reason, the request id."""
    choice = response.choices[0]
    out = {"model": getattr(response, "model", None),
           "stop_reason": getattr(choice, "finish_reason", None),
           "request_id": getattr(response, "_request_id", None), "attempts": attempts}
    if hit:
        out["cache_hit"] = True
    return out


def _empty(response: Any) -> bool:
    """Whether a completion carries nothing (faults.empty_reply)."""
    return faults.empty_reply(response.model_dump(mode="json"))


def _dump(response: Any) -> dict[str, Any]:
    return dict(response.model_dump(mode="json", exclude_unset=True))


def _load(data: dict[str, Any]) -> Any:
    from openai.types.chat import ChatCompletion

    return ChatCompletion.model_validate(data)


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A tool call's arguments (a JSON string from the model) as a dict, or why not."""
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(raw or "{}")
    except (ValueError, RecursionError) as exc:
        return None, f"ERROR: the tool call's arguments are not JSON ({exc}): {str(raw)[:200]}"
    if not isinstance(value, dict):
        return None, f"ERROR: the tool call's arguments must be a JSON object, got {raw[:200]}"
    return value, None


def _echoed(raw: Any) -> str:
    """A tool call's arguments as the conversation sends them back: as written when they are a
    JSON object, else `{}` (the tool's result already said what they were). A call cut at the
    output limit has arguments that are not JSON, and llama.cpp's server answers a 500 to a
    conversation holding them: the item would be retried and never graded."""
    if isinstance(raw, dict):
        return json.dumps(raw)
    return raw if _arguments(raw)[1] is None else "{}"


def check_served(settings: Settings, asking: bool) -> str | None:
    """The model names, each against what it is asked at: OpenAI's own ids by their look
    (check_models), a server's (--base-url, or the model's table) by its list of models, so a
    local server's `mistral` or `local` is a model and a name it does not serve is refused.
    A server that does not answer its list is a refusal when the run will ask it (nothing can
    be asked there); when nothing will be asked (--collect-only, --estimate's planning) the
    names are taken as written."""
    at: dict[str | None, list[str]] = {}
    for model in settings.plan.models:
        at.setdefault(settings.base_url_for(model), []).append(model)
    for url, models in at.items():
        mine = settings.but(models=tuple(models))
        if url is None:
            check_models(mine)
            continue
        try:
            server = serving.served(url)
        except serving.ServerUnanswered as exc:
            if asking:
                return (f"{exc}: is the server running at {url}? (the models it serves are "
                        "asked for before the first item)")
            continue
        check_models(mine, server.names, at=url)
    return None


class OpenAIAgent(Dialect, Batching, BaseAgent):
    name = "openai"  # a model, threadsafe, a together session in one conversation (Dialect)
    batches = True  # --batch: OpenAI's Batch API (agents/support/batch.py)
    completes = True  # the judge may ask through it (`complete`)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.base_url = settings.model.base_url
        self.connect(settings, "openai-chat")

    def batch_api(self) -> OpenAIBatches:
        return OpenAIBatches()

    def batch_endpoint(self) -> str | None:
        return self.base_url

    def first_request(self, task: Task) -> dict[str, Any]:
        """The item's first (for a reading condition, only) request, as `ask` sends it."""
        return self.request(task, _Chat(messages=_opening(task)), self.tools(task), last=False)

    def from_batch(self, client: Any, request: dict[str, Any], task: Task
                   ) -> tuple[Any, int, bool]:
        """The item's one request answered through the session's batch
        (agents/support/batch.py)."""
        return self.through_batch(task, load=_load, interactive=lambda: self._call(
            client, time.monotonic() + self.settings.limits.item_timeout * task.share, request,
            task.repeat, self.token_limit(task)))

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        problem = check_served(settings, asking)
        if problem:
            return problem
        from openai.resources.chat.completions import Completions

        missing = faults.untaken(Completions.create, settings)
        if missing:  # what an older or newer SDK may lack: refused, never a TypeError per item
            import openai

            return (f"{', '.join(flag for _, flag in missing)}: the installed openai SDK "
                    f"{openai.__version__} takes no {' or '.join(n for n, _ in missing)}")
        if asking and not settings.model.base_url and not os.environ.get("OPENAI_API_KEY"):
            return NO_CREDENTIAL
        return None

    @classmethod
    def server_facts(cls, settings: Settings, model: str, *, speed: bool
                     ) -> serving.Facts | None:
        """A model asked at a server of the user's (--base-url, or its table's base_url): the
        window that server serves it with and, with `speed`, its tokens per second here."""
        url = settings.base_url_for(model)
        return serving.facts(url, settings.model_id(model), speed=speed) if url else None

    def new_client(self) -> Any:
        import openai

        key = os.environ.get("OPENAI_API_KEY")
        if not key and not self.base_url:
            raise HarnessBroken(NO_CREDENTIAL)
        # retries are made by call_within, inside the item's one deadline; the SDK needs a key
        # even for a local server that takes none (which ignores it, as Ollama does)
        return openai.OpenAI(api_key=key or NO_KEY, base_url=self.base_url or None,
                             max_retries=0)

    def token_limit(self, task: Task) -> int:
        """The output limit of each call, raised for a together session (loop.token_limit)."""
        return token_limit(self.settings.model.max_tokens, task)

    def settings_sent(self, model: str, messages: list[dict[str, Any]], max_tokens: int
                      ) -> dict[str, Any]:
        """The settings every call sends. OpenAI itself takes max_completion_tokens (its
        reasoning models refuse max_tokens); compatible servers take max_tokens."""
        kwargs: dict[str, Any] = {"model": model, "messages": messages,
                                  ("max_tokens" if self.base_url else
                                   "max_completion_tokens"): max_tokens}
        if self.settings.model.temperature is not None:
            kwargs["temperature"] = self.settings.model.temperature
        if self.settings.model.top_p is not None:
            kwargs["top_p"] = self.settings.model.top_p
        if self.settings.model.effort:
            kwargs["reasoning_effort"] = self.settings.model.effort
        return kwargs

    def _call(self, client: Any, deadline: float, kwargs: dict[str, Any], repeat: int,
              max_tokens: int) -> tuple[Any, int, bool]:
        snapshot = json.loads(json.dumps(kwargs))  # what is sent now (messages grow later)
        return self.gate.call(
            snapshot, endpoint=self.base_url, repeat=repeat, model_id=kwargs["model"],
            max_tokens=max_tokens,
            send=lambda: call_within(client, deadline,
                                     pace=self.gate.ticket(snapshot, max_tokens), **snapshot),
            dump=_dump, load=_load, usage=usage_of)

    def ask(self, task: Task) -> Answer:
        limits = self.settings.limits
        return run_loop(self, task, self.client(), item_timeout=limits.item_timeout,
                        max_rounds=limits.max_rounds, max_tokens=self.token_limit(task),
                        batched=self.batched(task))

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion:
        """One plain call (the judge's), within `timeout` seconds, retries included. Never
        answered from the response cache: the judge's two passes must be two requests."""
        kwargs = self.settings_sent(model, [{"role": "system", "content": system},
                                            {"role": "user", "content": text}], max_tokens)
        client = self.client()
        deadline = self.gate.clock() + timeout
        response, attempts, _ = self.gate.call(
            kwargs, endpoint=self.base_url, repeat=0, model_id=model, max_tokens=max_tokens,
            send=lambda: call_within(client, deadline,
                                     pace=self.gate.ticket(kwargs, max_tokens), **kwargs),
            dump=_dump, load=_load,
            usage=usage_of, use_cache=False)
        if response is None:
            raise TransientModelError(f"the call ran past {timeout:g} s")
        used = usage_of(response)
        return Completion(text=response.choices[0].message.content or "",
                          tokens={"input": used["input"] + used["cache_read"],
                                  "output": used["output"]},
                          sent=served(response, attempts))

    # --- the tool loop's dialect (agents/loop.py) ----------------------------------------------

    def conversation(self, task: Task) -> _Chat:
        import openai

        task.sent.update({"backend": "chat-completions",
                          "client": f"openai-sdk {openai.__version__}",
                          "base_url": self.base_url, "model": self.settings.model_id(task.model),
                          "max_tokens": self.token_limit(task),
                          "effort": self.settings.model.effort,
                          "temperature": self.settings.model.temperature,
                          "top_p": self.settings.model.top_p})
        return _Chat(messages=_opening(task))

    def tools(self, task: Task) -> list[dict[str, Any]]:
        return chat_tools(tools_for(task.condition, together=bool(task.together)))

    def request(self, task: Task, conversation: Any, tools: list[dict[str, Any]],
                last: bool) -> dict[str, Any]:
        kwargs = self.settings_sent(self.settings.model_id(task.model), conversation.messages,
                                    self.token_limit(task))
        if tools:
            kwargs["tools"] = tools
            if last:
                kwargs["tool_choice"] = "none"
        return kwargs

    def call(self, client: Any, deadline: float, request: dict[str, Any],
             task: Task) -> tuple[Any, int, bool]:
        return self._call(client, deadline, request, task.repeat, self.token_limit(task))

    def empty(self, response: Any) -> bool:
        return _empty(response)

    def spend(self, conversation: Any, answer: Answer, response: Any) -> None:
        for name, value in usage_of(response).items():
            answer.tokens[name] += value
        conversation.known = conversation.known or reports_cache(response)

    def served(self, response: Any, attempts: int, hit: bool) -> dict[str, Any]:
        return served(response, attempts, hit)

    def read(self, response: Any, offered: bool) -> Turn:
        message = response.choices[0].message
        finish = response.choices[0].finish_reason
        calls = []
        for call in (getattr(message, "tool_calls", None) or []) if offered else []:
            arguments, problem = _arguments(call.function.arguments)
            calls.append(ToolCall(id=call.id, name=call.function.name, arguments=arguments,
                                  raw=call.function.arguments, problem=problem))
        refusal = getattr(message, "refusal", None)
        return Turn(text=message.content or refusal or "", calls=calls,
                    truncated=finish == "length",
                    refused="the model refused to answer (message.refusal)" if refusal else
                    "the model refused to answer (finish_reason content_filter)"
                    if finish == "content_filter" else None)

    def reply(self, conversation: Any, response: Any,
              results: list[tuple[ToolCall, str, bool]], last_round_next: bool) -> None:
        message = response.choices[0].message
        conversation.messages.append({
            "role": "assistant", "content": message.content,
            "tool_calls": [{"id": c.id, "type": "function",
                            "function": {"name": c.function.name,
                                         "arguments": _echoed(c.function.arguments)}}
                           for c in message.tool_calls]})
        for call, text, _ in results:
            conversation.messages.append({"role": "tool", "tool_call_id": call.id,
                                          "content": text})
        if last_round_next:
            conversation.messages.append({"role": "user", "content": LAST_ROUND})

    def finish(self, conversation: Any, answer: Answer) -> Answer:
        return unknown_cache(answer, conversation.known)


AGENTS = (OpenAIAgent,)
