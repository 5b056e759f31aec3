"""Tests for pytest_kgbench.analysis.stats, checked against the definitions."""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from pytest_kgbench.analysis import stats
from pytest_kgbench.analysis.stats import (
    PASS_THRESHOLD,
    Comparison,
    Estimate,
    accuracy,
    compare,
    holm,
    holm_adjust,
    mcnemar_exact,
    min_discordant_for_significance,
    question_means,
    wilson,
)

FAST = 999
SETTINGS = settings(max_examples=50, deadline=None)

item = st.sampled_from([0.0, 0.5, 1.0])
repeats = st.lists(item, min_size=1, max_size=5)
score_dicts = st.dictionaries(
    st.text(alphabet="abcdefgh", min_size=1, max_size=3), repeats, min_size=1, max_size=30
)


def _mean(xs):
    return sum(xs) / len(xs)


def _walk_leaves(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert type(k) is str
            yield from _walk_leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk_leaves(v)
    else:
        yield obj


def _assert_builtin_json(d: dict) -> None:
    assert type(d) is dict
    for leaf in _walk_leaves(d):
        assert type(leaf) in (float, int, str, bool, type(None)), (leaf, type(leaf))
        if type(leaf) is float:
            assert math.isfinite(leaf)  # at full precision: rounded only when printed
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text) == d


# --------------------------------------------------------------------------- McNemar


def test_mcnemar_known_values():
    assert mcnemar_exact(6, 0) == pytest.approx(0.03125)
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)
    assert mcnemar_exact(5, 0) == pytest.approx(0.0625)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0
    assert type(mcnemar_exact(4, 1)) is float


@SETTINGS
@given(st.integers(0, 60), st.integers(0, 60))
def test_mcnemar_symmetric_and_equals_binomtest(a, b):
    p = mcnemar_exact(a, b)
    assert p == mcnemar_exact(b, a)
    assert 0.0 < p <= 1.0
    if a + b:
        assert p == pytest.approx(sps.binomtest(a, a + b, 0.5).pvalue)


def test_min_discordant_for_significance():
    assert min_discordant_for_significance() == 6
    assert min_discordant_for_significance(0.05) == 6
    assert mcnemar_exact(5, 0) >= 0.05 > mcnemar_exact(6, 0)
    assert min_discordant_for_significance(0.01) == 8  # 2**-7 = 0.0078 < 0.01 <= 2**-6
    with pytest.raises(ValueError):
        min_discordant_for_significance(0.0)


def _pass_fail(n_pass_a_only: int, n_pass_b_only: int) -> tuple[dict, dict]:
    a, b = {}, {}
    for i in range(n_pass_a_only):
        a[f"a{i}"], b[f"a{i}"] = [1.0], [0.0]
    for i in range(n_pass_b_only):
        a[f"b{i}"], b[f"b{i}"] = [0.0], [1.0]
    a["same"], b["same"] = [1.0], [1.0]
    return a, b


def test_can_reach_significance_threshold():
    c5 = compare(*_pass_fail(2, 3), a="A", b="B", tier="t", seed=1, n_resamples=FAST)
    assert c5.discordant == (2, 3)
    assert c5.can_reach_significance is False
    c6 = compare(*_pass_fail(3, 3), a="A", b="B", tier="t", seed=1, n_resamples=FAST)
    assert c6.discordant == (3, 3)
    assert c6.can_reach_significance is True
    assert c6.mcnemar_p == 1.0
    sweep = compare(*_pass_fail(0, 6), a="A", b="B", tier="t", seed=1, n_resamples=FAST)
    assert sweep.mcnemar_p == pytest.approx(0.03125)
    assert sweep.diff == pytest.approx(6 / 7)


# --------------------------------------------------------------------------- Wilson


def test_wilson_edges():
    lo, hi = wilson(5, 5)
    assert hi == 1.0 and lo < 1.0 and hi - lo > 0.1
    lo, hi = wilson(0, 5)
    assert lo == 0.0 and hi > 0.1
    assert wilson(0, 0) is None
    assert all(type(x) is float for x in wilson(3, 7))
    ci = sps.binomtest(3, 7).proportion_ci(0.95, method="wilson")
    assert wilson(3, 7) == pytest.approx((ci.low, ci.high))
    with pytest.raises(ValueError):
        wilson(6, 5)


@SETTINGS
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_contains_observed(kn):
    k, n = kn
    lo, hi = wilson(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert hi > lo


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 1.0])
def test_wilson_shrinks_with_n(p):
    widths = []
    for n in (10, 40, 160, 640):
        lo, hi = wilson(round(p * n), n)
        widths.append(hi - lo)
    assert all(w1 > w2 for w1, w2 in zip(widths, widths[1:]))


# --------------------------------------------------------------------------- accuracy


@SETTINGS
@given(score_dicts, st.integers(0, 2**32 - 1))
def test_accuracy_is_mean_of_question_means(scores, seed):
    est = accuracy(scores, seed=seed, n_resamples=FAST)
    per_q = [_mean(v) for v in scores.values()]
    assert est.n_questions == len(scores)
    assert est.value == pytest.approx(_mean(per_q))
    lo, hi = est.ci95
    assert lo - 1e-9 <= est.value <= hi + 1e-9
    assert 0.0 <= lo <= hi <= 1.0
    assert est.passes == sum(m > PASS_THRESHOLD for m in per_q)
    assert est.pass_rate == pytest.approx(est.passes / est.n_questions)
    assert est.pass_ci95 == wilson(est.passes, est.n_questions)
    assert accuracy(scores, seed=seed, n_resamples=FAST) == est  # reproducible
    _assert_builtin_json(est.to_dict())


def test_accuracy_partial_and_none():
    scores = {"q1": [1.0, 0.5, None], "q2": [0.0, None], "q3": [None, None], "q4": []}
    assert question_means(scores) == {"q1": 0.75, "q2": 0.0}
    est = accuracy(scores, seed=0, n_resamples=FAST)
    assert est.n_questions == 2
    assert est.value == pytest.approx(0.375)
    assert est.passes == 1
    assert est.pass_rate == 0.5


def test_a_mean_of_exactly_half_is_not_a_pass():
    # a partial answer alone (½), or one right and one wrong repeat, is not a pass
    est = accuracy({"q": [1.0, 0.0], "r": [0.5], "s": [1.0, 0.5]}, seed=0, n_resamples=FAST)
    assert est.passes == 1


def test_accuracy_degenerate():
    empty = accuracy({}, seed=0)
    assert empty == Estimate(None, None, 0, 0, None, None)
    assert accuracy({"q": [None]}, seed=0).n_questions == 0
    _assert_builtin_json(empty.to_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = accuracy({"q": [1.0, 0.5]}, seed=0, n_resamples=FAST)
        assert one.value == 0.75 and one.ci95[0] < 0.75 < one.ci95[1]  # one question: wide
        same = accuracy({f"q{i}": [0.5] for i in range(10)}, seed=0, n_resamples=FAST)
        assert same.value == 0.5 and same.ci95[0] < 0.5 < same.ci95[1]  # never zero width


def test_all_right_or_all_wrong_gets_the_wilson_interval_not_zero_width():
    right = accuracy({f"q{i}": [1.0] for i in range(9)}, seed=0, n_resamples=FAST)
    wrong = accuracy({f"q{i}": [0.0, 0.0] for i in range(9)}, seed=0, n_resamples=FAST)
    assert right.ci95 == pytest.approx(wilson(9, 9)) and right.ci95[0] < 0.75
    assert right.ci95[1] == 1.0
    assert wrong.ci95 == pytest.approx(wilson(0, 9)) and wrong.ci95[0] == 0.0
    assert wrong.ci95[1] > 0.25


def test_accuracy_seeds():
    scores = {f"q{i}": [float(i % 3 == 0), float(i % 2)] for i in range(40)}
    e1 = accuracy(scores, seed=1, n_resamples=FAST)
    e2 = accuracy(scores, seed=2, n_resamples=FAST)
    assert e1 == accuracy(scores, seed=1, n_resamples=FAST)
    assert e1.value == e2.value
    assert e1.ci95 != e2.ci95  # different resamples: intervals differ here
    for e in (e1, e2):
        assert e.ci95[0] < e.value < e.ci95[1]
    # reordering the input does not change a seeded result
    assert accuracy(dict(reversed(list(scores.items()))), seed=1, n_resamples=FAST) == e1


# --------------------------------------------------------------------------- compare


@SETTINGS
@given(score_dicts, score_dicts, st.integers(0, 2**32 - 1))
def test_compare_diff_is_paired_mean_difference(a_scores, b_scores, seed):
    c = compare(a_scores, b_scores, a="A", b="B", tier="t", seed=seed, n_resamples=FAST)
    ids = sorted(a_scores.keys() & b_scores.keys())
    assert c.n_questions == len(ids)
    if not ids:
        assert c.diff is None and c.ci95 is None and c.discordant == (0, 0) and c.mcnemar_p == 1.0
    else:
        ma = [_mean(a_scores[q]) for q in ids]
        mb = [_mean(b_scores[q]) for q in ids]
        assert c.diff == pytest.approx(_mean(mb) - _mean(ma))
        lo, hi = c.ci95
        assert lo - 1e-9 <= c.diff <= hi + 1e-9
        a_only = sum(x > 0.5 and y <= 0.5 for x, y in zip(ma, mb))
        b_only = sum(y > 0.5 and x <= 0.5 for x, y in zip(ma, mb))
        assert c.discordant == (a_only, b_only)
        assert c.mcnemar_p == pytest.approx(mcnemar_exact(a_only, b_only))
    assert c.holm_p is None
    assert compare(a_scores, b_scores, a="A", b="B", tier="t", seed=seed, n_resamples=FAST) == c
    _assert_builtin_json(c.to_dict())


def test_compare_ignores_unpaired_and_direction():
    a_scores = {"q1": [0.0, 0.0], "q2": [1.0], "only_a": [1.0, 1.0]}
    b_scores = {"q1": [1.0, 1.0], "q2": [1.0], "only_b": [0.0], "unscored": [None]}
    a_scores["unscored"] = [1.0]
    c = compare(a_scores, b_scores, a="base", b="kg", tier="t1", seed=3, n_resamples=FAST)
    assert c.n_questions == 2
    assert c.diff == pytest.approx(0.5)  # b minus a
    assert c.discordant == (0, 1)  # q1: a mean 0 fails, b mean 1 passes
    assert (c.a, c.b, c.tier) == ("base", "kg", "t1")
    rev = compare(b_scores, a_scores, a="kg", b="base", tier="t1", seed=3, n_resamples=FAST)
    assert rev.diff == pytest.approx(-0.5)
    assert rev.discordant == (1, 0)


def test_compare_identical_inputs():
    scores = {f"q{i}": [float(i % 2), 0.5, None] for i in range(12)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = compare(scores, dict(scores), a="A", b="A2", tier="t", seed=0)
    assert c.diff == 0.0
    assert c.ci95 == (-c.ci95[1], c.ci95[1]) and c.ci95[1] > 0  # symmetric, never zero width
    assert c.discordant == (0, 0)
    assert c.mcnemar_p == 1.0
    assert c.can_reach_significance is False


def test_compare_constant_shift_gets_an_interval_with_width():
    # b is a shifted by exactly +0.5 on every question: a bootstrap would have zero width
    a_scores = {f"q{i}": [0.0] if i % 2 else [0.5] for i in range(30)}
    b_scores = {q: [v[0] + 0.5] for q, v in a_scores.items()}
    c = compare(a_scores, b_scores, a="A", b="B", tier="t", seed=0, n_resamples=FAST)
    assert c.diff == pytest.approx(0.5)
    assert c.ci95[0] < 0.5 < c.ci95[1] <= 1.0


# --------------------------------------------------------------------------- Holm


def test_holm_known_example():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.01, 0.02, 0.03, 0.04]) == pytest.approx([0.04, 0.06, 0.06, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == []


def test_holm_none_passes_through_and_not_counted():
    assert holm([None, 0.01, None, 0.04]) == pytest.approx([None, 0.02, None, 0.04])
    assert holm([None]) == [None]


@SETTINGS
@given(st.lists(st.one_of(st.none(), st.floats(0.0, 1.0)), max_size=20))
def test_holm_properties(ps):
    adj = holm(ps)
    assert len(adj) == len(ps)
    m = sum(p is not None for p in ps)
    pairs = sorted((p, q) for p, q in zip(ps, adj) if p is not None)
    for p, q in pairs:
        assert q is not None and p <= q <= 1.0
        assert q <= min(1.0, m * p) + 1e-12
    assert all(q1 <= q2 for (_, q1), (_, q2) in zip(pairs, pairs[1:]))
    for p, q in zip(ps, adj):
        assert (p is None) == (q is None)


def test_holm_adjust_family():
    comps = [
        compare(*_pass_fail(0, k), a="A", b=f"B{k}", tier="t", seed=0, n_resamples=FAST)
        for k in (6, 7, 2)
    ]
    adjusted = holm_adjust(comps)
    assert [c.holm_p for c in comps] == [None, None, None]  # originals untouched
    assert [c.holm_p for c in adjusted] == pytest.approx(holm([c.mcnemar_p for c in comps]))
    assert [dict(c.to_dict(), holm_p=None) for c in adjusted] == [c.to_dict() for c in comps]
    for c in adjusted:
        assert isinstance(c, Comparison)
        _assert_builtin_json(c.to_dict())
    assert holm_adjust([]) == []


# --------------------------------------------------------------------------- serialisation


def test_to_dict_keys_and_types():
    c = compare({"q1": [1.0], "q2": [0.0]}, {"q1": [1.0], "q2": [1.0]}, a="A", b="B", tier="t",
                seed=0)
    d = holm_adjust([c])[0].to_dict()
    assert list(d) == [
        "a", "b", "tier", "n_questions", "diff", "ci95", "discordant",
        "mcnemar_p", "holm_p", "can_reach_significance",
    ]
    assert d["discordant"] == [0, 1]
    assert d["holm_p"] == 1.0
    _assert_builtin_json(d)
    e = accuracy({"q1": [1.0, 0.5, 0.0], "q2": [1 / 3]}, seed=0, n_resamples=FAST).to_dict()
    assert list(e) == ["value", "ci95", "n_questions", "passes", "pass_rate", "pass_ci95"]
    assert e["value"] == (0.5 + 1 / 3) / 2  # full precision: rounded only when printed
    _assert_builtin_json(e)


def test_module_is_pure():
    path = pathlib.Path(stats.__file__)
    src = path.read_text(encoding="utf-8")
    assert "import pytest" not in src
    assert "np.random.seed" not in src
    assert len(src.splitlines()) < 400
    # importing the module must not import numpy/scipy (cheap at pytest start-up)
    code = ("import sys, pytest_kgbench.analysis.stats; "
            "print('numpy' in sys.modules, 'scipy' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(path.parent.parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]
