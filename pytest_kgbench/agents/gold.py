"""`gold`: runs each question's reference query; must score 100% under every condition."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_kgbench.agents.reference import ReferenceAgent

if TYPE_CHECKING:
    from pytest_kgbench.settings import Settings


def AGENT(settings: "Settings") -> ReferenceAgent:  # noqa: N802 - the registry's name
    return ReferenceAgent("gold", "gold")
