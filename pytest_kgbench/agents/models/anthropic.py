"""`anthropic`: the Messages API through the official SDK.

Reading conditions send one message. Querying conditions run a tool-use loop (list_tables,
describe, run_query) for at most --max-rounds rounds, after which the model must answer. The
data block is marked for prompt caching, so repeats and sibling questions reuse it; in a tool
loop a second, rolling breakpoint on the latest message lets each round read the rounds before
it from the cache.

One deadline per item: --item-timeout bounds the whole item — every round and every retry —
not each attempt. Each call is given only the time left, and its connection is cut when that
time is up (the SDK's timeout bounds each read: a reply that trickles in a byte at a time would
outlast it), and the retries the SDK would make
(429, 529, 5xx, a reset, a timeout; honouring retry-after) are made here, within that deadline.

Faults are classified, never confused (DESIGN §3; the table is agents/support/faults.py):
- a rejected or missing credential, an exhausted credit balance, an unknown model, or a request
  the API refuses as malformed is `HarnessBroken`: the run halts;
- what is still failing after the retries (rate limit, overload, 5xx, reset) is a
  `TransientModelError`, which pytest-rerunfailures reruns; it is never graded;
- a prompt longer than the model's context window is `ItemSkipped`: the item is skipped with the
  reason and the run goes on;
- an answer cut at --max-tokens (stop_reason max_tokens) is status `truncated`, a refusal
  (stop_reason refusal) is status `refused`, and running past --item-timeout is status
  `timeout`: the model failing, which is data (a miss);
- an empty reply (content [], or blank text and no tool call) is asked again within the
  deadline and never stored in the response cache; still empty, it is status `empty` (a miss).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import LAST_ROUND, BaseAgent, Completion, Task, framing
from pytest_kgbench.agents.loop import ATTEMPTS, Dialect, ToolCall, Turn, run_loop, token_limit
from pytest_kgbench.agents.support import faults
from pytest_kgbench.agents.support.batch import AnthropicBatches, Batching
from pytest_kgbench.agents.support.cache import cut_at
from pytest_kgbench.agents.support.faults import classify_status
from pytest_kgbench.asking.tools import tools_for
from pytest_kgbench.core.errors import HarnessBroken, TransientModelError
from pytest_kgbench.core.settings import check_models
from pytest_kgbench.scoring.answers import Answer

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings


def has_credential() -> bool:
    """Whether the environment holds what the SDK authenticates with."""
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is absent
        return False


def provider_problem(provider: str) -> str | None:
    """What the environment lacks for Claude on `provider` (--provider), or None.

    bedrock: a region (AWS_REGION or AWS_DEFAULT_REGION) and either a Bedrock API key
    (AWS_BEARER_TOKEN_BEDROCK) or AWS credentials signed with SigV4, which needs boto3
    (`pip install boto3`; it finds AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or
    ~/.aws). vertex: a region (CLOUD_ML_REGION), a project (ANTHROPIC_VERTEX_PROJECT_ID) and a
    token: GOOGLE_OAUTH_ACCESS_TOKEN, or google-auth's application default credentials
    (`pip install google-auth`, `gcloud auth application-default login`)."""
    env = os.environ
    if provider == "bedrock":
        missing = []
        if not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
            missing.append("a region (AWS_REGION or AWS_DEFAULT_REGION)")
        if not env.get("AWS_BEARER_TOKEN_BEDROCK"):
            if not _installed("boto3"):
                missing.append("a credential: AWS_BEARER_TOKEN_BEDROCK, or boto3 installed "
                               "(pip install boto3) to sign with your AWS credentials")
            elif not (env.get("AWS_ACCESS_KEY_ID") or env.get("AWS_PROFILE")
                      or Path("~/.aws/credentials").expanduser().is_file()):
                missing.append("a credential: AWS_BEARER_TOKEN_BEDROCK, or AWS credentials "
                               "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or "
                               "~/.aws/credentials) for boto3 to sign with")
        return ("--provider bedrock needs " + "; ".join(missing)) if missing else None
    if provider == "vertex":
        missing = []
        if not env.get("CLOUD_ML_REGION"):
            missing.append("a region (CLOUD_ML_REGION, e.g. us-east5 or global)")
        if not env.get("ANTHROPIC_VERTEX_PROJECT_ID"):
            missing.append("a Google Cloud project (ANTHROPIC_VERTEX_PROJECT_ID)")
        if not env.get("GOOGLE_OAUTH_ACCESS_TOKEN") and not _installed("google.auth"):
            missing.append("a token: GOOGLE_OAUTH_ACCESS_TOKEN, or google-auth installed "
                           "(pip install google-auth) for application default credentials")
        return ("--provider vertex needs " + "; ".join(missing)) if missing else None
    if not has_credential():
        return ("no ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the environment: the "
                "anthropic agent cannot call the API")
    return None


def sampling_problem(settings: Settings) -> str | None:
    """Why --temperature / --top-p cannot be sent, or None: the installed SDK speaks the
    Messages API as it is now, and its `Messages.create` (the same for Bedrock and Vertex)
    has no parameter for them (anthropic 2.x takes none: the current models sample as they
    are set). Refused before the run, never a TypeError in every item."""
    import anthropic
    from anthropic.resources.messages import Messages

    missing = faults.untaken(Messages.create, settings)
    if not missing:
        return None
    return (f"{', '.join(flag for _, flag in missing)}: the Messages API, as the installed "
            f"anthropic SDK {anthropic.__version__} sends it, takes no "
            f"{' or '.join(name for name, _ in missing)}; leave it out (the model's own "
            "sampling is used, as without it)")


def make_client(provider: str) -> Any:
    """The SDK client of --provider: Anthropic, AnthropicBedrock or AnthropicVertex, with the
    SDK's own retries off (call_within retries, inside the item's deadline). Each reads its
    base URL override from the environment as the SDK does (ANTHROPIC_BASE_URL,
    ANTHROPIC_BEDROCK_BASE_URL, ANTHROPIC_VERTEX_BASE_URL)."""
    import anthropic

    problem = provider_problem(provider)
    if problem:
        raise HarnessBroken(problem)
    if provider == "bedrock":
        return anthropic.AnthropicBedrock(
            aws_region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
            max_retries=0)
    if provider == "vertex":
        return anthropic.AnthropicVertex(
            region=os.environ["CLOUD_ML_REGION"],
            project_id=os.environ["ANTHROPIC_VERTEX_PROJECT_ID"],
            access_token=os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN") or None, max_retries=0)
    key = os.environ.get("ANTHROPIC_API_KEY")
    token = os.environ.get("ANTHROPIC_AUTH_TOKEN")
    return anthropic.Anthropic(api_key=key, auth_token=None if key else token,
                               base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
                               max_retries=0)


def endpoint_of(provider: str) -> str | None:
    """The endpoint a response-cache key names: the base URL the client calls."""
    if provider == "bedrock":
        return os.environ.get("ANTHROPIC_BEDROCK_BASE_URL") or "bedrock:" + str(
            os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    if provider == "vertex":
        return os.environ.get("ANTHROPIC_VERTEX_BASE_URL") or "vertex:" + str(
            os.environ.get("CLOUD_ML_REGION"))
    return os.environ.get("ANTHROPIC_BASE_URL")


def classify(exc: Exception) -> Exception:
    """The exception a failed SDK call becomes: HarnessBroken, ItemSkipped or
    TransientModelError."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        return classify_status(exc.status_code, _message(exc))
    return TransientModelError(f"{type(exc).__name__} after the retries: {exc}")


def _message(exc: Any) -> str:
    """The API's own error message of a status error (its body), else the exception's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc)


def _retryable(exc: Exception) -> bool:
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        if exc.response.headers.get("x-should-retry") in ("true", "false"):
            return exc.response.headers["x-should-retry"] == "true"
        return faults.retry_status(exc.status_code)
    return isinstance(exc, anthropic.APIConnectionError)  # a reset, a refused connection


def call_within(client: Any, deadline: float, *, pace: Any = None,
                **kwargs: Any) -> tuple[Any | None, int]:
    """One Messages API call within `deadline` (time.monotonic(), or the pace's item clock),
    retried as faults.call_within says. Returns (the response, or None when the deadline
    passed; the attempts made)."""
    import anthropic

    sdk = faults.SdkFaults(timeout_error=anthropic.APITimeoutError,
                           api_error=anthropic.APIError, retryable=_retryable, classify=classify)
    return faults.call_within(client.messages.create, deadline, sdk, attempts=ATTEMPTS,
                              pace=pace, cut=lambda seconds: cut_at(client, seconds), **kwargs)


def _cache_latest(messages: list[dict[str, Any]]) -> None:
    """Move the conversation's rolling cache breakpoint to its latest block, so each round of a
    tool loop reads the rounds before it from the cache (the data block keeps its own)."""
    for message in messages[1:]:
        for block in message["content"]:
            if isinstance(block, dict):
                block.pop("cache_control", None)
    if len(messages) > 1 and isinstance(messages[-1]["content"][-1], dict):
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


def served(response: Any, attempts: int) -> dict[str, Any]:
    """What one call was served: the model id, the stop reason, the request id."""
    return {"model": getattr(response, "model", None),
            "stop_reason": getattr(response, "stop_reason", None),
            "request_id": getattr(response, "_request_id", None), "attempts": attempts}


def _empty(response: Any) -> bool:
    """Whether a message carries nothing (faults.empty_reply)."""
    return faults.empty_reply(response.model_dump(mode="json"))


def _usage(response: Any) -> dict[str, int]:
    usage = getattr(response, "usage", None)
    return {"input": int(getattr(usage, "input_tokens", 0) or 0),
            "output": int(getattr(usage, "output_tokens", 0) or 0),
            "cache_read": int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            "cache_write": int(getattr(usage, "cache_creation_input_tokens", 0) or 0)}


class AnthropicAgent(Dialect, Batching, BaseAgent):
    name = "anthropic"  # a model, threadsafe, a together session in one conversation (Dialect)
    default_with_models = True
    batches = True  # --batch: the Message Batches API (agents/support/batch.py)
    completes = True  # the judge may ask through it (`complete`)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.item_timeout = settings.limits.item_timeout
        self.max_tokens = settings.model.max_tokens
        self.effort = settings.model.effort
        self.max_rounds = settings.limits.max_rounds
        # the first-party API keeps its cache keys; Bedrock and Vertex are other endpoints
        self.connect(settings, "anthropic-messages" if settings.model.provider == "anthropic"
                     else f"{settings.model.provider}-messages")

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        check_models(settings)
        sampling = sampling_problem(settings)
        if sampling:
            return sampling
        if settings.model.batch and settings.model.provider != "anthropic":
            return (f"--batch goes through the Message Batches API of Anthropic's own API; "
                    f"{settings.model.provider}'s batch inference is another job API (files in "
                    "cloud storage), not supported: leave out --batch or --provider")
        if asking:
            return provider_problem(settings.model.provider)
        return None

    def new_client(self) -> Any:
        return make_client(self.settings.model.provider)

    def batch_api(self) -> AnthropicBatches:
        return AnthropicBatches()

    def batch_endpoint(self) -> str | None:
        return endpoint_of(self.settings.model.provider)

    def first_request(self, task: Task) -> dict[str, Any]:
        """The item's first (for a reading condition, only) request, as `ask` sends it: framed
        as Claude Code frames it (agents.framing), so both backends ask the same way."""
        frame = framing(self.settings.model.provider)
        task.sent["framing"] = {"identity": frame["identity"], "date": frame["date"],
                                "added_by": "the anthropic agent, as Claude Code adds them"}
        kwargs: dict[str, Any] = {
            "model": self.settings.model_id(task.model), "max_tokens": self.token_limit(task),
            "system": [{"type": "text", "text": frame["identity"]},
                       {"type": "text", "text": task.prompt.system}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": frame["reminder"]},
                {"type": "text", "text": task.prompt.context,
                 "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": task.prompt.question}]}]}
        tools = tools_for(task.condition, together=bool(task.together))
        if tools:
            kwargs["tools"] = tools
        if self.effort:
            kwargs["output_config"] = {"effort": self.effort}
        kwargs.update(self.sampling())
        return kwargs

    def from_batch(self, client: Any, request: dict[str, Any], task: Task
                   ) -> tuple[Any, int, bool]:
        """The item's one request answered through the session's batch
        (agents/support/batch.py)."""
        import anthropic

        return self.through_batch(
            task, load=anthropic.types.Message.model_validate,
            interactive=lambda: self.gated(  # its own deadline: from now
                client, time.monotonic() + self.item_timeout * task.share, request,
                task.repeat))

    def token_limit(self, task: Task) -> int:
        """The output limit of each call: --max-tokens, raised for a together session so every
        question has room (loop.token_limit)."""
        return token_limit(self.max_tokens, task)

    def ask(self, task: Task) -> Answer:
        return run_loop(self, task, self.client(), item_timeout=self.item_timeout,
                        max_rounds=self.max_rounds, max_tokens=self.token_limit(task),
                        batched=self.batched(task))

    # --- the tool loop's dialect (agents/loop.py) ----------------------------------------------

    def conversation(self, task: Task) -> dict[str, Any]:
        import anthropic

        first = self.first_request(task)
        task.sent.update({"backend": "messages-api", "client": f"anthropic-sdk "
                          f"{anthropic.__version__}", "model": first["model"],
                          "max_tokens": first["max_tokens"], "effort": self.effort,
                          "thinking": None, "temperature": self.settings.model.temperature,
                          "top_p": self.settings.model.top_p})
        return {"system": first["system"], "messages": first["messages"]}

    def tools(self, task: Task) -> list[dict[str, Any]]:
        return tools_for(task.condition, together=bool(task.together))

    def request(self, task: Task, conversation: Any, tools: list[dict[str, Any]],
                last: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.settings.model_id(task.model),
                                  "max_tokens": self.token_limit(task),
                                  "system": conversation["system"],
                                  "messages": conversation["messages"]}
        if tools:
            kwargs["tools"] = tools
            if last:
                kwargs["tool_choice"] = {"type": "none"}
        if self.effort:
            kwargs["output_config"] = {"effort": self.effort}
        kwargs.update(self.sampling())
        _cache_latest(conversation["messages"])
        return kwargs

    def call(self, client: Any, deadline: float, request: dict[str, Any],
             task: Task) -> tuple[Any, int, bool]:
        return self.gated(client, deadline, request, task.repeat)

    def empty(self, response: Any) -> bool:
        return _empty(response)

    def spend(self, conversation: Any, answer: Answer, response: Any) -> None:
        self._count(answer, getattr(response, "usage", None))

    def served(self, response: Any, attempts: int, hit: bool) -> dict[str, Any]:
        return {**served(response, attempts), **({"cache_hit": True} if hit else {})}

    def read(self, response: Any, offered: bool) -> Turn:
        uses = [b for b in response.content if b.type == "tool_use"]
        calls = [ToolCall(id=b.id, name=b.name, arguments=dict(b.input or {}), raw=b.input)
                 for b in uses] if response.stop_reason == "tool_use" else []
        return Turn(text="\n".join(b.text for b in response.content if b.type == "text"),
                    calls=calls, truncated=response.stop_reason == "max_tokens",
                    refused="the model refused to answer (stop_reason refusal)"
                    if response.stop_reason == "refusal" else None)

    def reply(self, conversation: Any, response: Any,
              results: list[tuple[ToolCall, str, bool]], last_round_next: bool) -> None:
        messages = conversation["messages"]
        messages.append({"role": "assistant",
                         "content": [b.model_dump(exclude_none=True) for b in response.content]})
        blocks: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": call.id, "content": text,
             "is_error": is_error} for call, text, is_error in results]
        if last_round_next:
            blocks.append({"type": "text", "text": LAST_ROUND})
        messages.append({"role": "user", "content": blocks})

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion:
        """One plain call (the judge's), within `timeout` seconds, retries included; never
        from the response cache (the judge's two passes must be two requests)."""
        response, attempts, _ = self.gated(
            self.client(), self.gate.clock() + timeout, {
                "model": model, "max_tokens": max_tokens, "system": system,
                "messages": [{"role": "user", "content": text}]}, 0, use_cache=False)
        if response is None:
            raise TransientModelError(f"the call ran past {timeout:g} s")
        usage = getattr(response, "usage", None)
        return Completion(
            text="\n".join(b.text for b in response.content if b.type == "text"),
            tokens={"input": int(getattr(usage, "input_tokens", 0) or 0),
                    "output": int(getattr(usage, "output_tokens", 0) or 0)},
            sent=served(response, attempts))

    def sampling(self) -> dict[str, float]:
        """--temperature and --top-p, when set."""
        return {k: v for k, v in (("temperature", self.settings.model.temperature),
                                  ("top_p", self.settings.model.top_p)) if v is not None}

    def gated(self, client: Any, deadline: float, kwargs: dict[str, Any], repeat: int, *,
              use_cache: bool = True) -> tuple[Any, int, bool]:
        """One call through the response cache and the spending cap (agents/support/cache.py):
        (the response or None past the deadline, the attempts, whether it was a cache hit)."""
        import anthropic

        sent = json.loads(json.dumps(kwargs))  # the request as it is now (messages grow)
        return self.gate.call(
            sent, endpoint=endpoint_of(self.settings.model.provider), repeat=repeat,
            model_id=str(kwargs["model"]), max_tokens=int(kwargs["max_tokens"]),
            send=lambda: call_within(client, deadline,
                                     pace=self.gate.ticket(sent, int(kwargs["max_tokens"])),
                                     **sent),
            dump=lambda r: r.model_dump(mode="json", exclude_unset=True),
            load=anthropic.types.Message.model_validate, usage=_usage, use_cache=use_cache)

    @staticmethod
    def _count(answer: Answer, usage: Any) -> None:
        if usage is None:
            return
        answer.tokens["input"] += int(getattr(usage, "input_tokens", 0) or 0)
        answer.tokens["output"] += int(getattr(usage, "output_tokens", 0) or 0)
        answer.tokens["cache_read"] += int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        answer.tokens["cache_write"] += int(getattr(usage, "cache_creation_input_tokens", 0) or 0)


AGENTS = (AnthropicAgent,)
