"""Packs: a pack's schema and the public authoring SDK a pack's generator imports (`Draws`,
`once_per_tables`, the table helpers), finding and loading packs, their tables, building a
variant's datasets, the reading artefacts, RDF (`packs.rdf`) and the wording check. Above core;
below engines.

`from pytest_kgbench.packs import Draws` is the authoring API; every other public name of the
schema module (`pytest_kgbench.packs.schema`) is reachable here too, as it was when packs was
one module.
"""

from __future__ import annotations

from typing import Any

from pytest_kgbench.packs.schema import (
    Draws,
    Pack,
    Persona,
    TableSpec,
    check_tables,
    format_value,
    once_per_tables,
    parse_value,
    read_csv_rows,
    read_tables,
    write_csv,
)

__all__ = ["Draws", "Pack", "Persona", "TableSpec", "check_tables", "format_value",
           "once_per_tables", "parse_value", "read_csv_rows", "read_tables", "write_csv"]


def __getattr__(name: str) -> Any:
    """The rest of what `pytest_kgbench.packs` offered as one module (load_pack, find_pack, …)."""
    from pytest_kgbench.packs import schema

    try:
        return getattr(schema, name)
    except AttributeError:
        raise AttributeError(f"module 'pytest_kgbench.packs' has no attribute '{name}'") from None
