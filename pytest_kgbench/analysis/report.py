"""The report: report.json (the contract other tools read), report.md (tables a person reads)
and the terminal's headline. Pure functions over banked records.

An *arm* is one model under one condition; its accuracy is the mean over questions of each
question's mean over repeats (analysis/stats.py). A question is one question of one pack
(`pack/question`): asked on two variants, its score is the mean over both, so the same question
never counts as two in an interval or as two pairs in a comparison.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_kgbench.analysis import stats
from pytest_kgbench.analysis.comparisons import (  # noqa: F401 - three re-exported
    build_comparisons,
    call_difference,
    comparison_dicts,
    effort_summary,
    model_pairs,
    question_scores,
)
from pytest_kgbench.core.questions import TIERS, set_fingerprint
from pytest_kgbench.core.record import BankedRecord, ItemRecord, question_key
from pytest_kgbench.core.registry import Registry
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.metrics import ordered

ITEM_FIELDS = ("nodeid", "question", "tier", "pack", "variant", "condition", "condition_label",
               "mode", "model", "agent", "agent_kind", "repeat", "persona", "expect", "grade",
               "score", "status", "behaviour", "letter", "reason", "fields", "metrics",
               "outcome", "elapsed_s")


def arm_of(rec: ItemRecord, multi_model: bool) -> str:
    return f"{rec['condition']}/{rec['model']}" if multi_model else rec["condition"]


def arm_summary(records: Sequence[ItemRecord], seed: int,
                registry: Registry | None = None) -> dict[str, Any]:
    """Accuracy with its interval, pass rate with Wilson, and the same per tier; the arm's
    median prompt size; its metrics (those of `registry`, the session's). (`accuracy` itself
    pools the tiers; the report shows it per tier.)"""
    est = stats.accuracy(question_scores(records), seed=seed)
    declined = sorted({question_key(r) for r in records if r["grade"] == "declined"})
    out: dict[str, Any] = {
        "accuracy": est.value, "ci95": list(est.ci95) if est.ci95 else None,
        "n_questions": est.n_questions, "n_items": len(records),
        "passes": est.passes, "pass_rate": est.pass_rate,
        "pass_ci95": list(est.pass_ci95) if est.pass_ci95 else None,
        "declined": len(declined), "metrics": metric_summary(records, registry), "by_tier": {},
        "prompt_tokens": prompt_tokens(records),
        "effort": effort_summary(records),
    }
    for tier in TIERS:
        rows = [r for r in records if r["tier"] == tier]
        if not rows:
            continue
        t_est = stats.accuracy(question_scores(rows), seed=seed)
        out["by_tier"][tier] = {
            "accuracy": t_est.value, "ci95": list(t_est.ci95) if t_est.ci95 else None,
            "n_questions": t_est.n_questions, "passes": t_est.passes,
            "pass_rate": t_est.pass_rate,
            "pass_ci95": list(t_est.pass_ci95) if t_est.pass_ci95 else None,
            "declined": len({question_key(r) for r in rows if r["grade"] == "declined"}),
            "effort": effort_summary(rows),
        }
    return out


def prompt_chars(records: Sequence[ItemRecord]) -> float | None:
    """The median size of an arm's prompts in characters (None when no record says)."""
    from statistics import median

    sizes = [r["prompt"].get("chars") for r in records]
    known = [int(c) for c in sizes if isinstance(c, int)]
    return float(median(known)) if known else None


def prompt_tokens(records: Sequence[ItemRecord]) -> int | None:
    """The median size of an arm's prompts in tokens (about four characters a token), so a
    reader sees when two arms differ in length as well as in meaning."""
    from pytest_kgbench.core.pricing import CHARS_PER_TOKEN

    chars = prompt_chars(records)
    return None if chars is None else int(chars) // CHARS_PER_TOKEN


def prompt_ratios(arms: Mapping[str, Sequence[ItemRecord]], multi_model: bool
                  ) -> dict[str, float | None]:
    """Each reading arm's prompt size over R1's (the same model's), paired: the median over
    the items both asked (the same question of the same pack and variant) of the ratio of
    their prompts — how much longer the same facts are in the arm's form
    (docs/conditions.md). A pack R1 cannot run (no tables) does not weigh in. None for a
    querying arm, or where R1 asked none of the arm's items."""
    from statistics import median

    def sizes(rows: Sequence[ItemRecord]) -> dict[tuple[str, str, str], int]:
        return {(r["pack"], r["variant"], r["question"]): int(r["prompt"]["chars"])
                for r in rows if isinstance((r.get("prompt") or {}).get("chars"), int)}

    out: dict[str, float | None] = {}
    for arm, rows in arms.items():
        base = sizes(arms.get(f"R1/{rows[0]['model']}" if multi_model else "R1") or [])
        mine = sizes(rows) if rows[0].get("mode") == "reading" else {}
        ratios = [mine[k] / base[k] for k in mine.keys() & base.keys() if base[k]]
        out[arm] = float(median(ratios)) if ratios else None
    return out


def summarise_judge(records: Sequence[BankedRecord]) -> dict[str, Any] | None:
    """The judge's agreement with itself over every judged checklist point of the run."""
    from pytest_kgbench.scoring.judge import summarise

    return summarise([{"nodeid": r.get("nodeid"), **r["metrics"]["judge"]} for r in records
                      if (r.get("metrics") or {}).get("judge")])


def arm_cost(records: Sequence[ItemRecord], settings: Settings) -> dict[str, Any]:
    """Tokens the arm's items used, and their cost at list prices (with and without caching)."""
    from pytest_kgbench.core.pricing import dollars, usage_of

    tokens = usage_of(records)
    if not any(tokens.values()):
        return {}
    model_id = settings.model_id(records[0]["model"])
    price = settings.model.prices.get(model_id)
    batched = [r for r in records if (r.get("sent") or {}).get("batch")]
    if not batched:
        return {"tokens": tokens, "cost_usd": dollars(tokens, price), "model_id": model_id}
    from pytest_kgbench.core.pricing import batch_price

    # answers fetched from a batch (--batch) are billed at the batch price
    parts = [dollars(usage_of(batched), batch_price(price)),
             dollars(usage_of([r for r in records if not (r.get("sent") or {}).get("batch")]),
                     price)]
    cost = None if parts[0] is None or parts[1] is None else {
        k: parts[0][k] + parts[1][k] for k in parts[0]}
    return {"tokens": tokens, "cost_usd": cost, "model_id": model_id,
            "batch_tokens": usage_of(batched)}


def cache_read_share(records: Sequence[ItemRecord]) -> float | None:
    """The share of an arm's input tokens read from the provider's prompt cache: cache reads
    over every input token (plain, cache reads, cache writes) of the items whose backend
    reports cache reads (a `cache_read` count in the answer's tokens). None — unknown, never
    0% — when no item reports them or no input token was counted (answers from the response
    cache, a reference agent)."""
    read = total = 0
    for rec in records:
        tokens = (rec.get("answer") or {}).get("tokens") or {}
        if "cache_read" not in tokens:
            continue
        read += int(tokens.get("cache_read") or 0)
        total += sum(int(tokens.get(k) or 0) for k in ("input", "cache_read", "cache_write"))
    return read / total if total else None


def share_text(share: float | None) -> str:
    """A cache-read share as report.md prints it: "n/a" when unknown."""
    return "n/a" if share is None else f"{100 * share:.1f}%"


def metric_summary(records: Iterable[ItemRecord], registry: Registry | None = None
                   ) -> dict[str, Any]:
    from pytest_kgbench.metrics import summarise_all

    return summarise_all(list(records), ordered(registry))


def fingerprint(records: Sequence[ItemRecord], meta: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two runs comparable: the question set (hashed when read), the prompts, the
    grader and the datasets."""
    hashes: dict[str, str] = {}
    conflicts: set[str] = set()
    for rec in records:
        qid = f"{rec['pack']}/{rec['question']}"
        if hashes.setdefault(qid, rec["question_sha256"]) != rec["question_sha256"]:
            conflicts.add(qid)
    prompts: dict[str, str] = {}
    datasets: dict[str, Any] = {}
    for rec in records:
        prompts.setdefault(rec["prompt"]["context_sha256"], rec["condition"])
        datasets.setdefault(f"{rec['pack']}/{rec['variant']}", rec["dataset"])
    return {
        "questions_sha256": set_fingerprint(hashes), "questions_count": len(hashes),
        "questions_changed_during_run": sorted(conflicts),
        "prompts": dict(sorted(prompts.items())), "grader_sha256": meta.get("grader_sha256"),
        "datasets": dict(sorted(datasets.items())),
    }


def build_report(records: Sequence[BankedRecord], settings: Settings, *,
                 missing: list[dict[str, str]], meta: Mapping[str, Any],
                 registry: Registry | None = None) -> dict[str, Any]:
    """report.json as a dict: settings, fingerprint, items, per-arm accuracy, missing items.
    Items that could not be asked (graded "skipped") are listed apart, never in an arm.
    `registry`: the session's pieces (its metrics)."""
    lost = [r for r in records if r["grade"] == "skipped"]
    skipped = [{"nodeid": r.get("nodeid"), "reason": r["reason"]} for r in lost] + list(
        meta.get("unasked") or [])
    records = [r for r in records if r["grade"] != "skipped"]
    multi_model = len({r["model"] for r in [*records, *lost]}) > 1
    arms: dict[str, list[BankedRecord]] = defaultdict(list)
    for rec in records:
        arms[arm_of(rec, multi_model)].append(rec)
    conditions = {}
    ratios = prompt_ratios(arms, multi_model)
    for arm in sorted(arms, key=_arm_order):
        rows = arms[arm]
        conditions[arm] = {"condition": rows[0]["condition"], "label": rows[0]["condition_label"],
                           "model": rows[0]["model"],
                           **arm_summary(rows, settings.plan.stats_seed, registry),
                           "prompt_ratio_r1": ratios[arm],
                           **arm_cost(rows, settings),
                           "cache_read_share": cache_read_share(rows)}
    comparisons = comparison_dicts(records, settings, multi_model, lost)
    not_measured = []
    synthetic = any(r.get("simulated") for r in records)
    if any(r.get("agent_kind") == "reference" and not r.get("simulated") for r in records):
        not_measured.append("model behaviour: reference agents (the questions' own queries) "
                            "answered, no model")
    if synthetic:
        not_measured.append("SIMULATED ANSWERS: the synthetic agent drew gold or trap answers "
                            "at set probabilities; no model was asked")
    return {
        "run_id": settings.plan.run_id, "started": meta.get("started"),
        "finished": meta.get("finished"),
        "settings": settings.to_dict(), "commit": meta.get("commit"),
        "engines": dict(meta.get("engines") or {}),
        "engine_arms": dict(meta.get("engine_arms") or {}),
        "fingerprint": fingerprint(records, meta),
        "complete": not missing, "missing": missing,
        "skipped": skipped, "not_run": list(meta.get("not_run") or []),
        "counts": {"items": len(records), "skipped": len(skipped),
                   "expected": len(records) + len(skipped) + len(missing)},
        "items": [{f: rec.get(f) for f in ITEM_FIELDS} for rec in records],
        "conditions": conditions,
        "comparisons": comparisons,
        "statistics": {"seed": settings.plan.stats_seed, "bootstrap": "percentile, over questions",
                       "resamples": 9999, "confidence": 0.95,
                       "all_equal": "every value v of n the same: [v - u(v - lo), v + u(hi - "
                                    "v)], u the Wilson upper bound of 0 in n, [lo, hi] the "
                                    "score's range (docs/statistics.md)",
                       "pass_threshold": stats.PASS_THRESHOLD,
                       "mcnemar": "exact: two-sided binomial on the discordant questions",
                       "family": "Holm across every comparison of the run"},
        "synthetic": synthetic,
        "judge": summarise_judge(records),
        "settings_floor": settings.plan.floor,
        "not_measured": not_measured,
    }


def _arm_order(arm: str) -> tuple[int, int, int, str]:
    """Reading rungs first, then by rung number, then by schema arm (prompt, tools, ...),
    then by engine arm."""
    from pytest_kgbench.core.conditions import SCHEMA_ARMS, id_parts

    rung, schema, _ = id_parts(arm.split("/", 1)[0])
    order = list(SCHEMA_ARMS)
    return (rung[0] != "R", int(rung[1:]) if rung[1:].isdigit() else 0,
            order.index(schema) if schema in order else len(order), arm)


def pct(value: float | None) -> str:
    """A share as every view prints it."""
    return "—" if value is None else f"{100 * value:.1f}%"


def discordant_text(discordant: Any) -> str:
    """The discordant questions of a comparison as every view shows them: "+b / −a", the
    questions passing only under b (they raise b − a) and only under a (they lower it), so
    the signs agree with the difference's."""
    a_only, b_only = discordant or (0, 0)
    return f"+{b_only} / −{a_only}"


def p_text(p: float | None) -> str:
    """A p-value as every view prints it: four decimals, or two significant digits below
    0.0001 (never 0.0)."""
    return "—" if p is None else (f"{p:.4f}" if p >= 0.0001 else f"{p:.1e}")


def ci_text(ci: Sequence[float | None] | None) -> str:
    """An interval of shares, in percentage points, as every view prints it."""
    if not ci or ci[0] is None or ci[1] is None:
        return "—"
    return f"{100 * ci[0]:.1f}–{100 * ci[1]:.1f}"


TIER_ORDER = ("L3", "L1", "L2", "L4", "L5")
"""How the per-tier tables lead: L3, the tier where the meaning of the data decides."""


def headline_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The headline: every arm's accuracy per tier (never pooled across tiers; L3 first) with
    its 95% interval and number of questions, and the arm's prompt size."""
    tiers = [t for t in TIER_ORDER if any(t in c["by_tier"] for c in report["conditions"].values())]
    header = ["arm", *tiers, "prompt ≈ tokens"]
    rows = []
    for arm, c in report["conditions"].items():
        cells = [arm + (f" {c['label']}" if "/" not in arm else "")]
        for t in tiers:
            bt = c["by_tier"].get(t)
            cells.append("—" if not bt else
                         f"{pct(bt['accuracy'])} [{ci_text(bt['ci95'])}] n={bt['n_questions']}")
        tokens, ratio = c.get("prompt_tokens"), c.get("prompt_ratio_r1")
        shown = ratio is not None and c.get("condition") != "R1"  # R1 is the measure
        cells.append("—" if tokens is None else f"{tokens:,}" + (
            f" ({ratio:.2f}× R1)" if shown else ""))
        rows.append(cells)
    return header, rows


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def engine_lines(report: Mapping[str, Any]) -> list[str]:
    """The engine each query language ran on ("- SPARQL engine: endpoint=URL; SQL engine:
    duckdb"), or nothing for a run folder that did not record them."""
    engines = report.get("engines") or {}
    if not engines:
        return []
    arms = report.get("engine_arms") or {}

    def named(lang: str) -> str:
        if lang in arms:  # one arm per engine: `D4@oxigraph` ran on oxigraph
            listed = ", ".join(f"{label} (`@{name}`)" for name, label in arms[lang].items())
            return f"{lang.upper()} engines, one arm each: {listed}"
        return f"{lang.upper()} engine: {engines[lang]}"

    return ["- " + "; ".join(named(lang) for lang in sorted(engines))]


def render_markdown(report: Mapping[str, Any], registry: Registry | None = None) -> str:
    """report.md from report.json's dict (the metrics' columns as `registry`'s metrics, the
    session's, name and order them)."""
    s, fp = report["settings"], report["fingerprint"]
    lines = [f"# kgbench run {report['run_id']}", ""]
    lines += banner_lines(report) + settings_lines(report, s)
    header, rows = headline_rows(report)
    lines += _table(header, rows) + [""]
    lines += metric_lines(report, registry)
    lines += cost_lines(report)
    lines += effort_lines(report)
    lines += declined_lines(report)
    lines += comparison_lines(report)
    lines += judge_lines(report.get("judge"))
    lines += unasked_lines(report)
    lines += fingerprint_lines(fp)
    if report["not_measured"]:
        lines += ["", "## Not measured", ""] + [f"- {n}" for n in report["not_measured"]]
    return "\n".join(lines) + "\n"


def banner_lines(report: Mapping[str, Any]) -> list[str]:
    """The bold warnings that lead report.md: a halted, interrupted or simulated run."""
    lines: list[str] = []
    if report.get("halted"):
        lines += [f"**HALTED — {report['halted']}. The items banked before it are kept; the "
                  "rest never ran.**", ""]
    elif report.get("interrupted"):
        lines += [f"**INTERRUPTED — {report['interrupted']}. The items banked before it are "
                  f"kept; `pytest --resume {report['run_id']}` asks the rest.**", ""]
    if report.get("synthetic"):
        lines += ["**SIMULATED ANSWERS — the synthetic agent drew gold or trap answers; no model "
                  "was asked.**", ""]
    return lines


def settings_lines(report: Mapping[str, Any], s: Mapping[str, Any]) -> list[str]:
    """What ran (`s`, the run's settings) and when, then the accuracy table's heading and note."""
    return [
        f"- agent: {s['agent']}; models: {', '.join(s['models'])}; repeats: {s['repeats']}; "
        f"asked {s.get('ask') or 'apart'}" + ("; floor arm" if s.get("floor") else ""),
        f"- conditions: {', '.join(s['condition_ids'])}; variants: {', '.join(s['variants'])}",
        *engine_lines(report),
        f"- items banked: {report['counts']['items']} of {report['counts']['expected']}"
        + ("" if report["complete"] else " — **INCOMPLETE**"),
        f"- started {report['started']}, finished {report['finished']}; commit "
        f"{report.get('commit') or 'unknown'}", "",
        "## Accuracy per tier", "",
        "Per tier, never pooled: accuracy = mean over questions of the mean over repeats "
        "(and variants) of each question (correct 1, partial ½), with its 95% bootstrap "
        "interval over questions (where every question has the same mean, the interval "
        "of docs/statistics.md, which has width) and n, the number of questions. "
        "Prompt ≈ tokens: the median size of the arm's prompts, at about four "
        "characters a token, and for a reading arm its ratio to R1's: the same facts in "
        "another form can be several times longer (docs/conditions.md).", ""]


def cost_lines(report: Mapping[str, Any]) -> list[str]:
    """The tokens and cost table of report.md (nothing when no arm counted tokens)."""
    cost_rows = [[arm, str(c["tokens"]["input"]), str(c["tokens"]["output"]),
                  str(c["tokens"]["cache_read"]), str(c["tokens"]["cache_write"]),
                  "—" if not c.get("cost_usd") else f"${c['cost_usd']['billed']:.4f}",
                  "—" if not c.get("cost_usd") else f"${c['cost_usd']['without_cache']:.4f}",
                  share_text(c.get("cache_read_share"))]
                 for arm, c in report["conditions"].items() if c.get("tokens")]
    if not cost_rows:
        return []
    return ["## Tokens and cost", "", "At the list prices in the settings (— where no "
            "price is known); 'without cache' bills every cached token as plain input; "
            "cache-read share: the input tokens read from the provider's prompt cache "
            "(n/a where the backend does not report them).", "",
            *_table(["arm", "input", "output", "cache read", "cache write", "cost",
                     "cost without cache", "cache-read share"], cost_rows), ""]


def declined_lines(report: Mapping[str, Any]) -> list[str]:
    """The line counting each arm's declined questions (nothing when none declined)."""
    declined = {a: c["declined"] for a, c in report["conditions"].items() if c["declined"]}
    if not declined:
        return []
    return ["Declined (L5, counted beside pass/fail): "
            + ", ".join(f"{a}: {n}" for a, n in declined.items()), ""]


def comparison_lines(report: Mapping[str, Any]) -> list[str]:
    """The paired comparisons' section of report.md, with the refused ones' reasons."""
    if not report["comparisons"]:
        return []
    lines = ["## Paired comparisons", "",
             "Per tier, paired question by question: diff = accuracy(b) − accuracy(a) with a "
             "paired bootstrap 95% interval; +b / −a = the discordant questions: those "
             "passing only under b (which raise the difference) / only under a (which "
             "lower it); exact McNemar p, Holm-adjusted across all comparisons of the run; "
             "'could reach' says whether that many discordant questions could give "
             "p < 0.05 at all; skipped a / b: the questions each side lost to a prompt "
             "longer than the model accepts (a comparison that lost any has no p-value: "
             "a paired test would silently drop them); dropped: the questions either "
             "side's store could not serve (its reference query answered wrong there), "
             "left out of both sides, for every model alike.", ""]
    rows = []
    for c in report["comparisons"]:
        rows.append([c["a"], c["b"], c["tier"], str(c["n_questions"]),
                     "—" if c["diff"] is None else f"{100 * c['diff']:+.1f}",
                     ci_text(c["ci95"]), discordant_text(c["discordant"]),
                     p_cell(c, "mcnemar_p"), p_cell(c, "holm_p"),
                     "yes" if c["can_reach_significance"] else "no", lost_text(c),
                     str(c.get("dropped", 0)), calls_text(c.get("tool_calls"))])
    lines += _table(["a", "b", "tier", "n", "diff (pts)", "95% CI", "+b / −a",
                     "McNemar p", "Holm p", "could reach p<0.05", "skipped a / b",
                     "dropped", "tool calls b − a (Wilcoxon p)"], rows) + [""]
    lines += [f"- {c['a']} vs {c['b']} ({c['tier']}): {c['refused']}"
              for c in report["comparisons"] if c.get("refused")]
    lines += [""] if any(c.get("refused") for c in report["comparisons"]) else []
    return lines


def unasked_lines(report: Mapping[str, Any]) -> list[str]:
    """The sections listing what was not asked: not run, skipped, never reported."""
    lines: list[str] = []
    if report.get("not_run"):
        lines += ["## Not run on these packs (the pack lacks what the condition needs)", ""]
        lines += [f"- {line}" for line in report["not_run"]] + [""]
    if report.get("skipped"):
        lines += ["## Items skipped (not asked, not in the accuracy)", ""]
        lines += [f"- `{m['nodeid']}`: {m['reason']}" for m in report["skipped"]] + [""]
    if report["missing"]:
        lines += ["## Items that never reported", ""]
        lines += [f"- `{m['nodeid']}`: {m['why'].splitlines()[0] if m['why'] else ''}"
                  for m in report["missing"]] + [""]
    return lines


def fingerprint_lines(fp: Mapping[str, Any]) -> list[str]:
    """The fingerprints' section of report.md: question set, grader, prompts, datasets."""
    lines = ["## Fingerprints", "",
             f"- question set: `{fp['questions_sha256']}` ({fp['questions_count']} questions)",
             f"- grader: `{fp['grader_sha256']}`",
             f"- distinct prompt contexts: {len(fp['prompts'])}"]
    for name, ds in fp["datasets"].items():
        lines.append(f"- dataset {name}: seed {ds['seed']}, build `{ds['build']}`")
    if fp["questions_changed_during_run"]:
        lines.append("- **questions changed during the run**: "
                     + ", ".join(fp["questions_changed_during_run"]))
    return lines


def p_cell(c: Mapping[str, Any], key: str) -> str:
    """A comparison's p-value as every view prints it: "refused" where it has none because
    questions were lost to a skip (`refused`)."""
    return "refused" if c.get("refused") else p_text(c.get(key))


def lost_text(c: Mapping[str, Any]) -> str:
    """The questions each side of a comparison lost to a prompt longer than the model
    accepts, "a / b" ("—" in a report from before they were counted)."""
    lost = c.get("lost")
    return "—" if not lost else f"{lost['a']} / {lost['b']}"


def calls_text(diff: Mapping[str, Any] | None) -> str:
    """A paired difference of tool calls as every view prints it: the mean per question of
    b − a, the relative change, and the Wilcoxon p."""
    if not diff:
        return "—"
    rel = "" if diff.get("relative") is None else f" ({100 * diff['relative']:+.0f}%)"
    return f"{diff['mean_diff']:+.2f}{rel}, p {p_text(diff.get('wilcoxon_p'))}"


EFFORT_NOTE = ("Per tier, never pooled: each tier's accuracy beside what its items cost — tool "
               "calls and rounds per item as median [quartiles] and maximum; the median latency "
               "and tokens (input and output). An arm that must discover the store (--schema "
               "tools) should reach the same accuracy with more calls; one that cannot (none) "
               "shows what the description is worth.")


def effort_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The cost of discovery, as every view shows it: per arm that made tool calls and per
    tier (never pooled; L3 first), the tier's accuracy, tool calls and rounds per item
    (median [quartiles], max), median latency and tokens."""
    rows = []
    for arm, c in report["conditions"].items():
        calls = (c.get("effort") or {}).get("tool_calls")
        if not calls or not calls["max"]:
            continue  # a reading arm, or one that made no call
        for tier in TIER_ORDER:
            bt = (c.get("by_tier") or {}).get(tier) or {}
            e = bt.get("effort") or {}
            calls, rounds = e.get("tool_calls"), e.get("rounds")
            if not calls:
                continue  # no item of the tier (or a report from before per-tier effort)
            rows.append([arm, tier, f"{pct(bt.get('accuracy'))} (n={bt.get('n_questions')})",
                         f"{calls['median']:g} [{calls['p25']:g}–{calls['p75']:g}], max "
                         f"{calls['max']:g}",
                         "—" if not rounds else f"{rounds['median']:g} (max {rounds['max']:g})",
                         "—" if e.get("latency_s") is None else f"{e['latency_s']:.2f} s",
                         "—" if not e.get("tokens") else f"{e['tokens']:,.0f}"])
    return ["arm", "tier", "accuracy", "tool calls", "rounds", "latency", "tokens"], rows


def effort_lines(report: Mapping[str, Any]) -> list[str]:
    """The cost of discovery in report.md (effort_rows)."""
    header, rows = effort_rows(report)
    if not rows:
        return []
    return ["## What answering cost: tool calls, rounds, time", "", EFFORT_NOTE, "",
            *_table(header, rows), ""]


def metric_lines(report: Mapping[str, Any], registry: Registry | None = None) -> list[str]:
    """The metrics table of report.md: a column per registered metric any arm measured."""
    metrics = [m for m in ordered(registry)
               if any(m.name in (c.get("metrics") or {}) for c in report["conditions"].values())]
    if not metrics:
        return []
    rows = [[arm, *(m.cell(c["metrics"][m.name]) if m.name in (c.get("metrics") or {}) else "—"
                    for m in metrics)]
            for arm, c in report["conditions"].items() if c.get("metrics")]
    lines = ["## Metrics per arm", "",
             "Each over the items where it applies (a rate's n in parentheses):", ""]
    lines += [f"- {m.title}: {m.help}" for m in metrics if m.help]
    return lines + [""] + _table(["arm", *(m.title for m in metrics)], rows) + [""]


def judge_lines(judge: Mapping[str, Any] | None) -> list[str]:
    """The judge's section of report.md: how far its two passes agree, and where they do not."""
    if not judge:
        return []
    kappa = "undefined (both passes constant)" if judge["kappa"] is None else \
        f"{judge['kappa']:.3f}"
    lines = ["## Judge (\"why\" questions)", "",
             f"{judge.get('model') or 'the judge model'} graded {judge['items']} answers against "
             f"their checklists twice ({judge['points']} points"
             + (f"; {judge['unreadable']} answers without two readable verdicts" if
                judge["unreadable"] else "")
             + (f"; {judge['no_prose']} answers with no prose, not judged" if
                judge.get("no_prose") else "") + ").",
             f"Points made (first pass): {pct(judge['made'])}; agreement between passes: "
             f"{pct(judge['agreement'])}; Cohen's kappa: {kappa}; judge tokens: "
             f"{judge['tokens']['input']} in, {judge['tokens']['output']} out.", ""]
    if judge["disagreements"]:
        lines += ["Points the two passes disagreed on:", ""]
        lines += [f"- `{d['nodeid']}` point {d['point']}"
                  + (f" ({d['text']})" if d.get("text") else "")
                  + f": first {d['first']}, second {d['second']}" for d in judge["disagreements"]]
        lines.append("")
    return lines


def moved_lines(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What a change of the instrument moved, old beside new: each arm's accuracy and passes
    per tier, and each metric's rate or summary, where either report has it."""
    lines = ["| arm | tier | accuracy before | after | passes before | after |",
             "|---|---|---|---|---|---|"]
    for arm, after in new.get("conditions", {}).items():
        before = (old.get("conditions") or {}).get(arm) or {}
        for tier in TIER_ORDER:
            a, b = (before.get("by_tier") or {}).get(tier), (after.get("by_tier") or {}).get(tier)
            if not a and not b:
                continue
            a, b = a or {}, b or {}
            lines.append(f"| {arm} | {tier} | {pct(a.get('accuracy'))} | {pct(b.get('accuracy'))} "
                         f"| {a.get('passes', '—')} | {b.get('passes', '—')} |")
    lines += ["", "| arm | metric | before | after |", "|---|---|---|---|"]
    for arm, after in new.get("conditions", {}).items():
        before = ((old.get("conditions") or {}).get(arm) or {}).get("metrics") or {}
        now = after.get("metrics") or {}
        for name in sorted(set(before) | set(now)):
            def said(summary: Any) -> str:
                if not summary:
                    return "—"
                if "rate" in summary:
                    return f"{pct(summary['rate'])}" + (f" ({summary['n']})" if "n" in summary
                                                          else "")
                return json.dumps(summary, sort_keys=True)

            if said(before.get(name)) != said(now.get(name)):
                lines.append(f"| {arm} | {name} | {said(before.get(name))} | "
                             f"{said(now.get(name))} |")
    return lines


LEGEND = ("C correct", "P partial", "W wrong", "T timeout", "A abstained", "B blocked",
          "D declined", "M truncated", "N refused", "Z empty")


def summary_line(report: Mapping[str, Any]) -> str:
    """Who answered, how many items got each status letter (with the legend), and the cost."""
    s = report.get("settings") or {}
    counts: dict[str, int] = {}
    for item in report.get("items") or []:
        if item.get("letter"):
            counts[str(item["letter"])] = counts.get(str(item["letter"]), 0) + 1
    letters = " ".join(f"{k} {counts[k]}" for k in "CPWTABDMNZ" if counts.get(k)) or "no grades"
    arms = list((report.get("conditions") or {}).values())
    spent = sum(((c.get("cost_usd") or {}).get("billed") or 0.0) for c in arms)
    cost = f"; ${spent:.4f} at list prices" if spent else ""
    unpriced = sorted({str(c.get("model_id")) for c in arms
                       if c.get("tokens") and c.get("cost_usd") is None})
    if unpriced:  # tokens spent at no known price: unknown, never $0
        cost += f"; cost unknown for {', '.join(unpriced)} (no price in the settings)"
    return (f"agent {s.get('agent')}, models {', '.join(map(str, s.get('models') or []))}: "
            f"{letters} ({', '.join(LEGEND)}){cost}")


def terminal_lines(report: Mapping[str, Any]) -> list[str]:
    header, rows = headline_rows(report)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    out = [summary_line(report), "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    out += [f"not run: {line}" for line in report.get("not_run") or []]
    if not report["complete"]:
        out.append(f"INCOMPLETE: {len(report['missing'])} item(s) never reported; see report.md")
    return out
