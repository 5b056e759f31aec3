"""What a failed model call means for the run, the same for every backend (the SDK's status
errors, Claude Code's `is_error` results): the one table of fault classes.

- a rejected or missing credential, or an account that cannot pay -> `HarnessBroken` (halt);
- a prompt longer than the model accepts -> `ItemSkipped` (the item is skipped with the reason);
- an unknown model or endpoint, or a request refused as malformed -> `HarnessBroken` (halt: the
  request is ours);
- anything else still failing after the retries (rate limit, overload, 5xx, a reset) ->
  `TransientModelError` (rerun by pytest-rerunfailures, never graded).

An answer cut at the output limit (`truncated`) and an item past --item-timeout (`timeout`) are
not errors: they are the model's answers, and misses. So is a refusal (`refused`: Anthropic's
stop_reason "refusal", OpenAI's `message.refusal` or finish_reason "content_filter", Gemini's
finishReason SAFETY and its kin or a blocked prompt, Claude Code's refusal result): the model's
behaviour, banked once, never retried. An empty reply (no text and no tool call) is a fault
first: asked again within the deadline (`retry_empty`), never stored in the response cache, and
only if every try is empty banked as `empty`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.errors import HarnessBroken, ItemSkipped, TransientModelError

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

TOO_LONG = ("prompt is too long", "context length", "context window",
            "exceeds the available context size",  # llama.cpp's server
            "context the overflows",                # LM Studio's (sic)
            "exceeds the maximum number of tokens allowed")  # Gemini's "The input token count"
# what the servers run behind --agent openai name it: OpenAI's `code`, llama.cpp's `type`
TOO_LONG_KINDS = ("context_length_exceeded", "exceed_context_size_error")
RETRY_STATUSES = (408, 409, 429)  # and every 5xx: what the SDKs themselves would retry
BILLING = ("credit balance is too low", "billing")
CREDENTIAL = ("not logged in", "invalid api key", "authentication", "oauth token")


def too_long(message: str, *kinds: object) -> bool:
    """Whether an error says the prompt is longer than the model takes: its message in any of
    the wordings of the providers and local servers (Anthropic, OpenAI, Gemini, llama.cpp,
    vLLM, Ollama, LM Studio, SGLang), or its code or type (`kinds`)."""
    low = message.lower()
    return any(k in TOO_LONG_KINDS for k in kinds) or any(t in low for t in TOO_LONG)


def retry_status(status: int) -> bool:
    """Whether an API error status is worth another try (`RETRY_STATUSES`, or any 5xx)."""
    return status in RETRY_STATUSES or status >= 500


def classify_status(status: int | None, message: str) -> Exception:
    """The exception an API error status (None when the backend gives none) and its message
    become."""
    low = message.lower()
    if status in (401, 403) or any(c in low for c in CREDENTIAL):
        return HarnessBroken(f"the API rejected the credential ({status}): {message}")
    if status == 402 or any(b in low for b in BILLING):
        return HarnessBroken(f"the account cannot pay for the call ({status}): {message}")
    if status == 413 or too_long(low):
        return ItemSkipped(f"the prompt is longer than the model accepts ({status}): {message}")
    if status == 404:
        return HarnessBroken(f"the API does not know this model or endpoint (404): {message}")
    if status in (400, 422):
        return HarnessBroken(f"the API refused the request as malformed ({status}): {message}")
    return TransientModelError(f"the API call failed ({status}) after the retries: {message}")


SAMPLING = (("temperature", "--temperature"), ("top_p", "--top-p"))
"""The sampling settings a run may send, as the SDKs name them and as the options do."""


def untaken(create: Callable[..., Any], settings: Settings) -> list[tuple[str, str]]:
    """The sampling settings the run sets (`SAMPLING`: (parameter, option)) that `create` —
    an installed SDK's request method — has no parameter for: sending one would be a
    TypeError in every item, so the run refuses them before it starts."""
    import inspect

    params = inspect.signature(create).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    return [(name, flag) for name, flag in SAMPLING
            if settings.get(name) is not None and name not in params]


GEMINI_REFUSALS = ("SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII")
"""The finishReason values of a Gemini candidate that mean the model would not answer."""


def empty_reply(data: Mapping[str, Any]) -> bool:
    """Whether a model's reply (an Anthropic message, a Chat Completions completion or a Gemini
    GenerateContentResponse, as JSON) carries nothing: no text that is not blank, no tool call,
    no refusal, and not cut at the output limit. A completion with no choices (a Gemini
    response with no candidate and no blocked prompt) is a malformed body, not this."""
    if "candidates" in data or "promptFeedback" in data:
        candidate = (data.get("candidates") or [None])[0]
        if not isinstance(candidate, Mapping) or (data.get("promptFeedback") or {}).get(
                "blockReason"):
            return False
        parts = (candidate.get("content") or {}).get("parts") or []
        return candidate.get("finishReason") not in ("MAX_TOKENS", *GEMINI_REFUSALS) and not any(
            isinstance(p, Mapping) and (p.get("functionCall") or (
                str(p.get("text") or "").strip() and not p.get("thought"))) for p in parts)
    if isinstance(data.get("choices"), list):
        if not data["choices"]:
            return False
        choice = data["choices"][0] or {}
        message = choice.get("message") or {}
        return (choice.get("finish_reason") not in ("length", "content_filter")
                and not str(message.get("content") or "").strip()
                and not message.get("tool_calls") and not message.get("refusal"))
    if not isinstance(data.get("content"), list):
        return False
    return data.get("stop_reason") not in ("max_tokens", "refusal") and not any(
        b.get("type") == "tool_use" or (b.get("type") == "text" and str(b.get("text")).strip())
        for b in data["content"] if isinstance(b, Mapping))


def retry_empty(call: Callable[[], tuple[Any, int, bool]], empty: Callable[[Any], bool],
                deadline: float, clock: Callable[[], float], spent: Callable[[Any, bool], None],
                attempts: int) -> tuple[Any | None, int, bool, int]:
    """Make one model call with `call` (the agent's gated call: (response or None past the
    deadline, attempts, cache hit)) and ask again while the reply is `empty`, at most
    `attempts` times in all and only while the deadline leaves room for the wait between.
    `spent(response, hit)` counts every reply's tokens, the empty ones' too (they were
    billed). Returns (the last response, or None past the deadline; the attempts made;
    whether it came from the cache; how many empty replies came)."""
    import time

    made = empties = 0
    response: Any = None
    hit = False
    for i in range(attempts):
        response, tries, hit = call()
        made += tries
        if response is None:
            return None, made, hit, empties
        spent(response, hit)
        if not empty(response):
            return response, made, hit, empties
        empties += 1
        wait = min(0.5 * 2.0 ** i, 8.0)
        if i + 1 == attempts or clock() + wait >= deadline:
            break
        time.sleep(wait)
    return response, made, hit, empties


def wait_before_retry(exc: Exception, attempt: int) -> float:
    """retry-after(-ms) when the API says, else exponential backoff with jitter (as the SDKs)."""
    import random

    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return max(0.0, float(headers.get(name) or "") * scale)
        except (TypeError, ValueError):
            continue
    return min(0.5 * 2.0 ** attempt, 8.0) * (1 - 0.25 * random.random())


Errors = type[Exception] | tuple[type[Exception], ...]


@dataclass(frozen=True)
class SdkFaults:
    """How one SDK fails, as `call_within` reads it: its timeout and API error classes (either
    may be a tuple: an SDK whose HTTP library raises its own errors beside the SDK's), which
    errors are worth retrying, the fault class each becomes, and optionally a check of a
    response the SDK accepted (a completion with no choices) and the wait the API's error
    asks for (`said`)."""

    timeout_error: Errors
    api_error: Errors
    retryable: Callable[[Exception], bool]
    classify: Callable[[Exception], Exception]
    check: Callable[[Any], None] | None = None
    said: Callable[[Exception], float | None] | None = None


def call_within(create: Callable[..., Any], deadline: float, sdk: SdkFaults, *, attempts: int,
                pace: Any = None,
                cut: Callable[[float], AbstractContextManager[threading.Event]] | None = None,
                **kwargs: Any) -> tuple[Any | None, int]:
    """One SDK call, `create(**kwargs, timeout=...)`, within `deadline` (time.monotonic()): at
    most `attempts` tries on what `sdk.retryable` says is worth retrying, each given only the
    time left, waiting retry-after when it fits (or what `sdk.said(exc)` reads the API's error
    to ask for, when it says). Returns (the response, or None when the deadline passed; the
    attempts made). Raises the `sdk.classify`-ed error otherwise.

    The SDK's timeout bounds each read of the reply, not the whole of it: `cut(seconds)`
    (cache.cut_at) shuts the call's connection down when the time left is up, so a reply
    that trickles in a byte at a time ends at the deadline too, as a timeout.

    `pace` (a pacing.Ticket, under --rpm/--tpm/--concurrency): each attempt first waits for the
    rate limits, the deadline is on the item's clock (the time the limits held it back is not
    the model's), and a rate limit's wait pauses every thread of the process."""
    import time

    clock = pace.clock if pace is not None else time.monotonic
    for attempt in range(attempts):
        if pace is not None:
            pace.before()
        remaining = deadline - clock()
        if remaining <= 0:
            return None, attempt
        outcome = _attempt(create, sdk, remaining, deadline, clock, cut, kwargs)
        if not isinstance(outcome, Exception):
            return outcome[0], attempt + 1
        failure = outcome
        if attempt + 1 == attempts:
            raise sdk.classify(failure) from failure
        asked = sdk.said(failure) if sdk.said is not None else None
        wait = wait_before_retry(failure, attempt) if asked is None else asked
        if clock() + wait >= deadline:
            if isinstance(failure, sdk.timeout_error):
                return None, attempt + 1
            raise sdk.classify(failure) from failure  # no time left to wait out a rate limit
        if pace is not None:
            pace.backoff(failure, wait)
        else:
            time.sleep(wait)
    return None, attempts  # pragma: no cover - the loop always returns or raises


def _attempt(create: Callable[..., Any], sdk: SdkFaults, remaining: float, deadline: float,
             clock: Callable[[], float],
             cut: Callable[[float], AbstractContextManager[threading.Event]] | None,
             kwargs: dict[str, Any]) -> tuple[Any | None] | Exception:
    """One try: (the response,) or (None,) when the deadline cut it short; the failure to
    retry; or the fault raised when it is not worth retrying."""
    with (cut(remaining) if cut is not None else nullcontext(threading.Event())) as cutoff:
        try:
            response = create(**kwargs, timeout=remaining)
        except TypeError as exc:  # the installed SDK takes no such argument: ours, a halt
            raise HarnessBroken(f"the installed SDK refused the request's arguments: "
                                f"{exc}") from exc
        except sdk.timeout_error as exc:
            if cutoff.is_set() or clock() >= deadline - 0.05:
                return (None,)
            return exc
        except sdk.api_error as exc:
            if cutoff.is_set():  # the deadline cut the reply short: a timeout
                return (None,)
            if not sdk.retryable(exc):
                raise sdk.classify(exc) from exc
            return exc
        except ValueError as exc:  # a body that is not JSON (json.JSONDecodeError)
            if cutoff.is_set():
                return (None,)
            raise TransientModelError(f"the API sent a malformed body: {exc}") from exc
    if sdk.check is not None:
        sdk.check(response)
    return (response,)
