"""Peak memory of processes while a block of code runs, read from Linux's /proc: each
process's own high-water mark of resident memory (VmHWM), polled on a thread, so a process
that is killed between two polls loses only its growth since the last one. Used by the tests
of the stores' limits and by benchmarks/limits.py."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar


def vm_hwm(pid: int) -> int | None:
    """The process's peak resident memory so far, in bytes (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def address_space_limit(pid: int) -> int | None:
    """The process's RLIMIT_AS (soft), in bytes; None if unlimited or unreadable."""
    try:
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max address space"):
                value = line.split()[3]
                return None if value == "unlimited" else int(value)
    except (OSError, ValueError, IndexError):
        return None
    return None


def tree(root: int) -> list[int]:
    """`root` and every process descending from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


W = TypeVar("W", bound="_Watcher")


class _Watcher:
    """A thread that watches while a `with` block runs: `_watch` until the block ends."""

    name = "watcher"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name=self.name)

    def _watch(self) -> None:
        raise NotImplementedError

    def __enter__(self: W) -> W:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


class PeakRss(_Watcher):
    """`with PeakRss(lambda: [pid, ...]) as peak:` — `peak.peaks` maps each process seen to its
    peak resident bytes, `peak.most` is the largest. `pids` is asked at each poll (a worker
    replaced, a process tree that grows)."""

    name = "peak-rss"

    def __init__(self, pids: Callable[[], Iterable[int | None]], every: float = 0.02) -> None:
        self.pids = pids
        self.every = every
        self.peaks: dict[int, int] = {}
        super().__init__()

    def _poll(self) -> None:
        for pid in self.pids():
            if pid is None:
                continue
            hwm = vm_hwm(pid)
            if hwm is not None:
                self.peaks[pid] = max(self.peaks.get(pid, 0), hwm)

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self._poll()

    @property
    def most(self) -> int:
        return max(self.peaks.values(), default=0)

    def __enter__(self) -> PeakRss:
        self._poll()
        return super().__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(kind, exc, tb)
        self._poll()


def watched_run(store: Any, statement: str) -> tuple[Any, float, PeakRss, float]:
    """`store.run(statement)` on a store whose engine runs in a worker: its result, its wall
    from arrival to answer (a worker replaced after a kill has loaded first: not the query's
    time), the worker's peak memory meanwhile, and how long the machine held this process back
    past the store's deadline (`Lateness`: a bound on the wall adds it)."""
    store.worker.ready()
    with PeakRss(lambda: [store.worker.pid]) as peak, Lateness(after=store.timeout) as late:
        started = time.monotonic()
        result = store.run(statement)
        spent = time.monotonic() - started
    return result, spent, peak, late.seconds


class Lateness(_Watcher):
    """`with Lateness(after=s) as late:` — how long the machine kept this process waiting once
    `s` seconds had passed: a thread asks to sleep `every` seconds at a time and adds up how
    much later than asked it woke (`late.seconds`). A bound on a call's wall past its deadline
    is then the engine's promise plus this, so the verdict is the engine's, not the machine's
    load: on an idle machine it is a few milliseconds; with the CPUs taken it grows by what the
    scheduler held back, which also held back the deadline's own timer thread."""

    name = "lateness"

    def __init__(self, after: float = 0.0, every: float = 0.01) -> None:
        self.after = after
        self.every = every
        self.seconds = 0.0
        super().__init__()

    def _watch(self) -> None:
        start = time.monotonic()
        while True:
            asked = time.monotonic()
            # waiting on the stop event, not sleeping: the block's end is not held up by the
            # rest of a sleep (a join waited 8 ms on average, per `with`, in the fuzz tests)
            if self._stop.wait(self.every):
                return  # a wait the block's end cut short measures nothing
            woke = time.monotonic()
            if woke - start >= self.after:
                self.seconds += max(0.0, woke - asked - self.every)

