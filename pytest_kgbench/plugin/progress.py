"""The live line of a run: items banked of those expected, the grades so far, the tokens and
dollars spent and the time left, written by the controller every so often (`--progress
SECONDS`; off under -q). Pure module: no pytest. The hook that feeds it is in plugin/__init__.py.

Dollars are at list prices for the models that have one; an unpriced model's tokens make the
cost "unknown" (never $0), and a response served from the response cache spends nothing, as
its tokens are not counted (agents/support/cache.py). The time left is the time since the asking
began (the first item's start: its report less its own time, so the set-up before it — builds,
the SDK's import — is not an item's) over the items reported, times the items left; it is
given from the first item on, and the first line is due --progress seconds after the run
began, so a long set-up or a slow first item still gets one when that item reports."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from pytest_kgbench.core.pricing import dollars, usage_of

LETTER_ORDER = "CPWTABDMNZF"


def short(n: float) -> str:
    """A count as a person reads it at a glance: 950, 12.3k, 4.1M."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def duration(seconds: float) -> str:
    """Seconds as 45s, 6m10s, 2h05m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Counts what was banked, and says it in one line when one is due."""

    def __init__(self, every: float, price_of: Callable[[str], Mapping[str, float] | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every          # seconds between lines; 0: never
        self.price_of = price_of    # a record's model -> its prices, or None
        self.clock = clock
        self.expected = 0
        self.done = 0
        self.letters: Counter[str] = Counter()
        self.tokens: dict[str, dict[str, int]] = {}
        self.begun = clock()  # the run's start: set-up (builds) runs before any item
        self.started: float | None = None  # when the asking began (the first item's start)
        self.last: float | None = None  # when the last line was written
        # per worker (pytest-xdist's gw0, gw1, ...): items reported, and when it last reported
        self.workers: dict[str, list[float]] = {}

    def expect(self, total: int) -> None:
        self.expected = max(self.expected, total)

    def add(self, record: Mapping[str, Any] | None, worker: str | None = None) -> None:
        """One item reported: banked (`record`), or skipped or failed before it was asked; by
        `worker` under pytest-xdist."""
        now = self.clock()
        if self.started is None:  # the first item began its own time ago
            took = float((record or {}).get("elapsed_s") or 0.0)
            self.started = max(self.begun, now - took)
        self.done += 1
        if worker:
            count = self.workers.setdefault(worker, [0, now])
            count[0] += 1
            count[1] = now
        if record is None:
            self.letters["s"] += 1
            return
        self.letters[str(record.get("letter") or "?")] += 1
        spent = usage_of([record])
        if any(spent.values()):
            model = str(record.get("model") or "")
            into = self.tokens.setdefault(model, dict.fromkeys(spent, 0))
            for name, value in spent.items():
                into[name] += value

    def due(self) -> bool:
        """Whether a line is due now: --progress seconds after the last line, or after the run
        began (never before the first item reports, nor after the last)."""
        if not self.every or self.started is None or self.done >= self.expected > 0:
            return False
        return self.clock() - (self.begun if self.last is None else self.last) >= self.every

    def line(self) -> str:
        """The line: `120/480 items (25%) · C 80 W 30 · 1.2M in / 40.0k out tokens · $3.42 ·
        about 6m10s left`, and under pytest-xdist each worker's part, `gw0 61 (2s ago), gw1
        59 (4m01s ago)`: a worker stuck on an item shows as the one that has gone quiet."""
        self.last = self.clock()
        total = self.expected or self.done
        parts = [f"{self.done}/{total} items ({100 * self.done / max(total, 1):.0f}%)"]
        grades = " ".join(f"{k} {self.letters[k]}" for k in
                          sorted(self.letters, key=lambda k: (LETTER_ORDER.find(k) % 99, k)))
        if grades:
            parts.append(grades)
        if self.tokens:
            inp = sum(t["input"] + t["cache_read"] + t["cache_write"]
                      for t in self.tokens.values())
            out = sum(t["output"] for t in self.tokens.values())
            parts.append(f"{short(inp)} in / {short(out)} out tokens")
            costs = [dollars(t, self.price_of(m)) for m, t in self.tokens.items()]
            parts.append("cost unknown (no price)" if any(c is None for c in costs)
                         else f"${sum(c['billed'] for c in costs if c):.2f} so far")
        if self.started is not None and 0 < self.done < total:
            per_item = (self.last - self.started) / self.done  # the items' time, not set-up's
            parts.append(f"about {duration(per_item * (total - self.done))} left")
        if len(self.workers) > 1:
            parts.append(", ".join(
                f"{name} {int(n)} ({duration(self.last - at)} ago)" for name, (n, at) in
                sorted(self.workers.items(), key=lambda w: (len(w[0]), w[0]))))
        return " · ".join(parts)
