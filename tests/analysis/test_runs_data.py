"""Runs as data: `kgbench runs` lists the stored runs with their status and headline, `kgbench
show` takes an id or a path, `kgbench export` writes one row per item as CSV or Parquet (through
DuckDB), and `pytest_kgbench.load_run` gives the items and comparisons as plain records (and a
DataFrame when pandas is installed)."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

import pytest_kgbench
from pytest_kgbench.analysis.runs import item_columns, item_row
from pytest_kgbench.cli import main
from pytest_kgbench.core.errors import KgbenchError
from pytest_kgbench.core.record import read_answers

_BUILT: dict[str, Path] = {}


@pytest.fixture
def reports(project, tmp_path_factory) -> Path:
    """Four run folders (made once per process; the tests only read them): a complete trap
    run with comparisons ("good"), a run the harness halted ("halted": a reference query past
    --query-timeout), a run killed before it wrote its report ("killed": answers.jsonl and
    meta.json only) and one whose meta.json is torn."""
    if "reports" not in _BUILT:
        _BUILT["reports"] = shutil.copytree(_make_runs(project()),
                                            tmp_path_factory.mktemp("runs-data") / "reports")
    return _BUILT["reports"]


def _make_runs(p: pytest.Pytester) -> Path:
    good = p.runpytest("questions", "--agent", "trap", "--condition", "R1,D1", "--ablation",
                       "-k", "Q01 or Q10 or Q13", "--run-id", "good")
    assert good.ret == 0, good.stdout.str()
    halted = p.runpytest("questions", "--agent", "gold", "--condition", "D4", "-k", "Q10",
                         "--query-timeout", "0.001", "--run-id", "halted")
    assert halted.ret == 3, halted.stdout.str()
    root = p.path / "reports"
    killed = root / "killed"
    killed.mkdir()
    for name in ("meta.json", "answers.jsonl"):
        shutil.copy(root / "good" / name, killed / name)
    meta = json.loads((killed / "meta.json").read_text())
    meta.update(run_id="killed", finished=None)
    (killed / "meta.json").write_text(json.dumps(meta))
    (root / "torn").mkdir()
    (root / "torn" / "meta.json").write_text('{"run_id": "torn", ')
    return root


def _lines(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_runs_lists_each_run_with_its_status_and_headline(reports, capsys) -> None:
    code, lines, err = _lines(capsys, "runs", "--reports", str(reports))
    assert code == 0, err
    assert lines[0].split()[:3] == ["id", "started", "(UTC)"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"good", "halted", "killed", "torn"}
    good = rows["good"].split()
    assert good[3:8] == ["trap", "trap", "R1,D1", "6/6", "complete"]
    assert rows["good"].endswith("L3: R1 0.0%, D1 0.0%")  # the trap misses every L3 question
    assert "HALTED" in rows["halted"] and "--query-timeout" in rows["halted"]
    assert " 0/" in rows["halted"]  # nothing banked: the first item halted the run
    assert "INCOMPLETE" in rows["killed"] and "no report" in rows["killed"]
    assert "6/6" in rows["killed"]  # banked (answers.jsonl) of expected (meta.json)
    assert "UNREADABLE" in rows["torn"] and "meta.json" in rows["torn"]


def test_show_takes_a_run_id_or_a_path(reports, capsys) -> None:
    code, by_id, err = _lines(capsys, "show", "good", "--reports", str(reports))
    assert code == 0, err
    _, by_path, _ = _lines(capsys, "show", str(reports / "good"))
    assert by_id == by_path and by_id[0] == "run good: 6 of 6 items banked"
    assert any(line.startswith("R1 csv") for line in by_id)
    _, halted, _ = _lines(capsys, "show", "halted", "--reports", str(reports))
    assert halted[0].startswith("run halted: 0 of ") and "HALTED: " in halted[0]
    _, killed, _ = _lines(capsys, "show", "killed", "--reports", str(reports))
    assert killed == ["run killed: 6 of 6 items banked — INCOMPLETE: no report: the session "
                      "did not finish (killed?); pytest --resume killed continues it"]
    code, _, err = _lines(capsys, "show", "nosuch", "--reports", str(reports))
    assert code == 2 and "no run 'nosuch'" in err


def test_export_writes_one_row_per_item_as_csv_and_parquet(reports, capsys, tmp_path) -> None:
    banked = {r["nodeid"]: r for r in read_answers(reports / "good" / "answers.jsonl")}
    pq, text = tmp_path / "good.parquet", tmp_path / "good.csv"
    code, lines, err = _lines(capsys, "export", "good", "--reports", str(reports),
                              "--format", "parquet", "-o", str(pq))
    assert code == 0, err
    assert lines == [f"wrote 6 item row(s) of run good to {pq}"]
    assert _lines(capsys, "export", str(reports / "good"), "-o", str(text))[0] == 0
    con = duckdb.connect()
    rows = con.execute(f"SELECT nodeid, grade, score, letter, condition, tier, metric_execution "
                       f"FROM '{pq}'").fetchall()
    assert {r[0] for r in rows} == set(banked) and len(rows) == 6
    for nodeid, grade, score, letter, condition, tier, execution in rows:
        rec = banked[nodeid]
        assert (grade, score, letter, condition, tier) == (
            rec["grade"], rec["score"], rec["letter"], rec["condition"], rec["tier"])
        assert execution == rec["metrics"].get("execution")  # None under R1: no query ran
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                             f"'{pq}')").fetchall())
    assert types["score"] == "DOUBLE" and types["repeat"] == "BIGINT"
    assert types["metric_execution"] == "BOOLEAN" and types["input_tokens"] == "BIGINT"
    with text.open(newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [r["nodeid"] for r in table] == [r[0] for r in con.execute(
        f"SELECT nodeid FROM '{pq}'").fetchall()]  # the same rows, in the same order
    assert all(json.loads(r["key"]) == banked[r["nodeid"]]["key"] for r in table)
    assert all(r["answer_text"] == banked[r["nodeid"]]["answer"]["text"] for r in table)
    code, _, err = _lines(capsys, "export", "nosuch", "--reports", str(reports))
    assert code == 2 and "no run 'nosuch'" in err


def test_load_run_gives_items_and_comparisons_as_plain_records(reports, monkeypatch) -> None:
    run = pytest_kgbench.load_run("good", reports)
    report = json.loads((reports / "good" / "report.json").read_text())
    assert run.id == "good" and run.summary.status == "complete"
    assert len(run.items) == len(run.records) == 6
    assert run.comparisons == report["comparisons"] and len(run.comparisons) > 0
    assert {c["tier"] for c in run.comparisons} >= {"L3"}
    assert run.conditions["R1"]["by_tier"]["L3"]["accuracy"] == 0.0
    assert all(isinstance(i["score"], float) for i in run.items)
    halted = pytest_kgbench.load_run(reports / "halted")
    assert halted.summary.status == "halted" and halted.items == []
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    with pytest.raises(KgbenchError, match="pandas is not installed"):
        run.to_pandas()
    with pytest.raises(KgbenchError, match="no run 'nosuch'"):
        pytest_kgbench.load_run("nosuch", reports)


def test_load_run_gives_dataframes_when_pandas_is_installed(reports) -> None:
    pytest.importorskip("pandas", reason="pandas is optional (pip install -e '.[dev]' has it): "
                                         "without it to_pandas refuses, as the test above shows")
    run = pytest_kgbench.load_run("good", reports)
    frame = run.to_pandas()
    assert len(frame) == 6 and frame["score"].sum() == sum(i["score"] for i in run.items)
    assert list(frame.columns) == [name for name, _ in item_columns(run.items)]
    comps = run.comparisons_frame()
    assert len(comps) == len(run.comparisons) and "ci95_low" in comps.columns


def test_item_columns_are_fixed_and_type_each_metric_by_its_values() -> None:
    fixed = dict(item_columns([]))
    assert fixed["score"] == "DOUBLE" and fixed["nodeid"] == "VARCHAR"
    rows = [item_row({"metrics": {"a": True, "b": 1, "c": 0.5, "mixed": 1}}, "r"),
            item_row({"metrics": {"a": None, "b": 2, "c": 1, "mixed": "x"}}, "r")]
    types = dict(item_columns(rows))
    assert (types["metric_a"], types["metric_b"], types["metric_c"], types["metric_mixed"]) == \
        ("BOOLEAN", "BIGINT", "DOUBLE", "VARCHAR")


def test_a_runs_report_html_links_each_cell_to_its_record(reports) -> None:
    """The run folder's report.html is rendered with the banked records: each grid cell links
    to a section holding that item's answer; the halted run's page leads with its reason."""
    import re

    page = (reports / "good" / "report.html").read_text(encoding="utf-8")
    anchors = re.findall(r'<a href="#(rec-[^"]+)">', page)
    assert len(anchors) == 6 and all(f'id="{a}"' in page for a in anchors)
    for rec in read_answers(reports / "good" / "answers.jsonl"):
        assert rec["nodeid"] in page
    halted = (reports / "halted" / "report.html").read_text(encoding="utf-8")
    assert re.search(r'<div class="banner">HALTED — [^<]*--query-timeout', halted)
    assert halted.index('class="banner"') < halted.index("<h1>")
