"""Ctrl-C: the first SIGINT stops a run cleanly, in every process of it.

A run's processes each hold one `Interrupt` (the serial session, or the xdist controller and
each worker), installed as the SIGINT handler for the session. The first SIGINT — sent to the
process, or to the terminal's process group, which reaches xdist's workers too — does not raise
wherever the process happens to be: DuckDB turns a KeyboardInterrupt raised inside a query into
`RuntimeError("Query interrupted")`, which a query's error handling would then grade, and a
KeyboardInterrupt between two writes of a banked line would tear it. Instead it:

- records that the run was interrupted and calls `on_request` (the session stops after the item
  in flight: `session.shouldstop`, xdist's own `shouldstop` on the controller);
- forwards SIGINT to the process's local xdist workers (`forward_to`), which a SIGINT sent to
  the controller alone would not reach;
- raises KeyboardInterrupt only inside an `abortable()` region — an item being asked, the
  variants being built before the first item — so a model call or a subprocess waiting there
  stops at once. The item then checks `requested` and drops its answer (it is never banked:
  its grade could hold the interruption), so whatever the interruption hit is asked again on
  `--resume`.

Inside an abortable region, a `shielded()` region takes the first SIGINT without raising and
raises at its end instead: an object being made there (an SDK's HTTP client) is never left
half-made, which its `__del__` would then fail on and print as a traceback. A SIGINT in a
finalizer is sent again once the finalizer has returned, for the same reason.

A second SIGINT raises KeyboardInterrupt at once on a process that `hard_second` (the one the
user runs): Ctrl-C twice stops at once, as pytest does. A worker takes every SIGINT like the
first (a Ctrl-C reaches it both from the terminal and through its controller).

Pure module: no pytest.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

INTERRUPTED = "interrupted by Ctrl-C (SIGINT)"

_ACTIVE: list[Interrupt] = []  # the process's installed handler, if any


class Interrupt:
    """The SIGINT handler of one process of a run, and what it asks of the session."""

    def __init__(self, *, hard_second: bool) -> None:
        self.hard_second = hard_second
        self.requested: str | None = None
        self.on_request: list[Callable[[str], None]] = []  # called once, in the handler
        self.forward_to: set[int] = set()  # the process ids of local xdist workers
        self._abortable = 0
        self._shielded = 0
        self._redelivered = False  # the next SIGINT is ours, deferred from a finalizer
        self._previous: Any = None
        self._installed = False

    def install(self) -> bool:
        """Become the process's SIGINT handler (the main thread only); whether it did."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return self._installed
        self._previous = signal.signal(signal.SIGINT, self._handle)
        self._installed = True
        _ACTIVE[:] = [self]
        return True

    def uninstall(self) -> None:
        """Give SIGINT back to the handler it had before (the end of the session)."""
        if self._installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous if self._previous is not None
                          else signal.default_int_handler)
        self._installed = False
        if _ACTIVE == [self]:
            _ACTIVE.clear()

    def request(self, why: str = INTERRUPTED) -> None:
        """What the first SIGINT does (also callable without a signal)."""
        if self.requested is not None:
            return
        self.requested = why
        for pid in sorted(self.forward_to):
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:  # the worker has gone already
                pass
        for call in self.on_request:
            call(why)

    @contextmanager
    def abortable(self) -> Iterator[None]:
        """A region a SIGINT may stop at once with KeyboardInterrupt (raised here too when the
        run was interrupted before it began)."""
        self._abortable += 1
        try:
            if self.requested is not None:
                raise KeyboardInterrupt(self.requested)
            yield
        finally:
            self._abortable -= 1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._redelivered:
            self._redelivered = False  # our own signal, sent again from a finalizer: a first
        elif self.requested is not None and self.hard_second:
            self.uninstall()
            raise KeyboardInterrupt("a second Ctrl-C: stopped at once")
        self.request()
        if not self._abortable or self._shielded:  # a shielded region raises at its end
            return
        if _in_finalizer(frame):
            # raised in a __del__ or a garbage collector's callback, a KeyboardInterrupt is
            # printed as "Exception ignored" with its traceback and lost: the signal is sent
            # again a moment later, when the finalizer has returned
            self._redelivered = True
            threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGINT)).start()
            return
        raise KeyboardInterrupt(self.requested)


@contextmanager
def shielded() -> Iterator[None]:
    """A region the first SIGINT does not raise in, for making an object that must not be left
    half-made (an SDK client: a KeyboardInterrupt in its __init__ leaves one whose __del__
    raises AttributeError, printed as "Exception ignored" with a traceback). At its end, a run
    interrupted meanwhile raises KeyboardInterrupt if the region is inside an abortable one.
    Without an installed handler (outside a session, another thread's signal) it does nothing."""
    intr = _ACTIVE[0] if _ACTIVE else None
    if intr is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    intr._shielded += 1
    try:
        yield
    finally:
        intr._shielded -= 1
    if not intr._shielded and intr._abortable and intr.requested is not None:
        raise KeyboardInterrupt(intr.requested)


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether the code a signal interrupted runs inside a finalizer: an object's `__del__`, a
    callback of the garbage collector (`gc.callbacks`), or any code of the standard library's
    weak references (`weakref.finalize`, the callbacks by which a WeakSet or a weak dictionary
    drops a dead entry: a KeyboardInterrupt in WeakSet's `_remove` was printed as "Exception
    ignored" in a Ctrl-C of an xdist run in CI). Delaying the signal 20 ms there costs
    nothing."""
    import gc

    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code in callbacks or \
                frame.f_globals.get("__name__") in ("weakref", "_weakrefset"):
            return True
        frame = frame.f_back
    return False
