"""The hooks end to end, through pytester: collection, ids, keywords, options, outcomes, the run
folder, completeness, resume and xdist."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from conftest import untimed

SUBSET = "Q01 or Q06 or Q10 or Q13 or Q20 or Q27 or Q30"


def run_dir(p: pytest.Pytester) -> Path:
    runs = sorted((p.path / "reports").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def report_of(p: pytest.Pytester) -> dict:
    return json.loads((run_dir(p) / "report.json").read_text(encoding="utf-8"))


def _questions() -> list:
    from pytest_kgbench.core.questions import load_questions

    questions = load_questions(Path(__file__).resolve().parents[2] / "questions" /
                               "credit.yaml").questions
    return [q for q in questions if q.variants is None or "base" in q.variants]


def test_node_ids_parametrize_question_condition_model_repeat(project) -> None:
    p = project()
    result = p.runpytest("questions", "--collect-only", "-q", "--condition", "R5,D2",
                         "--repeats", "2")
    out = result.stdout.str()
    assert "questions/credit.yaml::credit-Q06[R5-gold-rep1]" in out
    assert "questions/credit.yaml::credit-Q06[D2-gold-rep2]" in out
    assert "R1-gold" not in out
    # each question under each condition of a mode it is asked in (R5 reads, D2 queries), twice
    expected = sum(("reading" in q.modes) + ("querying" in q.modes) for q in _questions()) * 2
    assert expected < len(_questions()) * 2 * 2  # the write requests are asked under D2 only
    assert f"{expected} tests collected" in out
    assert "credit-Q29[D2-gold-rep1]" in out and "credit-Q29[R5-gold-rep1]" not in out


def test_keywords_select_tier_pack_and_condition(project) -> None:
    p = project()
    out = p.runpytest("questions", "--collect-only", "-q", "-k", "D2 and credit").stdout.str()
    ids = [line for line in out.splitlines() if "::" in line]
    assert ids and all("[D2-" in i for i in ids)
    out = p.runpytest("questions", "--collect-only", "-q", "-k", "L3").stdout.str()
    ids = [line for line in out.splitlines() if "::" in line]
    questions = {i.split("::")[1].split("[")[0] for i in ids}
    assert questions == {q.id for q in _questions() if q.tier == "L3"}
    out = p.runpytest("questions", "--collect-only", "-q", "-k", "sparql+ontology").stdout.str()
    assert all("[D5-" in line for line in out.splitlines() if "::" in line)


@pytest.mark.parametrize(("value", "expected"), [
    ("reading", {f"R{n}" for n in range(1, 11)}),
    ("querying", {f"D{n}" for n in range(1, 7)}),
    ("r1,d4", {"R1", "D4"}),
])
def test_condition_option_forms(project, value: str, expected: set[str]) -> None:
    p = project()
    out = p.runpytest("questions", "--collect-only", "-q", "--condition", value,
                      "-k", "Q01").stdout.str()
    got = {line.split("[")[1].split("-")[0] for line in out.splitlines() if "::" in line}
    assert got == expected


def test_an_unknown_condition_is_a_usage_error(project) -> None:
    result = project().runpytest("questions", "--condition", "R99")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--condition*unknown condition 'R99'*"])


def test_gold_run_scores_every_item_correct_and_writes_the_run_folder(project) -> None:
    p = project()
    result = p.runpytest("questions", "--condition", "R1,R2,D1,D4", "-k", SUBSET,
                         "--run-id", "gold-run")
    result.assert_outcomes(passed=28)
    result.stdout.fnmatch_lines(["*kgbench*", "*R1 csv*100.0%*", "*run folder:*gold-run*"])
    folder = run_dir(p)
    assert folder.name == "gold-run"
    for name in ("meta.json", "questions.json", "answers.jsonl", "grades.json", "report.json",
                 "report.md"):
        assert (folder / name).is_file(), name
    report = report_of(p)
    assert report["complete"] and report["missing"] == []
    assert {c: v["accuracy"] for c, v in report["conditions"].items()} == \
        {"R1": 1.0, "R2": 1.0, "D1": 1.0, "D4": 1.0}
    assert report["conditions"]["R1"]["n_questions"] == 7
    assert set(report["conditions"]["R1"]["by_tier"]) == {"L1", "L2", "L3", "L4", "L5"}
    fp = report["fingerprint"]
    assert fp["questions_count"] == 7 and len(fp["questions_sha256"]) == 64
    item = next(i for i in report["items"]
                if i["nodeid"] == "questions/credit.yaml::credit-Q06[R1-gold-rep1]")
    assert {k: item[k] for k in ("question", "tier", "pack", "variant", "condition", "model",
                                 "agent", "agent_kind", "repeat", "grade", "score", "status",
                                 "letter")} == {
        "question": "credit-Q06", "tier": "L2", "pack": "credit", "variant": "base",
        "condition": "R1", "model": "gold", "agent": "gold", "agent_kind": "reference",
        "repeat": 1, "grade": "correct", "score": 1.0, "status": "answered", "letter": "C"}
    lines = (folder / "answers.jsonl").read_text().splitlines()
    assert len(lines) == 28
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["fingerprint"]["questions_sha256"] == fp["questions_sha256"]
    assert meta["packages"]["duckdb"] and meta["grader_sha256"]
    prompts = list((folder / "prompts").glob("*.md"))
    assert {f.name.split("-")[0] for f in prompts} == {"R1", "R2", "D1", "D4"}
    md = (folder / "report.md").read_text()
    from pytest_kgbench.analysis.report import TIER_ORDER
    from pytest_kgbench.analysis.stats import wilson

    asked = [q for q in _questions() if q.id.split("-")[1] in SUBSET.split(" or ")]
    per_tier = {t: sum(q.tier == t for q in asked) for t in TIER_ORDER}
    cells = [f"100.0% [{100 * wilson(n, n)[0]:.1f}–100.0] n={n}"  # all right: Wilson, not 0 width
             for t, n in per_tier.items() if n]
    for arm in ("R1 csv", "D4 sparql"):
        row = next(line for line in md.splitlines() if line.startswith(f"| {arm} |"))
        assert row.split(" | ")[1:-1] == cells, row
        assert int(row.split(" | ")[-1].rstrip(" |").replace(",", "")) > 100  # prompt tokens


def test_a_session_leaves_no_store_of_its_own_behind(project, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The gold agent answers a Turtle reading item on a store rebuilt from the prompt's text,
    loaded from temporary files: the session's end closes it, its files removed (they were
    left in the temporary folder, one set per context, by every such run and rescore)."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    p = project()
    p.runpytest("questions", "--condition", "R2", "-k", "Q01 or Q06").assert_outcomes(passed=2)
    assert report_of(p)["conditions"]["R2"]["accuracy"] == 1.0
    assert sorted(f.name for f in temp.iterdir()) == []
    from pytest_kgbench.cli import main

    assert main(["rescore", str(run_dir(p))]) == 0  # rebuilds the store from the stored prompt
    assert sorted(f.name for f in temp.iterdir()) == []


def test_reading_prompts_withhold_personal_data(project) -> None:
    p = project()
    p.runpytest("questions", "--condition", "R1", "-k", "Q30")
    rec = json.loads((run_dir(p) / "answers.jsonl").read_text().splitlines()[0])
    context = (run_dir(p) / rec["prompt"]["context_file"]).read_text()
    assert "### contacts.csv" in context and "withheld: email, phone" in context
    assert "@" not in context.split("### contacts.csv")[1].split("```", 2)[1]
    assert rec["grade"] == "correct" and rec["behaviour"] == "blocked"


def test_trap_run_records_wrong_answers_as_passed_items(project) -> None:
    p = project()
    result = p.runpytest("questions", "--agent", "trap", "-k", "L3", "--condition", "R1,D4")
    result.assert_outcomes(passed=2 * sum(q.tier == "L3" for q in _questions()))
    report = report_of(p)
    # the progress letters: the file's line, then the lines it wraps onto (a long run), up to
    # the summary; a notice printed between two of them (a build waited for, on a loaded
    # machine) is not a letter and does not end them
    lines = result.stdout.lines
    first = next(i for i, line in enumerate(lines) if line.startswith("questions/credit.yaml "))
    rest = itertools.takewhile(lambda line: not line.startswith("="), lines[first:])
    # pytest names the file again on the line after a notice (the progress line of a slow run)
    block = [line.removeprefix("questions/credit.yaml ") for line in rest]
    letters = "".join(line.split(" ")[0] for line in block
                      if re.fullmatch(r"[A-Z]+ *(\[ *\d+%\])?", line))
    assert sorted(letters) == sorted(i["letter"] for i in report["items"])
    assert letters.count("W") == sum(i["grade"] == "wrong" for i in report["items"]) > 0
    assert all(c["accuracy"] < 0.5 for c in report["conditions"].values())


def test_a_gold_item_that_is_not_correct_fails_and_is_still_banked(project) -> None:
    text = (Path(__file__).resolve().parents[2] / "questions" / "credit.yaml").read_text()
    broken = text.replace("sql: SELECT count(*) AS count FROM countries",
                          "sql: SELECT count(*) - 1 AS count FROM countries")
    p = project(broken)
    result = p.runpytest("questions", "-k", "Q03", "--condition", "R1,R2")  # SQL broken only
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*gold agent must answer every item correctly*wrong*"])
    lines = (run_dir(p) / "answers.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert {json.loads(x)["grade"] for x in lines} == {"correct", "wrong"}


def test_a_broken_question_file_is_one_line_and_no_run_folder(project) -> None:
    """Refused before anything is made: one line naming the file, question and field, exit 4
    (pytest's usage error), and no run folder for `kgbench runs` to list as complete 0/0."""
    text = (Path(__file__).resolve().parents[2] / "questions" / "credit.yaml").read_text()
    p = project(text.replace("tier: L2", "tier: L7", 1))
    result = p.runpytest("questions")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1, err
    assert "credit.yaml: question credit-Q05: field 'tier': must be one of" in err
    assert not (p.path / "reports").exists()


def test_an_item_that_never_reports_makes_the_run_fail(project) -> None:
    p = project()
    p.makeconftest("""
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if "Q06" in item.nodeid and call.when == "call":
        report.user_properties[:] = []   # the record is lost on its way to the controller
    return report
""")
    result = p.runpytest("questions", "-k", "Q01 or Q06", "--condition", "R1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    report = report_of(p)
    assert not report["complete"]
    assert [m["nodeid"] for m in report["missing"]] == \
        ["questions/credit.yaml::credit-Q06[R1-gold-rep1]"]
    result.stdout.fnmatch_lines(["*INCOMPLETE: 1 item(s) never reported*"])


def test_resume_skips_banked_items(project) -> None:
    p = project()
    first = p.runpytest("questions", "-k", "Q01 or Q03", "--condition", "R1", "--run-id", "r")
    first.assert_outcomes(passed=2)
    # a wider selection than the run was started with: only with --force-resume
    again = p.runpytest("questions", "-k", "Q01 or Q03 or Q04", "--condition", "R1",
                        "--resume", "r", "--force-resume")
    under_r1 = sum("reading" in q.modes for q in _questions())  # write requests are D-only
    again.assert_outcomes(passed=1, deselected=under_r1 - 1)  # by -k, or banked
    report = report_of(p)
    assert report["complete"] and len(report["items"]) == 3
    assert len((run_dir(p) / "answers.jsonl").read_text().splitlines()) == 3


def test_the_plugin_makes_no_run_folder_for_ordinary_tests(project) -> None:
    p = project()
    p.makepyfile(test_plain="def test_ok():\n    assert True\n")
    p.runpytest("test_plain.py").assert_outcomes(passed=1)
    assert not (p.path / "reports").exists()


def _items(report: dict) -> list[dict]:
    drop = ("elapsed_s", "outcome")
    return sorted(({k: v for k, v in i.items() if k not in drop} for i in report["items"]),
                  key=lambda i: i["nodeid"])


def test_xdist_gives_the_same_items_as_a_serial_run(project) -> None:
    p = project()
    args = ["questions", "--condition", "R1,D4", "-k", SUBSET, "-p", "no:cacheprovider"]
    serial = p.runpytest_subprocess(*args, "--run-id", "serial")
    serial.assert_outcomes(passed=14)
    parallel = p.runpytest_subprocess(*args, "-n", "2", "--run-id", "parallel")
    parallel.assert_outcomes(passed=14)
    a = json.loads((p.path / "reports" / "serial" / "report.json").read_text())
    b = json.loads((p.path / "reports" / "parallel" / "report.json").read_text())
    assert _items(a) == _items(b)
    assert untimed(a["conditions"]) == untimed(b["conditions"])
    assert a["fingerprint"]["questions_sha256"] == b["fingerprint"]["questions_sha256"]
    assert b["complete"]
