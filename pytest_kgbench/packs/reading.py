"""The data a reading condition shows, both ways: tables as CSV blocks and a graph as a Turtle
block in the prompt, and the same blocks read back from a prompt's text (the reading gold agent
rebuilds its store from them, proving the prompt carries the facts). Writer and reader live
together so the format cannot drift apart. Columns and predicates the persona may not read are
left out here, before the model ever sees them.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pytest_kgbench.packs.schema import TableSpec, format_value

if TYPE_CHECKING:
    from pytest_kgbench.packs.build import Built

class Withholding(Protocol):
    """What a persona may not see, as the engines' guard tells it (engines.guard.Guard)."""

    def withheld_columns(self, table: str) -> frozenset[str]: ...

    def withheld_predicates(self) -> frozenset[str]: ...


_CSV_BLOCK = re.compile(
    r"^### (?P<name>[\w-]+)\.csv\n(?P<info>[^\n]*)\n```csv\n(?P<body>.*?)\n```", re.M | re.S)
_TTL_BLOCK = re.compile(r"^### (?P<name>[\w.-]+\.ttl)\n```turtle\n(?P<body>.*?)\n```", re.M | re.S)


def csv_block(specs: Mapping[str, TableSpec], tables: Mapping[str, list[dict[str, Any]]],
              guard: Withholding) -> str:
    """Every table as CSV, each under a heading giving its row count and column types."""
    parts = ["## Data (CSV)", ""]
    for name, spec in specs.items():
        withheld = guard.withheld_columns(name)
        cols = [(c, t) for c, t in spec.columns if c not in withheld]
        rows = tables[name]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([c for c, _ in cols])
        for row in rows:
            writer.writerow([format_value(row[c]) for c, _ in cols])
        types = ", ".join(f"{c} {t}" for c, t in cols)
        note = f"; withheld: {', '.join(sorted(withheld))}" if withheld else ""
        parts += [f"### {name}.csv", f"{len(rows)} rows; columns: {types}{note}",
                  "```csv", buf.getvalue().rstrip("\n"), "```", ""]
    return "\n".join(parts).rstrip()


def rdf_block(built: Built, guard: Withholding) -> str:
    """The data as Turtle, without triples of withheld (personal) predicates: the build's
    data.ttl, or for a persona who may not read some predicates the same Turtle without
    them — the same prefixes, order and spelling of every id (rdfmap.turtle_without)."""
    withheld = guard.withheld_predicates()
    if withheld:
        from pytest_kgbench.packs.rdf.mapping import turtle_without

        text = turtle_without(built.data_ttl, withheld)
    else:
        text = built.data_ttl.read_text(encoding="utf-8")
    return "\n".join(["## Data (RDF, Turtle)", "", "### data.ttl", "```turtle", text.strip(),
                      "```"])


def tables_from_text(text: str) -> dict[str, tuple[TableSpec, str]]:
    """The CSV tables a prompt shows, with the column types their headings declare."""
    out: dict[str, tuple[TableSpec, str]] = {}
    for m in _CSV_BLOCK.finditer(text):
        types = m.group("info").split("columns:", 1)[-1].split(";", 1)[0]
        # the type is the last word (a column's name may hold spaces: "Loss Ratio DOUBLE")
        cols = tuple((name, kind) for name, _, kind in
                     (part.strip().rpartition(" ") for part in types.split(",")))
        spec = TableSpec(name=m.group("name"), columns=cols)
        out[spec.name] = (spec, m.group("body") + "\n")
    return out


def turtle_blocks(text: str) -> list[str]:
    """The body of every Turtle block a prompt shows."""
    return [m.group("body") for m in _TTL_BLOCK.finditer(text)]
