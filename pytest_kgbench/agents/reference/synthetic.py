"""`synthetic`: a seeded simulator, labelled as such in every report. Each item gets the gold
answer with the probability set for its condition (`--synthetic D1=0.45,D2=0.7`, default
`*=0.5`) and the trap answer otherwise. It drives the statistics end to end without a model, and
`kgbench power` uses the same draw to estimate, before a paid run, whether a question set can
show a given difference.

Under a schema arm that offers discovery but does not describe the store (`--schema tools`) it
first discovers, as a model would have to: list_tables, then describe on each table (or class)
its query reads — real calls through the same tools — so the report's tool-call columns and
paired differences are exercised end to end. A probability set for a rung (`D1=0.6`) holds for
its arms unless an arm is named (`D1.none=0.2`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_kgbench.agents import BaseAgent, Task
from pytest_kgbench.agents.reference import ReferenceAgent
from pytest_kgbench.analysis.stats import draw
from pytest_kgbench.core.conditions import normal_id
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.scoring.answers import Answer

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

DEFAULT_P = 0.5


def parse_probabilities(spec: str | None) -> dict[str, float]:
    """`D1=0.45,D2=0.7,*=0.5` -> {"D1": 0.45, "D2": 0.7, "*": 0.5}; '*' defaults to 0.5."""
    out = {"*": DEFAULT_P}
    for part in (spec or "").replace(" ", "").split(","):
        if not part:
            continue
        name, sep, value = part.partition("=")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if not sep or not 0.0 <= p <= 1.0:
            raise InputError("--synthetic", f"'{part}' is not CONDITION=PROBABILITY (0 to 1)")
        out[normal_id(name) if name != "*" else "*"] = p
    return out


def gets_gold(seed: int, probabilities: Mapping[str, float], question: str, condition: str,
              model: str, repeat: int) -> bool:
    """Whether the synthetic agent answers this item with the gold answer."""
    # the condition's own, or that of its arm without the engine, or of its rung
    head = condition.partition("@")[0]
    p = next((probabilities[k] for k in (condition, head, head.partition(".")[0])
              if k in probabilities), probabilities["*"])
    return draw(seed, question, condition, model, repeat) < p


class SyntheticAgent(BaseAgent):
    name = "synthetic"
    kind = "reference"
    judged = False
    simulated = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.probabilities = parse_probabilities(settings.plan.synthetic)
        self.seed = settings.plan.stats_seed
        self.gold = ReferenceAgent(settings)
        self.trap = ReferenceAgent(settings)
        self.trap.which = "trap"

    @classmethod
    def check(cls, settings: Settings, asking: bool) -> str | None:
        parse_probabilities(settings.plan.synthetic)  # raises InputError naming the option
        return None

    def ask(self, task: Task) -> Answer:
        gold = gets_gold(self.seed, self.probabilities, task.question.id, task.condition.id,
                         task.model, task.repeat)
        discovery = self.discover(task)
        answer = (self.gold if gold else self.trap).ask(task)
        answer.tool_calls[:0] = discovery
        answer.rounds += len(discovery) and 2  # list_tables, then the describes at once
        answer.text = f"[SIMULATED: {'gold' if gold else 'trap'} answer] {answer.text}"
        return answer

    def discover(self, task: Task) -> list[dict[str, object]]:
        """The discovery calls of an arm whose prompt does not describe the store."""
        from pytest_kgbench.asking.tools import call_tool
        from pytest_kgbench.core.conditions import SCHEMA_ARMS

        cond = task.condition
        if task.executor is None or cond.mode != "querying" or \
                SCHEMA_ARMS[cond.schema].described or "describe" not in cond.tools:
            return []
        calls: list[dict[str, object]] = []
        statement = self.gold.statement(task) or ""
        listed = {t.name for t in task.executor.catalog()}
        names = ["list_tables"] + [f"describe:{t}" for t in task.executor.reads(statement)
                                   if t in listed]
        for name in names:
            tool, _, target = name.partition(":")
            args = {"name": target} if target else {}
            text, _ = call_tool(task.executor, tool, args, offered=cond.tools)
            calls.append({"name": tool, "input": args, "output": text[:4000]})
        return calls


AGENTS = (SyntheticAgent,)
