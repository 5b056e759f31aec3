"""Power before spending: the probability that a question set detects a difference between two
conditions at p < 0.05 (exact McNemar on question passes), by simulating the synthetic agent.

The simulation uses the synthetic agent's own draw: an item is answered with gold at the
condition's probability, with the trap otherwise. On L3 the trap answer is wrong by construction
(every L3 trap differs from its key: `kgbench check` and the seed-property test hold it), so an L3
item is correct exactly when it drew gold. Pure module: no pytest.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_kgbench import stats
from pytest_kgbench.stats import draw


@dataclass(frozen=True)
class Power:
    effect: float
    baseline: float
    n_questions: int
    repeats: int
    simulations: int
    detected: int

    @property
    def probability(self) -> float:
        return self.detected / self.simulations

    @property
    def ci95(self) -> tuple[float, float] | None:
        return stats.wilson(self.detected, self.simulations)


def simulate(n_questions: int, *, baseline: float, effect: float, repeats: int,
             simulations: int = 1000, seed: int = 0, alpha: float = 0.05) -> Power:
    """Simulate `simulations` runs of two conditions (baseline, baseline + effect) over
    `n_questions` questions asked `repeats` times; count runs with McNemar p < alpha."""
    p_a, p_b = baseline, min(baseline + effect, 1.0)
    detected = 0
    for sim in range(simulations):
        a_only = b_only = 0
        for q in range(n_questions):
            score_a = sum(draw(seed, sim, q, "A", r) < p_a for r in range(repeats)) / repeats
            score_b = sum(draw(seed, sim, q, "B", r) < p_b for r in range(repeats)) / repeats
            pass_a, pass_b = stats.passes(score_a), stats.passes(score_b)
            a_only += pass_a and not pass_b
            b_only += pass_b and not pass_a
        if stats.mcnemar_exact(a_only, b_only) < alpha:
            detected += 1
    return Power(effect, baseline, n_questions, repeats, simulations, detected)
