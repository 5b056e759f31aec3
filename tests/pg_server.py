"""A throwaway PostgreSQL server for the tests, from the machine's own binaries (Debian's
`postgresql` package: `initdb` and `postgres`, on PATH or under /usr/lib/postgresql/*/bin).

It listens on 127.0.0.1 on a free port, keeps its data in a fresh folder under the system's
temporary directory, requires a password (scram-sha-256, as a real server would) and is
stopped and deleted at the end of the session. PostgreSQL refuses to run as root, so under
root (CI) the server runs as the unprivileged user `nobody`, its folder owned by it.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from oxigraph_server import Throwaway, free_port  # beside this file

USER = "kgbench"  # the loader: the server's superuser


def binaries() -> Path | None:
    """The folder holding `initdb` and `postgres`, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


def missing() -> str | None:
    """Why no server can be started here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed: pip install 'pytest-kgbench[postgres]'"
    if binaries() is None:
        return ("PostgreSQL's initdb and postgres are not on this machine "
                "(apt-get install postgresql)")
    return None


class PgServer(Throwaway):
    """`with PgServer() as server:` a running server; `server.dsn` is its loader's DSN."""

    def __init__(self) -> None:
        self.bin = binaries()
        assert self.bin is not None, missing()
        self.password = secrets.token_hex(12)
        self.dir = Path(tempfile.mkdtemp(prefix="kgbench-pg-"))
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._as: dict = {}
        if os.geteuid() == 0:  # postgres will not run as root: as nobody, in its own folder
            who = pwd.getpwnam("nobody")
            self._as = {"user": who.pw_uid, "group": who.pw_gid, "extra_groups": []}
            os.chown(self.dir, who.pw_uid, who.pw_gid)
        self._databases = 0

    @property
    def dsn(self) -> str:
        return self.database_dsn("postgres")

    def database_dsn(self, name: str) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str) -> None:
        log = self.dir / "initdb.log"
        with log.open("ab") as out:
            code = subprocess.call(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                                   env={**os.environ, "HOME": str(self.dir)}, **self._as)
        assert code == 0, f"{args[0]} failed:\n{log.read_text(errors='replace')}"

    def start(self) -> PgServer:
        pwfile = self.dir / "password"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", USER,
                  "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C",
                  "--no-sync", "--no-instructions")
        for _ in range(5):  # a port taken between finding it and binding it: another one
            self.port = free_port()
            log = (self.dir / "server.log").open("ab")
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.dir / "data"), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}",
                 "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=100"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.dir,
                env={**os.environ, "HOME": str(self.dir)}, **self._as)
            log.close()
            if self._ready():
                return self
            self._stop()
        raise AssertionError("PostgreSQL did not start:\n"
                             + (self.dir / "server.log").read_text(errors="replace")[-3000:])

    def _ready(self, within: float = 60.0) -> bool:
        import psycopg

        end = time.monotonic() + within
        while time.monotonic() < end:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as con:
                    con.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                time.sleep(0.2)
        return False

    def database(self) -> str:
        """A new, empty database on the server; its loader's DSN."""
        import psycopg

        self._databases += 1
        name = f"kgbench_test_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.database_dsn(name)

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: clients disconnected
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

