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

REPO = Path(__file__).resolve().parents[2]


def credit_questions() -> list:
    from conftest import REPO
    from pytest_kgbench.core.questions import load_questions

    return list(load_questions(REPO / "questions" / "credit.yaml").questions)


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
    under_r1 = sum(1 for q in credit_questions() if "reading" in q.modes
                   and (q.variants is None or "base" in q.variants))
    # Q01 asked again; Q03 deselected as banked, the rest by -k
    result.assert_outcomes(passed=1, deselected=under_r1 - 1)
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


# --- rescore and compare ----------------------------------------------------------------------

def rescore_cli(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_kgbench.cli", "rescore", str(run),
                           *args], capture_output=True, text=True, timeout=300)


def test_rescore_keeps_the_runs_missing_items(project, monkeypatch) -> None:
    from fake_api import FakeMessagesAPI, status, text

    with FakeMessagesAPI() as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-secret")
        api.push(text("A+.\n```json\n{\"rating\": \"A+\"}\n```"),
                 status(401, kind="authentication_error"))
        p = project()
        result = p.runpytest("questions", "--model", "sonnet", "--condition", "R1",
                             "-k", "Q01 or Q03 or Q04", "--run-id", "halted")
        assert result.ret == 3
    from pytest_kgbench.run.rescore import rescore

    run = p.path / "reports" / "halted"
    done = rescore(run, stamp="s1")
    assert len(done.records) == 1 and len(done.missing) == 2
    report = json.loads((run / "report-s1.json").read_text())
    assert report["complete"] is False and len(report["missing"]) == 2
    assert "INCOMPLETE" in (run / "report-s1.md").read_text()


def test_rescore_refuses_data_that_changed_since_the_run(seeded) -> None:
    run = seeded.path / "reports" / "seeded"
    lines = []
    for rec in records_of(seeded, "seeded"):  # as if the pack's generator changed since
        rec["dataset"]["build"] = "base-7-0123456789abcdef"
        lines.append(json.dumps(rec))
    (run / "answers.jsonl").write_text("\n".join(lines) + "\n")
    refused = rescore_cli(run)
    assert refused.returncode == 2
    err = refused.stderr.strip()
    assert len(err.splitlines()) == 1
    assert "today's data is not what the run was asked about (credit/base: build " \
           "base-7-0123456789abcdef then, base-7-" in err and "--force" in err
    assert not list(run.glob("grades-*.json"))
    forced = rescore_cli(run, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "DATA CHANGED since the run (credit/base" in forced.stdout
    md = next(run.glob("report-*.md")).read_text()
    assert "## DATA CHANGED SINCE THE RUN" in md
    report = json.loads(next(run.glob("report-*.json")).read_text())
    assert list(report["rescored"]["data_changed_since_run"]) == ["credit/base"]


@pytest.fixture
def two_models(project) -> pytest.Pytester:
    from pytest_kgbench.core.questions import load_questions

    p = project()
    l3 = [q for q in load_questions(p.path / "questions" / "credit.yaml").questions
          if q.tier == "L3" and (q.variants is None or "base" in q.variants)]
    p.runpytest("questions", "--agent", "synthetic", "--model", "haiku,sonnet", "--condition",
                "D1", "-k", "L3", "--run-id", "two").assert_outcomes(passed=2 * len(l3))
    return p


def test_compare_keeps_models_apart(two_models) -> None:
    from pytest_kgbench.run.rescore import compare_runs

    a = json.loads((two_models.path / "reports" / "two" / "report.json").read_text())
    b = json.loads(json.dumps(a))
    b["run_id"] = "other"
    for item in b["items"]:  # the other run: haiku always right, sonnet always wrong
        item["score"] = 1.0 if item["model"] == "haiku" else 0.0
    by_arm = {c.a.split(":", 1)[1]: c for c in compare_runs(a, b, seed=1) if c.tier == "L3"}
    assert sorted(by_arm) == ["D1/haiku", "D1/sonnet"]
    for arm, after in (("D1/haiku", 1.0), ("D1/sonnet", 0.0)):
        before = a["conditions"][arm]["by_tier"]["L3"]["accuracy"]
        assert by_arm[arm].diff == pytest.approx(after - before, abs=1e-6), arm


def test_compare_checks_the_data_and_names_the_questions_that_differ(two_models) -> None:
    from pytest_kgbench.core.errors import KgbenchError
    from pytest_kgbench.run.rescore import compare_runs, question_hashes

    run = two_models.path / "reports" / "two"
    a = json.loads((run / "report.json").read_text())
    b = json.loads(json.dumps(a))
    b["fingerprint"]["datasets"]["credit/base"]["seed"] = 8
    with pytest.raises(KgbenchError, match=r"different data \(credit/base: seed \d+ build .* vs "
                                           r"seed 8 build"):
        compare_runs(a, b, seed=1)
    assert compare_runs(a, b, seed=1, force=True)
    qa = question_hashes(run)
    qb = dict(qa)
    first = sorted(qb)[0]
    qb[first] = "0" * 64
    qb["credit/credit-Q99"] = "1" * 64
    b = json.loads(json.dumps(a))
    b["fingerprint"]["questions_sha256"] = "2" * 64
    with pytest.raises(KgbenchError) as refused:
        compare_runs(a, b, seed=1, questions=(qa, qb))
    assert f"edited: {first}" in str(refused.value)
    assert "only in the second: credit/credit-Q99" in str(refused.value)


# --- a corrupt cache ----------------------------------------------------------------------------

def test_a_truncated_cached_database_is_detected_and_rebuilt(project, credit_pack,
                                                             tmp_path) -> None:
    from pytest_kgbench.packs.build import build_variant, damaged

    cache = tmp_path / "cache"
    built = build_variant(credit_pack, "base", cache)
    path = built.executed_duckdb_path
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[: size // 3])
    assert damaged(built.dir) == f"executed.duckdb is {size // 3} bytes, not {size}"
    p = project()
    p.makeini("[pytest]\n"
              f"kgbench_datasets = {REPO / 'datasets'}\n"
              f"kgbench_ontology = {REPO / 'ontology'}\n"
              f"kgbench_cache = {cache}\n")
    result = p.runpytest("questions", "--condition", "D3,R10", "-k", "Q01 or Q10")
    result.assert_outcomes(passed=4)  # gold, on the rebuilt tables
    assert "Error" not in result.stdout.str()
    assert damaged(built.dir) is None and path.stat().st_size > size // 3


# --- a prompt longer than the model's window is announced before the run ------------------------

def test_the_estimate_warns_of_prompts_longer_than_the_window(project, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    p = project()
    (p.path / "pyproject.toml").write_text('[tool.kgbench.windows]\n"claude-sonnet-5-5" = 3000\n')
    result = p.runpytest("questions", "--model", "sonnet", "--estimate", "--condition", "R1,D1",
                         "-k", "Q01 or Q03")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["WARNING: R1 claude-sonnet-5-5: 2 item(s) have a prompt of "
                                 "about *tokens, more than the model's 3,000-token window; they "
                                 "will be skipped, not asked"])
    assert "WARNING: D1" not in result.stdout.str()  # the store's description is short


def test_kgbench_prompt_warns_of_a_prompt_longer_than_the_window(kg_cache) -> None:
    """research/large under R2 is about 380K tokens: more than a 200K window."""
    done = subprocess.run([sys.executable, "-m", "pytest_kgbench.cli", "prompt", "--pack",
                           "research", "--variant", "large", "--question", "research-Q01",
                           "--condition", "R2", "--root", str(REPO), "--cache", str(kg_cache)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "## Question research-Q01" in done.stdout
    assert done.stderr.startswith("kgbench prompt: WARNING: this prompt is about 3")
    assert "more than the 200,000-token window of claude-sonnet-5-5" in done.stderr
