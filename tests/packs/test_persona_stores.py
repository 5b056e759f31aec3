"""Withheld data is absent from the persona's store: the restricted view of a variant is built
once with it, fingerprinted in its manifest, and opened for every persona that may not read
personal data; its databases lack the columns and its graph the triples."""

from __future__ import annotations

import hashlib
import json

import duckdb
import pytest

from pytest_kgbench.core import conditions
from pytest_kgbench.engines.stores import guard_for, open_store
from pytest_kgbench.packs.build import RESTRICTED, _without, build_variant
from pytest_kgbench.packs.rdf.ontology import run_rules, to_sorted_ntriples


@pytest.fixture(scope="module", params=["credit", "research"])
def built(request, credit_base, research_base):
    return credit_base if request.param == "credit" else research_base


def _values(built) -> set[str]:
    return {str(r[c]) for t, cols in built.pack.personal.items()
            for r in built.tables[t] for c in cols if r.get(c)}


def test_the_restricted_databases_lack_the_personal_columns(built) -> None:
    files = built.files(RESTRICTED)
    assert files.duckdb != built.duckdb_path and files.executed_duckdb is not None
    for path, specs in ((files.duckdb, built.pack.tables),
                        (files.executed_duckdb, built.pack.executed_tables)):
        con = duckdb.connect(str(path), read_only=True)
        for table, cols in built.pack.personal.items():
            if table not in specs:
                continue
            have = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
            assert have and not have & cols, (path, table)
            assert have == {c for c, _ in specs[table].columns} - cols
        whole = str([con.execute(f'SELECT * FROM "{t}"').fetchall() for t in specs])
        con.close()
        assert not [v for v in _values(built) if v in whole]


def test_the_restricted_graph_lacks_the_personal_triples(built) -> None:
    files = built.files(RESTRICTED)
    guard = guard_for(built, "analyst")
    for path in (files.data, files.derived_nt):
        assert path is not None
        text = path.read_text(encoding="utf-8")
        assert not [v for v in _values(built) if v in text], path
        assert not [p for p in guard.personal_predicates if p in text], path


def test_the_view_is_fingerprinted_in_the_manifest(built) -> None:
    view = built.manifest["views"][RESTRICTED]
    assert view["withheld"] == {t: sorted(c) for t, c in built.pack.personal.items()}
    files = built.manifest["files"]
    for name in ("restricted/data.nt", "restricted/derived.nt"):
        assert files[name] == hashlib.sha256((built.dir / name).read_bytes()).hexdigest()


def test_filtered_rules_are_the_rules_run_on_the_restricted_graph(built) -> None:
    """The restricted derived graph is the full one without the personal predicates; that is
    what running the rules on the restricted graph gives, when the rules name none of them."""
    guard = guard_for(built, "analyst")
    assert not built.manifest["views"][RESTRICTED]["rules_rerun"]
    shapes = built.pack.ontology_file("shapes.ttl")
    restricted = _without(built.graph, set(guard.personal_predicates))
    rerun = run_rules(restricted, shapes.read_text(encoding="utf-8"))
    assert to_sorted_ntriples(_without(rerun, set(guard.personal_predicates))) == \
        built.files(RESTRICTED).derived_nt.read_text(encoding="utf-8")


@pytest.mark.parametrize("cid", ["D1", "D3", "D4", "D5", "D6"])
def test_each_persona_opens_its_own_view(credit_base, cid: str) -> None:
    cond = conditions.by_id(cid)
    for persona, view in (("analyst", RESTRICTED), ("privacy_officer", "full")):
        ex = open_store(credit_base, cond, persona)
        files = credit_base.files(view)
        if cond.language == "sql":
            path = (files.executed_duckdb if cond.data == "executed" else files.duckdb)
            opened = ex.info["settings"]["database"]  # as DuckDB in the store's worker says
            assert opened == str(path), persona
        else:
            loaded = json.dumps(ex.worker.config["files"])
            assert str(files.data) in loaded, persona
        contacts = next(t for t in ex.catalog() if t.name in ("contacts", "cr:Contact"))
        assert bool(contacts.withheld) == (persona == "analyst")
        text = ex.describe(contacts.name)
        assert ("withheld from persona 'analyst'" in text) == (persona == "analyst")
        ex.close()


def test_the_store_block_names_withheld_properties_the_graph_does_not_hold(credit_base) -> None:
    ex = open_store(credit_base, "sparql", "analyst")
    block = ex.store_block()
    assert "cr:Contact" in block and "(withheld from you: cr:email, cr:phone)" in block
    for name in ("cr:Contact", "https://kgbench.example/credit/def#Contact"):
        assert ex.describe(name).startswith("class cr:Contact ("), name
    assert ex.describe("cr:Nothing").startswith("ERROR")
    ex.close()


def test_a_personal_value_kept_under_another_name_fails_the_build(credit_pack, tmp_path) -> None:
    """The view is built by column name; a value copied into another column or an IRI would
    survive that, so the build looks for the values themselves and refuses."""
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.packs.build import GraphFiles, write_restricted

    built = build_variant(credit_pack, "base", tmp_path / "cache")
    rows = {"contacts": [dict(r, name=r["email"]) for r in built.executed["contacts"]]}
    out = tmp_path / "out"
    for folder in ("csv", "executed"):
        (out / folder).mkdir(parents=True)
        for f in (built.dir / folder).iterdir():
            (out / folder / f.name).write_bytes(f.read_bytes())
    graph = out / "graph.nt"
    graph.write_text(to_sorted_ntriples(built.graph), encoding="utf-8")
    files = GraphFiles(count=len(built.graph), sorted_nt=graph, restricted_nt=None)
    with pytest.raises(InputError, match="under another column"):
        write_restricted(credit_pack, out, built.tables, files, None, rows)


def test_a_personal_value_kept_under_another_name_in_the_database_fails_too(credit_pack,
                                                                             tmp_path) -> None:
    """A build checks its executed tables in the DuckDB file it wrote (their rows freed before):
    the same copy, read from there, is refused, and the file as built passes."""
    from pytest_kgbench.core.errors import InputError
    from pytest_kgbench.packs.build import check_personal, personal_values
    from pytest_kgbench.packs.schema import write_csv
    from pytest_kgbench.packs.tables import create_database

    built = build_variant(credit_pack, "base", tmp_path / "cache")
    values = personal_values(credit_pack, built.tables)
    assert values
    check_personal(credit_pack, built.dir, values, built.dir / "executed.duckdb")
    folder = tmp_path / "executed"
    folder.mkdir()
    for f in (built.dir / "executed").iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    spec = credit_pack.executed_tables["issuers"]  # a contact's e-mail as an issuer's name
    email = next(r["email"] for r in built.executed["contacts"] if r["email"])
    write_csv(folder / "issuers.csv", spec,
              [dict(r, legal_name=email) if i == 0 else r
               for i, r in enumerate(built.executed["issuers"])])
    create_database(tmp_path / "executed.duckdb", credit_pack.executed_tables, folder)
    with pytest.raises(InputError, match="executed table issuers under another column"):
        check_personal(credit_pack, built.dir, values, tmp_path / "executed.duckdb")


def test_an_engine_opens_from_the_stores_files_alone(credit_base, tmp_path) -> None:
    """`StoreKind.open` takes the build's files (`StoreSource`), not the build: a source made
    by hand over copies of the files opens every shipped in-process engine, and each answers
    as it does over the build itself."""
    import dataclasses
    import shutil

    from pytest_kgbench.engines.stores import store_kind
    from pytest_kgbench.packs.build import StoreFiles, StoreSource

    made = credit_base.source
    views = {}
    for view, files in made.views.items():
        copied = {}
        for f in dataclasses.fields(StoreFiles):
            value = getattr(files, f.name)
            if isinstance(value, type(files.duckdb)):
                target = tmp_path / view / value.name
                target.parent.mkdir(exist_ok=True)
                shutil.copyfile(value, target)
                value = target
            copied[f.name] = value
        views[view] = StoreFiles(**copied)
    hand = StoreSource(pack="credit", variant="base", seed=made.seed, fingerprint="by-hand",
                       home=tmp_path, views=views, tables=made.tables,
                       executed_tables=made.executed_tables, ontology=made.ontology, rdf=made.rdf,
                       readers=made.readers, personal=made.personal)
    queries = {"sql": "SELECT COUNT(*) AS n FROM contacts",
               "sparql": "SELECT (COUNT(?c) AS ?n) WHERE { ?c a cr:Contact }"}
    for language, data in (("sql", "raw"), ("sql", "executed"), ("sparql", "derived")):
        kind = store_kind(language)
        for persona in ("analyst", "privacy_officer"):
            guard = guard_for(credit_base, persona)
            ours, theirs = kind.open(hand, data, guard), kind.open(made, data, guard)
            try:
                opened = (ours.info["settings"]["database"] if language == "sql"
                          else json.dumps(ours.worker.config["files"]))
                assert str(tmp_path) in opened and str(credit_base.dir) not in opened
                assert ours.catalog() == theirs.catalog(), (language, data, persona)
                got = ours.run(queries[language])
                assert got.error is None and got.rows == theirs.run(queries[language]).rows
            finally:
                ours.close()
                theirs.close()


def test_a_build_s_fingerprint_follows_its_files(credit_base, tmp_path) -> None:
    """A server names a build's schema or graph by its fingerprint: the same files give the
    same one, a file with another checksum another; a view the build lacks is named in one
    line."""
    import dataclasses

    from pytest_kgbench.core.errors import HarnessBroken
    from pytest_kgbench.packs.build import Built

    again = Built(pack=credit_base.pack, variant="base", seed=credit_base.seed,
                  dir=credit_base.dir, manifest=credit_base.manifest)
    assert again.source.fingerprint == credit_base.source.fingerprint
    files = dict(credit_base.manifest["files"])
    files["data.ttl"] = "0" * 64  # another data.ttl, as its checksum says
    other = dataclasses.replace(credit_base, manifest={**credit_base.manifest, "files": files})
    assert other.source.fingerprint != credit_base.source.fingerprint
    gone = Built(pack=credit_base.pack, variant="base", seed=credit_base.seed,
                 dir=tmp_path / "nothing", manifest={})
    with pytest.raises(HarnessBroken, match=r"credit/base has no 'restricted' build \(in "):
        gone.source.files(RESTRICTED)
