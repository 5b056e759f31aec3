"""A sentinel HTTP server on 127.0.0.1: it answers every request with an empty SPARQL result
and counts it, so a test can assert that nothing under test reached the network."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMPTY = b'{"head": {"vars": []}, "results": {"bindings": []}}'


class SentinelServer:
    """`with SentinelServer() as s:`; `s.url` to aim at, `s.requests` what arrived."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append({"method": self.command, "path": self.path,
                                            "body": body.decode("utf-8", "replace")})
                self.send_response(200)
                self.send_header("content-type", "application/sparql-results+json")
                self.send_header("content-length", str(len(EMPTY)))
                self.end_headers()
                self.wfile.write(EMPTY)

            do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _any  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> SentinelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
