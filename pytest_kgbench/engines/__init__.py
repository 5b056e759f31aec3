"""The engines an agent's query runs on: DuckDB and PostgreSQL for SQL; rdflib, Oxigraph and
any SPARQL endpoint for SPARQL; each behind the guard, in a worker process. An executor runs a
query against a store, through the guard, and says what it read.

An executor never raises for a bad query: the error, the refusal or the timeout is part of the
`QueryResult`, because what the agent did with it is what gets graded.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, TypeVar, cast

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.core.errors import QueryTimeout as QueryTimeout  # raised here; below evidence

T = TypeVar("T")


@dataclass(frozen=True)
class Caps:
    """What one query may give back: rows, characters per cell and in all, and the length of a
    query and of a message. The model is told these caps (the run_query tool's description) and
    each capped result says it was capped; what the run keeps (answers.jsonl, the MCP log) is
    the capped result the model saw plus the row count, never every row."""

    rows: int = 500
    cell_chars: int = 1_000
    result_chars: int = 30_000
    query_chars: int = 20_000
    sparql_terms: int = 1_200  # a SPARQL query's terms, one inside brackets counting two (guard)
    message_chars: int = 2_000
    count_rows: int = 100_000  # rows counted past the cap, to say how many there were

    def describe(self) -> str:
        """The caps in a sentence, as the tool description and a capped result state them."""
        return (f"Results are capped at {self.rows} rows and {self.result_chars:,} characters "
                f"(a cell at {self.cell_chars:,}); a capped result says how many rows there "
                f"were: aggregate or filter to see the rest. A query may be at most "
                f"{self.query_chars:,} characters, and a SPARQL query at most "
                f"{self.sparql_terms:,} terms (one inside brackets counts two).")


CAPS = Caps()
WHOLE = Caps(rows=1_000_000, result_chars=1 << 40, count_rows=1_000_000)
"""Caps no result of the harness's own reaches: a store over a reading prompt's data that the
reading gold agent queries (it proves the prompt holds the facts, whatever a query may hand a
model), an imported query's whole result for the challenge's metric."""


@dataclass
class QueryResult:
    """One statement as it ran: rows (JSON-able, capped: what the model saw), what it read,
    how many rows it returned, and how it ended."""

    language: str
    statement: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    error: str | None = None
    refused: str | None = None
    timed_out: bool = False
    truncated: bool = False
    elapsed_s: float = 0.0
    question: str | None = None  # asked together: the question id the query was run for
    row_count: int | None = None   # rows the query returned (counted up to Caps.count_rows)
    row_count_exact: bool = True   # False: there were more than row_count rows
    cells_cut: int = 0             # cells shortened to the cell cap

    @property
    def ok(self) -> bool:
        return self.error is None and self.refused is None and not self.timed_out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def preview(self, caps: Caps = CAPS) -> str:
        """The result as text for a model: a header, the (capped) rows, and how it ended; at
        most `caps.result_chars` characters (`fill_capped` keeps the rows that fit)."""
        if self.refused:
            text = f"REFUSED by the executor: {self.refused}"
        elif self.timed_out:
            text = f"FAILED: the query was stopped after the time limit. {self.error or ''}".strip()
        elif self.error:
            text = f"ERROR: {self.error}"
        else:
            total = len(self.rows) if self.row_count is None else self.row_count
            lines = [render_row(self.columns), *(render_row(row) for row in self.rows),
                     ending(len(self.rows), total, self.row_count_exact, self.cells_cut,
                            self.truncated, caps)]
            text = "\n".join(lines)
        return clip(text, caps.result_chars)

    def cap_text(self, caps: Caps = CAPS) -> None:
        """Shorten the statement and the messages to their caps (in place)."""
        self.statement = clip(self.statement, caps.query_chars)
        if self.error is not None:
            self.error = clip(self.error, caps.message_chars)
        if self.refused is not None:
            self.refused = clip(self.refused, caps.message_chars)


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the cut saying how long it was."""
    if len(text) <= limit:
        return text
    mark = f"… [cut: {len(text):,} characters]"
    return text[:max(0, limit - len(mark))] + mark[:limit]


def render_row(row: Sequence[Any]) -> str:
    """One row (or the header) as the model reads it."""
    return " | ".join("" if v is None else str(v) for v in row)


def ending(shown: int, total: int, exact: bool, cut: int, truncated: bool,
           caps: Caps = CAPS) -> str:
    """The last line of a result as the model reads it: how many rows, and how it was capped."""
    if not truncated:
        return f"({shown} rows)"
    more = "" if exact else "more than "
    cells = f"; {cut} cell(s) cut at {caps.cell_chars:,} characters" if cut else ""
    return (f"(result capped: showing {shown} of {more}{total} rows{cells}. "
            f"{caps.describe()})")


def fill_capped(result: QueryResult, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                convert: Callable[[Any], Any], caps: Caps = CAPS,
                skip: Callable[[int], int] | None = None) -> None:
    """Put a query's rows into `result`, capped so that what the model reads of it
    (`QueryResult.preview`: the header, the rows, the closing line) is at most
    `caps.result_chars` characters: at most `caps.rows` rows, each cell at most
    `caps.cell_chars` characters once converted (`convert` makes a cell JSON-able); rows past
    the cap are counted (up to `caps.count_rows`), not kept. `rows` is consumed lazily, so an
    engine streaming its result never hands over more than that; `skip(n)`, where the engine
    can, passes over up to n rows not yet handed over and says how many it passed (a server
    counting them without sending them). The one cap of every engine (SQL and SPARQL)."""
    result.columns = [clip(str(c), 200) for c in columns]
    # the closing line at its longest (every count at its cap), so the rows kept leave room
    longest = ending(caps.rows, caps.count_rows, False, caps.rows * max(1, len(columns)),
                     True, caps)
    budget = caps.result_chars - len(render_row(result.columns)) - 1 - len(longest)
    if budget < 0:
        result.error = (f"the result has {len(columns)} columns whose names alone take more "
                        f"than the {caps.result_chars:,} characters a result may hold: select "
                        f"fewer columns")
        result.columns, result.rows, result.truncated = [], [], True
        return
    kept: list[list[Any]] = []
    count = 0
    full = False
    cut = 0
    for row in rows:
        if count >= caps.count_rows:
            result.row_count_exact = False
            break
        count += 1
        if full and skip is not None:  # the rest counted where it is, up to one past the cap
            wanted = caps.count_rows - count + 1
            passed = skip(wanted)
            count += min(passed, wanted - 1)
            result.row_count_exact = passed < wanted
            break
        if full:
            continue
        if len(kept) >= caps.rows:
            full = True
            continue
        cells, shortened = _clipped(row, convert, caps.cell_chars)
        size = len(render_row(cells)) + 1  # its line and the line break before it
        if size > budget:
            full = True
            continue
        budget -= size
        cut += shortened
        kept.append(cells)
    result.rows = kept
    result.row_count = count
    result.cells_cut = cut
    result.truncated = len(kept) < count or cut > 0 or not result.row_count_exact


def _clipped(row: Sequence[Any], convert: Callable[[Any], Any], cell_chars: int
             ) -> tuple[list[Any], int]:
    """A row's cells converted, each string at most `cell_chars` long; and how many were cut."""
    cells: list[Any] = []
    shortened = 0
    for value in row:
        cell = convert(value)
        if isinstance(cell, str) and len(cell) > cell_chars:
            cell = clip(cell, cell_chars)
            shortened += 1
        cells.append(cell)
    return cells, shortened


@dataclass(frozen=True)
class TableInfo:
    """A table (or a class) as an agent may see it: withheld columns are left out."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rows: int
    withheld: tuple[str, ...] = ()

    def described(self, kind: str, unit: str, persona: str, column: str) -> str:
        """The describe tool's text: `kind` (table, class), the count in `unit` (rows,
        instances), each column as `column` formats it ({0} the name, {1} its type or count),
        and what is withheld from `persona`."""
        cols = "\n".join("  " + column.format(c, t) for c, t in self.columns)
        note = (f"\n  (withheld from persona '{persona}': {', '.join(self.withheld)})"
                if self.withheld else "")
        return f"{kind} {self.name} ({self.rows} {unit})\n{cols}{note}"


class Executor(ABC):
    """A store as an agent reaches it: a catalog, a description, one guarded query at a time.

    Every store kind (`engines.stores.StoreKind`) opens one; the run, the checks (`kgbench
    check`), the reference agents, the prompts and the MCP server all use it through this class
    only. `run` never raises for a bad query: the error, the refusal or the timeout is part of
    the `QueryResult`, because what the agent did with it is what gets graded."""

    language: str  # "sql" or "sparql": the language its queries are written in
    unit: str      # what `catalog` counts: "rows" or "instances"
    guard: Any     # the persona's Guard
    caps: Caps = CAPS  # what one query may give back
    checks_reference = False
    """Whether the harness does not vouch for this store's answers (a SPARQL server of the
    user's, whose dialect may differ from SPARQL 1.1): then each question's reference query
    runs on it before the question is asked, and a question it answers wrong is skipped with
    the reason, for every agent, never graded (run/items.py, `ItemRunner.unservable`)."""

    def engine_name(self) -> str:
        """The store as a skip's reason names it."""
        return f"the {self.language} engine"

    @abstractmethod
    def run(self, statement: str) -> QueryResult:
        """Run one statement through the guard, within the store's time limit."""

    @abstractmethod
    def refusal(self, statement: str) -> str | None:
        """Why the guard refuses `statement` on this store, or None (runs nothing)."""

    @abstractmethod
    def catalog(self) -> list[TableInfo]:
        """The tables (or classes) the persona may see, with their columns and counts."""

    @abstractmethod
    def describe(self, name: str) -> str:
        """One table (or class) as the describe tool shows it; an ERROR line if unknown."""

    @abstractmethod
    def store_block(self) -> str:
        """What a querying prompt tells the model about the store (Markdown)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's connection."""

    def prefixes(self) -> dict[str, str]:
        """The prefixes its queries may use (a graph's; none for a database), as the
        list_tables tool shows them first."""
        return {}


def jsonable(value: Any) -> Any:
    """A cell as a builtin JSON value: ISO dates, floats for decimals, str for anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


STOP_GRACE = 1.0  # seconds run_with_timeout keeps sending the stop to work past its bound


def run_with_timeout(fn: Callable[[], T], timeout: float) -> T:
    """Run pure-Python work (rdflib evaluation) with a wall-clock bound.

    rdflib offers no cancellation, so the work runs in a thread and, past the bound, gets a
    `QueryTimeout` raised inside it (PyThreadState_SetAsyncExc): the evaluation really stops at
    its next bytecode instead of burning a core in the background. A thread of its own each
    time: a stop sent as the work returns may land in the thread's code after it, where a
    long-lived thread's loop would die of it. A thread that cannot start is the harness's
    failure (HarnessBroken), never the work's.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - carried to the caller
                box["error"] = exc
            box["returned"] = True
        except QueryTimeout:  # a stop sent as `fn` returned: nothing is left to stop
            pass

    thread = threading.Thread(target=target, daemon=True, name="kgbench-query")
    try:
        thread.start()
    except RuntimeError as exc:  # "can't start new thread": no bound can be held
        raise HarnessBroken(f"the harness could not start the thread bounding a query's "
                            f"work: {exc}") from exc
    thread.join(timeout)
    if thread.is_alive():
        # pure-Python evaluation (rdflib) stops at its next bytecode; an engine in native code
        # (Oxigraph) cannot be interrupted and finishes in the background, its result
        # discarded. The stop is sent again until the work ends (for STOP_GRACE at most): one
        # that lands in a garbage collector's callback or a finalizer is printed as "Exception
        # ignored" and lost, and the parse went on burning a core
        grace = time.monotonic() + STOP_GRACE
        while thread.is_alive() and "returned" not in box and time.monotonic() < grace:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0),
                                                       ctypes.py_object(QueryTimeout))
            thread.join(0.05)
        raise QueryTimeout(f"stopped after {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


class EngineFailed(Exception):
    """The engine's own error while it handed over a result's rows (its evaluation, a value
    Python cannot convert), carried through the harness's conversion of the rows
    (`fill_capped`) so it stays the query's result; what else the conversion raises is the
    harness's own failure."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def engine_rows(rows: Iterable[T]) -> Iterator[T]:
    """`rows`, with what their iteration raises (the engine's doing) as `EngineFailed`."""
    it = iter(rows)
    while True:
        try:
            row = next(it)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - the engine's, whatever kind: the query's
            raise EngineFailed(exc) from exc
        yield row


def fill_from_engine(result: QueryResult, columns: list[str], rows: Iterable[Any],
                     cell: Callable[[Any], Any], caps: Caps, store: str,
                     queries: tuple[type[BaseException], ...] = (MemoryError,)) -> None:
    """`fill_capped` over the rows an engine hands over: what the engine raises as it hands
    them over is re-raised as it was (the query's result), and so is what `queries` names
    (the result's size, its nesting); anything else the harness's conversion of the rows
    raises is its own failure, HarnessBroken naming `store`."""
    try:
        fill_capped(result, columns, engine_rows(rows), cell, caps)
    except EngineFailed as failed:
        raise failed.error from None
    except queries:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine's rows, converted by the harness
        raise HarnessBroken(f"the harness could not convert the {store}'s rows: "
                            f"{type(exc).__name__}: {exc}") from exc
