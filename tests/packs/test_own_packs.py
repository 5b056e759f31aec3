"""Bring your own data: a pack is files (kgbench init writes one), kgbench validate names every
problem with its file, question and field, and a pack runs every condition it supports — the
others not run, each with its reason, never an error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from pytest_kgbench.cli import main
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.settings import Settings
from pytest_kgbench.packs.locate import pack_settings
from pytest_kgbench.packs.schema import load_pack
from pytest_kgbench.run.validate import validate_pack


def _run_dir(result: pytest.RunResult) -> Path:
    (line,) = [x for x in result.outlines if x.startswith("run folder: ")]
    return Path(line.removeprefix("run folder: "))


@pytest.fixture
def starter(tmp_path: Path) -> Path:
    folder = tmp_path / "mypack"
    assert main(["init", str(folder)]) == 0
    return folder


def _validate(folder: Path, cache: Path, **kw: object) -> object:
    settings = Settings.at(folder.parent, cache_dir=str(cache),
                           **pack_settings(str(folder), {}, folder.parent, None))
    return validate_pack(settings, settings.plan.pack_names[0], **kw)  # type: ignore[arg-type]


def test_a_pack_outside_the_project_keeps_a_file_in_its_items_ids(starter: Path,
                                                                    pytester: pytest.Pytester
                                                                    ) -> None:
    """A pack given by its path outside the rootdir: pytest gives a collected path outside
    the rootdir the id "", so each item was `::shop-Q1[R1-gold-rep1]`. Its file is named by
    the pack's name instead, the same wherever the pack's folder is."""
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    assert not starter.is_relative_to(pytester.path)
    result = pytester.runpytest_subprocess("--rootdir", str(pytester.path), "--pack",
                                           str(starter), "--agent", "gold", "-p",
                                           "no:cacheprovider", "--condition", "R1,D1")
    assert result.ret == 0, result.stdout.str()
    answers = (_run_dir(result) / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    ids = sorted(json.loads(line)["nodeid"] for line in answers)
    assert ids[0] == "shop/questions.yaml::shop-Q1[D1-gold-rep1]", ids
    assert len(ids) == 8 and all(i.startswith("shop/questions.yaml::shop-Q") for i in ids), ids


def test_init_writes_a_pack_that_validates(starter: Path, tmp_path: Path, capsys) -> None:
    assert (starter / "pack.yaml").is_file() and (starter / "questions.yaml").is_file()
    capsys.readouterr()
    assert main(["init", str(starter)]) != 0  # never over a folder that holds something
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["validate", str(starter), "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "valid: 4 question check(s) passed" in out
    assert "note    pack shop has no rules (shapes.ttl): D6 skipped" in out


def test_the_starter_pack_runs_under_gold(starter: Path, pytester: pytest.Pytester) -> None:
    """`pytest --pack DIR --agent gold` from a folder outside the pack: every supported
    condition passes, the others are listed with their reason, nothing is missing."""
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    result = pytester.runpytest_subprocess("--pack", str(starter), "--agent", "gold",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*not run: pack shop has no rules (shapes.ttl): D6 skipped*",
                                 "*28 passed, 8 skipped*"])
    report = json.loads((_run_dir(result) / "report.json").read_text(encoding="utf-8"))
    assert report["complete"] and not report["missing"]
    assert {"D1", "D2", "D4", "D5", "R1", "R2", "R4", "R5", "R6"} <= set(report["conditions"])
    assert any("D6 skipped" in line for line in report["not_run"])
    # Q3 and Q4 have no SPARQL: skipped under the graph conditions, with the reason
    assert {s["reason"] for s in report["skipped"]} == {
        "shop-Q3 has no 'sparql' reference query", "shop-Q4 has no 'sparql' reference query"}
    md = (_run_dir(result) / "report.md").read_text(encoding="utf-8")
    assert "## Not run on these packs" in md and "D6 skipped" in md


def test_a_pack_of_csvs_and_gold_sql_only(tmp_path: Path, pytester: pytest.Pytester) -> None:
    """No Python, no RDF, no SPARQL, no declared types: the SQL and reading conditions run; the
    graph conditions are not run, with the reason; the keys are the gold SQL's results."""
    folder = tmp_path / "plain"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "items.csv").write_text(
        "sku,price,discontinued\nA,10.5,false\nB,3,true\nC,7.25,false\n", encoding="utf-8")
    (folder / "pack.yaml").write_text("name: plain\n", encoding="utf-8")
    (folder / "definitions.md").write_text(
        "# Definitions\n\nThe catalogue: the items not discontinued.\n", encoding="utf-8")
    (folder / "questions.yaml").write_text(yaml.safe_dump([
        {"id": "plain-Q1", "tier": "L3", "text": "What do the items of the catalogue cost in all?",
         "answer": {"total": {"kind": "number"}},
         "gold": {"sql": "SELECT sum(price) AS total FROM items WHERE NOT discontinued"},
         "trap": {"sql": "SELECT sum(price) AS total FROM items"}},
    ]), encoding="utf-8")
    pack = load_pack(folder)
    assert [c for c, _ in pack.tables["items"].columns] == ["sku", "price", "discontinued"]
    assert dict(pack.tables["items"].columns)["discontinued"] == "BOOLEAN"
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    result = pytester.runpytest_subprocess("--pack", str(folder), "--agent", "gold",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    report = json.loads((_run_dir(result) / "report.json").read_text(encoding="utf-8"))
    assert set(report["conditions"]) == {"R1", "R4", "D1", "D2"}
    graph = " ".join(line for line in report["not_run"] if "no RDF" in line)
    assert all(f" {c}" in graph or f"{c}," in graph for c in ("R2", "R6", "D4", "D5", "D6"))
    (item,) = [i for i in report["items"] if i["condition"] == "D1"]
    assert item["grade"] == "correct"
    assert [(f["name"], f["expected"]) for f in item["fields"]] == [("total", 17.75)]


def test_validate_names_file_question_and_field(starter: Path, tmp_path: Path) -> None:
    """Each kind of problem a pack can have, found and named."""
    questions = yaml.safe_load((starter / "questions.yaml").read_text(encoding="utf-8"))
    by_id = {q["id"]: q for q in questions}
    # gold SPARQL disagreeing with gold SQL (the key): Chen Wei's country read as Ada's
    by_id["shop-Q1"]["gold"]["sparql"] = by_id["shop-Q1"]["gold"]["sparql"].replace(
        "Chen Wei", "Ada Byrne")
    # a trap that gives the key
    by_id["shop-Q2"]["trap"]["sql"] = by_id["shop-Q2"]["gold"]["sql"]
    # a need with no evidence pattern
    by_id["shop-Q3"]["needs"] = ["shop:ActiveCustomer", "shop:Loyalty"]
    (starter / "questions.yaml").write_text(yaml.safe_dump(questions), encoding="utf-8")
    report = _validate(starter, tmp_path / "cache", needs=False)
    problems = "\n".join(report.problems)  # type: ignore[attr-defined]
    file = str(starter / "questions.yaml")
    assert f"{file}: question shop-Q3: field 'needs': shop:Loyalty has no evidence" in problems
    # the needs problem stops before the builds; fix it and look again
    by_id["shop-Q3"]["needs"] = ["shop:ActiveCustomer"]
    (starter / "questions.yaml").write_text(yaml.safe_dump(questions), encoding="utf-8")
    report = _validate(starter, tmp_path / "cache", needs=False)
    problems = "\n".join(report.problems)  # type: ignore[attr-defined]
    assert f"{file}: question shop-Q1 (base): gold sparql differs from the key" in problems
    assert f"{file}: question shop-Q2 (base): trap sql gives the key" in problems
    # a definitions file the manifest names but that is not there
    manifest = yaml.safe_load((starter / "pack.yaml").read_text(encoding="utf-8"))
    manifest["definitions"] = {"neutral.ttl": "neutral-missing.ttl"}
    (starter / "pack.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    report = _validate(starter, tmp_path / "cache", needs=False)
    assert any("field 'definitions.neutral.ttl'" in p and "does not exist" in p
               for p in report.problems)  # type: ignore[attr-defined]


def test_a_definitions_file_that_says_nothing_is_a_problem(starter: Path, tmp_path: Path) -> None:
    (starter / "definitions.ttl").write_text(
        "@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n", encoding="utf-8")
    report = _validate(starter, tmp_path / "cache", needs=False)
    assert any("holds no definition" in p for p in report.problems)  # type: ignore[attr-defined]


def test_data_as_parquet_or_a_duckdb_file(starter: Path, tmp_path: Path) -> None:
    """The same tables from Parquet files or from one DuckDB file: the same columns, types and
    rows as from the CSVs."""
    csv_pack = load_pack(starter)
    rows = csv_pack.generate("base", 0)
    con = duckdb.connect()
    pq = tmp_path / "pq"
    pq.mkdir()
    db = tmp_path / "shop.duckdb"
    file_con = duckdb.connect(str(db))
    for name in csv_pack.tables:
        src = str(starter / "data" / f"{name}.csv")
        con.execute(f"COPY (SELECT * FROM read_csv('{src}')) TO '{pq / name}.parquet'")
        file_con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv('{src}')")
    file_con.close()
    for data in (str(pq), str(db)):
        other = tmp_path / f"pack-{Path(data).suffix or 'pq'}"
        shutil.copytree(starter, other)
        shutil.rmtree(other / "data")
        manifest = yaml.safe_load((other / "pack.yaml").read_text(encoding="utf-8"))
        manifest["data"] = data
        (other / "pack.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
        pack = load_pack(other)
        assert pack.tables == csv_pack.tables, data
        assert pack.generate("base", 0) == rows, data


def test_a_pack_whose_external_data_is_absent_is_not_run(starter: Path,
                                                         pytester: pytest.Pytester) -> None:
    manifest = yaml.safe_load((starter / "pack.yaml").read_text(encoding="utf-8"))
    manifest["data"] = {"external": "nowhere/shop"}
    (starter / "pack.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    result = pytester.runpytest_subprocess("--pack", str(starter), "--agent", "gold",
                                           "--external-data", str(pytester.path / "ext"),
                                           "-p", "no:cacheprovider")
    # the only pack the run names cannot run here: one line saying why, before anything
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: --pack: nothing can run here: pack shop skipped: its "
                                 "data folder *nowhere/shop does not exist*"])
    assert not (pytester.path / "reports").exists()


def test_packs_named_in_pyproject_and_bad_pack_arguments(starter: Path, tmp_path: Path) -> None:
    found = pack_settings("shop", {"shop": str(starter)}, tmp_path, None)
    assert found["packs"]["shop"] == str(starter.resolve())
    assert found["pack_names"] == ("shop",)
    with pytest.raises(InputError, match="holds no pack.yaml"):
        pack_settings(str(tmp_path / "nothing-here"), {}, tmp_path, None)
    with pytest.raises(InputError, match="tool.kgbench.packs.x"):
        pack_settings("", {"x": "missing"}, tmp_path, None)


def test_an_installed_pack_is_found_by_its_entry_point(starter: Path, monkeypatch) -> None:
    import importlib.metadata as md
    import types

    from pytest_kgbench.packs import locate

    module = types.ModuleType("shop_pack")
    module.__file__ = str(starter / "__init__.py")
    ep = md.EntryPoint(name="shop", value="shop_pack", group="kgbench.packs")
    monkeypatch.setitem(__import__("sys").modules, "shop_pack", module)
    monkeypatch.setattr(md, "entry_points",
                        lambda group=None: [ep] if group == "kgbench.packs" else [])
    assert locate.entry_point_packs() == {"shop": str(starter.resolve())}


def test_a_gold_query_key_that_fails_is_the_harness(starter: Path, tmp_path: Path) -> None:
    """A key taken from a gold query that does not run halts (HarnessBroken): never a grade."""
    from pytest_kgbench.core.errors import HarnessBroken
    from pytest_kgbench.core.questions import load_questions
    from pytest_kgbench.packs.build import build_variant
    from pytest_kgbench.scoring.answer_key import compute_key

    questions = yaml.safe_load((starter / "questions.yaml").read_text(encoding="utf-8"))
    questions[0]["gold"]["sql"] = "SELECT country FROM no_such_table"
    (starter / "questions.yaml").write_text(yaml.safe_dump(questions), encoding="utf-8")
    pack = load_pack(starter)
    built = build_variant(pack, "base", tmp_path / "cache")
    q = load_questions(starter / "questions.yaml", pack="shop").questions[0]
    assert q.key == "gold.sql"
    with pytest.raises(HarnessBroken, match="its key is the result of its gold sql query"):
        compute_key(q, built)


def test_calling_the_cli_in_process_leaves_sigpipe_alone(tmp_path: Path) -> None:
    """main([...]) inside another process (this test's) must not make SIGPIPE fatal: a later
    write to a closed pipe would kill the whole process (it killed xdist workers)."""
    import signal

    before = signal.getsignal(signal.SIGPIPE)
    assert main(["init", str(tmp_path / "p")]) == 0
    assert signal.getsignal(signal.SIGPIPE) == before
