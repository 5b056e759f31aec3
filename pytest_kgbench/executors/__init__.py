"""Executors: run an agent's query against a store, through the guard, and say what it read.

An executor never raises for a bad query: the error, the refusal or the timeout is part of the
`QueryResult`, because what the agent did with it is what gets graded.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


@dataclass
class QueryResult:
    """One statement as it ran: rows (JSON-able), what it read, and how it ended."""

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

    @property
    def ok(self) -> bool:
        return self.error is None and self.refused is None and not self.timed_out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def preview(self, limit: int = 50) -> str:
        """The result as text for a model: a header, up to `limit` rows, and how it ended."""
        if self.refused:
            return f"REFUSED by the executor: {self.refused}"
        if self.timed_out:
            return f"FAILED: the query was stopped after the time limit. {self.error or ''}".strip()
        if self.error:
            return f"ERROR: {self.error}"
        lines = [" | ".join(self.columns)]
        for row in self.rows[:limit]:
            lines.append(" | ".join("" if v is None else str(v) for v in row))
        more = len(self.rows) - limit
        if more > 0 or self.truncated:
            cut = " (result truncated)" if self.truncated else ""
            lines.append(f"... {max(more, 0)} more rows{cut}")
        lines.append(f"({len(self.rows)} rows)")
        return "\n".join(lines)


@dataclass(frozen=True)
class TableInfo:
    """A table (or a class) as an agent may see it: withheld columns are left out."""

    name: str
    columns: tuple[tuple[str, str], ...]
    rows: int
    withheld: tuple[str, ...] = ()


class Executor(Protocol):
    """A store as an agent reaches it: a catalog, a description, one guarded query at a time.

    Every store kind (`registry.StoreKind`) opens one; the run, the checks (`kgbench check`),
    the reference agents, the prompts and the MCP server all use it through this Protocol
    only. `run` never raises for a bad query: the error, the refusal or the timeout is part of
    the `QueryResult`, because what the agent did with it is what gets graded."""

    language: str  # "sql" or "sparql": the language its queries are written in
    unit: str      # what `catalog` counts: "rows" or "instances"
    guard: Any     # the persona's Guard

    def run(self, statement: str) -> QueryResult:
        """Run one statement through the guard, within the store's time limit."""
        ...

    def refusal(self, statement: str) -> str | None:
        """Why the guard refuses `statement` on this store, or None (runs nothing)."""
        ...

    def catalog(self) -> list[TableInfo]:
        """The tables (or classes) the persona may see, with their columns and counts."""
        ...

    def describe(self, name: str) -> str:
        """One table (or class) as the describe tool shows it; an ERROR line if unknown."""
        ...

    def store_block(self) -> str:
        """What a querying prompt tells the model about the store (Markdown)."""
        ...

    def close(self) -> None:
        """Release the store's connection."""
        ...


class QueryTimeout(Exception):
    """Raised inside a query thread when its time is up."""


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


def run_with_timeout(fn: Callable[[], T], timeout: float) -> T:
    """Run pure-Python work (rdflib evaluation) with a wall-clock bound.

    rdflib offers no cancellation, so the work runs in a thread and, past the bound, gets a
    `QueryTimeout` raised inside it (PyThreadState_SetAsyncExc): the evaluation really stops at
    its next bytecode instead of burning a core in the background.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - carried to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="kgbench-query")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0),
                                                   ctypes.py_object(QueryTimeout))
        # pure-Python evaluation (rdflib) stops at its next bytecode; an engine in native code
        # (Oxigraph) cannot be interrupted and finishes in the background, its result discarded
        thread.join(1.0)
        raise QueryTimeout(f"stopped after {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
