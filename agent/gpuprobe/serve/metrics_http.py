"""The HTTP side of the agent: Prometheus `/metrics`, `/healthz` for the liveness probe and
humans, `/readyz` for a readiness probe where the kubelet cannot use gRPC's (TLS).

Served by `gpuprobe.serve.http_loop`: one event loop holds every connection, so idle or slow
ones cost almost nothing, request heads and bodies have deadlines, one address holds at most
`Limits.max_per_peer` connections, and when every place is taken the connection that waited
longest is closed for the newcomer; one address holds at most
`Limits.max_answering_per_peer` answers in flight; `/healthz` (the DaemonSet's liveness
probe) and `/readyz` are never refused for want of an answer's place. `/metrics` serves the
report's families as rendered once per report update and exposition format (a scrape only
copies bytes), plus the process_* families read from /proc/self, encoded and compressed on a
worker thread so the loop keeps answering; `/healthz` and `/readyz` answer from memory, on
the loop. Errors are logged as JSON lines, never as a bare traceback.
"""

from __future__ import annotations

import errno
import gzip
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpuprobe.errors import UsageError
from gpuprobe.serve.grpc_server import split_host_port
from gpuprobe.serve.http_loop import (
    HttpServer,
    HttpServer6,
    Later,
    Limits,
    Request,
    Response,
    text,
)
from gpuprobe.threads import start_thread

# Answered from memory on the loop, and never refused for want of an answer's place: the
# liveness probe (/healthz) and the readiness probe where the kubelet cannot use gRPC's (/readyz).
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
# What socket(AF_INET6) and bind(("::", port)) fail with where the kernel has no IPv6.
NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL})


class _Server(HttpServer):
    """The metrics server on an IPv4 address."""


class _Server6(HttpServer6):
    """The metrics server on an IPv6 address (`[::]`: IPv4 too)."""


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
        """Forget the encoded report (a sink of the store: called after each update)."""
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
    """`/metrics`, `/healthz` and `/readyz` on HOST:PORT, served from a background thread."""

    def __init__(
        self,
        listen: str,
        page: MetricsPage,
        health: Callable[[], tuple[int, str]],
        ready: Callable[[], tuple[int, str]] | None = None,
        limits: Limits | None = None,
    ) -> None:
        host, port = split_host_port(listen)

        def route(request: Request) -> Response | Later:
            """Route /metrics, /healthz, /readyz and /."""
            if request.method not in ("GET", "HEAD"):
                return text(405, "use GET\n")
            if request.path == "/metrics":
                return Later(lambda: _metrics(page, request))
            if request.path == "/healthz":
                return text(*health())
            if request.path == "/readyz" and ready is not None:
                return text(*ready())
            if request.path == "/":
                return text(200, "gpuprobe agent: /metrics /healthz /readyz\n")
            return text(404, "not found: try /metrics or /healthz\n")

        server_class = _Server6 if ":" in host else _Server
        try:
            try:
                self._server = server_class(host, port, route, limits, PROBE_PATHS, "metrics")
            except OSError as exc:
                # `[::]` on a kernel without IPv6 (ipv6.disable=1): every IPv4 address instead.
                if host != "::" or exc.errno not in NO_IPV6:
                    raise
                self._server = _Server("0.0.0.0", port, route, limits, PROBE_PATHS, "metrics")
        except OSError as exc:
            raise UsageError(f"--metrics-listen {listen}: {exc.strerror or exc}") from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked)."""
        return self._server.port

    @property
    def server(self) -> HttpServer:
        """The bounded HTTP server (its limits and connection counts)."""
        return self._server

    def start(self) -> None:
        """Serve in the background; raises RuntimeError when the system refuses the thread."""
        self._thread = start_thread(self._server.serve_forever, "metrics-http")
        if self._thread is None:
            raise RuntimeError("cannot start the metrics server's thread")

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(5)
        self._server.close()


def _metrics(page: MetricsPage, request: Request) -> Response:
    """The page for a scrape (on the worker thread): its format by Accept, gzip if taken."""
    body, content_type = page.render(request.headers.get("accept"))
    headers: tuple[tuple[str, str], ...] = ()
    if gzip_accepted(request.headers.get("accept-encoding", "")):
        body = gzip.compress(body, compresslevel=1)  # cheap: scrapes are frequent
        headers = (("Content-Encoding", "gzip"),)
    return Response(200, content_type, body, headers)
