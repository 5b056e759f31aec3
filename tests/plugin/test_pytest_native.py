"""pytest's own tools see the benchmark: markers select exactly (-m L3, -m "credit and D1"),
-k R1 is not every first repeat, --junitxml carries the grades, --sample draws a seeded
stratified sample."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from pytest_kgbench.asking.cases import sample_questions


def _ids(result: pytest.RunResult) -> list[str]:
    return [line.split("::", 1)[1] for line in result.outlines
            if line.startswith("questions/credit.yaml::")]


def test_markers_select_exactly_and_are_registered(project) -> None:
    p = project()
    result = p.runpytest("questions", "--collect-only", "-q", "--strict-markers",
                         "-m", "L3 and D1", "--condition", "R1,R10,D1,D2")
    assert result.ret == 0, result.stdout.str()
    ids = _ids(result)
    assert ids and all("[D1-" in i for i in ids)
    from conftest import REPO
    from pytest_kgbench.core.questions import load_questions

    l3 = {q.id for q in load_questions(REPO / "questions" / "credit.yaml").questions
          if q.tier == "L3" and (q.variants is None or "base" in q.variants)}
    assert {i.split("[", 1)[0] for i in ids} == l3
    result = p.runpytest("questions", "--collect-only", "-q", "--strict-markers",
                         "-m", "credit and R1 and gold", "--condition", "R1,R10")
    ids = _ids(result)
    assert ids and all("[R1-gold-rep1]" in i for i in ids)  # R10 is not R1 under -m


def test_a_scaled_variants_marker_is_registered(project) -> None:
    """A size given on the command line (`--variant issuers=45`) is a variant no manifest
    names; its marker is registered all the same: no PytestUnknownMarkWarning, and
    --strict-markers collects it."""
    p = project()
    result = p.runpytest("questions", "--collect-only", "-q", "--strict-markers",
                         "-W", "error::pytest.PytestUnknownMarkWarning",
                         "--variant", "issuers=45", "--condition", "D1", "-k", "Q01")
    assert result.ret == 0, result.stdout.str()
    assert _ids(result) == ["credit-Q01[issuers=45-D1-gold-rep1]"], result.stdout.str()


def test_dash_k_r1_is_the_condition_not_the_first_repeat(project) -> None:
    p = project()
    result = p.runpytest("questions", "--collect-only", "-q", "-k", "R1 and Q01",
                         "--condition", "D1,R1", "--repeats", "2")
    ids = _ids(result)
    assert ids == ["credit-Q01[R1-gold-rep1]", "credit-Q01[R1-gold-rep2]"], ids


def test_junitxml_records_each_items_grade(project, tmp_path) -> None:
    p = project()
    xml = tmp_path / "junit.xml"
    result = p.runpytest("questions", "--agent", "trap", "--condition", "D1", "-k", "Q10 or Q01",
                         f"--junitxml={xml}")
    assert result.ret == 0, result.stdout.str()
    # the terminal summary names who answered and counts the letters, with their legend
    result.stdout.fnmatch_lines(["*agent trap, models trap: C 1 W 1 (C correct, P partial, "
                                 "W wrong,*"])
    cases = ET.parse(xml).getroot().findall(".//testcase")
    assert len(cases) == 2
    props = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in cases}
    q10 = props["credit-Q10[D1-trap-rep1]"]
    assert q10["kgbench.grade"] == "wrong" and q10["kgbench.letter"] == "W"  # the trap misses
    assert q10["kgbench.tier"] == "L3" and q10["kgbench.condition"] == "D1"
    assert q10["kgbench.model"] == "trap" and q10["kgbench.pack"] == "credit"
    assert q10["kgbench.metric.execution"] in ("True", "False")
    q01 = props["credit-Q01[D1-trap-rep1]"]
    assert q01["kgbench.grade"] == "correct" and float(q01["kgbench.score"]) == 1.0
    assert not any(len(v) > 200 for v in q01.values())  # the record itself is not copied


def test_sample_draws_n_questions_per_tier_seeded(project) -> None:
    p = project()
    args = ["questions", "--collect-only", "-q", "--condition", "D1", "--sample", "2"]
    first = _ids(p.runpytest(*args))
    again = _ids(p.runpytest(*args))
    other = _ids(p.runpytest(*args, "--stats-seed", "7"))
    assert first == again and first != other
    from conftest import REPO
    from pytest_kgbench.core.questions import load_questions

    tiers = {q.id: q.tier for q in load_questions(REPO / "questions" / "credit.yaml").questions}
    chosen = [tiers[re.sub(r"\[.*", "", i)] for i in first]
    assert sorted(chosen) == sorted(t for t in set(tiers.values()) for _ in range(2))
    bad = p.runpytest("questions", "--collect-only", "--sample", "0")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--sample*must be at least 1*"])


def test_sample_keeps_a_short_tier_whole() -> None:
    from types import SimpleNamespace

    qs = [SimpleNamespace(pack="p", tier="L1", id=f"q{i}") for i in range(5)] + \
         [SimpleNamespace(pack="p", tier="L4", id="only")]
    keep = sample_questions(qs, 3, seed=1)  # type: ignore[arg-type]
    assert ("p", "only") in keep and len(keep) == 4
    assert keep == sample_questions(list(reversed(qs)), 3, seed=1)  # type: ignore[arg-type]


def test_rerun_asks_again_every_miss_of_the_model(tmp_path) -> None:
    """--kgbench-rerun takes every letter that is the model's own miss -- cut at the output
    limit (M), refused (N), an empty reply (Z) as well as W, P, T -- and none of the rest."""
    import json

    from pytest_kgbench.core.settings import rerun_ids

    run = tmp_path / "reports" / "first"
    run.mkdir(parents=True)
    letters = "CPWTAB DMNZ-".replace(" ", "")
    (run / "answers.jsonl").write_text("".join(
        json.dumps({"nodeid": f"q::{letter}", "letter": letter}) + "\n" for letter in letters))
    assert rerun_ids(tmp_path, "reports", "first") == tuple(
        sorted(f"q::{letter}" for letter in "PWTMNZ"))


def test_rerun_asks_again_what_a_run_got_wrong(project) -> None:
    """--kgbench-rerun RUN: a new run of exactly the items RUN graded W, P or T (the trap gets
    the L3 questions wrong and the L1 ones right)."""
    p = project()
    first = p.runpytest("questions", "--agent", "trap", "--condition", "D1",
                        "-k", "Q01 or Q10 or Q13", "--run-id", "first")
    assert first.ret == 0, first.stdout.str()
    again = p.runpytest("questions", "--agent", "trap", "--condition", "D1",
                        "--kgbench-rerun", "first", "--run-id", "again")
    assert again.ret == 0, again.stdout.str()
    from pytest_kgbench.core.record import read_answers

    def graded(run: str) -> dict[str, str]:
        return {r["nodeid"]: r["letter"]
                for r in read_answers(p.path / "reports" / run / "answers.jsonl")}

    wrong = {n for n, letter in graded("first").items() if letter in ("W", "P", "T")}
    assert wrong and wrong != set(graded("first"))
    assert set(graded("again")) == wrong
    bad = p.runpytest("questions", "--collect-only", "--kgbench-rerun", "nosuch")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def test_settings_cross_to_workers_with_every_optional_value_unset() -> None:
    """What the controller sends an xdist worker (Settings.to_dict as JSON) reads back the same,
    None-valued tuples (no --kgbench-rerun) included: it broke every -n run once."""
    import json

    from pytest_kgbench.core.settings import Settings

    for values in ({}, {"rerun": ("a::b",), "sample": 3, "pack_names": ("credit",)},
                   {"base_url": "http://127.0.0.1:1/v1", "temperature": 0.0, "top_p": 0.5,
                    "max_cost": 1.25, "response_cache": False, "responses_dir": "/x"},
                   {"batch": True, "batch_poll": 0.5, "provider": "bedrock"},
                   {"concurrency": 8, "rpm": 120.0, "tpm": 40000.0}):
        settings = Settings.at(".", **values)
        assert Settings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings


def test_a_rerun_under_xdist(project) -> None:
    p = project()
    first = p.runpytest("questions", "--agent", "trap", "--condition", "D1", "-k", "Q01 or Q10",
                        "--run-id", "first")
    assert first.ret == 0, first.stdout.str()
    again = p.runpytest("questions", "-n", "2", "--agent", "trap", "--condition", "D1",
                        "--kgbench-rerun", "first", "--run-id", "again", "-p", "xdist")
    assert again.ret == 0, again.stdout.str()
    again.assert_outcomes(passed=1)  # Q10, which the trap gets wrong


def test_estimate_prints_its_table_without_the_collected_items_tree(project, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # no call could be made anyway
    p = project()
    result = p.runpytest("questions", "--model", "sonnet", "--estimate", "--condition", "R1",
                         "-k", "Q01 or Q10")  # no -q
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*kgbench estimate*", "*2 selected item(s), asked apart*",
                                 "R1 *claude-sonnet-5-5 * 2 *$*"])
    out = result.stdout.str()
    assert "<Dir " not in out and "<QuestionFile" not in out and "credit-Q01[" not in out
    assert "questions/credit.yaml: 2" in out  # the count per file stays


def _fresh_cache(p: pytest.Pytester, cache) -> None:
    ini = p.path / "tox.ini"  # what pytester.makeini writes
    ini.write_text(re.sub(r"kgbench_cache = .*", f"kgbench_cache = {cache}", ini.read_text()))


@pytest.mark.parametrize("workers", [[], ["-n", "2", "-p", "xdist"]])
def test_a_variant_being_built_is_announced_with_its_time(project, tmp_path, workers) -> None:
    """The controller builds what the selected items ask about before the first runs, saying
    so (under -n too, where the items run on workers); a cached variant says nothing."""
    p = project()
    _fresh_cache(p, tmp_path / "cache")
    args = ["questions", "--condition", "D1", "-k", "Q01", *workers]
    first = p.runpytest(*args)
    assert first.ret == 0, first.stdout.str()
    first.stdout.fnmatch_lines(["kgbench: building credit/base (seed *)…",
                                "kgbench: built credit/base in *.* s"])
    out = first.stdout.str()
    assert "credit/chains" not in out and "credit/large" not in out  # not selected: not built
    assert out.index("kgbench: built credit/base") < out.index("[100%]")  # before the items
    again = p.runpytest(*args)
    assert again.ret == 0 and "kgbench: build" not in again.stdout.str()


def test_built_by_reads_the_variant_from_the_node_id(tmp_path) -> None:
    from conftest import REPO
    from pytest_kgbench.asking.cases import built_by
    from pytest_kgbench.core.settings import Settings

    settings = Settings.at(REPO)
    ids = ["questions/credit.yaml::credit-Q01[D1-gold-rep1]",
           "questions/credit.yaml::credit-Q20[chains-D4-claude-x-rep2]",
           "questions/research.yaml::research-Q01[large-R1-gold-rep1]",
           "tests/test_x.py::test_y[large-1]"]
    assert built_by(ids, settings) == {("credit", "base"), ("credit", "chains"),
                                       ("research", "large")}
