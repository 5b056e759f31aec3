"""A run cut into shards (`--kgbench-shard I/N`): each shard a run of its own, on any machine,
with its own run folder and build cache, merged once afterwards (`kgbench merge`, run/merge.py).
docs/scale-out.md.

The cut is a pure function of the selection: every item of one question — every variant,
condition, model and repeat — goes to the same shard (the paired comparisons need them
together), and the questions are dealt to the shards by their estimated cost (prompt tokens ×
rounds), heaviest first, each to the shard that has the least so far (ties: the lower shard).
Costs are whole numbers of tokens computed from the prompts, which deterministic builds make
the same on every machine, so every shard computes the same cut without asking the others.

A shard records what it was cut from (`shard.json` in its run folder): the index and count,
the node ids of the whole selection, each question's SHA-256 and the fingerprint of both, so
a merge can say which item is missing from which shard, or which shard was cut from other
questions. `--max-cost`, `--rpm` and `--tpm` given to a sharded run are the whole run's: each
shard keeps to its share (1/N, or the weights --kgbench-shard-budget names).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pytest_kgbench.asking.cases import Case
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.pricing import QUERY_ROUNDS, tokens_of
from pytest_kgbench.core.settings import Settings

SHARD_FLAG = "--kgbench-shard"
BUDGET_FLAG = "--kgbench-shard-budget"
SHARD_FILE = "shard.json"
SPLIT_LIMITS = ("max_cost", "rpm", "tpm")
"""The limits given to a sharded run as the whole run's, each shard keeping to its share."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0 to count - 1) of `count`, and its share of the run's budgets."""

    index: int
    count: int
    share: float

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: Any, budget: Any = None) -> Shard:
    """`I/N` (I from 0 to N - 1: a Kubernetes Indexed Job's JOB_COMPLETION_INDEX as it comes),
    with the share of the budgets `budget` names: none for 1/N, or N comma-separated weights,
    one per shard (`2,1,1`: shard 0 gets half). InputError naming the option otherwise."""
    value = str(text).strip()
    found = re.fullmatch(r"(\d+)\s*/\s*(\d+)", value)
    if not found:
        raise InputError(SHARD_FLAG, f"'{value}' is not I/N (shard I of N, I from 0 to N - 1, "
                         "e.g. 0/3)")
    index, count = int(found.group(1)), int(found.group(2))
    if count < 1:
        raise InputError(SHARD_FLAG, f"'{value}': N must be at least 1")
    if index >= count:
        raise InputError(SHARD_FLAG, f"'{value}': shards are numbered 0 to {count - 1}")
    return Shard(index, count, _share(budget, index, count))


def _share(budget: Any, index: int, count: int) -> float:
    if budget in (None, ""):
        return 1.0 / count
    parts = [p.strip() for p in str(budget).split(",")]
    try:
        weights = [Fraction(p) for p in parts]
    except (ValueError, ZeroDivisionError):
        raise InputError(BUDGET_FLAG, f"'{budget}' is not {count} comma-separated weights, "
                         "one per shard (e.g. 2,1,1)") from None
    if len(weights) != count:
        raise InputError(BUDGET_FLAG, f"'{budget}' names {len(weights)} weight(s) for "
                         f"{count} shards: give one per shard")
    if any(w < 0 for w in weights) or sum(weights) <= 0 or weights[index] <= 0:
        raise InputError(BUDGET_FLAG, f"'{budget}': every weight must be at least 0, and "
                         f"shard {index}'s more than 0")
    return float(weights[index] / sum(weights))


def split_limits(settings: Settings, share: float) -> Settings:
    """The settings a shard runs under: the run's --max-cost, --rpm and --tpm times its share
    (the others as given)."""
    values = {name: settings.get(name) * share for name in SPLIT_LIMITS
              if settings.get(name) is not None}
    return settings.but(**values) if values else settings


def totals(settings: Settings) -> dict[str, float | None]:
    """The whole run's limits, as given (before split_limits)."""
    return {name: settings.get(name) for name in SPLIT_LIMITS}


def question_of(case: Case) -> str:
    """The unit that stays on one shard: one question of one pack."""
    return f"{case.question.pack}/{case.question.id}"


def rounds_of(case: Case) -> int:
    """The rounds an item is estimated to take (as --estimate takes them)."""
    return QUERY_ROUNDS if case.condition.mode == "querying" else 1


def item_cost(case: Case, context_tokens: int) -> int:
    """An item's estimated cost: its prompt's tokens (the context, shared by its condition's
    items, and the question's own text) times its rounds."""
    return (context_tokens + tokens_of(case.question.text)) * rounds_of(case)


def question_costs(costs: Iterable[tuple[Case, int]]) -> dict[str, int]:
    """Each question's cost: the sum of its items' (`costs`: each case with its item cost)."""
    out: dict[str, int] = {}
    for case, cost in costs:
        key = question_of(case)
        out[key] = out.get(key, 0) + int(cost)
    return out


def deal(costs: Mapping[str, int], count: int) -> dict[str, int]:
    """Each question's shard: heaviest first (then by name), to the shard with the least cost
    so far (then the lowest index). Deterministic: the same costs give the same cut."""
    loads = [0] * count
    out: dict[str, int] = {}
    for key in sorted(costs, key=lambda k: (-int(costs[k]), k)):
        shard = min(range(count), key=lambda s: (loads[s], s))
        out[key] = shard
        loads[shard] += int(costs[key])
    return out


def loads(costs: Mapping[str, int], dealt: Mapping[str, int], count: int) -> list[int]:
    """Each shard's estimated cost."""
    out = [0] * count
    for key, shard in dealt.items():
        out[shard] += int(costs[key])
    return out


def selection_sha256(nodeids: Sequence[str], questions: Mapping[str, str], count: int) -> str:
    """The fingerprint of what a run was cut from: its node ids (in order), each question's
    SHA-256 and the number of shards."""
    text = json.dumps({"nodeids": list(nodeids), "questions": dict(sorted(questions.items())),
                       "count": count}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def shard_record(shard: Shard, selection: Sequence[str], questions: Mapping[str, str],
                 costs: Mapping[str, int], dealt: Mapping[str, int],
                 limits: Mapping[str, float | None]) -> dict[str, Any]:
    """What `shard.json` holds: the shard, what it was cut from and how, and the run's whole
    budgets."""
    return {"index": shard.index, "count": shard.count, "share": shard.share,
            "selection_sha256": selection_sha256(selection, questions, shard.count),
            "selection": list(selection), "questions": dict(sorted(questions.items())),
            "costs": dict(sorted(costs.items())), "shards": dict(sorted(dealt.items())),
            "loads": loads(costs, dealt, shard.count), "budget": dict(limits)}


def meta_block(record: Mapping[str, Any]) -> dict[str, Any]:
    """meta.json's `shard`: shard.json without its lists."""
    return {k: record[k] for k in ("index", "count", "share", "selection_sha256", "loads",
                                   "budget")} | {"items_selected": len(record["selection"]),
                                                 "file": SHARD_FILE}


def resolve(given: Shard | None, stored: Mapping[str, Any] | None, *, run_id: str,
            resume: bool, distributed: bool, together: bool) -> Shard | None:
    """The session's shard: the one the command line names, or on --resume the one the run
    was cut as (meta.json's `shard`; naming another is refused). Refused too: a shard under
    pytest-xdist's -n or --tx (one shard is one process; the cluster runs them side by side),
    and --ask together (a cut would split a session's conversation)."""
    if resume and stored:
        was = Shard(int(stored["index"]), int(stored["count"]), float(stored["share"]))
        if given is not None and (given.index, given.count) != (was.index, was.count):
            raise InputError(SHARD_FLAG, f"run '{run_id}' is shard {was.label}, not "
                             f"{given.label}: leave {SHARD_FLAG} out to continue it as it "
                             "was cut")
        shard: Shard | None = Shard(was.index, was.count,
                                    given.share if given is not None else was.share)
    elif resume and given is not None:
        raise InputError(SHARD_FLAG, f"run '{run_id}' was not cut into shards: leave "
                         f"{SHARD_FLAG} out to continue it")
    else:
        shard = given
    if shard is None:
        return None
    if distributed:
        raise InputError(SHARD_FLAG, "a shard is one process (--concurrency asks several "
                         "requests at once within it), not a pytest-xdist session: leave -n "
                         "and --tx out and run the shards side by side (docs/scale-out.md)")
    if together:
        raise InputError(SHARD_FLAG, "--ask together asks a session's questions in one "
                         "conversation, which a cut by question would split: shard a run "
                         "asked apart")
    return shard


def cut(runtime: Any, entries: Sequence[tuple[str, Case, bool]], shard: Shard,
        limits: Mapping[str, float | None]) -> dict[str, Any]:
    """Cut the selection `entries` (each item's node id, case, and whether it is asked: an
    item skipped unasked costs nothing) on the built data of `runtime` (run.runtime.Runtime,
    its variants built): shard_record, whose `shards` maps each question to its shard."""
    contexts: dict[tuple[str, str, str, str], int] = {}

    def context_tokens(case: Case) -> int:
        q, cond = case.question, case.condition
        key = (q.pack, case.variant, cond.id, q.persona)
        if key not in contexts:
            built = runtime.built(q.pack, case.variant)
            executor = (runtime.executor(built, cond, q.persona) if cond.mode == "querying"
                        else None)
            prompt = runtime.prompt(cond, built, q, executor)
            contexts[key] = tokens_of(prompt.context) + tokens_of(prompt.system)
        return contexts[key]

    costs = question_costs((case, item_cost(case, context_tokens(case)) if asked else 0)
                           for _, case, asked in entries)
    questions = {question_of(case): case.question.sha256 for _, case, _ in entries}
    dealt = deal(costs, shard.count)
    return shard_record(shard, [nodeid for nodeid, _, _ in entries], questions, costs, dealt,
                        limits)


def mine(record: Mapping[str, Any], case: Case) -> bool:
    """Whether `case`'s item is on the shard `record` (shard_record) describes."""
    return bool(record["shards"].get(question_of(case)) == record["index"])
