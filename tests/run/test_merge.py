"""`kgbench merge` (run/merge.py): a run cut into shards, each run in a process of its own with
its own build cache and reports folder, merges into the report the unsharded run gives; and
every merge that would mix what must not be mixed is refused in one line, exit 4, writing
nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import subprocess_project, untimed
from pytest_kgbench.analysis.runs import load_run
from pytest_kgbench.cli import main

SUBSET = "Q01 or Q06 or Q10 or Q13 or Q20 or Q27 or Q30"
SYNTHETIC = ("--agent", "synthetic", "--synthetic", "D1=0.45,D2=0.7", "--ablation")


def _pytest(root: Path, *args: str, cache: Path | None = None, reports: str = "reports"
            ) -> subprocess.Popen[str]:
    ini = ["-o", f"kgbench_reports={reports}"]
    if cache is not None:
        ini += ["-o", f"kgbench_cache={cache}"]
    return subprocess.Popen([sys.executable, "-m", "pytest", "questions", "-q", "-p",
                             "no:randomly", "-p", "no:cacheprovider", *ini, *args],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _done(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """report.json without its timings (each item's, each arm's latency) and its run's name
    and clock; everything else — settings, fingerprints, items, grades, arms, comparisons,
    statistics, counts, missing — as it is."""
    out = {k: v for k, v in report.items() if k not in ("run_id", "started", "finished")}
    out["settings"] = {k: v for k, v in report["settings"].items() if k != "run_id"}
    out["items"] = [{k: v for k, v in i.items() if k not in ("elapsed_s", "duration_s")}
                    for i in report["items"]]
    out["conditions"] = untimed(report["conditions"])
    return out


# four sessions, three at once, each building its own cache: 44 s alone on 2 cores, 174 s at
# load 10
@pytest.mark.slow
def test_three_shards_in_three_processes_merge_to_the_unsharded_report(
        tmp_path: Path, kg_cache: Path) -> None:
    (tmp_path / "project").mkdir()
    root = subprocess_project(tmp_path / "project", kg_cache)
    args = (*SYNTHETIC, "--condition", "D1,D2,D3",
            "--repeats", "3")
    # each shard as on a machine of its own: its own build cache and reports folder
    caches = [tmp_path / f"cache-{i}" for i in range(3)]
    shards = [_pytest(root, *args, "--run-id", f"part-{i}", "--kgbench-shard", f"{i}/3",
                      cache=caches[i], reports=f"reports-{i}") for i in range(3)]
    outs = [_done(p) for p in shards]
    assert all("kgbench: building credit/base" in out for out in outs)  # no cache shared
    _done(_pytest(root, *args, "--run-id", "whole", cache=caches[0], reports="reports-0"))

    folders = [str(root / f"reports-{i}" / f"part-{i}") for i in (2, 0, 1)]  # any order
    assert main(["merge", *folders, "--run-id", "merged", "--reports",
                 str(root / "merged-reports")]) == 0
    merged = root / "merged-reports" / "merged"
    whole = json.loads((root / "reports-0" / "whole" / "report.json").read_text())
    report = json.loads((merged / "report.json").read_text())
    assert whole["complete"] and whole["counts"]["items"] > 500 and whole["comparisons"]
    sizes = [len(json.loads((Path(f) / "meta.json").read_text())["expected"])
             for f in folders]
    assert sum(sizes) == whole["counts"]["expected"] and min(sizes) > 0
    assert _comparable(report) == _comparable(whole)
    assert report["run_id"] == "merged"
    # the merged folder is a run like another: every item, each prompt file, complete
    run = load_run(merged)
    assert run.summary.status == "complete" and len(run.records) == whole["counts"]["items"]
    assert sorted(p.name for p in (merged / "prompts").iterdir()) == sorted(
        p.name for p in (root / "reports-0" / "whole" / "prompts").iterdir())
    assert "## Shards" in (merged / "report.md").read_text()


# --- the refusals --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shard_set(tmp_path_factory: pytest.TempPathFactory, kg_cache: Path, worker_id: str
              ) -> Path:
    """Three shards of a small ablation (a spending cap of $0.30 given for the whole run), and
    beside them a shard cut from another selection, a shard asked under another --synthetic,
    and the run unsharded: made once for the test session, by the first xdist worker to need
    them (the others wait for it under a file lock); the tests spoil copies."""
    from filelock import FileLock

    top = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        top = top.parent
    folder = top / "merge-shard-set"
    with FileLock(str(folder) + ".lock"):
        if not (folder / "made").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            _make_shard_set(folder, kg_cache)
            (folder / "made").touch()
    return folder / "reports"


def _make_shard_set(folder: Path, kg_cache: Path) -> None:
    root = subprocess_project(folder, kg_cache)
    base = (*SYNTHETIC, "--condition", "D1,D2", "--repeats", "2", "--max-cost", "0.3")
    runs = [_pytest(root, *base, "-k", SUBSET, "--run-id", f"s{i}", "--kgbench-shard",
                    f"{i}/3", cache=kg_cache) for i in range(3)]
    runs += [_pytest(root, *base, "-k", SUBSET + " or Q02", "--run-id", "other-selection",
                     "--kgbench-shard", "1/3", cache=kg_cache),
             _pytest(root, *base, "-k", SUBSET, "--synthetic", "D1=0.5,D2=0.7",
                     "--run-id", "other-synthetic", "--kgbench-shard", "2/3", cache=kg_cache),
             _pytest(root, *base, "-k", SUBSET, "--run-id", "whole", cache=kg_cache)]
    for proc in runs:
        _done(proc)


@pytest.fixture
def reports(shard_set: Path, tmp_path: Path) -> Path:
    """A copy of the shard set's reports folder, to spoil."""
    return Path(shutil.copytree(shard_set, tmp_path / "reports"))


def _edit_json(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


def _edit_records(path: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    change(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _merge(reports: Path, *runs: str, extra: tuple[str, ...] = ()) -> int:
    return main(["merge", *runs, "--run-id", "out", "--reports", str(reports), *extra])


def _copy_as(reports: Path, run: str, name: str) -> None:
    shutil.copytree(reports / run, reports / name)
    _edit_json(reports / name / "meta.json", lambda m: m.update(run_id=name))


def _spoil_grader(r: Path) -> None:
    _edit_json(r / "s1" / "meta.json", lambda m: m.update(grader_sha256="0" * 64))


def _spoil_prompts(r: Path) -> None:
    _edit_json(r / "s2" / "meta.json", lambda m: m.update(prompts_sha256="f" * 64))


def _spoil_build(r: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        for rec in records:
            rec["dataset"] = {**rec["dataset"], "build": "another-build"}
    _edit_records(r / "s1" / "answers.jsonl", change)


def _spoil_model(r: Path) -> None:
    _edit_json(r / "s2" / "meta.json", lambda m: m.update(models=["sonnet"]))


def _bank_twice(r: Path) -> None:
    line = (r / "s0" / "answers.jsonl").read_text().splitlines(True)[0]
    with (r / "s1" / "answers.jsonl").open("a") as fh:
        fh.write(line)


def _halt(r: Path) -> None:
    _edit_json(r / "s2" / "report.json", lambda m: m.update(
        halted="kgbench: the run halts at its spending cap: budget"))


def _lose_a_line(r: Path) -> None:
    path = r / "s1" / "answers.jsonl"
    path.write_text("".join(path.read_text().splitlines(True)[1:]))


def _force_resume(r: Path) -> None:
    _edit_json(r / "s0" / "meta.json", lambda m: m.update(resumes=[
        {"forced": True, "differs": {"--synthetic": {"stored": "D1=0.45", "now": "D1=0.9"}}}]))


def _nothing(r: Path) -> None:
    pass


def _twice(r: Path) -> None:
    _copy_as(r, "s1", "s1-again")


REFUSALS = [
    # (what is wrong, how the folders are made so, the shards given, what the line says)
    ("a shard missing", _nothing, ("s0", "s2"),
     "shard 1/3 is missing: give the run folder of every shard, 0 to 2"),
    ("a shard given twice", _twice, ("s0", "s1", "s1-again", "s2"),
     "shard 1/3 is given twice: "),
    ("another selection", _nothing, ("s0", "other-selection", "s2"),
     "was cut from another selection than shard 0/3"),
    ("another setting", _nothing, ("s0", "s1", "other-synthetic"),
     "shard 2/3 (REPORTS/other-synthetic) differs from shard 0/3 (REPORTS/s0) in setting "
     "'synthetic': \"D1=0.45,D2=0.7\" there, \"D1=0.5,D2=0.7\" here"),
    ("not a shard", _nothing, ("s0", "s1", "whole"),
     "REPORTS/whole: not a shard (no shard.json: the run was not started with "
     "--kgbench-shard I/N)"),
    ("the grader", _spoil_grader, ("s0", "s1", "s2"),
     "shard 1/3 (REPORTS/s1) differs from shard 0/3 (REPORTS/s0) in the grader's code"),
    ("the prompts", _spoil_prompts, ("s0", "s1", "s2"), "in the prompts' code"),
    ("the data", _spoil_build, ("s0", "s1", "s2"),
     "shard 1/3 (REPORTS/s1) differs from shard 0/3 (REPORTS/s0) in the data of credit/base"),
    ("the model", _spoil_model, ("s0", "s1", "s2"),
     "in models: [\"synthetic\"] there, [\"sonnet\"] here"),
    ("an item banked twice", _bank_twice, ("s0", "s1", "s2"), "was banked by two shards: "
     "shard 0/3 (REPORTS/s0) and shard 1/3 (REPORTS/s1)"),
    ("an incomplete shard", _lose_a_line, ("s0", "s1", "s2"),
     "shard 1/3 (REPORTS/s1) is INCOMPLETE: 1 of "),
    ("a halted shard", _halt, ("s0", "s1", "s2"), "shard 2/3 (REPORTS/s2) is HALTED: "
     "kgbench: the run halts at its spending cap"),
    ("a forced resume", _force_resume, ("s0", "s1", "s2"), "shard 0/3 (REPORTS/s0) was "
     "resumed with --force-resume under another --synthetic than it began with"),
]


@pytest.mark.slow  # the shard set: six sessions in subprocesses, 67 s at load 10 on 2 cores
@pytest.mark.parametrize(("spoil", "runs", "said"), [r[1:] for r in REFUSALS],
                         ids=[r[0] for r in REFUSALS])
def test_a_merge_that_would_mix_what_must_not_be_mixed_is_refused(
        reports: Path, spoil: Callable[[Path], None], runs: tuple[str, ...], said: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    spoil(reports)
    assert _merge(reports, *runs) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    line = captured.err.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith("kgbench: merge refused: ")
    assert said.replace("REPORTS", str(reports)) in line, line
    assert not (reports / "out").exists()


@pytest.mark.slow  # the shard set
def test_allow_incomplete_merges_what_was_banked_and_names_what_is_missing(
        reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lost = json.loads((reports / "s1" / "answers.jsonl").read_text().splitlines()[0])["nodeid"]
    _lose_a_line(reports)
    _halt(reports)
    assert _merge(reports, "s0", "s1", "s2", extra=("--allow-incomplete",)) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE: 1 of " in out and lost in out
    run = load_run(reports / "out")
    assert run.summary.status == "incomplete"
    assert [m["nodeid"] for m in run.missing] == [lost]
    assert run.report is not None and not run.report["complete"]
    assert [m["nodeid"] for m in run.report["missing"]] == [lost]
    whole = json.loads((reports / "whole" / "report.json").read_text())
    assert run.report["counts"]["expected"] == whole["counts"]["expected"]
    assert len(run.records) == whole["counts"]["items"] - 1


@pytest.mark.slow  # the shard set
def test_the_merge_adds_up_the_shards_spending_against_the_whole_cap(
        reports: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i, spent in enumerate((0.05, 0.07, 0.02)):
        meta = json.loads((reports / f"s{i}" / "meta.json").read_text())
        assert meta["settings"]["max_cost"] == pytest.approx(0.1)  # a third of $0.30 each
        (reports / f"s{i}" / "spend.json").write_text(json.dumps({"spent": spent,
                                                                   "reserved": {}}))
    assert _merge(reports, "s0", "s1", "s2") == 0
    assert "$0.1400 spent of the run's --max-cost $0.3" in capsys.readouterr().out
    meta = json.loads((reports / "out" / "meta.json").read_text())
    assert meta["budget"]["spent"] == pytest.approx(0.14)
    assert meta["settings"]["max_cost"] == pytest.approx(0.3)
    assert [s["spent"] for s in meta["shards"]] == [0.05, 0.07, 0.02]
    assert "Spent $0.1400 of the run's --max-cost $0.3" in (
        reports / "out" / "report.md").read_text()
    assert json.loads((reports / "out" / "spend.json").read_text())["spent"] == pytest.approx(
        0.14)


@pytest.mark.slow  # the shard set
def test_the_merged_run_reads_as_the_unsharded_one(reports: Path) -> None:
    assert _merge(reports, "s2", "s1", "s0") == 0
    merged = json.loads((reports / "out" / "report.json").read_text())
    whole = json.loads((reports / "whole" / "report.json").read_text())
    assert _comparable(merged) == _comparable(whole)
    assert _merge(reports, "s0", "s1", "s2") == 4  # the run id is taken now
