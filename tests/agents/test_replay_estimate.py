"""The replay agent and the cost estimate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import credit_on_base
from pytest_kgbench.core.pricing import Estimate, dollars, usage_of

REPO = Path(__file__).resolve().parents[2]


def test_replay_regrades_a_stored_run_without_any_model(project) -> None:
    p = project()
    first = p.runpytest("questions", "--agent", "trap", "--condition", "R1,D1", "-k", "Q0",
                        "--run-id", "original", "--ask", "together")
    first.assert_outcomes(passed=18)
    # the stored run's conditions (and models, variants, repeats) are asked again by default
    again = p.runpytest("questions", "--agent", "replay", "--replay-run", "original",
                        "-k", "Q0", "--run-id", "replayed")
    again.assert_outcomes(passed=18)
    a = json.loads((p.path / "reports" / "original" / "report.json").read_text())
    b = json.loads((p.path / "reports" / "replayed" / "report.json").read_text())
    assert b["settings"]["models"] == ["trap"]
    grades = lambda r: sorted((i["question"], i["condition"], i["grade"]) for i in r["items"])  # noqa: E731
    assert grades(a) == grades(b)
    assert b["settings"]["condition_ids"] == ["R1", "D1"]
    # an item the stored run never asked is not asked (it would be graded W): deselected
    missing = p.runpytest("questions", "--agent", "replay", "--replay-run", "original",
                          "--condition", "D4", "-k", "Q01", "--run-id", "gap")
    missing.assert_outcomes(deselected=credit_on_base())
    assert not (p.path / "reports" / "gap" / "answers.jsonl").exists()


def test_costs_with_and_without_the_cache() -> None:
    price = {"input": 2.0, "output": 10.0, "cache_write": 2.5, "cache_read": 0.2}
    tokens = {"input": 1_000_000, "output": 100_000, "cache_read": 2_000_000, "cache_write": 0}
    cost = dollars(tokens, price)
    assert cost == {"billed": 2.0 + 1.0 + 0.4, "without_cache": 6.0 + 1.0}
    assert dollars(tokens, None) is None
    assert usage_of([{"answer": {"tokens": {"input": 3, "output": 4}}}, {"answer": {}}]) == \
        {"input": 3, "output": 4, "cache_read": 0, "cache_write": 0}


def test_the_estimate_caches_each_context_once_and_grows_querying_rounds() -> None:
    est = Estimate("D1", "m")
    for _ in range(3):
        est.add(mode="querying", context="x" * 4000, question="q" * 40, system="s" * 40)
    # the data block: written once, read in the 11 other rounds; each later round also reads
    # the conversation before it (20 tokens of prompt, then 450 a round) and writes its 450
    assert est.items == 3 and est.input == 3 * 20
    assert est.cache_write == 1000 + 3 * 3 * 450
    assert est.cache_read == 1000 * 11 + 3 * (3 * 20 + (0 + 1 + 2) * 450)
    reading = Estimate("R1", "m")
    reading.add(mode="reading", context="x" * 4000, question="q", system="s")
    assert reading.cache_write == 1000 and reading.cache_read == 0


def test_no_call_is_estimated_past_max_tokens() -> None:
    """--max-tokens 100: a reading answer makes at most 100 tokens, not the 400 assumed, and
    each querying round at most 100 of its 150 (a local model's time follows its output)."""
    free, capped = Estimate("R1", "m"), Estimate("R1", "m", max_output=100)
    for est in (free, capped):
        est.add(mode="reading", context="x" * 4000, question="q", system="s")
    assert (free.output, capped.output) == (400, 100)
    free, capped = Estimate("D1", "m"), Estimate("D1", "m", max_output=100)
    for est in (free, capped):
        est.add(mode="querying", context="x" * 4000, question="q", system="s")
    assert (free.output, capped.output) == (4 * 150 + 400, 4 * 100 + 100)
    assert capped.cache_write == 1000 + 3 * (300 + 100)  # each round's step is its tool
    #                                                     result and the capped output
    two = Estimate("D1", "m", max_rounds=2)  # --max-rounds 2: not the 4 rounds assumed
    two.add(mode="querying", context="x" * 4000, question="q", system="s")
    assert two.output == 2 * 150 + 400 and two.cache_write == 1000 + 450


def test_a_together_session_counts_its_context_once_and_all_its_questions() -> None:
    apart, together = Estimate("R1", "m"), Estimate("R1", "m")
    for _ in range(5):
        apart.add(mode="reading", context="x" * 4000, question="q" * 40, system="s")
    together.add(mode="reading", context="x" * 4000, question="q" * 200, system="s",
                 questions=5)
    assert together.items == apart.items == 5
    assert together.cache_write == 1000 and together.cache_read == 0 < apart.cache_read
    querying = Estimate("D1", "m")
    querying.add(mode="querying", context="x" * 4000, question="q" * 200, system="s",
                 questions=5)
    assert querying.cache_write == 1000 + 19 * 450  # 20 rounds in one conversation


def credit_base_questions() -> list:
    from pytest_kgbench.core.questions import load_questions

    return [q for q in load_questions(REPO / "questions" / "credit.yaml").questions
            if q.variants is None or "base" in q.variants]


def test_kgbench_estimate_prints_a_table_per_condition() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest_kgbench.cli", "estimate", "--model",
                           "sonnet", "--condition", "R1,D1", "--repeats", "2", "--pack", "credit",
                           "--root", str(REPO)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert sorted(rows) == ["D1", "R1", "total"]
    asked = {mode: sum(mode in q.modes for q in credit_base_questions())
             for mode in ("reading", "querying")}
    n = asked["reading"] + asked["querying"]
    for cid, mode in (("R1", "reading"), ("D1", "querying")):
        _, model_id, items, written, cached, output, cost, uncached, batch = rows[cid]
        assert model_id == "claude-sonnet-5-5" and int(items) == 2 * asked[mode]
        # --batch takes the single-turn items at the batch price (half); a tool loop never
        assert (batch == "-" if mode == "querying" else
                abs(float(batch.lstrip("$")) - float(cost.lstrip("$")) / 2) <= 0.006)
        if mode == "reading":  # every item after the first reads the data block from cache
            assert int(cached.replace(",", "")) > int(written.replace(",", "")) > 0
        else:  # D1's data block is shorter than Sonnet's minimum cacheable prefix (1,024
            # tokens): never a cache hit on it, only on the tool loop's longer rolling prefix
            assert int(cached.replace(",", "")) > 0 and int(written.replace(",", "")) > 0
        assert 0 < float(cost.lstrip("$")) < float(uncached.lstrip("$"))
    total = rows["total"]
    assert int(total[1]) == 2 * n
    assert abs(float(total[2].lstrip("$")) - sum(float(rows[c][6].lstrip("$"))
                                                 for c in ("R1", "D1"))) <= 0.011


def test_pytest_estimate_prices_the_selected_items_and_asks_nothing(project, monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # no call could be made anyway
    p = project()
    apart = p.runpytest("questions", "--model", "sonnet", "--estimate", "--condition", "R1,D1",
                        "-k", "L3", "--repeats", "2")
    assert apart.ret == 0
    n = credit_on_base("L3")
    apart.stdout.fnmatch_lines(["*kgbench estimate*", f"*{4 * n} selected item(s), asked apart*",
                                f"R1 *claude-sonnet-5-5 * {2 * n} *$*",
                                f"D1 *claude-sonnet-5-5 * {2 * n} *$*", f"total * {4 * n} *"])
    assert not (p.path / "reports").exists()  # nothing ran, so no run folder
    together = p.runpytest("questions", "--model", "sonnet", "--estimate", "--condition", "R1",
                           "-k", "L3", "--repeats", "2", "--ask", "together")
    together.stdout.fnmatch_lines(["*asked together*", f"R1 *claude-sonnet-5-5 * {2 * n} *$*"])

    def cost(result) -> float:
        row = next(x for x in result.stdout.lines if x.startswith("R1 "))
        return float(row.split()[-3].lstrip("$"))

    # two sessions of the n questions read the data block twice, apart 2n items read it 2n times
    assert cost(together) < cost(apart)


def test_replay_and_resume_keep_the_stored_runs_settings(project) -> None:
    p = project()
    n = 2 * credit_on_base("L3")  # R1 and D1
    p.runpytest("questions", "--agent", "gold", "--dataset-seed", "7", "--condition", "R1,D1",
                "--ask", "together", "-k", "L3", "--run-id", "seed7").assert_outcomes(passed=n)
    # a replay regrades against the data the stored run was asked about (seed 7), together
    again = p.runpytest("questions", "--agent", "replay", "--replay-run", "seed7", "-k", "L3",
                        "--run-id", "replay7")
    again.assert_outcomes(passed=n)
    replayed = json.loads((p.path / "reports" / "replay7" / "report.json").read_text())
    assert replayed["settings"]["dataset_seed"] == 7
    assert {i["grade"] for i in replayed["items"]} == {"correct"}
    assert "asked together" in (p.path / "reports" / "replay7" / "report.md").read_text()
    # a resume continues as the run began: its agent, conditions, seed and way of asking
    # (a wider -k than it began with only when forced: its selection is part of the run)
    more = p.runpytest("questions", "--resume", "seed7", "-k", "L3 or Q01", "--force-resume")
    assert more.ret == 0 and more.parseoutcomes()["passed"] == 2  # the L3 items were banked
    records = [json.loads(x) for x in
               (p.path / "reports" / "seed7" / "answers.jsonl").read_text().splitlines()]
    assert len(records) == n + 2 and {r["agent"] for r in records} == {"gold"}
    late = [r for r in records if r["question"] == "credit-Q01"]
    assert {r["condition"] for r in late} == {"R1", "D1"}
    assert {r["ask"] for r in late} == {"together"} and {r["dataset"]["seed"] for r in late} == {7}
