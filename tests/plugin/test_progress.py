"""The live progress line: what it counts (items, grades, tokens, dollars, time left), when it
is written, and that -q and --progress 0 keep it off."""

from __future__ import annotations

import re

import pytest

from pytest_kgbench.plugin.progress import Progress, duration, short

PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(letter: str, model: str = "sonnet", elapsed_s: float = 0.0, **tokens: int) -> dict:
    return {"letter": letter, "model": model, "answer": {"tokens": tokens} if tokens else {},
            "elapsed_s": elapsed_s}


def test_the_line_counts_items_grades_tokens_dollars_and_time_left() -> None:
    clock = Clock()
    progress = Progress(30, lambda m: PRICE if m == "sonnet" else None, clock)
    progress.expect(10)
    clock.now += 10  # the first item's own 10 s
    progress.add(_record("C", elapsed_s=10, input=1000, output=200, cache_read=9000))
    clock.now += 10
    progress.add(_record("W", input=500, output=100))
    clock.now += 10
    progress.add(None)  # skipped before it was asked
    line = progress.line()
    assert line.startswith("3/10 items (30%) · C 1 W 1 s 1 · ")
    assert "10.5k in / 300 out tokens" in line
    dollars = (1500 * 3.0 + 300 * 15.0 + 9000 * 0.3) / 1e6
    assert f"${dollars:.2f} so far" in line
    # 30 s since the first item began, for three items: 10 s an item, 7 left
    assert line.endswith("about 1m10s left")


def test_a_long_set_up_gets_a_line_at_the_first_item_and_is_not_an_items_time() -> None:
    """Nothing was written until two items had finished (a first line was due only
    --progress seconds after the first item), and the time left then ignored the first."""
    clock = Clock()
    progress = Progress(30, lambda m: None, clock)  # the run begins: builds, imports
    progress.expect(10)
    clock.now += 120  # two minutes of set-up and the first item, which took 20 s of them
    progress.add(_record("C", elapsed_s=20))
    assert progress.due()  # the first item reports two minutes in: a line now
    line = progress.line()
    # 20 s for the one item since the asking began (the set-up is no item's): 9 left
    assert line == "1/10 items (10%) · C 1 · about 3m00s left", line


def test_an_unpriced_model_makes_the_cost_unknown_never_zero() -> None:
    progress = Progress(30, lambda m: PRICE if m == "sonnet" else None, Clock())
    progress.expect(4)
    progress.add(_record("C", input=100, output=10))
    progress.add(_record("C", model="local", input=100, output=10))
    assert "cost unknown" in progress.line() and "$" not in progress.line()


def test_no_tokens_no_money_part() -> None:  # the gold agent asks no model
    progress = Progress(30, lambda m: PRICE, Clock())
    progress.expect(2)
    progress.add(_record("C"))
    assert "tokens" not in progress.line() and "$" not in progress.line()


def test_a_line_is_due_every_so_often_and_never_after_the_last_item() -> None:
    clock = Clock()
    progress = Progress(30, lambda m: None, clock)
    progress.expect(3)
    assert not progress.due()  # nothing reported yet
    progress.add(_record("C"))
    clock.now += 29
    assert not progress.due()
    clock.now += 1
    assert progress.due()
    progress.line()
    assert not progress.due()  # just written
    clock.now += 31
    progress.add(_record("C"))
    progress.add(_record("C"))
    assert not progress.due()  # all banked: pytest's summary follows
    assert not Progress(0, lambda m: None, clock).due()


def test_under_xdist_each_worker_says_how_many_and_how_long_ago() -> None:
    clock = Clock()
    progress = Progress(30, lambda m: None, clock)
    progress.expect(10)
    progress.add(_record("C"), "gw0")
    assert "gw0" not in progress.line()  # one worker: nothing to tell apart
    for _ in range(3):
        clock.now += 5
        progress.add(_record("C"), "gw1")
    clock.now += 2
    progress.add(_record("W"), "gw10")
    clock.now += 250
    line = progress.line()
    assert line.endswith("gw0 1 (4m27s ago), gw1 3 (4m12s ago), gw10 1 (4m10s ago)"), line
    assert progress.done == 5 and progress.letters == {"C": 4, "W": 1}


def test_counts_read_at_a_glance() -> None:
    assert [short(n) for n in (950, 12_300, 4_100_000)] == ["950", "12.3k", "4.1M"]
    assert [duration(s) for s in (45, 370, 7500)] == ["45s", "6m10s", "2h05m"]


LINE = re.compile(r"kgbench: \d+/\d+ items \(\d+%\) · C \d+( [A-Za-z] \d+)*")
WORKERS = re.compile(r" · gw0 (?P<gw0>\d+) \(\S+ ago\), gw1 (?P<gw1>\d+) \(\S+ ago\)$")


@pytest.mark.slow
def test_the_run_writes_the_line_between_its_results_and_not_under_q(project) -> None:
    p = project()
    # the first two tiers' items (about 40): a line each millisecond is many lines already
    args = ("questions", "--agent", "gold", "--condition", "D1,R1", "-k", "L1 or L2",
            "--progress", "0.001", "-p", "no:randomly")
    loud = p.runpytest_subprocess(*args)
    assert loud.ret == 0
    lines = [x for x in loud.stdout.lines if LINE.match(x)]
    assert len(lines) > 3 and all(LINE.fullmatch(x.split(" · about")[0]) for x in lines)
    # each a line of its own: pytest's letters go on after it, on the next line
    after = loud.stdout.lines[loud.stdout.lines.index(lines[0]) + 1]
    assert after.startswith("questions/credit.yaml C"), after
    quiet = p.runpytest_subprocess(*args, "-q")
    assert quiet.ret == 0 and not LINE.search(quiet.stdout.str())
    off = p.runpytest_subprocess(*args[:-2], "--progress", "0", "-p", "no:randomly")
    assert off.ret == 0 and not LINE.search(off.stdout.str())
    # under pytest-xdist the controller writes it, with each worker's part
    spread = p.runpytest_subprocess(*args, "-n", "2")
    assert spread.ret == 0
    parts = [x for x in spread.stdout.lines if LINE.match(x)]
    # how soon the second worker reports first is up to the machine; what holds on any machine:
    # once both workers have reported, every later line names both, and their counts add up
    both = [i for i, x in enumerate(parts) if WORKERS.search(x)]
    assert both and both == list(range(both[0], len(parts))), parts
    for i in both:
        done = int(parts[i].split()[1].split("/")[0])
        seen = WORKERS.search(parts[i])
        assert seen and int(seen["gw0"]) + int(seen["gw1"]) == done, parts[i]
