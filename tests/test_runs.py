"""A resumed, replayed, rescored or compared run is the run it says it is: resume refuses other
settings (or, forced, records both), asks edited questions again and says when a run is done;
replay asks exactly the stored run's items; rescore keeps a run's missing items and refuses
changed data; compare keeps models apart and checks the datasets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def records_of(p: pytest.Pytester, run: str) -> list[dict]:
    return [json.loads(x) for x in
            (p.path / "reports" / run / "answers.jsonl").read_text().splitlines()]


def meta_of(p: pytest.Pytester, run: str) -> dict:
    return json.loads((p.path / "reports" / run / "meta.json").read_text())


@pytest.fixture
def seeded(project) -> pytest.Pytester:
    """A gold run at dataset seed 7 of two questions under R1 ("seeded")."""
    p = project()
    p.runpytest("questions", "--condition", "R1", "--dataset-seed", "7", "-k", "Q01 or Q03",
                "--run-id", "seeded").assert_outcomes(passed=2)
    return p


@pytest.mark.parametrize("args, says", [
    (["--dataset-seed", "8"], "--dataset-seed was 7, now 8"),
    (["--variant", "base,chains"], "--variant was base, now base,chains"),
    (["--max-rounds", "3"], "--max-rounds was 8, now 3"),
    (["--judge-model", "haiku"], "--judge-model was sonnet, now haiku"),
    (["--agent", "trap"], "--agent was gold, now trap"),
])
def test_resume_refuses_other_settings_in_one_line(seeded, args, says) -> None:
    result = seeded.runpytest("questions", "--resume", "seeded", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1 and err.startswith("ERROR: --resume: run 'seeded' was "
                                                         "asked otherwise (")
    assert says in err and "--force-resume" in err
    assert len(records_of(seeded, "seeded")) == 2  # nothing asked, nothing mixed in


def test_resume_refuses_a_changed_grader_or_prompt_code(seeded) -> None:
    meta_path = seeded.path / "reports" / "seeded" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["grader_sha256"] = "0" * 64
    meta["prompts_sha256"] = "1" * 64
    meta_path.write_text(json.dumps(meta))
    result = seeded.runpytest("questions", "--resume", "seeded")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "the grader's code was 000000000000, now " in err
    assert "the prompts' code was 111111111111, now " in err


def test_a_forced_resume_records_both_settings(seeded) -> None:
    result = seeded.runpytest("questions", "--resume", "seeded", "--dataset-seed", "8",
                              "--force-resume", "-k", "Q01 or Q03 or Q04")
    assert result.ret == 0
    meta = meta_of(seeded, "seeded")
    assert meta["first_settings"]["dataset_seed"] == 7 and meta["settings"]["dataset_seed"] == 8
    resume = meta["resumes"][-1]
    assert resume["forced"] is True
    assert resume["differs"] == {"--dataset-seed": {"stored": 7, "now": 8}}
    seeds = {r["question"]: r["dataset"]["seed"] for r in records_of(seeded, "seeded")}
    assert seeds == {"credit-Q01": 7, "credit-Q03": 7, "credit-Q04": 8}


def test_an_edited_question_is_asked_again_never_graded_against_the_old_answer(seeded) -> None:
    path = seeded.path / "questions" / "credit.yaml"
    path.write_text(path.read_text().replace(
        "text: What is the sovereign rating of Caldera?",
        "text: What is the sovereign rating of Caldera, today?"))
    result = seeded.runpytest("questions", "--resume", "seeded", "-k", "Q01 or Q03")
    result.assert_outcomes(passed=1, deselected=34)  # Q01 again; Q03 was banked as it is
    records = records_of(seeded, "seeded")
    assert [r["question"] for r in records] == ["credit-Q01", "credit-Q03", "credit-Q01"]
    report = json.loads((seeded.path / "reports" / "seeded" / "report.json").read_text())
    q01 = [i for i in report["items"] if i["question"] == "credit-Q01"]
    assert len(q01) == 1 and report["counts"]["items"] == 2
    assert report["fingerprint"]["questions_changed_during_run"] == []
    assert "today?" in records[-1]["prompt"]["question"]
    assert meta_of(seeded, "seeded")["resumes"][-1]["reasked"] == [records[-1]["nodeid"]]


def test_resuming_a_finished_run_says_so_and_exits_0(seeded) -> None:
    result = seeded.runpytest("questions", "--resume", "seeded", "-k", "Q01 or Q03")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*run seeded is complete: every selected item was banked "
                                 "before; nothing was asked*"])
    assert len(records_of(seeded, "seeded")) == 2


def test_replay_asks_exactly_the_stored_runs_items(seeded) -> None:
    """A two-item run replayed with no -k: the two items, not the whole question file (the
    rest graded W would put a 100% run at a few percent)."""
    result = seeded.runpytest("questions", "--agent", "replay", "--replay-run", "seeded",
                              "--run-id", "replayed")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 2 and outcomes["deselected"] > 30, outcomes
    report = json.loads((seeded.path / "reports" / "replayed" / "report.json").read_text())
    assert report["complete"] and report["counts"]["items"] == 2
    assert report["conditions"]["R1"]["accuracy"] == 1.0
