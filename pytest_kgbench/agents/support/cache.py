"""The response cache and the spending cap, shared by the model agents (anthropic, openai,
gemini).

Every model request an agent makes goes through `gated`:

- the **response cache** (on unless --no-cache) keys a request by the SHA-256 of its exact
  content — the endpoint, the model, the messages, the tools, every setting sent — and the
  item's repeat index, so a rerun, a resumed run after a crash mid-item, or a second run over
  the same items is answered from disk at no cost, while each repeat stays its own request.
  Only what the model answered is stored (an error, a timeout or an empty reply never is, and an
  empty reply stored by an older version is asked again); a hit is marked in
  the item's record (`sent.calls[].cache_hit`, `sent.response_cache`) and its tokens are not
  counted as spend. The cache is one file per request under `responses_dir`, written
  atomically, so xdist workers share it without a lock.
- the **spending cap** (--max-cost DOLLARS) is a ledger in the run folder, shared by the
  workers under a file lock: before a request, its worst case (its input at the dearest input
  price, plus every output token it may write) is reserved, and if what was spent plus what is
  reserved would pass the cap the request is not made: `BudgetReached` halts the run (banked
  items kept, report marked HALTED: budget). After the call the reservation becomes the call's
  actual cost; a call that timed out keeps its reservation (it may have been billed). Under
  --concurrency every request in flight holds its reservation, so the cap counts the worst case
  of all of them: spent plus reserved never passes the cap, however many threads ask. The
  refused request halts the run when its item takes it; the runtime then stops every answer
  in flight (runtime.Runtime.stop).
- the **pace** (asking/pacing.py: --rpm, --tpm, and the cancel of a stopping run) is the process's
  own, set by the runtime (`Gate.pace`); each attempt of a request waits for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_kgbench.agents.support.faults import empty_reply
from pytest_kgbench.asking.pacing import Pace, Ticket, estimate_tokens
from pytest_kgbench.core.errors import BudgetReached
from pytest_kgbench.core.pricing import CHARS_PER_TOKEN, dollars

if TYPE_CHECKING:
    from pytest_kgbench.core.settings import Settings

CACHE_VERSION = 1  # part of every key: a change of what is stored starts a new cache
LEDGER = "spend.json"


def request_key(provider: str, endpoint: str | None, request: Mapping[str, Any],
                repeat: int) -> str:
    """The SHA-256 of one exact request: the provider, its endpoint, everything sent, and
    the item's repeat index (so repeats stay distinct requests)."""
    text = json.dumps({"v": CACHE_VERSION, "provider": provider, "endpoint": endpoint,
                       "request": request, "repeat": repeat},
                      sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """Responses on disk, one JSON file per request key (`<dir>/<2 hex>/<key>.json`)."""

    def __init__(self, folder: Path) -> None:
        self.dir = Path(folder)

    def path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored response of a request, or None (absent, unreadable, or an empty reply:
        asked again)."""
        try:
            data = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        response = data.get("response") if isinstance(data, dict) else None
        if not isinstance(response, dict) or empty_reply(response):
            return None
        return response

    def put(self, key: str, response: Mapping[str, Any]) -> None:
        """Store a response; an empty reply is a fault, never stored (a rerun asks again)."""
        if empty_reply(response):
            return
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"key": key, "response": response}, ensure_ascii=False),
                       encoding="utf-8")
        tmp.replace(path)


def worst_case(price: Mapping[str, float], request: Mapping[str, Any], max_tokens: int) -> float:
    """The most one request can cost: its input (about four characters a token) at the
    dearest input price, plus `max_tokens` of output."""
    chars = len(json.dumps(request, ensure_ascii=False, default=str))
    dearest = max(price.get("input", 0.0), price.get("cache_write", 0.0))
    return ((chars // CHARS_PER_TOKEN + 1) * dearest + max_tokens * price.get("output", 0.0)) \
        / 1_000_000


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process
        return True
    return True


class Budget:
    """The run's spending ledger (`<run>/spend.json`): dollars spent, and what each live
    process has reserved for the request it is making."""

    def __init__(self, run_dir: Path, cap: float) -> None:
        self.path = Path(run_dir) / LEDGER
        self.cap = cap
        self._lock = threading.Lock()  # the threads of this process, one at a time

    def _locked(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(self.path) + ".lock"):
            try:
                ledger = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                ledger = {}
            ledger.setdefault("spent", 0.0)
            ledger["reserved"] = {k: v for k, v in (ledger.get("reserved") or {}).items()
                                  if k.startswith("batch:") or _alive(int(k.split(":", 1)[0]))}
            result = change(ledger)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}"
                                      ".tmp")
            tmp.write_text(json.dumps(ledger, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self.path)
            return result

    def reserve(self, amount: float, token: str | None = None) -> str:
        """Reserve `amount` dollars for one request, or raise BudgetReached when what was spent
        and reserved plus it would pass the cap. Returns the reservation's token. A batch's
        reservation (token "batch:...") outlives the process that made it: its results may be
        fetched by another, or by a resumed run (agents/support/batch.py)."""
        token = token or f"{os.getpid()}:{threading.get_ident()}:{time.monotonic_ns()}"

        def change(ledger: dict[str, Any]) -> None:
            held = ledger["spent"] + sum(ledger["reserved"].values())
            if held + amount > self.cap:
                raise BudgetReached(
                    f"budget: the next request could cost up to ${amount:.4f}, and "
                    f"${ledger['spent']:.4f} is spent (${held - ledger['spent']:.4f} more in "
                    f"flight) of --max-cost ${self.cap:g}: the run stops before it")
            ledger["reserved"][token] = amount

        self._locked(change)
        return token

    def settle(self, token: str, cost: float | None, part: float | None = None) -> None:
        """Turn a reservation into the call's cost (None: the call was not billed); with
        `part`, only that share of it (one result of a batch), the rest kept reserved."""

        def change(ledger: dict[str, Any]) -> None:
            if part is None:
                ledger["reserved"].pop(token, None)
            elif token in ledger["reserved"]:
                left = round(ledger["reserved"][token] - part, 9)
                if left > 0:
                    ledger["reserved"][token] = left
                else:
                    ledger["reserved"].pop(token)
            ledger["spent"] = round(ledger["spent"] + (cost or 0.0), 9)

        self._locked(change)

    def spent(self) -> float:
        return float(self._locked(lambda ledger: ledger["spent"]))


class Gate:
    """What stands between an agent and the network: the cache and the cap of one process."""

    def __init__(self, settings: Settings, provider: str) -> None:
        self.settings = settings
        self.provider = provider
        responses = settings.paths.responses_dir
        self.cache = (ResponseCache(Path(responses))
                      if settings.model.response_cache and responses else None)
        self.budget = (Budget(settings.run_dir, settings.limits.max_cost)
                       if settings.limits.max_cost is not None else None)
        self.pace: Pace | None = None  # the process's, set by the runtime
        self._local = threading.local()

    def ticket(self, request: Mapping[str, Any], max_tokens: int) -> Ticket | None:
        """The pace's ticket for one request (None without a pace): what the agent's send
        hands to faults.call_within; `call` settles it with the response's usage."""
        if self.pace is None:
            return None
        ticket = Ticket(self.pace, estimate_tokens(request, max_tokens) if self.pace.tpm else 0)
        self._local.ticket = ticket
        return ticket

    def clock(self) -> float:
        """The item's clock: time.monotonic() less the time the pace held this thread back."""
        return self.pace.clock() if self.pace is not None else time.monotonic()

    # many parameters: keyword-only, what the request is and how this provider reads a reply
    def call(self, request: Mapping[str, Any], *, endpoint: str | None, repeat: int,
             model_id: str, max_tokens: int, send: Callable[[], tuple[Any, int]],
             dump: Callable[[Any], dict[str, Any]], load: Callable[[dict[str, Any]], Any],
             usage: Callable[[Any], dict[str, int]], use_cache: bool = True
             ) -> tuple[Any, int, bool]:
        """Make one request through the cache and the cap: (the response, or None when the
        deadline passed; the attempts made; whether it came from the cache). `send` makes the
        call; `dump`/`load` turn a response into JSON and back; `usage` reads its tokens.
        `use_cache=False` (the judge's passes, which must be two requests) bypasses the cache
        but not the cap."""
        key = (request_key(self.provider, endpoint, request, repeat)
               if self.cache and use_cache else None)
        if self.cache is not None and key is not None:
            stored = self.cache.get(key)
            if stored is not None:
                return load(stored), 0, True
        price = self.settings.model.prices.get(model_id)
        token = None
        if self.budget is not None:
            if not price:
                raise BudgetReached(f"budget: --max-cost needs a price for {model_id} "
                                    "([tool.kgbench.prices]); without one spending is unknown")
            token = self.budget.reserve(worst_case(price, request, max_tokens))
        self._local.ticket = None
        try:
            response, attempts = send()
        except BaseException:
            if token is not None and self.budget is not None:
                self.budget.settle(token, None)
            raise
        if self.budget is not None and token is not None:
            if response is None:  # timed out: it may have been billed, keep the worst case
                self.budget.settle(token, worst_case(price or {}, request, max_tokens))
            else:
                cost = dollars(usage(response), price)
                self.budget.settle(token, cost["billed"] if cost else None)
        ticket = getattr(self._local, "ticket", None)
        if response is not None and ticket is not None:
            ticket.settle(usage(response))
        if response is not None and self.cache is not None and key is not None:
            self.cache.put(key, dump(response))
        return response, attempts, False


# --- cutting the connections of requests in flight (a stopping run) ------------------------------

class _Tracked:
    """A network stream of the SDK's connection pool, known to its registry so a stopping run
    can shut its socket down: a thread blocked reading the reply then wakes at once. It knows
    the thread that last wrote a request on it (`owner`), which is the thread that reads the
    reply: a deadline cuts that thread's connection alone (`cut_at`)."""

    def __init__(self, stream: Any, registry: Any) -> None:
        self._stream = stream
        self._registry = registry
        self.owner: int | None = None
        registry.add(self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, *args: Any, **kwargs: Any) -> Any:
        self.owner = threading.get_ident()
        return self._stream.write(*args, **kwargs)

    def start_tls(self, *args: Any, **kwargs: Any) -> _Tracked:
        return _Tracked(self._stream.start_tls(*args, **kwargs), self._registry)

    def abort(self) -> None:
        import socket

        try:
            sock = self._stream.get_extra_info("socket")
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError, AttributeError):
            pass  # closed already


class _TrackingBackend:
    """The pool's network backend, registering every stream it opens."""

    def __init__(self, inner: Any) -> None:
        import weakref

        self._inner = inner
        self.streams: weakref.WeakSet[_Tracked] = weakref.WeakSet()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def add(self, stream: _Tracked) -> None:
        with self._lock:
            self.streams.add(stream)

    def connect_tcp(self, *args: Any, **kwargs: Any) -> _Tracked:
        return _Tracked(self._inner.connect_tcp(*args, **kwargs), self)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> _Tracked:
        return _Tracked(self._inner.connect_unix_socket(*args, **kwargs), self)

    def abort(self, owner: int | None = None) -> None:
        """Shut down every stream, or only those whose request `owner` (a thread) wrote."""
        with self._lock:
            streams = [s for s in self.streams if owner is None or s.owner == owner]
        for stream in streams:
            stream.abort()


def _pool_of(sdk_client: Any) -> Any:
    """The connection pool under an SDK client (anthropic's or openai's HTTP client is its
    `_client`, google-genai's its `_api_client._httpx_client`), or None where the HTTP library
    keeps it elsewhere (then nothing is cut: the threads end with their call)."""
    http = getattr(sdk_client, "_client", None)
    if http is None:
        http = getattr(getattr(sdk_client, "_api_client", None), "_httpx_client", None)
    return getattr(getattr(http, "_transport", None), "_pool", None)


def track_connections(sdk_client: Any) -> None:
    """Make the connections an SDK client opens cuttable by `abort_connections`."""
    pool = _pool_of(sdk_client)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None and not isinstance(backend, _TrackingBackend):
        pool._network_backend = _TrackingBackend(backend)


def abort_connections(sdk_client: Any) -> None:
    """Shut down every connection of an SDK client, in flight or idle: a thread waiting for
    its reply wakes with a connection error (and, its pace cancelled, asks nothing more)."""
    backend = getattr(_pool_of(sdk_client), "_network_backend", None)
    if isinstance(backend, _TrackingBackend):
        backend.abort()


@contextmanager
def cut_at(sdk_client: Any, seconds: float) -> Iterator[threading.Event]:
    """Within the block, the connection this thread sends its request on is shut down once
    `seconds` pass, and the event yielded is set: the HTTP client's timeout bounds each read,
    so a reply that trickles a byte at a time would otherwise hold the call for as long as
    the server likes. Cutting the socket wakes the blocked read with a connection error. A
    client whose pool cannot be tracked is never cut (its reads keep their own timeout)."""
    fired = threading.Event()
    backend = getattr(_pool_of(sdk_client), "_network_backend", None)
    if not isinstance(backend, _TrackingBackend):
        yield fired
        return
    me = threading.get_ident()

    def cut() -> None:
        fired.set()
        backend.abort(owner=me)

    timer = threading.Timer(max(0.0, seconds), cut)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()
