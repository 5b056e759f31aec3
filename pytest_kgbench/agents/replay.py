"""`replay`: answers from a stored run's answers.jsonl (`--replay-run RUN`), calling no model.

Every item takes the stored answer of the same question, variant, condition, model and repeat,
and today's grader grades it; an item the stored run never answered gets an error answer (a
miss), so a replay can never look better than the run it replays.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.answers import Answer
from pytest_kgbench.errors import InputError
from pytest_kgbench.record import read_answers

if TYPE_CHECKING:
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


class ReplayAgent(BaseAgent):
    name = "replay"
    kind = "replay"
    judged = False

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        replay_path(settings)  # raises InputError naming the option
        return None

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.path = replay_path(settings)
        self.answers: dict[tuple[Any, ...], dict[str, Any]] = {}
        for rec in read_answers(self.path / "answers.jsonl"):
            key = (rec["pack"], rec["variant"], rec["question"], rec["condition"], rec["model"],
                   rec["repeat"])
            self.answers[key] = rec["answer"]

    def ask(self, task: Task) -> Answer:
        key = (task.question.pack, task.built.variant, task.question.id, task.condition.id,
               task.model, task.repeat)
        stored = self.answers.get(key)
        if stored is None:
            return Answer(status="error", error=f"no stored answer in {self.path}")
        return Answer.from_dict(stored)


AGENTS = (ReplayAgent,)
