"""Nothing half-made: a run that cannot collect or build (a bad --variant, a malformed question
file, a pack whose declared table file is missing, an R2RML pack without morph-kgc, data its
declared types cannot hold) stops before any item with one line naming the file and field,
exit 4, and leaves no run folder (`kgbench runs` used to list each as "complete 0/0"), serially
and under -n."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import REPO, STARTER_TABLES, starter_pack


def _one_line(result: pytest.RunResult, root: Path) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    err = result.stderr.str().strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in result.stdout.str() and "passed" not in result.stdout.str()
    assert not (root / "reports").exists()  # no run folder
    return err


def _shop(pytester: pytest.Pytester, **manifest: object) -> Path:
    """The starter pack (kgbench init), its manifest changed by `manifest`."""
    pytester.makeini(f"[pytest]\nkgbench_cache = {pytester.path / 'cache'}\n")
    return starter_pack(pytester.path / "shop", **manifest)


def test_a_variant_no_pack_has(project) -> None:
    p = project()
    err = _one_line(p.runpytest("questions", "--variant", "nosuch"), p.path)
    assert err.startswith("ERROR: --variant: pack 'credit' has no variant nosuch (known: ")


def test_a_question_file_that_is_not_yaml(project) -> None:
    text = (REPO / "questions" / "credit.yaml").read_text(encoding="utf-8")
    p = project(text + "\n- id: credit-Q99\n  text: [unclosed\n")
    err = _one_line(p.runpytest("questions"), p.path)
    assert "questions/credit.yaml: not valid YAML:" in err


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_a_pack_whose_declared_table_file_is_missing(pytester: pytest.Pytester,
                                                     workers) -> None:
    shop = _shop(pytester, tables=STARTER_TABLES)
    (shop / "data" / "orders.csv").unlink()
    result = pytester.runpytest_subprocess(f"--pack={shop}", "--agent", "gold",
                                           "-p", "no:cacheprovider", *workers)
    err = _one_line(result, pytester.path)
    assert f"{shop / 'pack.yaml'}: field 'tables.orders': declares table 'orders', but " in err
    assert "holds no orders.csv or orders.parquet" in err


def test_an_r2rml_pack_without_morph_kgc(pytester: pytest.Pytester, monkeypatch) -> None:
    shop = _shop(pytester, rdf={"r2rml": "mapping.ttl"})
    (shop / "mapping.ttl").write_text("# an R2RML mapping\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "morph_kgc", None)  # as if it were not installed
    err = _one_line(pytester.runpytest(f"--pack={shop}", "--agent", "gold"), pytester.path)
    assert f"{shop / 'pack.yaml'}: field 'rdf.r2rml': mapping.ttl needs what is not " \
           "installed here (the modules morph_kgc" in err
    assert "pip install --no-deps morph-kgc" in err


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_data_its_declared_types_cannot_hold(pytester: pytest.Pytester, workers) -> None:
    """Found only by building: the variant is built before the first item (on the controller
    under -n) and the build's failure stops the run there."""
    shop = _shop(pytester, tables=STARTER_TABLES)
    orders = shop / "data" / "orders.csv"
    orders.write_text(orders.read_text(encoding="utf-8").replace("80.50", "eighty", 1),
                      encoding="utf-8")
    result = pytester.runpytest_subprocess(f"--pack={shop}", "--agent", "gold",
                                           "-p", "no:cacheprovider", *workers)
    err = _one_line(result, pytester.path)
    assert "building shop/base failed: " in err and "'eighty'" in err
