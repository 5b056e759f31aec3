"""What the two fake model APIs (fake_api.py: Anthropic's Messages API; fake_openai.py: an
OpenAI-compatible Chat Completions API) share: a real HTTP server on 127.0.0.1 in a thread of
its own; a script of steps, each request taking the next (`default` answers once it is empty,
`judge` the judge's requests when set); every request recorded with its body, time and headers;
a fixed latency for every answer (`delay`) and the most requests answered at once (`peak`);
and the state of a batch API's hostile modes. A subclass routes (`post`, `get`) and replies."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any]


class Headers(dict):
    """A request's headers, looked up by any casing (HTTP's names are case-insensitive; the
    SDKs and the Claude CLI each send their own)."""

    def __init__(self, items: Any) -> None:
        super().__init__((k.lower(), v) for k, v in items)

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)


class _Server(ThreadingHTTPServer):
    # room for every connection a client opens at once (socketserver's backlog is 5: the SYNs
    # past it are dropped and retried a second later)
    request_queue_size = 1024


class FakeServer:
    """Start with `with Sub() as api:`; `api.url` is the base URL."""

    request_id_header = "request-id"
    url_path = ""  # what the base URL ends in ("/v1" for OpenAI's)

    def __init__(self, default: Callable[[dict[str, Any]], Step],
                 is_judge: Callable[[dict[str, Any]], bool]) -> None:
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default = default
        self.judge: Callable[[dict[str, Any]], Step] | None = None
        self._is_judge = is_judge
        self._lock = threading.Lock()
        # a batch API: batches made, how many looks before one ends, and hostile modes
        # (requests that match expire or error; result downloads cut mid-line)
        self.batches: dict[str, dict[str, Any]] = {}
        self.batches_created = 0
        self.batch_polls = 2
        self.batch_expire: Callable[[dict[str, Any]], bool] = lambda params: False
        self.batch_error: Callable[[dict[str, Any]], Any] = lambda params: None
        self.batch_truncate = 0  # result downloads still to cut in their first line
        self.http: list[tuple[str, str]] = []  # every request: (method, path)
        self.delay = 0.0  # seconds every answer (not an error status) takes: a model's latency
        self.active = 0   # requests being answered now
        self.peak = 0     # the most requests that were being answered at once
        # every trickled reply: {"size": its bytes, "sent": bytes the client took before it
        # hung up (or all of them), "done": whether the trickle has ended}
        self.trickles: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # each reply sent at once, as a real API's server does: http.server writes the
            # headers and the body apart, and Nagle's algorithm would hold the body back until
            # the client's delayed ACK (about 40 ms on every request)
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                with api._lock:
                    api.http.append(("POST", self.path))
                api.post(self, raw)

            def do_GET(self) -> None:  # noqa: N802
                with api._lock:
                    api.http.append(("GET", self.path))
                api.get(self, self.path.split("?")[0].rstrip("/").split("/"))

            def _send(self, code: int, payload: Any, headers: dict[str, str] | None = None,
                      raw: bytes | None = None) -> None:
                data = raw if raw is not None else json.dumps(payload).encode()
                headers = dict(headers or {})
                self.send_response(code)
                self.send_header("content-type", headers.pop("content-type",
                                                             "application/json"))
                self.send_header("content-length", str(len(data)))
                self.send_header(api.request_id_header, f"req_{time.monotonic_ns()}")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except OSError:  # the client gave up first
                    pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{self.url_path}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- what a subclass gives ------------------------------------------------------------------

    def post(self, handler: Any, raw: bytes) -> None:
        raise NotImplementedError

    def get(self, handler: Any, parts: list[str]) -> None:
        raise NotImplementedError

    def _reply(self, handler: Any, step: Step, request: dict[str, Any]) -> None:
        raise NotImplementedError

    # --- shared ---------------------------------------------------------------------------------

    def next_step(self, body: dict[str, Any]) -> Step:
        """The step that answers `body` (the judge's, the script's next, or the default's);
        called holding the lock."""
        if self.judge is not None and self._is_judge(body):
            return self.judge(body)
        return self.script.popleft() if self.script else self.default(body)

    def answer(self, handler: Any, body: dict[str, Any], raw: bytes = b"") -> None:
        """A model request: recorded (with its bytes, `raw`, as a signature covers them),
        answered by its step after `delay`, counted in flight."""
        with self._lock:
            self.requests.append({"path": handler.path, "body": body, "t": time.monotonic(),
                                  "headers": Headers(handler.headers.items()), "raw": raw})
            step = self.next_step(body)
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            if self.delay and step["kind"] != "status":
                time.sleep(self.delay)
            self._reply(handler, step, body)
        finally:
            with self._lock:
                self.active -= 1

    def trickle(self, handler: Any, data: bytes, every: float) -> None:
        """A 200 whose headers (with the whole body's length) come at once, then its body one
        byte every `every` seconds: each read the client makes gets a byte well within any
        read timeout, so only a deadline on the whole call stops it. How far it got is kept in
        `trickles` (a client that hung up took fewer bytes than the body holds)."""
        record = {"size": len(data), "sent": 0, "done": False}
        with self._lock:
            self.trickles.append(record)
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.send_header(self.request_id_header, f"req_{time.monotonic_ns()}")
        handler.end_headers()
        try:
            handler.wfile.flush()
            for i in range(len(data)):
                time.sleep(every)
                handler.wfile.write(data[i:i + 1])
                handler.wfile.flush()
                record["sent"] = i + 1
        except OSError:  # the client hung up
            pass
        finally:
            record["done"] = True
            handler.close_connection = True

    def push(self, *steps: Step) -> Any:
        with self._lock:
            self.script.extend(steps)
        return self

    def __enter__(self) -> Any:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
