"""report.html: a self-contained page that parses, carries every chart and escapes its text."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from pytest_kgbench.html_report import grid_cells, render_html  # noqa: E402

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
    assert full.tags.count("svg") == 3  # accuracy per tier, grid, forest chart
    assert partial.tags.count("svg") == 2  # no comparisons: no forest chart
    assert full_page.startswith("<!DOCTYPE html>")
    assert "<?xml" not in full_page and "<!DOCTYPE svg" not in full_page


def test_accuracy_chart_has_one_panel_per_tier(full_page: str) -> None:
    svg = full_page[full_page.index("<svg"):full_page.index("</svg>")]
    assert ">L1<" in svg and ">L3<" in svg and ">L2<" not in svg
    assert "font-family" in svg  # svg.fonttype none: text stays text, no glyph paths


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
    assert cells[4].startswith("+50.0") and cells[5] == "+2 / −0" and cells[-1] == "no"
    assert "No comparisons" in partial_page and "No comparisons" not in full_page


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
    assert rows == sorted(rows) and len(rows) == len(QUESTIONS)
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
