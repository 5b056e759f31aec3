"""Execution accuracy (the agent's last query carries every gold row, and the prose states a
gold figure), the strict result set beside it, and the figure in the prose."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pytest_kgbench.metrics.base import MetricInput, RateMetric
from pytest_kgbench.scoring.fieldkinds import grouped, max_matching, norm_number

# --- cells ---------------------------------------------------------------------------------------

def _same_number(a: float, b: float, rel: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=max(abs_tol, 1e-9))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def same_cell(gold: Any, got: Any, *, rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """Two cells agree: a count (an integer gold value) exactly; other numbers within the
    tolerance — a proportion and its percentage only when one side is a proper fraction
    (0.045 ~ 4.5, but never 4.5 million ~ 450 million); anything else as text, ignoring case."""
    if gold is None or got is None:
        return gold is None and got is None
    if isinstance(gold, bool) or isinstance(got, bool):
        return str(gold).casefold() == str(got).casefold()
    g, o = norm_number(gold), norm_number(got)
    if g is not None and o is not None:
        if not (math.isfinite(g) and math.isfinite(o)):
            return False
        if _is_count(gold):
            return o == g
        if _same_number(g, o, rel, abs_tol):
            return True
        if abs(g) < 1 and _same_number(100 * g, o, rel, abs_tol):
            return True
        return abs(o) < 1 and _same_number(g, 100 * o, rel, abs_tol)
    return str(gold).strip().casefold() == str(got).strip().casefold()


def carries(gold_row: Sequence[Any], row: Sequence[Any], *, rel: float = 0.005,
            abs_tol: float = 0.0, constant: Sequence[bool] | None = None) -> bool:
    """A returned row carries a gold row when every gold value appears somewhere in it
    (extra columns are allowed). With `constant` (which of the query's columns are
    constants of its text, `constant_columns`), at least one gold value must appear in a
    column the query computed from the data: `SELECT lei, 9 FROM issuers LIMIT 1` does not
    carry a count of 9 (a literal restating a filter beside a computed value does no harm)."""
    if not all(any(same_cell(g, v, rel=rel, abs_tol=abs_tol) for v in row) for g in gold_row):
        return False
    if constant is None or not gold_row:
        return True
    return any(same_cell(g, v, rel=rel, abs_tol=abs_tol)
               for g in gold_row for v, fixed in zip(row, constant) if not fixed)


def _row_key(row: Sequence[Any]) -> tuple[str, ...]:
    return tuple(json.dumps(c, sort_keys=True, default=str) for c in row)


def rows_carried(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                 ordered: bool = False, rel: float = 0.005, abs_tol: float = 0.0,
                 constant: Sequence[bool] | None = None) -> bool:
    """Each gold row is carried by a distinct returned row (extra rows allowed; see
    `rows_allowed`); with `ordered`, the carrying rows appear in the gold order.

    Unordered, it is a maximum matching (`fieldkinds.max_matching`, the `rows` kind's too):
    identical rows are grouped with their counts, so 1,200 identical rows are one pair of
    nodes, and nothing recurses."""
    if ordered:
        i = 0
        for row in got:
            if i < len(gold) and carries(gold[i], row, rel=rel, abs_tol=abs_tol,
                                         constant=constant):
                i += 1
        return i == len(gold)
    if not gold:
        return True
    if len(got) < len(gold):
        return False
    gold_rows, gold_counts = grouped(list(gold), _row_key)
    got_rows, got_counts = grouped(list(got), _row_key)
    pairs = [(i, j) for i, g in enumerate(gold_rows) for j, r in enumerate(got_rows)
             if carries(g, r, rel=rel, abs_tol=abs_tol, constant=constant)]
    return max_matching(gold_counts, got_counts, pairs) == len(gold)


def rows_allowed(gold_rows: int, sizes: Sequence[int] = ()) -> int:
    """How many rows a result may return and still answer: the gold rows plus a quarter more
    (at least one more), and fewer than any table or class it reads holds where that holds
    more than the gold rows (`sizes`) -- so the allowance never reaches a table's size, and a
    query listing every issuer, or `range(10000)`, does not carry a list by listing
    everything. Never fewer than the gold rows."""
    allowed = gold_rows + max(1, gold_rows // 4)
    bigger = [n for n in sizes if n > gold_rows]
    if bigger:
        allowed = min(allowed, min(bigger) - 1)
    return max(allowed, gold_rows)


def reads_store(result: Any, language: str, prefixes: Mapping[str, str] | None = None) -> bool:
    """Whether a statement reads the store at all: it names a table, class or property of it
    (the executor's `reads`), or, in SPARQL, matches at least one triple pattern. A constant
    (`SELECT 9 AS n`, `SELECT (9 AS ?n) WHERE {}`) reads nothing: its result would fit any
    question whose answer it happens to be."""
    if result.reads:
        return True
    if language != "sparql":
        return False
    from pytest_kgbench.packs.evidence import read_sparql, walk

    query = read_sparql(result.statement, tuple(sorted((prefixes or {}).items()))).query
    if query is None:
        return True  # not readable here (a prefix the store binds): not judged a constant
    return any(getattr(node, "name", None) == "BGP" and dict.get(node, "triples")
               for node in walk(query.algebra))


# --- columns that are constants of the query's text ------------------------------------------

def constant_columns(statement: str, language: str,
                     prefixes: Mapping[str, str] | None = None) -> list[bool] | None:
    """Which of a query's result columns are constants of its text rather than computed from
    the store: `SELECT 9 FROM issuers LIMIT 1` -> [True]; `SELECT count(*) FROM issuers` ->
    [False]; `SELECT ?n WHERE { ?s a cr:Issuer BIND(9 AS ?n) }` -> [True]. A column is
    computed from the data when it reads a column of a stored table (a triple pattern's
    variable), aggregates rows that come from one, or reads a table the query wrote itself
    (VALUES, a CTE of constants) joined with stored rows: a rating scale looked up by a
    stored rating is the data's. None when the query cannot be read so (a `*` over stored
    tables, a parse this reader does not know): then no column is judged."""
    try:
        if language == "sparql":
            return _sparql_constants(statement, prefixes or {})
        return _sql_constants(statement)
    except RecursionError:
        return None


# (rows come from the store, [(column, constant)] in order, or None for a stored table)
_Source = tuple[bool, list[tuple[str, bool]] | None]


def _sql_constants(statement: str) -> list[bool] | None:
    import duckdb

    from pytest_kgbench.packs.evidence import _sql_parser

    try:
        row = _sql_parser().execute("SELECT json_serialize_sql(?)", [statement]).fetchone()
        tree = json.loads(row[0]) if row and row[0] else {}
    except (duckdb.Error, ValueError):
        return None
    statements = tree.get("statements") or []
    if tree.get("error") or len(statements) != 1:
        return None
    node = _sql_node(statements[0].get("node") or {}, {})
    return None if node is None else [fixed for _, fixed in node[1]]


def _sql_node(node: dict[str, Any], ctes: dict[str, dict[str, Any]]
              ) -> tuple[bool, list[tuple[str, bool]]] | None:
    """(rows come from the store, [(output column name, constant)]) of one query node."""
    ctes = dict(ctes)
    for entry in (node.get("cte_map") or {}).get("map") or []:
        value = entry.get("value") or {}
        ctes[str(entry.get("key", "")).lower()] = value
    kind = node.get("type")
    if kind == "SET_OPERATION_NODE":
        children = node.get("children") or [c for c in (node.get("left"), node.get("right")) if c]
        parts = [_sql_node(c, ctes) for c in children]
        if not parts or any(p is None for p in parts):
            return None
        widths = {len(p[1]) for p in parts if p is not None}
        if len(widths) != 1:
            return None
        first = parts[0]
        assert first is not None
        return (any(p[0] for p in parts if p is not None),
                [(name, all(p[1][i][1] for p in parts if p is not None))
                 for i, (name, _) in enumerate(first[1])])
    if kind != "SELECT_NODE":
        return None
    sources: list[_Source] = []
    if not _sql_sources(node.get("from_table") or {}, ctes, sources):
        return None
    from_store = any(stored for stored, _ in sources)
    out: list[tuple[str, bool]] = []
    for expr in node.get("select_list") or []:
        if expr.get("class") == "STAR" or expr.get("type") == "STAR":
            if from_store or expr.get("relation_name") or expr.get("exclude_list"):
                return None
            out.extend((name, True) for _, cols in sources for name, _ in cols or [])
            continue
        fixed = _sql_expr_constant(expr, sources, from_store, ctes)
        if fixed is None:
            return None
        name = expr.get("alias") or (expr.get("column_names") or [""])[-1]
        out.append((str(name).lower(), fixed))
    return from_store, out


def _sql_sources(table: dict[str, Any], ctes: dict[str, dict[str, Any]],
                 out: list[_Source]) -> bool:
    """The sources a FROM clause reads, appended to `out`; False when one is not known."""
    kind = table.get("type")
    if kind in (None, "EMPTY"):
        return True
    if kind == "JOIN":
        return (_sql_sources(table.get("left") or {}, ctes, out)
                and _sql_sources(table.get("right") or {}, ctes, out))
    if kind == "BASE_TABLE":
        name = str(table.get("table_name", "")).lower()
        cte = ctes.get(name)
        if cte is None or table.get("schema_name"):
            out.append((True, None))  # a stored table: every column is its data
            return True
        inner = _sql_node(cte.get("query_node") or {}, {k: v for k, v in ctes.items()
                                                         if k != name})
        if inner is None:
            return False
        out.append((inner[0], _renamed(inner[1], cte.get("aliases"))))
        return True
    if kind == "SUBQUERY":
        inner = _sql_node(((table.get("subquery") or {}).get("node")) or {}, ctes)
        if inner is None:
            return False
        out.append((inner[0], _renamed(inner[1], table.get("column_name_alias"))))
        return True
    if kind == "EXPRESSION_LIST":  # VALUES (...): the query's own constants
        width = max((len(row) for row in table.get("values") or []), default=0)
        out.append((False, _renamed([(f"col{i}", True) for i in range(width)],
                                    table.get("column_name_alias"))))
        return True
    if kind == "TABLE_FUNCTION":
        out.append((False, []))  # range(9), a generator of the query's own: no stored data
        return True
    return False


def _renamed(columns: list[tuple[str, bool]], aliases: Any) -> list[tuple[str, bool]]:
    names = [str(a).lower() for a in aliases or []]
    return [(names[i] if i < len(names) else name, fixed)
            for i, (name, fixed) in enumerate(columns)]


@lru_cache(maxsize=1)
def _sql_aggregates() -> frozenset[str]:
    """DuckDB's aggregate functions, by name (count_star is `count(*)`)."""
    from pytest_kgbench.packs.evidence import _sql_parser

    rows = _sql_parser().execute("SELECT DISTINCT function_name FROM duckdb_functions() "
                                 "WHERE function_type = 'aggregate'").fetchall()
    return frozenset(str(r[0]).lower() for r in rows) | {"count_star"}


def _sql_expr_constant(expr: Any, sources: list[_Source], from_store: bool,
                       ctes: dict[str, dict[str, Any]]) -> bool | None:
    """Whether one select expression is a constant of the text (None: cannot tell)."""
    stack = [expr]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        cls = item.get("class")
        if cls == "COLUMN_REF":
            column = str((item.get("column_names") or [""])[-1]).lower()
            known = [fixed for _, cols in sources for name, fixed in cols or []
                     if name == column]
            if any(cols is None for _, cols in sources) or not known or not all(known):
                return False
            continue
        if cls == "SUBQUERY":
            inner = _sql_node(((item.get("subquery") or {}).get("node")) or {}, ctes)
            if inner is None or inner[0] or not all(f for _, f in inner[1]):
                return False
            continue
        if cls == "WINDOW" or (cls == "FUNCTION"
                               and str(item.get("function_name", "")).lower()
                               in _sql_aggregates()):
            if from_store:
                return False
        stack.extend(v for k, v in item.items() if k not in ("query_location",))
    return True


def _sparql_constants(statement: str, prefixes: Mapping[str, str]) -> list[bool] | None:
    from rdflib.term import Variable

    from pytest_kgbench.packs.evidence import read_sparql

    query = read_sparql(statement, tuple(sorted(prefixes.items()))).query
    if query is None:
        return None
    root = query.algebra
    projected = root.get("PV") or []
    if not projected:
        return None
    nodes = [n for n in _sparql_walk(root)]
    data: set[Variable] = set()
    reads = False
    for node in nodes:
        if node.name == "BGP":
            for triple in node.get("triples") or []:
                if len(triple) == 3:
                    reads = True
                data.update(t for t in triple if isinstance(t, Variable))
        elif node.name == "Graph" and isinstance(node.get("term"), Variable):
            data.add(node["term"])
    rows_aggregates = ("Aggregate_Count", "Aggregate_Sum", "Aggregate_GroupConcat")
    changed = True
    while changed:  # BIND, lookup tables and aggregates that read what the data gives
        changed = False
        for node in nodes:
            if node.name == "Extend":
                var = node.get("var")
                if var not in data and _sparql_vars(node.get("expr")) & data:
                    data.add(var)
                    changed = True
            elif node.name in ("values", "Filter"):
                # a lookup table (a rating scale) joined on a variable of the data, or compared
                # with one: the row the data selects is the data's
                bound = ({v for row in node.get("res") or [] for v in row}
                         if node.name == "values" else _sparql_vars(node.get("expr")))
                if bound & data and not bound <= data:
                    data.update(bound)
                    changed = True
            elif node.name == "AggregateJoin":
                for agg in node.get("A") or []:
                    res = agg.get("res")
                    if res in data:
                        continue
                    if (_sparql_vars(agg.get("vars")) & data
                            or (reads and agg.name in rows_aggregates)):
                        data.add(res)
                        changed = True
    return [Variable(str(v)) not in data for v in projected]


def _sparql_walk(root: Any) -> list[Any]:
    from rdflib.plugins.sparql.parserutils import CompValue

    out, stack = [], [root]
    while stack:
        item = stack.pop()
        if isinstance(item, CompValue):
            out.append(item)
            stack.extend(v for k, v in item.items() if not k.startswith("_"))
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return out


def _sparql_vars(expr: Any) -> set[Any]:
    from rdflib.plugins.sparql.parserutils import CompValue
    from rdflib.term import Variable

    found, stack = set(), [expr]
    while stack:
        item = stack.pop()
        if isinstance(item, Variable):
            found.add(item)
        elif isinstance(item, CompValue):
            stack.extend(v for k, v in item.items() if not k.startswith("_"))
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return found


def result_set_exact(gold: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]], *,
                     rel: float = 0.005, abs_tol: float = 0.0) -> bool:
    """The strict result-set equality: same number of rows and columns, rows matched one to one."""
    if len(gold) != len(got) or any(len(g) != len(o) for g, o in zip(gold, got)):
        return False
    return (rows_carried(gold, got, rel=rel, abs_tol=abs_tol)
            and rows_carried(got, gold, rel=rel, abs_tol=abs_tol))


_NUMBER = re.compile(r"(?<![\w.])[-+\u2212]?\d[\d,_]*(?:\.(\d+))?(?:[eE][-+]?\d+)?%?")


def _stated(text: str) -> list[tuple[float, float]]:
    """Every number the prose states, with half a unit of its last stated digit (what
    rounding to its precision allows)."""
    out: list[tuple[float, float]] = []
    for m in _NUMBER.finditer(text or ""):
        n = norm_number(m.group(0))
        if n is None or not math.isfinite(n):
            continue
        decimals = len(m.group(1) or "") + (2 if m.group(0).endswith("%") else 0)
        out.append((n, 0.5 * 10.0 ** -decimals))
    return out


_AUXILIARIES = {"does": "does|do|did", "do": "does|do|did", "did": "does|do|did",
                "is": "is|are|was|were", "are": "is|are|was|were", "was": "is|are|was|were",
                "were": "is|are|was|were", "has": "has|have|had", "have": "has|have|had",
                "can": "can", "will": "will"}
_ASKED = re.compile(rf"\b({'|'.join(_AUXILIARIES)})\s+([^?]*?)\?", re.IGNORECASE)
_NOT_VERBS = {"the", "this", "that", "these", "those", "its", "their", "any", "all", "and",
              "with", "from", "into", "than", "then", "there", "here", "also", "still"}
# a sentence that opens with its verdict: "No.", "Yes, it does", "**No** —", "Answer: false"
_OPENS = re.compile(r"^\W*(?:(?:the\s+)?answer\s*(?:is|:)\s*)?\W*(yes|no|true|false)\W*"
                    r"(?:[.,;:!\u2014\u2013-]|$)", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\banswer\s*(?:is|:)\s*\W*(yes|no|true|false)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|no|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE)
_HYPOTHETICAL = re.compile(r"\b(?:whether|if|unless)\b|\?", re.IGNORECASE)


def _question_verb(question: str) -> tuple[str, str] | None:
    """The auxiliary family and main verb of a yes/no question ("Does X control Y?" ->
    does|do|did, control): the verb is the clause's last lower-case word (names are
    capitalised)."""
    for m in _ASKED.finditer(question or ""):
        words = [w for w in re.findall(r"[A-Za-z]+", m.group(2))
                 if w.islower() and len(w) >= 3 and w not in _NOT_VERBS]
        if words:
            return _AUXILIARIES[m.group(1).casefold()], words[-1]
    return None


def stated_yesno(text: str, question: str = "") -> bool | None:
    """The yes or no the prose states, or None when it states neither (or both): a sentence
    that opens with yes/no/true/false ("No.", "Yes, it does"), "the answer is no", or the
    question's own verb affirmed or denied ("Borealis does not control Cobalt", "this
    citation counts"). A "no" or "not" anywhere else is not a statement of the value ("I
    could not work it out" states nothing)."""
    asked = _question_verb(question)
    found: set[bool] = set()
    for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", (text or "").replace("\u2019", "'")):
        m = _OPENS.match(sentence) or _ANSWER_IS.search(sentence)
        if m:
            found.add(m.group(1).casefold() in ("yes", "true"))
            continue
        if asked is None or _HYPOTHETICAL.search(sentence):
            continue
        aux, verb = asked
        if re.search(rf"\b(?:{aux})(?:\s+not|n't)\s+(?:\w+\s+)?{verb}", sentence, re.I):
            found.add(False)
            continue
        # affirmed: "it does count", "Borealis controls Cobalt" (a subject before the verb, so
        # a field's label "counts:" is not a sentence), with no negation just before it
        for m in re.finditer(rf"\b(?:(?:{aux})\s+(?:\w+\s+)?{verb}\b|(?<=\w\s){verb}e?s\b)",
                             sentence, re.I):
            if not _NEGATED.search(" ".join(sentence[:m.start()].split()[-3:])):
                found.add(True)
    return found.pop() if len(found) == 1 else None


def states_figure(text: str, gold: Sequence[Sequence[Any]], *, rel: float = 0.005,
                  question: str = "") -> bool | None:
    """Whether the prose (the answer without its closing block) states a gold value: a count
    exactly; another number when it agrees to the precision stated (within half a unit of its
    last digit, or the relative tolerance) and keeps the value's magnitude (off by at most
    half of it; a stated zero states only zero, so "0" never states 0.4); a proportion as its
    percentage or back (never by 1000); a yes/no as the value the prose states
    (`stated_yesno`, read with the question's verb), never a "not" anywhere; other values by
    inclusion, ignoring case. None when the gold result holds no value to state."""
    values = [v for row in gold for v in row if v is not None]
    if not values:
        return None
    lowered = (text or "").casefold()
    numbers = _stated(text)
    for value in values:
        if isinstance(value, bool):
            if stated_yesno(text, question) is value:
                return True
            continue
        g = norm_number(value)
        if g is not None and not isinstance(value, str):
            if not math.isfinite(g):
                continue
            for n, half_unit in numbers:
                if _is_count(value):
                    if n == g:
                        return True
                    continue
                targets = [g]
                if abs(g) < 1:
                    targets.append(100 * g)   # a proportion stated as its percentage
                elif abs(n) < 1:
                    targets.append(g / 100)   # a percentage stated as its proportion
                for target in targets:
                    if target == 0 or n == 0:
                        if target == n:
                            return True
                        continue
                    error = abs(n - target)
                    if error <= max(rel * abs(target), half_unit) and error <= 0.5 * abs(target):
                        return True
            continue
        if str(value).casefold() in lowered:
            return True
    return False


# --- the metrics -------------------------------------------------------------------------------

def _carried(item: MetricInput) -> bool | None:
    last, gold = item.last, item.gold
    if last is None or gold is None:
        return None
    returned = max(len(last.rows), last.row_count or 0)
    item.details.update({"rows_returned": returned, "gold_rows": len(gold.rows)})
    if not last.ok:
        return False
    if not reads_store(last, item.condition.language, item.prefixes):
        item.details["note"] = "the query reads nothing from the store (a constant)"
        return False
    sizes = ([t.rows for t in item.executor.catalog() if t.name in set(last.reads)]
             if item.executor is not None else [])
    allowed = rows_allowed(len(gold.rows), sizes)
    if returned > allowed:
        item.details["rows_allowed"] = allowed
        return False
    constant = constant_columns(last.statement, item.condition.language, item.prefixes)
    if constant is not None and len(constant) != len(last.columns or constant):
        constant = None  # the columns as run are not the ones read: judge none
    if constant is not None and all(constant):
        item.details["note"] = "every column is a constant of the query's text"
        return False
    return rows_carried(gold.rows, last.rows, ordered=item.ordered, constant=constant,
                        **item.tolerance)


def _figure(item: MetricInput) -> bool | None:
    if item.gold is None or item.last is None:
        return None
    from pytest_kgbench.scoring.answers import prose

    return states_figure(prose(item.answer.text), item.gold.rows, rel=item.tolerance["rel"],
                         question=item.question.text)


class Execution(RateMetric):
    name = "execution"
    title = "execution"
    help = ("execution accuracy: the last query carries every gold row and the prose states a "
            "gold figure")
    order = 10

    def measure(self, item: MetricInput) -> bool | None:
        if not item.queried or item.gold is None:
            return None
        if not item.ran:
            item.details["note"] = "no query ran"
            return False
        return bool(_carried(item) and _figure(item) is not False)


class ResultSetExact(RateMetric):
    name = "result_set_exact"
    title = "result exact"
    help = "the last query returns exactly the gold result set"
    order = 20

    def measure(self, item: MetricInput) -> bool | None:
        last, gold = item.last, item.gold
        if last is None or gold is None:
            return None
        return bool(last.ok and result_set_exact(gold.rows, last.rows, **item.tolerance))


class AnswerCarriesFigure(RateMetric):
    name = "answer_carries_figure"
    title = "figure"
    help = "the prose states a gold figure"
    order = 30

    def measure(self, item: MetricInput) -> bool | None:
        return _figure(item)


METRICS = (Execution(), ResultSetExact(), AnswerCarriesFigure())
