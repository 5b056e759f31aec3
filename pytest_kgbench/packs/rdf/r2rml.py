"""RDF from tables through a published R2RML mapping, run by morph-kgc (a maintained R2RML
engine; not a converter of ours). Pure module: no pytest.

morph-kgc reads the tables from a DuckDB file through SQLAlchemy and duckdb-engine. Run as it
ships, it cannot map a DuckDB database, so four things are arranged around it (each the
smallest that works; none edits the mapping):

1. Qualified table names. A mapping may name `rr:tableName "catalog.schema.table"` (the
   database it was written against). morph-kgc sends that as `"catalog"."schema"."table"`.
   The built database is copied to a temporary file named `<catalog>.duckdb` (DuckDB names a
   file's catalog after it), and each schema gets one view per named table over `main`. The
   built file itself is never opened for writing: its integrity is checksummed.
2. Identifier case (shim). DuckDB returns result columns in their stored case
   (`Party_Identifier`); morph-kgc looks the mapping's references (`party_identifier`) up
   case-sensitively and fails. Each result column is renamed to the reference that equals it
   ignoring case (morph-kgc does the same for Oracle only).
3. Natural-mapping datatypes (shim). R2RML types a literal by the SQL type of its column.
   morph-kgc's own inference looks columns up under the dotted table name and maps types by
   substring (TIMESTAMP contains TIME), so on DuckDB it types nothing or wrongly. The shim
   DESCRIBEs the logical table (table or rr:sqlQuery) and maps the DuckDB type exactly.
4. NULLs (shim). For rr:sqlQuery logical tables morph-kgc 2.10 turns a SQL NULL into the
   literal "None"; the shim hands it NaN, which morph-kgc drops, so a NULL gives no triple
   (as R2RML says).

The shims patch morph-kgc's functions only for the duration of one `materialize` call, which
runs morph-kgc in this process (number_of_processes=1).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import InputError
from pytest_kgbench.packs.schema import TableSpec

XSD = "http://www.w3.org/2001/XMLSchema#"
RR_TABLE_NAME = "http://www.w3.org/ns/r2rml#tableName"
# R2RML natural mapping (https://www.w3.org/TR/r2rml/#natural-mapping), by DuckDB type name;
# a type not listed (VARCHAR, ...) gives a plain literal
NATURAL = {"TINYINT": "integer", "SMALLINT": "integer", "INTEGER": "integer",
           "BIGINT": "integer", "HUGEINT": "integer", "DOUBLE": "double", "FLOAT": "double",
           "BOOLEAN": "boolean", "DATE": "date", "TIME": "time", "TIMESTAMP": "dateTime"}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified_names(mapping: Path, where: str) -> list[list[str]]:
    """The rr:tableName values of the mapping that name a schema (`schema.table` or
    `catalog.schema.table`), split into their parts."""
    import rdflib

    graph = rdflib.Graph()
    try:
        graph.parse(mapping, format="turtle")
    except Exception as exc:  # noqa: BLE001 - any parser's complaint, named with the file
        raise InputError(str(mapping), f"is not an R2RML mapping rdflib can read: {exc}") from exc
    names = sorted({str(o) for o in graph.objects(None, rdflib.URIRef(RR_TABLE_NAME))})
    out = [n.replace('"', "").split(".") for n in names if "." in n]
    bad = [".".join(p) for p in out if len(p) > 3]
    if bad:
        raise InputError(where, f"the R2RML mapping names tables {bad}: at most "
                         "catalog.schema.table", field="rdf.r2rml")
    return out


def prepare_copy(database: Path, names: list[list[str]], tables: Mapping[str, TableSpec],
                 folder: Path, where: str) -> Path:
    """A copy of `database` in `folder` whose catalog and schemas answer the mapping's
    qualified table names (views over `main`)."""
    import duckdb

    catalogs = sorted({p[0] for p in names if len(p) == 3})
    if len(catalogs) > 1:
        raise InputError(where, f"the R2RML mapping names tables in several catalogs {catalogs}",
                         field="rdf.r2rml")
    copy = folder / f"{catalogs[0] if catalogs else 'kgbench'}.duckdb"
    shutil.copyfile(database, copy)
    known = {t.lower(): t for t in tables}
    con = duckdb.connect(str(copy))
    try:
        for parts in names:
            schema, table = parts[-2], parts[-1]
            if table.lower() not in known:
                raise InputError(where, f"the R2RML mapping names table "
                                 f"{'.'.join(parts)}, which the pack does not have",
                                 field="rdf.r2rml")
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quoted(schema)}")
            con.execute(f"CREATE OR REPLACE VIEW {_quoted(schema)}.{_quoted(table)} AS "
                        f"SELECT * FROM main.{_quoted(known[table.lower()])}")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return copy


def natural_datatype(duckdb_type: str) -> str | None:
    """The XSD datatype R2RML's natural mapping gives a column of this DuckDB type."""
    base = duckdb_type.upper().split("(", 1)[0].strip()
    if base == "DECIMAL":
        return XSD + "decimal"
    return XSD + NATURAL[base] if base in NATURAL else None


@contextlib.contextmanager
def _shims(database: Path) -> Iterator[None]:
    """Shims 2-4 of the module docstring, installed for the duration of the block."""
    import duckdb
    from morph_kgc import materializer
    from morph_kgc.data_source import relational_db
    from morph_kgc.mapping import mapping_parser

    original_data = materializer.get_sql_data
    original_type = mapping_parser.get_rdb_reference_datatype

    def get_sql_data(config: Any, rml_rule: Any, references: Any) -> Any:
        frame = original_data(config, rml_rule, references)
        by_lower = {str(r).lower(): r for r in references}
        frame = frame.rename(columns={c: by_lower[c.lower()] for c in frame.columns
                                      if c.lower() in by_lower})          # 2: case
        return frame.astype(object).where(frame.notna(), float("nan"))   # 4: NULL -> NaN

    def reference_datatype(config: Any, rml_rule: Any, reference: str) -> str | None:  # 3
        source = rml_rule["logical_source_value"]
        if rml_rule["logical_source_type"] == relational_db.RML_TABLE_NAME:
            source = "SELECT * FROM " + ".".join(_quoted(p) for p in
                                                 source.replace('"', "").split("."))
        con = duckdb.connect(str(database), read_only=True)
        try:
            cols = {str(r[0]).lower(): str(r[1])
                    for r in con.execute("DESCRIBE " + source).fetchall()}
        finally:
            con.close()
        return natural_datatype(cols.get(reference.lower(), ""))

    materializer.get_sql_data = get_sql_data
    mapping_parser.get_rdb_reference_datatype = reference_datatype
    try:
        yield
    finally:
        materializer.get_sql_data = original_data
        mapping_parser.get_rdb_reference_datatype = original_type


def materialize(mapping: Path, database: Path, tables: Mapping[str, TableSpec], *,
                where: str) -> Iterator[Any]:
    """The triples the R2RML `mapping` makes of the tables in the DuckDB file `database`
    (rdflib terms), run by morph-kgc over a temporary copy of the file."""
    try:
        import morph_kgc
    except ImportError as exc:
        raise InputError(where, "an R2RML mapping is run by morph-kgc, which is not installed "
                         "(pip install 'pytest-kgbench[r2rml]' && pip install --no-deps "
                         "morph-kgc==2.10.0; docs/packs.md, 'RDF')",
                         field="rdf.r2rml") from exc
    if not mapping.is_file():
        raise InputError(where, f"the R2RML mapping {mapping} does not exist", field="rdf.r2rml")
    names = qualified_names(mapping, where)
    with tempfile.TemporaryDirectory(prefix="kgbench-r2rml-") as tmp:
        copy = prepare_copy(database, names, tables, Path(tmp), where)
        ini = Path(tmp) / "morph.ini"
        ini.write_text("[CONFIGURATION]\noutput_format=N-TRIPLES\nnumber_of_processes=1\n"
                       "infer_sql_datatypes=yes\nlogging_level=WARNING\n\n[mapping]\n"
                       f"mappings={mapping}\ndb_url=duckdb:///{copy}\n", encoding="utf-8")
        with _shims(copy):
            try:
                graph = morph_kgc.materialize(str(ini))
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - morph-kgc's complaint, named with the file
                raise InputError(str(mapping), f"morph-kgc cannot run the mapping: "
                                 f"{type(exc).__name__}: {exc}") from exc
    return iter(list(graph))
