"""Issue 30, items 14 and 16: `kgbench check` tests every (question, need) pair by ablation or
names the reason it cannot, and holds the Turtle conditions' prompts to R1's."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from conftest import credit_question
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.run.validate import (
    RDF_RATIO,
    check_needs,
    check_prompt_sizes,
    need_counts,
    per_id_prefixes,
    prompt_bound,
    untested_reasons,
)


def _with_manifest(built: Any, **changes: Any) -> Any:
    """The same build, its pack's manifest changed (None removes a key)."""
    manifest = {k: v for k, v in {**built.pack.manifest, **changes}.items() if v is not None}
    return dataclasses.replace(built, pack=dataclasses.replace(built.pack, manifest=manifest))


def test_every_shipped_pair_is_tested_or_carries_a_reason(credit_pack, research_pack, kg_cache,
                                                           credit_questions,
                                                           research_questions) -> None:
    from pytest_kgbench.packs.build import build_variant

    for pack, qset in ((credit_pack, credit_questions), (research_pack, research_questions)):
        builts = [build_variant(pack, v, kg_cache) for v in pack.variants]
        checks = check_needs(list(qset.questions), builts, every=True)
        counts = need_counts(checks)
        assert counts["unexplained"] == 0 and counts["never"] == 0, [
            (c.question, c.need, c.why) for c in checks if not c.ok]
        assert counts["pairs"] == sum(len(q.needs) for q in qset.questions)  # every pair
        assert all(c.reason for c in checks if c.exercised is None)
        if pack.name == "credit":
            assert counts["exercised"] >= 15  # 5 before: RatingOnDate, Control, … tested now


def test_a_pair_with_neither_a_test_nor_a_reason_fails(credit_base) -> None:
    q14 = credit_question("credit-Q14")  # needs credit:Issuer: no ablation, a pack reason
    bare = _with_manifest(credit_base, untested_needs=None)
    (check,) = check_needs([q14], [bare])
    assert check.exercised is None and check.reason is None and not check.ok
    assert need_counts([check])["unexplained"] == 1
    (said,) = check_needs([q14], [credit_base])
    assert said.ok and "LEI" in str(said.reason)


def test_a_never_exercised_filter_fails_unless_the_question_says_why(credit_base) -> None:
    q21 = credit_question("credit-Q21")  # no minority link in Atrium's group: share never bites
    control = {c.need: c for c in check_needs([q21], [credit_base])}["credit:Control"]
    assert control.exercised is None and "threshold" in str(control.reason)
    declared = dict(credit_base.pack.manifest["untested_needs"])
    declared.pop("credit:Control")
    bare = _with_manifest(credit_base, untested_needs=declared)
    control = {c.need: c for c in check_needs([q21], [bare])}["credit:Control"]
    assert control.exercised is False and not control.ok
    # a reason given for every question of a need does not excuse one the data never moves
    declared["credit:Control"] = "a need-wide reason"
    wide = _with_manifest(credit_base, untested_needs=declared)
    control = {c.need: c for c in check_needs([q21], [wide])}["credit:Control"]
    assert control.exercised is False


def test_questions_the_ablation_moves_are_tested(credit_base) -> None:
    q10 = credit_question("credit-Q10")  # the rating on 2023-06-30: the date filter is the need
    (check,) = check_needs([q10], [credit_base])
    assert check.need == "credit:RatingOnDate" and check.exercised is True


@pytest.mark.parametrize(("declared", "field"), [
    (["a list"], "'untested_needs'"),
    ({"credit:Nothing": "why"}, "'untested_needs.credit:Nothing'"),
    ({"credit:Issuer": {"credit-Q15": "why"}}, "'untested_needs.credit:Issuer.credit-Q15'"),
    ({"credit:Issuer": ""}, "'untested_needs.credit:Issuer'"),
    ({"credit:Issuer": 3}, "'untested_needs.credit:Issuer'"),
])
def test_a_bad_reason_is_named_with_its_file_and_field(credit_questions, declared,
                                                       field) -> None:
    with pytest.raises(InputError, match=f"pack.yaml: field {field}"):
        untested_reasons({"untested_needs": declared}, list(credit_questions.questions),
                         "pack.yaml")


# --- 16. the Turtle conditions' prompt sizes --------------------------------------------------

def test_the_turtle_prompts_stay_within_the_packs_bound(credit_base, research_base,
                                                        credit_questions,
                                                        research_questions) -> None:
    for built, qset in ((credit_base, credit_questions), (research_base, research_questions)):
        sizes = check_prompt_sizes(list(qset.questions), [built])
        rdf = {s.condition: s for s in sizes if s.bound is not None}
        assert set(rdf) == {"R2", "R6"} and all(s.ok for s in sizes), sizes
        assert {s.condition for s in sizes if s.bound is None} >= {"R1", "R4", "R5"}
        assert per_id_prefixes(built) == []
    research = {s.condition: s for s in check_prompt_sizes(list(research_questions.questions),
                                                           [research_base])}
    assert research["R2"].ratio is not None and research["R2"].ratio < 4.2  # 4.52 before


def test_without_the_packs_reason_the_default_bound_holds(credit_base, credit_questions) -> None:
    bare = _with_manifest(credit_base, prompt_ratio=None)
    sizes = check_prompt_sizes(list(credit_questions.questions), [bare])
    r2 = next(s for s in sizes if s.condition == "R2")
    assert r2.bound == RDF_RATIO and r2.ratio is not None and r2.ratio > RDF_RATIO
    assert not r2.ok


@pytest.mark.parametrize(("entry", "field"), [
    ({"max": 4}, "'prompt_ratio'"),
    ({"max": 2.0, "why": "w"}, "'prompt_ratio.max'"),
    ({"max": True, "why": "w"}, "'prompt_ratio.max'"),
    ({"max": 4, "why": " "}, "'prompt_ratio.why'"),
])
def test_a_bad_prompt_ratio_is_named(entry, field) -> None:
    with pytest.raises(InputError, match=f"pack.yaml: field {field}"):
        prompt_bound({"prompt_ratio": entry}, "pack.yaml")
    assert prompt_bound({}, "pack.yaml") == (RDF_RATIO, None)


def test_the_check_prints_the_counts_per_pack_and_fails_on_what_it_must() -> None:
    from types import SimpleNamespace

    from pytest_kgbench.run.validate import NeedCheck, SizeCheck, check_lines

    pack = SimpleNamespace(name="p", variants=["base"])
    tested = NeedCheck("p-Q1", "p:A", True, "the answer changes without it on base")
    said = NeedCheck("p-Q2", "p:B", None, "no ablation", reason="B is a join, not a filter")
    r1 = SizeCheck("base", "R1", 4000.0, 1.0)
    r2 = SizeCheck("base", "R2", 8000.0, 2.0, bound=RDF_RATIO)
    lines, failed = check_lines(pack, [tested, said], [r1, r2], {"base": []})
    assert not failed
    assert ("needs of p: 2 (question, need) pairs across base: 1 tested by taking their "
            "evidence out (1 exercised by the data, 0 never), 1 untested with a reason, 0 "
            "untested without one") in lines
    assert "prompt sizes on p/base (median, ≈ tokens): R1 1,000; R2 2,000 (2.00× R1)" in lines
    assert "ok  R2 on p/base: 2.00× R1" in lines
    silent = NeedCheck("p-Q3", "p:C", None, "no ablation")
    lines, failed = check_lines(pack, [tested, silent], [r1], {"base": []})
    assert failed and any("NO REASON GIVEN" in line for line in lines)
    long = SizeCheck("base", "R6", 12000.0, 3.0, bound=RDF_RATIO)
    assert check_lines(pack, [tested], [r1, long], {"base": []})[1]
    lines, failed = check_lines(pack, [tested], [r1], {"base": ["A1: <x/authorship/W1/A1/>"]})
    assert failed and any("prefixes of one id each" in line for line in lines)


@pytest.mark.slow
def test_kgbench_check_passes_on_research(research_pack, kg_cache, capsys) -> None:
    from conftest import REPO
    from pytest_kgbench.cli import main

    assert main(["check", "--pack", "research", "--root", str(REPO), "--cache",
                 str(kg_cache)]) == 0
    out = capsys.readouterr().out
    assert "0 untested without one" in out and "0 never)" in out
    assert "ok  R2 on research/large:" in out and "BAD" not in out
