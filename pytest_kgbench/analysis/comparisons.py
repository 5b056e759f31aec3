"""The paired comparisons of a run (report.json's `comparisons`): two arms per tier, never
pooled — the paired statistics of their scores (stats.compare, Holm across the run), the paired
difference of their tool calls, and the questions each side lost to a skip, which refuse a
paired test that would drop them. Also what an arm's items cost to answer (effort_summary).
Pure functions over banked records.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.analysis import stats
from pytest_kgbench.core.questions import TIERS
from pytest_kgbench.core.record import ItemRecord, question_key
from pytest_kgbench.core.settings import Settings


def question_scores(records: Iterable[ItemRecord]) -> dict[str, list[float | None]]:
    """question (`pack/question`) -> the scores of its items, as stats takes them."""
    out: dict[str, list[float | None]] = defaultdict(list)
    for rec in records:
        out[question_key(rec)].append(rec["score"])
    return dict(out)


def tool_calls(rec: ItemRecord) -> int:
    """The tool calls an item made (asked together: those tagged with its question)."""
    return len((rec.get("answer") or {}).get("tool_calls") or [])


def _distribution(values: Sequence[float]) -> dict[str, float] | None:
    """Median, quartiles, mean and maximum of per-item counts or times."""
    if not values:
        return None
    from statistics import mean, median, quantiles

    q = quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"median": median(values), "p25": q[0], "p75": q[2], "mean": mean(values),
            "max": max(values)}


def effort_summary(records: Sequence[ItemRecord]) -> dict[str, Any]:
    """What an arm's items cost to answer, beside what they scored: the distribution of tool
    calls and rounds per item, the median latency and the median tokens per item (input and
    output). Asked together, rounds, tokens and latency are the session's, counted on the item
    that asked it (its other items show 0), while tool calls are each question's own."""
    from statistics import median

    answers = [r.get("answer") or {} for r in records]
    latencies = [float(a.get("latency_s") or 0.0) for a in answers]
    tokens = [sum(int(v) for v in (a.get("tokens") or {}).values() if isinstance(v, int))
              for a in answers]
    return {
        "tool_calls": _distribution([float(tool_calls(r)) for r in records]),
        "rounds": _distribution([float(a.get("rounds") or 0) for a in answers]),
        "latency_s": median(latencies) if latencies else None,
        "tokens": median(tokens) if any(tokens) else None,
    }


def call_difference(a: Mapping[str, list[int]], b: Mapping[str, list[int]]
                    ) -> dict[str, Any] | None:
    """The paired difference of tool calls between two arms, question by question (each
    question's mean over repeats): the mean of b − a, the relative change of the totals (the
    write-up's "a third more calls to reach the same answer"), and the two-sided Wilcoxon
    signed-rank p on the paired means (None when every difference is zero)."""
    paired = sorted(set(a) & set(b))
    if not paired:
        return None
    from statistics import mean

    ma = [mean(a[q]) for q in paired]
    mb = [mean(b[q]) for q in paired]
    diffs = [y - x for x, y in zip(ma, mb)]
    p: float | None = None
    if any(diffs):
        from scipy.stats import wilcoxon

        p = float(wilcoxon(diffs, zero_method="wilcox").pvalue)
    total_a = sum(ma)
    # stored at full precision (a p of 1.97e-11 is not 0.0): views round when they print
    return {"n_questions": len(paired), "mean_a": mean(ma), "mean_b": mean(mb),
            "mean_diff": mean(diffs), "relative": sum(mb) / total_a - 1 if total_a else None,
            "wilcoxon_p": p}


def arm_scores(records: Iterable[ItemRecord], condition: str, model: str, tier: str
               ) -> dict[str, list[float | None]]:
    """question -> repeat scores of one model under one condition, in one tier."""
    return question_scores(r for r in records if r["condition"] == condition
                           and r["model"] == model and r["tier"] == tier)


def arm_calls(records: Iterable[ItemRecord], condition: str, model: str, tier: str
              ) -> dict[str, list[int]]:
    """question -> repeat tool-call counts of one model under one condition, in one tier."""
    out: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if r["condition"] == condition and r["model"] == model and r["tier"] == tier:
            out[question_key(r)].append(tool_calls(r))
    return dict(out)


def comparison_dicts(records: Sequence[ItemRecord], settings: Settings, multi_model: bool,
                     skipped: Sequence[ItemRecord] = ()) -> list[dict[str, Any]]:
    """The comparisons of report.json: each with its paired difference of tool calls
    (`tool_calls`, call_difference) beside the difference of accuracy, and the questions each
    side lost to a skip (`lost`: a prompt longer than the model accepts; `refused` says why
    such a comparison has no p-value), and how many questions a side's store could not serve
    (`dropped`: left out of both sides)."""
    out = []
    default = (records or skipped)[0]["model"] if (records or skipped) else ""
    for c in build_comparisons(records, settings, multi_model, skipped):
        d = c.to_dict()
        a, model_a = _label_arm(c.a, default)
        b, model_b = _label_arm(c.b, model_a)
        d["tool_calls"] = call_difference(arm_calls(records, a, model_a, c.tier),
                                          arm_calls(records, b, model_b, c.tier))
        lost = {"a": len(lost_questions(records, skipped, a, model_a, c.tier)),
                "b": len(lost_questions(records, skipped, b, model_b, c.tier))}
        d["lost"] = lost
        d["refused"] = refusal(lost)
        d["dropped"] = len(dropped_questions(skipped, (a, model_a), (b, model_b), c.tier))
        out.append(d)
    return out


def _label_arm(label: str, default_model: str) -> tuple[str, str]:
    """(condition, model) of a comparison's side as build_comparisons labels it."""
    cond, _, model = label.partition("/")
    return cond, model or default_model


UNSERVABLE = "unservable"
"""The behaviour of an item skipped because its store cannot serve the question (run/items.py,
`ItemRunner.unservable`): the same for every model, so a comparison leaves the question out of
both sides (`dropped_questions`) and keeps its test, where a prompt past a model's window
(`lost_questions`) takes the test away."""


def _arm(rows: Iterable[ItemRecord], condition: str, model: str, tier: str) -> set[str]:
    return {question_key(r) for r in rows if r["condition"] == condition
            and r["model"] == model and r["tier"] == tier}


def lost_questions(records: Iterable[ItemRecord], skipped: Iterable[ItemRecord], condition: str,
                   model: str, tier: str) -> list[str]:
    """The questions of one arm and tier never scored because their items were skipped unasked
    for the model's sake (a prompt longer than the model accepts: errors.ItemSkipped); not
    those its store could not serve (`dropped_questions`)."""
    asked = [r for r in skipped if r.get("behaviour") != UNSERVABLE]
    return sorted(_arm(asked, condition, model, tier) - _arm(records, condition, model, tier))


def dropped_questions(skipped: Iterable[ItemRecord], a: tuple[str, str], b: tuple[str, str],
                      tier: str) -> set[str]:
    """The questions of a tier that the store of either side, (condition, model), could not
    serve: left out of both sides of the comparison."""
    unservable = [r for r in skipped if r.get("behaviour") == UNSERVABLE]
    return _arm(unservable, *a, tier) | _arm(unservable, *b, tier)


def refusal(lost: Mapping[str, int]) -> str | None:
    """Why a comparison gives no p-value: a paired test over the questions both sides scored
    would silently drop those one side lost to a skip, and they are not lost at random (the
    longest prompts)."""
    if not lost["a"] and not lost["b"]:
        return None
    return (f"no paired test: {lost['a']} question(s) of a and {lost['b']} of b were skipped "
            "(a prompt longer than the model accepts); a test over the rest would silently "
            "drop them")


def model_pairs(records: Sequence[ItemRecord], settings: Settings
                ) -> list[tuple[str, str, str]]:
    """With --compare-models: (condition, first model, other model) for each condition run
    and each model after the first (the order --model named them in, aliases or ids)."""
    run = {r["model"] for r in records}
    named = [m for m in dict.fromkeys(settings.plan.models) if m in run]
    models = named + sorted(run - set(named))
    if not settings.plan.compare_models or len(models) < 2:
        return []
    present = [c for c in settings.plan.condition_ids if any(r["condition"] == c for r in records)]
    return [(cond, models[0], other) for cond in present for other in models[1:]]


def build_comparisons(records: Sequence[ItemRecord], settings: Settings, multi_model: bool,
                      skipped: Sequence[ItemRecord] = ()) -> list[stats.Comparison]:
    """With --compare-models: the first model against each other on every condition; with
    --ablation: every pair of `conditions.ablation_pairs`, per model. Per tier (never pooled),
    Holm-adjusted across the whole family. A pair where either side lost questions to a skip
    (`skipped`: records graded "skipped") is kept, even with no question left to pair, and has
    no McNemar p (`refusal`): it is left out of the Holm family."""
    from pytest_kgbench.core.conditions import ablation_pairs

    family: list[stats.Comparison] = []

    def add(cond_a: str, model_a: str, cond_b: str, model_b: str, tier: str, label_a: str,
            label_b: str) -> None:
        dropped = dropped_questions(skipped, (cond_a, model_a), (cond_b, model_b), tier)
        sa = {q: s for q, s in arm_scores(records, cond_a, model_a, tier).items()
              if q not in dropped}
        sb = {q: s for q, s in arm_scores(records, cond_b, model_b, tier).items()
              if q not in dropped}
        lost = {"a": len(lost_questions(records, skipped, cond_a, model_a, tier)),
                "b": len(lost_questions(records, skipped, cond_b, model_b, tier))}
        refused = refusal(lost)
        if not (set(sa) & set(sb)) and not (refused and (sa or lost["a"]) and
                                            (sb or lost["b"])):
            return
        c = stats.compare(sa, sb, a=label_a, b=label_b, tier=tier, seed=settings.plan.stats_seed)
        family.append(dataclasses.replace(c, mcnemar_p=None) if refused else c)

    every = [*records, *skipped]
    for cond, model_a, model_b in model_pairs(every, settings):
        for tier in TIERS:
            add(cond, model_a, cond, model_b, tier, f"{cond}/{model_a}", f"{cond}/{model_b}")
    present = [c for c in settings.plan.condition_ids if any(r["condition"] == c for r in every)]
    if not settings.plan.ablation or len(present) < 2:
        return stats.holm_adjust(family)
    for model in sorted({r["model"] for r in every}):
        suffix = f"/{model}" if multi_model else ""
        for a, b in ablation_pairs(tuple(present)):
            for tier in TIERS:
                add(a, model, b, model, tier, a + suffix, b + suffix)
    return stats.holm_adjust(family)
