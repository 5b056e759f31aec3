"""Agents: what answers an item. Each agent is one module of this package exposing `AGENT`, a
factory taking the session's settings; a new agent is a new file, nothing else changes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from pytest_kgbench.errors import InputError

if TYPE_CHECKING:
    from pytest_kgbench.answers import Answer
    from pytest_kgbench.conditions import Condition
    from pytest_kgbench.executors.guard import Guard
    from pytest_kgbench.packs import Built
    from pytest_kgbench.prompts import Prompt
    from pytest_kgbench.questions import Question
    from pytest_kgbench.settings import Settings

KNOWN = ("gold", "trap", "synthetic", "anthropic", "claude-cli", "replay")
"""Agents shipped with the plugin (modules of this package)."""


@dataclass
class Task:
    """Everything an agent may use for one item. Model agents read only `prompt` and use
    `executor` through their tools; reference agents also read the question's queries."""

    question: "Question"
    condition: "Condition"
    prompt: "Prompt"
    guard: "Guard"
    built: "Built"
    model: str
    repeat: int
    executor: Any = None
    together: tuple[str, ...] = ()  # asked together: the ids of every question of the session

    @property
    def share(self) -> int:
        """How many questions this call answers: budgets (rounds, time) scale with it, so a
        question gets the same budget asked apart or together."""
        return max(1, len(self.together))


class Agent(Protocol):
    name: str

    def ask(self, task: Task) -> "Answer": ...


def make_agent(name: str, settings: "Settings") -> Agent:
    """The agent called `name` (module `pytest_kgbench.agents.<name>`)."""
    module_name = name.replace("-", "_")
    try:
        module = importlib.import_module(f"{__name__}.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module_name}":
            raise
        raise InputError("--agent", f"unknown agent '{name}' (known: {', '.join(KNOWN)})") from exc
    factory: Callable[["Settings"], Agent] = getattr(module, "AGENT")
    return factory(settings)
