"""The tools a querying condition offers a model: list what the store holds, describe one table
(or class), run one query. One definition serves every backend (the Messages API tool loop, the
MCP server): `TOOLS` are the JSON-schema specs, `call_tool` runs one call against an executor and
returns the text the model sees plus the `QueryResult` when a query ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pytest_kgbench.asking.together import serves
from pytest_kgbench.engines import CAPS, QueryResult
from pytest_kgbench.engines.guard import CATALOG_HINT

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "list_tables",
        "description": "List the tables (SQL) or classes (SPARQL) of the store, with row or "
                       "instance counts.",
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "name": "describe",
        "description": "Describe one table (its columns and types) or one class (the properties "
                       "its instances use), with its row count.",
        "input_schema": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "table or class name"}},
            "required": ["name"], "additionalProperties": False,
        },
    },
    {
        "name": "run_query",
        "description": "Run one read-only query (SQL for a SQL store, SPARQL for a graph) and "
                       "return its rows. One SELECT (or, in SPARQL, ASK) per call; writes, "
                       "settings, catalog and file functions, SQL functions other than the "
                       "usual scalar, aggregate and window ones, SERVICE, CONSTRUCT and "
                       "DESCRIBE are refused; a query past the time limit fails. "
                       + CAPS.describe(),
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"], "additionalProperties": False,
        },
    },
)
TOOL_NAMES = tuple(t["name"] for t in TOOLS)
QUESTION_PROPERTY = {"type": "string",
                     "description": "the id of the question this query serves (e.g. Q07)"}


def tools_for(condition: Any, *, together: bool) -> list[dict[str, Any]]:
    """The tool specs a session under `condition` gets (`Condition.tools`): the store's three
    when it queries, run_query alone under the schema arms without discovery, none when it
    reads. Asked together, `run_query` also takes the id of the question a query serves, so
    each query is banked with its item."""
    out: list[dict[str, Any]] = []
    for spec in (t for t in TOOLS if t["name"] in condition.tools):
        spec = dict(spec)
        if together and spec["name"] == "run_query":
            schema = dict(spec["input_schema"])
            schema["properties"] = {**schema["properties"], "question": QUESTION_PROPERTY}
            schema["required"] = ["query", "question"]
            spec["input_schema"] = schema
        out.append(spec)
    return out


def call_tool(executor: Any, name: str, arguments: Mapping[str, Any],
              questions: Sequence[str] = (),
              offered: Sequence[str] = TOOL_NAMES) -> tuple[str, QueryResult | None]:
    """Run one tool call. Never raises for a bad call: the model reads the error.

    `questions`: asked together, the session's question ids; a query must name one of them,
    so that every query is banked with the item it serves. `offered`: the tools the session
    was given (`Condition.tools`); a call to another is refused as a call to no tool, and a
    refusal does not point to discovery tools that were not offered."""
    if name not in offered:
        return f"ERROR: no tool named '{name}' (tools: {', '.join(offered)})", None
    if name == "list_tables":
        # a graph's prefixes first: the prompt's description of the store gives them, and
        # --schema tools must be able to learn what --schema prompt is told
        lines = [f"PREFIX {p}: <{ns}>" for p, ns in sorted(executor.prefixes().items())]
        lines += [f"{t.name} ({t.rows} {executor.unit})" for t in executor.catalog()]
        return "\n".join(lines), None
    if name == "describe":
        target = str(arguments.get("name", ""))
        return executor.describe(target), None
    if name == "run_query":
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return "ERROR: run_query needs a non-empty 'query' string", None
        if questions and not any(serves(arguments.get("question"), q) for q in questions):
            return (f"ERROR: run_query needs \"question\": the id of the question this query "
                    f"serves, one of {', '.join(questions)}"), None
        result = executor.run(query)
        if arguments.get("question"):
            result.question = str(arguments["question"])
        if result.refused and "describe" not in offered:
            result = replace(result, refused=result.refused.replace(CATALOG_HINT, ""))
        return result.preview(), result
    return f"ERROR: no tool named '{name}' (tools: {', '.join(TOOL_NAMES)})", None
