"""Agents, what answers an item: the model providers (`models/`), the reference agents
(`reference/`: gold, trap, synthetic), the replay of a stored run, and what the model agents
share (`support/`). Each agent is one module of this package exposing `AGENTS`,
its agent classes (the registry finds them); a plugin adds one through `pytest_kgbench_agents`.
A new agent is a new file, nothing else changes.

An agent class carries what the harness needs to know (`registry.Agent`): its `name`, its
`kind` (model, reference or replay), whether it `asks_together` (answers a together session in
one conversation), whether the judge reads its answers (`judged`), whether its answers are
drawn (`simulated`), and `check(settings, asking)`, run before anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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


class Completes(Protocol):
    """A model agent that can also make one plain call (the judge's): the judge works through
    the backend the run uses. Raises `TransientModelError` or `HarnessBroken` as `ask` does."""

    def complete(self, system: str, text: str, *, model: str, max_tokens: int,
                 timeout: float) -> Completion: ...


class BaseAgent:
    """Defaults for an agent class: a model that asks apart, judged, nothing to check."""

    name = ""
    kind = "model"
    asks_together = False
    judged = True
    simulated = False
    must_pass = False               # every item must be correct, or it fails (gold)
    default_with_models = False     # the agent of a run that names models but no agent
    default_without_models = False  # the agent of a run that names neither

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        """Why this run cannot use the agent, or None (see registry.AgentClass)."""
        return None

    def ask(self, task: Task) -> Answer:  # pragma: no cover - every agent has its own
        raise NotImplementedError
