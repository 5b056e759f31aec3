"""`replay`: answers from a stored run's answers.jsonl (`--replay-run RUN`), calling no model.

A replay asks exactly the stored run's items: an item the stored run never asked is not
collected for asking (`selects`), so a replay is neither better nor worse than the run it
replays. Every item takes the stored answer of the same question, variant, condition, model and
repeat, and today's grader grades it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.answers import Answer
from pytest_kgbench.errors import InputError
from pytest_kgbench.record import read_answers

if TYPE_CHECKING:
    from pytest_kgbench.cases import Case
    from pytest_kgbench.settings import Settings


def replay_path(settings: Settings) -> Path:
    run = settings.replay_run
    if not run:
        raise InputError("--replay-run", "the replay agent needs the run to replay")
    path = Path(run)
    if not path.is_dir():
        path = Path(settings.reports_dir) / run
    if not (path / "answers.jsonl").is_file():
        raise InputError("--replay-run", f"{path} holds no answers.jsonl")
    return path


def stored_answers(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A stored run's answers by (pack, variant, question, condition, model, repeat). Items it
    skipped (never asked) are not among them."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in read_answers(path / "answers.jsonl"):
        if rec.get("grade") == "skipped":
            continue
        out[(rec["pack"], rec["variant"], rec["question"], rec["condition"], rec["model"],
             rec["repeat"])] = rec["answer"]
    return out


class ReplayAgent(BaseAgent):
    name = "replay"
    kind = "replay"
    judged = False

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        replay_path(settings)  # raises InputError naming the option
        return None

    @classmethod
    def selects(cls, settings: Settings) -> Callable[[Case], bool]:
        """Which items this replay asks: those the stored run asked."""
        stored = stored_answers(replay_path(settings))
        return lambda case: (case.question.pack, case.variant, case.question.id,
                             case.condition.id, case.model, case.repeat) in stored

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.path = replay_path(settings)
        self.answers = stored_answers(self.path)

    def ask(self, task: Task) -> Answer:
        key = (task.question.pack, task.built.variant, task.question.id, task.condition.id,
               task.model, task.repeat)
        stored = self.answers.get(key)
        if stored is None:
            return Answer(status="error", error=f"no stored answer in {self.path}")
        return Answer.from_dict(stored)


AGENTS = (ReplayAgent,)
