"""Packs: where a domain's generator, schema, definitions and keys live (building a variant is
`packs/build.py`'s).

A pack named `credit` is the folder `datasets/credit/` holding `pack.yaml` (its manifest: tables,
types, personal columns, personas, entities, RDF mapping, variants) and, for a generated pack, a
Python package with the generator and the key functions; its definitions live in
`ontology/credit/`. The plugin knows nothing of any domain: it reads the manifest and calls what
the manifest names.
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import hashlib
import importlib.util
import itertools
import math
import random
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.packs.tables import SQL_TYPES as SQL_TYPES  # re-exported
from pytest_kgbench.packs.tables import DataSpec
from pytest_kgbench.packs.tables import TableSpec as TableSpec  # re-exported

Row = dict[str, Any]
Tables = dict[str, list[Row]]
T = TypeVar("T")

@dataclass(frozen=True)
class Persona:
    name: str
    reads_personal: bool


@dataclass
class Pack:
    """One pack, as its manifest describes it."""

    name: str
    dir: Path
    ontology_dir: Path
    manifest: Mapping[str, Any]
    tables: dict[str, TableSpec]
    executed_tables: dict[str, TableSpec]
    personal: dict[str, frozenset[str]]
    personas: dict[str, Persona]
    variants: dict[str, Mapping[str, Any]]
    seed: int
    question_files: tuple[Path, ...] = ()
    data: DataSpec | None = None  # a fixed pack's data (None: generated, or CSVs in `data/`)
    unavailable: str | None = None  # why the pack cannot run here (its external data absent)
    external: Path | None = None  # the external-data folder the session names
    _modules: dict[str, ModuleType] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return str(self.manifest.get("title", self.name))

    @property
    def entities(self) -> Mapping[str, Mapping[str, Any]]:
        return self.manifest.get("entities") or {}

    @property
    def rdf(self) -> Mapping[str, Any]:
        return self.manifest.get("rdf") or {}

    @property
    def definitions_ttl(self) -> Path:
        return self.ontology_file("definitions.ttl") or self.ontology_dir / "definitions.ttl"

    def resolve_file(self, ref: str) -> Path:
        """A file the manifest names: relative to the pack's folder, or `external:REL` under
        the external-data folder."""
        if ref.startswith("external:"):
            if self.external is None:
                raise InputError(str(self.dir / "pack.yaml"), f"names {ref}, but no "
                                 "--external-data folder is set")
            return self.external / ref.removeprefix("external:")
        return self.dir / ref

    def ontology_file(self, name: str) -> Path | None:
        """An optional ontology artefact (e.g. `neutral.ttl`); None when the pack lacks it.
        pack.yaml's `definitions` may map an artefact to a file of another name or place."""
        named = (self.manifest.get("definitions") or {}).get(name)
        path = self.resolve_file(str(named)) if named else self.ontology_dir / name
        return path if path.is_file() else None

    def has(self, artefact: str) -> bool:
        """Whether the pack has an artefact a condition needs: an ontology file, `executed` (a
        function computing the executed tables), `tables` (data as tables: every pack but a
        graph-native one), `rdf` (a graph of the data: a mapping, an
        R2RML file or a supplied graph) or `definitions` (definitions.ttl, or a supplied
        definitions.md)."""
        if artefact == "executed":
            return bool(self.executed_tables)
        if artefact == "rdf":
            return bool(self.rdf.get("tables") or self.rdf.get("r2rml") or self.rdf.get("file"))
        if artefact == "definitions":
            return self.has("definitions.ttl") or self.has("definitions.md")
        if artefact == "tables":
            return bool(self.tables) or not graph_native(self.manifest)
        return self.ontology_file(artefact) is not None

    def lacks(self, artefacts: tuple[str, ...]) -> str | None:
        """Why the pack cannot give these artefacts (for a skip reason), or None."""
        missing = [a for a in artefacts if not self.has(a)]
        if not missing:
            return None
        said = {"rdf": "no RDF (an rdf mapping, an R2RML file or a graph file in pack.yaml)",
                "definitions": "no definitions (definitions.ttl or definitions.md)",
                "executed": "no executed tables (pack.yaml's executed.function)",
                "shapes.ttl": "no rules (shapes.ttl)",
                "tables": "no tables (its data is a graph only: data: none)"}
        return "has " + "; ".join(said.get(a, f"no {a}") for a in missing)

    def module(self, name: str) -> ModuleType:
        """Import a module of the pack's package (e.g. `keys`) by file location."""
        if name not in self._modules:
            self._modules[name] = import_module(self.dir, self.name, name)
        return self._modules[name]

    def data_loader(self) -> Callable[[Any, Path], None] | None:
        """The pack's function that loads its fixed data into DuckDB (`data.loader`)."""
        if self.data is None or not self.data.loader:
            return None
        return self.callable(self.data.loader, field_name="data.loader")

    def callable(self, ref: str, *, field_name: str) -> Callable[..., Any]:
        """Resolve 'module:function' from the manifest."""
        mod_name, _, fn_name = ref.partition(":")
        fn = getattr(self.module(mod_name), fn_name or "main", None)
        if not callable(fn):
            raise InputError(str(self.dir / "pack.yaml"), f"'{ref}' is not a function",
                             field=field_name)
        return cast(Callable[..., Any], fn)

    def key_function(self, name: str, *, question: str) -> Callable[..., Mapping[str, Any]]:
        """A key function of the pack's keys module."""
        keys_mod = self.module(str(self.manifest.get("keys", "keys")))
        fn = getattr(keys_mod, name, None)
        if not callable(fn):
            raise InputError(str(self.dir / "pack.yaml"), f"keys module has no function '{name}'",
                             question=question, field="key")
        return cast(Callable[..., Mapping[str, Any]], fn)

    @property
    def scale(self) -> dict[str, str]:
        """The manifest's `scale:` entry: {generator parameter: the variant it scales}, e.g.
        `scale: {issuers: large}` (`kgbench build --issuers 100000` builds `large` with
        `issuers: 100000`)."""
        raw = self.manifest.get("scale") or {}
        where = str(self.dir / "pack.yaml")
        if not isinstance(raw, Mapping):
            raise InputError(where, "must map a generator parameter to the variant it scales",
                             field="scale")
        for param, base in raw.items():
            if str(base) not in self.variants:
                raise InputError(where, f"scales variant '{base}', which the pack does not "
                                 f"have (known: {', '.join(self.variants)})",
                                 field=f"scale.{param}")
        return {str(k): str(v) for k, v in raw.items()}

    def params(self, variant: str) -> Mapping[str, Any]:
        """A variant's generator parameters: a named variant's, or a scaled one's — a name of
        the form `PARAM=N[,PARAM=N]` (`issuers=100000`), each PARAM declared in `scale:`, over
        the parameters of the variant it scales. Raises InputError naming the known ones."""
        if variant in self.variants:
            return self.variants[variant]
        where = str(self.dir / "pack.yaml")
        known = f"known: {', '.join(self.variants)}"
        if "=" not in variant:
            raise InputError(where, f"no variant '{variant}' ({known}"
                             + (f"; or a size: {', '.join(f'{p}=N' for p in self.scale)})"
                                if self.scale else ")"), field="variants")
        params: dict[str, Any] = {}
        bases = set()
        for part in variant.split(","):
            param, _, value = part.partition("=")
            if param not in self.scale:
                raise InputError(where, f"'{variant}': {param} is not a size this pack scales "
                                 f"({', '.join(self.scale) or 'its manifest has no scale: '}"
                                 ")", field="scale")
            if not value.isdigit() or int(value) < 1 or str(int(value)) != value:
                raise InputError(where, f"'{variant}': {param} must be a positive whole "
                                 f"number, not '{value}'", field="scale")
            bases.add(self.scale[param])
            params[param] = int(value)
        if len(bases) > 1:
            raise InputError(where, f"'{variant}' scales several variants "
                             f"({', '.join(sorted(bases))}): one at a time", field="scale")
        return {**self.variants[bases.pop()], **params}

    def has_variant(self, variant: str) -> bool:
        """Whether `variant` names a variant of the manifest or a size the pack scales."""
        try:
            self.params(variant)
        except InputError:
            return False
        return True

    def generate(self, variant: str, seed: int) -> Tables:
        """The variant's tables, from the pack's generator or its fixed data files."""
        params = self.params(variant)
        if "generator" in self.manifest:
            fn = self.callable(str(self.manifest["generator"]), field_name="generator")
            return cast(Tables, fn(variant=variant, seed=seed, **dict(params)))
        if self.unavailable:
            raise InputError(str(self.dir / "pack.yaml"), self.unavailable, field="data")
        if self.data is not None:
            from pytest_kgbench.packs import tables as tabledata

            con = tabledata.load(self.data, loader=self.data_loader())
            try:
                return {name: tabledata.rows(con, name, list(spec.column_names))
                        for name, spec in self.tables.items()}
            finally:
                con.close()
        data_dir = self.dir / str(params.get("data", self.manifest.get("data", "data")))
        return read_tables(data_dir, self.tables)

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 over every file of the pack and its ontology folder (code, manifest, TTL)."""
        digest = hashlib.sha256()
        for base in (self.dir, self.ontology_dir, *self.external_files()):
            files = sorted(base.rglob("*")) if base.is_dir() else [base]
            for path in files:
                if path.is_file() and "__pycache__" not in path.parts:
                    digest.update(str(path.relative_to(base) if base.is_dir()
                                      else path.name).encode())
                    digest.update(path.read_bytes())
        return digest.hexdigest()

    def external_files(self) -> list[Path]:
        """The files and folders outside the pack's folder that its build reads."""
        refs = [str(v) for v in (self.manifest.get("definitions") or {}).values()]
        refs += [str(self.rdf[k]) for k in ("file", "r2rml") if self.rdf.get(k)]
        out = [self.resolve_file(r) for r in refs if r.startswith("external:")]
        if self.data is not None and not self.data.path.is_relative_to(self.dir):
            out.append(self.data.path)
            if self.data.ddl is not None:
                out.append(self.data.ddl)
        return [p for p in out if p.exists()]

    def reads_personal(self, persona: str) -> bool:
        if persona not in self.personas:
            raise InputError(str(self.dir / "pack.yaml"), f"no persona '{persona}' "
                             f"(known: {', '.join(sorted(self.personas))})", field="personas")
        return self.personas[persona].reads_personal


def import_module(pack_dir: Path, pack_name: str, name: str) -> ModuleType:
    """Import module `name` of the package in `pack_dir` by file location."""
    package = f"kgbench_pack_{pack_name.replace('-', '_')}"
    if package not in sys.modules:
        init = pack_dir / "__init__.py"
        if not init.is_file():
            raise InputError(str(pack_dir), "a pack with Python code needs an __init__.py")
        spec = importlib.util.spec_from_file_location(
            package, init, submodule_search_locations=[str(pack_dir)])
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[package] = mod
        spec.loader.exec_module(mod)
    full = f"{package}.{name}"
    if full not in sys.modules:
        path = pack_dir / f"{name}.py"
        if not path.is_file():
            raise InputError(str(pack_dir / "pack.yaml"), f"names module '{name}', but "
                             f"{path} does not exist")
        spec = importlib.util.spec_from_file_location(full, path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
    return sys.modules[full]


def _parse_tables(spec_map: Any, where: str, field_name: str) -> dict[str, TableSpec]:
    tables: dict[str, TableSpec] = {}
    for tname, spec in (spec_map or {}).items():
        cols = spec.get("columns") if isinstance(spec, dict) else None
        if not isinstance(cols, dict) or not cols:
            raise InputError(where, "must list columns with SQL types",
                             field=f"{field_name}.{tname}")
        for col, ctype in cols.items():
            if str(ctype).upper() not in SQL_TYPES:
                raise InputError(where, f"type must be one of {', '.join(SQL_TYPES)}",
                                 field=f"{field_name}.{tname}.columns.{col}")
        tables[tname] = TableSpec(
            name=tname, columns=tuple((c, str(t).upper()) for c, t in cols.items()),
            primary_key=spec.get("primary_key"), description=str(spec.get("description", "")))
    return tables


def find_pack(name: str, datasets_dir: Path, ontology_dir: Path, *,
              external: Path | None = None) -> Pack:
    """The repository's pack `name`: `datasets_dir/name/pack.yaml`, its definitions in
    `ontology_dir/name/` (or in its own folder), its questions in `questions/name.yaml`."""
    pack_dir = datasets_dir / name
    if not (pack_dir / "pack.yaml").is_file():
        raise InputError(str(pack_dir / "pack.yaml"),
                         f"no pack named '{name}' (expected its manifest here)")
    own = ontology_dir / name
    questions = datasets_dir.parent / "questions" / f"{name}.yaml"
    return load_pack(pack_dir, name=name, ontology_dir=own if own.is_dir() else None,
                     question_files=(questions,) if questions.is_file() else None,
                     external=external)


def read_manifest(pack_dir: Path) -> dict[str, Any]:
    import yaml

    manifest_path = pack_dir / "pack.yaml"
    where = str(manifest_path)
    if not manifest_path.is_file():
        raise InputError(where, "a pack folder holds a pack.yaml (kgbench init DIR writes one)")
    try:
        manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise InputError(where, f"not valid YAML: {exc}") from exc
    if not isinstance(manifest, dict):
        raise InputError(where, "must be a YAML mapping (name, tables, data, ...)")
    return manifest


def own_question_files(pack_dir: Path, manifest: Mapping[str, Any]) -> tuple[Path, ...]:
    """A folder pack's question files: `questions` in pack.yaml (a file or a folder of *.yaml),
    else questions.yaml, else questions/*.yaml."""
    named = manifest.get("questions")
    candidates = [pack_dir / str(named)] if named else [pack_dir / "questions.yaml",
                                                          pack_dir / "questions"]
    for path in candidates:
        if path.is_file():
            return (path.resolve(),)
        if path.is_dir():
            return tuple(sorted(p.resolve() for p in path.glob("*.y*ml")))
    return ()


def data_spec(pack_dir: Path, manifest: Mapping[str, Any], external: Path | None,
              ) -> tuple[DataSpec | None, str | None]:
    """Where a fixed pack's data is (None for a generated pack, or CSVs beside declared tables,
    read as before), and why it is unavailable here (its external folder absent)."""
    where = str(pack_dir / "pack.yaml")
    entry = manifest.get("data", "data")
    if "generator" in manifest:
        return None, None
    if graph_native(manifest):
        return None, _graph_unavailable(manifest, external)
    if isinstance(entry, str):
        entry = {"path": entry}
    if not isinstance(entry, Mapping):
        raise InputError(where, "must be a folder, a .duckdb file or a mapping (path, external, "
                         "ddl, files, loader)", field="data")
    unknown = set(entry) - {"path", "external", "ddl", "files", "loader"}
    if unknown:
        raise InputError(where, f"unknown keys {sorted(unknown)}", field="data")
    if "external" in entry:
        if external is None:
            return None, (f"its data lives outside the repository ({entry['external']}): pass "
                          "--external-data DIR (or set KGBENCH_EXTERNAL) to the folder holding it")
        base = external / str(entry["external"])
        if not base.exists():
            return None, f"its data folder {base} does not exist (see --external-data)"
    else:
        base = pack_dir / str(entry.get("path", "data"))
    ddl = entry.get("ddl")
    ddl_path = (base / str(ddl) if "external" in entry and not str(ddl).startswith(".")
                else pack_dir / str(ddl)) if ddl else None
    spec = DataSpec(path=base.resolve(), ddl=ddl_path,
                    files={str(k): str(v) for k, v in (entry.get("files") or {}).items()},
                    where=where, loader=str(entry.get("loader") or ""))
    if manifest.get("tables") and base.is_dir() and ddl is None and not spec.loader:
        from pytest_kgbench.packs.tables import table_file

        for table in manifest["tables"]:  # a declared table is read from its own file
            found = table_file(spec, str(table))
            if found is None or not found.is_file():
                raise InputError(where, f"declares table '{table}', but " + (
                    f"its file {found} does not exist" if found is not None else
                    f"{base} holds no {table}.csv or {table}.parquet"), field=f"tables.{table}")
        if all((base / f"{t}.csv").is_file() for t in manifest["tables"]):
            return None, None  # declared tables over their CSV files: read as declared
    return spec, None


def graph_native(manifest: Mapping[str, Any]) -> bool:
    """A pack whose data is a graph only (`data: none` with `rdf.file`): no tables, so the
    SQL and CSV conditions are not run."""
    return "data" in manifest and manifest["data"] in (None, "none")


def _graph_unavailable(manifest: Mapping[str, Any], external: Path | None) -> str | None:
    """Why a graph-native pack's graph cannot be read here (its external folder absent)."""
    ref = str((manifest.get("rdf") or {}).get("file") or "")
    if not ref.startswith("external:"):
        return None
    rel = ref.removeprefix("external:")
    if external is None:
        return (f"its graph lives outside the repository ({rel}): pass --external-data DIR "
                "(or set KGBENCH_EXTERNAL) to the folder holding it")
    if not (external / rel).is_file():
        return f"its graph {external / rel} does not exist (see --external-data)"
    return None


def load_pack(pack_dir: Path, *, name: str | None = None, ontology_dir: Path | None = None,
              question_files: tuple[Path, ...] | None = None,
              external: Path | None = None) -> Pack:
    """A pack from its folder: pack.yaml (docs/packs.md), its data, its definitions (in
    `ontology_dir`, else the folder itself) and its question files."""
    pack_dir = pack_dir.resolve()
    manifest = read_manifest(pack_dir)
    where = str(pack_dir / "pack.yaml")
    name = name or str(manifest.get("name") or pack_dir.name)
    spec, unavailable = data_spec(pack_dir, manifest, external)
    tables = _parse_tables(manifest.get("tables"), where, "tables")
    if not tables and spec is not None and unavailable is None:
        tables = _data_tables(pack_dir, name, spec, where)
    if graph_native(manifest) and not (manifest.get("rdf") or {}).get("file"):
        raise InputError(where, "a pack without tables (data: none) needs its graph in "
                         "rdf.file", field="rdf.file")
    if not tables and unavailable is None and not graph_native(manifest):
        raise InputError(where, "a pack needs at least one table: declare them, or put CSV or "
                         "Parquet files in its data folder", field="tables")
    executed = manifest.get("executed") or {}
    executed_tables = _parse_tables(executed.get("tables"), where, "executed.tables")
    if executed and not executed.get("function"):
        raise InputError(where, "names no function that computes the executed tables",
                         field="executed.function")
    personal = _personal_columns(manifest, tables if unavailable is None else None, where)
    personas = {
        pname: Persona(pname, bool((spec or {}).get("reads_personal", False)))
        for pname, spec in (manifest.get("personas") or {"analyst": {}}).items()
    }
    variants = manifest.get("variants") or {"base": {}}
    _check_evidence(manifest, where)
    if ontology_dir is None:
        named = manifest.get("ontology")
        ontology_dir = pack_dir / str(named) if named else pack_dir
    return Pack(
        name=name, dir=pack_dir, ontology_dir=ontology_dir, manifest=manifest,
        tables=tables, executed_tables=executed_tables, personal=personal, personas=personas,
        variants={str(k): (v or {}) for k, v in variants.items()},
        seed=int(manifest.get("seed", 0)),
        question_files=(question_files if question_files is not None
                        else own_question_files(pack_dir, manifest)),
        data=spec, unavailable=unavailable, external=external,
    )


def _data_tables(pack_dir: Path, name: str, spec: DataSpec, where: str) -> dict[str, TableSpec]:
    """The tables a pack that declares none finds in its data (their columns, no rows read),
    through its own loader when `data.loader` names one."""
    from pytest_kgbench.packs import tables as tabledata

    loader = None
    if spec.loader:
        mod_name, _, fn_name = spec.loader.partition(":")
        loader = getattr(import_module(pack_dir, name, mod_name), fn_name or "main", None)
        if not callable(loader):
            raise InputError(where, f"'{spec.loader}' is not a function", field="data.loader")
    con = tabledata.load(spec, schema_only=True, loader=loader)
    try:
        return {t: TableSpec(t, tuple(tabledata.columns(con, t)))
                for t in tabledata.table_names(con)}
    finally:
        con.close()


def _personal_columns(manifest: Mapping[str, Any], tables: Mapping[str, TableSpec] | None,
                      where: str) -> dict[str, frozenset[str]]:
    """The manifest's `personal` columns by table, each checked against `tables` (None: the
    data is unavailable here, nothing to check against)."""
    personal: dict[str, frozenset[str]] = {}
    for tname, cols in (manifest.get("personal") or {}).items():
        if tables is not None and (
                tname not in tables or not set(cols) <= set(tables[tname].column_names)):
            raise InputError(where, f"names columns not in table '{tname}'",
                             field=f"personal.{tname}")
        personal[tname] = frozenset(cols)
    return personal


def _check_evidence(manifest: Mapping[str, Any], where: str) -> None:
    """Raise on the first evidence pattern (or `ablate` list) of the manifest that is not one."""
    from pytest_kgbench.packs.evidence import spec_problem

    for concept, kinds in (manifest.get("evidence") or {}).items():
        for kind, espec in (kinds or {}).items():
            if kind == "ablate":
                if not isinstance(espec, list) or not all(isinstance(c, str) for c in espec):
                    raise InputError(where, "must list the columns whose filters are the "
                                     "definition", field=f"evidence.{concept}.ablate")
                continue
            problem = spec_problem(espec)
            if problem:
                raise InputError(where, problem, field=f"evidence.{concept}.{kind}")


def once_per_tables(build: Callable[[Tables], T], size: int = 8) -> Callable[[Tables], T]:
    """For pack code: `build(tables)` computed once per tables object (the definitions over a
    dataset are derived once, however many key functions ask), the last `size` kept."""
    cache: dict[int, tuple[Tables, T]] = {}

    def get(tables: Tables) -> T:
        hit = cache.get(id(tables))
        if hit is not None and hit[0] is tables:
            return hit[1]
        value = build(tables)
        cache[id(tables)] = (tables, value)
        while len(cache) > size:
            cache.pop(next(iter(cache)))
        return value

    get.__doc__ = f"{getattr(build, '__name__', 'build')} over `tables`, computed once per object."
    return get



class Draws(random.Random):
    """For pack generators: random.Random with the same draws, made faster — choice,
    randrange, randint and a weighted choices(k=1) without the layers of calls between them
    and getrandbits (a big variant's generator makes millions), and string(), a choice a
    character. Same seed, same values, as a test checks against random.Random itself; any
    other method is random.Random's."""

    def choice(self, seq: Any) -> Any:
        n = len(seq)
        if not n:
            raise IndexError("Cannot choose from an empty sequence")
        getrandbits, k = self.getrandbits, n.bit_length()
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        return seq[r]

    def string(self, alphabet: str, n: int) -> str:
        """`n` choices from `alphabet`, joined: "".join(choice(alphabet) for each)."""
        size = len(alphabet)
        if not size or n <= 0:
            return "".join(self.choice(alphabet) for _ in range(n))
        getrandbits, k = self.getrandbits, size.bit_length()
        out = []
        for _ in range(n):
            r = getrandbits(k)
            while r >= size:
                r = getrandbits(k)
            out.append(alphabet[r])
        return "".join(out)

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        if stop is None and step == 1 and type(start) is int and start > 0:
            start, stop = 0, start
        if stop is None or step != 1 or type(start) is not int or type(stop) is not int \
                or stop <= start:
            return super().randrange(start, stop, step)  # what random.Random checks
        n = stop - start
        getrandbits, k = self.getrandbits, n.bit_length()
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        return start + r

    def randint(self, a: int, b: int) -> int:
        return self.randrange(a, b + 1)

    def choices(self, population: Any, weights: Any = None, *, cum_weights: Any = None,
                k: int = 1) -> list[Any]:
        if weights is None or cum_weights is not None or k != 1 or \
                not isinstance(weights, tuple):
            return super().choices(population, weights, cum_weights=cum_weights, k=k)
        cum = _CUMULATIVE.get(weights)
        if cum is None:
            cum = _CUMULATIVE.setdefault(weights, list(itertools.accumulate(weights)))
        if len(cum) != len(population) or not cum[-1] > 0.0 or not math.isfinite(cum[-1]):
            return super().choices(population, weights, k=k)  # its error
        return [population[bisect.bisect(cum, self.random() * (cum[-1] + 0.0), 0,
                                         len(population) - 1)]]


_CUMULATIVE: dict[tuple[Any, ...], list[Any]] = {}  # Draws.choices' running sums, by weights

# --- values: CSV text <-> typed Python ---------------------------------------------------------

def format_value(value: Any) -> str:
    """A cell as CSV text: ISO dates, lower-case booleans, shortest float repr, empty for None."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(round(value, 6)).removesuffix(".0") if value == int(value) else repr(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return str(value)


def parse_value(text: str, sql_type: str) -> Any:
    """The typed value of a CSV cell, by its declared SQL type; '' is None."""
    if text == "":
        return None
    if sql_type in ("INTEGER", "BIGINT"):
        return int(text)
    if sql_type in ("DOUBLE", "DECIMAL"):
        return float(text)
    if sql_type == "DATE":
        return dt.date.fromisoformat(text)
    if sql_type == "TIMESTAMP":
        return dt.datetime.fromisoformat(text)
    if sql_type == "BOOLEAN":
        return text.lower() in ("true", "1", "yes")
    return text


def _formatted(values: list[Any]) -> list[Any]:
    """format_value of every value of a column, a column at a time: a column of one type (or
    strings and empty cells) is spelt without a Python call per cell."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        return values
    if kinds <= {str, type(None)}:
        return ["" if v is None else v for v in values]
    if kinds == {int}:
        return list(map(str, values))
    if kinds == {dt.date}:
        return list(map(dt.date.isoformat, values))
    return list(map(format_value, values))


def _column(rows: list[Row], name: str) -> list[Any]:
    """Every row's value of a column (None where a row lacks it)."""
    from operator import itemgetter

    try:
        return list(map(itemgetter(name), rows))
    except KeyError:
        return [row.get(name) for row in rows]


def write_csv(path: Path, spec: TableSpec, rows: list[Row]) -> None:
    """The rows as CSV: a header of the spec's columns, each cell format_value's text."""
    names = spec.column_names
    columns = [_formatted(_column(rows, c)) for c in names]
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(zip(*columns))


def read_csv_rows(path: Path, spec: TableSpec) -> list[Row]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        return [{c: parse_value(r.get(c) or "", t) for c, t in spec.columns} for r in reader]


def read_tables(data_dir: Path, specs: Mapping[str, TableSpec]) -> Tables:
    """Typed rows of every table from `<table>.csv` files."""
    out: Tables = {}
    for name, spec in specs.items():
        path = data_dir / f"{name}.csv"
        if not path.is_file():
            raise InputError(str(path), f"table '{name}' has no CSV file")
        out[name] = read_csv_rows(path, spec)
    return out


def check_tables(pack: Pack, tables: Tables, specs: Mapping[str, TableSpec] | None = None,
                 field_name: str = "tables") -> None:
    """Generated rows must match the manifest's tables and columns exactly."""
    where = str(pack.dir / "pack.yaml")
    specs = pack.tables if specs is None else specs
    if set(tables) != set(specs):
        raise InputError(where, f"the pack made tables {sorted(tables)}, the manifest declares "
                         f"{sorted(specs)}", field=field_name)
    for name, rows in tables.items():
        cols = set(specs[name].column_names)
        # a dict's keys compare with a set as they are (no set made a row: a big variant has
        # millions of rows); a row that is not a dict is compared as before
        bad = next((i for i, row in enumerate(rows) if (row.keys() if isinstance(row, dict)
                                                          else set(row)) != cols), None)
        if bad is not None:
            raise InputError(where, f"row {bad} has columns {sorted(rows[bad])}",
                             field=f"{field_name}.{name}")


def normalise_id(text: str) -> str:
    """Identifiers compare case-insensitively, ignoring surrounding space and inner blanks."""
    return "".join(str(text).split()).casefold()


# a prefixed name's prefix or an IRI's scheme ("issuer:", "https:", ":" the empty prefix)
_PREFIX = re.compile(r"(?:[A-Za-z][\w.+-]*)?:")
# Turtle's escapes in a local name (`rsi:issuer\/ISS-1`)
_LOCAL_ESCAPE = re.compile(r"\\([_~.\-!$&'()*+,;=/?#@%])")
_SEGMENTS = 8  # the most trailing segments tried (a DOI is two; a long path is no id)
_WRAPS = {("<", ">"), ('"', '"'), ("'", "'"), ("`", "`")}


# a DOI (10.<registrant>/<suffix>) or an ORCID iD, bare or in the forms they are cited in
_DOI = re.compile(r"(?:(?:https?://)?(?:dx\.)?doi\.org/|doi:\s*|doi\s+)?(10\.\d{4,9}/\S+)",
                  re.IGNORECASE)
_RESOLVER = re.compile(r"(?:https?://)?(?:dx\.)?doi\.org/", re.IGNORECASE)
_ORCID = re.compile(r"(?:(?:https?://)?(?:www\.)?orcid\.org/|orcid:\s*|orcid\s+)?"
                    r"(\d{4})-?(\d{4})-?(\d{4})-?(\d{3}[\dX])", re.IGNORECASE)


def scheme_id(text: str) -> str | None:
    """A DOI or an ORCID iD as it is cited, reduced to the bare id: 'https://doi.org/10.5/X',
    'doi:10.5/X', 'DOI 10.5/X' -> '10.5/x' (DOIs ignore case; a percent-escape of the
    resolver's URL undone); 'https://orcid.org/0000-0003-1898-586x', '0000000318985867X' ->
    '0000-0003-1898-586X'. None for anything else."""
    from urllib.parse import unquote

    body = text.strip()
    if _RESOLVER.match(body):
        body = unquote(body)
    doi = _DOI.fullmatch(body)
    if doi:
        return doi.group(1).casefold()
    orcid = _ORCID.fullmatch(body)
    if orcid:
        return "-".join(orcid.groups()).upper()
    return None


def id_candidates(text: str) -> list[str]:
    """The ids a written identifier may stand for, the text itself first: without surrounding
    angle brackets or quotes, a final full stop, comma or semicolon, or Turtle's escapes; then,
    for an IRI or a prefixed name (and for a path), what follows its last '/' or '#', its last
    two segments, and so on ('issuer:ISS-1' -> 'ISS-1'; 'https://doi.org/10.5/x' -> 'x',
    '10.5/x', 'doi.org/10.5/x'); last, a DOI or ORCID iD as its bare id (`scheme_id`). Which
    of them is an id is the aliases' to say."""
    body = str(text).strip()
    while True:
        before = body
        body = body.rstrip(".,;").strip()
        if len(body) >= 2 and (body[0], body[-1]) in _WRAPS:
            body = body[1:-1].strip()
        if body == before:
            break
    body = _LOCAL_ESCAPE.sub(r"\1", body)
    out = [body]
    prefix = _PREFIX.match(body)
    rest = body[prefix.end():] if prefix else body
    parts = [p for p in re.split(r"[/#]", rest) if p]
    out += ["/".join(parts[-n:]) for n in range(1, min(len(parts), _SEGMENTS) + 1)]
    cited = scheme_id(body)
    if cited is not None:
        out.append(cited)
    return list(dict.fromkeys(c for c in out if c))


def bare_id(text: str) -> str:
    """The id a written identifier most likely is when no alias names it: a DOI or ORCID iD
    as its bare id, an IRI's or prefixed name's last segment ('author:A123' -> 'A123'), else
    the text itself (without brackets, quotes or a final full stop)."""
    candidates = id_candidates(text)
    if not candidates:
        return str(text).strip()
    cited = scheme_id(candidates[0])
    if cited is not None:
        return cited
    if len(candidates) > 1 and _PREFIX.match(candidates[0]):
        return candidates[1]
    return candidates[0]
