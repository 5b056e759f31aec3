"""`replay`: answers from a stored run's answers.jsonl (`--replay-run RUN`), calling no model.

A replay asks exactly the stored run's items: an item the stored run never asked is not
collected for asking (`selects`), so a replay is neither better nor worse than the run it
replays. Every item takes the stored answer of the same question, variant, condition, model and
repeat, and today's grader grades it. An item the stored run was meant to have (its meta.json's
`expected`) but never banked is not dropped either: it is asked, has no answer to give
(`NoAnswer`), and the replay lists it as missing, so the replay of an incomplete run is
incomplete, naming what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.core.errors import InputError, NoAnswer
from pytest_kgbench.core.record import latest, read_answers, run_gaps
from pytest_kgbench.scoring.answers import Answer

if TYPE_CHECKING:
    from pytest_kgbench.asking.cases import Case
    from pytest_kgbench.core.settings import Settings


def replay_path(settings: Settings) -> Path:
    run = settings.plan.replay_run
    if not run:
        raise InputError("--replay-run", "the replay agent needs the run to replay")
    path = Path(run)
    if not path.is_dir():
        path = Path(settings.paths.reports_dir) / run
    if not (path / "answers.jsonl").is_file():
        raise InputError("--replay-run", f"{path} holds no answers.jsonl")
    return path


def never_banked(path: Path) -> dict[tuple[str, str], str]:
    """The items the stored run was meant to have and did not bank, by (question file name,
    item name), each with why (record.run_gaps)."""
    import json

    from pytest_kgbench.core.settings import stored_meta

    report: dict[str, Any] | None = None
    try:
        report = json.loads((path / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = None
    gaps = run_gaps(stored_meta(path, "--replay-run"), latest(read_answers(path / "answers.jsonl")),
                    report) or []
    out: dict[tuple[str, str], str] = {}
    for gap in gaps:
        file, _, name = gap["nodeid"].partition("::")
        out[(Path(file).name, name)] = gap["why"]
    return out


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
        """Which items this replay asks: those the stored run asked, and those it was meant to
        ask and never banked (each is then missing from the replay)."""
        path = replay_path(settings)
        stored = stored_answers(path)
        gaps = never_banked(path)
        return lambda case: (case.question.pack, case.variant, case.question.id,
                             case.condition.id, case.model, case.repeat) in stored or (
            Path(case.question.file).name, case.name) in gaps

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.path = replay_path(settings)
        self.answers = stored_answers(self.path)
        self.gaps = never_banked(self.path)

    def ask(self, task: Task) -> Answer:
        key = (task.question.pack, task.built.variant, task.question.id, task.condition.id,
               task.model, task.repeat)
        stored = self.answers.get(key)
        if stored is None:
            from pytest_kgbench.asking.cases import Case

            name = Case(task.question, task.condition, task.built.variant, task.model, self.name,
                        task.repeat).name
            why = self.gaps.get((Path(task.question.file).name, name))
            if why is not None:
                raise NoAnswer(f"run {self.path.name} never banked it ({why}): there is no "
                               "answer to replay")
            return Answer(status="error", error=f"no stored answer in {self.path}")
        return Answer.from_dict(stored)


AGENTS = (ReplayAgent,)
