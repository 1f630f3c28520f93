"""The HTTP side of the agent: Prometheus `/metrics`, `/healthz` for the liveness probe and
humans, `/readyz` for a readiness probe where the kubelet cannot use gRPC's (TLS).

A WSGI server from the standard library, one thread per connection, bounded: at most
`MAX_CONNECTIONS` connections at once and `MAX_CONNECTIONS_PER_PEER` from one address (beyond
them a connection is answered 503 and closed at once), a request head must arrive whole within
`HEADER_TIMEOUT_SECONDS` (a slow or idle client is dropped), and the answer must be taken within
`WRITE_TIMEOUT_SECONDS`. So idle connections cost a bounded number of threads for seconds, not
a thread each for ever, and a system that refuses a thread costs one connection. `/metrics`
serves the report's families as rendered once per report update and exposition format (a
scrape only copies bytes), plus the process_* families read from /proc/self; `/healthz`
answers from memory too. Errors are logged as JSON lines, never as a bare traceback.
"""

from __future__ import annotations

import errno
import gzip
import io
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from gpuprobe.errors import UsageError
from gpuprobe.serve.grpc_server import split_host_port
from gpuprobe.serve.logs import Throttle
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")

StartResponse = Callable[..., Any]

# Connections served at once, and from one peer address. A scrape is one connection every
# few seconds; the kubelet's probe one more.
MAX_CONNECTIONS = 64
MAX_CONNECTIONS_PER_PEER = 16
# A request head (GET /metrics and a few headers) arrives in one packet: allow a slow network
# this long for all of it, and this many bytes.
HEADER_TIMEOUT_SECONDS = 5.0
MAX_HEAD_BYTES = 16 * 1024
# A scraper must take the answer (gzip-compressed, tens of kB) within this.
WRITE_TIMEOUT_SECONDS = 10.0
REFUSAL_BODY = b"too many connections, retry"
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(REFUSAL_BODY), REFUSAL_BODY)
)


# What socket(AF_INET6) and bind(("::", port)) fail with where the kernel has no IPv6.
NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL})


class _Server(WSGIServer):
    allow_reuse_address = True
    # Many scrapers and curls at once must queue, not see their SYN dropped (the default
    # backlog of 5 costs a dropped client a 1 s retransmit).
    request_queue_size = 128
    max_connections = MAX_CONNECTIONS
    max_per_peer = MAX_CONNECTIONS_PER_PEER

    def server_activate(self) -> None:
        """Listen, with the connection counts kept from now on."""
        self._counts_lock = threading.Lock()
        self._open: Counter[str] = Counter()
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own, if the bounds (and the system)
        allow one; else answer 503 and close it."""
        peer = str(client_address[0])
        with self._counts_lock:
            admitted = (
                self._open.total() < self.max_connections and self._open[peer] < self.max_per_peer
            )
            if admitted:
                self._open[peer] += 1
        if not admitted:
            log_refusal(peer, "too many connections")
        elif start_thread(self._serve_one, "metrics-http", (request, client_address)) is None:
            self._release(peer)
            admitted = False
        if not admitted:
            _refuse(request)
            self.shutdown_request(request)

    def open_connections(self) -> int:
        """Connections being served now."""
        with self._counts_lock:
            return self._open.total()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._release(str(client_address[0]))

    def _release(self, peer: str) -> None:
        with self._counts_lock:
            self._open[peer] -= 1
            if self._open[peer] <= 0:
                del self._open[peer]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed connection, as one JSON log line (socketserver prints a traceback)."""
        log.exception("metrics connection failed", extra={"peer": str(client_address[0])})


class _Server6(_Server):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        """`[::]` takes IPv4 too (dual-stack: IPV6_V6ONLY off, whatever the system default
        net.ipv6.bindv6only says), as gRPC's own wildcard listener does."""
        if self.server_address[0] == "::":
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def _refuse(request: socket.socket) -> None:
    try:
        request.setblocking(False)  # never wait on a client that does not read
        request.send(REFUSAL)
    except OSError:
        pass


class _LoggingServerHandler(ServerHandler):
    def log_exception(self, exc_info: Any) -> None:
        """An application error (a page that failed to render), as one JSON log line."""
        log.error("metrics request failed", exc_info=exc_info)


class _Handler(WSGIRequestHandler):
    timeout = WRITE_TIMEOUT_SECONDS  # set on the socket by StreamRequestHandler.setup

    def handle(self) -> None:
        """One request: its head read within the header timeout, then the WSGI app."""
        head = read_head(self.connection, HEADER_TIMEOUT_SECONDS, MAX_HEAD_BYTES)
        if head is None:
            return  # slow, idle, oversized or gone: nothing to answer
        self.connection.settimeout(WRITE_TIMEOUT_SECONDS)
        self.rfile = io.BytesIO(head)
        self.raw_requestline = self.rfile.readline(MAX_HEAD_BYTES + 1)
        if not self.parse_request():  # an error has been sent
            return
        handler = _LoggingServerHandler(
            self.rfile,
            self.wfile,  # type: ignore[arg-type]  # a socket writer, as wsgiref's own handle
            self.get_stderr(),
            self.get_environ(),
            multithread=True,
        )
        handler.request_handler = self  # type: ignore[attr-defined]
        handler.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


def read_head(sock: socket.socket, timeout: float, max_bytes: int) -> bytes | None:
    """An HTTP request head (request line and headers) read from `sock` within `timeout`
    seconds in all; None when it did not come whole in time, or ran past `max_bytes`."""
    deadline = time.monotonic() + timeout
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or len(head) > max_bytes:
            return None
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(4096)
        except OSError:  # TimeoutError included
            return None
        if not chunk:
            return head or None
        head += chunk
    return head


_refusals = Throttle()


def log_refusal(peer: str, reason: str) -> None:
    """Log a refused connection, at most once a minute per peer address."""
    held = _refusals.allow(peer)
    if held is not None:
        log.warning("connection refused", extra={"peer": peer, "reason": reason, "held_back": held})


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
    """`/metrics`, `/healthz` and `/readyz` on HOST:PORT, served from a background thread."""

    def __init__(
        self,
        listen: str,
        page: MetricsPage,
        health: Callable[[], tuple[int, str]],
        ready: Callable[[], tuple[int, str]] | None = None,
    ) -> None:
        host, port = split_host_port(listen)

        def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            """Route /metrics, /healthz, /readyz and /."""
            path = environ.get("PATH_INFO", "")
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _text(start_response, 405, "use GET\n")
            if path == "/metrics":
                return _metrics(page, environ, start_response)
            if path == "/healthz":
                code, text = health()
                return _text(start_response, code, text)
            if path == "/readyz" and ready is not None:
                code, text = ready()
                return _text(start_response, code, text)
            if path == "/":
                return _text(start_response, 200, "gpuprobe agent: /metrics /healthz /readyz\n")
            return _text(start_response, 404, "not found: try /metrics or /healthz\n")

        server_class = _Server6 if ":" in host else _Server
        try:
            try:
                self._server = make_server(
                    host or "0.0.0.0", port, app, server_class, handler_class=_Handler
                )
            except OSError as exc:
                # `[::]` on a kernel without IPv6 (ipv6.disable=1): every IPv4 address instead.
                if host != "::" or exc.errno not in NO_IPV6:
                    raise
                self._server = make_server("0.0.0.0", port, app, _Server, handler_class=_Handler)
        except OSError as exc:
            raise UsageError(f"--metrics-listen {listen}: {exc.strerror or exc}") from None

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked)."""
        return int(self._server.server_address[1])

    @property
    def server(self) -> _Server:
        """The bounded HTTP server (its connection counts)."""
        return self._server

    def start(self) -> None:
        """Serve in the background; raises RuntimeError when the system refuses the thread."""
        if start_thread(self._server.serve_forever, "metrics-http-accept") is None:
            raise RuntimeError("cannot start the metrics server's thread")

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
