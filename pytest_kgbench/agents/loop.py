"""The one tool loop every model provider runs: rounds, the item's deadline, the last-round
rule, tool dispatch, empty replies, truncation and refusals, and what the item used. A provider
is a thin `Dialect`: how its request is written, how a reply is sent (through the response
cache, the spending cap and, for the first round, a batch), how a reply is read, and how tool
results go back. The loop is the same for all of them, so a fix to it reaches every provider,
and a new provider is one small file (docs/extending.md).

The rules, in order, for each round up to `--max-rounds` (scaled by the questions a together
session asks):
- the last round offers the tools no more (each dialect's own "none" tool choice), and the
  results of the round before it carry `agents.LAST_ROUND`;
- a reply is fetched within the item's one deadline (`--item-timeout`, every retry and round
  inside it); a batched first round waits for its batch, which is not the model's time;
- an empty reply is asked again (`faults.retry_empty`), and counted;
- a reply that calls tools, in a round before the last, has each call run through
  `asking.tools.call_tool` (a call whose arguments do not parse is answered with why) and the
  results sent back;
- any other reply is the answer: its text, its answer block, and its status (truncated at the
  output limit, refused, or empty after the retries).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_kgbench.agents.support import faults
from pytest_kgbench.agents.support.cache import Gate, abort_connections, track_connections
from pytest_kgbench.asking.tools import call_tool
from pytest_kgbench.core.interrupt import shielded
from pytest_kgbench.scoring.answers import Answer, extract_block

if TYPE_CHECKING:
    from pytest_kgbench.agents import Task
    from pytest_kgbench.asking.pacing import Pace
    from pytest_kgbench.core.settings import Settings

ATTEMPTS = 3
"""One call and two retries (the SDKs' own default), all within the item's deadline; an empty
reply is asked again as often (faults.retry_empty)."""


@dataclass
class ToolCall:
    """One tool call of a reply: its id, the tool's name, and its arguments, or (`arguments`
    None) the raw text that did not parse and why (`problem`)."""

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw: Any = None
    problem: str | None = None


@dataclass
class Turn:
    """One reply as the loop reads it."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)  # the tools it asks to run
    truncated: bool = False     # cut at the output limit
    refused: str | None = None  # why it counts as a refusal, or None


@dataclass
class Sent:
    """One round's reply: the response (None: the deadline passed), the attempts it took,
    whether the response cache served it, and how many empty replies came before it."""

    response: Any
    attempts: int
    hit: bool
    empties: int = 0


class Dialect(ABC):
    """What a provider tells the loop. The agent class implements it; `run_loop` does the
    rest. `gate` is the agent's `cache.Gate` (its clock, the response cache, the cap); the
    agent's `__init__` calls `connect`."""

    # what every agent answering through this loop is (BaseAgent's declarations): a model;
    # a together session answered in one conversation; `ask` safe on several threads (one
    # client, shared); its answers to "why" questions read by the judge
    kind: ClassVar[str] = "model"
    asks_together: ClassVar[bool] = True
    threadsafe: ClassVar[bool] = True
    judged: ClassVar[bool] = True

    gate: Gate
    _client: Any
    _client_lock: threading.Lock

    def connect(self, settings: Settings, provider: str) -> None:
        """No client yet (`client` makes it at first use), its lock, and the gate, whose
        response cache keys name `provider` (the API: "openai-chat", ...)."""
        self._client = None
        self._client_lock = threading.Lock()
        self.gate = Gate(settings, provider)

    @abstractmethod
    def new_client(self) -> Any:
        """The provider's SDK client, made once per agent (`client`); raises HarnessBroken
        for a missing credential."""

    def client(self) -> Any:
        """The agent's one client, made at first use, never left half-made by a Ctrl-C
        (interrupt.shielded), its connections tracked so a stopping run can cut them."""
        with self._client_lock:
            if self._client is None:
                with shielded():
                    self._client = self.new_client()
                track_connections(self._client)
            return self._client

    def abort(self) -> None:
        """Cut the connections of the requests in flight (a stopping run: inflight.close)."""
        abort_connections(self._client)

    def keep_pace(self, pace: Pace) -> None:
        """The process's pace, kept by every request the gate sends."""
        self.gate.pace = pace

    @abstractmethod
    def conversation(self, task: Task) -> Any:
        """The item's conversation before the first round (what `request` extends)."""

    @abstractmethod
    def tools(self, task: Task) -> list[dict[str, Any]]:
        """The tools the condition offers, in the provider's spelling (empty: none)."""

    @abstractmethod
    def request(self, task: Task, conversation: Any, tools: list[dict[str, Any]],
                last: bool) -> dict[str, Any]:
        """The round's request; `last`: the round in which no tool may be called."""

    @abstractmethod
    def call(self, client: Any, deadline: float, request: dict[str, Any],
             task: Task) -> tuple[Any, int, bool]:
        """One call through the response cache and the spending cap: (the response or None
        past the deadline, the attempts, whether the cache served it)."""

    @abstractmethod
    def from_batch(self, client: Any, request: dict[str, Any], task: Task
                   ) -> tuple[Any, int, bool]:
        """The first round's request answered through the session's batch."""

    @abstractmethod
    def empty(self, response: Any) -> bool:
        """Whether a reply carries nothing (no text, no tool call)."""

    @abstractmethod
    def spend(self, conversation: Any, answer: Answer, response: Any) -> None:
        """Add a reply's tokens to the answer (only for replies the cache did not serve)."""

    @abstractmethod
    def served(self, response: Any, attempts: int, hit: bool) -> dict[str, Any]:
        """What the call was served (model id, stop reason, request id, attempts)."""

    @abstractmethod
    def read(self, response: Any, offered: bool) -> Turn:
        """The reply as the loop reads it; `offered`: whether the request offered tools."""

    @abstractmethod
    def reply(self, conversation: Any, response: Any,
              results: list[tuple[ToolCall, str, bool]], last_round_next: bool) -> None:
        """Add the reply and its tool results ((call, text, is_error) each) to the
        conversation; `last_round_next`: the next round is the last (say LAST_ROUND)."""

    def finish(self, conversation: Any, answer: Answer) -> Answer:
        """The answer as the provider hands it back (default: as it is)."""
        return answer


def token_limit(max_tokens: int, task: Task) -> int:
    """The output limit of each call: --max-tokens as given for an item asked apart, raised for
    a together session so every question has room (400 tokens each, at most 64,000)."""
    if not task.together:
        return max_tokens
    return max(max_tokens, min(64000, 400 * task.share))


def run_loop(dialect: Dialect, task: Task, client: Any, *, item_timeout: float,
             max_rounds: int, max_tokens: int, batched: bool) -> Answer:
    """Ask one item (or together session) through `dialect`'s provider: the module's rules."""
    clock = dialect.gate.clock
    start = clock()  # the item's clock: a wait for --rpm/--tpm is not the model's
    deadline = start + item_timeout * task.share
    rounds = max_rounds * task.share
    answer = Answer(tokens={"input": 0, "output": 0, "cache_read": 0, "cache_write": 0})
    conversation = dialect.conversation(task)
    tools = dialect.tools(task)
    calls: list[dict[str, Any]] = task.sent.setdefault("calls", [])
    hits = 0

    def spent(response: Any, hit: bool) -> None:
        if not hit:  # a cached response costs nothing: its tokens are not spend
            dialect.spend(conversation, answer, response)

    for round_no in range(rounds + 1):
        request = dialect.request(task, conversation, tools, last=round_no == rounds)
        if batched and round_no == 0:
            sent = _from_batch(dialect, client, request, task, spent)
            deadline = float("inf")  # the wait for a batch is not the model's time
        else:
            sent = Sent(*faults.retry_empty(
                partial(dialect.call, client, deadline, request, task), dialect.empty,
                deadline, clock, spent, ATTEMPTS))
        if sent.response is None or (not sent.hit and clock() > deadline):
            answer.status = "timeout"
            answer.error = "the item ran past --item-timeout"
            answer.latency_s = round(clock() - start, 4)
            _record(task, calls, hits)
            return dialect.finish(conversation, answer)
        calls.append({**dialect.served(sent.response, sent.attempts, sent.hit),
                      **({"empty_replies": sent.empties} if sent.empties else {})})
        answer.rounds += 1
        hits += sent.hit
        turn = dialect.read(sent.response, offered=bool(tools))
        if turn.calls and round_no < rounds:
            dialect.reply(conversation, sent.response, _run_tools(task, turn.calls, answer),
                          last_round_next=round_no == rounds - 1)
            continue
        _settle(answer, turn, sent, dialect, max_tokens)
        break
    task.sent["stop_reason"] = calls[-1]["stop_reason"] if calls else None
    _record(task, calls, hits)
    answer.latency_s = round(clock() - start, 4)
    return dialect.finish(conversation, answer)


def _from_batch(dialect: Dialect, client: Any, request: dict[str, Any], task: Task,
                spent: Callable[[Any, bool], None]) -> Sent:
    """The first round answered through the session's batch (its tokens counted)."""
    response, attempts, hit = dialect.from_batch(client, request, task)
    sent = Sent(response, attempts, hit, int(response is not None and dialect.empty(response)))
    if response is not None:
        spent(response, hit)
    return sent


def _record(task: Task, calls: list[dict[str, Any]], hits: int) -> None:
    """How many of the item's calls the response cache served, on what the item was sent."""
    task.sent["response_cache"] = {"hits": hits, "misses": len(calls) - hits}


def _settle(answer: Answer, turn: Turn, sent: Sent, dialect: Dialect, max_tokens: int) -> None:
    """The final reply as the item's answer: its text, its block, and its status."""
    answer.text = turn.text
    answer.block = extract_block(answer.text)
    if turn.truncated:
        answer.status = "truncated"
        answer.error = f"the answer was cut at the output limit ({max_tokens} tokens)"
    elif turn.refused:
        answer.status = "refused"
        answer.error = turn.refused
    elif dialect.empty(sent.response):
        answer.status = "empty"
        answer.error = (f"the model's reply was empty (no text, no tool call) "
                        f"{sent.empties} time(s) in a row")


def _run_tools(task: Task, calls: list[ToolCall], answer: Answer
               ) -> list[tuple[ToolCall, str, bool]]:
    """Each call run on the item's store, logged on the answer: (call, text, is_error)."""
    out = []
    for call in calls:
        if call.arguments is None:
            text, result = str(call.problem), None
        else:
            text, result = call_tool(task.executor, call.name, call.arguments,
                                     questions=task.together, offered=task.condition.tools)
        answer.tool_calls.append({"name": call.name,
                                  "input": call.arguments if call.arguments is not None
                                  else call.raw, "output": text[:4000]})
        if result is not None:
            answer.queries.append(result)
        out.append((call, text, bool(result is not None and not result.ok)))
    return out

