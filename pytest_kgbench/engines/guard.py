"""The guard: what a persona may do with a store, decided by the parser of the engine that runs
the query — DuckDB's own for SQL, rdflib's (and on Oxigraph, Oxigraph's too) for SPARQL.

The guard is not the defence of withheld data: a persona that may not read personal data is
given a store built without it (packs/build.py), so no query of any shape can return it. The
guard is the classifier in front of the store: it refuses what the store must never run
(writes, batches, settings, catalog and file table functions, any SQL function outside the engine's
list,
SERVICE, CONSTRUCT and DESCRIBE) and gives a clear, Trino-style refusal naming the column when
a query asks for withheld data. It never raises: a
text its parser rejects is not run and comes back as an error, a statement it does not
recognise is refused, because "allow what cannot be parsed" is how a parser differential gets
through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pytest_kgbench.engines import CAPS, Caps
from pytest_kgbench.packs.evidence import read_sparql, walk

FULL, RESTRICTED = "full", "restricted"  # the views of a variant a store is built in


@dataclass(frozen=True)
class PersonalProperty:
    """A personal column as the graph holds it: the predicate its cells map to, and the class
    of its table's rows (so descriptions can say the property is withheld)."""

    predicate: str
    table: str
    column: str
    klass: str | None = None


@dataclass(frozen=True)
class Guard:
    """Persona rules over one store. `personal` maps table -> personal columns;
    `personal_predicates` holds the IRIs those columns map to in RDF (`properties` says which
    column each one is)."""

    persona: str = "analyst"
    reads_personal: bool = False
    personal: dict[str, frozenset[str]] = field(default_factory=dict)
    personal_predicates: frozenset[str] = frozenset()
    properties: tuple[PersonalProperty, ...] = ()

    @property
    def view(self) -> str:
        """Which build of the variant this persona's store is opened on: the full data, or
        the restricted copy without the personal columns and triples."""
        withholds = not self.reads_personal and (any(self.personal.values())
                                                 or bool(self.personal_predicates))
        return RESTRICTED if withholds else FULL

    def withheld_columns(self, table: str) -> frozenset[str]:
        """Columns of `table` this persona may not see (left out of descriptions and prompts)."""
        if self.reads_personal:
            return frozenset()
        lowered = {t.lower(): cols for t, cols in self.personal.items()}
        return lowered.get(table.lower(), frozenset())

    def withheld_predicates(self) -> frozenset[str]:
        return frozenset() if self.reads_personal else self.personal_predicates

    def withheld_by_class(self) -> dict[str, tuple[str, ...]]:
        """class IRI -> the withheld predicate IRIs of its instances."""
        out: dict[str, set[str]] = {}
        for prop in self.properties:
            if prop.klass and prop.predicate in self.withheld_predicates():
                out.setdefault(prop.klass, set()).add(prop.predicate)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    def to_json(self) -> dict[str, Any]:
        """The guard as builtin values (it crosses into a store's worker process)."""
        return {"persona": self.persona, "reads_personal": self.reads_personal,
                "personal": {t: sorted(c) for t, c in self.personal.items()},
                "personal_predicates": sorted(self.personal_predicates),
                "properties": [vars(p) for p in self.properties]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Guard:
        return cls(persona=str(data["persona"]), reads_personal=bool(data["reads_personal"]),
                   personal={t: frozenset(c) for t, c in data["personal"].items()},
                   personal_predicates=frozenset(data["personal_predicates"]),
                   properties=tuple(PersonalProperty(**p) for p in data["properties"]))

    def check(self, language: str, statement: str) -> str | None:
        """The refusal for a statement in `language` ('sql' or 'sparql'), without a store."""
        if language == "sparql":
            return classify_sparql(statement, self).refused
        import duckdb

        con = duckdb.connect(":memory:", config={"enable_external_access": False})
        try:
            return classify_sql(con, statement, self).refused
        finally:
            con.close()

    def check_sql(self, con: Any, statement: str) -> str | None:
        return classify_sql(con, statement, self).refused

    def check_sparql(self, statement: str) -> str | None:
        return classify_sparql(statement, self).refused

    def denied(self, table: str, columns: list[str], via: str = "") -> str:
        """The refusal of a query naming withheld columns (the wording of Trino's)."""
        how = f"{via}: " if via else ""
        return (f"Access Denied: Cannot select from columns [{', '.join(columns)}] in table "
                f"{table} ({how}personal data withheld from persona '{self.persona}')")


@dataclass
class Verdict:
    """What the guard made of one statement: refused (never run), rejected by the engine's
    parser (never run, reported as the query's error), or let through; plus what the parser
    saw (SQL: the base table names; SPARQL: the IRIs and the translated query)."""

    refused: str | None = None
    error: str | None = None
    tables: set[str] = field(default_factory=set)
    iris: frozenset[str] = frozenset()
    query: Any = None

    @property
    def runs(self) -> bool:
        return self.refused is None and self.error is None


# --- SQL: DuckDB's parser ---------------------------------------------------------------------

QUERY_NODES = frozenset({"SELECT_NODE", "SET_OPERATION_NODE", "RECURSIVE_CTE_NODE", "CTE_NODE"})
TABLE_REFS = frozenset({"BASE_TABLE", "JOIN", "SUBQUERY", "TABLE_FUNCTION", "EXPRESSION_LIST",
                        "EMPTY", "EMPTY_FROM", "PIVOT", "DELIM_GET", "COLUMN_DATA"})
ORDER_TYPES = frozenset({"ORDER_DEFAULT", "ASCENDING", "DESCENDING", "INVALID"})
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})


@dataclass(frozen=True)
class SqlFunctions:
    """The functions an engine's guard admits, by the name DuckDB's parser gives them (an
    operator by its symbol: LIKE is `~~`; `count(*)` is `count_star`, EXTRACT `date_part`):
    what a question could need, and nothing that reads the catalog or the settings, runs SQL
    text, takes a lock, signals a session or writes (docs/safety.md lists them). Every other
    function is refused by name; beneath the guard the engine's own walls stay (PostgreSQL:
    the persona role may not execute the functions outside the list, engines/postgres.py)."""

    engine: str
    names: frozenset[str]

    def refusal(self, name: str, schema: str = "") -> str | None:
        """Why a call of `name` (qualified by `schema`) is refused, or None."""
        if schema.lower() not in ("", "pg_catalog", "main"):
            return (f"the function {schema}.{name}() is not allowed: call a function by its "
                    f"plain name")
        if name.lower() in self.names:
            return None
        return (f"the function {name}() is not allowed in a query on {self.engine}: the store "
                f"offers SQL's usual scalar, aggregate and window functions, not this one")


# what both engines offer under the same name (a name one of them lacks fails there with that
# engine's own error); every function the packs' reference SQL calls is here (a test)
SQL_OPERATORS = frozenset({"+", "-", "*", "/", "//", "%", "^", "||", "~~", "!~~", "~~*",
                           "!~~*", "regexp_full_match"})  # the last is SIMILAR TO
SQL_AGGREGATES = frozenset({
    "count", "count_star", "sum", "avg", "min", "max", "bool_and", "bool_or", "string_agg",
    "array_agg", "stddev", "stddev_samp", "stddev_pop", "variance", "var_samp", "var_pop",
    "corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept", "mode",
    "quantile_cont", "quantile_disc"})  # the last two: percentile_cont/_disc WITHIN GROUP
SQL_WINDOW = frozenset({"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile",
                        "lag", "lead", "first_value", "last_value", "nth_value"})
SQL_SCALARS = frozenset({
    # numbers
    "abs", "round", "ceil", "ceiling", "floor", "trunc", "sqrt", "cbrt", "power", "pow", "exp",
    "ln", "log", "log10", "sign", "mod", "greatest", "least", "nullif",
    # text
    "lower", "upper", "length", "char_length", "character_length", "substring", "substr",
    "trim", "ltrim", "rtrim", "replace", "concat", "concat_ws", "left", "right", "position",
    "strpos", "starts_with", "split_part", "reverse", "repeat", "lpad", "rpad", "translate",
    "regexp_replace", "regexp_matches",
    # dates
    "date_part", "date_trunc", "make_date", "age",
    # arrays, rows (`x = ANY(ARRAY[...])` is an unnest to DuckDB's parser)
    "array_position", "array_length", "cardinality", "unnest", "generate_series", "row",
    # DuckDB's spelling that cwd-acme's reference SQL uses; PostgreSQL has no such function
    "date_diff"})
SQL_COMMON = SQL_OPERATORS | SQL_AGGREGATES | SQL_WINDOW | SQL_SCALARS
DUCKDB_ONLY = frozenset({
    "median", "quantile", "any_value", "first", "last", "arg_max", "arg_min", "max_by",
    "min_by", "count_if", "list", "datediff", "date_sub", "date_add", "year", "month", "day",
    "quarter", "dayofweek", "dayofyear", "week", "isodow", "strftime", "strptime", "last_day",
    "make_timestamp", "list_value", "list_position", "list_contains", "array_contains",
    "list_extract", "array_extract", "len", "if", "ifnull", "contains", "ends_with", "suffix",
    "prefix", "instr", "lcase", "ucase", "strlen", "regexp_extract", "range"})
POSTGRES_ONLY = frozenset({"to_char", "to_date", "to_number", "btrim", "every"})
DUCKDB_FUNCTIONS = SqlFunctions("DuckDB", SQL_COMMON | DUCKDB_ONLY)
POSTGRES_FUNCTIONS = SqlFunctions("PostgreSQL", SQL_COMMON | POSTGRES_ONLY)
CATALOG_PREFIXES = ("duckdb_", "pragma_", "sqlite_", "pg_")
CATALOG_SCHEMAS = frozenset({"information_schema", "pg_catalog"})
CATALOG_NAMES = frozenset({"system", "temp"})
# the end of a catalog refusal: where the store is described instead (left out of the refusal
# by tools.call_tool when the session was not offered those tools: --schema none)
CATALOG_HINT = ": use the list_tables and describe tools"


def classify_sql(con: Any, statement: str, guard: Guard, caps: Caps = CAPS,
                 functions: SqlFunctions | None = None) -> Verdict:
    """DuckDB's parser on `statement`: exactly one SELECT, reading no catalog, file or other
    table by name, calling only the engine's `functions` (DuckDB's by default), naming no
    withheld column. `con` is the store's connection (so the store's deadline interrupts the
    parse too) or any DuckDB connection."""
    import duckdb

    if len(statement) > caps.query_chars:
        return Verdict(refused=f"the query is {len(statement):,} characters long; at most "
                               f"{caps.query_chars:,} are accepted")
    try:
        statements = con.extract_statements(statement)
        kinds = [str(st.type).rsplit(".", 1)[-1] for st in statements]
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        return Verdict(error=f"{type(exc).__name__}: {exc}")
    except RecursionError:
        return Verdict(error="the query is nested too deeply to parse; it was not run")
    except Exception as exc:  # noqa: BLE001 - e.g. a statement type the client does not know
        return Verdict(refused=f"the statement is of a kind the guard does not recognise "
                               f"({type(exc).__name__}: {exc}); only one SELECT is accepted")
    if not statements:
        return Verdict(error="no statement: the query is empty or only a comment")
    if len(statements) > 1:
        return Verdict(refused=f"batches are not allowed: one statement per query (this text "
                               f"holds {len(statements)}); send them one at a time")
    kind = kinds[0]
    if kind != "SELECT":
        return Verdict(refused=f"{kind} statements are not allowed: the store is read-only "
                               f"for persona '{guard.persona}' (one SELECT per query)")
    tree = sql_tree(con, statement)
    if tree is None:
        return Verdict(refused="DuckDB's parser cannot describe this SELECT to the guard; "
                               "it was not run")
    return _classify_tree(tree, guard, functions or DUCKDB_FUNCTIONS)


def _classify_tree(tree: dict[str, Any], guard: Guard, functions: SqlFunctions
                   ) -> Verdict:
    verdict = Verdict(tables=sql_tables(tree))
    refs: set[str] = set()
    for node in walk(tree):
        cls = node.get("class")
        if cls is not None:
            if cls == "COLUMN_REF" and node.get("column_names"):
                refs.add(str(node["column_names"][-1]).lower())
            elif cls in ("FUNCTION", "WINDOW"):
                why = functions.refusal(str(node.get("function_name") or ""),
                                        str(node.get("schema") or ""))
                if why:
                    verdict.refused = why
                    return verdict
            continue
        kind = node.get("type")
        if not isinstance(kind, str):
            continue
        if kind == "TABLE_FUNCTION":
            name = str((node.get("function") or {}).get("function_name") or "").lower()
            if name not in TABLE_FUNCTIONS:
                verdict.refused = (f"the table function {name}() is not allowed: only "
                                   f"{', '.join(sorted(TABLE_FUNCTIONS))}; read the store's "
                                   f"tables by name{CATALOG_HINT}")
                return verdict
        elif kind == "BASE_TABLE":
            name = str(node.get("table_name") or "").lower()
            schema = str(node.get("schema_name") or "").lower()
            catalog = str(node.get("catalog_name") or "").lower()
            if (schema in CATALOG_SCHEMAS or catalog in CATALOG_NAMES or schema in CATALOG_NAMES
                    or name.startswith(CATALOG_PREFIXES) or name in CATALOG_SCHEMAS):
                what = ".".join(p for p in (catalog, schema, name) if p)
                verdict.refused = f"the catalog {what} is not offered{CATALOG_HINT}"
                return verdict
        elif kind == "SHOW_REF":
            verdict.refused = f"DESCRIBE, SHOW and SUMMARIZE are not offered{CATALOG_HINT}"
            return verdict
        elif not (kind in QUERY_NODES or kind in TABLE_REFS or kind in ORDER_TYPES
                  or kind.endswith(("_MODIFIER", "_TYPE_INFO"))):
            verdict.refused = (f"the query uses a construct the guard does not recognise "
                               f"({kind}); only a plain SELECT is accepted")
            return verdict
    for table in sorted(verdict.tables):
        hit = sorted(c for c in guard.withheld_columns(table) if c.lower() in refs)
        if hit:
            verdict.refused = guard.denied(table, hit)
            return verdict
    return verdict


def sql_tree(con: Any, query: str) -> dict[str, Any] | None:
    """DuckDB's parse tree of one SELECT (json_serialize_sql), or None if it cannot give one.

    The parser, not the binder: `duckdb.get_table_names` binds USING joins and fails on them.
    """
    import duckdb

    try:
        row = con.execute("SELECT json_serialize_sql(?)", [query]).fetchone()
    except duckdb.InterruptException:
        raise
    except Exception:  # noqa: BLE001 - any failure means: no tree
        return None
    try:
        tree = json.loads(row[0]) if row and row[0] else {}
    except (ValueError, RecursionError):
        return None
    return None if not isinstance(tree, dict) or tree.get("error") else tree


def sql_tables(tree: dict[str, Any]) -> set[str]:
    """Names of the base tables a parse tree reads (CTE names included; callers filter)."""
    return {str(node["table_name"]) for node in walk(tree)
            if node.get("type") == "BASE_TABLE" and node.get("table_name")}


# --- SPARQL: rdflib's parser ------------------------------------------------------------------

SPARQL_FORMS = frozenset({"SelectQuery", "AskQuery"})
# the terms a SPARQL query may hold, a term inside brackets (an expression's) counting two:
# rdflib's parser, which reads every query, costs up to about a millisecond of CPU an
# expression's operand (an operand goes down its whole expression grammar) and its algebra
# orders the triples of one group in quadratic time; at 1,200 the worst shapes classify in
# about half a second, and the longest reference query counts 812 (benchmarks/README.md,
# "The guard's parse")
SPARQL_TERMS = CAPS.sparql_terms


@lru_cache(maxsize=1)
def _term_pattern() -> re.Pattern[str]:
    """One SPARQL term per match, never fewer than rdflib's lexer reads: a string literal
    (rdflib's own four patterns), an IRI (its group: `sparql_terms` counts the characters in
    it that could split it, where rdflib reads `<` as less-than), a comment (not counted), a
    variable, a name or prefixed name or number (a dot, a dash, a second colon start another),
    or any other single character: every operator and bracket counts."""
    from rdflib.plugins.sparql import parser

    strings = [getattr(parser, n).re.pattern for n in (
        "STRING_LITERAL_LONG1", "STRING_LITERAL_LONG2", "STRING_LITERAL1", "STRING_LITERAL2")]
    return re.compile("|".join([*strings, r'<(?P<iri>[^<>"{}|^`\\\x00-\x20]*)>', r"#[^\r\n]*",
                                r"[?$]\w+", r"\w+(?::\w*)?", r":\w*", r"\S"]))


_SPLITS = re.compile(r"[^\w:#.]")  # in an IRI: where an expression could split it


def sparql_terms(statement: str) -> int:
    """How many terms `statement` holds (`_term_pattern`), never fewer than rdflib's lexer
    reads, a term inside brackets counting two: what rdflib's parse of it costs."""
    count = depth = 0
    for m in _term_pattern().finditer(statement):
        term = m.group()
        if term.startswith("#"):
            continue
        iri = m.group("iri")
        count += (1 if iri is None else 1 + len(_SPLITS.findall(iri))) * (2 if depth else 1)
        if term == "(":
            depth += 1
        elif term == ")" and depth:
            depth -= 1
    return count


def classify_sparql(statement: str, guard: Guard, namespaces: Mapping[str, str] | None = None,
                    caps: Caps = CAPS) -> Verdict:
    """rdflib's parser and algebra on `statement`: one SELECT or ASK, no SERVICE anywhere, no
    FROM, no withheld predicate named. `namespaces`: the store's bound prefixes, which the
    engine resolves undeclared prefixes with (so the guard reads the query as it will run)."""
    if len(statement) > caps.query_chars:
        return Verdict(refused=f"the query is {len(statement):,} characters long; at most "
                               f"{caps.query_chars:,} are accepted")
    terms = sparql_terms(statement)
    if terms > SPARQL_TERMS:
        return Verdict(refused=f"the query holds {terms:,} terms (names, literals, operators; "
                               f"one inside brackets counts two); at most {SPARQL_TERMS:,} "
                               "are accepted: shorten it, or split it into smaller queries")
    reading = read_sparql(statement, _prefixes_named(statement, namespaces))
    if reading.update:
        return Verdict(refused=f"SPARQL updates are not allowed: the store is read-only for "
                               f"persona '{guard.persona}' (one SELECT or ASK per query)")
    if reading.error:
        return Verdict(error=reading.error)
    verdict = Verdict(iris=reading.iris, query=reading.query)
    if reading.form not in SPARQL_FORMS:
        verdict.refused = (f"{reading.form.removesuffix('Query').upper()} queries are not "
                           f"offered: use SELECT or ASK")
    elif "ServiceGraphPattern" in reading.names:
        verdict.refused = "SERVICE (a federated query) is not allowed: the store has no network"
    elif reading.datasets:
        verdict.refused = ("FROM and FROM NAMED are not allowed: a query reads the store's own "
                           "graph")
    else:
        withheld = guard.withheld_predicates()
        hit = sorted(withheld & verdict.iris)
        if hit:
            props = [p for p in guard.properties if p.predicate in hit]
            table = props[0].table if props else "the graph"
            columns = sorted({p.column for p in props}) or hit
            verdict.refused = guard.denied(table, columns,
                                           via=", ".join(_curie(i, namespaces) for i in hit))
    return verdict


def _prefixes_named(statement: str, namespaces: Mapping[str, str] | None
                    ) -> tuple[tuple[str, str], ...]:
    """The store prefixes `statement` can use: those whose `prefix:` its text holds once its
    \\u escapes are expanded, as rdflib's parser expands them (a prefixed name is spelt
    so; every other binding cannot change how the query reads). Keying the reading by these
    alone lets one reading serve every store and persona."""
    if not namespaces:
        return ()
    from rdflib.plugins.sparql.parser import expandUnicodeEscapes

    try:
        text = expandUnicodeEscapes(statement)
    except Exception:  # noqa: BLE001 - an escape rdflib cannot expand: every binding counts
        return tuple(sorted(namespaces.items()))
    return tuple(sorted((p, ns) for p, ns in namespaces.items() if f"{p}:" in text))


def _curie(iri: str, namespaces: Mapping[str, str] | None) -> str:
    for prefix, ns in sorted((namespaces or {}).items(), key=lambda kv: -len(kv[1])):
        if prefix and iri.startswith(ns) and len(iri) > len(ns):
            return f"{prefix}:{iri[len(ns):]}"
    return f"<{iri}>"


def query_iris(statement: str, namespaces: Mapping[str, str] | None = None) -> frozenset[str]:
    """Every IRI a SPARQL query mentions (empty when it does not parse)."""
    return classify_sparql(statement, Guard(reads_personal=True), namespaces).iris
