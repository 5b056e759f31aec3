"""Statistics end to end: the synthetic agent, --ablation, a report a reader can recompute with
scipy, rescore, compare and power."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import untimed
from pytest_kgbench.agents.reference.synthetic import draw, gets_gold, parse_probabilities
from pytest_kgbench.analysis.power import simulate
from pytest_kgbench.core.errors import InputError, KgbenchError
from pytest_kgbench.run.rescore import compare_runs, rescore

ARGS = ["questions", "--agent", "synthetic", "--synthetic", "D1=0.3,D2=0.7,D3=0.9",
        "--condition", "D1,D2,D3", "--repeats", "2", "-p", "no:cacheprovider"]


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory, kg_cache):
    """One synthetic ablation run (serial) in its own project, shared by the tests below."""
    import shutil
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("synthetic")
    repo = Path(__file__).resolve().parents[2]
    (root / "questions").mkdir()
    shutil.copy(repo / "questions" / "credit.yaml", root / "questions" / "credit.yaml")
    (root / "pytest.ini").write_text(
        f"[pytest]\nkgbench_datasets = {repo / 'datasets'}\n"
        f"kgbench_ontology = {repo / 'ontology'}\n"
        f"kgbench_cache = {kg_cache}\n")
    cmd = [sys.executable, "-m", "pytest", *ARGS, "--ablation", "--run-id", "syn", "-q"]
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


def _report(root: Path, run: str = "syn") -> dict:
    return json.loads((root / "reports" / run / "report.json").read_text())


def test_synthetic_draws_are_seeded_and_labelled(synthetic_run) -> None:
    assert draw(1, "q", "D1", "m", 1) == draw(1, "q", "D1", "m", 1)
    assert draw(1, "q", "D1", "m", 1) != draw(2, "q", "D1", "m", 1)
    assert parse_probabilities("D1=0.2, *=0.9") == {"*": 0.9, "D1": 0.2}
    with pytest.raises(InputError, match="CONDITION=PROBABILITY"):
        parse_probabilities("D1=2")
    report = _report(synthetic_run)
    assert report["synthetic"] is True
    assert any("SIMULATED" in n for n in report["not_measured"])
    md = (synthetic_run / "reports" / "syn" / "report.md").read_text()
    assert "SIMULATED ANSWERS" in md
    html = (synthetic_run / "reports" / "syn" / "report.html").read_text()
    assert "SIMULATED ANSWERS" in html and html.count("<svg") >= 3


@pytest.fixture(scope="module")
def trap_grades(synthetic_run) -> dict[tuple[str, str], str]:
    """The trap agent's grade of each L3 question under each condition of the synthetic run, from
    a run of its own in the same project: the grade a synthetic item that draws the trap gets."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pytest", "questions", "--agent", "trap", "--condition",
           "D1,D2,D3", "--repeats", "1", "-p", "no:cacheprovider", "--run-id", "trap", "-q"]
    done = subprocess.run(cmd, cwd=synthetic_run, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return {(i["question"], i["condition"]): i["grade"]
            for i in _report(synthetic_run, "trap")["items"] if i["tier"] == "L3"}


def test_synthetic_answers_follow_the_draw(synthetic_run, trap_grades) -> None:
    """An item that draws gold is correct; one that draws the trap is graded as the trap agent's
    answer is: wrong where the naive query misreads the raw tables, and correct where the store
    already applies the definitions it misses (D3's executed tables: a trap query that runs
    there and counts the issuers table is right). Most traps are wrong under every condition."""
    probs = parse_probabilities("D1=0.3,D2=0.7,D3=0.9")
    drew_trap = 0
    for item in _report(synthetic_run)["items"]:
        if item["tier"] != "L3":
            continue
        gold = gets_gold(20261129, probs, item["question"], item["condition"], item["model"],
                         item["repeat"])
        expected = "correct" if gold else trap_grades[(item["question"], item["condition"])]
        drew_trap += not gold
        assert item["grade"] == expected, item["nodeid"]
    assert drew_trap >= 20
    assert all(g != "correct" for (_, c), g in trap_grades.items() if c != "D3"), \
        "under D1 and D2 (the raw tables) every L3 trap misses"


def test_the_report_can_be_recomputed_from_its_own_items_with_scipy(synthetic_run) -> None:
    """A reader's check: every figure of report.json from its items, with scipy directly."""
    import numpy as np
    from scipy.stats import binomtest, bootstrap

    report = _report(synthetic_run)
    seed = report["statistics"]["seed"]
    by_arm: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for item in report["items"]:
        key = f"{item['pack']}/{item['variant']}/{item['question']}"
        if item["score"] is not None:
            by_arm[(item["condition"], item["tier"])][key].append(item["score"])
            by_arm[(item["condition"], "all")][key].append(item["score"])

    def means(cond: str, tier: str) -> dict[str, float]:
        return {q: float(np.mean(v)) for q, v in by_arm[(cond, tier)].items()}

    for cond, summary in report["conditions"].items():
        m = means(cond, "all")
        assert summary["accuracy"] == pytest.approx(np.mean(list(m.values())), abs=1e-6)
        for tier, t in summary["by_tier"].items():
            tm = means(cond, tier)
            values = np.array([tm[q] for q in sorted(tm)])
            assert t["accuracy"] == pytest.approx(values.mean(), abs=1e-6)
            passes = int((values > 0.5).sum())
            assert t["passes"] == passes
            ci = binomtest(passes, len(values)).proportion_ci(method="wilson")
            assert t["pass_ci95"] == pytest.approx([ci.low, ci.high], abs=1e-6)
            if len(set(values)) > 1:
                boot = bootstrap((values,), np.mean, method="percentile", n_resamples=9999,
                                 rng=np.random.default_rng(seed), vectorized=True, axis=0)
                assert t["ci95"] == pytest.approx([boot.confidence_interval.low,
                                                   boot.confidence_interval.high], abs=1e-6)
    comps = report["comparisons"]
    assert comps and {(c["a"], c["b"]) for c in comps} == {("D1", "D2"), ("D1", "D3")}
    raw = []
    for c in comps:
        a, b = means(c["a"], c["tier"]), means(c["b"], c["tier"])
        qs = sorted(set(a) & set(b))
        diff = np.mean([b[q] - a[q] for q in qs])
        assert c["diff"] == pytest.approx(diff, abs=1e-6)
        a_only = sum(a[q] > 0.5 >= b[q] for q in qs)
        b_only = sum(b[q] > 0.5 >= a[q] for q in qs)
        assert c["discordant"] == [a_only, b_only]
        p = binomtest(a_only, a_only + b_only, 0.5).pvalue if a_only + b_only else 1.0
        assert c["mcnemar_p"] == pytest.approx(p, abs=1e-6)
        raw.append(p)
    order = sorted(range(len(raw)), key=lambda i: raw[i])
    running, holm = 0.0, [0.0] * len(raw)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(raw) - rank) * raw[i]))
        holm[i] = running
    assert [c["holm_p"] for c in comps] == pytest.approx(holm, abs=1e-6)
    l3 = next(c for c in comps if c["b"] == "D3" and c["tier"] == "L3")
    assert l3["diff"] > 0.3 and l3["discordant"][1] > l3["discordant"][0]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [("-n", "2"), ("--tx", "2*popen", "--dist", "load")],
                         ids=["n2", "tx-2-popen"])
def test_xdist_gives_identical_grades_and_statistics(synthetic_run, workers) -> None:
    """Two workers (-n 2), or two gateways named as for other hosts (--tx 2*popen: the
    multi-host form, here on one machine), give the serial run's grades and statistics."""
    import subprocess
    import sys

    run_id = "par-" + workers[0].strip("-")
    cmd = [sys.executable, "-m", "pytest", *ARGS, "--ablation", "--run-id", run_id, *workers]
    done = subprocess.run(cmd, cwd=synthetic_run, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "created: 2/2 workers" in done.stdout  # really two processes
    serial, parallel = _report(synthetic_run), _report(synthetic_run, run_id)
    strip = lambda items: sorted(({k: v for k, v in i.items() if k not in ("elapsed_s",)}  # noqa: E731
                                  for i in items), key=lambda i: i["nodeid"])
    assert strip(serial["items"]) == strip(parallel["items"])
    assert untimed(serial["conditions"]) == untimed(parallel["conditions"])
    assert serial["comparisons"] == parallel["comparisons"]


@pytest.mark.slow
def test_rescore_reproduces_identical_grades_and_never_overwrites(synthetic_run) -> None:
    run = synthetic_run / "reports" / "syn"
    before = json.loads((run / "grades.json").read_text())
    result = rescore(run, stamp="t1")
    assert result.moved == [] and result.changed_questions == []
    after = json.loads((run / "grades-t1.json").read_text())
    assert after == before
    assert "Nothing: every grade is as it was" in (run / "report-t1.md").read_text()
    assert json.loads((run / "grades.json").read_text()) == before
    with pytest.raises(KgbenchError, match="never writes over"):
        rescore(run, stamp="t1")


def test_rescore_reruns_stored_queries_instead_of_trusting_them(synthetic_run, tmp_path) -> None:
    import shutil

    run = tmp_path / "tampered"
    shutil.copytree(synthetic_run / "reports" / "syn", run)
    lines = (run / "answers.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["answer"]["queries"][0]["rows"] = [["tampered"]]
    rec["grade"] = "partial"  # the stored grade disagrees with what its answer deserves
    lines[0] = json.dumps(rec)
    (run / "answers.jsonl").write_text("\n".join(lines) + "\n")
    result = rescore(run, stamp="t2")
    regraded = next(r for r in result.records if r["nodeid"] == rec["nodeid"])
    assert regraded["answer"]["queries"][0]["rows"] != [["tampered"]]
    assert [m[0] for m in result.moved] == [rec["nodeid"]]


def test_compare_refuses_different_question_sets_unless_told(synthetic_run) -> None:
    a = _report(synthetic_run)
    b = json.loads(json.dumps(a))
    b["run_id"] = "other"
    same = compare_runs(a, b, seed=1)
    assert same and all(c.diff == 0 and c.discordant == (0, 0) for c in same)
    b["fingerprint"]["questions_sha256"] = "0" * 64
    with pytest.raises(KgbenchError, match="different question sets"):
        compare_runs(a, b, seed=1)
    assert compare_runs(a, b, seed=1, force=True)


def test_power_grows_with_the_effect_and_is_near_alpha_without_one() -> None:
    results = [simulate(20, baseline=0.5, effect=e, repeats=3, simulations=400, seed=3)
               for e in (0.0, 0.2, 0.4)]
    probs = [r.probability for r in results]
    assert probs[0] <= 0.08
    assert probs[0] < probs[1] < probs[2]
    assert probs[2] > 0.5


def test_power_pools_the_questions_of_several_packs(capsys) -> None:
    """`kgbench power --pack credit,research` simulates over both packs' questions of the tier:
    its n is the sum of the packs' n, and its detection probability is what simulate gives for
    that n."""
    import re

    from pytest_kgbench.cli import main

    repo = Path(__file__).resolve().parents[2]
    common = ["--tier", "L3", "--effect", "0.15", "--simulations", "200", "--root", str(repo),
              "--datasets", str(repo / "datasets"), "--ontology", str(repo / "ontology")]
    counts = {}
    for packs in ("credit", "research", "credit,research"):
        assert main(["power", "--pack", packs, *common]) == 0
        out = capsys.readouterr().out
        counts[packs] = int(re.search(r"L3: (\d+) questions", out).group(1))
        probability = float(out.strip().splitlines()[-1].split()[1])
    assert counts["credit,research"] == counts["credit"] + counts["research"]
    pooled = simulate(counts["credit,research"], baseline=0.5, effect=0.15, repeats=3,
                      simulations=200, seed=20261129)
    assert probability == pytest.approx(pooled.probability, abs=1e-9)
    assert main(["power", "--pack", "credit,research", "--condition", "D1", "D3", *common]) != 0
    assert "--condition takes one pack" in capsys.readouterr().err
