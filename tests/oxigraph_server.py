"""A real Oxigraph server for the tests (`oxigraph serve`, the PyPI package `oxigraph`, in the
dev extra): on 127.0.0.1 at a free port, its storage a throwaway folder, stopped at the end."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVER_TIMEOUT_S = 10  # the server's own query limit (`--timeout-s`): above any test's query,
#                        and a query the client gave up on stops there if it reads the store
#                        (Oxigraph takes no per-query limit, goes on with a query whose client
#                        left, and sorts past any limit: docs/engines.md)


def oxigraph_binary() -> str | None:
    """The `oxigraph` CLI beside this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).parent / "oxigraph"
    return str(here) if here.is_file() else shutil.which("oxigraph")


def _die_with_parent() -> None:
    """In the server's process before exec: SIGTERM when the test session that started it
    ends, even killed (Linux's parent-death signal); elsewhere the fixture's stop alone."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Throwaway:
    """A throwaway server's lifetime (PostgreSQL's, Virtuoso's): `start()` returns it
    running, `_stop()` ends its process; stop() also removes its folder (`dir`), and as a
    context manager it is stopped even when its start fails half-way."""

    dir: Path

    def start(self):  # noqa: ANN201 - the subclass's own type
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):  # noqa: ANN204 - the subclass's own type
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OxigraphServer:
    """`oxigraph serve --location DIR --bind 127.0.0.1:PORT`; `url` is its base URL."""

    def __init__(self, binary: str, location: Path, timeout_s: int = SERVER_TIMEOUT_S) -> None:
        self.binary = binary
        self.location = location
        self.timeout_s = timeout_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = location.parent / f"oxigraph-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def query_url(self) -> str:
        return f"{self.url}/query"

    @property
    def engine(self) -> str:
        return f"endpoint={self.query_url}"

    def start(self, wait: float = 30.0) -> OxigraphServer:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--location", str(self.location), "--bind",
                 f"127.0.0.1:{self.port}", "--timeout-s", str(self.timeout_s)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"oxigraph serve exited {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.query_url}?query=ASK%7B%7D", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"oxigraph serve did not answer within {wait:g} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
