"""The judge: "why" questions are graded against their checklist by a judge model, twice, so the
report can say how far the judge agrees with itself (Cohen's kappa over the checklist points).

Code grades every answer field; the judge only says, point by point, whether an answer's prose
makes each point of the question's checklist. Its verdicts are reported beside the grade.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytest_kgbench.scoring.answers import extract_block

JUDGE_SYSTEM = """\
You grade one answer against a checklist. For each numbered point, decide whether the answer
makes that point (true) or not (false). Judge only what the answer says, not whether you agree.
Reply with one fenced ```json block: {"points": [true, false, ...]} in the checklist's order."""


def judge_prompt(question: str, answer: str, checklist: Sequence[str]) -> str:
    points = "\n".join(f"{i}. {p}" for i, p in enumerate(checklist, 1))
    return f"Question:\n{question}\n\nAnswer:\n{answer}\n\nChecklist:\n{points}\n"


def parse_verdict(text: str, n: int) -> list[bool] | None:
    """The judge's verdicts, or None when its reply does not hold exactly n booleans."""
    block = extract_block(text)
    points = (block or {}).get("points")
    if isinstance(points, list) and len(points) == n and all(isinstance(p, bool) for p in points):
        return points
    return None


def ask_judge(complete: Callable[..., Any], model: str, question: str, answer: str,
              checklist: Sequence[str], *, timeout: float = 600.0
              ) -> tuple[list[bool] | None, dict[str, int]]:
    """One pass of the judge: its verdicts and the tokens it used. `complete` is the plain
    call of the run's own backend (`BaseAgent.complete(system, text, model=, max_tokens=,
    timeout=)`, so a Claude Code run is judged through Claude Code)."""
    reply = complete(JUDGE_SYSTEM, judge_prompt(question, answer, checklist), model=model,
                     max_tokens=512, timeout=timeout)
    return parse_verdict(reply.text, len(checklist)), dict(reply.tokens)


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa of two passes over the same points; None when undefined (no points, or both
    passes constant and equal, where chance agreement is already 1)."""
    n = len(a)
    if n == 0 or n != len(b):
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    if chance >= 1.0:
        return None
    return (observed - chance) / (1 - chance)


def summarise(judged: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Kappa over every judged point of a run, the points the two passes disagreed on, the
    mean share of checklist points made (first pass) and the tokens the judge used."""
    first: list[bool] = []
    second: list[bool] = []
    disagreements = []
    unreadable = 0
    no_prose = 0
    tokens = {"input": 0, "output": 0}
    failed = 0
    for item in judged:
        if item.get("skipped"):  # nothing to judge: the answer had no prose
            no_prose += 1
            continue
        if item.get("failed"):  # the judge could not be asked (its reason is in the item)
            failed += 1
            continue
        for name in tokens:
            tokens[name] += int((item.get("tokens") or {}).get(name, 0))
        a, b = item.get("first"), item.get("second")
        if not a or not b:
            unreadable += 1
            continue
        first += a
        second += b
        checklist = list(item.get("checklist") or [])
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                disagreements.append({"nodeid": item.get("nodeid"), "point": i + 1,
                                      "text": checklist[i] if i < len(checklist) else None,
                                      "first": x, "second": y})
    if not first and not unreadable and not no_prose and not failed:
        return None
    return {"items": len(judged) - no_prose - failed, "unreadable": unreadable,
            "no_prose": no_prose, "failed": failed,
            "points": len(first),
            "made": sum(first) / len(first) if first else None,
            "agreement": (sum(x == y for x, y in zip(first, second)) / len(first)
                          if first else None),
            "kappa": cohen_kappa(first, second), "disagreements": disagreements,
            "model": next((i.get("model") for i in judged if i.get("model")), None),
            "tokens": tokens}
