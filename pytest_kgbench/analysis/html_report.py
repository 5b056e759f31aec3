"""report.html: one self-contained page for one run's report dict (report.json; docs/runs.md:
Reading a run), which leads with its answer.

The page opens with a banner when the run is not whole (HALTED with the harness's reason,
INCOMPLETE with what never reported) or its answers were simulated, then the finding: one
generated sentence stating the largest significant difference (or that none reached
significance) above the forest plot of the comparisons, or, without comparisons, above the
per-tier accuracy table. Then one small chart per tier, the question x condition grid (each
cell a link to that item's record further down) and the records themselves; fingerprints are
folded away.

No network: no scripts, no external stylesheets or fonts. Charts are matplotlib figures saved
as SVG (text kept as text, ``svg.fonttype = 'none'``) and inlined. matplotlib is imported
inside the functions, on plain ``Figure`` objects (no pyplot, no GUI backend), because this
module is imported by the pytest plugin at start-up.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from pytest_kgbench.analysis.report import (
    EFFORT_NOTE,
    TIER_ORDER,
    calls_text,
    ci_text,
    discordant_text,
    effort_rows,
    headline_rows,
    lost_text,
    p_cell,
    p_text,
    pct,
)

#: Cell colours of the question x condition grid; a mean score between two grades is blended.
GRADE_COLOURS = {"correct": "#43a047", "partial": "#ffb300", "wrong": "#e53935",
                 "declined": "#9e9e9e", "missing": "#eceff1"}
#: Arm (condition) colours: blues, cyans, purples and pinks only, so that no arm reads as a
#: grade (green, amber, red, grey).
ARM_COLOURS = ("#1f77b4", "#9467bd", "#17becf", "#e377c2", "#393b79", "#6b6ecf", "#0b7285",
               "#7b4173", "#3182bd", "#a55194", "#5254a3", "#22b8cf", "#ce6dbd", "#08519c",
               "#54278f", "#9e9ac8")
SIGNIFICANT = 0.05
_RC: Any = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 9,
            "axes.spines.top": False, "axes.spines.right": False}
_NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
_ANSWER_CHARS = 6000  # an answer's text shown in its record (the rest is in answers.jsonl)
_QUERY_ROWS = 5

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;
 margin:1.5em auto;max-width:1300px;padding:0 1em;color:#212121;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.3em} h2{font-size:1.2em;margin-top:1.8em;
 border-bottom:1px solid #ccc;padding-bottom:.2em} h3{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{white-space:nowrap;border:1px solid #d0d0d0;padding:.25em .6em;text-align:left;
 vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.9em;word-break:break-all} .bad{color:#c62828;font-weight:bold}
.ok{color:#2e7d32;font-weight:bold} .muted{color:#757575}
.banner{background:#c62828;color:#fff;font-size:1.3em;font-weight:bold;padding:.6em .8em;
 margin-bottom:.6em;letter-spacing:.03em;overflow-wrap:anywhere}
.banner.simulated{background:#6a1b9a} .banner small{display:block;font-size:.7em;
 font-weight:normal;letter-spacing:0;margin-top:.3em}
.finding{font-size:1.15em;background:#f5f7fb;border-left:4px solid #1f77b4;padding:.6em .9em;
 margin:.8em 0;overflow-wrap:anywhere}
.wide{overflow-x:auto;max-width:100%}
.chart svg{max-width:100%;height:auto}
.multiples{display:flex;flex-wrap:wrap;gap:.5em 1.5em}
.multiples .chart{flex:0 1 22em;min-width:0}
dl.meta{display:grid;grid-template-columns:max-content auto;
 gap:.2em 1em;margin:0} dl.meta dt{font-weight:bold} dl.meta dd{margin:0;overflow-wrap:anywhere}
tr.dim td{color:#9e9e9e}
.legend{display:flex;flex-wrap:wrap;gap:.3em 1.2em;margin:.4em 0;font-size:.9em}
.legend span{white-space:nowrap} .swatch{display:inline-block;width:.9em;height:.9em;
 vertical-align:-.1em;margin-right:.35em;border:1px solid #bdbdbd}
table.grid td.cell{text-align:center;font-variant-numeric:tabular-nums;padding:0}
table.grid td.cell a{display:block;padding:.2em .5em;color:#111;text-decoration:none}
table.grid td.cell a:hover{outline:2px solid #1f77b4}
table.grid tr.tier th{background:#e8eaf6;text-align:left}
.record{border-top:1px solid #e0e0e0;padding:.4em 0} .record:target{background:#fffde7}
.record pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#fafafa;
 border:1px solid #eee;padding:.4em;margin:.3em 0;font-size:.85em;max-height:24em;overflow:auto}
details summary{cursor:pointer;font-weight:bold}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], *,
           num: Sequence[int] = (), row_class: Sequence[str] | None = None) -> str:
    """An HTML table; cells are escaped here, so pass plain text."""
    out = ['<div class="wide"><table><thead><tr>', *(f"<th>{_e(h)}</th>" for h in header),
           "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = (f'<td class="num">{_e(c)}</td>' if j in num else f"<td>{_e(c)}</td>"
                 for j, c in enumerate(row))
        out += [f"<tr{cls}>", *cells, "</tr>"]
    return "".join(out) + "</tbody></table></div>"


def _svg(fig: Any, salt: str) -> str:
    """The figure as an inline <svg> element (XML prolog and DOCTYPE dropped)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({**_RC, "svg.hashsalt": f"kgbench-{salt}"}):
        fig.savefig(buf, format="svg", metadata=_NO_METADATA)
    fig.clf()
    text = buf.getvalue()
    return f'<div class="chart">{text[text.index("<svg"):]}</div>'


def _rc() -> Any:
    import matplotlib

    return matplotlib.rc_context(_RC)


def _arm_name(arm: str, cond: Mapping[str, Any]) -> str:
    label = cond.get("label")
    return f"{arm} {label}" if label and "/" not in arm else arm


def _tiers(report: Mapping[str, Any]) -> list[str]:
    """The run's tiers, L3 first as every view orders them, then any other tier by name."""
    found = {i.get("tier") for i in report.get("items", [])}
    for c in report.get("conditions", {}).values():
        found.update(c.get("by_tier", {}))
    known = [t for t in TIER_ORDER if t in found]
    return known + sorted(str(t) for t in found if t and t not in TIER_ORDER)


def arm_colours(arms: Sequence[str]) -> dict[str, str]:
    """Each arm's colour (ARM_COLOURS in turn), the same in every chart and legend."""
    return {arm: ARM_COLOURS[i % len(ARM_COLOURS)] for i, arm in enumerate(arms)}


def _legend(report: Mapping[str, Any]) -> str:
    """The arms' colours as an HTML legend, which wraps to any width (never clipped)."""
    conds = report.get("conditions", {})
    colours = arm_colours(list(conds))
    return '<div class="legend">' + "".join(
        f'<span><i class="swatch" style="background:{colours[a]}"></i>'
        f"{_e(_arm_name(a, conds[a]))}</span>" for a in conds) + "</div>"


# --- the finding ------------------------------------------------------------------------------

def _arm_said(report: Mapping[str, Any], arm: Any) -> str:
    cond = (report.get("conditions") or {}).get(arm) or {}
    return _arm_name(str(arm), cond)


def _comparison_said(report: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    return (f"{_arm_said(report, c.get('b'))} against {_arm_said(report, c.get('a'))} on "
            f"{c.get('tier')}: {100 * c['diff']:+.1f} points [95% CI "
            f"{_points(c.get('ci95'))}] over {c.get('n_questions')} questions, Holm-adjusted "
            f"McNemar p = {p_text(c.get('holm_p'))}")


def _points(ci: Sequence[float | None] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "—"
    return f"{100 * ci[0]:+.1f} to {100 * ci[1]:+.1f}"


def finding(report: Mapping[str, Any]) -> str:
    """The run's answer in one sentence: the largest significant difference between two
    conditions (Holm-adjusted p < 0.05), or that none reached significance (with the largest
    difference seen); without comparisons, the leading tier's best arm."""
    comps = [c for c in report.get("comparisons") or [] if c.get("diff") is not None]
    sig = [c for c in comps if c.get("holm_p") is not None and c["holm_p"] < SIGNIFICANT]
    if sig:
        best = max(sig, key=lambda c: (abs(c["diff"]), -c["holm_p"]))
        return (f"The largest significant difference: {_comparison_said(report, best)}; "
                f"{len(sig)} of {len(comps)} comparisons reached p < 0.05.")
    if comps:
        best = max(comps, key=lambda c: abs(c["diff"]))
        unreachable = sum(not c.get("can_reach_significance") for c in comps)
        largest = (f"the largest was {_comparison_said(report, best)}" if best["diff"] else
                   "every difference was 0.0 points")
        return (f"No difference reached significance (Holm-adjusted p < 0.05) in {len(comps)} "
                f"comparison(s); {largest}."
                + (f" {unreachable} of them had too few discordant questions to reach "
                   "p < 0.05 at all." if unreachable else ""))
    conds = report.get("conditions") or {}
    for tier in TIER_ORDER:
        scored = [(c["by_tier"][tier]["accuracy"], arm) for arm, c in conds.items()
                  if (c.get("by_tier") or {}).get(tier, {}).get("accuracy") is not None]
        if not scored:
            continue
        top = max(a for a, _ in scored)
        leaders = [arm for a, arm in scored if a == top]
        if len(leaders) == len(scored) > 1:
            said = f"every arm scored {pct(top)}"
        else:
            n = conds[leaders[0]]["by_tier"][tier]["n_questions"]
            said = (f"{', '.join(_arm_said(report, a) for a in leaders)} scored highest: "
                    f"{pct(top)} of {n} questions")
        return (f"No conditions were compared (--ablation runs the paired comparisons, none "
                f"was asked for). On {tier}, {said}.")
    return "No graded items: nothing to report."


def _finding_html(report: Mapping[str, Any]) -> str:
    """The finding as the page shows it: after what the run covers when it is not whole."""
    counts = report.get("counts") or {}
    cover = ""
    if report.get("halted") or not report.get("complete", True):
        cover = (f"{'The run halted' if report.get('halted') else 'The run is incomplete'}: "
                 f"these figures cover the {counts.get('items')} of {counts.get('expected')} "
                 "items banked. ")
    text = _e(cover + finding(report))
    return text.replace("--ablation", '<code style="white-space:nowrap">--ablation</code>')


# --- charts -----------------------------------------------------------------------------------

def accuracy_chart(report: Mapping[str, Any]) -> str:
    """Small multiples: one chart per tier (L3 first), each a horizontal bar per arm with its
    95% interval, arms named by id on the axis (their labels in the HTML legend). The charts
    are separate SVGs that wrap side by side, so a narrow screen stacks them."""
    conds: Mapping[str, Mapping[str, Any]] = report.get("conditions", {})
    arms, tiers = list(conds), _tiers(report)
    if not arms or not tiers:
        return '<p class="muted">No graded items: nothing to chart.</p>'
    return ('<div class="multiples">' + "".join(_tier_chart(conds, arms, tier) for tier in tiers)
            + "</div>")


def _tier_chart(conds: Mapping[str, Mapping[str, Any]], arms: Sequence[str], tier: str) -> str:
    from matplotlib.figure import Figure

    colours = arm_colours(arms)
    id_w = max(len(a) for a in arms) * 0.075 + 0.3
    with _rc():
        fig = Figure(figsize=(2.6 + id_w, 0.24 * len(arms) + 0.75), layout="constrained")
        ax = fig.add_subplot()
        for y, arm in enumerate(arms):
            bt = conds[arm].get("by_tier", {}).get(tier)
            acc = bt.get("accuracy") if bt else None
            if acc is None:
                ax.text(0.02, y, "not asked", va="center", fontsize=7, color="#757575")
                continue
            ci = bt.get("ci95")
            err = None
            if ci and ci[0] is not None and ci[1] is not None:
                err = [[max(0.0, acc - ci[0])], [max(0.0, ci[1] - acc)]]
            ax.barh(y, acc, height=0.7, color=colours[arm], xerr=err, capsize=2,
                    error_kw={"elinewidth": 0.8, "ecolor": "#212121"})
            ax.text(1.03, y, f"{100 * acc:.0f}%", va="center", fontsize=7)
        ax.set_title(f"{tier} (n={max(_n(conds[a], tier) for a in arms)} questions)",
                     fontweight="bold", fontsize=9)
        ax.set_yticks(range(len(arms)))
        ax.set_yticklabels(arms, fontsize=7)
        ax.set_ylim(len(arms) - 0.4, -0.6)
        ax.set_xlim(0, 1.2)
        ax.set_xticks([0, 0.5, 1.0])
        ax.set_xticklabels(["0", "50%", "100%"], fontsize=7)
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        ax.set_axisbelow(True)
        return _svg(fig, f"accuracy-{tier}")


def _n(cond: Mapping[str, Any], tier: str) -> Any:
    return (cond.get("by_tier", {}).get(tier) or {}).get("n_questions", 0)


def _blend(score: float) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    lo, hi, t = ("wrong", "partial", 2 * score) if score <= 0.5 else \
        ("partial", "correct", 2 * score - 1)
    a, b = to_rgb(GRADE_COLOURS[lo]), to_rgb(GRADE_COLOURS[hi])
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(255 * c):02x}" for c in rgb)


def forest_chart(report: Mapping[str, Any]) -> str:
    """Each comparison's difference (b − a) with its 95% interval, as an inline SVG."""
    from matplotlib.figure import Figure

    comparisons: Sequence[Mapping[str, Any]] = report.get("comparisons") or []
    if not comparisons:
        return ""
    labels = [f"{c.get('b')} vs {c.get('a')}  [{c.get('tier')}]" for c in comparisons]
    with _rc():
        fig = Figure(figsize=(max(len(s) for s in labels) * 0.065 + 4.0,
                              1.0 + 0.28 * len(comparisons)), layout="constrained")
        ax = fig.add_subplot()
        ax.axvline(0, color="#616161", linewidth=0.8)
        for y, c in enumerate(comparisons):
            diff, ci = c.get("diff"), c.get("ci95")
            sig = c.get("holm_p") is not None and c["holm_p"] < SIGNIFICANT
            colour = "#0d47a1" if sig else "#78909c"
            if ci and ci[0] is not None and ci[1] is not None:
                ax.plot([ci[0], ci[1]], [y, y], color=colour, linewidth=1.6)
            if diff is not None:
                ax.plot([diff], [y], "o", color=colour, markersize=5,
                        markerfacecolor=colour if sig else "white")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("difference in accuracy, b − a (filled: Holm p < 0.05)")
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        return _svg(fig, "forest")


# --- the question x condition grid ------------------------------------------------------------

def _slug(*parts: Any) -> str:
    return "rec-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "--".join(str(p) for p in parts))


def _arm_of(item: Mapping[str, Any], by_key: Mapping[tuple[Any, Any], str], multi: bool) -> str:
    return by_key.get((item.get("condition"), item.get("model"))) or (
        f"{item.get('condition')}/{item.get('model')}" if multi else str(item.get("condition")))


def _grid_items(report: Mapping[str, Any]
                ) -> tuple[list[tuple[str, str]], list[str], dict[tuple[str, str], list[Any]]]:
    """(row, tier) pairs sorted by tier (L3 first) then row, the arms, and each cell's items."""
    conds = report.get("conditions", {})
    by_key = {(c.get("condition"), c.get("model")): arm for arm, c in conds.items()}
    multi = len({i.get("model") for i in report.get("items", [])}) > 1
    cells: dict[tuple[str, str], list[Any]] = {}
    tier_of: dict[str, str] = {}
    for it in report.get("items", []):
        row = f"{it.get('pack')}/{it.get('variant')}/{it.get('question')}"
        tier_of.setdefault(row, str(it.get("tier") or ""))
        cells.setdefault((row, _arm_of(it, by_key, multi)), []).append(it)
    arms = list(conds) + sorted({a for _, a in cells} - set(conds))
    order = {t: i for i, t in enumerate(_tiers(report))}
    rows = sorted(tier_of.items(), key=lambda rt: (order.get(rt[1], len(order)), rt[0]))
    return rows, arms, cells


def grid_cells(report: Mapping[str, Any]) -> tuple[list[str], list[str], list[list[Any]]]:
    """Rows (``pack/variant/question  (tier)``, sorted by tier, L3 first, then by name), arms,
    and per cell the mean score over repeats, ``"declined"`` when no repeat was scored, or
    ``None`` when nothing was banked."""
    rows, arms, cells = _grid_items(report)
    grid: list[list[Any]] = []
    for row, _ in rows:
        line: list[Any] = []
        for arm in arms:
            items = cells.get((row, arm))
            kept = [float(i["score"]) for i in items or () if i.get("score") is not None]
            line.append(None if items is None else
                        (sum(kept) / len(kept) if kept else "declined"))
        grid.append(line)
    return [f"{r}  ({t})" if t else r for r, t in rows], arms, grid


def cell_text(items: Sequence[Mapping[str, Any]]) -> str:
    """A cell's score over its repeats: "1/3" is one correct answer of three (a partial
    answer counts ½: "1.5/3"); declined repeats are counted apart ("declined" when all were)."""
    scored = [float(i["score"]) for i in items if i.get("score") is not None]
    declined = len(items) - len(scored)
    if not scored:
        return "declined" if items else "–"
    total = sum(scored)
    text = f"{total:g}/{len(scored)}"
    return text + (f" +{declined} declined" if declined else "")


def _grid(report: Mapping[str, Any], linked: bool) -> str:
    """The question x condition grid as an HTML table: rows grouped by tier, each cell its
    score over repeats, coloured by the mean, with a tooltip of each repeat's grade and a link
    to the item's record."""
    rows, arms, cells = _grid_items(report)
    if not rows:
        return '<p class="muted">No items were banked.</p>'
    conds = report.get("conditions", {})
    out = ['<div class="wide"><table class="grid"><thead><tr><th>question</th>']
    out += [f'<th title="{_e(_arm_name(a, conds.get(a, {})))}">{_e(a)}</th>' for a in arms]
    out.append("</tr></thead><tbody>")
    tier = None
    for row, row_tier in rows:
        if row_tier != tier:
            tier = row_tier
            out.append(f'<tr class="tier"><th colspan="{len(arms) + 1}">{_e(tier)}</th></tr>')
        out.append(f"<tr><th>{_e(row)}</th>")
        for arm in arms:
            items = sorted(cells.get((row, arm)) or [], key=lambda i: i.get("repeat") or 0)
            if not items:
                out.append(f'<td class="cell" style="background:{GRADE_COLOURS["missing"]}" '
                           f'title="{_e(row)} under {_e(arm)}: not banked">–</td>')
                continue
            scored = [float(i["score"]) for i in items if i.get("score") is not None]
            colour = _hex(_blend(sum(scored) / len(scored))) if scored else \
                GRADE_COLOURS["declined"]
            tip = (f"{row} under {_arm_name(arm, conds.get(arm, {}))}: "
                   + ", ".join(f"rep{i.get('repeat')} {i.get('grade')}" for i in items)
                   + f" → {cell_text(items)}")
            text = _e(cell_text(items))
            link = (f'<a href="#{_slug(row, arm)}">{text}</a>' if linked else text)
            out.append(f'<td class="cell" style="background:{colour}" title="{_e(tip)}">'
                       f"{link}</td>")
        out.append("</tr>")
    legend = "".join(f'<span><i class="swatch" style="background:{GRADE_COLOURS[g]}"></i>'
                     f"{_e(label)}</span>" for g, label in (
                         ("correct", "all correct"), ("partial", "half the score (partial or "
                                                                 "mixed)"),
                         ("wrong", "all wrong"), ("declined", "declined"),
                         ("missing", "not banked")))
    return ("".join(out) + "</tbody></table></div>"
            + f'<div class="legend">{legend}</div>')


# --- the items' records -----------------------------------------------------------------------

def _pre(value: Any, limit: int | None = None) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=1, ensure_ascii=False,
                                                           default=str)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit:,} more characters in answers.jsonl)"
    return f"<pre>{_e(text)}</pre>"


def _query(q: Mapping[str, Any]) -> str:
    if q.get("refused"):
        how = f"refused: {q['refused']}"
    elif q.get("timed_out"):
        how = "timed out"
    elif q.get("error"):
        how = f"error: {q['error']}"
    else:
        n = q.get("row_count")
        how = f"{n if n is not None else len(q.get('rows') or [])} row(s)"
    rows = q.get("rows") or []
    shown = [q.get("columns") or [], *rows[:_QUERY_ROWS]]
    return (f"<p>{_e(q.get('language'))} query — {_e(how)}</p>{_pre(q.get('statement') or '')}"
            + (_pre("\n".join(" | ".join(map(str, r)) for r in shown)) if rows else ""))


def _record(rec: Mapping[str, Any]) -> str:
    answer = rec.get("answer") or {}
    parts = [f"<h4>repeat {_e(rec.get('repeat'))}: {_e(rec.get('grade'))} "
             f"({_e(rec.get('letter'))}, score {_e(rec.get('score'))}) — "
             f"<code>{_e(rec.get('nodeid'))}</code></h4>",
             f"<p>{_e(rec.get('reason'))}</p>" if rec.get("reason") else ""]
    if answer.get("error"):
        parts.append(f'<p class="bad">error: {_e(answer["error"])}</p>')
    parts.append("<p>answer:</p>" + _pre(answer.get("text") or "(no text)", _ANSWER_CHARS))
    if answer.get("block") is not None:
        parts.append("<p>answer block:</p>" + _pre(answer["block"]))
    parts += [_query(q) for q in answer.get("queries") or []]
    return "".join(parts)


def _records(report: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """One anchored section per grid cell: the question as asked, its key, and each repeat's
    grade, answer, block and queries (the prompt's shared context is in prompts/)."""
    rows, arms, cells = _grid_items(report)
    by_node = {r.get("nodeid"): r for r in records}
    conds = report.get("conditions", {})
    out = []
    for row, tier in rows:
        for arm in arms:
            items = sorted(cells.get((row, arm)) or [], key=lambda i: i.get("repeat") or 0)
            if not items:
                continue
            recs = [by_node.get(i.get("nodeid")) or i for i in items]
            first = recs[0]
            prompt = first.get("prompt") or {}
            out.append(f'<div class="record" id="{_slug(row, arm)}">'
                       f"<h3>{_e(row)} ({_e(tier)}) under {_e(_arm_name(arm, conds.get(arm, {})))}"
                       f" — {_e(cell_text(items))}</h3>")
            if prompt.get("question"):
                out.append("<p>question as asked:</p>" + _pre(prompt["question"]))
            if prompt.get("context_file"):
                out.append(f'<p class="muted">prompt context: <code>'
                           f'{_e(prompt["context_file"])}</code></p>')
            if "key" in first:
                out.append("<p>key:</p>" + _pre(first.get("key")))
            out += [_record(r) for r in recs]
            out.append("</div>")
    return "".join(out)


# --- the page ---------------------------------------------------------------------------------

def _banners(report: Mapping[str, Any]) -> str:
    counts = report.get("counts", {})
    missing = report.get("missing") or []
    out = []
    stopped = report.get("halted") or report.get("interrupted")
    if stopped:
        word = "HALTED" if report.get("halted") else "INTERRUPTED"
        never = sum(1 for m in missing if str(m.get("why", "")).startswith("not asked"))
        out.append(f'<div class="banner">{word} — {_e(stopped)}<small>'
                   f"{_e(counts.get('items'))} of {_e(counts.get('expected'))} items banked and "
                   f"kept; {never} never asked because the run {word.lower()}. The figures "
                   "below cover only the banked items.</small></div>")
    elif not report.get("complete", True):
        whys: dict[str, int] = {}
        for m in missing:
            why = (str(m.get("why") or "").strip().splitlines() or ["no reason recorded"])[0]
            whys[why] = whys.get(why, 0) + 1
        said = "; ".join(f"{n} × {why}" for why, n in whys.items())
        out.append(f'<div class="banner">INCOMPLETE — {len(missing)} item(s) never reported'
                   f"<small>{_e(said)}. The figures below cover only the "
                   f"{_e(counts.get('items'))} banked items.</small></div>")
    if report.get("synthetic"):
        out.append('<div class="banner simulated">SIMULATED ANSWERS — not a model\'s<small>'
                   "the synthetic agent drew gold or trap answers at set probabilities</small>"
                   "</div>")
    return "".join(out)


def _header(report: Mapping[str, Any]) -> str:
    s = report.get("settings", {})
    counts = report.get("counts", {})
    missing = report.get("missing", [])
    if report.get("halted") or report.get("interrupted"):
        word = "HALTED" if report.get("halted") else "INTERRUPTED"
        status = (f'<span class="bad">{word}</span> — {_e(counts.get("items"))} of '
                  f'{_e(counts.get("expected"))} items banked')
    elif report.get("complete"):
        status = (f'<span class="ok">complete</span> — {_e(counts.get("items"))} of '
                  f'{_e(counts.get("expected"))} items')
    else:
        status = (f'<span class="bad">INCOMPLETE — {len(missing)} item(s) missing</span> '
                  f'({_e(counts.get("items"))} of {_e(counts.get("expected"))} banked)')
    meta = [("agent", s.get("agent")), ("models", ", ".join(map(str, s.get("models", [])))),
            ("repeats", s.get("repeats")),
            ("conditions", ", ".join(map(str, s.get("condition_ids", [])))),
            ("variants", ", ".join(map(str, s.get("variants", [])))),
            ("started", report.get("started")), ("finished", report.get("finished")),
            ("commit", report.get("commit") or "unknown")]
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta)
    return (f"<h1>kgbench run {_e(report.get('run_id'))}</h1>"
            f'<dl class="meta">{rows}<dt>status</dt><dd>{status}</dd></dl>')


def _headline(report: Mapping[str, Any]) -> str:
    """The same per-tier table report.md leads with (report.headline_rows)."""
    header, rows = headline_rows(report)
    return (_table(header, rows, num=range(1, len(header)))
            + '<p class="muted">Per tier, never pooled: the mean over questions of each '
            "question's mean over repeats (correct 1, partial ½), its 95% bootstrap interval "
            "over questions, and n questions. Prompt ≈ tokens: the median size of the arm's "
            "prompts.</p>")


def _comparisons(report: Mapping[str, Any]) -> str:
    comps = report.get("comparisons") or []
    if not comps:
        return '<p class="muted">No comparisons in this report.</p>'
    rows, dim = [], []
    for c in comps:
        diff = c.get("diff")
        rows.append([str(c.get("a")), str(c.get("b")), str(c.get("tier")),
                     str(c.get("n_questions")),
                     "—" if diff is None else f"{100 * diff:+.1f} [{ci_text(c.get('ci95'))}]",
                     discordant_text(c.get("discordant")), p_cell(c, "mcnemar_p"),
                     p_cell(c, "holm_p"),
                     "yes" if c.get("can_reach_significance") else "no", lost_text(c),
                     str(c.get("dropped", 0)), calls_text(c.get("tool_calls"))])
        dim.append("" if c.get("can_reach_significance") and not c.get("refused") else "dim")
    refused = "".join(f"<li>{_e(c.get('a'))} vs {_e(c.get('b'))} ({_e(c.get('tier'))}): "
                      f"{_e(c['refused'])}</li>" for c in comps if c.get("refused"))
    return _table(["a", "b", "tier", "n", "diff b − a, pts [95% CI]",
                   "discordant +b / −a", "McNemar p", "Holm p", "can reach p<0.05",
                   "skipped a / b", "dropped", "tool calls b − a (Wilcoxon p)"],
                  rows, num=(3, 4, 5, 6, 7, 9, 10, 11), row_class=dim) + (
        f'<p class="bad">Comparisons without a p-value:</p><ul>{refused}</ul>' if refused
        else "")


def _effort(report: Mapping[str, Any]) -> list[str]:
    """What answering cost per arm (report.effort_rows), when any arm called tools."""
    header, rows = effort_rows(report)
    if not rows:
        return []
    return ["<h2>What answering cost: tool calls, rounds, time</h2>",
            _table(header, rows, num=range(1, len(header))),
            f'<p class="muted">{_e(EFFORT_NOTE)}</p>']


def _fingerprints(report: Mapping[str, Any]) -> str:
    fp = report.get("fingerprint") or {}
    out = [_table(["what", "value"], [
        ["question set", f"{fp.get('questions_sha256')} ({fp.get('questions_count')} questions)"],
        ["grader", str(fp.get("grader_sha256"))]])]
    if fp.get("prompts"):
        out.append(_table(["prompt context sha256", "condition"],
                          [[k, str(v)] for k, v in fp["prompts"].items()]))
    if fp.get("datasets"):
        out.append(_table(["dataset", "details"], [
            [k, "; ".join(f"{a}: {b}" for a, b in v.items()) if isinstance(v, Mapping) else str(v)]
            for k, v in fp["datasets"].items()]))
    changed = fp.get("questions_changed_during_run")
    warn = ('<p class="bad">Questions changed during the run: ' + _e(", ".join(changed))
            + "</p>") if changed else ""
    return (warn + "<details><summary>Fingerprints: the question set, grader, prompt contexts "
            f"and datasets</summary>{''.join(out)}</details>")


def _lists(report: Mapping[str, Any]) -> str:
    missing = report.get("missing") or []
    out = []
    if missing:
        out.append(f'<p class="bad">{len(missing)} item(s) never reported:</p>')
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for m in missing:  # by the reason's first line; a long list folded
            why = (str(m.get("why") or "").strip().splitlines() or ["no reason recorded"])[0]
            groups.setdefault(why, []).append(m)
        for why, ms in groups.items():
            items = "".join(f"<li><code>{_e(m.get('nodeid'))}</code>"
                            + (f": {_e(str(m.get('why')).strip())}" if len(ms) == 1 else "")
                            + "</li>" for m in ms)
            out.append(f"<details{' open' if len(ms) <= 10 else ''}><summary>{len(ms)} × "
                       f"{_e(why)}</summary><ul>{items}</ul></details>")
    else:
        out.append("<p>Every expected item reported.</p>")
    skipped = report.get("skipped") or []
    if skipped:
        out.append(f"<p>{len(skipped)} item(s) skipped (not asked, not in the accuracy):</p><ul>")
        out += [f"<li><code>{_e(m.get('nodeid'))}</code>: {_e(m.get('reason'))}</li>"
                for m in skipped]
        out.append("</ul>")
    for title, key in (("Not run", "not_run"), ("Not measured", "not_measured")):
        notes = report.get(key) or []
        if notes:
            out.append(f"<p>{title}:</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes)
                       + "</ul>")
    return "".join(out)


def render_html(report: Mapping[str, Any],
                records: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The whole report.html for one run's report dict, with the items' banked records
    (answers.jsonl) when given: banners, the finding, accuracy per tier, the question x
    condition grid linked to each item's record, missing items, the records, fingerprints.
    Self-contained; every text from the report is escaped."""
    comps = report.get("comparisons") or []
    lead = ([forest_chart(report), _comparisons(report)] if comps else [_headline(report)])
    body = [
        _banners(report), _header(report),
        "<h2>1. What this run found</h2>", f'<p class="finding">{_finding_html(report)}</p>',
        *lead,
        "<h2>2. Accuracy per tier</h2>", *([_headline(report)] if comps else []),
        '<p class="muted">One panel per tier (n: questions in the tier). Bars: the mean over '
        "questions of each question's mean over repeats; whiskers: 95% bootstrap interval "
        "over questions.</p>", _legend(report), accuracy_chart(report), *_effort(report),
        "<h2>3. Questions × conditions</h2>",
        '<p class="muted">Grouped by tier. Each cell: the score over its repeats (1/3: one '
        "correct answer of three; a partial answer counts ½), coloured by its mean; hover for "
        "each repeat's grade"
        + (", click for the item's record." if records is not None else ".") + "</p>",
        _grid(report, linked=records is not None),
        "<h2>4. Missing, skipped and not measured</h2>", _lists(report),
    ]
    if records is not None:
        body += ["<h2>5. Item records</h2>",
                 '<p class="muted">Each cell of the grid: the question as asked, its key and '
                 "every repeat's answer, block and queries (as banked in answers.jsonl).</p>",
                 _records(report, records)]
    body += ["<h2>Fingerprints</h2>", _fingerprints(report)]
    title = _e(f"kgbench {report.get('run_id')}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
