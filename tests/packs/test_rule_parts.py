"""A pack's rules run a group of the graph at a time (packs/rdf/rule_parts.py): the parts'
output is the whole graph's, byte for byte, when the pack names the predicates its rules join
by; and the comparison would see a pack that names too few."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.packs.build import build_variant
from pytest_kgbench.packs.rdf import ontology, rule_parts
from pytest_kgbench.packs.rdf.ontology import derive_file, to_sorted_ntriples
from pytest_kgbench.packs.schema import load_pack

REPO = Path(__file__).resolve().parents[2]
SHAPES = (REPO / "ontology" / "credit" / "shapes.ttl").read_text(encoding="utf-8")
CR = "https://kgbench.example/credit/def#"


def _source(credit_pack, variant: str, kg_cache: Path, tmp_path: Path) -> Path:
    source = tmp_path / "g.nt"
    source.write_text(to_sorted_ntriples(build_variant(credit_pack, variant, kg_cache).graph),
                      encoding="utf-8")
    return source


def _parts_seen(monkeypatch) -> list[list[int]]:
    """Each split's parts, by their lines (a spy on split_parts)."""
    seen: list[list[int]] = []
    split = rule_parts.split_parts

    def spy(*args, **kwargs):
        files = split(*args, **kwargs)
        seen.append([f.read_text(encoding="utf-8").count("\n") for f in files])
        return files

    monkeypatch.setattr(rule_parts, "split_parts", spy)
    return seen


@pytest.mark.parametrize("variant", ["base", "chains", "large"])
def test_the_rules_in_parts_derive_what_they_derive_whole(credit_pack, kg_cache, tmp_path,
                                                           monkeypatch, variant) -> None:
    """credit's rules, on each of 7 parts of its graph in turn (the groups its pack.yaml's
    rules.grouped_by links, countries in every part), derive the whole graph's triples: the
    same file, byte for byte (chains: ownership chains up to 24 deep, each in one part)."""
    source = _source(credit_pack, variant, kg_cache, tmp_path)
    whole, parted = tmp_path / "whole.nt", tmp_path / "parted.nt"
    n = derive_file(source, SHAPES, whole, tmp_path, part_bytes=0)
    seen = _parts_seen(monkeypatch)
    groups = rule_parts.rule_groups(credit_pack)
    assert derive_file(source, SHAPES, parted, tmp_path, groups=groups,
                       part_bytes=source.stat().st_size // 7 + 1) == n > 500
    assert len(seen) == 1 and len(seen[0]) == 7, "the graph was split in 7"
    lines = source.read_text(encoding="utf-8").count("\n")
    assert all(0 < count < lines for count in seen[0])  # each a part, none the whole
    assert sum(seen[0]) > lines  # the countries' triples in every part
    assert parted.read_bytes() == whole.read_bytes()
    assert not [p for p in tmp_path.iterdir() if ".in" in p.name or ".spill" in p.name
                or ".part" in p.name]  # the parts' files and spill removed


def test_a_pack_naming_too_few_predicates_is_seen_by_that_comparison(
        credit_pack, kg_cache, tmp_path) -> None:
    """Without cr:parent and cr:child, an ownership chain is cut across parts and its
    ancestors are lost: the comparison above fails on such a pack (its test has teeth)."""
    source = _source(credit_pack, "chains", kg_cache, tmp_path)
    whole, parted = tmp_path / "whole.nt", tmp_path / "parted.nt"
    derive_file(source, SHAPES, whole, tmp_path, part_bytes=0)
    derive_file(source, SHAPES, parted, tmp_path, part_bytes=source.stat().st_size // 7 + 1,
                groups=frozenset({CR + "lei", CR + "issuer", CR + "ratedEntity"}))
    lost = set(whole.read_text(encoding="utf-8").splitlines()) - \
        set(parted.read_text(encoding="utf-8").splitlines())
    assert any(f"<{CR}ancestor>" in line for line in lost)


def test_a_small_graph_or_a_pack_without_groups_runs_whole(credit_pack, kg_cache, tmp_path,
                                                            monkeypatch) -> None:
    """Parts only from ON_DISK_FROM bytes of input, and only for a pack naming its groups."""
    source = _source(credit_pack, "base", kg_cache, tmp_path)
    seen = _parts_seen(monkeypatch)
    groups = rule_parts.rule_groups(credit_pack)
    derive_file(source, SHAPES, tmp_path / "a.nt", tmp_path, groups=groups)
    derive_file(source, SHAPES, tmp_path / "b.nt", tmp_path, part_bytes=1000)
    assert not seen
    monkeypatch.setattr(ontology, "ON_DISK_FROM", 1)
    monkeypatch.setattr(rule_parts, "PART_BYTES", source.stat().st_size // 3 + 1)
    derive_file(source, SHAPES, tmp_path / "c.nt", tmp_path, groups=groups)
    assert len(seen) == 1 and len(seen[0]) == 3
    assert (tmp_path / "c.nt").read_bytes() == (tmp_path / "a.nt").read_bytes()


@pytest.mark.parametrize("entry,said", [
    ({"grouped_by": ["nope:lei"]}, "neither an IRI nor a CURIE"),
    ({"grouped_by": "cr:lei"}, "must list predicates"),
    ({"grouped": ["cr:lei"]}, "one key, grouped_by"),
])
def test_a_bad_rules_entry_names_its_field(tmp_path, entry, said) -> None:
    import yaml

    folder = tmp_path / "credit"
    folder.mkdir()
    manifest = yaml.safe_load((REPO / "datasets" / "credit" / "pack.yaml").read_text())
    manifest["rules"] = entry
    (folder / "pack.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    pack = load_pack(folder, ontology_dir=REPO / "ontology" / "credit")
    with pytest.raises(InputError, match=said) as caught:
        rule_parts.rule_groups(pack)
    assert caught.value.field.startswith("rules") and "pack.yaml" in str(caught.value)


def test_a_rules_worker_writing_to_stdout_does_not_wait_for_the_build(tmp_path) -> None:
    """The build reads its rules' worker's pipe only once it waits for it: anything a library
    prints in the worker (DuckDB's progress bar in the split, at 1,000,000 issuers) must not
    fill that pipe and stop the worker until then. Here derive_dump prints 1 MB and the pipe
    is not read until the worker has exited: it exits, and its answer is the one line."""
    import json
    import subprocess
    import sys

    code = ("import sys; from pytest_kgbench.packs.rdf import ontology as o\n"
            "def noisy(*a, **k):\n    print('x' * (1 << 20)); return 7\n"
            "o.derive_dump = noisy; o._derive_worker(sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", code, "in.nt", "out.nt", str(tmp_path), "[]"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert json.loads(proc.stdout.read().decode()) == {"count": 7}
