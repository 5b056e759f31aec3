"""The evidence of a definition in a query, read from the query's parse, never from its text: a
comment (`-- source_system not used`) or an unrelated `<= DATE` does not count.

A pack declares, in its manifest's `evidence:`, per concept and per reference kind (`sql`,
`sparql`, `executed`), what the query that ran must hold for the definition to count as used:

```yaml
evidence:
  credit:TestRecord: {sql: {column: source_system}, sparql: {iri: "cr:sourceSystem"},
                      executed: true}            # the executed tables already drop test records
  credit:RatingOnDate: {sql: {compare: {column: action_date, ops: ["<=", "<"]}}, ...}
  credit:RatingPeriod: {sql: {any: [{function: lead}, {column: valid_to}]}, ...}
```

A spec is `true` (the store applies the definition), or a mapping of these tests, all of which
must hold: `column` (a column reference of that name), `table` (a table read), `iri` (an IRI or
CURIE in the SPARQL algebra), `strings` (these string constants), `function` (a function,
aggregate or operator: `lead`, `max`, `/`), `pattern` (one of PATTERNS), `compare` (a
comparison: `column` or `function` on one side, `op` / `ops` (as if the column were on the
left), `number` or `string` on the other), and `any` / `all` (lists of specs).

SQL is parsed by DuckDB's own parser (json_serialize_sql); SPARQL by rdflib's parser and
algebra. Pure module: no pytest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from pytest_kgbench.core.errors import QueryTimeout

PATTERNS = ("recursive", "exists", "not_exists", "except", "minus", "optional",
            "count_distinct", "division")
TESTS = ("column", "table", "iri", "strings", "function", "pattern", "compare", "any", "all")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>", "!=": "!="}
_SQL_OPS = {"COMPARE_EQUAL": "=", "COMPARE_NOTEQUAL": "<>", "COMPARE_LESSTHAN": "<",
            "COMPARE_GREATERTHAN": ">", "COMPARE_LESSTHANOREQUALTO": "<=",
            "COMPARE_GREATERTHANOREQUALTO": ">="}


@dataclass
class Facts:
    """What a parsed query holds, as far as evidence can ask."""

    columns: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)
    iris: set[str] = field(default_factory=set)
    strings: set[str] = field(default_factory=set)
    functions: set[str] = field(default_factory=set)
    patterns: set[str] = field(default_factory=set)
    # (kind of the subject side, its name, the operator as if the subject were left, constant)
    comparisons: list[tuple[str, str, str, Any]] = field(default_factory=list)


# --- SQL -------------------------------------------------------------------------------------

def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict of a JSON tree (DuckDB's parse tree), without recursion: a deep tree cannot
    overflow the stack. The guard and the needs check read trees with it too."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _constant(node: dict[str, Any]) -> Any:
    """The value of a constant node (through a cast), or None."""
    while node.get("class") == "CAST":
        node = node.get("child") or {}
    if node.get("class") != "CONSTANT":
        return None
    literal = node.get("literal") or {}
    text = literal.get("text")
    if literal.get("kind") in ("INTEGER", "NUMERIC", "DECIMAL", "DOUBLE"):
        try:
            return float(str(text))
        except (TypeError, ValueError):
            return None
    return text


def _subject(node: dict[str, Any]) -> tuple[str, str] | None:
    while node.get("class") == "CAST":
        node = node.get("child") or {}
    if node.get("class") == "COLUMN_REF" and node.get("column_names"):
        return "column", str(node["column_names"][-1]).lower()
    if node.get("class") in ("FUNCTION", "WINDOW") and node.get("function_name"):
        return "function", str(node["function_name"]).lower()
    return None


@lru_cache(maxsize=2048)
def sql_facts(statement: str) -> Facts | None:
    """The facts of a SQL query by DuckDB's parser; None when it does not parse."""
    import duckdb

    con = _sql_parser()
    try:
        row = con.execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
        tree = json.loads(row[0]) if row and row[0] else {}
    except (duckdb.Error, ValueError, RecursionError):
        return None
    if tree.get("error"):
        return None
    facts = Facts()
    for node in walk(tree):
        cls, kind = node.get("class"), node.get("type")
        if cls == "COLUMN_REF" and node.get("column_names"):
            facts.columns.add(str(node["column_names"][-1]).lower())
        elif kind == "BASE_TABLE" and node.get("table_name"):
            facts.tables.add(str(node["table_name"]).lower())
        elif cls == "CONSTANT":
            value = _constant(node)
            if isinstance(value, str):
                facts.strings.add(value)
        elif cls in ("FUNCTION", "WINDOW") and node.get("function_name"):
            name = str(node["function_name"]).lower()
            facts.functions.add(name)
            if name == "count" and node.get("distinct"):
                facts.patterns.add("count_distinct")
            if name == "/":
                facts.patterns.add("division")
        elif kind == "RECURSIVE_CTE_NODE":
            facts.patterns.add("recursive")
        elif kind == "SET_OPERATION_NODE" and node.get("setop_type") == "EXCEPT":
            facts.patterns.add("except")
        elif cls == "SUBQUERY" and node.get("subquery_type") == "EXISTS":
            facts.patterns.add("exists")
        elif cls == "OPERATOR" and kind == "OPERATOR_NOT":
            if any(c.get("class") == "SUBQUERY" and c.get("subquery_type") == "EXISTS"
                   for c in node.get("children") or []):
                facts.patterns.add("not_exists")
        elif cls == "COMPARISON" and kind in _SQL_OPS:
            left, right = node.get("left") or {}, node.get("right") or {}
            op = _SQL_OPS[kind]
            for side, other, flip in ((left, right, False), (right, left, True)):
                subject = _subject(side)
                if subject is not None:
                    facts.comparisons.append((subject[0], subject[1],
                                              _FLIP[op] if flip else op, _constant(other)))
    return facts


@lru_cache(maxsize=1)
def _sql_parser() -> Any:
    """An empty in-memory DuckDB used only for its parser."""
    import duckdb

    return duckdb.connect(":memory:", config={"enable_external_access": False})


# --- SPARQL ------------------------------------------------------------------------------------

_SPARQL_PATTERNS = {"Builtin_NOTEXISTS": "not_exists", "Builtin_EXISTS": "exists",
                    "Minus": "minus", "LeftJoin": "optional"}


@dataclass(frozen=True)
class SparqlReading:
    """What rdflib's parser and algebra make of one text, whoever asks: the translated query
    (rdflib evaluates it as often as asked: its evaluation never changes it), its form, whether
    it names datasets, its algebra's node names and its IRIs; or that it is an update, or why
    it could not be read."""

    query: Any = None
    form: str = ""
    datasets: bool = False
    names: frozenset[str] = frozenset()
    iris: frozenset[str] = frozenset()
    update: bool = False
    error: str | None = None


@lru_cache(maxsize=512)  # a pack's reference queries under a few stores' prefixes; not more:
#                         every tree held here is walked by each full garbage collection
def read_sparql(statement: str, namespaces: tuple[tuple[str, str], ...] = ()) -> SparqlReading:
    """rdflib's reading of `statement` with `namespaces` bound, once per process: its parser is
    pure Python (about 40 ms for a reference query), and the same texts come back for every
    store, persona, repeat and metric. A deadline (QueryTimeout) is raised, never cached."""
    from pyparsing import ParseException
    from rdflib.plugins.sparql.algebra import translateQuery
    from rdflib.plugins.sparql.parser import parseQuery

    try:
        parsed = parseQuery(statement)
    except ParseException as exc:
        if is_sparql_update(statement):
            return SparqlReading(update=True)
        return SparqlReading(error=f"the query does not parse: {exc}")
    except RecursionError:
        return SparqlReading(error="the query is nested too deeply to parse; it was not run")
    except QueryTimeout:
        raise  # the deadline, not the query's text: never a verdict (nor cached as one)
    except Exception as exc:  # noqa: BLE001 - the parser's own failures are the query's
        return SparqlReading(error=f"the query does not parse: {type(exc).__name__}: {exc}")
    try:
        query = translateQuery(parsed, initNs=dict(namespaces))
        names, iris = _algebra(query.algebra)
        return SparqlReading(query=query, form=query.algebra.name,
                             datasets=bool(query.algebra.get("datasetClause")),
                             names=frozenset(names), iris=frozenset(iris))
    except RecursionError:
        return SparqlReading(error="the query is nested too deeply to read; it was not run")
    except QueryTimeout:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. an unknown prefix
        return SparqlReading(error=f"the query cannot be read: {type(exc).__name__}: {exc}")


def _algebra(root: Any) -> tuple[set[str], set[str]]:
    """The names of every algebra node and every IRI of a translated query, without recursion
    (property paths hide their IRIs in attributes)."""
    from rdflib import URIRef
    from rdflib.paths import Path

    names: set[str] = set()
    iris: set[str] = set()
    stack = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, URIRef):
            iris.add(str(node))
        elif isinstance(node, dict):
            name = getattr(node, "name", None)
            if isinstance(name, str):
                names.add(name)
            stack.extend(node.values())
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack.extend(node)
        elif isinstance(node, Path):
            for attr in ("args", "arg", "path"):
                if hasattr(node, attr):
                    stack.append(getattr(node, attr))
    return names, iris


def is_sparql_update(statement: str) -> bool:
    """Whether rdflib reads `statement` as a SPARQL update (never raises)."""
    from rdflib.plugins.sparql.parser import parseUpdate

    try:
        parseUpdate(statement)
    except Exception:  # noqa: BLE001 - anything but a parse (RecursionError too): not an update
        return False
    return True


def sparql_facts(statement: str) -> Facts | None:
    """The facts of a SPARQL query by rdflib's parser and algebra; None when it does not
    parse."""
    from rdflib import Literal, URIRef
    from rdflib.paths import Path
    from rdflib.plugins.sparql.parserutils import CompValue

    query = read_sparql(statement).query
    if query is None:  # any failure to parse or read means no facts
        return None
    algebra = query.algebra
    facts = Facts()

    def visit(node: Any) -> None:
        if isinstance(node, URIRef):
            facts.iris.add(str(node))
        elif isinstance(node, Literal):
            if isinstance(node.toPython(), str):
                facts.strings.add(str(node))
        elif isinstance(node, CompValue):
            _note_expression(node, facts)
            for value in node.values():
                visit(value)
        elif isinstance(node, Mapping):
            for value in node.values():
                visit(value)
        elif isinstance(node, (list, tuple, set)):
            for value in node:
                visit(value)
        elif isinstance(node, Path):
            for attr in ("args", "arg", "path"):
                if hasattr(node, attr):
                    visit(getattr(node, attr))

    try:
        visit(algebra)
    except RecursionError:
        return None
    return facts


def _note_expression(node: Any, facts: Facts) -> None:
    """Note in `facts` what one node of rdflib's algebra (a CompValue) says by itself: its
    pattern, its aggregate or division, its comparison of a variable with a literal."""
    from rdflib.term import Literal, Variable

    name = node.name
    if name in _SPARQL_PATTERNS:
        facts.patterns.add(_SPARQL_PATTERNS[name])
    if name.startswith("Aggregate_"):
        fn = name.split("_", 1)[1].lower()
        facts.functions.add(fn)
        if fn == "count" and dict.get(node, "distinct"):
            facts.patterns.add("count_distinct")
    if name == "MultiplicativeExpression" and "/" in (dict.get(node, "op") or []):
        facts.functions.add("/")
        facts.patterns.add("division")
    if name == "RelationalExpression":
        op = str(dict.get(node, "op"))
        left, right = dict.get(node, "expr"), dict.get(node, "other")
        for a, b, flip in ((left, right, False), (right, left, True)):
            if isinstance(a, Variable) and isinstance(b, Literal):
                value = b.toPython()
                value = float(value) if isinstance(value, (int, float)) and \
                    not isinstance(value, bool) else str(value)
                facts.comparisons.append(("variable", str(a), _FLIP.get(op, op) if flip else op,
                                          value))


# --- specs -------------------------------------------------------------------------------------

def spec_problem(spec: Any) -> str | None:
    """What is wrong with an evidence spec (for the manifest's validation), or None."""
    if spec is True:
        return None
    if isinstance(spec, str):
        return ("is a text pattern: evidence is read from the parsed query, so give a mapping "
                f"such as {{column: name}} or {{iri: 'prefix:name'}} ({', '.join(TESTS)})")
    if not isinstance(spec, Mapping) or not spec:
        return f"must be true or a mapping of {', '.join(TESTS)}"
    unknown = set(spec) - set(TESTS)
    if unknown:
        return f"unknown tests {sorted(unknown)} (known: {', '.join(TESTS)})"
    for key in ("any", "all"):
        if key in spec:
            if not isinstance(spec[key], list) or not spec[key]:
                return f"'{key}' must be a list of specs"
            for sub in spec[key]:
                problem = spec_problem(sub)
                if problem:
                    return problem
    if "pattern" in spec and spec["pattern"] not in PATTERNS:
        return f"pattern must be one of {', '.join(PATTERNS)}"
    if "compare" in spec and not isinstance(spec["compare"], Mapping):
        return "compare must be a mapping (column or function, op or ops, number or string)"
    return None


def holds(spec: Any, facts: Facts, prefixes: Mapping[str, str] | None = None) -> bool:
    """Whether a query's facts satisfy an evidence spec."""
    if spec is True:
        return True
    if not isinstance(spec, Mapping):
        return False
    tests: list[bool] = []
    if "any" in spec:
        tests.append(any(holds(s, facts, prefixes) for s in spec["any"]))
    if "all" in spec:
        tests.append(all(holds(s, facts, prefixes) for s in spec["all"]))
    if "column" in spec:
        tests.append(str(spec["column"]).lower() in facts.columns)
    if "table" in spec:
        tests.append(str(spec["table"]).lower() in facts.tables)
    if "iri" in spec:
        tests.append(_expand(str(spec["iri"]), prefixes or {}) in facts.iris)
    if "strings" in spec:
        tests.append(all(str(s) in facts.strings for s in spec["strings"]))
    if "function" in spec:
        tests.append(str(spec["function"]).lower() in facts.functions)
    if "pattern" in spec:
        tests.append(spec["pattern"] in facts.patterns)
    if "compare" in spec:
        tests.append(any(_compare_matches(spec["compare"], c) for c in facts.comparisons))
    return bool(tests) and all(tests)


def _compare_matches(want: Mapping[str, Any], found: tuple[str, str, str, Any]) -> bool:
    kind, name, op, value = found
    if "column" in want and (kind, name) != ("column", str(want["column"]).lower()):
        return False
    if "function" in want and (kind, name) != ("function", str(want["function"]).lower()):
        return False
    ops = want.get("ops") or ([want["op"]] if "op" in want else None)
    if ops is not None and op not in ops:
        return False
    if "number" in want and not (isinstance(value, float) and value == float(want["number"])):
        return False
    return not ("string" in want and value != str(want["string"]))


def _expand(name: str, prefixes: Mapping[str, str]) -> str:
    prefix, sep, local = name.partition(":")
    if sep and prefix in prefixes and not local.startswith("//"):
        return prefixes[prefix] + local
    return name


def facts_of(statement: str, reference: str) -> Facts | None:
    """The facts of a reference kind's query (`sparql`, or SQL for `sql` and `executed`)."""
    return sparql_facts(statement) if reference == "sparql" else sql_facts(statement)
