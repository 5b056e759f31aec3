"""report.html: a self-contained page that parses, carries every chart and escapes its text."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from pytest_kgbench.analysis.html_report import grid_cells, render_html  # noqa: E402

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
ARMS = {"R1": "csv", "R4": "csv+markdown", "D1": "sql"}
QUESTIONS = {"credit-Q01": "L1", "credit-Q02": "L1", "credit-Q03": "L3",
             "<script>alert(1)</script>": "L3"}


def _tier(acc: float | None, n: int) -> dict[str, Any]:
    return {"accuracy": acc, "ci95": None if acc is None else [max(0, acc - .2), min(1, acc + .2)],
            "n_questions": n, "passes": n, "pass_rate": acc, "pass_ci95": None, "declined": 0}


def make_report(*, comparisons: bool = True, missing: bool = False,
                synthetic: bool | None = None) -> dict[str, Any]:
    """Three arms, two tiers, four questions, two repeats; scores vary by arm and question."""
    grades = {1.0: "correct", 0.5: "partial", 0.0: "wrong", None: "declined"}
    items = []
    for a, (cond, label) in enumerate(ARMS.items()):
        for q, (qid, tier) in enumerate(QUESTIONS.items()):
            for rep in (1, 2):
                if missing and cond == "D1" and q == 0 and rep == 1:
                    continue
                score = [1.0, 0.5, 0.0, None][(a + q + rep) % 4]
                items.append({"nodeid": f"questions/credit.yaml::{qid}[{cond}-m-r{rep}]",
                              "question": qid, "tier": tier, "pack": "credit",
                              "variant": "base", "condition": cond, "condition_label": label,
                              "model": "m", "repeat": rep, "grade": grades[score],
                              "score": score, "behaviour": "answered", "letter": "C"})
    conditions = {cond: {"condition": cond, "label": label, "model": "m", "accuracy": 0.5,
                         "ci95": [0.3, 0.7], "n_questions": 4, "passes": 2, "pass_rate": 0.5,
                         "pass_ci95": [0.2, 0.8], "declined": 1,
                         "by_tier": {"L1": _tier(0.75, 2), "L3": _tier(0.25 * i, 2)}}
                  for i, (cond, label) in enumerate(ARMS.items())}
    report: dict[str, Any] = {
        "run_id": "t-run", "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00",
        "settings": {"agent": "sim", "models": ["m"], "repeats": 2,
                     "condition_ids": list(ARMS), "variants": ["base"]},
        "commit": "abc123",
        "fingerprint": {"questions_sha256": "f" * 64, "questions_count": 4,
                        "questions_changed_during_run": [], "grader_sha256": "g" * 64,
                        "prompts": {"1" * 64: "R1", "2" * 64: "R4", "3" * 64: "D1"},
                        "datasets": {"credit/base": {"seed": 7, "build": "base-7"}}},
        "complete": not missing,
        "missing": [{"nodeid": "questions/credit.yaml::credit-Q01[D1-m-r1]",
                     "why": "worker crashed"}] if missing else [],
        "counts": {"items": len(items), "expected": 24},
        "items": items, "conditions": conditions,
        "comparisons": [{"a": "R1", "b": "D1", "tier": "L3", "n_questions": 2, "diff": 0.5,
                         "ci95": [0.0, 1.0], "discordant": [0, 2], "mcnemar_p": 0.5,
                         "holm_p": 0.5, "can_reach_significance": False}] if comparisons else [],
        "not_measured": ["nothing else"],
    }
    if synthetic is not None:
        report["synthetic"] = synthetic
    return report


class _Checker(HTMLParser):
    """Collects tags, checks that every non-void element closes in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Checker:
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.errors == [] and checker.stack == [], (checker.errors, checker.stack)
    return checker


@pytest.fixture(scope="module")
def full_page() -> str:
    return render_html(make_report(synthetic=False))


@pytest.fixture(scope="module")
def partial_page() -> str:
    return render_html(make_report(comparisons=False, missing=True, synthetic=True))


def test_page_parses_balanced_with_one_svg_per_chart(full_page: str, partial_page: str) -> None:
    full, partial = _parse(full_page), _parse(partial_page)
    assert full.tags.count("svg") == 3  # the forest chart, one small chart per tier (L3, L1)
    assert partial.tags.count("svg") == 2  # no comparisons: no forest chart
    assert full_page.startswith("<!DOCTYPE html>")
    assert "<?xml" not in full_page and "<!DOCTYPE svg" not in full_page


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, flags=re.S)


def test_accuracy_charts_are_one_per_tier_l3_first(full_page: str) -> None:
    titles = [re.search(r">(L\d) \(n=\d+ questions\)<", svg) for svg in _svgs(full_page)]
    assert [t.group(1) for t in titles if t] == ["L3", "L1"]  # L3 leads; no L2 in this run
    assert all("font-family" in svg for svg in _svgs(full_page))  # text stays text
    # the arms' labels are in an HTML legend, which wraps (a legend inside a figure clipped)
    legend = re.search(r'<div class="legend">(.*?)</div>', full_page, flags=re.S)
    assert legend and all(f"{arm} {label}" in legend.group(1) for arm, label in ARMS.items())


@pytest.mark.parametrize("which", ["full_page", "partial_page"])
def test_no_network_references(which: str, request: pytest.FixtureRequest) -> None:
    page = request.getfixturevalue(which)
    urls = re.findall(r"[a-z][a-z0-9+.-]*://[^\s\"'<>)]*", page, flags=re.I)
    assert urls, "the inline SVG should at least declare its namespace"
    for url in urls:
        assert re.fullmatch(r"http://www\.w3\.org/(2000/svg|1999/xlink)", url), url
    # url(#id) is a local reference (clip paths); anything else would load something
    for pattern in (r"<script", r"<link", r"<img", r"<iframe", r"@import", r"url\((?!#)"):
        assert not re.search(pattern, page, flags=re.I), pattern


def test_every_arm_and_question_appears(full_page: str) -> None:
    for arm, label in ARMS.items():
        assert f"{arm} {label}" in full_page
    for qid in QUESTIONS:
        if "<" not in qid:
            assert f"credit/base/{qid}" in full_page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in full_page
    assert "<script>" not in full_page


def test_comparisons_table(full_page: str, partial_page: str) -> None:
    row = re.search(r"<tr class=\"dim\">(.*?)</tr>", full_page)
    assert row, "a comparison that cannot reach significance is dimmed"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    assert cells[:4] == ["R1", "D1", "L3", "2"]
    assert cells[4].startswith("+50.0") and cells[5] == "+2 / −0" and cells[8] == "no"
    assert cells[9] == "—"  # the fixture's comparisons carry no tool calls
    assert "McNemar p" not in partial_page and "McNemar p" in full_page


def test_incomplete_and_missing(full_page: str, partial_page: str) -> None:
    assert "INCOMPLETE" in partial_page and "1 item(s) missing" in partial_page
    assert "credit-Q01[D1-m-r1]" in partial_page and "worker crashed" in partial_page
    assert "INCOMPLETE" not in full_page and "complete</span>" in full_page
    assert "nothing else" in full_page


def test_dollar_signs_are_text_not_mathtext() -> None:
    report = make_report()
    for it in report["items"]:
        if it["question"] == "credit-Q03":
            it["question"] = "cost $a$ or $\\frac{$"  # would break mathtext
    page = render_html(report)
    _parse(page)
    assert "credit/base/cost $a$ or $\\frac{$" in page


def test_simulated_banner_only_when_synthetic(full_page: str, partial_page: str) -> None:
    assert "SIMULATED ANSWERS" in partial_page
    assert "SIMULATED ANSWERS" not in full_page
    assert "SIMULATED ANSWERS" not in render_html(make_report())  # key absent


def test_grid_cells_mean_over_repeats_declined_and_missing() -> None:
    rows, arms, grid = grid_cells(make_report(missing=True))
    assert arms == list(ARMS)
    assert len(rows) == len(QUESTIONS)
    tiers = [r.rsplit("(", 1)[1] for r in rows]
    assert tiers == ["L3)", "L3)", "L1)", "L1)"]  # sorted by tier, L3 first
    assert rows[:2] == sorted(rows[:2]) and rows[2:] == sorted(rows[2:])
    assert rows[0].endswith("(L3)") and "<script>" in rows[0]  # raw here; escaped in the page
    q01 = rows.index("credit/base/credit-Q01  (L1)")
    # R1 (a=0), Q01 (q=0): repeats score [0.5, 0.0] -> 0.25; R4: [0.0, None] -> 0.0;
    # D1 lost repeat 1, repeat 2 is (2+0+2)%4 = 0 -> 1.0
    assert grid[q01] == [0.25, 0.0, 1.0]
    q02 = rows.index("credit/base/credit-Q02  (L1)")
    assert grid[q02][1] == 1.0  # R4 Q02: repeat 1 declined (None) is dropped, repeat 2 is 1.0
    declined = [v for line in grid for v in line if v == "declined"]
    assert not declined  # every question has a scored repeat in every arm here
    report = make_report()
    for it in report["items"]:
        if it["condition"] == "R1" and it["question"] == "credit-Q03":
            it["score"], it["grade"] = None, "declined"
    report["items"] = [it for it in report["items"]
                       if not (it["condition"] == "D1" and it["question"] == "credit-Q02")]
    rows, arms, grid = grid_cells(report)
    assert grid[rows.index("credit/base/credit-Q03  (L3)")][0] == "declined"
    assert grid[rows.index("credit/base/credit-Q02  (L1)")][2] is None
    page = render_html(report)
    _parse(page)


def _sig(a: str, b: str, tier: str, diff: float, holm: float) -> dict[str, Any]:
    return {"a": a, "b": b, "tier": tier, "n_questions": 20, "diff": diff,
            "ci95": [diff - 0.1, diff + 0.1], "discordant": [1, 9], "mcnemar_p": holm / 2,
            "holm_p": holm, "can_reach_significance": True}


def test_the_page_leads_with_one_sentence_stating_its_finding() -> None:
    report = make_report()
    report["comparisons"] = [_sig("R1", "D1", "L3", 0.5, 0.01), _sig("R1", "R4", "L3", -0.7, 0.02),
                             _sig("R1", "D1", "L1", 0.9, 0.3)]
    page = render_html(report)
    said = re.search(r'<p class="finding">(.*?)</p>', page).group(1)
    # the largest *significant* difference, not the largest one (0.9 on L1 has p 0.3)
    assert said.startswith("The largest significant difference: R4 csv+markdown against R1 csv "
                           "on L3: -70.0 points") and "2 of 3 comparisons" in said
    assert page.index('class="finding"') < page.index("<svg")  # the finding first
    assert page.index("<svg") == page.index(_svgs(page)[0])
    assert "difference in accuracy" in _svgs(page)[0]  # then the forest plot
    report["comparisons"] = [_sig("R1", "D1", "L3", 0.2, 0.4), _sig("R1", "R4", "L3", -0.3, 0.6)]
    said = re.search(r'<p class="finding">(.*?)</p>', render_html(report)).group(1)
    assert said.startswith("No difference reached significance (Holm-adjusted p &lt; 0.05) in 2 "
                           "comparison(s); the largest was R4 csv+markdown against R1 csv on L3:"
                           " -30.0 points")


def test_without_comparisons_the_per_tier_table_leads(partial_page: str) -> None:
    said = re.search(r'<p class="finding">(.*?)</p>', partial_page).group(1)
    assert said.startswith("The run is incomplete: these figures cover the 23 of 24 items "
                           "banked. No conditions were compared")
    assert "On L3, D1 sql scored highest: 50.0% of 2 questions." in said
    said = re.search(r'<p class="finding">(.*?)</p>',
                     render_html(make_report(comparisons=False))).group(1)
    assert said.startswith("No conditions were compared")
    first_table = partial_page.index("<table")
    assert partial_page.index('class="finding"') < first_table < partial_page.index("<svg")
    assert "<th>L3</th>" in partial_page[first_table:partial_page.index("</table>")]


def test_a_halted_run_says_so_with_its_reason_in_a_banner() -> None:
    report = make_report(missing=True)
    why = "the harness is broken, the run halts: the gold query of credit-Q10 timed out"
    report["halted"] = why
    report["missing"] = [{"nodeid": "n1", "why": why},
                         {"nodeid": "n2", "why": "not asked: the run halted"}]
    page = render_html(report)
    _parse(page)
    banner = re.search(r'<div class="banner">(.*?)</div>', page).group(1)
    assert banner.startswith(f"HALTED — {why}") and "1 never asked" in banner
    assert page.index('class="banner"') < page.index("<h1>")
    assert "worker crash" not in page and 'class="bad">HALTED<' in page
    said = re.search(r'<p class="finding">(.*?)</p>', page).group(1)
    assert said.startswith("The run halted: these figures cover the 23 of 24 items banked.")
    incomplete = render_html(make_report(missing=True))
    banner = re.search(r'<div class="banner">(.*?)</div>', incomplete).group(1)
    assert banner.startswith("INCOMPLETE — 1 item(s) never reported") and "worker crashed" in banner
    assert 'class="banner"' not in render_html(make_report(synthetic=False))


def test_arm_colours_are_never_grade_colours() -> None:
    import colorsys

    from matplotlib.colors import to_rgb

    from pytest_kgbench.analysis.html_report import ARM_COLOURS, GRADE_COLOURS, arm_colours

    def hue_sat(colour: str) -> tuple[float, float]:
        h, _, s = colorsys.rgb_to_hls(*to_rgb(colour))
        return 360 * h, s

    grades = [hue_sat(GRADE_COLOURS[g]) for g in ("correct", "partial", "wrong")]
    assert all(not 170 <= h <= 335 for h, _ in grades)  # green, amber, red
    for colour in ARM_COLOURS:
        hue, sat = hue_sat(colour)
        assert 170 <= hue <= 335 and sat >= 0.25, colour  # blue to pink, never grey
    assert len(set(arm_colours([f"a{i}" for i in range(16)]).values())) == 16


def test_a_cell_shows_its_score_over_repeats() -> None:
    from pytest_kgbench.analysis.html_report import cell_text

    assert cell_text([{"score": 1.0}, {"score": 0.0}, {"score": 0.0}]) == "1/3"  # not "partial"
    assert cell_text([{"score": 0.5}, {"score": 1.0}]) == "1.5/2"
    assert cell_text([{"score": None}, {"score": 1.0}]) == "1/1 +1 declined"
    assert cell_text([{"score": None}]) == "declined"


def test_each_cell_links_to_the_items_record() -> None:
    report = make_report()
    records = [{**it, "key": {"rating": f"key-of-{it['question']}"},
                "prompt": {"question": f"What is {it['question']}?", "context_file": "p/x.md"},
                "answer": {"text": f"answer to {it['question']} rep {it['repeat']}",
                           "block": {"rating": "A"},
                           "queries": [{"language": "sql", "statement": "SELECT 1 AS one",
                                        "columns": ["one"], "rows": [[1]], "row_count": 1}]}}
               for it in report["items"]]
    page = render_html(report, records)
    _parse(page)
    links = re.findall(r'<td class="cell"[^>]*title="([^"]*)"><a href="#([^"]+)">([^<]*)</a>',
                       page)
    assert len(links) == len(QUESTIONS) * len(ARMS)
    for tip, anchor, text in links:
        assert f'id="{anchor}"' in page
        assert "rep1" in tip and "rep2" in tip and text in tip
    q01 = next(a for tip, a, _ in links if tip.startswith("credit/base/credit-Q01 under R1 csv"))
    section = page[page.index(f'id="{q01}"'):]
    section = section[:section.index('<div class="record"', 1)]
    assert "What is credit-Q01?" in section and "key-of-credit-Q01" in section
    assert "answer to credit-Q01 rep 1" in section and "answer to credit-Q01 rep 2" in section
    assert "SELECT 1 AS one" in section
    assert "&lt;script&gt;" in page and "<script>" not in page  # the records escaped too
    assert '<a href="#' not in render_html(report)  # no records: no links to nowhere


def test_fingerprints_are_folded_away(full_page: str) -> None:
    folded = re.search(r"<details><summary>Fingerprints.*?</details>", full_page, flags=re.S)
    assert folded and "f" * 64 in folded.group(0) and "g" * 64 in folded.group(0)
