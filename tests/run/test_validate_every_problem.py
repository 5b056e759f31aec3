"""`kgbench validate` reports every problem it finds in one pass, as docs/packs.md promises —
three planted errors, one run, three lines — and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import STARTER_TABLES, starter_pack
from pytest_kgbench.cli import main


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    """The starter pack with its tables declared."""
    return starter_pack(tmp_path / "shop", tables=STARTER_TABLES)


def _validate(capsys: pytest.CaptureFixture[str], shop: Path) -> tuple[int, list[str], str]:
    code = main(["validate", str(shop), "--root", str(shop.parent),
                 "--cache", str(shop.parent / "cache"), "--no-needs"])
    out = capsys.readouterr()
    return code, [x for x in out.out.splitlines() if x.startswith("PROBLEM")], out.err


def test_three_planted_errors_one_run_three_lines(shop: Path, capsys) -> None:
    (shop / "data" / "orders.csv").unlink()  # 1. a declared table's file is missing
    questions = shop / "questions.yaml"
    text = questions.read_text(encoding="utf-8")
    text = text.replace("  tier: L1            #", "  tier: L7            #", 1)  # 2. shop-Q1
    text = text.replace("- id: shop-Q3\n  tier: L3\n",
                        "- id: shop-Q3\n  tier: L3\n  colour: blue\n", 1)  # 3. an unknown key
    questions.write_text(text, encoding="utf-8")
    code, problems, err = _validate(capsys, shop)
    assert code == 1 and err == ""
    assert len(problems) == 3, problems
    assert f"{shop / 'pack.yaml'}: field 'tables.orders': declares table 'orders'" in problems[0]
    assert "question shop-Q1: field 'tier': must be one of" in problems[1]
    assert "question shop-Q3: unknown keys ['colour']" in problems[2]


def test_a_build_that_fails_is_a_problem_line_not_a_traceback(shop: Path, capsys) -> None:
    orders = shop / "data" / "orders.csv"
    orders.write_text(orders.read_text(encoding="utf-8").replace("80.50", "eighty", 1),
                      encoding="utf-8")
    code, problems, err = _validate(capsys, shop)
    assert code == 1 and err == ""
    assert problems == ["PROBLEM building shop/base: ValueError: could not convert string to "
                        "float: 'eighty'"]
