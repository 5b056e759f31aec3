"""A run that is not complete says so, wherever it is read: the items a run is meant to have are
written when it starts (meta.json), and rescore, replay, show, runs, compare, export and
load_run compare what answers.jsonl holds with them, naming what is missing; a line cut in half
is named on resume and its item asked again; a run whose meta.json is not JSON is one line; a
finished run resumes to the same report, serially or under -n."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import pytest_kgbench
from conftest import untimed
from pytest_kgbench.cli import main

SELECT = ("questions", "--condition", "R1", "-k", "Q01 or Q03 or Q04")


@pytest.fixture
def whole(project) -> pytest.Pytester:
    """A complete gold run of three items ("whole")."""
    p = project()
    p.runpytest(*SELECT, "--run-id", "whole").assert_outcomes(passed=3)
    return p


def _lose_a_line(reports: Path) -> str:
    """A copy of the whole run ("cut") whose answers.jsonl lost its second line after the run
    wrote its report (a hand edit, a bad copy); the node id it held."""
    shutil.copytree(reports / "whole", reports / "cut")
    for name in ("meta.json", "report.json"):  # the copy is a run of its own name
        data = json.loads((reports / "cut" / name).read_text(encoding="utf-8"))
        data["run_id"] = "cut"
        (reports / "cut" / name).write_text(json.dumps(data), encoding="utf-8")
    path = reports / "cut" / "answers.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    gone = json.loads(lines.pop(1))["nodeid"]
    path.write_text("".join(lines), encoding="utf-8")
    return gone


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_reader_says_a_run_that_lost_a_line_is_incomplete(whole, capsys) -> None:
    reports = whole.path / "reports"
    gone = _lose_a_line(reports)

    code, out, err = _cli(capsys, "rescore", str(reports / "cut"))
    assert code == 0, err
    assert "rescored 2 items" in out
    assert f"INCOMPLETE: 1 of 3 item(s) not banked: {gone}" in out
    rescored = json.loads(next((reports / "cut").glob("report-*.json")).read_text())
    assert rescored["complete"] is False and rescored["counts"]["expected"] == 3
    assert [m["nodeid"] for m in rescored["missing"]] == [gone]

    code, out, err = _cli(capsys, "show", "cut", "--reports", str(reports))
    assert out.splitlines()[0].startswith("run cut: 2 of 3 items banked — INCOMPLETE: ")
    assert f"  not banked: {gone} (" in out

    code, out, err = _cli(capsys, "runs", "--reports", str(reports))
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "2/3" in rows["cut"] and "INCOMPLETE" in rows["cut"] and gone in rows["cut"]
    assert "3/3" in rows["whole"] and "complete" in rows["whole"]

    code, out, err = _cli(capsys, "export", "cut", "--reports", str(reports),
                          "-o", str(whole.path / "cut.csv"))
    assert code == 0 and "wrote 2 item row(s)" in out
    assert "run cut is INCOMPLETE" in err and gone in err

    code, out, err = _cli(capsys, "compare", str(reports / "whole"), str(reports / "cut"))
    assert code == 0 and "run cut is INCOMPLETE" in err and "run whole" not in err

    run = pytest_kgbench.load_run(reports / "cut")
    assert run.summary.status == "incomplete" and run.summary.expected == 3
    assert [m["nodeid"] for m in run.missing] == [gone]

    # a replay of it is incomplete too, naming the same item (not 2 of 2, complete)
    replay = whole.runpytest("questions", "--agent", "replay", "--replay-run", "cut",
                             "--run-id", "replayed")
    assert replay.ret == pytest.ExitCode.TESTS_FAILED
    report = json.loads((reports / "replayed" / "report.json").read_text())
    assert report["complete"] is False and report["counts"]["items"] == 2
    assert [m["nodeid"] for m in report["missing"]] == [gone]
    assert "never banked it" in report["missing"][0]["why"]


def test_a_line_cut_in_half_is_named_and_its_item_asked_again(whole) -> None:
    """One line damaged in the middle of the file, the last one torn by a kill (no newline):
    the resume names both items, asks them again, and leaves answers.jsonl whole."""
    path = whole.path / "reports" / "whole" / "answers.jsonl"
    lines = path.read_bytes().splitlines()
    first, last = (json.loads(lines[i])["nodeid"] for i in (0, 2))
    path.write_bytes(lines[0][:len(lines[0]) // 2] + b"\n" + lines[1] + b"\n"
                     + lines[2][:len(lines[2]) // 2])
    result = whole.runpytest(*SELECT, "--resume", "whole")
    result.assert_outcomes(passed=2, deselected=result.parseoutcomes()["deselected"])
    out = result.stdout.str()
    assert "answers.jsonl line 1 is unreadable (not a record, " in out
    assert f"item {first} was never banked: it is asked again" in out
    assert "answers.jsonl line 3 is unreadable (cut short (a torn write), " in out
    assert f"item {last} was never banked: it is asked again" in out
    records = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["nodeid"] for r in records) == sorted({r["nodeid"] for r in records})
    assert len(records) == 3
    assert len((path.parent / "answers.jsonl.unreadable").read_bytes().splitlines()) == 2


def test_resuming_a_run_whose_meta_json_is_not_json_is_one_line(whole) -> None:
    run = whole.path / "reports" / "whole"
    (run / "meta.json").write_text('{"run_id": "whole", "settings": {', encoding="utf-8")
    before = (run / "answers.jsonl").read_bytes()
    result = whole.runpytest(*SELECT, "--resume", "whole")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ERROR: --resume: ") and "meta.json cannot be read as JSON" in err
    assert (run / "answers.jsonl").read_bytes() == before


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    drop = ("elapsed_s", "outcome", "duration_s")
    return {"items": sorted(({k: v for k, v in i.items() if k not in drop}
                             for i in report["items"]), key=lambda i: i["nodeid"]),
            "conditions": untimed(report["conditions"]), "counts": report["counts"],
            "complete": report["complete"], "missing": report["missing"]}


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_a_finished_run_resumes_to_the_same_report(project, workers) -> None:
    """Nothing left to ask: exit 0, no item asked, the same report (under -n it used to be
    pytest's 'no tests ran', exit 5)."""
    p = project()
    p.runpytest_subprocess(*SELECT, "--run-id", "done", "-p", "no:cacheprovider"
                           ).assert_outcomes(passed=3)
    run = p.path / "reports" / "done"
    before = _comparable(json.loads((run / "report.json").read_text()))
    banked = (run / "answers.jsonl").read_bytes()
    again = p.runpytest_subprocess(*SELECT, "--resume", "done", "-p", "no:cacheprovider",
                                   *workers)
    assert again.ret == 0, again.stdout.str()[-2000:]
    again.stdout.fnmatch_lines(["*run done is complete: every selected item was banked "
                                "before; nothing was asked*"])
    assert (run / "answers.jsonl").read_bytes() == banked
    assert _comparable(json.loads((run / "report.json").read_text())) == before
