"""A pack whose external data or optional dependency is absent is left out with one line saying
why, in every command, as a pytest run leaves it out: the first real-model command of
docs/models.md (`kgbench estimate --model sonnet --condition all --repeats 3`) runs on a
fresh clone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import REPO, starter_pack
from pytest_kgbench.cli import main


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_readme_estimate_runs_without_external_data(capsys, monkeypatch,
                                                        kg_cache: Path) -> None:
    monkeypatch.delenv("KGBENCH_EXTERNAL", raising=False)
    code, out, err = _cli(capsys, "estimate", "--model", "sonnet", "--condition", "all",
                          "--repeats", "3", "--root", str(REPO), "--cache", str(kg_cache))
    assert code == 0, err
    left = err.splitlines()
    assert len(left) == 2, err
    assert left[0].startswith("not run: pack ck25 skipped: its graph lives outside the "
                              "repository") and "--external-data" in left[0]
    assert left[1].startswith("not run: pack cwd-acme skipped: its data lives outside the "
                              "repository")
    assert out.startswith("Estimate, before any call: 3 repeat(s)")
    assert any(line.startswith("total ") for line in out.splitlines())


@pytest.fixture
def r2rml_pack(tmp_path: Path, monkeypatch) -> Path:
    """The starter pack, its graph made by an R2RML mapping; morph-kgc as if not installed."""
    folder = starter_pack(tmp_path / "shop", rdf={"r2rml": "mapping.ttl"})
    (folder / "mapping.ttl").write_text("# an R2RML mapping\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "morph_kgc", None)
    return folder


def test_a_pack_without_its_optional_dependency_is_left_out_everywhere(
        r2rml_pack: Path, capsys, kg_cache: Path) -> None:
    why = (f"pack shop skipped: {r2rml_pack / 'pack.yaml'}: field 'rdf.r2rml': mapping.ttl "
           "needs what is not installed here (the modules morph_kgc")
    root = ("--root", str(REPO))
    # a command over several packs leaves it out with one line and runs the others
    code, out, err = _cli(capsys, "estimate", "--model", "sonnet", "--condition", "R1",
                          "--pack", "credit", "--pack", str(r2rml_pack), *root,
                          "--cache", str(kg_cache))
    assert code == 0, err
    assert err.startswith(f"not run: {why}") and len(err.splitlines()) == 1
    assert "R1 " in out
    # a command about that pack alone says the same in one line
    for argv in (("prompt", "--pack", str(r2rml_pack), "--question", "shop-Q1",
                  "--condition", "R1"),
                 ("check", "--pack", str(r2rml_pack), "--no-needs"),
                 ("power", "--pack", str(r2rml_pack), "--tier", "L3", "--simulations", "10"),
                 ("validate", str(r2rml_pack))):
        code, out, err = _cli(capsys, *argv, *root, "--cache", str(kg_cache))
        assert code == 2, (argv, out, err)
        assert err.startswith(f"kgbench: {why}") and len(err.splitlines()) == 1, (argv, err)


def test_kgbench_list_says_which_packs_cannot_run_here(capsys, monkeypatch) -> None:
    monkeypatch.delenv("KGBENCH_EXTERNAL", raising=False)
    code, out, err = _cli(capsys, "list", "--root", str(REPO))
    assert code == 0, err
    packs = out.split("agents:")[0].splitlines()
    assert packs[0] == "packs:"
    rows = {line.split()[0]: line for line in packs[1:]}
    assert set(rows) == {"ck25", "credit", "cwd-acme", "research"}
    assert "not run here: its graph lives outside the repository" in rows["ck25"]
    assert "not run here: its data lives outside the repository" in rows["cwd-acme"]
    assert "not run here" not in rows["credit"] + rows["research"]


def test_pytest_leaves_it_out_with_the_same_line(r2rml_pack: Path, project) -> None:
    p = project()
    result = p.runpytest(f"--pack=credit,{r2rml_pack}", "--condition", "R1", "-k", "Q01")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"not run: pack shop skipped: {r2rml_pack / 'pack.yaml'}: "
                                 "field 'rdf.r2rml': *morph_kgc*"])
