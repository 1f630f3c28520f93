"""The HTTP side of the agent: Prometheus `/metrics`, and `/healthz` for humans.

A threading WSGI server from the standard library: `/metrics` hands out the families the
collector rendered at the last report update (the process_* families read /proc/self),
`/healthz` answers from memory too.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpuprobe.errors import UsageError
from gpuprobe.serve.grpc_server import split_host_port

StartResponse = Callable[..., Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


class MetricsServer:
    """`/metrics` and `/healthz` on HOST:PORT, served from a background thread."""

    def __init__(
        self, listen: str, registry: CollectorRegistry, health: Callable[[], tuple[int, str]]
    ) -> None:
        host, port = split_host_port(listen)
        metrics = make_wsgi_app(registry)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start_response)  # type: ignore[no-any-return]
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


_REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}


def _text(start_response: StartResponse, code: int, text: str) -> list[bytes]:
    body = text.encode()
    start_response(
        f"{code} {_REASONS.get(code, 'Error')}",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [body]
