"""Building a pack variant: every artefact the conditions need, written once per machine into
the cache (under a file lock, so xdist workers never race) and read back as a `Built`.

The schema (`packs/schema.py`) is below this module; the engines' writers (DuckDB files, RDF, rules)
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
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import HarnessBroken, InputError
from pytest_kgbench.packs.schema import (
    Pack,
    Tables,
    TableSpec,
    check_tables,
    normalise_id,
    read_tables,
    write_csv,
)

BUILD_FORMAT = 10  # bump when a variant's layout or an artefact's form changes (5: id prefixes,
#                   the manifest's integrity; 6/7: the persona views; 8: an OWL vocabulary
#                   rendered to definitions.md, R2RML graphs; 9: data.ttl by pyoxigraph;
#                   10: one id prefix per class namespace, not per authorship)
FULL, RESTRICTED = "full", "restricted"  # the views: every column, or none a persona withholds
RULES_APART = 200_000  # cells (about the triples) from which a build's rules read only their
#                        predicates' triples, in a process of their own


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


@dataclass(frozen=True)
class StoreSource:
    """What an engine opens a built variant's stores from (`StoreKind.open`): the files of each
    view and what an engine must know about them (the tables' schemas, the definitions'
    triples, the RDF mapping's prefixes, who may read which columns), and nothing else of the
    build: no pack handle, no manifest. `Built.source` makes it; a test or another package's
    engine can make one from files alone."""

    pack: str
    variant: str
    seed: int
    fingerprint: str                         # changes whenever any file of the build does
    home: Path                               # a folder of the build's own (an engine's locks)
    views: Mapping[str, StoreFiles]          # FULL, and RESTRICTED where the build has it
    tables: Mapping[str, TableSpec]          # the raw tables' columns and types
    executed_tables: Mapping[str, TableSpec]  # the executed tables' (none: no executed data)
    ontology: Path | None                    # the definitions' Turtle, where the pack has one
    rdf: Mapping[str, Any]                   # the pack's RDF mapping (its declared prefixes)
    readers: Mapping[str, bool]              # persona -> may read the personal columns
    personal: Mapping[str, frozenset[str]]   # table -> its personal columns

    @property
    def label(self) -> str:
        """How messages name the build: pack/variant."""
        return f"{self.pack}/{self.variant}"

    def files(self, view: str = FULL) -> StoreFiles:
        """The store files of a view: `full` (the variant as built) or `restricted` (a copy
        without the personal columns and their triples, for personas that may not read them:
        what a store does not hold, no query can return)."""
        if view not in self.views:
            raise HarnessBroken(f"{self.label} has no '{view}' build (in {self.home})")
        return self.views[view]


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
        """The store files of a view (`StoreSource.files`)."""
        return self.source.files(view)

    def _view_files(self, view: str) -> StoreFiles | None:
        base = self.dir if view == FULL else self.dir / view
        if not (base / "raw.duckdb").is_file():
            return None
        executed = base / "executed.duckdb"
        derived = base / "derived.nt"
        data = base / ("data.ttl" if view == FULL else "data.nt")
        return StoreFiles(view=view, duckdb=base / "raw.duckdb",
                          executed_duckdb=executed if executed.is_file() else None,
                          data=data, data_format="turtle" if view == FULL else "nt",
                          derived_nt=derived if derived.is_file() else None,
                          prefixes=self.data_ttl)

    @cached_property
    def source(self) -> StoreSource:
        """What the engines open this build's stores from (its files, not this handle)."""
        views = {v: f for v in (FULL, RESTRICTED) if (f := self._view_files(v)) is not None}
        # the manifest's checksums of the build's files: the same on every host that builds
        # the same variant
        files = json.dumps(self.manifest.get("files") or {}, sort_keys=True)
        pack = self.pack
        return StoreSource(
            pack=pack.name, variant=self.variant, seed=self.seed,
            fingerprint=hashlib.sha256(files.encode()).hexdigest(), home=self.dir, views=views,
            tables=pack.tables, executed_tables=pack.executed_tables,
            ontology=pack.definitions_ttl if pack.definitions_ttl.is_file() else None,
            rdf=pack.rdf, readers={n: p.reads_personal for n, p in pack.personas.items()},
            personal=dict(pack.personal))

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
    from pytest_kgbench.core.version import __version__

    tag = hashlib.sha256(
        f"{pack.fingerprint}|{variant}|{seed}|{BUILD_FORMAT}|{__version__}".encode()
    ).hexdigest()[:16]
    return cache_dir / pack.name / f"{variant}-{seed}-{tag}"


def build_variant(pack: Pack, variant: str, cache_dir: Path, *, seed: int | None = None,
                  progress: Callable[[str], None] | None = None) -> Built:
    """Build (or load from the cache) one variant, under a file lock so workers never race.
    `progress` is told when a build starts and how long it took (a cache hit says nothing)."""
    from filelock import FileLock

    pack.params(variant)  # a named variant or a size the pack scales, or InputError
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
            try:
                write_variant(pack, variant, seed, tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)  # a big build's gigabytes not left
                raise
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


def integrity(folder: Path, known: dict[tuple[int, ...], str] | None = None
              ) -> dict[str, list[Any]]:
    """[size, SHA-256] of every file of a build but its manifest, by relative path. `known`
    (filled in here) holds the digests by file identity (device, inode, size, modification
    time): a file hashed before and not changed since, or a second name of one (a hard link),
    is not read again — a build hashes what it has written while it waits for its rules."""
    known = {} if known is None else known
    out: dict[str, list[Any]] = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name == "manifest.json":
            continue
        st = p.stat()
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in known:
            known[key] = _sha256(p)
        out[p.relative_to(folder).as_posix()] = [st.st_size, known[key]]
    return out


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
    build = _Build(pack, out, work=out.with_name(out.name + ".work"))
    started = time.perf_counter()
    counts = _write_tables(pack, variant, seed, out)
    # what every consumer reads: the files. A mapping of the tables is DuckDB's over the
    # database (and a big build's rules start on its output): the rows are read after it
    mapped = bool(pack.rdf.get("tables"))
    typed = {} if mapped else read_tables(out / "csv", pack.tables)
    shutil.rmtree(build.work, ignore_errors=True)
    build.work.mkdir()
    try:
        build.plan(counts)
        build.write_graph(typed)
        if mapped:
            typed = read_tables(out / "csv", pack.tables)
        build.seconds["raw"] = round(time.perf_counter() - started, 3)
        build.peak["raw"] = peak_rss_mib()
        _write_definitions(pack, out)
        values = personal_values(pack, typed) if build.restrict else set()
        build.start_restricted(values)
        build.write_executed(typed)
        views = build.finish(values)
    finally:
        build.beside.settle()  # on a failure, nothing left writing into a folder about to go
        build.checks.settle()
        build.stop_rules()  # a rules' worker not waited for (the build failed): ended
        shutil.rmtree(build.work, ignore_errors=True)
    build.write_manifest(variant, seed, counts, views)


def _write_tables(pack: Pack, variant: str, seed: int, out: Path) -> dict[str, int]:
    """The variant's tables generated, checked and written (csv/, raw.duckdb): their rows."""
    from pytest_kgbench.packs.tables import create_database

    tables = pack.generate(variant, seed)
    check_tables(pack, tables)
    csv_dir = out / "csv"
    csv_dir.mkdir()
    for name, spec in pack.tables.items():
        write_csv(csv_dir / f"{name}.csv", spec, tables[name])
    counts = {name: len(tables[name]) for name in pack.tables}
    del tables
    create_database(out / "raw.duckdb", pack.tables, csv_dir)
    return counts


def _write_definitions(pack: Pack, out: Path) -> None:
    """Write definitions.md: the pack's own, else rendered from its definitions.ttl (if any)."""
    from pytest_kgbench.packs.rdf import ontology

    supplied = pack.ontology_file("definitions.md")
    if supplied is not None:
        shutil.copyfile(supplied, out / "definitions.md")
    elif pack.definitions_ttl.is_file():
        (out / "definitions.md").write_text(
            ontology.render_markdown(pack.definitions_ttl.read_text(encoding="utf-8")),
            encoding="utf-8")


class Beside:
    """Work a build runs on threads beside its own, where it holds no Python lock for long
    (numpy's leak check, DuckDB writing a file): started now, joined before what reads it.
    join() raises the failure of the first work started that failed, once every thread is
    done (none is left writing): the same error whichever thread ends first."""

    def __init__(self) -> None:
        import threading

        self._threading = threading
        self._threads: list[Any] = []
        self._failed: dict[int, BaseException] = {}
        self._started = 0

    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        index = self._started
        self._started += 1

        def run() -> None:
            try:
                fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - raised by join, on the build's thread
                self._failed[index] = exc

        thread = self._threading.Thread(target=run, name=f"kgbench-{fn.__name__}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def join(self) -> None:
        self.settle()
        if self._failed:
            raise self._failed.pop(min(self._failed))

    def settle(self) -> None:
        """Wait for every thread, raising nothing (a failure stays for join)."""
        while self._threads:
            self._threads.pop(0).join()


def peak_rss_mib() -> float | None:
    """This process's peak resident memory so far, in MiB (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix
        return None
    import sys

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kib / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


@dataclass
class _Build:
    """One variant's build under way (write_variant): its folders, its times and peak memory
    per artefact, the digests hashed so far, the restricted view's plan, the rules' run (a
    big graph's beside the rest), and the work on threads beside it."""

    pack: Pack
    out: Path
    work: Path  # scratch: DuckDB's spill, the unsorted RDF
    seconds: dict[str, float] = field(default_factory=dict)
    peak: dict[str, float | None] = field(default_factory=dict)  # the peak RSS as each is done
    hashed: dict[tuple[int, ...], str] = field(default_factory=dict)  # integrity's, by identity
    restrict: bool = False
    predicates: frozenset[str] = frozenset()
    withheld: dict[str, frozenset[str]] = field(default_factory=dict)
    shapes_ttl: str | None = None
    rules: frozenset[str] | None = None  # the rules' predicates, when they run apart
    groups: frozenset[str] = frozenset()  # the predicates the rules join by (rule_parts)
    derived: Path | None = None
    waits: list[Callable[[], int]] = field(default_factory=list)
    rules_began: float = 0.0
    graph: GraphFiles | None = None
    beside: Beside = field(default_factory=Beside)  # joined before the restricted view's last steps
    checks: Beside = field(default_factory=Beside)  # joined once the rules are done

    def plan(self, counts: Mapping[str, int]) -> None:
        """Settle whether the build writes a restricted view (its folder made) and whether its
        rules run apart."""
        from pytest_kgbench.packs.rdf import ontology, rule_parts

        pack = self.pack
        self.restrict = any(pack.personal.values())
        self.predicates = personal_predicates(pack) if self.restrict else frozenset()
        if self.restrict:
            (self.out / RESTRICTED).mkdir()
        shapes = pack.ontology_file("shapes.ttl")
        self.shapes_ttl = shapes.read_text(encoding="utf-8") if shapes is not None else None
        # a big graph's rules read only the triples of their predicates, in a process of
        # their own (rdflib's parse of the rules costs ~0.5 s: not worth it for a small one)
        cells = sum(counts[name] * (len(spec.columns) + 1) for name, spec in pack.tables.items())
        self.rules = ontology.rule_predicates(self.shapes_ttl) \
            if self.shapes_ttl is not None and cells >= RULES_APART else None
        self.derived = self.out / "derived.nt" if self.shapes_ttl is not None else None
        self.groups = rule_parts.rule_groups(pack) if self.shapes_ttl is not None \
            else frozenset()
        self.withheld = withheld_columns(pack)

    def write_graph(self, typed: Tables) -> None:
        """Write the graph (write_graph), a big graph's rules started as soon as they can."""
        self.graph = write_graph(self.pack, typed, self.out, self.work,
                                 self.predicates if self.restrict else None, self.rules,
                                 then=self.start_rules)

    def start_rules(self, rules_input: Path) -> None:
        """Start a big graph's rules beside the rest, on their input file."""
        from pytest_kgbench.packs.rdf import ontology

        if self.derived is not None and self.shapes_ttl is not None and self.rules is not None:
            self.waits.append(ontology.derive_apart(rules_input, self.shapes_ttl, self.derived,
                                                    self.work, self.groups))
            self.rules_began = time.perf_counter()

    def start_restricted(self, values: set[str]) -> None:
        """Start the restricted graph's leak check and raw database beside the build."""
        from pytest_kgbench.packs.tables import create_database

        if self.restrict:  # the graph's leak check (numpy) and a database (DuckDB), off this thread
            self.beside.start(_check_file, self.pack, values, self.out / RESTRICTED / "data.nt")
            self.beside.start(create_database, self.out / RESTRICTED / "raw.duckdb",
                              self.pack.tables, self.out / "csv", withheld=self.withheld)

    def write_executed(self, typed: Tables) -> None:
        """Write the executed tables (csv, DuckDB) computed from the raw rows, which are
        cleared."""
        from pytest_kgbench.packs.rdf import ontology
        from pytest_kgbench.packs.tables import create_database

        pack, out = self.pack, self.out
        started = time.perf_counter()
        rows: Tables = {}
        if pack.executed_tables:
            fn = pack.callable(str(pack.manifest["executed"]["function"]),
                               field_name="executed")
            rows = fn(typed)
        typed.clear()  # the tables' Python rows: no longer read (while a big build's rules run)
        ontology.trim_heap()
        if not pack.executed_tables:
            return
        check_tables(pack, rows, pack.executed_tables, "executed.tables")
        (out / "executed").mkdir()
        for name, spec in pack.executed_tables.items():
            write_csv(out / "executed" / f"{name}.csv", spec, rows.pop(name))
        ontology.trim_heap()  # the executed rows too: the leak check reads the database
        create_database(out / "executed.duckdb", pack.executed_tables, out / "executed")
        if self.restrict:
            self.beside.start(create_database, out / RESTRICTED / "executed.duckdb",
                              pack.executed_tables, out / "executed", withheld=self.withheld)
        self.seconds["executed"] = round(time.perf_counter() - started, 3)
        self.peak["executed"] = peak_rss_mib()

    def rules_done(self) -> Path | None:
        """derived.nt, once written (the worker's, or derived here and now)."""
        from pytest_kgbench.packs.rdf import ontology

        if self.derived is None or "shacl_rules" in self.seconds:
            return self.derived
        if self.waits:
            begun = time.perf_counter()
            integrity(self.out, self.hashed)  # what is written, hashed while the rules run
            self.waits.pop()()
            self.seconds["shacl_rules"] = round(time.perf_counter() - self.rules_began, 3)
            self.seconds["shacl_rules_waited"] = round(time.perf_counter() - begun, 3)
        else:
            begun = time.perf_counter()
            assert self.shapes_ttl is not None and self.graph is not None
            ontology.derive_file(self.graph.rules_input, self.shapes_ttl, self.derived, self.work,
                                 groups=self.groups)
            self.seconds["shacl_rules"] = round(time.perf_counter() - begun, 3)
        self.peak["shacl_rules"] = peak_rss_mib()
        return self.derived

    def stop_rules(self) -> None:
        """End a rules' worker that was not waited for (a build failing beside it)."""
        while self.waits:
            stop = getattr(self.waits.pop(), "stop", None)
            if stop is not None:
                stop()

    def rules_then_checks(self) -> Path | None:
        """rules_done, and then the executed tables' check done (its failure raised)."""
        done = self.rules_done()
        self.checks.join()
        return done

    def finish(self, values: set[str]) -> dict[str, Any]:
        """The rules done, the work beside joined, the restricted view written: the views."""
        if not self.restrict:
            self.rules_done()
        self.beside.join()  # the databases, and data.nt's check: its failure is raised first
        views: dict[str, Any] = {}
        if not self.restrict:
            return views
        # the executed tables' check, beside the wait for the rules
        self.checks.start(check_personal, self.pack, self.out, values, self.out / "executed.duckdb"
                          if self.pack.executed_tables else None, graph=False)
        assert self.graph is not None
        started = time.perf_counter()
        views[RESTRICTED] = write_restricted(self.pack, self.out, {}, self.graph,
                                             self.rules_then_checks, values=values,
                                             databases=False)
        self.seconds["restricted"] = round(time.perf_counter() - started, 3)
        if "shacl_rules_waited" in self.seconds:  # the view's own time, not the wait for rules
            self.seconds["restricted"] = round(self.seconds["restricted"]
                                               - self.seconds["shacl_rules_waited"], 3)
        self.peak["restricted"] = peak_rss_mib()
        return views

    def write_manifest(self, variant: str, seed: int, counts: Mapping[str, int],
                       views: dict[str, Any]) -> None:
        """Write manifest.json: what was built, how long it took, every file's digest."""
        pack, out = self.pack, self.out
        assert self.graph is not None
        checked = integrity(out, self.hashed)  # each file read once, a block at a time
        manifest = {
            "build_seconds": self.seconds,
            "build_peak_rss_mib": self.peak,
            "pack": pack.name, "variant": variant, "seed": seed, "format": BUILD_FORMAT,
            "pack_sha256": pack.fingerprint,
            "tables": {name: {"columns": [list(c) for c in spec.columns], "rows": counts[name]}
                       for name, spec in pack.tables.items()},
            "triples": self.graph.count,
            "views": views,
            "files": {rel: digest for rel, (_, digest) in checked.items()
                      if not rel.endswith(".duckdb")},
            "integrity": checked,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True),
                                           encoding="utf-8")


@dataclass(frozen=True)
class GraphFiles:
    """The variant's graph as the build wrote it (write_graph)."""

    count: int             # its triples
    sorted_nt: Path | None  # every triple, sorted N-Triples (a scratch file), when written
    restricted_nt: Path | None  # the restricted view's data.nt, when there is one
    rules_nt: Path | None = None  # what the rules read, when not sorted_nt: the triples of
    #                               the predicates they name, in no order, perhaps a triple
    #                               twice (a scratch file)

    @property
    def rules_input(self) -> Path:
        path = self.rules_nt or self.sorted_nt
        assert path is not None, "write_graph wrote no file for the rules"
        return path


def withheld_columns(pack: Pack) -> dict[str, frozenset[str]]:
    """Table -> the personal columns the restricted view leaves out (tables with any)."""
    return {t: frozenset(c) for t, c in pack.personal.items() if c}


def personal_predicates(pack: Pack) -> frozenset[str]:
    """The IRIs of the predicates the restricted view leaves out."""
    from pytest_kgbench.packs.rdf import mapping as rdfmap

    withheld = withheld_columns(pack)
    return frozenset(p for p, _, _, _ in rdfmap.personal_properties(withheld, pack.rdf))


def write_graph(pack: Pack, typed: Tables, out: Path, work: Path,
                predicates: frozenset[str] | None,
                rules: frozenset[str] | None = None,
                then: Callable[[Path], None] | None = None) -> GraphFiles:
    """Write the variant's graph: `out/data.ttl` (to_turtle's Turtle), when `predicates` is
    given `out/restricted/data.nt` without them, and into `work` what the rules read: when
    `rules` names the predicates they use (ontology.rule_predicates), only those triples,
    else every triple, sorted. `then` is called with the rules' input file as soon as it is
    written (a big graph's before the graph is sorted and laid out as Turtle: the rules may
    run beside it). The Turtle is laid out as DuckDB writes the graph in its order, through
    a pipe (rdfmap.NtTarget's `consume`): that gigabyte never reaches the disk.

    A pack mapping its tables (`rdf.tables`) is mapped by DuckDB straight to files
    (rdfmap.write_ntriples): no graph is held in memory. A supplied graph file or an R2RML
    mapping is read into an rdflib graph first (data_graph)."""
    from pytest_kgbench.packs.rdf import mapping as rdfmap
    from pytest_kgbench.packs.rdf import ontology

    if pack.rdf.get("tables"):
        return _write_mapped_graph(pack, out, work, predicates, rules, then)
    sorted_nt = work / "graph.nt"
    restricted = out / RESTRICTED / "data.nt" if predicates is not None else None
    graph = data_graph(pack, typed, out)
    (out / "data.ttl").write_text(rdfmap.to_turtle(graph), encoding="utf-8")
    text = ontology.to_sorted_ntriples(graph)
    sorted_nt.write_text(text, encoding="utf-8")
    if restricted is not None:
        restricted.write_text(_drop(text, set(predicates or ())), encoding="utf-8")
    files = GraphFiles(count=len(graph), sorted_nt=sorted_nt, restricted_nt=restricted)
    if then is not None:
        then(files.rules_input)
    return files


def _write_mapped_graph(pack: Pack, out: Path, work: Path, predicates: frozenset[str] | None,
                        rules: frozenset[str] | None,
                        then: Callable[[Path], None] | None) -> GraphFiles:
    """write_graph's files for a pack mapping its tables, mapped by DuckDB (rdfmap's
    write_ntriples): the graph's files."""
    from pytest_kgbench.packs.rdf import mapping as rdfmap

    sorted_nt = work / "graph.nt"
    restricted = out / RESTRICTED / "data.nt" if predicates is not None else None
    in_order = work / "turtle-order.nt"
    rules_nt = work / "rules.nt" if rules is not None else None
    targets = {in_order: rdfmap.NtTarget(order="turtle",
                                         consume=partial(_lay_out, pack.rdf, out / "data.ttl"))}
    if rules_nt is not None:
        targets[rules_nt] = rdfmap.NtTarget(only=rules, order="any")
    else:
        targets[sorted_nt] = rdfmap.NtTarget()
    if restricted is not None:
        targets[restricted] = rdfmap.NtTarget(without=frozenset(predicates or ()))
    early = (lambda: then(rules_nt)) if then is not None and rules_nt is not None else None
    count, _, _ = rdfmap.write_ntriples(out / "raw.duckdb", pack.tables, pack.rdf, targets, work,
                                        early=early)
    in_order.unlink()
    files = GraphFiles(count=count, sorted_nt=None if rules_nt else sorted_nt,
                       restricted_nt=restricted, rules_nt=rules_nt)
    if then is not None and rules_nt is None:
        then(files.rules_input)
    return files


def _lay_out(rdf: Mapping[str, Any], data_ttl: Path, ntriples: Path, ids: set[str],
             heads: set[str]) -> None:
    """Write data.ttl from the graph in to_turtle's order, read as DuckDB writes it."""
    import rdflib

    from pytest_kgbench.packs.rdf import mapping as rdfmap

    bound = {str(p): str(ns) for p, ns in rdflib.Graph().namespace_manager.namespaces()}
    bound.update({str(p): str(ns) for p, ns in (rdf.get("prefixes") or {}).items()})
    bound["xsd"] = rdfmap._XSD
    ours = rdfmap.id_prefixes(ids, rdf, set(bound))
    spaces = {ns for _, ns in ours}
    bound = {p: n for p, n in bound.items() if n not in spaces}  # rdflib's replace=True
    bound.update(ours)
    rdfmap.turtle_file(ntriples, rdfmap.used_prefixes(bound, heads), data_ttl)


def data_graph(pack: Pack, typed: Tables, out: Path) -> Any:
    """The variant's graph as an rdflib graph: the pack's own mapping over the tables
    (`rdf.tables`, map_tables: the reference the build's DuckDB mapping is tested against),
    a supplied graph file (`rdf.file`), the tables through an R2RML mapping run by morph-kgc
    (`rdf.r2rml`), or no graph at all (the pack's graph conditions are then skipped)."""
    import rdflib

    from pytest_kgbench.packs.rdf import mapping as rdfmap

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
        from pytest_kgbench.packs.rdf.r2rml import materialize

        for triple in materialize(pack.resolve_file(str(rdf["r2rml"])), out / "raw.duckdb",
                                  pack.tables, where=str(pack.dir / "pack.yaml")):
            graph.add(triple)
    rdfmap.bind_id_namespaces(graph, rdf)
    return graph


def personal_values(pack: Pack, typed: Tables) -> set[str]:
    """The values of the personal columns (those of at least GRAM characters): what the
    restricted view must not hold anywhere."""
    withheld = withheld_columns(pack)
    return {str(row[c]) for t, cols in withheld.items() for row in typed.get(t, [])
            for c in cols if row.get(c) is not None and len(str(row[c])) >= GRAM}


def check_personal(pack: Pack, out: Path, values: set[str],
                   executed: Tables | Path | None, *, graph: bool = True) -> None:
    """Raise if a personal value appears in the restricted view's graph (`data.nt`, written;
    not with graph=False: a build checks it beside) or in an executed table's other columns:
    `executed` its rows, or the DuckDB file holding them (a build's executed.duckdb: its rows
    freed before, and each column's distinct strings counted by DuckDB)."""
    if graph:
        _check_file(pack, values, out / RESTRICTED / "data.nt")
    withheld = withheld_columns(pack)
    texts = _database_strings(executed, pack.executed_tables, withheld) \
        if isinstance(executed, Path) else (
            (table, {v for row in table_rows for c, v in row.items()
                     if c not in withheld.get(table, frozenset()) and isinstance(v, str)})
            for table, table_rows in (executed or {}).items())
    for table, strings in texts:
        if appears_in(values, "\0".join(strings)):
            raise InputError(str(pack.dir / "pack.yaml"), f"a personal value appears in the "
                             f"executed table {table} under another column: name that column "
                             f"in `personal` too", field="personal")


NOT_TEXT = frozenset({"INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "DATE", "TIMESTAMP", "BOOLEAN"})


def _database_strings(path: Path, specs: Mapping[str, Any],
                      withheld: Mapping[str, frozenset[str]]) -> Any:
    """(table, its distinct strings) for each table of `specs` in the DuckDB file `path`,
    from every text column (parse_value's: a type it does not read as another) but those
    `withheld`: what a table's rows would give as str, read by DuckDB."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        for name, spec in specs.items():
            cols = [c for c, t in spec.columns
                    if c not in withheld.get(name, frozenset()) and t not in NOT_TEXT]
            if not cols:
                continue
            union = " UNION ".join(f'SELECT "{c}" AS v FROM "{name}" WHERE "{c}" IS NOT NULL'
                                   for c in cols)
            yield name, [v for (v,) in con.execute(union).fetchall()]
    finally:
        con.close()


def _check_file(pack: Pack, values: set[str], path: Path) -> None:
    if path.is_file() and appears_in_file(values, path):
        raise InputError(str(pack.dir / "pack.yaml"), f"a personal value appears in the "
                         f"restricted {path.name}: a rule or template copies it")


# many parameters: values and databases, what a build did already, are keyword options
def write_restricted(pack: Pack, out: Path, typed: Tables, graph: GraphFiles,
                     derived: Path | Callable[[], Path | None] | None,
                     executed: Tables | None = None, *,
                     values: set[str] | None = None, databases: bool = True
                     ) -> dict[str, Any]:
    """Write the restricted view into `out/restricted`: the databases without the personal
    columns, the graph (written by write_graph) and the rule-derived triples without their
    predicates. The rules are run again on the restricted graph when they mention a personal
    predicate (so nothing they derive from it survives); otherwise their output, filtered, is
    the same and is reused. Raises if a personal value still appears in what the view keeps:
    the graph (a subject or reference template built from a personal column) or an executed
    table's other columns (a rule that copied it under another name). `derived` may be a
    function giving derived.nt once the rules are done: it is called last. Given `values`
    (personal_values; data.nt and the executed tables then checked already,
    check_personal), `typed` and `executed` are not read: a build frees them first. With
    databases=False the restricted DuckDB files are not written here: a build wrote them."""
    from pytest_kgbench.packs.tables import create_database

    withheld = withheld_columns(pack)
    _check_templates(pack, withheld)
    predicates = set(personal_predicates(pack))
    folder = out / RESTRICTED
    folder.mkdir(exist_ok=True)
    if databases:
        create_database(folder / "raw.duckdb", pack.tables, out / "csv", withheld=withheld)
        if pack.executed_tables:
            create_database(folder / "executed.duckdb", pack.executed_tables, out / "executed",
                            withheld=withheld)
    data_nt = folder / "data.nt"
    if graph.restricted_nt != data_nt:  # N-Triples, a triple a line: the personal lines left out
        assert graph.sorted_nt is not None, "write_graph wrote the restricted graph itself"
        _drop_file(graph.sorted_nt, data_nt, predicates)
    if values is None:
        values = personal_values(pack, typed)
        check_personal(pack, out, values, executed)
    if callable(derived):  # the rules may still be running: what needs them comes last
        derived = derived()
    rerun = _restrict_derived(pack, folder, graph, derived, predicates, values)
    return {"withheld": {t: sorted(c) for t, c in sorted(withheld.items())},
            "predicates": sorted(predicates), "rules_rerun": rerun}


def _check_templates(pack: Pack, withheld: Mapping[str, frozenset[str]]) -> None:
    """Raise if an IRI template of a mapped table uses a personal column."""
    from pytest_kgbench.packs.rdf import mapping as rdfmap

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


def _restrict_derived(pack: Pack, folder: Path, graph: GraphFiles, derived: Path | None,
                      predicates: set[str], values: set[str]) -> bool:
    """Write the restricted view's derived.nt (the rules' output without the personal
    predicates, or the rules run again on the view's graph) and check it for personal values:
    whether the rules were run again."""
    from pytest_kgbench.packs.rdf import ontology, rule_parts

    rerun = checked = False
    if derived is not None:
        shapes = pack.ontology_file("shapes.ttl")
        text = shapes.read_text(encoding="utf-8") if shapes else ""
        rerun = any(p in text or p.rsplit("#", 1)[-1].rsplit("/", 1)[-1] in text
                    for p in predicates)
        if rerun:
            again = folder / "derived.nt.all"
            ontology.derive_file(folder / "data.nt", text, again, graph.rules_input.parent,
                                 groups=rule_parts.rule_groups(pack))
            _drop_file(again, folder / "derived.nt", predicates)
            again.unlink()
        else:  # checked while the view's copy is made: most often a second name of it
            early = Beside()
            early.start(_check_file, pack, values, derived)
            _drop_file(derived, folder / "derived.nt", predicates)
            early.settle()
            if os.path.samefile(derived, folder / "derived.nt"):
                early.join()  # the view's own file was checked: its failure, if any
                checked = True
    if not checked:
        _check_file(pack, values, folder / "derived.nt")
    return rerun


def _drop(ntriples: str, predicates: set[str]) -> str:
    """N-Triples text without the lines of `predicates` (N-Triples puts the predicate, an
    IRI, second on its line: a subject holds no space)."""
    return "".join(_drop_lines(ntriples.splitlines(keepends=True),
                               {f"<{p}>" for p in predicates}))


def _drop_file(source: Path, target: Path, predicates: set[str]) -> None:
    """_drop_lines, file to file, a block at a time: a block holding none of the predicates
    (nor a line without a space, which is dropped, nor a carriage return, which text mode
    reads as a line end) is copied as it is; the others go a line at a time. A file whose
    every block is kept as it is becomes a second name of `source` (a hard link, where the
    file system has them): the same bytes, none written (half a gigabyte of rule-derived
    triples at 100,000 issuers)."""
    marks = {f"<{p}>" for p in predicates}
    encoded = [m.encode("utf-8") for m in marks]

    def as_is(data: bytes) -> bool:
        last = data[data.rfind(b"\n") + 1:]  # a last line without its end
        # every line ending " ." holds a space (N-Triples' lines all do)
        return not any(m in data for m in encoded) and b"\r" not in data and \
            data.count(b"\n") == data.count(b" .\n") and (not last or b" " in last)

    def kept(data: bytes) -> bytes:
        if as_is(data):
            return data
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        parts = text.split("\n")  # the lines a text file gives: cut at \n only
        lines = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
        return "".join(_drop_lines(lines, marks)).encode("utf-8")

    def blocks() -> Any:  # whole lines, the last one as the file ends
        with source.open("rb") as src:
            tail = b""
            for block in iter(lambda: src.read(CHUNK), b""):
                data = tail + block
                cut = data.rfind(b"\n") + 1
                data, tail = data[:cut], data[cut:]
                if data:
                    yield data
            if tail:
                yield tail

    target.unlink(missing_ok=True)  # a link made before: writing it would write `source`
    if all(as_is(data) for data in blocks()):
        try:
            os.link(source, target)
            return
        except OSError:  # no hard links here (another file system, FAT): the copy below
            pass
    with target.open("wb") as dst:
        for data in blocks():
            dst.write(kept(data))


def _drop_lines(lines: Any, marks: set[str]) -> Any:
    """The lines (N-Triples) whose predicate, the second term, is none of `marks`."""
    return (line for line in lines
            if line.split(" ", 2)[1:2] != [] and line.split(" ", 2)[1] not in marks)


GRAM = 4  # the shortest personal value looked for


def appears_in(values: set[str], text: str) -> bool:
    """Whether any of `values` (each at least GRAM characters) occurs in `text`, in time that
    grows with len(text) + the values' total length, not their product: a value is searched
    for only when every GRAM-character piece of it occurs in the text."""
    if not values or len(text) < GRAM:
        return False
    data = text.encode("utf-8")
    return _appears(values, lambda: _blocks(data, CHUNK))


def appears_in_file(values: set[str], path: Path) -> bool:
    """appears_in over a file's text, read a block at a time (a build's N-Triples can be
    larger than the memory a build may use)."""
    if not values:
        return False

    def blocks() -> Any:
        with path.open("rb") as fh:
            yield from iter(lambda: fh.read(CHUNK), b"")

    return _appears(values, blocks)


CHUNK = 1 << 24  # bytes of text looked at a time


def _blocks(data: bytes, size: int) -> Any:
    for start in range(0, len(data), size):
        yield data[start:start + size]


def _grams(data: bytes) -> Any:
    """Every GRAM-byte window of `data` as one integer (GRAM = 4: a little-endian uint32), in
    the order of the windows."""
    import numpy as np

    b = np.frombuffer(data, dtype=np.uint8).astype(np.uint32)
    n = max(len(b) - GRAM + 1, 0)
    return b[:n] | b[1:n + 1] << 8 | b[2:n + 2] << 16 | b[3:n + 3] << 24


def _grams_unordered(data: bytes) -> Any:
    """_grams' integers in no particular order: four zero-copy uint32 views of the bytes
    (windows at 0, 4, 8, …, then at 1, 5, …), concatenated — 14x faster than shifting."""
    import numpy as np

    n = len(data)
    return np.concatenate([np.frombuffer(data, dtype="<u4", offset=k, count=(n - k) // GRAM)
                           for k in range(GRAM) if n - k >= GRAM] or
                          [np.zeros(0, dtype=np.uint32)])


def _appears(values: set[str], blocks: Callable[[], Any]) -> bool:
    """Whether a value occurs in the text `blocks()` gives, a block at a time: the values'
    GRAM-byte pieces (all values' at once, in numpy) are looked up in each block (a hashed
    table first, so a block costs a few passes over its bytes), and only a value all of whose
    pieces occur is searched for, in a second pass. A piece found is taken out of the table:
    a piece common in the text (the ".exa" of an e-mail domain, of every IRI too) stops
    costing a lookup after the first block that holds it."""
    import numpy as np

    encoded = [e for e in (v.encode("utf-8") for v in values) if len(e) >= GRAM]
    if not encoded:
        return False
    pieces, owner = _value_pieces(encoded)
    wanted = np.unique(pieces)
    table = np.zeros(1 << 24, dtype=bool)  # a bucket is set while a piece in it is unseen
    seen = _seen_pieces(wanted, table, blocks)
    missing = ~seen[np.searchsorted(wanted, pieces)]
    whole = np.bincount(owner, weights=missing, minlength=len(encoded)) == 0
    candidates = [encoded[i] for i in np.flatnonzero(whole)]
    if not candidates:
        return False
    # the second pass: where a candidate's first piece occurs, is the candidate there? (a
    # value searched for on its own, block by block, made a file that holds the values cost
    # hours: 77,000 of them over a gigabyte)
    return _found_at_firsts(candidates, table, blocks)


_MULT, _SHIFT = 2654435761, 8  # the leak check's multiplicative hashing, as uint32


def _bucket(grams: Any) -> Any:
    """A piece's place in the leak check's table (multiplicative hashing)."""
    import numpy as np

    return (grams * np.uint32(_MULT)) >> np.uint32(_SHIFT)


def _value_pieces(encoded: list[bytes]) -> tuple[Any, Any]:
    """The GRAM-byte pieces of every value (none across two values), and whose each is."""
    import numpy as np

    lengths = np.array([len(e) for e in encoded], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pieces = _grams(b"".join(encoded))
    owner = np.repeat(np.arange(len(encoded)), lengths)[:len(pieces)]
    inside = np.arange(len(pieces)) + GRAM <= (starts + lengths)[owner]  # not across values
    return pieces[inside], owner[inside]


def _seen_pieces(wanted: Any, table: Any, blocks: Callable[[], Any]) -> Any:
    """Which of the `wanted` pieces (sorted, distinct) occur in the text: the first pass,
    `table` (all False) the hashed table it looks them up in."""
    import numpy as np

    mult, shift = np.uint32(_MULT), np.uint32(_SHIFT)
    table[_bucket(wanted)] = True
    seen = np.zeros(len(wanted), dtype=bool)
    hashed = np.empty(0, dtype=np.uint32)
    tail = b""
    for block in blocks():
        data = tail + block
        tail = data[-(GRAM - 1):]
        grams = _grams_unordered(data)
        if hashed.size < grams.size:
            hashed = np.empty(grams.size, dtype=np.uint32)
        h = hashed[:grams.size]  # bucket(grams), in a buffer kept from block to block
        np.multiply(grams, mult, out=h)
        np.right_shift(h, shift, out=h)
        hits = grams[table[h]]
        if hits.size:
            at = np.minimum(np.searchsorted(wanted, hits), len(wanted) - 1)
            found = at[wanted[at] == hits]
            found = found[~seen[found]]  # a seen piece sharing a bucket with an unseen one
            if found.size:
                seen[found] = True
                table[:] = False
                table[_bucket(wanted[~seen])] = True
    return seen


def _found_at_firsts(candidates: list[bytes], table: Any, blocks: Callable[[], Any]) -> bool:
    """Whether a candidate occurs in the text, looked for where its first piece does: the
    second pass, in the first pass's `table` (cleared here)."""
    import numpy as np

    by_first: dict[int, list[bytes]] = {}
    for e in candidates:
        by_first.setdefault(int.from_bytes(e[:GRAM], "little"), []).append(e)
    firsts = np.array(sorted(by_first), dtype=np.uint32)
    table[:] = False
    table[_bucket(firsts)] = True
    longest = max(len(e) for e in candidates)
    tail = b""
    for block in blocks():
        data = tail + block
        grams = _grams(data)
        at = np.flatnonzero(table[_bucket(grams)])
        if at.size:
            at = at[np.isin(grams[at], firsts)]
        for pos in at.tolist():
            if any(data.startswith(e, pos) for e in by_first[int(grams[pos])]):
                return True
        tail = data[-(longest - 1):] if longest > 1 else b""
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
