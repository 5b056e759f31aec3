"""RDF from tables through a published R2RML mapping, run by morph-kgc (a maintained R2RML
engine; not a converter of ours). Pure module: no pytest."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_kgbench.errors import InputError
from pytest_kgbench.packs import TableSpec


def materialize(mapping: Path, database: Path, tables: Mapping[str, TableSpec], *,
                where: str) -> Iterator[Any]:
    """The triples the R2RML `mapping` makes of the tables in the DuckDB file `database`."""
    raise InputError(where, "R2RML mappings are not supported yet", field="rdf.r2rml")
