"""The case model: which items a question set makes under the session's settings —
question x variant x condition x model x repeat — and which together session each belongs to.
Pure module: no pytest (plugin/collect.py turns cases into items).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_kgbench.core.conditions import Condition
from pytest_kgbench.core.questions import Question, QuestionSet
from pytest_kgbench.core.registry import Registry, given
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.packs.schema import Pack


@dataclass(frozen=True)
class Case:
    """One item: what is asked, under which condition, of whom, which time."""

    question: Question
    condition: Condition
    variant: str
    model: str
    agent: str
    repeat: int

    @property
    def param_id(self) -> str:
        variant = "" if self.variant == "base" else f"{self.variant}-"
        # "rep1", not "r1": `-k R1` (pytest's -k ignores case) must not match every first repeat
        return f"{variant}{self.condition.id}-{self.model}-rep{self.repeat}"

    @property
    def name(self) -> str:
        return f"{self.question.id}[{self.param_id}]"

    @property
    def keywords(self) -> set[str]:
        """What `-k` matches besides the name: tier, pack, variant, condition id and label,
        mode, model and expectation (so `-k L3`, `-k "credit and D2"` select)."""
        q = self.question
        return {q.tier, q.pack, self.variant, self.condition.id, self.condition.label,
                self.condition.mode, self.model, q.expect, *self._arm}

    @property
    def _arm(self) -> tuple[str, ...]:
        """A querying item's schema arm (prompt, tools, none, floor) and its engine arm's
        engine, if any: keywords and markers."""
        if self.condition.mode != "querying":
            return ()
        return (self.condition.schema, *((self.condition.engine,) if self.condition.engine
                                         else ()))

    @property
    def markers(self) -> tuple[str, ...]:
        """The item's markers, for exact selection with -m (`-m L3`, `-m "credit and D1"`,
        `-m tools`): tier, pack, variant, condition id, agent and a querying item's schema
        arm (registered by `marker_lines`)."""
        return tuple(dict.fromkeys((self.question.tier, self.question.pack, self.variant,
                                    self.condition.id, self.agent, *self._arm)))


def marker_lines(settings: Settings, registry: Registry | None = None) -> list[str]:
    """The `markers` ini lines that register every marker an item may carry (the pieces of
    `registry`, the session's, included), so that --strict-markers accepts them."""
    from pytest_kgbench.core.conditions import SCHEMA_ARMS, arm, by_id, registered
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.core.questions import TIERS
    from pytest_kgbench.packs.locate import sources
    from pytest_kgbench.packs.schema import read_manifest

    names: dict[str, str] = {t: f"kgbench tier {t}" for t in TIERS}
    names.update({c: f"kgbench condition {c} ({cond.label})"
                  for c, cond in registered(registry).items()})
    for cond in list(registered(registry).values()):
        if cond.mode == "querying":
            names.update({a.id: f"kgbench condition {a.id} ({a.label})"
                          for a in (arm(cond, s) for s in SCHEMA_ARMS) if a.id != cond.id})
    names.update({s: f"kgbench schema arm {s}: {a.what}" for s, a in SCHEMA_ARMS.items()})
    for cid in settings.plan.condition_ids:  # the session's engine arms, and their engines
        if "@" in cid:
            cond = by_id(cid, registry)
            names.setdefault(cond.id, f"kgbench condition {cond.id} ({cond.label})")
            names.setdefault(str(cond.engine), f"kgbench engine arm {cond.engine}")
    names.update({a: f"kgbench agent {a}" for a in given(registry).agents})
    for name, source in sources(settings).items():
        names.setdefault(name, f"kgbench pack {name}")
        try:
            manifest = read_manifest(source.dir)
        except InputError:
            continue  # collection reports it, naming the file
        for variant in (manifest.get("variants") or {"base": {}}):
            names.setdefault(str(variant), f"kgbench variant {variant}")
    for variant in settings.plan.variants:  # a scaled one (issuers=1000000) is no pack's name
        if variant != "all":
            names.setdefault(variant, f"kgbench variant {variant}")
    return [f"{name}: {what}" for name, what in names.items()]


def sample_questions(questions: list[Question], n: int, seed: int) -> set[tuple[str, str]]:
    """A seeded sample of `n` questions per pack and tier (all of a tier with fewer): the
    (pack, question id) pairs a `--sample` run keeps."""
    import random

    by_tier: dict[tuple[str, str], list[str]] = {}
    for q in questions:
        ids = by_tier.setdefault((q.pack, q.tier), [])
        if q.id not in ids:
            ids.append(q.id)
    keep: set[tuple[str, str]] = set()
    for (pack, tier), ids in sorted(by_tier.items()):
        rng = random.Random(f"{seed}|{pack}|{tier}")
        keep.update((pack, i) for i in rng.sample(sorted(ids), min(n, len(ids))))
    return keep


def pack_conditions(pack: Pack, conds: tuple[Condition, ...]) -> list[Condition]:
    """The selected conditions this pack has every artefact for."""
    return [c for c in conds if pack.lacks(c.artefacts) is None]


def not_run(pack: Pack, conds: tuple[Condition, ...]) -> list[str]:
    """Why parts of the selection do not run on this pack, one line each ("pack cwd-acme has
    no rules (shapes.ttl): D6 skipped"); the whole pack when its data is unavailable."""
    if pack.unavailable:
        return [f"pack {pack.name} skipped: {pack.unavailable}"]
    by_reason: dict[str, list[str]] = {}
    for cond in conds:
        why = pack.lacks(cond.artefacts)
        if why:
            by_reason.setdefault(why, []).append(cond.id)
    return [f"pack {pack.name} {why}: {', '.join(ids)} skipped"
            for why, ids in by_reason.items()]


def cases_for(qset: QuestionSet, pack: Pack, settings: Settings,
              registry: Registry | None = None) -> Iterator[Case]:
    """Every item of a question file, in file order (so every xdist worker agrees), under
    the run's conditions as `registry` (the session's) knows them."""
    variants = settings.plan.variants
    if variants == ("all",):
        variants = tuple(pack.variants)
    conds = pack_conditions(pack, settings.conditions(registry))
    for q in qset.questions:
        for variant in variants:
            if not pack.has_variant(variant) or (q.variants and variant not in q.variants):
                continue
            for cond in conds:
                if cond.mode not in q.modes:
                    continue
                for model in settings.plan.models:
                    for repeat in range(1, settings.plan.repeats + 1):
                        yield Case(q, cond, variant, model, settings.agent_for(model), repeat)


def built_by(nodeids: Iterable[str], settings: Settings) -> set[tuple[str, str]]:
    """The (pack, variant) pairs that items, given by node id, ask about: the inverse of
    `Case.param_id` (a variant other than base leads the parameters). What a controller that
    never collects the items itself (under xdist) builds before they run."""
    from pytest_kgbench.packs.locate import open_pack, source_of_file

    out: set[tuple[str, str]] = set()
    variants: dict[str, tuple[str, ...] | None] = {}
    packs: dict[str, str | None] = {}
    for nodeid in nodeids:
        path, _, name = nodeid.partition("::")
        if path not in packs:
            source = source_of_file(settings, Path(settings.paths.rootdir, path))
            packs[path] = source.name if source else None
        pack = packs[path]
        if pack is None or not name.endswith("]") or "[" not in name:
            continue
        if pack not in variants:
            try:
                opened = open_pack(settings, pack)
                variants[pack] = tuple(opened.variants) + tuple(  # and the sizes it scales
                    v for v in settings.plan.variants
                    if v not in opened.variants and v != "all" and opened.has_variant(v))
            except Exception:  # noqa: BLE001 - the items report a pack that cannot open
                variants[pack] = None
        param = name[name.index("[") + 1:-1]
        found = next((v for v in sorted(variants[pack] or (), key=len, reverse=True)
                      if v != "base" and param.startswith(f"{v}-")), "base")
        if variants[pack] is not None:
            out.add((pack, found))
    return out


def session_of(case: Case) -> str:
    """The together session an item belongs to."""
    from pytest_kgbench.asking.together import group_name

    q = case.question
    return group_name(q.pack, case.variant, case.condition.id, case.model, case.repeat,
                      q.persona)


def context_of(case: Case) -> tuple[tuple[str, ...], str]:
    """The prompt context an item shares with others (the system and data block the provider's
    prompt cache keeps): its scheduling scope — question file, variant, condition, model —
    and, within it, its persona. Repeats and questions of a context share its cached prefix."""
    q = case.question
    return (str(q.file), case.variant, case.condition.id, case.model), q.persona


def context_scope(nodeid: str) -> str | None:
    """The scheduling scope of a question item under -n, from its node id alone (what xdist's
    controller knows): its file and parameters without the question and the repeat
    ("questions/credit.yaml::[chains-D1-sonnet]"), so one worker gets every item of a prompt
    context (every persona and repeat, and so every --ask together session of it). None for a
    node id that is not a question item's."""
    import re

    path, sep, rest = nodeid.partition("::")
    name, bracket, params = rest.partition("[")
    if not sep or not bracket or not name or not params.endswith("]"):
        return None
    return f"{path}::[{re.sub(r'-rep[0-9]+]$', ']', params)}"


def scope_groups(nodeids: Sequence[str], workers: int, *, split: bool = True
                 ) -> dict[str, str]:
    """The scheduling scope of each question item under -n (the others are absent): its
    prompt context (`context_scope`), so a context's items go to one worker, one after
    another, and the provider's cache serves their data block. With fewer contexts than
    workers, that left workers idle (a run of one context ran on one worker): then each
    context's items, in their order, are cut into `workers` consecutive slices, each a scope
    of its own ("questions/credit.yaml::[R1-sonnet]#2"), so every worker gets work and each
    still asks a run of one context. `split=False` keeps contexts whole (asked together, a
    context holds sessions, each one conversation). The controller (scheduling) and each
    worker (its look ahead, collect.upcoming) compute the same from the same collection."""
    contexts: dict[str, list[str]] = {}
    for nodeid in nodeids:
        scope = context_scope(nodeid)
        if scope is not None:
            contexts.setdefault(scope, []).append(nodeid)
    if not split or workers <= 1 or len(contexts) >= workers:
        return {n: scope for scope, ids in contexts.items() for n in ids}
    out: dict[str, str] = {}
    for scope, ids in contexts.items():
        size = -(-len(ids) // workers)  # the slices' length, rounded up
        out.update((n, f"{scope}#{i // size + 1}") for i, n in enumerate(ids))
    return out


def asks_together(settings: Settings, registry: Registry | None = None) -> bool:
    """Whether items share together sessions (a replay answers from stored slices, per item)."""
    agent = given(registry).get("agents", settings.plan.agent, "--agent")
    return settings.plan.ask == "together" and agent.kind != "replay"
