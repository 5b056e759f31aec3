"""Statistics for comparing the conditions (tiers) of an LLM benchmark.

Vocabulary: an *item* score is 1 (correct), 0.5 (partial) or 0 (wrong); each
*question* is asked several times (*repeats*).  Every function takes scores as
``Mapping[str, Sequence[float | None]]``: question id -> repeat scores, where
``None`` means "not scored" and is dropped; a question with no scored repeat is
dropped altogether.

The module is pure: no pytest import, no global random state (every random
function takes ``seed`` and builds ``numpy.random.default_rng(seed)``), and
numpy/scipy are imported lazily so importing it at pytest start-up is cheap.
All returned numbers are builtin ``float``/``int``/``bool``; NaN is never
returned (``None`` is used instead).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PASS_THRESHOLD",
    "passes",
    "draw",
    "Estimate",
    "Comparison",
    "question_means",
    "accuracy",
    "wilson",
    "mcnemar_exact",
    "min_discordant_for_significance",
    "compare",
    "holm",
    "holm_adjust",
]

#: A question passes in a condition when its mean score over repeats is MORE than this: a
#: partial answer alone (½) is not a pass.
PASS_THRESHOLD = 0.5


def passes(mean: float) -> bool:
    """Whether a question's mean score over repeats is a pass (more than ½)."""
    return mean > PASS_THRESHOLD

Scores = Mapping[str, Sequence[float | None]]
Interval = tuple[float, float]


# --------------------------------------------------------------------------- helpers


def draw(seed: int, *parts: object) -> float:
    """A uniform number in [0, 1) fixed by the seed and the parts (an item, a simulation):
    every process agrees, whatever its hash seed."""
    import hashlib

    key = "|".join(str(p) for p in (seed, *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2.0**64


def _finite(x: Any) -> float | None:
    """``float(x)``, or None when x is None or not finite (NaN/inf)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def _r(x: float | None) -> float | None:
    """A float for serialisation at its full precision (rounding is for printing only): -0.0
    becomes 0.0, NaN and infinities None."""
    f = _finite(x)
    return None if f is None else f + 0.0


def _r_interval(ci: Interval | None) -> list[float | None] | None:
    return None if ci is None else [_r(ci[0]), _r(ci[1])]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _bootstrap_mean_ci(values: Sequence[float], seed: int, n_resamples: int,
                       bounds: Interval = (0.0, 1.0)) -> Interval | None:
    """95% percentile bootstrap interval of the mean of ``values`` (each within ``bounds``).

    Empty input gives None. Where every value is the same, a bootstrap has nothing to resample
    and would give an interval of zero width; the interval is then `_degenerate_ci`'s.
    """
    if not values:
        return None
    first = values[0]
    if all(v == first for v in values):
        return _degenerate_ci(float(first), len(values), bounds)

    import numpy as np
    from scipy import stats

    result = stats.bootstrap(
        (np.asarray(values, dtype=float),),
        np.mean,
        n_resamples=n_resamples,
        vectorized=True,
        axis=0,
        confidence_level=0.95,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low = _finite(result.confidence_interval.low)
    high = _finite(result.confidence_interval.high)
    if low is None or high is None:  # pragma: no cover - guarded by the check above
        return None
    return (low, high)


def _degenerate_ci(value: float, n: int, bounds: Interval) -> Interval:
    """The 95% interval of a mean when all ``n`` values equal ``value`` (docs/statistics.md):
    none of n questions differed from it, so the share of questions that could differ is up to
    the Wilson upper bound u of 0 successes in n; each of those could lie anywhere within
    ``bounds``, moving the mean by at most u times the distance to that bound. It has width at
    every n and value (all ½ of 9 questions: 0.35–0.65; 9 differences of 0: ±0.30), and where
    every question scored 1 (or 0) it is exactly the Wilson interval of n of n (0 of n)."""
    lo, hi = bounds
    share = wilson(0, n)
    u = share[1] if share is not None else 1.0
    return (max(lo, value - u * (value - lo)), min(hi, value + u * (hi - value)))


# --------------------------------------------------------------------------- accuracy


@dataclass(frozen=True)
class Estimate:
    """Accuracy of one condition (one tier)."""

    value: float | None  # mean over questions of each question's mean over repeats
    ci95: Interval | None  # 95% bootstrap interval over questions
    n_questions: int
    passes: int  # questions with mean > PASS_THRESHOLD
    pass_rate: float | None
    pass_ci95: Interval | None  # Wilson interval on passes / n_questions

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only, JSON-safe view (floats at full precision, no NaN)."""
        return {
            "value": _r(self.value),
            "ci95": _r_interval(self.ci95),
            "n_questions": int(self.n_questions),
            "passes": int(self.passes),
            "pass_rate": _r(self.pass_rate),
            "pass_ci95": _r_interval(self.pass_ci95),
        }


def question_means(scores: Scores) -> dict[str, float]:
    """Mean score over the scored repeats of each question.

    ``None`` (and NaN) repeats are dropped; questions with no scored repeat are
    left out of the result.  Keys are returned in sorted order.
    """
    out: dict[str, float] = {}
    for qid in sorted(scores):
        kept = [f for f in (_finite(s) for s in scores[qid]) if f is not None]
        if kept:
            out[qid] = math.fsum(kept) / len(kept)
    return out


def wilson(passes: int, n: int, confidence: float = 0.95) -> Interval | None:
    """Wilson score interval for ``passes`` successes out of ``n`` (None when n == 0)."""
    if n == 0:
        return None
    if n < 0 or not 0 <= passes <= n:
        raise ValueError(f"need 0 <= passes <= n, got passes={passes}, n={n}")
    from scipy import stats

    ci = stats.binomtest(int(passes), int(n)).proportion_ci(confidence_level=confidence,
                                                             method="wilson")
    low, high = _finite(ci.low), _finite(ci.high)
    if low is None or high is None:  # pragma: no cover
        return None
    return (min(max(low, 0.0), 1.0), min(max(high, 0.0), 1.0))


def accuracy(scores: Scores, *, seed: int, n_resamples: int = 9999) -> Estimate:
    """Accuracy of one condition: mean of per-question means, with intervals.

    ``ci95`` is a percentile bootstrap over questions (seeded, reproducible), or, when every
    question has the same mean, the interval `_degenerate_ci` gives (the Wilson interval of n
    of n where every question scored 1);
    ``pass_ci95`` is the Wilson interval on the share of questions whose mean
    is more than ``PASS_THRESHOLD``.
    """
    means = list(question_means(scores).values())
    n = len(means)
    n_pass = sum(1 for m in means if passes(m))
    return Estimate(
        value=_mean(means),
        ci95=_bootstrap_mean_ci(means, seed, n_resamples),
        n_questions=n,
        passes=n_pass,
        pass_rate=n_pass / n if n else None,
        pass_ci95=wilson(n_pass, n),
    )


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of condition ``b`` against baseline ``a`` on one tier."""

    a: str
    b: str
    tier: str
    n_questions: int  # questions scored in both conditions
    diff: float | None  # mean(b) - mean(a) over the paired questions
    ci95: Interval | None  # paired bootstrap interval of that difference
    discordant: tuple[int, int]  # (a_only, b_only) passing questions
    mcnemar_p: float | None  # exact McNemar p-value
    holm_p: float | None  # set by holm_adjust across a family
    can_reach_significance: bool  # enough discordant questions to ever reach p < 0.05

    def to_dict(self) -> dict[str, Any]:
        """Builtin-only, JSON-safe view (floats at full precision, no NaN)."""
        return {
            "a": str(self.a),
            "b": str(self.b),
            "tier": str(self.tier),
            "n_questions": int(self.n_questions),
            "diff": _r(self.diff),
            "ci95": _r_interval(self.ci95),
            "discordant": [int(self.discordant[0]), int(self.discordant[1])],
            "mcnemar_p": _r(self.mcnemar_p),
            "holm_p": _r(self.holm_p),
            "can_reach_significance": bool(self.can_reach_significance),
        }


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Exact McNemar p-value: two-sided binomial test of the discordant counts at p = 0.5.

    Returns 1.0 when there is no discordant question.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be >= 0, got {a_only}, {b_only}")
    n = int(a_only) + int(b_only)
    if n == 0:
        return 1.0
    from scipy import stats

    p = _finite(stats.binomtest(int(a_only), n, 0.5).pvalue)
    return 1.0 if p is None else min(1.0, p)


@functools.cache
def min_discordant_for_significance(alpha: float = 0.05) -> int:
    """Smallest number of discordant questions n such that an n-0 sweep has exact p < alpha.

    It is 6 at alpha = 0.05 (p = 0.03125; a 5-0 sweep only reaches 0.0625).
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    n = 1
    while mcnemar_exact(n, 0) >= alpha:
        n += 1
    return n


def compare(
    a_scores: Scores,
    b_scores: Scores,
    *,
    a: str,
    b: str,
    tier: str,
    seed: int,
    n_resamples: int = 9999,
) -> Comparison:
    """Compare condition ``b`` with baseline ``a`` on the questions scored in both.

    ``diff`` is mean(b) - mean(a) of the per-question means ("what b adds over
    a"); ``ci95`` is the paired bootstrap interval of that difference
    (questions resampled with their pairs kept; where every difference is the same, the
    interval `_degenerate_ci` gives within [-1, 1]); ``discordant`` and
    ``mcnemar_p`` come from passing (mean > PASS_THRESHOLD) per question.
    """
    ma, mb = question_means(a_scores), question_means(b_scores)
    ids = sorted(ma.keys() & mb.keys())
    diffs = [mb[q] - ma[q] for q in ids]
    a_only = sum(1 for q in ids if passes(ma[q]) and not passes(mb[q]))
    b_only = sum(1 for q in ids if passes(mb[q]) and not passes(ma[q]))
    return Comparison(
        a=a,
        b=b,
        tier=tier,
        n_questions=len(ids),
        diff=_mean(diffs),
        ci95=_bootstrap_mean_ci(diffs, seed, n_resamples, bounds=(-1.0, 1.0)),
        discordant=(a_only, b_only),
        mcnemar_p=mcnemar_exact(a_only, b_only),
        holm_p=None,
        can_reach_significance=(a_only + b_only) >= min_discordant_for_significance(0.05),
    )


# --------------------------------------------------------------------------- multiple testing


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni step-down adjusted p-values, in the input order.

    The adjusted values are monotone in the order of the raw p-values, never
    below the raw value and capped at 1.  ``None`` (and NaN) entries pass
    through as ``None`` and do not count in the family size.
    """
    present: list[tuple[int, float]] = []
    for i, raw in enumerate(pvalues):
        value = _finite(raw)
        if value is not None:
            present.append((i, value))
    for _, p in present:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must be in [0, 1], got {p}")
    m = len(present)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (i, p) in enumerate(sorted(present, key=lambda t: t[1])):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def holm_adjust(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """Copies of ``comparisons`` with ``holm_p`` set; the family is the given list."""
    adjusted = holm([c.mcnemar_p for c in comparisons])
    return [dataclasses.replace(c, holm_p=p) for c, p in zip(comparisons, adjusted)]
