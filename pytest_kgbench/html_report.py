"""report.html: one self-contained page for one run's report dict (report.json; README:
Reading a run).

No network: no scripts, no external stylesheets or fonts. Charts are matplotlib figures saved
as SVG (text kept as text, ``svg.fonttype = 'none'``) and inlined. matplotlib is imported
inside the functions, on plain ``Figure`` objects (no pyplot, no GUI backend), because this
module is imported by the pytest plugin at start-up.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from pytest_kgbench.report import ci_text, discordant_text, headline_rows, p_text

#: Cell colours of the question x condition grid; a mean score between two grades is blended.
GRADE_COLOURS = {"correct": "#43a047", "partial": "#ffb300", "wrong": "#e53935",
                 "declined": "#9e9e9e", "missing": "#eceff1"}
_RC: Any = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 9,
       "axes.spines.top": False, "axes.spines.right": False}
_NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;
 margin:1.5em auto;max-width:1300px;padding:0 1em;color:#212121}
h1{font-size:1.5em;margin-bottom:.3em} h2{font-size:1.2em;margin-top:1.8em;
 border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{white-space:nowrap;border:1px solid #d0d0d0;padding:.25em .6em;text-align:left;
 vertical-align:top}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.9em;word-break:break-all} .bad{color:#c62828;font-weight:bold}
.ok{color:#2e7d32;font-weight:bold} .muted{color:#757575}
.banner{background:#c62828;color:#fff;font-size:1.4em;font-weight:bold;text-align:center;
 padding:.6em;margin-bottom:1em;letter-spacing:.05em}
.chart svg{max-width:100%;height:auto} dl.meta{display:grid;grid-template-columns:max-content auto;
 gap:.2em 1em;margin:0} dl.meta dt{font-weight:bold} dl.meta dd{margin:0}
tr.dim td{color:#9e9e9e}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], *,
           num: Sequence[int] = (), row_class: Sequence[str] | None = None) -> str:
    """An HTML table; cells are escaped here, so pass plain text."""
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        cells = (f'<td class="num">{_e(c)}</td>' if j in num else f"<td>{_e(c)}</td>"
                 for j, c in enumerate(row))
        out += [f"<tr{cls}>", *cells, "</tr>"]
    return "".join(out) + "</tbody></table>"


def _svg(fig: Any, salt: str) -> str:
    """The figure as an inline <svg> element (XML prolog and DOCTYPE dropped)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({**_RC, "svg.hashsalt": f"kgbench-{salt}"}):
        fig.savefig(buf, format="svg", metadata=_NO_METADATA)
    fig.clf()
    text = buf.getvalue()
    return f'<div class="chart">{text[text.index("<svg"):]}</div>'


def _arm_name(arm: str, cond: Mapping[str, Any]) -> str:
    label = cond.get("label")
    return f"{arm} {label}" if label and "/" not in arm else arm


def _tiers(report: Mapping[str, Any]) -> list[str]:
    found = {i.get("tier") for i in report.get("items", [])}
    for c in report.get("conditions", {}).values():
        found.update(c.get("by_tier", {}))
    return sorted(t for t in found if t)


def _arm_colours(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def accuracy_chart(report: Mapping[str, Any]) -> str:
    """Accuracy by arm with 95% interval bars, one panel per tier, as an inline SVG."""
    from matplotlib.figure import Figure

    conds: Mapping[str, Mapping[str, Any]] = report.get("conditions", {})
    arms, tiers = list(conds), _tiers(report)
    if not arms or not tiers:
        return '<p class="muted">No graded items: nothing to chart.</p>'
    colours = _arm_colours(len(arms))
    ncols = min(len(tiers), max(1, 24 // len(arms)), 5)
    nrows = math.ceil(len(tiers) / ncols)
    panel_w = max(2.2, 0.42 * len(arms) + 0.7)
    rotate = max(len(a) for a in arms) * len(arms) > 11 * panel_w
    with _rc():
        fig = Figure(figsize=(panel_w * ncols + 0.6, (3.0 if rotate else 2.6) * nrows + 0.4),
                     layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
        for k, ax in enumerate(axes.flat):
            if k >= len(tiers):
                ax.set_visible(False)
                continue
            tier = tiers[k]
            for x, arm in enumerate(arms):
                bt = conds[arm].get("by_tier", {}).get(tier)
                acc = bt.get("accuracy") if bt else None
                if acc is None:
                    ax.text(x, 0.02, "no data", ha="center", va="bottom", rotation=90,
                            fontsize=7, color="#757575")
                    continue
                ci = bt.get("ci95")
                err, top = None, acc
                if ci and ci[0] is not None and ci[1] is not None:
                    err = [[max(0.0, acc - ci[0])], [max(0.0, ci[1] - acc)]]
                    top = max(acc, ci[1])
                ax.bar(x, acc, width=0.7, color=colours[x], alpha=0.85, yerr=err,
                       capsize=3, error_kw={"elinewidth": 1, "ecolor": "#212121"},
                       label=_arm_name(arm, conds[arm]) if k == 0 else None)
                ax.text(x, min(top + 0.02, 1.03), f"{100 * acc:.0f}%", ha="center",
                        va="bottom", fontsize=7)
            ax.set_title(tier, fontweight="bold")
            ax.set_xticks(range(len(arms)))
            ax.set_xticklabels([f"{a} (n={_n(conds[a], tier)})" if rotate else
                                f"{a}\nn={_n(conds[a], tier)}" for a in arms], fontsize=7,
                               rotation=40 if rotate else 0, rotation_mode="anchor",
                               ha="right" if rotate else "center")
            ax.set_ylim(0, 1.12)
            ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
            ax.set_xlim(-0.6, len(arms) - 0.4)
            ax.grid(axis="y", color="#e0e0e0", linewidth=0.6)
            ax.set_axisbelow(True)
        fig.legend(loc="outside lower center", ncols=min(len(arms), 6), fontsize=8,
                   frameon=False)
        for ax in axes[:, 0]:
            ax.set_ylabel("accuracy")
        return _svg(fig, "accuracy")


def _n(cond: Mapping[str, Any], tier: str) -> Any:
    return (cond.get("by_tier", {}).get(tier) or {}).get("n_questions", 0)


def _blend(score: float) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    lo, hi, t = ("wrong", "partial", 2 * score) if score <= 0.5 else \
        ("partial", "correct", 2 * score - 1)
    a, b = to_rgb(GRADE_COLOURS[lo]), to_rgb(GRADE_COLOURS[hi])
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def grid_cells(report: Mapping[str, Any]) -> tuple[list[str], list[str], list[list[Any]]]:
    """Rows (``pack/variant/question``, sorted), arms, and per cell the mean score over
    repeats, ``"declined"`` when no repeat was scored, or ``None`` when nothing was banked."""
    conds = report.get("conditions", {})
    by_key = {(c.get("condition"), c.get("model")): arm for arm, c in conds.items()}
    multi = len({i.get("model") for i in report.get("items", [])}) > 1
    cells: dict[tuple[str, str], list[Any]] = {}
    tier_of: dict[str, str] = {}
    for it in report.get("items", []):
        row = f"{it.get('pack')}/{it.get('variant')}/{it.get('question')}"
        arm = by_key.get((it.get("condition"), it.get("model"))) or (
            f"{it.get('condition')}/{it.get('model')}" if multi else str(it.get("condition")))
        tier_of.setdefault(row, str(it.get("tier") or ""))
        cells.setdefault((row, arm), []).append(it.get("score"))
    arms = list(conds) + sorted({a for _, a in cells} - set(conds))
    rows = sorted(tier_of)
    grid: list[list[Any]] = []
    for row in rows:
        line: list[Any] = []
        for arm in arms:
            scores = cells.get((row, arm))
            kept = [float(s) for s in scores or () if s is not None]
            line.append(None if scores is None else
                        (sum(kept) / len(kept) if kept else "declined"))
        grid.append(line)
    return [f"{r}  ({tier_of[r]})" if tier_of[r] else r for r in rows], arms, grid


def grid_chart(report: Mapping[str, Any]) -> str:
    """The question x condition grid coloured by mean grade, as an inline SVG."""
    import numpy as np
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows, arms, grid = grid_cells(report)
    if not rows:
        return '<p class="muted">No items were banked.</p>'
    conds = report.get("conditions", {})
    colour = [[to_rgb(GRADE_COLOURS["missing"]) if v is None else
               to_rgb(GRADE_COLOURS["declined"]) if v == "declined" else _blend(v)
               for v in line] for line in grid]
    names = [_arm_name(a, conds.get(a, {})) for a in arms]
    label_w = max(len(r) for r in rows) * 0.07 + 0.4
    cell_w = max(0.55, max(len(n) for n in names) * 0.075) if len(arms) <= 12 else 0.45
    head = 1.2 if len(arms) > 12 or max(len(n) for n in names) * 0.075 > 1.2 else 0.7
    with _rc():
        fig = Figure(figsize=(label_w + cell_w * len(arms) + 0.4,
                              head + 0.9 + 0.22 * len(rows)), layout="constrained")
        ax = fig.add_subplot()
        ax.pcolormesh(np.array(colour), edgecolors="white", linewidth=0.8)
        for r, line in enumerate(grid):
            for c, v in enumerate(line):
                if v is None:
                    ax.text(c + 0.5, r + 0.5, "–", ha="center", va="center", fontsize=7,
                            color="#9e9e9e")
        ax.set_ylim(len(rows), 0)
        ax.set_yticks([i + 0.5 for i in range(len(rows))])
        ax.set_yticklabels(rows, fontsize=8, family="monospace")
        ax.set_xticks([i + 0.5 for i in range(len(arms))])
        ax.xaxis.tick_top()
        ax.set_xticklabels(names, fontsize=8, rotation=40 if head > 1 else 0,
                           ha="left" if head > 1 else "center")
        ax.tick_params(length=0)
        for side in ("left", "bottom", "top", "right"):
            ax.spines[side].set_visible(False)
        legend = [Patch(facecolor=GRADE_COLOURS[g], edgecolor="#bdbdbd", label=lbl) for g, lbl in
                  (("correct", "correct (1)"), ("partial", "partial (½) / mixed"),
                   ("wrong", "wrong (0)"), ("declined", "declined"),
                   ("missing", "not banked"))]
        fig.legend(handles=legend, loc="outside lower center", ncols=5, fontsize=7,
                   frameon=False, handlelength=1.2, columnspacing=1.0)
        return _svg(fig, "grid")


def forest_chart(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """Each comparison's difference (b − a) with its 95% interval, as an inline SVG."""
    from matplotlib.figure import Figure

    if not comparisons:
        return ""
    labels = [f"{c.get('b')} vs {c.get('a')}  [{c.get('tier')}]" for c in comparisons]
    with _rc():
        fig = Figure(figsize=(max(len(s) for s in labels) * 0.065 + 5.0,
                              1.0 + 0.3 * len(comparisons)), layout="constrained")
        ax = fig.add_subplot()
        ax.axvline(0, color="#616161", linewidth=0.8)
        for y, c in enumerate(comparisons):
            diff, ci = c.get("diff"), c.get("ci95")
            if ci and ci[0] is not None and ci[1] is not None:
                ax.plot([ci[0], ci[1]], [y, y], color="#1e88e5", linewidth=1.6)
            if diff is not None:
                sig = c.get("holm_p") is not None and c["holm_p"] < 0.05
                ax.plot([diff], [y], "o", color="#1e88e5", markersize=5,
                        markerfacecolor="#1e88e5" if sig else "white")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel("difference in accuracy, b − a (filled: Holm p < 0.05)")
        ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
        return _svg(fig, "forest")


def _rc() -> Any:
    import matplotlib

    return matplotlib.rc_context(_RC)


def _header(report: Mapping[str, Any]) -> str:
    s = report.get("settings", {})
    counts = report.get("counts", {})
    missing = report.get("missing", [])
    status = (f'<span class="ok">complete</span> — {_e(counts.get("items"))} of '
              f'{_e(counts.get("expected"))} items' if report.get("complete") else
              f'<span class="bad">INCOMPLETE — {len(missing)} item(s) missing</span> '
              f'({_e(counts.get("items"))} of {_e(counts.get("expected"))} banked)')
    meta = [("agent", s.get("agent")), ("models", ", ".join(map(str, s.get("models", [])))),
            ("repeats", s.get("repeats")),
            ("conditions", ", ".join(map(str, s.get("condition_ids", [])))),
            ("variants", ", ".join(map(str, s.get("variants", [])))),
            ("started", report.get("started")), ("finished", report.get("finished")),
            ("commit", report.get("commit") or "unknown")]
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta)
    not_run = "".join(f"<li>{_e(line)}</li>" for line in report.get("not_run") or [])
    return (f"<h1>kgbench run {_e(report.get('run_id'))}</h1>"
            f'<dl class="meta">{rows}<dt>status</dt><dd>{status}</dd></dl>'
            + (f'<p class="muted">Not run:</p><ul class="muted">{not_run}</ul>'
               if not_run else ""))


def _headline(report: Mapping[str, Any]) -> str:
    """The same per-tier table report.md leads with (report.headline_rows)."""
    header, rows = headline_rows(report)
    return _table(header, rows, num=range(1, len(header)))


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
                     discordant_text(c.get("discordant")), p_text(c.get("mcnemar_p")),
                     p_text(c.get("holm_p")),
                     "yes" if c.get("can_reach_significance") else "no"])
        dim.append("" if c.get("can_reach_significance") else "dim")
    table = _table(["a", "b", "tier", "n", "diff b − a, pts [95% CI]",
                    "discordant +b / −a", "McNemar p", "Holm p", "can reach p<0.05"],
                   rows, num=(3, 4, 5, 6, 7), row_class=dim)
    return table + forest_chart(comps)


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
    if fp.get("questions_changed_during_run"):
        out.append('<p class="bad">Questions changed during the run: '
                   + _e(", ".join(fp["questions_changed_during_run"])) + "</p>")
    return "".join(out)


def _lists(report: Mapping[str, Any]) -> str:
    missing = report.get("missing") or []
    out = ["<h2>6. Missing items and what was not measured</h2>"]
    if missing:
        out.append(f'<p class="bad">{len(missing)} item(s) never reported:</p><ul>')
        out += [f"<li><code>{_e(m.get('nodeid'))}</code>: {_e((m.get('why') or '').strip())}</li>"
                for m in missing]
        out.append("</ul>")
    else:
        out.append("<p>Every expected item reported.</p>")
    notes = report.get("not_measured") or []
    if notes:
        out.append("<p>Not measured:</p><ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes)
                   + "</ul>")
    return "".join(out)


def render_html(report: Mapping[str, Any]) -> str:
    """The whole report.html for one run's report dict: header, accuracy per tier chart,
    question x condition grid, comparisons (table and forest chart), headline table,
    fingerprints, missing items. Self-contained; every text from the report is escaped."""
    banner = ('<div class="banner">SIMULATED ANSWERS — not a model\'s</div>'
              if report.get("synthetic") else "")
    body = [
        banner, _header(report),
        "<h2>1. Accuracy per tier</h2>", _headline(report),
        '<p class="muted">Never pooled across tiers; L3 first, where the meaning of the data '
        "decides. Prompt ≈ tokens: the median size of the arm's prompts.</p>",
        '<p class="muted">Bars: mean over questions of each question\'s mean over repeats '
        "(correct 1, partial ½); whiskers: 95% bootstrap interval over questions; "
        "n: questions in the tier.</p>", accuracy_chart(report),
        "<h2>2. Questions × conditions</h2>",
        '<p class="muted">Cell colour: mean score over repeats (green correct, amber partial, '
        "red wrong; blends for mixed repeats), grey declined, pale with – when never "
        "banked.</p>", grid_chart(report),
        "<h2>3. Comparisons</h2>", _comparisons(report),
        "<h2>4. Fingerprints</h2>", _fingerprints(report),
        _lists(report),
    ]
    title = _e(f"kgbench {report.get('run_id')}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
