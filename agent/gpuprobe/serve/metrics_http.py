"""The HTTP side of the agent: Prometheus `/metrics`, and `/healthz` for humans.

A threading WSGI server from the standard library. `/metrics` serves the report's families
as rendered once per report update and exposition format (a scrape only copies bytes), plus
the process_* families read from /proc/self; `/healthz` answers from memory too.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpuprobe.errors import UsageError
from gpuprobe.serve.grpc_server import split_host_port

StartResponse = Callable[..., Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    # Many scrapers and curls at once must queue, not see their SYN dropped (the default
    # backlog of 5 costs a dropped client a 1 s retransmit).
    request_queue_size = 128


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class MetricsPage:
    """The `/metrics` body: `report` (the report's collector) encoded once per update and
    format, `live` (process_* families) encoded on every scrape."""

    def __init__(self, report: CollectorRegistry, live: CollectorRegistry) -> None:
        self.report = report
        self.live = live
        self._lock = threading.Lock()
        self._generation = 0
        self._cache: dict[str, bytes] = {}

    def invalidate(self, *_: Any) -> None:
        """Forget the encoded report (a store view: called after each update)."""
        with self._lock:
            self._generation += 1
            self._cache.clear()

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The body and its content type for a scrape's Accept header."""
        encoder, content_type = choose_encoder(accept or "")
        with self._lock:
            generation = self._generation
            body = self._cache.get(content_type)
        if body is None:
            body = encoder(self.report)
            with self._lock:
                if generation == self._generation:  # else an update came meanwhile
                    self._cache[content_type] = body
        if content_type.startswith("application/openmetrics-text"):
            body = body.removesuffix(b"# EOF\n")  # the live part ends the exposition
        return body + encoder(self.live), content_type


class MetricsServer:
    """`/metrics` and `/healthz` on HOST:PORT, served from a background thread."""

    def __init__(
        self, listen: str, page: MetricsPage, health: Callable[[], tuple[int, str]]
    ) -> None:
        host, port = split_host_port(listen)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            """Route /metrics, /healthz and /."""
            path = environ.get("PATH_INFO", "")
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _text(start_response, 405, "use GET\n")
            if path == "/metrics":
                return _metrics(page, environ, start_response)
            if path == "/healthz":
                code, text = health()
                return _text(start_response, code, text)
            if path == "/":
                return _text(start_response, 200, "gpuprobe agent: /metrics /healthz\n")
            return _text(start_response, 404, "not found: try /metrics or /healthz\n")

        server_class = _Server6 if ":" in host else _Server
        try:
            self._server = make_server(
                host or "0.0.0.0", port, app, server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise UsageError(f"--metrics-listen {listen}: {exc.strerror or exc}") from None
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def _metrics(
    page: MetricsPage, environ: dict[str, Any], start_response: StartResponse
) -> list[bytes]:
    body, content_type = page.render(environ.get("HTTP_ACCEPT"))
    headers = [("Content-Type", content_type)]
    if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
        body = gzip.compress(body, compresslevel=1)  # cheap: scrapes are frequent
        headers.append(("Content-Encoding", "gzip"))
    headers.append(("Content-Length", str(len(body))))
    start_response("200 OK", headers)
    return [body]


def _text(start_response: StartResponse, code: int, text: str) -> list[bytes]:
    body = text.encode()
    start_response(
        f"{code} {_REASONS.get(code, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [body]
