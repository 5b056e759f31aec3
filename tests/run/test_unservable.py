"""A question its store cannot serve is skipped with the reason, for every agent, never graded:
a key longer than a query hands over, and (on a server the harness does not vouch for) a
reference query the server answers wrong. A harness limit is never a model's miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_kgbench.core.questions import load_questions
from pytest_kgbench.engines import CAPS, WHOLE, Caps, QueryResult, fill_capped
from pytest_kgbench.run.items import past_row_cap, result_room


def _pack(folder: Path, items: int, hand: bool = True, width: int = 5) -> Path:
    """A pack of one CSV table of `items` items (every third discontinued) and two questions:
    the items in the catalogue (a list as long as the table's two thirds) and their count;
    the list's key written by hand (`hand`), else the gold query's result. A sku is `width`
    characters long."""
    (folder / "data").mkdir(parents=True)
    skus = [f"S{i:04d}".ljust(width, "x") for i in range(items)]
    rows = "".join(f"{skus[i]},{i % 7 + 1},{str(i % 3 == 0).lower()}\n" for i in range(items))
    listed = sorted(skus[i] for i in range(items) if i % 3)
    (folder / "data" / "items.csv").write_text("sku,price,discontinued\n" + rows,
                                               encoding="utf-8")
    (folder / "pack.yaml").write_text("name: plain\n", encoding="utf-8")
    (folder / "definitions.md").write_text(
        "# Definitions\n\nThe catalogue: the items not discontinued.\n", encoding="utf-8")
    (folder / "questions.yaml").write_text(yaml.safe_dump([
        {"id": "plain-Q1", "tier": "L1", "text": "Which items are in the catalogue?",
         "answer": {"skus": {"kind": "string_list"}},
         "gold": {"sql": "SELECT sku AS skus FROM items WHERE NOT discontinued ORDER BY sku"},
         **({"hand_key": {"skus": listed}} if hand else {})},
        {"id": "plain-Q2", "tier": "L1", "text": "How many items are in the catalogue?",
         "answer": {"n": {"kind": "number"}},
         "gold": {"sql": "SELECT count(*) AS n FROM items WHERE NOT discontinued"}},
    ]), encoding="utf-8")
    return folder


def test_a_key_longer_than_the_row_cap_is_named_with_both_lengths(tmp_path: Path) -> None:
    folder = _pack(tmp_path / "plain", 3)
    q1, q2 = load_questions(folder / "questions.yaml", pack="plain").questions
    caps = Caps(rows=2)
    assert past_row_cap(q1, {"skus": ["a", "b"]}, caps) is None  # at the cap: it fits
    why = past_row_cap(q1, {"skus": ["a", "b", "c"]}, caps)
    assert why is not None and why.startswith("plain-Q1: its key lists 3 values in 'skus'")
    assert "at most 2 rows" in why
    assert past_row_cap(q2, {"n": 3}, caps) is None  # not a list
    assert past_row_cap(q1, None, caps) is None  # no key (an abstain question)


def test_gold_skips_a_list_past_the_row_cap_and_answers_the_rest(tmp_path: Path,
                                                                 pytester: pytest.Pytester
                                                                 ) -> None:
    """900 items, 600 of them in the catalogue: the list's key is past the 500 rows a query
    hands over. Before, gold's query was cut at 500 rows and graded wrong, failing the
    must-pass run; now the list is skipped under the querying conditions, with the reason, and
    the count beside it is answered."""
    folder = _pack(tmp_path / "plain", 900)
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    result = pytester.runpytest_subprocess("--pack", str(folder), "--agent", "gold",
                                           "--condition", "D1,D2", "-p", "no:cacheprovider",
                                           "-rs")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*2 passed, 2 skipped*"])
    (line,) = [x for x in result.outlines if x.startswith("run folder: ")]
    report = json.loads((Path(line.removeprefix("run folder: ")) / "report.json")
                        .read_text(encoding="utf-8"))
    assert sorted((s["nodeid"].split("::")[1], s["reason"]) for s in report["skipped"]) == [
        (f"plain-Q1[{c}-gold-rep1]", "plain-Q1: its key lists 600 values in 'skus' and a "
         "query hands over at most 500 rows: no answer read through the store can hold them "
         "(a limit of the harness, not graded)") for c in ("D1", "D2")]
    assert sorted((i["question"], i["condition"], i["grade"]) for i in report["items"]) == [
        ("plain-Q2", "D1", "correct"), ("plain-Q2", "D2", "correct")]


def test_a_key_past_the_character_cap_is_named_and_never_fits_a_query(tmp_path: Path) -> None:
    """Fewer rows than the row cap, more characters than a query's result holds: the list is
    past what one query hands over. The measure is at most what a query's result takes: a list
    it names as past is cut by the caps of every query handing it over."""
    q1 = load_questions(_pack(tmp_path / "plain", 3) / "questions.yaml",
                        pack="plain").questions[0]
    room = result_room(CAPS)
    assert past_row_cap(q1, {"skus": ["x" * (room - 1)]}, CAPS) is None  # the line break: fits
    why = past_row_cap(q1, {"skus": ["x" * room]}, CAPS)
    assert why == (f"plain-Q1: its key lists 1 values in 'skus', {room + 1:,} characters as a "
                   "query's rows, and a query hands over at most 30,000 characters: no answer "
                   "read through one query can hold them (a limit of the harness, not graded)")
    result = QueryResult(language="sql", statement="")
    fill_capped(result, ["skus"], [["x" * room]], lambda v: v, Caps(cell_chars=room))
    assert result.truncated and not result.rows
    assert past_row_cap(q1, {"skus": [["a", "b"]] * 10}, WHOLE) is None  # rows: cells each


def _gold_run(folder: Path, pytester: pytest.Pytester) -> dict:
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    result = pytester.runpytest_subprocess("--pack", str(folder), "--agent", "gold",
                                           "--condition", "R1,D1", "-p", "no:cacheprovider",
                                           "-rs")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*3 passed, 1 skipped*"])
    (line,) = [x for x in result.outlines if x.startswith("run folder: ")]
    return json.loads((Path(line.removeprefix("run folder: ")) / "report.json")
                      .read_text(encoding="utf-8"))


@pytest.mark.parametrize(("items", "width", "past"), [
    (900, 5, "its key lists 600 values in 'skus' and a query hands over at most 500 rows"),
    (480, 100, "its key lists 320 values in 'skus', 32,320 characters as a query's rows, and "
               "a query hands over at most 30,000 characters")])
def test_a_key_from_a_gold_query_is_whole_past_the_caps(tmp_path: Path,
                                                         pytester: pytest.Pytester, items: int,
                                                         width: int, past: str) -> None:
    """A key read from its gold query's result: past the 500 rows, or past the 30,000
    characters, a query hands over. Before, the key was cut at the caps (500 rows; 293 of
    320), and gold, reading through a store cut alike, was graded correct against it: a model
    listing every item would have been graded wrong. Now the key holds every item; under R1
    the reading gold's store over the prompt hands over every row and is graded against it;
    under D1 no single query can hand the list over, so it is skipped with the reason."""
    report = _gold_run(_pack(tmp_path / "plain", items, hand=False, width=width), pytester)
    listed = sorted(f"S{i:04d}".ljust(width, "x") for i in range(items) if i % 3)
    assert [(s["nodeid"].split("::")[1], s["reason"]) for s in report["skipped"]] == [
        ("plain-Q1[D1-gold-rep1]", f"plain-Q1: {past}: no answer read through "
         f"{'the store' if width == 5 else 'one query'} can hold them (a limit of the "
         "harness, not graded)")]
    graded = {(i["question"], i["condition"]): i for i in report["items"]}
    assert sorted((*k, i["grade"]) for k, i in graded.items()) == [
        ("plain-Q1", "R1", "correct"), ("plain-Q2", "D1", "correct"),
        ("plain-Q2", "R1", "correct")]
    (field,) = graded["plain-Q1", "R1"]["fields"]
    assert field["expected"] == listed and len(field["got"]) == len(listed)


@pytest.mark.parametrize("hand", [True, False])
def test_kgbench_check_reads_a_reference_whole_against_a_whole_key(tmp_path: Path,
                                                                    hand: bool) -> None:
    """`kgbench check` compares each reference query's result with the key: past the row cap
    the reference was cut at 500 rows, so a whole key (by hand, or now a gold query's) was
    reported as differing from its own reference. Both are whole now."""
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import load_pack
    from pytest_kgbench.run.validate import check_questions

    folder = _pack(tmp_path / "plain", 900, hand=hand)
    built = build_variant(load_pack(folder), "base", tmp_path / "cache")
    questions = load_questions(folder / "questions.yaml", pack="plain").questions
    checks = {c.question: c for c in check_questions(list(questions), built)}
    assert {q: c.problems for q, c in checks.items() if c.problems} == {}
    assert len(checks["plain-Q1"].key["skus"]) == len(checks["plain-Q1"].gold["sql"]["skus"]) \
        == 600


def test_a_store_holds_its_results_to_the_caps_it_is_opened_with(tmp_path: Path) -> None:
    """`open_store(..., caps=)`: the store a key is read from hands over whole results (WHOLE);
    the SPARQL worker, like the SQL one, takes the executor's caps with each query."""
    from pytest_kgbench.cli import main
    from pytest_kgbench.engines.stores import open_store
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.packs.schema import load_pack

    assert main(["init", str(tmp_path / "shop")]) == 0
    built = build_variant(load_pack(tmp_path / "shop"), "base", tmp_path / "cache")
    queries = {"sql": "SELECT name FROM customers",
               "sparql": "PREFIX shop: <https://example.org/shop/def#>\n"
                         "SELECT ?n WHERE { ?c shop:name ?n }"}
    for language, statement in queries.items():
        rows = {}
        for name, caps in (("one", Caps(rows=1)), ("whole", WHOLE)):
            store = open_store(built, language, "analyst", caps=caps)
            try:
                result = store.run(statement)
            finally:
                store.close()
            assert result.ok, (language, result.error, result.refused)
            rows[name] = (len(result.rows), result.truncated)
        assert rows["one"] == (1, True), language
        assert rows["whole"][0] > 1 and not rows["whole"][1], language


def _starter_with_a_wrong_sparql(tmp_path: Path) -> Path:
    """The starter pack (kgbench init) and a question whose SPARQL reference answers another
    customer's country than its key (the gold SQL's result): as a server answering a
    reference wrong would."""
    from pytest_kgbench.cli import main

    folder = tmp_path / "shop"
    assert main(["init", str(folder)]) == 0
    questions = yaml.safe_load((folder / "questions.yaml").read_text(encoding="utf-8"))
    q1 = next(q for q in questions if q["id"] == "shop-Q1")
    questions.append({**q1, "id": "shop-Q5", "gold": {
        "sql": q1["gold"]["sql"],
        "sparql": q1["gold"]["sparql"].replace('"Chen Wei"', '"Ada Byrne"')}})
    (folder / "questions.yaml").write_text(yaml.safe_dump(questions), encoding="utf-8")
    return folder


def test_a_reference_a_server_answers_wrong_is_skipped_there_and_fails_in_process(
        tmp_path: Path, pytester: pytest.Pytester, oxigraph) -> None:
    """On a store the harness vouches for (rdflib in process), a reference graded wrong is
    the harness failing: gold's must-pass run fails on it. On a SPARQL server
    (`--sparql-engine endpoint=…`), whose answers the harness does not vouch for, the
    question's reference runs first and the question is skipped there, with the reason, for
    every agent: a model is never graded on what the server itself answers wrong."""
    folder = _starter_with_a_wrong_sparql(tmp_path)
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    common = ("--pack", str(folder), "--condition", "D4", "-p", "no:cacheprovider",
              "-p", "no:randomly")
    vouched = pytester.runpytest_subprocess(*common, "--agent", "gold")
    assert vouched.ret == 1, vouched.stdout.str()
    vouched.stdout.fnmatch_lines(["*the gold agent must answer every item correctly: graded "
                                  "wrong*", "*1 failed, 2 passed, 2 skipped*"])
    for agent in ("gold", "trap"):
        served = pytester.runpytest_subprocess(*common, "--agent", agent, "--sparql-engine",
                                               oxigraph.engine)
        assert served.ret == 0, served.stdout.str()
        (line,) = [x for x in served.outlines if x.startswith("run folder: ")]
        report = json.loads((Path(line.removeprefix("run folder: ")) / "report.json")
                            .read_text(encoding="utf-8"))
        reasons = {s["nodeid"].split("::")[1]: s["reason"] for s in report["skipped"]}
        assert reasons[f"shop-Q5[D4-{agent}-rep1]"] == (
            f"Oxigraph at {oxigraph.query_url} cannot serve shop-Q5 under D4: its reference "
            "query is graded wrong there (no field matches the key; country: expected 'SG', "
            "got 'IE')"), reasons
        assert {i["question"] for i in report["items"]} == {"shop-Q1", "shop-Q2"}
