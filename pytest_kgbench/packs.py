"""Packs: where a domain's generator, schema, definitions and keys live (building a variant is
`build.py`'s).

A pack named `credit` is the folder `datasets/credit/` holding `pack.yaml` (its manifest: tables,
types, personal columns, personas, entities, RDF mapping, variants) and, for a generated pack, a
Python package with the generator and the key functions; its definitions live in
`ontology/credit/`. The plugin knows nothing of any domain: it reads the manifest and calls what
the manifest names.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from pytest_kgbench.errors import InputError

Row = dict[str, Any]
Tables = dict[str, list[Row]]
T = TypeVar("T")

SQL_TYPES = ("VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "DECIMAL", "DATE", "BOOLEAN")


@dataclass(frozen=True)
class TableSpec:
    """A table of a pack: its columns with SQL types, in order."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_key: str | None = None
    description: str = ""

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)


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
        return self.ontology_dir / "definitions.ttl"

    def ontology_file(self, name: str) -> Path | None:
        """An optional ontology artefact (e.g. `neutral.ttl`); None when the pack lacks it."""
        path = self.ontology_dir / name
        return path if path.is_file() else None

    def has(self, artefact: str) -> bool:
        """Whether the pack has an artefact a condition needs: an ontology file, or
        `executed` (a function computing the executed tables)."""
        if artefact == "executed":
            return bool(self.executed_tables)
        return self.ontology_file(artefact) is not None

    def module(self, name: str) -> ModuleType:
        """Import a module of the pack's package (e.g. `keys`) by file location."""
        if name in self._modules:
            return self._modules[name]
        package = f"kgbench_pack_{self.name.replace('-', '_')}"
        if package not in sys.modules:
            init = self.dir / "__init__.py"
            if not init.is_file():
                raise InputError(str(self.dir), "a pack with Python code needs an __init__.py")
            spec = importlib.util.spec_from_file_location(
                package, init, submodule_search_locations=[str(self.dir)])
            assert spec and spec.loader
            mod = importlib.util.module_from_spec(spec)
            sys.modules[package] = mod
            spec.loader.exec_module(mod)
        full = f"{package}.{name}"
        if full not in sys.modules:
            path = self.dir / f"{name}.py"
            if not path.is_file():
                raise InputError(str(self.dir / "pack.yaml"), f"names module '{name}', but "
                                 f"{path} does not exist")
            spec = importlib.util.spec_from_file_location(full, path)
            assert spec and spec.loader
            mod = importlib.util.module_from_spec(spec)
            sys.modules[full] = mod
            spec.loader.exec_module(mod)
        self._modules[name] = sys.modules[full]
        return self._modules[name]

    def callable(self, ref: str, *, field_name: str) -> Callable[..., Any]:
        """Resolve 'module:function' from the manifest."""
        mod_name, _, fn_name = ref.partition(":")
        fn = getattr(self.module(mod_name), fn_name or "main", None)
        if not callable(fn):
            raise InputError(str(self.dir / "pack.yaml"), f"'{ref}' is not a function",
                             field=field_name)
        return fn

    def key_function(self, name: str, *, question: str) -> Callable[..., Mapping[str, Any]]:
        """A key function of the pack's keys module."""
        keys_mod = self.module(str(self.manifest.get("keys", "keys")))
        fn = getattr(keys_mod, name, None)
        if not callable(fn):
            raise InputError(str(self.dir / "pack.yaml"), f"keys module has no function '{name}'",
                             question=question, field="key")
        return fn

    def generate(self, variant: str, seed: int) -> Tables:
        """The variant's tables, from the pack's generator or its fixed data files."""
        params = self.variants[variant]
        if "generator" in self.manifest:
            fn = self.callable(str(self.manifest["generator"]), field_name="generator")
            return fn(variant=variant, seed=seed, **dict(params))
        data_dir = self.dir / str(params.get("data", self.manifest.get("data", "data")))
        return read_tables(data_dir, self.tables)

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 over every file of the pack and its ontology folder (code, manifest, TTL)."""
        digest = hashlib.sha256()
        for base in (self.dir, self.ontology_dir):
            if not base.is_dir():
                continue
            for path in sorted(base.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    digest.update(str(path.relative_to(base)).encode())
                    digest.update(path.read_bytes())
        return digest.hexdigest()

    def reads_personal(self, persona: str) -> bool:
        if persona not in self.personas:
            raise InputError(str(self.dir / "pack.yaml"), f"no persona '{persona}' "
                             f"(known: {', '.join(sorted(self.personas))})", field="personas")
        return self.personas[persona].reads_personal


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


def find_pack(name: str, datasets_dir: Path, ontology_dir: Path) -> Pack:
    """Load the pack `name` from `datasets_dir/name/pack.yaml`."""
    import yaml

    pack_dir = datasets_dir / name
    manifest_path = pack_dir / "pack.yaml"
    where = str(manifest_path)
    if not manifest_path.is_file():
        raise InputError(where, f"no pack named '{name}' (expected its manifest here)")
    try:
        manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise InputError(where, f"not valid YAML: {exc}") from exc
    tables = _parse_tables(manifest.get("tables"), where, "tables")
    if not tables:
        raise InputError(where, "a pack needs at least one table", field="tables")
    executed = manifest.get("executed") or {}
    executed_tables = _parse_tables(executed.get("tables"), where, "executed.tables")
    if executed and not executed.get("function"):
        raise InputError(where, "names no function that computes the executed tables",
                         field="executed.function")
    personal: dict[str, frozenset[str]] = {}
    for tname, cols in (manifest.get("personal") or {}).items():
        if tname not in tables or not set(cols) <= set(tables[tname].column_names):
            raise InputError(where, f"names columns not in table '{tname}'",
                             field=f"personal.{tname}")
        personal[tname] = frozenset(cols)
    personas = {
        pname: Persona(pname, bool((spec or {}).get("reads_personal", False)))
        for pname, spec in (manifest.get("personas") or {"analyst": {}}).items()
    }
    variants = manifest.get("variants") or {"base": {}}
    from pytest_kgbench.evidence import spec_problem

    for concept, kinds in (manifest.get("evidence") or {}).items():
        for kind, spec in (kinds or {}).items():
            if kind == "ablate":
                if not isinstance(spec, list) or not all(isinstance(c, str) for c in spec):
                    raise InputError(where, "must list the columns whose filters are the "
                                     "definition", field=f"evidence.{concept}.ablate")
                continue
            problem = spec_problem(spec)
            if problem:
                raise InputError(where, problem, field=f"evidence.{concept}.{kind}")
    return Pack(
        name=name, dir=pack_dir, ontology_dir=ontology_dir / name, manifest=manifest,
        tables=tables, executed_tables=executed_tables, personal=personal, personas=personas,
        variants={str(k): (v or {}) for k, v in variants.items()},
        seed=int(manifest.get("seed", 0)),
    )


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
    if sql_type == "BOOLEAN":
        return text.lower() in ("true", "1", "yes")
    return text


def write_csv(path: Path, spec: TableSpec, rows: list[Row]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(spec.column_names)
        for row in rows:
            writer.writerow([format_value(row.get(c)) for c in spec.column_names])


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
        for i, row in enumerate(rows):
            if set(row) != cols:
                raise InputError(where, f"row {i} has columns {sorted(row)}",
                                 field=f"{field_name}.{name}")


def normalise_id(text: str) -> str:
    """Identifiers compare case-insensitively, ignoring surrounding space and inner blanks."""
    return "".join(str(text).split()).casefold()
