"""`gold`: runs each question's reference query; must score 100% under every condition."""

from __future__ import annotations

from pytest_kgbench.agents.reference import ReferenceAgent


class GoldAgent(ReferenceAgent):
    name = "gold"
    which = "gold"
    must_pass = True
    default_without_models = True


AGENTS = (GoldAgent,)
