"""`anthropic`: the Messages API through the official SDK.

Reading conditions send one message. Querying conditions run a tool-use loop (list_tables,
describe, run_query) for at most --max-rounds rounds, after which the model must answer. The
data block is marked for prompt caching, so repeats and sibling questions reuse it; in a tool
loop a second, rolling breakpoint on the latest message lets each round read the rounds before
it from the cache.

Faults are classified, never confused (DESIGN §3): the SDK retries 429/529/5xx itself,
honouring retry-after; what still fails is a `TransientModelError`, which pytest-rerunfailures
reruns. A rejected or missing credential, an unknown model, or a request the API refuses as
malformed is `HarnessBroken`: the run halts. Running past --item-timeout is a `timeout` answer —
the agent failing, which is data.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.answers import Answer, extract_block
from pytest_kgbench.errors import HarnessBroken, TransientModelError
from pytest_kgbench.settings import check_models
from pytest_kgbench.tools import call_tool, tools_for

if TYPE_CHECKING:
    from pytest_kgbench.settings import Settings

LAST_ROUND = "You have used your last round of tools. Answer now, from what you have."


def has_credential() -> bool:
    """Whether the environment holds what the SDK authenticates with."""
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


def classify(exc: Exception) -> Exception:
    """The exception a failed API call becomes: HarnessBroken or TransientModelError."""
    import anthropic

    status = getattr(exc, "status_code", None)
    if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
        return HarnessBroken(f"the API rejected the credential ({status}): {exc}")
    if isinstance(exc, anthropic.NotFoundError):
        return HarnessBroken(f"the API does not know this model or endpoint (404): {exc}")
    if isinstance(exc, (anthropic.BadRequestError, anthropic.UnprocessableEntityError)):
        return HarnessBroken(f"the API refused the request as malformed ({status}): {exc}")
    return TransientModelError(f"{type(exc).__name__} after the SDK's retries: {exc}")


def _cache_latest(messages: list[dict[str, Any]]) -> None:
    """Move the conversation's rolling cache breakpoint to its latest block, so each round of a
    tool loop reads the rounds before it from the cache (the data block keeps its own)."""
    for message in messages[1:]:
        for block in message["content"]:
            if isinstance(block, dict):
                block.pop("cache_control", None)
    if len(messages) > 1 and isinstance(messages[-1]["content"][-1], dict):
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


class AnthropicAgent(BaseAgent):
    name = "anthropic"
    kind = "model"
    asks_together = True  # answers a together session in one conversation
    judged = True
    default_with_models = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.item_timeout = settings.item_timeout
        self.max_tokens = settings.max_tokens
        self.effort = settings.effort
        self.max_rounds = settings.max_rounds
        self._client: Any = None

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        check_models(settings)
        if asking and not has_credential():
            return ("no ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the environment: the "
                    "anthropic agent cannot call the API")
        return None

    def client(self) -> Any:
        if self._client is None:
            import anthropic

            key = os.environ.get("ANTHROPIC_API_KEY")
            token = os.environ.get("ANTHROPIC_AUTH_TOKEN")
            if not has_credential():
                raise HarnessBroken("no ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN) in the "
                                    "environment: the anthropic agent cannot call the API")
            self._client = anthropic.Anthropic(
                api_key=key, auth_token=None if key else token,
                base_url=os.environ.get("ANTHROPIC_BASE_URL") or None, max_retries=2)
        return self._client

    def ask(self, task: Task) -> Answer:
        import anthropic

        client = self.client()
        model = self.settings.model_id(task.model)
        start = time.monotonic()
        deadline = start + self.item_timeout * task.share
        max_rounds = self.max_rounds * task.share
        answer = Answer(tokens={"input": 0, "output": 0, "cache_read": 0, "cache_write": 0})
        system = [{"type": "text", "text": task.prompt.system}]
        messages: list[dict[str, Any]] = [{"role": "user", "content": [
            {"type": "text", "text": task.prompt.context, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": task.prompt.question}]}]
        tools = tools_for(task.condition, together=bool(task.together))
        max_tokens = max(self.max_tokens, min(64000, 400 * task.share))
        for round_no in range(max_rounds + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._timeout(answer, start)
            kwargs: dict[str, Any] = {"model": model, "max_tokens": max_tokens,
                                      "system": system, "messages": messages,
                                      "timeout": remaining}
            if tools:
                kwargs["tools"] = tools
                if round_no == max_rounds:
                    kwargs["tool_choice"] = {"type": "none"}
            if self.effort:
                kwargs["output_config"] = {"effort": self.effort}
            _cache_latest(messages)
            try:
                response = client.messages.create(**kwargs)
            except anthropic.APITimeoutError as exc:
                if time.monotonic() >= deadline - 0.05:
                    return self._timeout(answer, start)
                raise classify(exc) from exc
            except anthropic.APIError as exc:
                raise classify(exc) from exc
            except ValueError as exc:  # a body that is not JSON (json.JSONDecodeError)
                raise TransientModelError(f"the API sent a malformed body: {exc}") from exc
            if time.monotonic() > deadline:
                return self._timeout(answer, start)  # the SDK's own retries ran past the budget
            answer.rounds += 1
            self._count(answer, getattr(response, "usage", None))
            tool_uses = [b for b in response.content if b.type == "tool_use"]
            if response.stop_reason == "tool_use" and tool_uses and round_no < max_rounds:
                messages.append({"role": "assistant",
                                 "content": [b.model_dump(exclude_none=True)
                                             for b in response.content]})
                results: list[dict[str, Any]] = []
                for use in tool_uses:
                    text, result = call_tool(task.executor, use.name, dict(use.input or {}),
                                             questions=task.together)
                    answer.tool_calls.append({"name": use.name, "input": use.input,
                                              "output": text[:4000]})
                    if result is not None:
                        answer.queries.append(result)
                    results.append({"type": "tool_result", "tool_use_id": use.id,
                                    "content": text,
                                    "is_error": bool(result is not None and not result.ok)})
                if round_no == max_rounds - 1:
                    results.append({"type": "text", "text": LAST_ROUND})
                messages.append({"role": "user", "content": results})
                continue
            answer.text = "\n".join(b.text for b in response.content if b.type == "text")
            answer.block = extract_block(answer.text)
            break
        answer.latency_s = round(time.monotonic() - start, 4)
        return answer

    @staticmethod
    def _count(answer: Answer, usage: Any) -> None:
        if usage is None:
            return
        answer.tokens["input"] += int(getattr(usage, "input_tokens", 0) or 0)
        answer.tokens["output"] += int(getattr(usage, "output_tokens", 0) or 0)
        answer.tokens["cache_read"] += int(getattr(usage, "cache_read_input_tokens", 0) or 0)
        answer.tokens["cache_write"] += int(getattr(usage, "cache_creation_input_tokens", 0) or 0)

    @staticmethod
    def _timeout(answer: Answer, start: float) -> Answer:
        answer.status = "timeout"
        answer.error = "the item ran past --item-timeout"
        answer.latency_s = round(time.monotonic() - start, 4)
        return answer


AGENTS = (AnthropicAgent,)
