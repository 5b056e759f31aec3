"""Answers in flight: up to N items of one process asked at once (--concurrency N), each still
graded and banked by its own pytest item.

When an item of a thread-safe model agent runs, the runtime starts the answers of the next
items this process is sure to run itself (`start`: up to 2N items ahead, queued), and N
threads answer them in order, each taking the next queued item the moment it is free, so N
requests stay in flight while the items' own thread grades; the item then waits for its own
answer (`take`), grades and banks it. Serially the
next items are the following ones of the session; under xdist, the following ones of the
item's scheduling scope (its prompt context), which the scheduler sends wholly to one worker.

- An answer's failure is its own item's: the exception is kept with it and raised when its
  item takes it, exactly as if the item had asked itself (HarnessBroken halts; ItemSkipped
  skips that item; TransientModelError is rerun).
- `close` (the end of the session, a halt, Ctrl-C) cancels what has not started, cancels
  the pace (no new request, round or retry starts), calls the abort hooks when an answer is
  being made (the agents close their in-flight connections), and waits for the threads to
  end. An answer no item took (its item was never run: the run halted, -x stopped it) is
  discarded, never banked; the requests it made were paid for, and the response cache keeps
  them, so a resumed run asks them at no cost.

Pure module: no pytest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from typing import Any

from pytest_kgbench.asking.pacing import Pace


class Inflight:
    """A pool of `size` daemon threads answering items ahead of their turn, keyed by item, at
    most `window` answers held (queued, being made, or made and not yet taken)."""

    def __init__(self, size: int, pace: Pace | None = None, window: int | None = None) -> None:
        self.size = max(1, int(size))
        self.window = max(self.size, int(window or 2 * self.size))
        self.pace = pace
        self._futures: dict[Hashable, Future[Any]] = {}
        self._queue: list[tuple[Hashable, Callable[[], Any], Future[Any]]] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._running = 0
        self._closed = False
        self.peak = 0  # the most answers that were being made at once
        self.discarded = 0  # answers made for items that never took them
        self.abort_hooks: list[Callable[[], None]] = []

    # --- starting and taking ---------------------------------------------------------------------

    def pending(self) -> int:
        """Answers started and not yet done (queued or being made)."""
        with self._lock:
            return sum(1 for f in self._futures.values() if not f.done())

    def full(self) -> bool:
        """Whether the window is full (no answer can be started ahead now)."""
        return self.room() <= 0

    def room(self) -> int:
        """How many more answers may be started ahead now (0 once closed)."""
        with self._lock:
            return 0 if self._closed else self.window - len(self._futures)

    def keys(self) -> set[Hashable]:
        """The items whose answers are started and not yet taken."""
        with self._lock:
            return set(self._futures)

    def start(self, key: Hashable, make: Callable[[], Any], *, force: bool = False) -> bool:
        """Queue `key`'s answer, made by `make()` on the next free thread, unless it is started
        already, the window is full (`force`: the running item's own answer, queued even so)
        or the pool is closed. Returns whether it is started (now or before)."""
        with self._lock:
            if key in self._futures:
                return True
            if self._closed or (len(self._futures) >= self.window and not force):
                return False
            if not self._threads:
                # the whole pool at the first answer, before any thread is busy: a thread
                # started later waits for the GIL behind the ones building requests, and the
                # items' own thread waits with it (64 started one per item took ~0.3 s)
                self._threads = [threading.Thread(target=self._work, daemon=True,
                                                  name=f"kgbench-inflight-{i}")
                                 for i in range(self.size)]
                for thread in self._threads:
                    thread.start()
            future: Future[Any] = Future()
            self._futures[key] = future
            self._queue.append((key, make, future))
            self._wake.notify()
            return True

    def start_many(self, items: Iterable[tuple[Hashable, Callable[[], Any]]]) -> None:
        """Start answers in order until the window is full."""
        for key, make in items:
            if not self.start(key, make):
                return

    def started(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._futures

    def take(self, key: Hashable) -> Any:
        """Wait for `key`'s answer and hand it over (raising what making it raised). The key
        must have been started."""
        with self._lock:
            future = self._futures[key]
        try:
            return future.result()
        finally:
            with self._lock:
                self._futures.pop(key, None)

    # --- the threads ------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if not self._queue:
                    return
                key, make, future = self._queue.pop(0)
                if not future.set_running_or_notify_cancel():
                    continue
                self._running += 1
                self.peak = max(self.peak, self._running)
            try:
                result = make()
            except BaseException as exc:  # noqa: BLE001 - carried to the item that takes it
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._lock:
                    self._running -= 1

    # --- the end ----------------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Cancel what has not started, stop the pace, abort the connections in flight, and
        wait (up to `timeout` seconds) for the threads; answers no item took are discarded.
        With no answer being made (the end of a run whose every item was taken) there is no
        request to cut: the idle threads just end, and the agents' idle connections are left
        to their clients (cutting 64 of them took ~0.7 s of the run's last item)."""
        with self._lock:
            self._closed = True
            for _key, _make, future in self._queue:
                future.cancel()
            self._queue.clear()
            self.discarded += len(self._futures)
            self._futures.clear()
            busy = self._running > 0  # answers being made now: requests that may be in flight
            self._wake.notify_all()
            threads = list(self._threads)
        if self.pace is not None:
            self.pace.cancel()
        if busy:
            for hook in self.abort_hooks:
                try:
                    hook()
                except Exception:  # noqa: BLE001,S110 - best effort: the threads are joined next
                    pass
        for thread in threads:
            thread.join(timeout)

    def alive(self) -> int:
        """Threads still running (0 once closed and joined)."""
        return sum(1 for t in self._threads if t.is_alive())
