"""--kgbench-shard I/N (run/shards.py): the option's forms, the cut (every item of a question on
one shard, shards balanced by estimated cost, the same cut in every process), the budgets
split, and what a shard refuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.run.shards import deal, loads, parse_shard, resolve, split_limits

SUBSET = "Q01 or Q06 or Q10 or Q13 or Q20 or Q27 or Q30"


@pytest.mark.parametrize(("text", "budget", "index", "count", "share"), [
    ("0/3", None, 0, 3, 1 / 3), (" 2 / 3 ", None, 2, 3, 1 / 3), ("0/1", None, 0, 1, 1.0),
    ("0/3", "2,1,1", 0, 3, 0.5), ("2/3", "2,1,1", 2, 3, 0.25), ("1/2", "0.5,1.5", 1, 2, 0.75),
    ("1/3", "1/2,1/4,1/4", 1, 3, 0.25)])
def test_the_shard_and_its_share(text, budget, index, count, share) -> None:
    shard = parse_shard(text, budget)
    assert (shard.index, shard.count) == (index, count)
    assert shard.share == pytest.approx(share)


@pytest.mark.parametrize(("text", "budget", "said"), [
    ("3/3", None, "--kgbench-shard: '3/3': shards are numbered 0 to 2"),
    ("1", None, "--kgbench-shard: '1' is not I/N"),
    ("-1/3", None, "--kgbench-shard: '-1/3' is not I/N"),
    ("0/0", None, "--kgbench-shard: '0/0': N must be at least 1"),
    ("0/3", "1,1", "--kgbench-shard-budget: '1,1' names 2 weight(s) for 3 shards"),
    ("0/3", "a,b,c", "--kgbench-shard-budget: 'a,b,c' is not 3 comma-separated weights"),
    ("0/2", "0,1", "--kgbench-shard-budget: '0,1': every weight must be at least 0, and "
                   "shard 0's more than 0")])
def test_a_malformed_shard_names_its_option(text, budget, said) -> None:
    with pytest.raises(InputError) as exc:
        parse_shard(text, budget)
    assert str(exc.value).startswith(said)


def test_questions_are_dealt_heaviest_first_to_the_lightest_shard() -> None:
    costs = {"p/a": 10, "p/b": 9, "p/c": 8, "p/d": 3, "p/e": 3, "p/f": 1}
    dealt = deal(costs, 3)
    assert set(dealt) == set(costs)
    # 10, 9, 8 to 0, 1, 2; a 3 to shard 2 (8), a 3 to shard 1 (9), the 1 to shard 0 (10)
    assert dealt == {"p/a": 0, "p/b": 1, "p/c": 2, "p/d": 2, "p/e": 1, "p/f": 0}
    assert loads(costs, dealt, 3) == [11, 12, 11]
    # by cost, not by count: one heavy question is a shard's whole share
    assert deal({"p/big": 100, "p/x": 1, "p/y": 1, "p/z": 1}, 2) == {
        "p/big": 0, "p/x": 1, "p/y": 1, "p/z": 1}


def test_the_deal_is_the_same_in_any_order_and_within_one_question_of_even() -> None:
    import random

    rng = random.Random(7)
    costs = {f"pack/q{i}": rng.randrange(100, 5000) for i in range(300)}
    shuffled = dict(sorted(costs.items(), key=lambda kv: rng.random()))
    for count in (1, 2, 3, 7):
        dealt = deal(costs, count)
        assert dealt == deal(shuffled, count)
        got = loads(costs, dealt, count)
        assert sum(got) == sum(costs.values())
        assert max(got) - min(got) <= max(costs.values())


def test_the_budgets_are_split_and_the_rest_kept() -> None:
    settings = Settings.at(REPO, max_cost=3.0, rpm=60.0, tpm=None, query_timeout=9.0)
    mine = split_limits(settings, 0.25)
    assert (mine.limits.max_cost, mine.limits.rpm, mine.limits.tpm) == (0.75, 15.0, None)
    assert mine.limits.query_timeout == 9.0
    assert split_limits(Settings.at(REPO), 0.5) == Settings.at(REPO)


def test_a_shard_resumes_as_it_was_cut_and_refuses_what_it_cannot_be() -> None:
    stored = {"index": 1, "count": 3, "share": 0.5}
    shard = resolve(None, stored, run_id="s1", resume=True, distributed=False, together=False)
    assert shard is not None and (shard.index, shard.count, shard.share) == (1, 3, 0.5)
    assert resolve(None, None, run_id="r", resume=False, distributed=True,
                   together=True) is None
    cases = [
        (parse_shard("0/3"), stored, True, False, False, "run 's1' is shard 1/3, not 0/3"),
        (parse_shard("0/3"), None, True, False, False, "run 's1' was not cut into shards"),
        (parse_shard("0/3"), None, False, True, False, "not a pytest-xdist session"),
        (parse_shard("0/3"), None, False, False, True, "--ask together asks a session's"),
    ]
    for given, was, resume, distributed, together, said in cases:
        with pytest.raises(InputError, match=re.escape(said)):
            resolve(given, was, run_id="s1", resume=resume, distributed=distributed,
                    together=together)


def _collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("questions/")]


def test_the_shards_of_a_selection_are_its_items_each_question_whole_on_one(project) -> None:
    p = project()
    args = ("questions", "--collect-only", "-q", "-p", "no:randomly", "--condition",
            "R1,D1,D2", "--repeats", "2", "-k", SUBSET)
    whole = _collected(p.runpytest(*args))
    assert len(whole) > 20
    shards = [_collected(p.runpytest(*args, "--kgbench-shard", f"{i}/3")) for i in range(3)]
    assert sorted(n for s in shards for n in s) == sorted(whole)  # each item once
    assert all(shards)
    owner: dict[str, int] = {}
    for i, nodeids in enumerate(shards):
        for nodeid in nodeids:
            question = nodeid.split("::")[1].split("[")[0]
            assert owner.setdefault(question, i) == i, f"{question} is cut across shards"
    # the same cut again (nothing of it depends on the process)
    assert _collected(p.runpytest(*args, "--kgbench-shard", "1/3")) == shards[1]


def test_a_shard_keeps_to_its_share_and_records_what_it_was_cut_from(project) -> None:
    p = project()
    result = p.runpytest("questions", "-p", "no:randomly", "-k", SUBSET, "--condition", "R1",
                         "--run-id", "s1", "--kgbench-shard", "1/2", "--max-cost", "3",
                         "--rpm", "60", "--tpm", "9000", "--kgbench-shard-budget", "1,2")
    assert result.ret == 0, result.stdout.str()[-2000:]
    run = p.path / "reports" / "s1"
    meta = json.loads((run / "meta.json").read_text())
    cut = json.loads((run / "shard.json").read_text())
    assert (meta["settings"]["max_cost"], meta["settings"]["rpm"],
            meta["settings"]["tpm"]) == pytest.approx((2.0, 40.0, 6000.0))
    assert cut["budget"] == {"max_cost": 3.0, "rpm": 60.0, "tpm": 9000.0}
    assert meta["shard"]["index"] == 1 and meta["shard"]["count"] == 2
    assert meta["shard"]["selection_sha256"] == cut["selection_sha256"]
    assert set(meta["expected"]) < set(cut["selection"])
    assert {cut["shards"][f"credit/{n.split('::')[1].split('[')[0]}"]
            for n in meta["expected"]} == {1}
    assert len(cut["selection"]) == 7  # R1, one repeat
    result.stdout.fnmatch_lines(["*shard 1/2 of 7 selected item(s)*kgbench merge*"])


@pytest.mark.parametrize(("args", "said"), [
    (("--kgbench-shard", "2/2"), "ERROR: --kgbench-shard: '2/2': shards are numbered 0 to 1"),
    (("--kgbench-shard-budget", "1,1"), "ERROR: --kgbench-shard-budget: shares a sharded "
                                        "run's budgets: it needs --kgbench-shard I/N"),
    (("--kgbench-shard", "0/2", "-n", "2"), "ERROR: --kgbench-shard: a shard is one process"),
    (("--kgbench-shard", "0/2", "--ask", "together"), "ERROR: --kgbench-shard: --ask together"),
])
def test_a_shard_refused_is_one_line_and_no_run_folder(project, args, said) -> None:
    p = project()
    result = p.runpytest_subprocess("questions", "-k", SUBSET, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1 and err.startswith(said), err
    assert not Path(p.path / "reports").exists()


def test_a_shard_dealt_no_item_still_writes_its_folder_which_the_merge_needs(
        project, capsys) -> None:
    from pytest_kgbench.cli import main

    p = project()
    one = ("questions", "-p", "no:randomly", "-k", "Q06 and not Q06[0-9]", "--condition", "R1")
    empty = p.runpytest(*one, "--run-id", "e1", "--kgbench-shard", "1/2")
    assert empty.ret == 0, empty.stdout.str()[-2000:]
    empty.stdout.fnmatch_lines(["*shard 1/2 was dealt no item (more shards than questions)*"])
    meta = json.loads((p.path / "reports" / "e1" / "meta.json").read_text())
    assert meta["expected"] == [] and meta["shard"]["items_selected"] == 1
    assert p.runpytest(*one, "--run-id", "e0", "--kgbench-shard", "0/2").ret == 0
    reports = str(p.path / "reports")
    capsys.readouterr()
    assert main(["merge", "e1", "--run-id", "both", "--reports", reports]) == 4
    assert capsys.readouterr().err.strip() == ("kgbench: merge refused: shard 0/2 is missing: "
                                               "give the run folder of every shard, 0 to 1")
    shard = p.path / "reports" / "e0" / "shard.json"
    cut = json.loads(shard.read_text())
    shard.write_text(json.dumps({**cut, "index": "0"}))
    assert main(["merge", "e1", "e0", "--run-id", "both", "--reports", reports]) == 4
    assert capsys.readouterr().err.strip() == (f"kgbench: merge refused: {shard}: field "
                                               "'index' is not a whole number")
    shard.write_text(json.dumps(cut))
    assert main(["merge", "e1", "e0", "--run-id", "both", "--reports", reports]) == 0
    assert "1 item(s) banked, 0 skipped, 0 missing" in capsys.readouterr().out
    assert not (p.path / "reports" / "both" / "shard.json").exists()  # a run, not a shard
