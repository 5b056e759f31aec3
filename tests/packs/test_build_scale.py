"""Builds that grow linearly: the tables mapped to RDF by DuckDB (rdfmap.write_ntriples) give
the graph the rdflib mapping gives (map_tables, the reference), in the same bytes; the rules
run from a file (ontology.derive_file) derive what run_rules derives; the leak check reads a
file a block at a time; and a pack's `scale:` entry names the sizes `kgbench build` builds."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_kgbench.cli import main
from pytest_kgbench.core.errors import InputError
from pytest_kgbench.packs import build as build_mod
from pytest_kgbench.packs.build import appears_in, appears_in_file, build_variant, data_graph
from pytest_kgbench.packs.rdf import mapping as rdfmap
from pytest_kgbench.packs.rdf.ontology import derive_file, run_rules, to_sorted_ntriples
from pytest_kgbench.packs.schema import TableSpec, write_csv
from pytest_kgbench.packs.tables import create_database

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pack,variant", [("credit", "base"), ("credit", "chains"),
                                          ("research", "base")])
def test_the_built_graph_is_the_reference_mapping_in_the_same_bytes(pack, variant, kg_cache,
                                                                     request) -> None:
    """data.ttl is to_turtle of map_tables' rdflib graph, byte for byte; the restricted
    data.nt is that graph's sorted N-Triples without the personal predicates."""
    source = request.getfixturevalue(f"{pack}_pack")
    built = build_variant(source, variant, kg_cache)
    reference = data_graph(source, built.tables, built.dir)
    assert len(reference) == built.manifest["triples"] > 1000
    assert built.data_ttl.read_text(encoding="utf-8") == rdfmap.to_turtle(reference)
    marks = {f"<{p}>" for p in build_mod.personal_predicates(source)}
    assert marks, "the pack withholds something"
    kept = "".join(line for line in to_sorted_ntriples(reference).splitlines(keepends=True)
                   if line.split(" ")[1] not in marks)
    restricted = (built.dir / "restricted" / "data.nt").read_text(encoding="utf-8")
    assert restricted == kept and len(restricted) < len(to_sorted_ntriples(reference))


ODD = TableSpec(name="things", columns=(
    ("id", "VARCHAR"), ("label", "VARCHAR"), ("n", "INTEGER"), ("x", "DOUBLE"),
    ("d", "DATE"), ("flag", "BOOLEAN"), ("at", "TIMESTAMP"), ("other", "VARCHAR")),
    primary_key="id")
ODD_ROWS = [
    {"id": "a b/ç", "label": 'say "hi"\\ back\nnow\ttab\x01', "n": -3, "x": 1e-05,
     "d": dt.date(2024, 2, 29), "flag": True, "at": dt.datetime(2024, 1, 2, 3, 4, 5),
     "other": "a b/ç"},
    {"id": "plain", "label": "naïve — ünïcode", "n": None, "x": 125.0, "d": None,
     "flag": False, "at": dt.datetime(2024, 1, 2, 3, 4, 5, 6000), "other": None},
    {"id": "big", "label": "", "n": 2 * 10 ** 9 // 2, "x": 1e20, "d": dt.date(1999, 12, 31),
     "flag": None, "at": None, "other": "plain"},
]
ODD_MAP = {"vocab": "ex", "prefixes": {"ex": "http://example.org/def#",
                                       "exi": "http://example.org/id/"},
           "tables": {"things": {"class": "ex:Thing", "subject": "exi:thing/{id}",
                                 "columns": {"other": {"predicate": "ex:other",
                                                       "ref": "exi:thing/{other}"},
                                             "n": "ex:count"}}}}


def test_odd_values_are_spelt_as_the_reference_spells_them(tmp_path) -> None:
    """Escapes, percent-encoding, non-ASCII, floats that are not plain decimals, timestamps,
    booleans and empty cells: the DuckDB mapping writes the reference graph's bytes."""
    from pytest_kgbench.packs.schema import read_tables

    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    write_csv(csv_dir / "things.csv", ODD, ODD_ROWS)
    typed = read_tables(csv_dir, {"things": ODD})
    create_database(tmp_path / "raw.duckdb", {"things": ODD}, csv_dir)
    reference = rdfmap.map_tables(typed, {"things": ODD}, ODD_MAP)
    out, turtle_order = tmp_path / "g.nt", tmp_path / "t.nt"
    count, ids, heads = rdfmap.write_ntriples(
        tmp_path / "raw.duckdb", {"things": ODD}, ODD_MAP,
        {out: rdfmap.NtTarget(), turtle_order: rdfmap.NtTarget(order="turtle")}, tmp_path)
    assert count == len(reference) > 15
    assert out.read_text(encoding="utf-8") == to_sorted_ntriples(reference)
    assert rdfmap.id_prefixes(ids, ODD_MAP, {"ex"}) == [("thing", "http://example.org/id/thing/")]
    bound = {str(p): str(ns) for p, ns in reference.namespace_manager.namespaces()}
    ttl = tmp_path / "data.ttl"
    rdfmap.turtle_file(turtle_order, rdfmap.used_prefixes(bound, heads), ttl)
    assert ttl.read_text(encoding="utf-8") == rdfmap.to_turtle(reference)


def test_an_empty_subject_cell_is_the_packs_error(tmp_path) -> None:
    spec = TableSpec(name="t", columns=(("id", "VARCHAR"), ("v", "INTEGER")), primary_key="id")
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    write_csv(csv_dir / "t.csv", spec, [{"id": None, "v": 1}])
    create_database(tmp_path / "raw.duckdb", {"t": spec}, csv_dir)
    mapping = {"vocab": "ex", "prefixes": {"ex": "http://example.org/"},
               "tables": {"t": {"class": "ex:T", "subject": "ex:{id}"}}}
    with pytest.raises(InputError, match="subject template uses an empty cell"):
        rdfmap.write_ntriples(tmp_path / "raw.duckdb", {"t": spec}, mapping,
                              {tmp_path / "o.nt": rdfmap.NtTarget()}, tmp_path)


@pytest.mark.parametrize("field,mapping", [
    ("rdf.tables.t.subject", {"subject": "ex:a b/{id}"}),             # a space
    ("rdf.tables.t.subject", {"subject": "{id}"}),                    # the cell is the IRI
    ("rdf.tables.t.subject", {"subject": "rel:{id}"}),                # a relative IRI
    ("rdf.tables.t.class", {"class": "ex:<T>"}),
    ("rdf.tables.t.columns.v", {"columns": {"v": "ex:v alue"}}),
    ("rdf.tables.t.columns.v", {"columns": {"v": {"predicate": "ex:v",
                                                  "ref": "ex:x|{v}"}}}),
])
def test_a_template_that_makes_no_iri_is_the_packs_error(tmp_path, field, mapping) -> None:
    """The Turtle is laid out from a lenient parse of the mapping's N-Triples: a template,
    class or predicate that cannot make a valid absolute IRI is refused when the mapping is
    read, naming its field (before any file is written), not passed on to data.ttl."""
    spec = TableSpec(name="t", columns=(("id", "VARCHAR"), ("v", "INTEGER")), primary_key="id")
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    write_csv(csv_dir / "t.csv", spec, [{"id": "a", "v": 1}])
    create_database(tmp_path / "raw.duckdb", {"t": spec}, csv_dir)
    table = {"class": "ex:T", "subject": "ex:{id}", **mapping}
    out = tmp_path / "o.nt"
    with pytest.raises(InputError, match="does not make an IRI|starts with no known") as caught:
        rdfmap.write_ntriples(tmp_path / "raw.duckdb", {"t": spec},
                              {"vocab": "ex", "prefixes": {"ex": "http://example.org/",
                                                           "rel": "nope/"},
                               "tables": {"t": table}}, {out: rdfmap.NtTarget()}, tmp_path)
    assert caught.value.field == field and not out.exists()
    rdfmap.write_ntriples(tmp_path / "raw.duckdb", {"t": spec},  # the same table, good IRIs
                          {"vocab": "ex", "prefixes": {"ex": "http://example.org/"},
                           "tables": {"t": {"class": "ex:T", "subject": "ex:{id}"}}},
                          {out: rdfmap.NtTarget()}, tmp_path)
    assert out.read_text(encoding="utf-8").count("\n") == 3  # the type, id and v


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "on-disk"])
@pytest.mark.parametrize("defer", [False, True], ids=["in-turn", "last-rules-apart"])
def test_rules_run_from_the_file_derive_what_run_rules_derives(credit_base, tmp_path,
                                                               defer, on_disk) -> None:
    """pyshacl is the reference: every rule inserted in turn, and the rules no later rule
    reads run last, side by side, as CONSTRUCT queries (what a big build does), give its
    triples byte for byte — with the store in memory, and on disk (a big graph's: each rule
    inserted by a CONSTRUCT bulk-loaded), its folder removed after."""
    from pytest_kgbench.packs.rdf.ontology import deferred_rules, rule_io

    shapes = (REPO / "ontology" / "credit" / "shapes.ttl").read_text(encoding="utf-8")
    io = rule_io(shapes)
    assert io is not None and len(deferred_rules(io)) == 3  # the two periods, the parent
    source = tmp_path / "g.nt"
    source.write_text(to_sorted_ntriples(credit_base.graph), encoding="utf-8")
    out = tmp_path / "derived.nt"
    n = derive_file(source, shapes, out, tmp_path, defer=defer, on_disk=on_disk)
    assert not list(tmp_path.glob("derived.nt.*"))  # the dumps and the store removed
    expected = to_sorted_ntriples(run_rules(credit_base.graph, shapes, store="Oxigraph"))
    assert n == expected.count("\n") > 500
    assert out.read_text(encoding="utf-8") == expected
    assert credit_base.derived_nt.read_text(encoding="utf-8") == expected


def test_the_file_leak_check_finds_a_value_across_block_boundaries(tmp_path, monkeypatch
                                                                   ) -> None:
    text = ("x" * 37 + "ana.lopez@example.org" + "y" * 50 + "+44 20 7946 0001\n") * 3
    path = tmp_path / "t.nt"
    path.write_text(text, encoding="utf-8")
    for chunk in (5, 7, 16, 1 << 24):  # a value cut by every block edge, or in one block
        monkeypatch.setattr(build_mod, "CHUNK", chunk)
        assert appears_in_file({"ana.lopez@example.org"}, path)
        assert appears_in_file({"nobody@example.org", "7946 0001"}, path)
        assert not appears_in_file({"ana.lopez@example.com", "+44 20 7946 0002"}, path)
        assert appears_in({"ana.lopez@example.org"}, text)
        assert not appears_in({"ana.lopez@example.com"}, text)
    assert not appears_in_file(set(), path) and not appears_in_file({"abc"}, path)


def test_a_personal_value_in_the_graph_fails_the_build(credit_pack, tmp_path) -> None:
    """A phone number copied into a non-personal column reaches the restricted graph: the
    build refuses, naming the file."""
    import shutil

    pack_dir = tmp_path / "credit"
    shutil.copytree(credit_pack.dir, pack_dir, ignore=shutil.ignore_patterns("__pycache__"))
    gen = pack_dir / "generate.py"
    gen.write_text(gen.read_text(encoding="utf-8").replace(
        '"role": role or self.rng.choice(ROLES),',
        '"role": phone or "x",'), encoding="utf-8")
    from pytest_kgbench.packs.schema import load_pack

    pack = load_pack(pack_dir, name="credit_leak", ontology_dir=credit_pack.ontology_dir)
    assert any(r["role"].startswith("+") for r in pack.generate("base", pack.seed)["contacts"])
    with pytest.raises(InputError, match="personal value appears in the restricted data.nt"):
        build_variant(pack, "base", tmp_path / "cache")


def test_a_personal_value_a_rule_writes_fails_the_build(credit_pack, tmp_path) -> None:
    """A rule naming no personal predicate that still writes a personal value (here a
    contact's phone number as a constant) reaches the restricted derived.nt, a second name of
    the full one: the build refuses, naming the file — the check made beside its copy."""
    import shutil

    from pytest_kgbench.packs.schema import load_pack

    pack_dir, onto = tmp_path / "credit", tmp_path / "ontology"
    shutil.copytree(credit_pack.dir, pack_dir, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(credit_pack.ontology_dir, onto)
    shapes = onto / "shapes.ttl"
    shapes.write_text(shapes.read_text(encoding="utf-8") + '''
cr:Noted a sh:NodeShape ; sh:targetNode cr:shapes ;
    sh:rule [ a sh:SPARQLRule ; sh:order 5 ; sh:prefixes cr:shapes ;
              sh:construct """CONSTRUCT { ?x cr:note "+882 555 0142" }
                              WHERE { ?x a cr:Country }""" ] .
''', encoding="utf-8")
    pack = load_pack(pack_dir, name="credit_noted", ontology_dir=onto)
    assert "+882 555 0142" in {r["phone"] for r in pack.generate("base", pack.seed)["contacts"]}
    with pytest.raises(InputError, match="personal value appears in the restricted derived.nt"):
        build_variant(pack, "base", tmp_path / "cache")
    shapes.write_text(shapes.read_text(encoding="utf-8").replace('"+882 555 0142"', '"noted"'),
                      encoding="utf-8")
    built = build_variant(load_pack(pack_dir, name="credit_noted", ontology_dir=onto), "base",
                          tmp_path / "cache")  # the same rule with a harmless constant
    restricted = built.dir / "restricted" / "derived.nt"
    assert restricted.samefile(built.derived_nt) and '"noted"' in restricted.read_text("utf-8")


def test_a_scaled_variant_is_the_named_one_with_its_size(credit_pack, research_pack) -> None:
    assert credit_pack.scale == {"issuers": "large"} and research_pack.scale == {"works": "large"}
    assert credit_pack.params("issuers=1000") == {"issuers": 1000}
    assert research_pack.params("works=50") == {"works": 50}
    assert credit_pack.params("large") == {"issuers": 300}
    assert credit_pack.has_variant("issuers=45") and credit_pack.has_variant("chains")
    assert not credit_pack.has_variant("huge") and not research_pack.has_variant("issuers=9")
    for bad, why in (("issuers=0", "positive whole number"), ("issuers=01", "positive"),
                     ("issuers=x", "positive"), ("chains=3", "not a size this pack scales"),
                     ("huge", "no variant 'huge'.*issuers=N")):
        with pytest.raises(InputError, match=why):
            credit_pack.params(bad)


def test_kgbench_build_takes_the_packs_own_size_flag(credit_base, tmp_path, capsys) -> None:
    """`--issuers N` is declared by the credit pack (`scale:`), not by the plugin; the size is
    a variant of its own, cached and fingerprinted like any other, the same bytes each time."""
    args = ["build", "--pack", "credit", "--root", str(REPO), "--cache", str(tmp_path / "c")]
    assert main([*args, "--issuers", "45"]) == 0
    first = capsys.readouterr().out
    assert "credit/issuers=45 seed" in first
    rows = int(first.split("  issuers: ")[1].split(" rows")[0])
    assert rows > credit_base.manifest["tables"]["issuers"]["rows"]  # base has 40
    assert main([*args, "--scale", "issuers=45"]) == 0  # the same build, from the cache
    assert capsys.readouterr().out.split(": ", 1)[1].split(" (")[0] == \
        first.split(": ", 1)[1].split(" (")[0]
    folder = next((tmp_path / "c" / "credit").glob("issuers=45-*[0-9a-f]"))
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["variant"] == "issuers=45" and manifest["integrity"]
    assert build_mod.build_dir(_pack(), "issuers=45", manifest["seed"], tmp_path / "c") == folder
    assert main([*args, "--works", "5"]) == 2  # research's size, not credit's
    assert "--works (the sizes pack credit scales: --issuers N)" in capsys.readouterr().err
    assert main([*args, "--issuers"]) == 2
    assert "needs a number" in capsys.readouterr().err


def _pack():
    from pytest_kgbench.packs.schema import find_pack

    return find_pack("credit", REPO / "datasets", REPO / "ontology")


def test_other_commands_still_refuse_unknown_arguments(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["validate", "credit", "--issuers", "5"])
    assert "unrecognized arguments: --issuers 5" in capsys.readouterr().err


def test_a_rule_becomes_the_update_inserting_its_template() -> None:
    from pytest_kgbench.packs.rdf.ontology import as_insert

    rule = ('PREFIX ex: <http://example.org/>\nCONSTRUCT { ?x ex:note "a } b" . } '
            'WHERE { ?x ex:p ?y . FILTER(?y != "}") }')
    update = as_insert(rule)
    assert update is not None
    filled = update.format(into="GRAPH <g>", using="USING <r>")
    assert filled == ('PREFIX ex: <http://example.org/>\nINSERT { GRAPH <g> {  ?x ex:note '
                      '"a } b" .  } } USING <r> WHERE { ?x ex:p ?y . FILTER(?y != "}") }')
    for plain_only in ("CONSTRUCT WHERE { ?s ?p ?o }",
                       "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o } LIMIT 5",
                       "CONSTRUCT { ?s ?p ?o } FROM <g> WHERE { ?s ?p ?o }",
                       "SELECT * WHERE { ?s ?p ?o }"):
        assert as_insert(plain_only) is None, plain_only


def test_a_rule_that_is_no_plain_construct_is_run_as_run_rules_runs_it(tmp_path) -> None:
    from test_rules import DATA, SHAPES, _graph

    shapes = SHAPES.replace('sh:construct "CONSTRUCT { ?y ex:parentOf ?x } WHERE { ?x '
                            'ex:childOf ?y }"', 'sh:construct "CONSTRUCT { ?y ex:parentOf ?x } '
                            'WHERE { ?x ex:childOf ?y } LIMIT 100"')
    assert shapes != SHAPES
    source = tmp_path / "g.nt"
    source.write_text(to_sorted_ntriples(_graph(DATA)), encoding="utf-8")
    for text in (SHAPES, shapes):
        out = tmp_path / "d.nt"
        assert derive_file(source, text, out, tmp_path) > 0
        assert out.read_text(encoding="utf-8") == to_sorted_ntriples(run_rules(_graph(DATA),
                                                                              text))


def _reference_write_csv(path: Path, spec: TableSpec, rows: list[dict]) -> None:
    """write_csv as it was, a cell at a time: the bytes the column-wise writer must keep."""
    import csv

    from pytest_kgbench.packs.schema import format_value

    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(spec.column_names)
        for row in rows:
            writer.writerow([format_value(row.get(c)) for c in spec.column_names])


def _reference_read(path: Path, spec: TableSpec) -> list[dict]:
    import csv

    from pytest_kgbench.packs.schema import parse_value

    with path.open(encoding="utf-8", newline="") as fh:
        return [{c: parse_value(r.get(c) or "", t) for c, t in spec.columns}
                for r in csv.DictReader(fh)]


def test_csv_is_written_a_column_at_a_time_as_a_cell_at_a_time(tmp_path) -> None:
    """The column-wise write_csv gives the bytes the cell-wise one gave, and they read back
    to the same rows: mixed types in a column, empty cells, quotes, commas, newlines, a
    missing key, a column of one type (the fast paths) and of several (format_value's)."""
    from pytest_kgbench.packs.schema import read_csv_rows

    rows = ODD_ROWS + [
        {"id": "c,d", "label": None, "n": 7, "x": 2.5, "d": dt.date(2020, 1, 1), "flag": True,
         "at": None, "other": 'q"uote'},
        {"id": "only", "n": 0, "x": 3.0},                          # keys missing: empty cells
        {"id": 5, "label": True, "n": 1.0, "x": -0.0, "d": dt.date(2021, 5, 6),
         "flag": False, "at": dt.date(2020, 2, 2), "other": "multi\nline"},  # odd types
    ]
    for subset in (rows, rows[:3], [r for r in rows if isinstance(r.get("id"), str)], []):
        new, old = tmp_path / "new.csv", tmp_path / "old.csv"
        write_csv(new, ODD, subset)
        _reference_write_csv(old, ODD, subset)
        assert new.read_bytes() == old.read_bytes()
        assert read_csv_rows(new, ODD) == _reference_read(old, ODD)
    odd = tmp_path / "odd.csv"  # blank lines, a short row, a long row, a column not read
    odd.write_text("id,n,extra,n\n\na,1,x,2\nb\n\nc,,y,,z,w\n", encoding="utf-8")
    spec = TableSpec(name="t", columns=(("id", "VARCHAR"), ("n", "INTEGER"),
                                        ("gone", "DATE")), primary_key="id")
    assert read_csv_rows(odd, spec) == _reference_read(odd, spec) == [
        {"id": "a", "n": 2, "gone": None}, {"id": "b", "n": None, "gone": None},
        {"id": "c", "n": None, "gone": None}]
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    assert read_csv_rows(tmp_path / "empty.csv", spec) == []


def test_the_unordered_grams_are_the_ordered_ones() -> None:
    """The leak check's zero-copy grams of a block are _grams' windows, in another order."""
    import random

    import numpy as np

    rng = random.Random(7)
    for n in range(0, 41):
        data = bytes(rng.randrange(256) for _ in range(n))
        ordered, unordered = build_mod._grams(data), build_mod._grams_unordered(data)
        assert unordered.dtype == np.uint32 and len(ordered) == len(unordered) == max(n - 3, 0)
        assert (np.sort(ordered) == np.sort(unordered)).all()


def test_dropping_predicates_a_block_at_a_time_drops_what_a_line_at_a_time_drops(
        tmp_path, monkeypatch) -> None:
    """_drop_file copies a block without the predicates whole: the same bytes as a line at a
    time, whatever the block size (a line cut by a block edge, a line without a space, a
    carriage return, the last line without its end)."""
    lines = ['<a> <p> "x" .\n', '<b> <email> "ana@x.example" .\n', '<c> <q> <d> .\n',
             "nospace\n", '<e> <p> "tab\tin" .\r\n', "\n", '<f> <phone> "555" .\n',
             '<g> <p> "ünï" .\n', '<h> <p> "end" .']
    text = "".join(lines) * 5
    source = tmp_path / "s.nt"
    source.write_bytes(text.encode("utf-8"))

    def line_at_a_time(predicates: set[str]) -> bytes:
        marks = {f"<{p}>" for p in predicates}
        with source.open(encoding="utf-8") as fh:
            return "".join(line for line in fh if line.split(" ", 2)[1:2] != []
                           and line.split(" ", 2)[1] not in marks).encode("utf-8")

    clean = tmp_path / "clean.nt"
    clean.write_text('<a> <p> "x" .\n<c> <q> <d> .\n' * 1000, encoding="utf-8")
    for chunk in (3, 7, 16, 50, 1 << 24):
        monkeypatch.setattr(build_mod, "CHUNK", chunk)
        for predicates in (set(), {"email"}, {"email", "phone", "nothing"}):
            out = tmp_path / "o.nt"
            build_mod._drop_file(source, out, predicates)
            assert out.read_bytes() == line_at_a_time(predicates), (chunk, predicates)
        build_mod._drop_file(clean, tmp_path / "c.nt", {"email"})
        assert (tmp_path / "c.nt").read_bytes() == clean.read_bytes()
        # nothing to drop: a second name of the same file, no bytes written
        assert (tmp_path / "c.nt").stat().st_ino == clean.stat().st_ino
        before = clean.read_bytes()
        build_mod._drop_file(source, tmp_path / "c.nt", {"email"})  # written over the link
        assert clean.read_bytes() == before
        assert (tmp_path / "c.nt").read_bytes() == line_at_a_time({"email"})


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "on-disk"])
@pytest.mark.parametrize("defer", [False, True], ids=["in-turn", "last-rules-apart"])
def test_a_derived_triple_the_raw_graph_holds_however_spelt_is_not_derived(tmp_path, defer,
                                                                            on_disk) -> None:
    """derive_file leaves out what the raw graph already holds, compared as pyoxigraph spells
    it: a raw triple written with escapes (`\\u0041` for `A`) or another spelling of a
    datatype is still the triple a rule derives again, and is not in the output — also when
    the rule is one no later rule reads (it writes a predicate of the raw graph: inserted in
    turn, not run apart)."""
    from test_rules import SHAPES

    source = tmp_path / "g.nt"
    source.write_text(
        '<http://example.org/b> <http://example.org/childOf> <http://example.org/a> .\n'
        '<http://example.org/c> <http://example.org/childOf> <http://example.org/b> .\n'
        '<http://example.org/a> <http://example.org/parentOf> <http://example.org/b> .\n'
        '<http://example.org/c> <http://example.org/name> "\\u0041" .\n', encoding="utf-8")
    shapes = SHAPES.replace(
        'sh:construct "CONSTRUCT { ?x ex:grand ?z } WHERE { ?x ex:parentOf ?y . ?y ex:parentOf'
        ' ?z }"', 'sh:construct "CONSTRUCT { ?z ex:name \\"A\\" } WHERE { ?x ex:parentOf ?y'
        ' . ?y ex:parentOf ?z }"')
    assert shapes != SHAPES
    out = tmp_path / "d.nt"
    assert derive_file(source, shapes, out, tmp_path, defer=defer, on_disk=on_disk) == 1
    assert out.read_text(encoding="utf-8") == (
        "<http://example.org/b> <http://example.org/parentOf> <http://example.org/c> .\n")
    assert not list(tmp_path.glob("d.nt.*"))  # the dump is gone


def test_the_turtle_layout_of_a_block_is_that_of_its_lines() -> None:
    """rdfmap._layout_block gives _turtle_layout's bytes for any cut of pyoxigraph's Turtle
    into blocks of whole lines: subjects, tab-indented lines, blank lines, a tab line first,
    a carriage return, a last line without its end, pyoxigraph's own @prefix lines."""
    text = ("@prefix ex: <http://example.org/> .\n@prefix b: <http://b/> .\nex:a a ex:T ;\n"
            "\tex:p \"x\" ;\n\tex:q ex:b .\n\nex:b ex:p \"tab\tin\" .\nex:c ex:p \"r\r\" .\n"
            "\tex:q 1 .\nex:d ex:p 2 .")
    lines = text.splitlines(keepends=True)
    for start in range(len(lines)):
        for stop in range(start + 1, len(lines) + 1):
            part = "".join(lines[start:stop])
            with_text = part.replace("\r\n", "\n").replace("\r", "\n")
            pieces = with_text.split("\n")
            reference = "".join(rdfmap._turtle_layout([], [p + "\n" for p in pieces[:-1]] + (
                [pieces[-1]] if pieces[-1] else [])))
            assert rdfmap._layout_block(part.encode("utf-8")) == reference.encode("utf-8"), (
                start, stop)
    clean = "".join(line for line in lines if "\r" not in line)
    assert b"\n\n" in rdfmap._layout_block(clean.encode("utf-8"))


@pytest.mark.parametrize("pack", ["credit", "research"])
def test_a_big_builds_rules_read_their_predicates_in_a_process_of_their_own(
        pack, kg_cache, tmp_path, monkeypatch, request) -> None:
    """Past RULES_APART, the rules load only the triples of the predicates they name
    (ontology.rule_predicates) and run in a worker process beside the rest of the build
    (ontology.derive_apart), started as soon as that input is written, before the graph is
    sorted: every file is the one the small path writes, byte for byte."""
    from pytest_kgbench.packs.rdf import ontology

    source = request.getfixturevalue(f"{pack}_pack")
    small = build_variant(source, "base", kg_cache)
    started: list[Path] = []
    apart = ontology.derive_apart

    def spy(ntriples: Path, *args: object) -> object:
        started.append(ntriples)
        # the rules start on their input alone: before the graph is sorted for the Turtle
        assert ntriples.stat().st_size > 0
        assert not (ntriples.parent / "turtle-order.nt").exists()
        return apart(ntriples, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(build_mod, "RULES_APART", 0)
    monkeypatch.setattr(ontology, "derive_apart", spy)
    big = build_variant(source, "base", tmp_path / "cache")
    assert started and started[0].name == "rules.nt", "the worker path ran"
    assert big.manifest["build_seconds"]["shacl_rules"] >= 0
    files = {rel: digest for rel, (_, digest) in small.manifest["integrity"].items()
             if not rel.endswith(".duckdb")}
    assert {rel: digest for rel, (_, digest) in big.manifest["integrity"].items()
            if not rel.endswith(".duckdb")} == files
    assert "derived.nt" in files and "restricted/derived.nt" in files
    shapes = (REPO / "ontology" / pack / "shapes.ttl").read_text(encoding="utf-8")
    named = ontology.rule_predicates(shapes)
    assert named and "http://www.w3.org/1999/02/22-rdf-syntax-ns#type" in named
    assert not any(p.endswith(("#email", "#phone")) for p in named)


@pytest.mark.parametrize("pack", ["credit", "research"])
def test_a_big_graph_sorted_a_range_of_subjects_at_a_time_is_the_same_graph(
        pack, kg_cache, tmp_path, monkeypatch, request) -> None:
    """Past SORT_IN_PARTS bytes of lines, the mapped lines are made distinct and sorted a range
    of subjects at a time (rdfmap._sorted_parts): every file is the one the whole-graph sort
    writes, byte for byte, and no part is left in the scratch folder."""
    source = request.getfixturevalue(f"{pack}_pack")
    whole = build_variant(source, "base", kg_cache)
    calls: list[int] = []
    parts = rdfmap._sorted_parts

    def spy(con: object, mapped: str, size: int, work: Path) -> int:
        calls.append(size)
        count = parts(con, mapped, size, work)
        assert not (work / "kg-parts").exists()
        return count

    monkeypatch.setattr(rdfmap, "SORT_IN_PARTS", 0)
    monkeypatch.setattr(rdfmap, "PART_BYTES", 4096)  # many ranges, some of one subject
    monkeypatch.setattr(rdfmap, "_sorted_parts", spy)
    split = build_variant(source, "base", tmp_path / "cache")
    assert calls and calls[0] > 20 * 4096, "the graph was sorted in many parts"
    files = {rel: digest for rel, (_, digest) in whole.manifest["integrity"].items()
             if not rel.endswith(".duckdb")}
    assert {rel: digest for rel, (_, digest) in split.manifest["integrity"].items()
            if not rel.endswith(".duckdb")} == files
    assert split.dir.name == whole.dir.name and split.manifest["triples"] == \
        whole.manifest["triples"]


def test_odd_values_sorted_in_parts_are_the_reference_graph(tmp_path, monkeypatch) -> None:
    """The odd values' graph sorted a range of subjects at a time: the same bytes."""
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    write_csv(csv_dir / "things.csv", ODD, ODD_ROWS)
    create_database(tmp_path / "raw.duckdb", {"things": ODD}, csv_dir)
    from pytest_kgbench.packs.schema import read_tables

    reference = rdfmap.map_tables(read_tables(csv_dir, {"things": ODD}), {"things": ODD},
                                  ODD_MAP)
    monkeypatch.setattr(rdfmap, "SORT_IN_PARTS", 0)
    monkeypatch.setattr(rdfmap, "PART_BYTES", 64)
    out = tmp_path / "g.nt"
    count, _, _ = rdfmap.write_ntriples(tmp_path / "raw.duckdb", {"things": ODD}, ODD_MAP,
                                        {out: rdfmap.NtTarget()}, tmp_path)
    assert count == len(reference)
    assert out.read_text(encoding="utf-8") == to_sorted_ntriples(reference)


def test_a_build_failing_beside_its_rules_worker_ends_it(credit_pack, tmp_path,
                                                         monkeypatch) -> None:
    """A build that fails while its rules run apart does not leave the worker going on alone
    (it held gigabytes at 200,000 issuers): the worker is stopped and has exited."""
    from pytest_kgbench.packs.rdf import ontology

    workers: list[object] = []
    apart = ontology.derive_apart

    def spy(*args: object) -> object:
        workers.append(apart(*args))  # type: ignore[arg-type]
        return workers[-1]

    def fail(self: object, typed: object) -> None:
        raise RuntimeError("the executed tables failed")

    monkeypatch.setattr(build_mod, "RULES_APART", 0)
    monkeypatch.setattr(ontology, "derive_apart", spy)
    monkeypatch.setattr(build_mod._Build, "write_executed", fail)
    with pytest.raises(RuntimeError, match="executed tables failed"):
        build_variant(credit_pack, "base", tmp_path / "cache")
    assert len(workers) == 1
    assert workers[0].proc.poll() is not None  # type: ignore[attr-defined]
    assert not list((tmp_path / "cache" / "credit").glob("*.tmp*")), "nothing left behind"


def test_rule_predicates_are_none_when_any_predicate_could_be_read() -> None:
    """A variable or negated predicate, or a GRAPH clause, could read any triple: then no
    subset of the graph is claimed to be enough."""
    from test_rules import SHAPES

    from pytest_kgbench.packs.rdf.ontology import rule_predicates

    named = rule_predicates(SHAPES)
    assert named == {"http://example.org/grand", "http://example.org/parentOf",
                     "http://example.org/childOf"}
    rule = "CONSTRUCT { ?y ex:parentOf ?x } WHERE { ?x ex:childOf ?y }"
    for where in ("?x ?any ?y", "?x !ex:other ?y", "GRAPH ?g { ?x ex:childOf ?y }",
                  "?x ex:childOf ?y FILTER NOT EXISTS { ?y ?p ?x }"):
        assert rule_predicates(SHAPES.replace(rule, rule.replace("?x ex:childOf ?y", where))
                               ) is None, where
    path = rule.replace("?x ex:childOf ?y", "?x ex:childOf/^ex:sibling* ?y")
    assert rule_predicates(SHAPES.replace(rule, path)) == named | {"http://example.org/sibling"}


@st.composite
def _text_and_values(draw: st.DrawFn) -> tuple[str, set[str]]:
    """Values over a small alphabet, and a text made of some of them, pieces of them and
    filler: a value the text holds, one only its pieces are spread over, one it lacks."""
    values = draw(st.sets(st.text(alphabet="ab.@é", min_size=4, max_size=7), min_size=1,
                          max_size=6))
    pool = sorted(values)
    part = st.one_of(st.sampled_from(pool), st.sampled_from(pool).map(lambda v: v[:4]),
                     st.sampled_from(pool).map(lambda v: v[-4:]),
                     st.text(alphabet="ab.@é\n", max_size=6))
    return "".join(draw(st.lists(part, max_size=12))), values


@settings(max_examples=400, deadline=None)
@given(case=_text_and_values(), chunk=st.integers(min_value=5, max_value=24))
def test_the_leak_check_finds_exactly_the_values_a_plain_search_finds(case, chunk) -> None:
    """appears_in against `value in text`, over a small alphabet (pieces shared between
    values and found in one block but not another), with blocks of every small size: a
    piece the table drops once seen must still count in every later block, and a piece not
    yet seen must still be looked for."""
    text, values = case
    saved = build_mod.CHUNK
    build_mod.CHUNK = chunk
    try:
        assert appears_in(values, text) == any(v in text for v in values)
    finally:
        build_mod.CHUNK = saved


def test_a_piped_target_is_read_as_written_and_a_failing_reader_leaves_no_writer(
        tmp_path) -> None:
    """_copy_into: the reader gets the bytes a file would hold; a reader that raises before
    opening the pipe, or after reading a little, raises its own error, and the writer's
    thread is not left waiting on the pipe (the call returns)."""
    import threading

    import duckdb

    con = duckdb.connect()
    query = "SELECT 'line ' || range::VARCHAR FROM range(200000)"
    rdfmap._copy_lines(con, query, tmp_path / "file.nt")
    expected = (tmp_path / "file.nt").read_bytes()
    got: list[bytes] = []
    rdfmap._copy_into(con, query, tmp_path / "pipe.nt",
                      lambda: got.append((tmp_path / "pipe.nt").read_bytes()))
    assert got == [expected] and len(expected) > 1 << 20  # more than a pipe's buffer

    def never_opens() -> None:
        raise RuntimeError("the reader failed first")

    def reads_a_little() -> None:
        with (tmp_path / "pipe2.nt").open("rb") as fh:
            fh.read(10)
        raise RuntimeError("the reader failed midway")

    for name, reader in (("pipe1.nt", never_opens), ("pipe2.nt", reads_a_little)):
        raised: list[BaseException] = []

        def call(name: str = name, reader=reader) -> None:
            try:
                rdfmap._copy_into(con, query, tmp_path / name, reader)
            except RuntimeError as exc:
                raised.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(60)
        assert not caller.is_alive(), f"{reader.__name__}: the writer was left waiting"
        assert [str(e) for e in raised] and "the reader failed" in str(raised[0])
    assert not [t for t in threading.enumerate() if t.name == "kgbench-copy"]


def test_integrity_hashes_a_file_once_and_again_when_it_changes(tmp_path, monkeypatch) -> None:
    """A build hashes its files while its rules run and once more at the end: a file not
    changed since, or a hard link to one, is not read twice; a file changed since is."""
    import hashlib
    import os

    calls: list[str] = []
    real = build_mod._sha256
    monkeypatch.setattr(build_mod, "_sha256", lambda p: calls.append(p.name) or real(p))
    (tmp_path / "a.nt").write_bytes(b"<s> <p> <o> .\n")
    known: dict = {}
    first = build_mod.integrity(tmp_path, known)
    os.link(tmp_path / "a.nt", tmp_path / "b.nt")
    (tmp_path / "c.nt").write_bytes(b"<x> <p> <o> .\n")
    second = build_mod.integrity(tmp_path, known)
    assert calls == ["a.nt", "c.nt"]
    assert second["a.nt"] == second["b.nt"] == first["a.nt"]
    stat = (tmp_path / "c.nt").stat()
    (tmp_path / "c.nt").write_bytes(b"<y> <p> <o> .\n")  # the same size, other bytes
    os.utime(tmp_path / "c.nt", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    third = build_mod.integrity(tmp_path, known)
    assert third["c.nt"] == [14, hashlib.sha256(b"<y> <p> <o> .\n").hexdigest()]
    assert third == build_mod.integrity(tmp_path)  # as with nothing known


def test_a_rule_is_deferred_only_when_nothing_after_it_depends_on_it() -> None:
    """deferred_rules: a rule runs last, apart, only when no later rule reads what it writes
    and no later rule run in turn writes what it reads."""
    from pytest_kgbench.packs.rdf.ontology import deferred_rules

    def rule(reads: str, writes: str) -> tuple[frozenset[str], frozenset[str]]:
        return frozenset(reads.split()), frozenset(writes.split())

    # 0 feeds 1; 2 reads what nobody writes later; 3 reads 1's output, and is last
    assert deferred_rules([rule("a", "b"), rule("b", "c"), rule("a", "d"),
                           rule("c", "e")]) == {2, 3}
    # 1's output is read by 2, so 1 runs in turn; 0 reads what 1 writes: not deferred
    assert deferred_rules([rule("c", "x"), rule("a", "c"), rule("c", "y")]) == {2}
    # 0 reads what 2 writes; 2 is kept in turn (3 reads it), so 0 must run before it
    assert deferred_rules([rule("k", "x"), rule("a", "y"), rule("a", "k"),
                           rule("k", "z")]) == {1, 3}
    # 1 is dropped (2, run in turn, writes what it reads); then 0, which reads 1's output
    assert deferred_rules([rule("m", "x"), rule("k", "m"), rule("a", "k"),
                           rule("k", "z")]) == {3}


@settings(max_examples=60, deadline=None)
@given(seed=st.text(max_size=8), calls=st.lists(st.tuples(
    st.sampled_from(["choice", "randrange", "randrange1", "randint", "choices", "random",
                     "choices_k", "choices_list", "string"]),
    st.integers(min_value=-40, max_value=10 ** 12), st.integers(min_value=1, max_value=70)),
    max_size=60))
def test_draws_are_random_randoms_draws(seed, calls) -> None:
    """packs.Draws, the generators' faster random.Random, draws what random.Random draws for
    the same seed, call after call (and raises where it raises)."""
    import random

    from pytest_kgbench.packs.schema import Draws

    ours, theirs = Draws(seed), random.Random(seed)
    for name, a, n in calls:
        seq = tuple(range(a, a + n))
        weights = tuple((i % 5) + 0.5 for i in range(n))
        alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:max(n // 2, 1)]
        call = {
            "choice": lambda r: r.choice(seq),
            "randrange": lambda r: r.randrange(a, a + n),
            "randrange1": lambda r: r.randrange(n),
            "randint": lambda r: r.randint(a, a + n - 1),
            "choices": lambda r: r.choices(seq, weights),
            "random": lambda r: r.random(),
            "choices_k": lambda r: r.choices(seq, weights, k=3),
            "choices_list": lambda r: r.choices(seq, list(weights)),
            "string": lambda r: r.string(alphabet, n) if isinstance(r, Draws) else
            "".join(r.choice(alphabet) for _ in range(n)),
        }[name]
        assert call(ours) == call(theirs)
    for bad in (lambda r: r.choice(()), lambda r: r.randrange(5, 5),
                lambda r: r.choices((1, 2), (0, 0)), lambda r: r.choices((1, 2), (1,))):
        with pytest.raises((IndexError, ValueError)) as mine:
            bad(ours)
        with pytest.raises(type(mine.value)):
            bad(theirs)
    assert ours.getstate() == theirs.getstate()


def test_work_beside_the_build_raises_the_first_started_failure_once_all_is_done() -> None:
    """build.Beside: join waits for every thread and raises the failure of the work started
    first, even when a later one fails sooner; settle waits and raises nothing."""
    import threading
    import time

    from pytest_kgbench.packs.build import Beside

    done: list[str] = []
    release = threading.Event()

    def slow_failure() -> None:
        release.wait(5)
        done.append("slow")
        raise ValueError("first started")

    def quick_failure() -> None:
        done.append("quick")
        release.set()
        raise KeyError("second started")

    def last() -> None:
        time.sleep(0.05)
        done.append("last")

    beside = Beside()
    beside.start(slow_failure)
    beside.start(quick_failure)
    beside.start(last)
    with pytest.raises(ValueError, match="first started"):
        beside.join()
    assert sorted(done) == ["last", "quick", "slow"]
    with pytest.raises(KeyError):  # the other failure is still there, raised next
        beside.join()
    beside.join()  # nothing left
    quiet = Beside()
    quiet.start(slow_failure)
    quiet.settle()
    assert done.count("slow") == 2


def test_a_generated_row_with_other_columns_names_its_row_and_table(credit_pack) -> None:
    """check_tables: a row lacking a column, or holding one the manifest does not declare,
    is refused with its index and its table's field (a dict's keys compared as they are)."""
    from pytest_kgbench.packs.schema import check_tables

    tables = credit_pack.generate("base", credit_pack.seed)
    check_tables(credit_pack, tables)
    for k, broken in ((3, lambda r: r.pop("lei")), (0, lambda r: r.update(extra=1))):
        bad = {name: [dict(r) for r in rows] for name, rows in tables.items()}
        broken(bad["issuers"][k])
        with pytest.raises(InputError, match=f"row {k} has columns") as caught:
            check_tables(credit_pack, bad)
        assert caught.value.field == "tables.issuers"
