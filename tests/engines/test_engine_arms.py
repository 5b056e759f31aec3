"""Engine arms: `--sparql-engine rdflib,oxigraph` (or `--sql-engine duckdb,postgres=DSN`) runs
each querying condition of the language once per engine, as conditions of their own
(`D4@rdflib`, `D4@oxigraph`), so one run's report shows the same items' grades per engine
and pairs them under --ablation."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from pytest_kgbench.core import conditions
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.core.settings import Settings, engine_list


def test_a_rung_runs_once_per_engine_of_its_language() -> None:
    engines = {"sparql": ("rdflib", "oxigraph")}
    ids = [c.id for c in conditions.select("R1,D1,D4", ("prompt", "none"), engines)]
    assert ids == ["R1", "D1", "D1.none", "D4@rdflib", "D4@oxigraph", "D4.none@rdflib",
                   "D4.none@oxigraph"]
    assert [c.id for c in conditions.select("D4", engines={"sparql": ("oxigraph",)})] == ["D4"]
    arm = conditions.by_id("d4.TOOLS@Oxigraph")
    assert (arm.id, arm.engine, arm.schema, arm.base_id) == ("D4.tools@oxigraph", "oxigraph",
                                                             "tools", "D4")
    assert conditions.normal_id("d4.TOOLS@Oxigraph") == "D4.tools@oxigraph"
    with pytest.raises(InputError, match="reads its data"):
        conditions.by_id("R1@oxigraph")
    with pytest.raises(InputError, match="names no engine"):
        conditions.by_id("D4@")


def test_an_ablation_pairs_the_first_engine_with_each_other() -> None:
    selected = ("D1", "D4@rdflib", "D4@oxigraph", "D4@endpoint", "D4.tools@rdflib",
                "D4.tools@oxigraph", "D5@rdflib", "D5@oxigraph")
    pairs = conditions.ablation_pairs(selected)
    for pair in [("D4@rdflib", "D4@oxigraph"), ("D4@rdflib", "D4@endpoint"),
                 ("D4.tools@rdflib", "D4.tools@oxigraph"), ("D5@rdflib", "D5@oxigraph"),
                 ("D4@rdflib", "D4.tools@rdflib"), ("D4@oxigraph", "D4.tools@oxigraph"),
                 ("D4@rdflib", "D5@rdflib"), ("D4@oxigraph", "D5@oxigraph"),
                 ("D1", "D4@rdflib")]:
        assert pair in pairs, pair
    assert ("D4@oxigraph", "D4@endpoint") not in pairs  # each against the first only
    assert ("D4@rdflib", "D4.tools@oxigraph") not in pairs  # a schema pair keeps its engine
    assert len(pairs) == len(set(pairs))


def test_an_option_names_one_engine_or_several() -> None:
    assert engine_list("Rdflib, OXIGRAPH", "--sparql-engine") == {"rdflib": "rdflib",
                                                                  "oxigraph": "oxigraph"}
    both = engine_list("duckdb,postgres=host=/tmp dbname=kg", "--sql-engine")
    assert both == {"duckdb": "duckdb", "postgres": "postgres=host=/tmp dbname=kg"}
    url = "endpoint=http://127.0.0.1:7878/query?a=1,2"  # a comma inside one engine's URL
    assert engine_list(url, "--sparql-engine") == {"endpoint": url}
    with pytest.raises(InputError, match="named twice"):
        engine_list("rdflib,rdflib", "--sparql-engine")


def test_an_engine_arm_opens_its_store_on_its_engine(credit_base) -> None:
    from pytest_kgbench.run.runtime import Runtime

    settings = Settings.at(REPO, engines={"sparql": "rdflib"},
                           engine_arms={"sparql": {"rdflib": "rdflib", "oxigraph": "oxigraph"}})
    runtime = Runtime(settings)
    d4 = conditions.by_id("D4")
    try:
        plain = runtime.executor(credit_base, d4, "analyst")
        rdf = runtime.executor(credit_base, conditions.on_engine(d4, "rdflib"), "analyst")
        ox = runtime.executor(credit_base, conditions.on_engine(d4, "oxigraph"), "analyst")
        assert plain is rdf  # the session's engine is the first arm's
        assert (rdf.worker.config["plugin"], ox.worker.config["plugin"]) == ("default",
                                                                              "Oxigraph")
        query = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
        assert rdf.run(query).rows == ox.run(query).rows
    finally:
        runtime.close()


def collected(result: pytest.RunResult) -> str:
    return next(x for x in result.stdout.lines if x.startswith("collected")).split(" /")[0]


@pytest.mark.slow
def test_one_run_grades_the_same_items_on_each_engine(project) -> None:
    from conftest import run_records

    p = project()
    result = p.runpytest("questions", "--agent", "gold", "--condition", "D4", "-k", "L3",
                         "--sparql-engine", "rdflib,oxigraph", "--ablation",
                         "-p", "no:randomly", "-m", "oxigraph or rdflib")
    from pytest_kgbench.core.questions import load_questions

    n = sum(1 for q in load_questions(p.path / "questions" / "credit.yaml").questions
            if q.tier == "L3" and (q.variants is None or "base" in q.variants))
    result.assert_outcomes(passed=2 * n)
    records = run_records(p)
    by_arm: dict[str, set[str]] = {}
    for rec in records:
        by_arm.setdefault(rec["condition"], set()).add(rec["question"])
        assert rec["letter"] == "C", rec["question"]
    assert by_arm["D4@rdflib"] == by_arm["D4@oxigraph"] and len(by_arm["D4@rdflib"]) == n
    (run,) = [d for d in (p.path / "reports").iterdir() if d.is_dir()]
    report = json.loads((run / "report.json").read_text())
    assert set(report["conditions"]) == {"D4@rdflib", "D4@oxigraph"}
    assert any(c["a"] == "D4@rdflib" and c["b"] == "D4@oxigraph"
               for c in report["comparisons"]), report["comparisons"]
    md = (run / "report.md").read_text()
    assert "SPARQL engines, one arm each: rdflib (`@rdflib`), oxigraph (`@oxigraph`)" in md
    meta = json.loads((run / "meta.json").read_text())
    assert meta["engine_arms"] == {"sparql": {"rdflib": "rdflib", "oxigraph": "oxigraph"}}
    assert meta["settings"]["engine_arms"]["sparql"] == {"rdflib": "rdflib",
                                                         "oxigraph": "oxigraph"}
    # a resume keeps the arms: nothing is asked again, and the report is the same
    again = p.runpytest("questions", "--agent", "gold", "--resume", run.name, "-k", "L3",
                        "-p", "no:randomly")
    out = again.stdout.str()
    assert "every selected item was banked before; nothing was asked" in out
    assert collected(again) == collected(result)  # both arms' items, from the stored run
    assert json.loads((run / "report.json").read_text())["conditions"].keys() == \
        report["conditions"].keys()
