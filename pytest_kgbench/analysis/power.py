"""Power before spending: the probability that a question set detects a difference between two
conditions at p < 0.05 (exact McNemar on question passes), by simulating the synthetic agent.

The simulation uses the synthetic agent's own draw: an item is answered with gold at the
condition's probability, with the trap otherwise. The trap answer's actual grade under each
condition can be given (`kgbench power --condition A B` computes it): on L3 it is wrong on the
raw data by construction, but a store that applies the definitions (D3's executed tables) can
make the naive query right. Pure module: no pytest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_kgbench.analysis import stats
from pytest_kgbench.analysis.stats import draw


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


# many parameters: the keyword-only options of one simulation (kgbench power's flags)
def simulate(n_questions: int, *, baseline: float, effect: float, repeats: int,
             simulations: int = 1000, seed: int = 0, alpha: float = 0.05,
             trap_right: tuple[Sequence[bool], Sequence[bool]] = ((), ())) -> Power:
    """Simulate `simulations` runs of two conditions (baseline, baseline + effect) over
    `n_questions` questions asked `repeats` times; count runs with McNemar p < alpha.

    An item is right when it draws the gold answer, or when it draws the trap answer and that
    answer is right for the question under the condition (`trap_right`, per question and
    condition: under D3 the naive query over the executed tables can be right). Without it
    every trap answer is taken to be wrong."""
    p_a, p_b = baseline, min(baseline + effect, 1.0)
    right_a = list(trap_right[0]) or [False] * n_questions
    right_b = list(trap_right[1]) or [False] * n_questions
    detected = 0
    for sim in range(simulations):
        a_only = b_only = 0
        for q in range(n_questions):
            score_a = sum(draw(seed, sim, q, "A", r) < p_a or right_a[q]
                          for r in range(repeats)) / repeats
            score_b = sum(draw(seed, sim, q, "B", r) < p_b or right_b[q]
                          for r in range(repeats)) / repeats
            pass_a, pass_b = stats.passes(score_a), stats.passes(score_b)
            a_only += pass_a and not pass_b
            b_only += pass_b and not pass_a
        if stats.mcnemar_exact(a_only, b_only) < alpha:
            detected += 1
    return Power(effect, baseline, n_questions, repeats, simulations, detected)
