"""`trap`: answers each question with its trap query, the naive reading it was built to catch.
It is the floor that shows the questions discriminate."""

from __future__ import annotations

from pytest_kgbench.agents.reference import ReferenceAgent


class TrapAgent(ReferenceAgent):
    name = "trap"
    which = "trap"


AGENTS = (TrapAgent,)
