"""The SQL engine as it runs inside its worker process (`python -m
pytest_kgbench.engines.sql_worker`, started by `sql.WorkerSqlExecutor` through
`worker.Worker`): it opens the persona's store — DuckDB on the persona's file, or a PostgreSQL
connection as the persona's role — then classifies, runs and caps one query at a time with the
in-process executor (`sql.SqlExecutor`, `postgres.PostgresExecutor`). The worker's memory is
limited by the operating system and it is killed at each query's deadline; the engine
interrupts the query itself a little earlier, when it can.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_kgbench.core.errors import HarnessBroken
from pytest_kgbench.engines import Caps
from pytest_kgbench.engines.guard import Guard
from pytest_kgbench.engines.sql import SqlExecutor
from pytest_kgbench.packs.schema import TableSpec


class SqlEngine:
    """One store's executor behind the worker protocol (`worker.serve`)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        specs = {name: TableSpec(name=name, columns=tuple((str(c), str(t)) for c, t in cols))
                 for name, cols in config["tables"].items()}
        guard = Guard.from_json(config["guard"])
        caps = Caps(**config["caps"])
        self.executor: SqlExecutor
        if config["engine"] == "postgres":
            from pytest_kgbench.engines.postgres import PostgresExecutor

            self.executor = PostgresExecutor.connect(
                config["connect"], specs, guard, caps=caps, label=str(config["label"]),
                hide=tuple(config.get("hide") or ()))
        else:
            self.executor = SqlExecutor.open(Path(config["path"]), specs, guard, caps=caps)

    def info(self) -> dict[str, Any]:
        return {"settings": self.executor.settings()}

    def reply(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if request.get("op") == "counts":  # asked once per store, not at each restart
            return {"counts": {name: self.executor._count(name)
                               for name in self.executor.specs}}
        if request.get("op") != "run":
            return {"error": f"unknown request {request.get('op')!r}"}
        self.executor.timeout = float(request["timeout"])
        self.executor.caps = Caps(**request["caps"])
        try:
            return self.executor.run(str(request["statement"])).to_dict()
        except HarnessBroken as exc:  # the store itself is gone: the parent halts the run
            return {"broken": str(exc)}


if __name__ == "__main__":  # pragma: no cover - run in the worker process
    from pytest_kgbench.engines.worker import serve

    serve(SqlEngine)
