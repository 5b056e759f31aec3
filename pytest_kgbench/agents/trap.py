"""`trap`: answers each question with its trap query, the naive reading it was built to catch.
It is the floor that shows the questions discriminate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_kgbench.agents.reference import ReferenceAgent

if TYPE_CHECKING:
    from pytest_kgbench.settings import Settings


def AGENT(settings: "Settings") -> ReferenceAgent:  # noqa: N802 - the registry's name
    return ReferenceAgent("trap", "trap")
