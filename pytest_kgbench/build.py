"""Building a pack variant: every artefact the conditions need, written once per machine into
the cache (under a file lock, so xdist workers never race) and read back as a `Built`.

The schema (`packs.py`) is below this module; the engines' writers (DuckDB files, RDF, rules)
are called from here, so nothing below imports the pipeline.

A cached build is checked before it is used: its manifest holds the size and SHA-256 of every
file it wrote (the DuckDB files too), and a build whose files do not match (a truncated
executed.duckdb, a file deleted) is rebuilt; if it cannot be, the harness halts with one line
naming the folder — never a DuckDB traceback per item.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pytest_kgbench.errors import HarnessBroken, InputError
from pytest_kgbench.packs import Pack, Tables, check_tables, normalise_id, read_tables, write_csv

BUILD_FORMAT = 9  # bump when a variant's layout or an artefact's form changes (5: id prefixes,
#                   the manifest's integrity; 6/7: the persona views; 8: an OWL vocabulary
#                   rendered to definitions.md, R2RML graphs; 9: data.ttl by pyoxigraph)
FULL, RESTRICTED = "full", "restricted"  # the views: every column, or none a persona withholds


@dataclass(frozen=True)
class StoreFiles:
    """The files one view of a variant's stores are opened on."""

    view: str
    duckdb: Path
    executed_duckdb: Path | None
    data: Path           # the graph: Turtle (full) or N-Triples (restricted)
    data_format: str     # its rdflib format name
    derived_nt: Path | None
    prefixes: Path       # the Turtle file whose @prefix lines name the graph's prefixes


@dataclass
class Built:
    """A variant built on disk: CSV, DuckDB file, RDF, rendered definitions, manifest."""

    pack: Pack
    variant: str
    seed: int
    dir: Path
    manifest: Mapping[str, Any]

    @property
    def csv_dir(self) -> Path:
        return self.dir / "csv"

    @property
    def duckdb_path(self) -> Path:
        return self.dir / "raw.duckdb"

    @property
    def data_ttl(self) -> Path:
        return self.dir / "data.ttl"

    @property
    def definitions_md(self) -> Path:
        return self.dir / "definitions.md"

    @property
    def executed_csv_dir(self) -> Path:
        return self.dir / "executed"

    @property
    def executed_duckdb_path(self) -> Path:
        return self.dir / "executed.duckdb"

    @property
    def derived_nt(self) -> Path:
        return self.dir / "derived.nt"

    def files(self, view: str = FULL) -> StoreFiles:
        """The store files of a view: `full` (the variant as built) or `restricted` (a copy
        without the personal columns and their triples, for personas that may not read them:
        what a store does not hold, no query can return)."""
        base = self.dir if view == FULL else self.dir / view
        if not (base / "raw.duckdb").is_file():
            raise HarnessBroken(f"{self.pack.name}/{self.variant} has no '{view}' build "
                                f"(in {self.dir})")
        executed = base / "executed.duckdb"
        derived = base / "derived.nt"
        data = base / ("data.ttl" if view == FULL else "data.nt")
        return StoreFiles(view=view, duckdb=base / "raw.duckdb",
                          executed_duckdb=executed if executed.is_file() else None,
                          data=data, data_format="turtle" if view == FULL else "nt",
                          derived_nt=derived if derived.is_file() else None,
                          prefixes=self.data_ttl)

    @cached_property
    def executed(self) -> Tables:
        """Typed rows of every executed table (the definitions applied in code)."""
        return read_tables(self.executed_csv_dir, self.pack.executed_tables)

    @cached_property
    def derived_graph(self) -> Any:
        """The raw graph plus every triple the pack's SHACL rules derive (parsed once)."""
        return self.load_graph(derived=True)

    def load_graph(self, store: str = "default", *, derived: bool = False,
                   ontology: bool = False) -> Any:
        """An rdflib Graph of the raw data (plus the rule-derived triples, plus the definitions'
        triples) held by the rdflib store plugin `store` ("default" is rdflib's own memory;
        an engine module names its own). Loaded once per process and combination."""
        import rdflib

        cache = self.__dict__.setdefault("_graphs", {})
        key = (store, derived, ontology)
        if key in cache:
            return cache[key]
        if store == "default" and not derived and not ontology:
            graph = self.graph
        else:
            graph = rdflib.Graph(store=store)
            for prefix, ns in self.graph.namespace_manager.namespaces():
                graph.bind(prefix, ns)
            graph.parse(self.data_ttl, format="turtle")
            if derived:
                graph.parse(self.derived_nt, format="nt")
            if ontology:
                graph.parse(self.pack.definitions_ttl, format="turtle")
        cache[key] = graph
        return graph

    @cached_property
    def tables(self) -> Tables:
        """Typed rows of every raw table, read back from the built CSV files."""
        return read_tables(self.csv_dir, self.pack.tables)

    @cached_property
    def graph(self) -> Any:
        """The raw data as an rdflib Graph (parsed once per process)."""
        import rdflib

        graph = rdflib.Graph()
        graph.parse(self.data_ttl, format="turtle")
        return graph

    @cached_property
    def aliases(self) -> dict[str, dict[str, str]]:
        """entity kind -> {normalised alias: canonical id}, from the manifest's `entities`."""
        out: dict[str, dict[str, str]] = {}
        for kind, spec in self.pack.entities.items():
            rows = self.tables[spec["table"]]
            id_col = spec["id"]
            mapping: dict[str, str] = {}
            for row in rows:
                canonical = row.get(id_col)
                if canonical is None:
                    continue
                for col in [id_col, *spec.get("aliases", [])]:
                    if row.get(col) is not None:
                        mapping.setdefault(normalise_id(str(row[col])), str(canonical))
            out[kind] = mapping
        return out


def build_dir(pack: Pack, variant: str, seed: int, cache_dir: Path) -> Path:
    from pytest_kgbench.version import __version__

    tag = hashlib.sha256(
        f"{pack.fingerprint}|{variant}|{seed}|{BUILD_FORMAT}|{__version__}".encode()
    ).hexdigest()[:16]
    return cache_dir / pack.name / f"{variant}-{seed}-{tag}"


def build_variant(pack: Pack, variant: str, cache_dir: Path, *, seed: int | None = None,
                  progress: Callable[[str], None] | None = None) -> Built:
    """Build (or load from the cache) one variant, under a file lock so workers never race.
    `progress` is told when a build starts and how long it took (a cache hit says nothing)."""
    from filelock import FileLock

    if variant not in pack.variants:
        raise InputError(str(pack.dir / "pack.yaml"), f"no variant '{variant}' "
                         f"(known: {', '.join(pack.variants)})", field="variants")
    seed = pack.seed if seed is None else seed
    target = build_dir(pack, variant, seed, cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        why = damaged(target) if (target / "manifest.json").is_file() else None
        if why is not None or not (target / "manifest.json").is_file():
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            started = time.perf_counter()
            if progress is not None:
                progress(f"building {pack.name}/{variant} (seed {seed})…"
                         + (f" the cached build is damaged: {why}" if why else ""))
            write_variant(pack, variant, seed, tmp)
            try:
                shutil.rmtree(target, ignore_errors=why is None)
                tmp.rename(target)
            except OSError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise HarnessBroken(f"the cached build {target} is damaged ({why}) and cannot "
                                    f"be replaced ({exc}): delete that folder") from exc
            still = damaged(target)
            if still is not None:  # pragma: no cover - a disk that does not keep what it wrote
                raise HarnessBroken(f"the cached build {target} is damaged ({still}) even "
                                    "after a rebuild: delete that folder")
            if progress is not None:
                progress(f"built {pack.name}/{variant} in {time.perf_counter() - started:.1f} s")
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    return Built(pack=pack, variant=variant, seed=seed, dir=target, manifest=manifest)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def integrity(folder: Path) -> dict[str, list[Any]]:
    """[size, SHA-256] of every file of a build but its manifest, by relative path."""
    return {p.relative_to(folder).as_posix(): [p.stat().st_size, _sha256(p)]
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def damaged(folder: Path) -> str | None:
    """Why a cached build cannot be trusted (its manifest unreadable, a file missing, cut short
    or changed), or None."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        wanted = dict(manifest["integrity"])
    except (OSError, ValueError, KeyError, TypeError):
        return "its manifest.json is unreadable or holds no checksums"
    for rel, (size, digest) in wanted.items():
        path = folder / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != size:
            return f"{rel} is {path.stat().st_size} bytes, not {size}"
        if _sha256(path) != digest:
            return f"{rel} does not match its checksum"
    return None


def write_variant(pack: Pack, variant: str, seed: int, out: Path) -> None:
    """Write every artefact of a variant into `out` (an empty folder)."""
    from pytest_kgbench import ontology, rdfmap
    from pytest_kgbench.executors.sql import create_database

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    tables = pack.generate(variant, seed)
    check_tables(pack, tables)
    csv_dir = out / "csv"
    csv_dir.mkdir()
    for name, spec in pack.tables.items():
        write_csv(csv_dir / f"{name}.csv", spec, tables[name])
    typed = read_tables(csv_dir, pack.tables)  # what every consumer reads: the files
    create_database(out / "raw.duckdb", pack.tables, csv_dir)
    graph = data_graph(pack, typed, out)
    (out / "data.ttl").write_text(rdfmap.to_turtle(graph), encoding="utf-8")
    seconds["raw"] = round(time.perf_counter() - started, 3)
    supplied = pack.ontology_file("definitions.md")
    if supplied is not None:
        shutil.copyfile(supplied, out / "definitions.md")
    elif pack.definitions_ttl.is_file():
        (out / "definitions.md").write_text(
            ontology.render_markdown(pack.definitions_ttl.read_text(encoding="utf-8")),
            encoding="utf-8")
    rows: Tables = {}
    if pack.executed_tables:
        started = time.perf_counter()
        fn = pack.callable(str(pack.manifest["executed"]["function"]), field_name="executed")
        rows = fn(typed)
        check_tables(pack, rows, pack.executed_tables, "executed.tables")
        (out / "executed").mkdir()
        for name, spec in pack.executed_tables.items():
            write_csv(out / "executed" / f"{name}.csv", spec, rows[name])
        create_database(out / "executed.duckdb", pack.executed_tables, out / "executed")
        seconds["executed"] = round(time.perf_counter() - started, 3)
    shapes = pack.ontology_file("shapes.ttl")
    derived = None
    if shapes is not None:
        started = time.perf_counter()
        derived = ontology.run_rules(graph, shapes.read_text(encoding="utf-8"))
        (out / "derived.nt").write_text(ontology.to_sorted_ntriples(derived), encoding="utf-8")
        seconds["shacl_rules"] = round(time.perf_counter() - started, 3)
    views: dict[str, Any] = {}
    if any(pack.personal.values()):
        started = time.perf_counter()
        views[RESTRICTED] = write_restricted(pack, out, typed, graph, derived, rows)
        seconds["restricted"] = round(time.perf_counter() - started, 3)
    manifest = {
        "build_seconds": seconds,
        "pack": pack.name, "variant": variant, "seed": seed, "format": BUILD_FORMAT,
        "pack_sha256": pack.fingerprint,
        "tables": {name: {"columns": [list(c) for c in spec.columns], "rows": len(typed[name])}
                   for name, spec in pack.tables.items()},
        "triples": len(graph),
        "views": views,
        "files": {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                  for p in sorted(out.rglob("*")) if p.is_file() and p.suffix != ".duckdb"},
        "integrity": integrity(out),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True),
                                       encoding="utf-8")


def data_graph(pack: Pack, typed: Tables, out: Path) -> Any:
    """The variant's graph: the pack's own mapping over the tables (`rdf.tables`), a supplied
    graph file (`rdf.file`), the tables through an R2RML mapping run by morph-kgc
    (`rdf.r2rml`), or no graph at all (the pack's graph conditions are then skipped)."""
    import rdflib

    from pytest_kgbench import rdfmap

    rdf = pack.rdf
    if rdf.get("tables"):
        return rdfmap.map_tables(typed, pack.tables, rdf)
    graph = rdflib.Graph()
    for prefix, iri in (rdf.get("prefixes") or {}).items():
        graph.bind(prefix, iri)
    if rdf.get("file"):
        path = pack.resolve_file(str(rdf["file"]))
        try:
            graph.parse(path)
        except Exception as exc:  # noqa: BLE001 - any parser's complaint, named with the file
            raise InputError(str(path), f"is not an RDF graph rdflib can read: {exc}") from exc
    elif rdf.get("r2rml"):
        from pytest_kgbench.r2rml import materialize

        for triple in materialize(pack.resolve_file(str(rdf["r2rml"])), out / "raw.duckdb",
                                  pack.tables, where=str(pack.dir / "pack.yaml")):
            graph.add(triple)
    rdfmap.bind_id_namespaces(graph, rdf)
    return graph


def write_restricted(pack: Pack, out: Path, typed: Tables, graph: Any, derived: Any,
                     executed: Tables | None = None) -> dict[str, Any]:
    """Write the restricted view into `out/restricted`: the databases without the personal
    columns, the graph and the rule-derived triples without their predicates. The rules are
    run again on the restricted graph when they mention a personal predicate (so nothing they
    derive from it survives); otherwise their output, filtered, is the same and is reused.
    Raises if a personal value still appears in what the view keeps: the graph (a subject or
    reference template built from a personal column) or an executed table's other columns (a
    rule that copied it under another name)."""
    from pytest_kgbench import ontology, rdfmap
    from pytest_kgbench.executors.sql import create_database

    withheld = {t: frozenset(c) for t, c in pack.personal.items() if c}
    for table, tmap in (pack.rdf.get("tables") or {}).items():
        templates = [str(tmap.get("subject") or "")] + [
            str(e.get("ref")) for e in (tmap.get("columns") or {}).values()
            if isinstance(e, dict) and e.get("ref")]
        used = set().union(*(rdfmap.template_columns(t) for t in templates))
        if used & withheld.get(table, frozenset()):
            raise InputError(str(pack.dir / "pack.yaml"), f"an IRI template of table {table} "
                             f"uses a personal column ({', '.join(sorted(used & withheld[table]))}"
                             f"): the restricted graph could not leave it out",
                             field=f"rdf.tables.{table}")
    props = rdfmap.personal_properties(withheld, pack.rdf)
    predicates = {p for p, _, _, _ in props}
    folder = out / RESTRICTED
    folder.mkdir()
    create_database(folder / "raw.duckdb", pack.tables, out / "csv", withheld=withheld)
    if pack.executed_tables:
        create_database(folder / "executed.duckdb", pack.executed_tables, out / "executed",
                        withheld=withheld)
    # N-Triples, a triple a line: the personal predicates' lines are simply left out
    (folder / "data.nt").write_text(_drop(ontology.to_sorted_ntriples(graph), predicates),
                                    encoding="utf-8")
    rerun = False
    if derived is not None:
        shapes = pack.ontology_file("shapes.ttl")
        text = shapes.read_text(encoding="utf-8") if shapes else ""
        rerun = any(p in text or p.rsplit("#", 1)[-1].rsplit("/", 1)[-1] in text
                    for p in predicates)
        restricted = ontology.run_rules(_without(graph, predicates), text) if rerun else derived
        (folder / "derived.nt").write_text(
            _drop(ontology.to_sorted_ntriples(restricted), predicates), encoding="utf-8")
    values = {str(row[c]) for t, cols in withheld.items() for row in typed.get(t, [])
              for c in cols if row.get(c) is not None and len(str(row[c])) >= GRAM}
    for name in ("data.nt", "derived.nt"):
        path = folder / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if appears_in(values, text):
                raise InputError(str(pack.dir / "pack.yaml"), f"a personal value appears in "
                                 f"the restricted {name}: a rule or template copies it")
    for table, table_rows in (executed or {}).items():
        drop = withheld.get(table, frozenset())
        kept = "\0".join({v for row in table_rows for c, v in row.items()
                           if c not in drop and isinstance(v, str)})
        if appears_in(values, kept):
            raise InputError(str(pack.dir / "pack.yaml"), f"a personal value appears in the "
                             f"executed table {table} under another column: name that column "
                             f"in `personal` too", field="personal")
    return {"withheld": {t: sorted(c) for t, c in sorted(withheld.items())},
            "predicates": sorted(predicates), "rules_rerun": rerun}


def _drop(ntriples: str, predicates: set[str]) -> str:
    """N-Triples text without the lines of `predicates` (N-Triples puts the predicate, an
    IRI, second on its line: a subject holds no space)."""
    marks = {f"<{p}>" for p in predicates}
    return "".join(line for line in ntriples.splitlines(keepends=True)
                   if line.split(" ", 2)[1:2] != [] and line.split(" ", 2)[1] not in marks)


GRAM = 4  # the shortest personal value looked for


def appears_in(values: set[str], text: str) -> bool:
    """Whether any of `values` (each at least GRAM characters) occurs in `text`, in time that
    grows with len(text) + the values' total length, not their product: a value is searched
    for only when every GRAM-character piece of it occurs in the text."""
    import numpy as np

    if not values or len(text) < GRAM:
        return False

    def grams(data: bytes) -> Any:
        """Every GRAM-byte window of `data` as one integer (GRAM = 4: a uint32)."""
        b = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
        n = len(b) - GRAM + 1
        return b[:n] << 24 | b[1:n + 1] << 16 | b[2:n + 2] << 8 | b[3:n + 3]

    present = set(np.unique(grams(text.encode("utf-8"))).tolist())
    for value in values:
        encoded = value.encode("utf-8")
        if len(encoded) >= GRAM and present.issuperset(grams(encoded).tolist()) \
                and value in text:
            return True
    return False


def _without(graph: Any, predicates: set[str]) -> Any:
    """A copy of `graph` (prefixes kept) without the triples of `predicates`."""
    import rdflib

    out = rdflib.Graph()
    for prefix, ns in graph.namespace_manager.namespaces():
        out.bind(prefix, ns)
    for triple in graph:
        if str(triple[1]) not in predicates:
            out.add(triple)
    return out
