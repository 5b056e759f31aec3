"""A store's engine in a long-lived worker process of its own, so that the operating system
enforces what the engine cannot promise: the worker may map `WORKER_MEMORY` bytes (RLIMIT_AS),
has no network (it is started in a fresh network namespace with `unshare`; a database client's
worker keeps it, to reach its server), and a query past its deadline is ended by killing the worker
(SIGKILL to its process group), so no engine thread runs on after it was reported stopped. A
killed worker is replaced at once, loading its store while the model thinks; one worker per
store keeps a process spawn off the path of each query.

The protocol is JSON lines over the worker's stdin and stdout: the first line the parent writes
is the worker's configuration, the first it reads back says the store is ready (with whatever
the worker reports about it), then one request, one reply. Engine-neutral: the module run in the
worker (`python -m <module>`) holds the engine.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import IO, Any

from pytest_kgbench.core.errors import HarnessBroken

# how to start a process without network, in order of preference: a network namespace made as
# root, then one inside an unprivileged user namespace (where the kernel allows them)
SANDBOXES: tuple[tuple[str, ...], ...] = (("unshare", "--net"), ("unshare", "--map-root-user",
                                                                 "--net"))
# the probe: a process in a new network namespace sees another namespace than its parent's
PROBE = "import os, sys; sys.exit(os.readlink('/proc/self/ns/net') == sys.argv[1])"
WORKER_MEMORY = 4 << 30  # bytes of address space a worker may map (RLIMIT_AS)
NETWORKED = "none: the engine is a client of its database server, over the network"
START_TIMEOUT = 600.0    # seconds a worker may take to load its store


@lru_cache(maxsize=1)
def sandbox() -> tuple[tuple[str, ...], str]:
    """The command prefix that starts a process without network, and a sentence saying what
    it is; `()` and the reason when this system cannot make a network namespace."""
    try:
        here = os.readlink("/proc/self/ns/net")
    except OSError:
        return (), "none: this system has no network namespaces (/proc/self/ns/net)"
    for prefix in SANDBOXES:
        if shutil.which(prefix[0]) is None:
            continue
        try:
            done = subprocess.run([*prefix, sys.executable, "-c", PROBE, here],
                                  capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix, f"a network namespace of its own ({' '.join(prefix)})"
    return (), ("none: unshare could not make a network namespace here; the guard still "
                "refuses SERVICE and FROM, and Python-level network calls are blocked in the "
                "worker, but native engine code is not sandboxed")


class WorkerDied(Exception):
    """The worker ended while a request was in flight (out of memory, a crash)."""


_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()


@lru_cache(maxsize=1)
def _spawner() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgbench-spawner")


class Worker:
    """One worker process serving one store. `call` sends a request and waits for the reply
    until a deadline; past it the worker is killed (and a fresh one started)."""

    def __init__(self, module: str, config: Mapping[str, Any], *,
                 start_timeout: float = START_TIMEOUT, network: bool = False) -> None:
        self.module = module
        self.config = {"memory_bytes": WORKER_MEMORY, **dict(config)}
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] | None = None
        self.kills = 0
        # a worker whose engine is a client of a server keeps the network to reach it
        self.network = network
        self.sandbox = (NETWORKED if network else sandbox()[1])
        self._buf = b""
        self._ready = False
        self._stderr: IO[bytes] | None = None
        self._lock = threading.RLock()  # one request at a time, whichever thread asks
        self._current: list[subprocess.Popen[bytes]] = []  # the live process, for the finalizer
        # an executor dropped without close (a test, an agent's cache) takes its worker along
        weakref.finalize(self, _reap, self._current)
        self.start()
        _LIVE.add(self)

    # --- the process ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker without waiting for it: it loads its store in the background."""
        prefix = () if self.network else sandbox()[0]
        self._stderr = tempfile.TemporaryFile()
        self._buf = b""
        self._ready = False
        # spawned from one long-lived thread: the worker's parent-death signal follows the
        # thread that forked it, and a query's thread (an MCP server's, say) may come and go
        self.proc = _spawner().submit(
            subprocess.Popen, [*prefix, sys.executable, "-m", self.module],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, bufsize=0,
            start_new_session=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).result()
        self._current[:] = [self.proc]
        self._send({**self.config, "parent": os.getpid()})

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """End the worker and everything it started, now, and reap it."""
        proc, self.proc = self.proc, None
        self._current.clear()
        if proc is None:
            return
        _reap([proc])
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        with self._lock:
            self.kill()

    def ready(self) -> dict[str, Any]:
        """What the worker reported once its store was loaded (waiting for it if need be)."""
        if self._ready and self.info is not None and self.proc is not None:
            return self.info
        with self._lock:
            return self._ready_locked()

    def _ready_locked(self) -> dict[str, Any]:
        if self.proc is None:
            self.start()
        if not self._ready:
            try:
                msg = self._read(time.monotonic() + self.start_timeout)
            except WorkerDied:
                msg = None
            if msg is None or "ready" not in msg:
                why = (msg or {}).get("error") or self._stderr_tail() or "no reply"
                self.kill()
                raise HarnessBroken(f"the store's worker process ({self.module}) did not start: "
                                    f"{why}")
            self.info = msg["ready"]
            self._ready = True
        assert self.info is not None
        return self.info

    def call(self, request: Mapping[str, Any], timeout: float) -> dict[str, Any] | None:
        """The worker's reply to `request`, or None when `timeout` seconds passed first (the
        worker is then killed and replaced). Raises `WorkerDied` if it ended while the request
        was in flight (one found dead before the request reached it is replaced first), and
        HarnessBroken on a `broken` reply: the harness's own code failed in the worker."""
        with self._lock:
            for attempt in (1, 2):
                if not self.alive():
                    self.kill()
                    self.start()
                self.ready()
                try:
                    self._send(request)
                except WorkerDied:
                    if attempt == 1:  # it died idle: the request never reached it
                        self.kill()
                        continue
                    raise
                break
            deadline = time.monotonic() + timeout
            try:
                reply = self._read(deadline)
            except WorkerDied:
                status = None
                if self.proc is not None:
                    try:
                        status = self.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
                self.kill()
                self.start()
                how = (f"signal {-status}" if status is not None and status < 0
                       else f"exit status {status}")
                raise WorkerDied(f"the store's engine ended during the query ({how}: past its "
                                 f"memory limit, or a crash); a fresh one was started") from None
            if reply is None:
                self.kill()
                self.kills += 1
                self.start()
            elif "broken" in reply:  # the harness's own code failed in the worker: no result
                raise HarnessBroken(str(reply["broken"]))
            return reply

    # --- the pipe -------------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(str(exc)) from None

    def _read(self, deadline: float) -> dict[str, Any] | None:
        """One reply line, or None at the deadline; raises `WorkerDied` at end of file."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerDied("end of file")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _stderr_tail(self, limit: int = 2000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            text = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return text.strip()[-limit:]


def _reap(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL each process's group, wait for it, close its pipes."""
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
    procs.clear()


def kill_all() -> None:
    """End every live worker of this process (at exit, so none outlives its parent)."""
    for worker in list(_LIVE):
        worker.kill()


atexit.register(kill_all)


def serve(handle: Any) -> None:
    """The worker's side of the protocol, for the module run in the worker: read the
    configuration, load the store (`handle(config)` returns the engine: an object with
    `info()` and `reply(request)`), say it is ready, then answer each request in turn; what
    `reply` raises is answered as `broken` (the parent's `Worker.call` raises HarnessBroken:
    a query's own failure is in the reply it returns). The worker dies with its parent, and
    ends when its stdin closes."""
    config = json.loads(sys.stdin.readline() or "{}")
    _die_with_parent(int(config.get("parent") or 0))
    _limit_memory(int(config.get("memory_bytes") or WORKER_MEMORY))
    out = sys.stdout.buffer
    try:
        engine = handle(config)
        ready = {"ready": engine.info()}
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which halts the run
        ready = {"error": f"{type(exc).__name__}: {exc}"}
        engine = None
    out.write(json.dumps(ready).encode() + b"\n")
    out.flush()
    if engine is None:
        return
    for line in sys.stdin:
        try:
            text = json.dumps(engine.reply(json.loads(line)))
        except Exception as exc:  # noqa: BLE001 - the engine answers a query's own failure in
            #                        its reply: what is raised is the harness's, which halts
            text = json.dumps({"broken": f"the store's worker failed a request: "
                                         f"{type(exc).__name__}: {exc}"})
        out.write(text.encode() + b"\n")
        out.flush()


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to kill this process when its parent dies (Linux prctl), and watch for
    it too (a thread that exits at once when the parent is gone)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    if parent and os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)
    threading.Thread(target=watch, daemon=True, name="kgbench-watchdog").start()


def _limit_memory(limit: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
