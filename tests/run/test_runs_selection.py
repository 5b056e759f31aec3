"""A run's selection is part of the run: `--resume` continues the items the run was started
with (its paths, -k, -m, --condition … restored from meta.json, serially and under -n), and
refuses another selection in one line naming the difference; a run id is used once."""

from __future__ import annotations

import json

import pytest

from conftest import credit_on_base

FIRST = ("questions", "--condition", "R1,D1", "-m", "credit", "-k", "L1")


def _items() -> int:
    """The items FIRST selects: credit's L1 questions on base, under R1 and D1."""
    return 2 * credit_on_base("L1")


@pytest.fixture
def killed(project) -> pytest.Pytester:
    """A run of credit's L1 questions under R1 and D1 ("sel") killed after its fifth item: five
    lines of answers.jsonl and its report never written."""
    p = project()
    p.runpytest(*FIRST, "--run-id", "sel").assert_outcomes(passed=_items())
    run = p.path / "reports" / "sel"
    lines = (run / "answers.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (run / "answers.jsonl").write_text("".join(lines[:5]), encoding="utf-8")
    for name in ("report.json", "report.md", "report.html", "grades.json"):
        (run / name).unlink()
    return p


def _banked(p: pytest.Pytester) -> list[str]:
    path = p.path / "reports" / "sel" / "answers.jsonl"
    return [json.loads(x)["nodeid"] for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_resume_continues_the_items_the_run_was_started_with(killed, workers) -> None:
    """`pytest --resume sel` with nothing else: the items left, not the whole suite."""
    result = killed.runpytest_subprocess("--resume", "sel", "-p", "no:cacheprovider", *workers)
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert result.parseoutcomes()["passed"] == _items() - 5
    banked = _banked(killed)
    assert len(banked) == len(set(banked)) == _items()
    report = json.loads((killed.path / "reports" / "sel" / "report.json").read_text())
    assert report["complete"] and report["counts"]["expected"] == _items()
    assert {i["condition"] for i in report["items"]} == {"R1", "D1"}
    assert {i["tier"] for i in report["items"]} == {"L1"}


@pytest.mark.parametrize("args, says", [
    (["questions", "-k", "L2"], "-k was 'L1', now 'L2'"),
    (["questions", "-m", "credit and R1"], "-m was 'credit', now 'credit and R1'"),
    (["questions/credit.yaml"], "the path list was questions, now questions/credit.yaml"),
])
def test_resume_refuses_another_selection_in_one_line(killed, args, says) -> None:
    result = killed.runpytest(*args, "--resume", "sel")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ERROR: --resume: run 'sel' was started with another selection (")
    assert says in err and "--force-resume" in err
    assert len(_banked(killed)) == 5  # nothing asked


def test_resume_refuses_other_conditions_in_one_line(killed) -> None:
    result = killed.runpytest("questions", "--resume", "sel", "--condition", "R1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1 and "--condition was R1,D1, now R1" in err
    assert len(_banked(killed)) == 5


def test_a_run_id_is_used_once(killed) -> None:
    """Running again under an existing run id without --resume would mix two settings' answers
    into one run: refused, naming --resume and a fresh id, nothing written."""
    run = killed.path / "reports" / "sel"
    meta = (run / "meta.json").read_bytes()
    result = killed.runpytest("questions", "--condition", "R1", "-k", "Q01", "--run-id", "sel")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ERROR: --run-id: run 'sel' exists (")
    assert "--resume sel" in err and "a fresh run id" in err
    assert (run / "meta.json").read_bytes() == meta and len(_banked(killed)) == 5
