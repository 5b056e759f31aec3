"""Agents, what answers an item: the model providers (`models/`), the reference agents
(`reference/`: gold, trap, synthetic), the replay of a stored run, and what the model agents
share (`support/`). Each agent is one module of this package exposing `AGENTS`,
its agent classes (the registry finds them); a plugin adds one through `pytest_kgbench_agents`.
A new agent is a new file, nothing else changes.

Every agent class subclasses `BaseAgent`, which says what the harness needs to know and
declares each optional capability with its default (`threadsafe`, `batches`, `completes`,
`selects`, `abort`), so nothing is probed for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, cast

from pytest_kgbench.core.registry import Registry, given

LAST_ROUND = "You have used your last round of tools. Answer now, from what you have."
"""What a model is told with the results of its last round of tools (every backend)."""

AGENT_SDK_IDENTITY = "You are a Claude agent, built on Anthropic's Claude Agent SDK."
VERTEX_IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."


def framing(provider: str, day: str | None = None) -> dict[str, str]:
    """What Claude Code (2.1, print mode with --system-prompt) puts around our prompt, which it
    cannot be told to leave out, and which the anthropic agent therefore sends too, so both
    Anthropic backends ask the same way: `identity`, a system block before ours (on Vertex
    Claude Code names itself), and `reminder`, a first user block with today's `date` (the
    machine's local date, as Claude Code's): the credit questions are date-bound."""
    import datetime as dt

    day = day or dt.date.today().isoformat()
    return {"identity": VERTEX_IDENTITY if provider == "vertex" else AGENT_SDK_IDENTITY,
            "date": day,
            "reminder": "<system-reminder>\nAs you answer the user's questions, you can use the "
                        "following context:\n# currentDate\nToday's date is " + day + ".\n\n"
                        "      IMPORTANT: this context may or may not be relevant to your tasks. "
                        "You should not respond to this context unless it is highly relevant to "
                        "your task.\n</system-reminder>\n\n"}

if TYPE_CHECKING:
    from pytest_kgbench.agents.support.served import Facts
    from pytest_kgbench.asking.cases import Case
    from pytest_kgbench.asking.pacing import Pace
    from pytest_kgbench.asking.prompts import Prompt
    from pytest_kgbench.core.conditions import Condition
    from pytest_kgbench.core.questions import Question
    from pytest_kgbench.core.settings import Settings
    from pytest_kgbench.engines.guard import Guard
    from pytest_kgbench.packs.build import Built
    from pytest_kgbench.scoring.answers import Answer


@dataclass
class Task:
    """Everything an agent may use for one item. Model agents read only `prompt` and use
    `executor` through their tools; reference agents also read the question's queries."""

    question: Question
    condition: Condition
    prompt: Prompt
    guard: Guard
    built: Built
    model: str
    repeat: int
    executor: Any = None
    together: tuple[str, ...] = ()  # asked together: the ids of every question of the session
    # what the agent actually sent and was served (model id, stop reason, request ids, client
    # version, effort, token limit): a model agent fills it in, the item's record keeps it
    sent: dict[str, Any] = field(default_factory=dict)

    @property
    def share(self) -> int:
        """How many questions this call answers: budgets (rounds, time) scale with it, so a
        question gets the same budget asked apart or together."""
        return max(1, len(self.together))


@dataclass
class Completion:
    """One plain call's reply (no tools): what the judge reads, and what it cost."""

    text: str
    tokens: dict[str, int]
    sent: dict[str, Any] = field(default_factory=dict)


class BaseAgent(ABC):
    """What answers an item: every agent class, shipped or a plugin's, subclasses it. The class
    attributes tell the harness how to treat the agent; each optional capability is declared
    here with its default, so nothing probes for it.

    Its `kind` is one of AGENT_KINDS: "model" (a model wrote the answer), "reference" (the
    question's own queries answered: gold, trap, the synthetic simulator) or "replay" (a
    stored run's answers, asked again)."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = "model"
    asks_together: ClassVar[bool] = False  # answers a together session in one conversation
    judged: ClassVar[bool] = True          # the judge reads its answers to "why" questions
    simulated: ClassVar[bool] = False      # its answers are drawn: every report says SIMULATED
    must_pass: ClassVar[bool] = False      # every item must be correct, or it fails (gold)
    default_with_models: ClassVar[bool] = False     # the agent of a run naming models only
    default_without_models: ClassVar[bool] = False  # the agent of a run naming neither
    threadsafe: ClassVar[bool] = False  # --concurrency may run its `ask` on several threads
    batches: ClassVar[bool] = False     # takes --batch (then the runtime sets the two below)
    completes: ClassVar[bool] = False   # has `complete`: the judge may ask through it

    batch_plan: Callable[[], list[Any]] | None = None  # --batch: the tasks to submit at once
    batch_say: Callable[[str], None] | None = None     # --batch: what to tell the user
    registry: Registry | None = None  # the session's pieces, set by the runtime (None: shipped)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        """Before anything runs: why this run cannot use the agent (a missing credential, an
        unknown model, a stored run that does not exist), or None. `asking` is False when
        nothing will be asked (--collect-only, --estimate)."""
        return None

    @classmethod
    def server_facts(cls, settings: Settings, model: str, *, speed: bool) -> Facts | None:
        """What the server `model` is asked at says of it (agents/support/served.py): the
        window it serves, and with `speed` its tokens per second measured here. None for an
        agent that asks no server of the user's (a provider's API: the project's table gives
        the window and the price)."""
        return None

    @classmethod
    def selects(cls, settings: Settings) -> Callable[[Case], bool] | None:
        """Which collected items this agent can ask (a replay: the stored run's), or None for
        all; the others are deselected at collection."""
        return None

    @abstractmethod
    def ask(self, task: Task) -> Answer:
        """Answer one item (or, with `task.together`, one together session). Never raises
        for a wrong answer; raises `HarnessBroken` when the harness cannot measure and
        `TransientModelError` for a failure worth retrying."""

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion:
        """One plain call (the judge's), for an agent that says `completes`. Raises
        `TransientModelError` or `HarnessBroken` as `ask` does."""
        raise NotImplementedError(f"the {self.name} agent makes no plain call")

    def abort(self) -> None:  # noqa: B027 - an optional capability: nothing to cut by default
        """Cut the requests in flight (a stopping run)."""

    def keep_pace(self, pace: Pace) -> None:  # noqa: B027 - nothing to pace by default
        """Make the agent's requests keep to the process's pace (--rpm, --tpm, the 429 pause,
        the stop of a halting run): a model agent's gate takes it (support/cache.py)."""

    def close(self) -> None:  # noqa: B027 - an optional capability: nothing held by default
        """Release what the agent opened for itself (the reference agents' stores rebuilt
        from a prompt's text, with their worker processes and temporary files)."""


AGENT_KINDS = ("model", "reference", "replay")
"""model: a model wrote the answer; reference: the question's own queries answered (gold,
trap, the synthetic simulator); replay: a stored run's answers, asked again."""


def agent_class(name: str, registry: Registry | None = None) -> type[BaseAgent]:
    """The agent class `name` of `registry` (the shipped agents where none is passed)."""
    return cast("type[BaseAgent]", given(registry).get("agents", name, "--agent"))
