"""A throwaway Virtuoso Open Source server for the tests, from the machine's own package
(Debian's `virtuoso-opensource`: `virtuoso-t` and `isql-vt`).

It listens on 127.0.0.1 only (its SQL port and its HTTP port, both free ports), keeps its
database in a fresh folder under the system's temporary directory, and is stopped (SIGTERM
to its process group, SIGKILL past 20 s) and deleted at the end. Its `dba` password is
changed to a random one before its HTTP port is used. Its own limits (`[SPARQL]`):
`MaxQueryExecutionTime` bounds every query (a hard timeout, answered with an error), and no
`ResultSetMaxRows` (the engine sends each query's own row limit, `maxrows`). The store URL the
engine loads through is the Graph Store Protocol's authenticated endpoint,
`/sparql-graph-crud-auth`, as `dba` (HTTP digest): the anonymous `/sparql` has no write
permission (SPARQL_UPDATE is never granted to its user).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from oxigraph_server import Throwaway, _die_with_parent, free_port  # beside this file

SERVER_TIMEOUT_S = 10  # [SPARQL] MaxQueryExecutionTime: above any test's own deadline


def binaries() -> tuple[str, str] | None:
    """(virtuoso-t, isql-vt) on this machine, or None."""
    server, isql = shutil.which("virtuoso-t"), shutil.which("isql-vt")
    return (server, isql) if server and isql else None


def missing() -> str | None:
    """Why no server can be started here, or None."""
    if binaries() is None:
        return ("Virtuoso's virtuoso-t and isql-vt are not on this machine "
                "(apt-get install virtuoso-opensource)")
    return None


INI = """[Database]
DatabaseFile       = {db}/virtuoso.db
TransactionFile    = {db}/virtuoso.trx
ErrorLogFile       = {db}/virtuoso.log
LockFile           = {db}/virtuoso.lck
xa_persistent_file = {db}/virtuoso.pxa
ErrorLogLevel      = 7
FileExtend         = 200
Striping           = 0
TempStorage        = TempDatabase

[TempDatabase]
DatabaseFile       = {db}/virtuoso-temp.db
TransactionFile    = {db}/virtuoso-temp.trx
Striping           = 0

[Parameters]
ServerPort         = 127.0.0.1:{sql_port}
DisableUnixSocket  = 1
MaxClientConnections = 20
CheckpointInterval = 0
DirsAllowed        = {db}
ServerThreads      = 20
NumberOfBuffers    = 20000
MaxDirtyBuffers    = 15000
ThreadsPerQuery    = {threads}
AsyncQueueMaxThreads = 4
MaxQueryMem        = 512M
MaxSortedTopRows   = 200000
AllowOSCalls       = 0

[HTTPServer]
ServerPort         = 127.0.0.1:{http_port}
ServerRoot         = {db}
ServerThreads      = 10
MaxClientConnections = 20
MaxKeepAlives      = 10
KeepAliveTimeout   = 10
Charset            = UTF-8
EnabledGzipContent = 0

[SPARQL]
MaxQueryExecutionTime = {timeout_s}
"""


class VirtuosoServer(Throwaway):
    """`with VirtuosoServer() as server:` a running server; `server.engine` is its
    `--sparql-engine` argument (the dba password in the store URL, which the engine redacts)."""

    def __init__(self, timeout_s: int = SERVER_TIMEOUT_S, threads: int = 1) -> None:
        found = binaries()
        assert found is not None, missing()
        self.server_bin, self.isql_bin = found
        self.timeout_s = timeout_s
        self.threads = threads
        self.password = secrets.token_hex(12)
        self.dir = Path(tempfile.mkdtemp(prefix="kgbench-virtuoso-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.sql_port = self.http_port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def query_url(self) -> str:
        return f"{self.url}/sparql"

    @property
    def store_url(self) -> str:
        return f"http://dba:{self.password}@127.0.0.1:{self.http_port}/sparql-graph-crud-auth"

    @property
    def engine(self) -> str:
        return f"endpoint={self.query_url};store={self.store_url}"

    @property
    def log(self) -> Path:
        return self.dir / "virtuoso.log"

    def isql(self, sql: str, password: str | None = None) -> str:
        """`sql` run by isql as dba; its output. isql's exit code does not say whether a
        statement failed: its `*** Error` lines do."""
        out = subprocess.run(
            [self.isql_bin, f"127.0.0.1:{self.sql_port}", "dba", password or self.password,
             "VERBOSE=OFF", "BANNER=OFF", "ERRORS=STDOUT", f"EXEC={sql}"],
            capture_output=True, text=True, timeout=120, cwd=self.dir)
        text = out.stdout + out.stderr
        if "*** Error" in text or out.returncode != 0:
            raise RuntimeError(f"isql-vt failed on {sql[:200]!r}: {text[-2000:]}")
        return text

    def start(self, wait: float = 180.0) -> VirtuosoServer:
        for _ in range(5):  # a port taken between finding it and binding it: others
            self.sql_port, self.http_port = free_port(), free_port()
            if self.sql_port == self.http_port:
                continue
            ini = self.dir / "virtuoso.ini"
            ini.write_text(INI.format(db=self.dir, sql_port=self.sql_port,
                                      http_port=self.http_port, timeout_s=self.timeout_s,
                                      threads=self.threads), encoding="utf-8")
            with (self.dir / "stdout.log").open("ab") as out:
                self.proc = subprocess.Popen(
                    [self.server_bin, "+foreground", "+configfile", str(ini)],
                    stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                    env={**os.environ, "TZ": "UTC"}, start_new_session=True,
                    preexec_fn=_die_with_parent)
            if self._ready(wait):
                self._secure()
                return self
            self._stop()
        raise RuntimeError("Virtuoso did not start:\n" + self._tail())

    def _tail(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in (self.log, self.dir / "stdout.log") if p.exists())

    def _ready(self, within: float) -> bool:
        end = time.monotonic() + within
        while time.monotonic() < end:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.query_url}?query=ASK%7B%7D",
                                            timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.3)
        return False

    def _secure(self) -> None:
        """dba's password: a random one (a fresh database has dba/dba)."""
        self.isql(f"user_set_password('dba', '{self.password}');", "dba")

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)  # fast shutdown, no checkpoint
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid



def session_server(tmp: object = None):  # noqa: ANN201 - a pytest fixture's generator
    """The body of a `virtuoso` fixture: a server for the scope, skipped with the reason where
    the package is not installed (CI installs it)."""
    import pytest

    why = missing()
    if why:
        pytest.skip(why)
    with VirtuosoServer() as server:
        yield server


def main() -> int:
    """`python tests/virtuoso_server.py`: a throwaway server until interrupted (SIGINT or
    SIGTERM); its `--sparql-engine` argument on stdout's first line (docs/engines.md)."""
    import sys

    why = missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    stop = {"now": False}

    def done(*_: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, done)
    signal.signal(signal.SIGINT, done)
    with VirtuosoServer() as server:
        print(server.engine, flush=True)
        print(f"Virtuoso on {server.url} (database {server.dir}); Ctrl-C stops it and deletes "
              "the database", file=sys.stderr, flush=True)
        while not stop["now"] and server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
