"""Client-side pacing of model requests in one process (--rpm, --tpm), shared by the threads
that answer items concurrently (--concurrency, asking/inflight.py).

- **The limits**: --rpm (requests per minute) and --tpm (tokens per minute) are limits of the
  whole run; under `-n W` each worker process paces itself at limit / W (the xdist worker
  count, `PYTEST_XDIST_WORKER_COUNT`), so W workers together keep to the limit.
- **Spacing, no burst**: each limit is a GCRA token bucket without burst allowance, so
  requests are spaced evenly (at 60/rpm seconds for --rpm; a request of t tokens holds the
  next back t·60/tpm seconds for --tpm) rather than sent in a burst at the start of each
  minute: providers enforce per-minute limits over shorter intervals too.
- **Tokens**: a request's tokens are estimated before it is sent from the size of what is sent
  (about four characters a token, as core/pricing.py) plus its output limit, then corrected by the
  usage the response reports (input, cache reads and writes, output: every token counts, the
  cautious reading of a provider's limit).
- **One 429 slows every thread**: a rate-limit (429) or overload (529) answer pauses the
  bucket for its retry-after (or the backoff), so no thread of the process sends before it.
- **The item's clock**: time a thread is held back by the bucket is not the model's time: it
  is kept per thread (`held`) and `clock()` excludes it, so the item's --item-timeout and its
  latency count only the time the model took (a harness wait is never a timeout grade).
- **Cancel**: `cancel()` (a halt, Ctrl-C, the end of the session) wakes every waiting thread
  with `Cancelled`; no request, round or retry starts after it.

Pure module: no pytest.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_kgbench.core.errors import Cancelled

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

CHARS_PER_TOKEN = 4
RATE_LIMITED = (429, 529)  # statuses that slow the bucket for every thread


def worker_count() -> int:
    """How many processes share the run's limits: xdist's worker count, else one."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1))
    except ValueError:
        return 1


class Pace:
    """The buckets, the pause and the cancel of one process (thread-safe)."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None, *,
                 workers: int = 1) -> None:
        self.rpm = rpm / workers if rpm else None
        self.tpm = tpm / workers if tpm else None
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._request_at = 0.0  # GCRA: when the next request may go (--rpm)
        self._token_at = 0.0    # when the next request may go (--tpm)
        self._paused_until = 0.0
        self._local = threading.local()
        self.requests = 0  # requests let through (for tests and the benchmark)

    @classmethod
    def from_settings(cls, settings: Settings) -> Pace:
        return cls(settings.limits.rpm, settings.limits.tpm, workers=worker_count())

    # --- the item's clock ----------------------------------------------------------------------

    @property
    def held(self) -> float:
        """Seconds this thread has been held back by the bucket so far."""
        return float(getattr(self._local, "held", 0.0))

    def clock(self) -> float:
        """time.monotonic() less the time this thread was held back: the item's clock."""
        return time.monotonic() - self.held

    # --- the buckets ---------------------------------------------------------------------------

    @property
    def limited(self) -> bool:
        return bool(self.rpm or self.tpm)

    def acquire(self, tokens: int = 0) -> int:
        """Wait until one request of about `tokens` tokens may be sent, then count it. Returns
        the tokens counted (for `correct`). Raises `Cancelled` once cancelled."""
        if self._cancelled.is_set():
            raise Cancelled("the run is stopping: no new model request is made")
        with self._lock:
            now = time.monotonic()
            start = max(now, self._paused_until)
            if self.rpm:
                start = max(start, self._request_at)
            if self.tpm:
                start = max(start, self._token_at)
            if self.rpm:
                self._request_at = start + 60.0 / self.rpm
            if self.tpm:
                self._token_at = start + tokens * 60.0 / self.tpm
            self.requests += 1
        self._hold(start - now)
        return tokens

    def correct(self, estimated: int, actual: int) -> None:
        """A response's usage in place of the estimate it was let through with."""
        if not self.tpm or actual == estimated:
            return
        with self._lock:
            self._token_at += (actual - estimated) * 60.0 / self.tpm

    def pause(self, seconds: float) -> None:
        """No thread sends for `seconds` (a 429's retry-after)."""
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def backoff(self, exc: Exception, wait: float) -> None:
        """Before a retry after `exc`: a rate limit or overload pauses every thread for `wait`,
        then this thread sleeps it (woken by a cancel)."""
        if getattr(exc, "status_code", None) in RATE_LIMITED:
            self.pause(wait)
        self.sleep(wait)

    # --- waiting and cancelling -------------------------------------------------------------------

    def _hold(self, seconds: float) -> None:
        if seconds <= 0:
            return
        t0 = time.monotonic()
        try:
            self.sleep(seconds)
        finally:
            self._local.held = self.held + (time.monotonic() - t0)

    def sleep(self, seconds: float) -> None:
        """Sleep, or raise `Cancelled` as soon as the pace is cancelled."""
        if seconds > 0 and self._cancelled.wait(seconds):
            raise Cancelled("the run is stopping: no new model request is made")
        if self._cancelled.is_set():
            raise Cancelled("the run is stopping: no new model request is made")

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


def estimate_tokens(request: Mapping[str, Any], max_tokens: int) -> int:
    """About how many tokens a request takes of a --tpm limit before it is sent: what is sent
    (four characters a token) and every output token it may write."""
    import json

    chars = len(json.dumps(request, ensure_ascii=False, default=str))
    return chars // CHARS_PER_TOKEN + 1 + int(max_tokens)


def used_tokens(usage: Mapping[str, int]) -> int:
    """The tokens a response's usage counts against --tpm: every one it reports."""
    return sum(int(v or 0) for v in usage.values())


class Ticket:
    """One model request's way through the pace: every attempt of it (its retries too) waits
    for the buckets; the last one's usage corrects the estimate (`settle`)."""

    def __init__(self, pace: Pace, tokens: int) -> None:
        self.pace = pace
        self.tokens = tokens
        self.attempts = 0

    def clock(self) -> float:
        return self.pace.clock()

    def before(self) -> None:
        """Before an attempt is sent: wait for the buckets (raises `Cancelled`)."""
        self.pace.acquire(self.tokens)
        self.attempts += 1

    def backoff(self, exc: Exception, wait: float) -> None:
        self.pace.backoff(exc, wait)

    def settle(self, usage: Mapping[str, int]) -> None:
        if self.attempts:
            self.pace.correct(self.tokens, used_tokens(usage))
