"""The guard: what a persona may do with a store. Reading only; personal data only for personas
that may read it. It decides before a statement runs, and the store is read-only underneath it
as well, so a statement the guard misjudged still cannot write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Guard:
    """Persona rules over one store. `personal` maps table -> personal columns;
    `personal_predicates` holds the IRIs those columns map to in RDF."""

    persona: str = "analyst"
    reads_personal: bool = False
    personal: dict[str, frozenset[str]] = field(default_factory=dict)
    personal_predicates: frozenset[str] = frozenset()

    def withheld_columns(self, table: str) -> frozenset[str]:
        """Columns of `table` this persona may not see (left out of descriptions and prompts)."""
        if self.reads_personal:
            return frozenset()
        return self.personal.get(table, frozenset())

    def withheld_predicates(self) -> frozenset[str]:
        return frozenset() if self.reads_personal else self.personal_predicates

    def check(self, language: str, statement: str) -> str | None:
        """The refusal for a statement in `language` ('sql' or 'sparql'), without a store."""
        if language == "sparql":
            return self.check_sparql(statement)
        import duckdb

        con = duckdb.connect(":memory:")
        try:
            return self.check_sql(con, statement)
        finally:
            con.close()

    # --- SQL ---------------------------------------------------------------------------------

    def check_sql(self, con: Any, statement: str) -> str | None:
        """The reason to refuse `statement`, or None to let it run."""
        import duckdb

        try:
            statements = con.extract_statements(statement)
        except duckdb.Error:
            return None  # a syntax error: let the store report it as an error
        if not statements:
            return None
        for st in statements:
            if st.type != duckdb.StatementType.SELECT:
                kind = str(st.type).rsplit(".", 1)[-1]
                return (f"{kind} statements are not allowed: the store is read-only for "
                        f"persona '{self.persona}'")
        if self.reads_personal or not self.personal:
            return None
        for st in statements:
            tree = sql_tree(con, st.query)
            tables = {t.lower() for t in sql_tables(tree)} if tree is not None else None
            for table, cols in self.personal.items():
                if tables is not None and table.lower() not in tables:
                    continue
                refs, star = _sql_column_refs(tree)
                hit = sorted(c for c in cols if c.lower() in refs)
                if hit or star:
                    what = ", ".join(f"{table}.{c}" for c in (hit or sorted(cols)))
                    return (f"persona '{self.persona}' may not read personal data ({what})")
        return None

    # --- SPARQL ------------------------------------------------------------------------------

    def check_sparql(self, statement: str) -> str | None:
        """The reason to refuse a SPARQL statement, or None (syntax errors are left to run)."""
        parsed = parse_sparql(statement)
        if parsed is None:
            if not is_sparql_update(statement):
                return None
            return f"SPARQL updates are not allowed: the store is read-only for persona " \
                   f"'{self.persona}'"
        withheld = self.withheld_predicates()
        if not withheld:
            return None
        used = query_iris(statement)
        hit = sorted(withheld & used)
        if hit:
            return f"persona '{self.persona}' may not read personal data ({', '.join(hit)})"
        return None


def _walk(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def sql_tree(con: Any, query: str) -> dict[str, Any] | None:
    """DuckDB's parse tree of one SELECT (json_serialize_sql), or None if it cannot give one.

    The parser, not the binder: `duckdb.get_table_names` binds USING joins and fails on them.
    """
    try:
        row = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    except Exception:  # noqa: BLE001 - any failure means: no tree
        return None
    tree = json.loads(row[0]) if row and row[0] else {}
    return None if tree.get("error") else tree


def sql_tables(tree: dict[str, Any]) -> set[str]:
    """Names of the base tables a parse tree reads (CTE names included; callers filter)."""
    return {str(node["table_name"]) for node in _walk(tree)
            if node.get("type") == "BASE_TABLE" and node.get("table_name")}


def _sql_column_refs(tree: dict[str, Any] | None) -> tuple[set[str], bool]:
    """Column names a SELECT refers to (lower-case, last part) and whether it uses a star."""
    if tree is None:
        return set(), True  # cannot see inside: treat as reading everything
    refs: set[str] = set()
    star = False
    for node in _walk(tree):
        if node.get("class") == "COLUMN_REF" and node.get("column_names"):
            refs.add(str(node["column_names"][-1]).lower())
        elif node.get("class") == "STAR":
            star = True
    return refs, star


@lru_cache(maxsize=1024)
def parse_sparql(statement: str) -> Any:
    """rdflib's parse of a SPARQL query, once per text (guard and read set share it); None when
    the text is not a query."""
    from pyparsing import ParseException
    from rdflib.plugins.sparql.parser import parseQuery

    try:
        return parseQuery(statement)
    except ParseException:
        return None


@lru_cache(maxsize=256)
def is_sparql_update(statement: str) -> bool:
    from pyparsing import ParseException
    from rdflib.plugins.sparql.parser import parseUpdate

    try:
        parseUpdate(statement)
    except ParseException:
        return False
    return True


@lru_cache(maxsize=1024)
def query_iris(statement: str) -> frozenset[str]:
    """Every IRI a SPARQL query mentions (empty when it does not parse)."""
    parsed = parse_sparql(statement)
    if parsed is None:
        return frozenset()
    try:
        return frozenset(sparql_iris(parsed))
    except Exception:  # noqa: BLE001 - an untranslatable query reads nothing we can name
        return frozenset()


def sparql_iris(parsed: Any) -> set[str]:
    """Every IRI a parsed SPARQL query mentions (prefixes expanded)."""
    from rdflib import URIRef
    from rdflib.paths import Path
    from rdflib.plugins.sparql.algebra import translateQuery

    query = translateQuery(parsed)
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, URIRef):
            found.add(str(node))
        elif isinstance(node, dict):
            for value in node.values():
                visit(value)
        elif isinstance(node, (list, tuple, set)):
            for value in node:
                visit(value)
        elif isinstance(node, Path):  # property paths hide their IRIs in attributes
            for attr in ("args", "arg", "path"):
                if hasattr(node, attr):
                    visit(getattr(node, attr))

    visit(query.algebra)
    return found
