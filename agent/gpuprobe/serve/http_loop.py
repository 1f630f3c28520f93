"""A bounded HTTP/1.1 server on one asyncio event loop, for the agent's `/metrics` port.

Every connection is a protocol object on one thread's event loop, so an idle or slow one
costs a few kilobytes and a timer, not a thread: thousands are held cheaply. The bounds:

- a request head must arrive whole within `Limits.head_timeout` seconds of the connection
  (or of the previous answer), and a body within `Limits.body_timeout` after its head, each a
  deadline for the whole read (a byte now and then, slowloris, extends nothing);
- at most `Limits.max_per_peer` connections from one address, and `max_connections` in all
  (`Limits.max_connections`, or what the open-file limit leaves): past either, the connection
  that has waited longest for its request (of that address, or of all) is closed to make room
  if it has waited `Limits.evict_after` seconds, so a newcomer (the kubelet's probe, a scrape)
  is served and a crowd of idle connections only evicts itself; a 503 only when every
  connection in the way is being answered or was opened within that second;
- at most `Limits.max_answering` answers in flight (rendered, not yet taken by the client),
  and at most `Limits.max_answering_per_peer` of one address, so one address's connections
  that pipeline requests and never read the answers hold a few places, not all of them; past
  either a request is answered 503 and its connection closed, except the paths the server was
  told never to refuse (`/healthz`, `/readyz`: small answers from memory);
- one answer at a time per connection (the next pipelined request is read once the answer
  was taken), and at most `Limits.max_pipelined` requests waiting behind it: past that the
  connection is closed after its answer;
- an answer must be taken within `Limits.write_timeout`.

Slow pages run on one worker thread (`Later`), so rendering never holds the loop. A route that
fails is a 500 and one JSON log line, never a traceback on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import resource
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpuprobe.serve.logs import Throttle
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")

# Open files the agent keeps for its own use (gRPC, snapshots, check subprocesses) beside the
# HTTP connections, when the open-file limit bounds the connections.
OWN_FILES = 256
LISTEN_BACKLOG = 1024  # a burst of connections queues rather than having its SYNs dropped
REFUSAL_BODY = b"too many connections, retry"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Limits:
    """What one HTTP server admits; see the module's docstring."""

    max_connections: int = 4096
    max_per_peer: int = 256
    # A connection waiting less than this is never evicted (a scraper's fresh connection
    # whose request is on its way): past the bounds with only such, the newcomer gets 503.
    evict_after: float = 1.0
    max_answering: int = 256
    max_answering_per_peer: int = 16
    max_pipelined: int = 16
    head_timeout: float = 5.0
    body_timeout: float = 5.0
    write_timeout: float = 10.0
    max_head_bytes: int = 16 * 1024
    max_body_bytes: int = 64 * 1024


@dataclass(frozen=True)
class Request:
    """One parsed request: the method, the path (query cut off), the headers (names in lower
    case) and the peer's address."""

    method: str
    path: str
    version: str
    headers: dict[str, str]
    peer: str
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    """One answer: status, content type, body and any further headers."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Later:
    """An answer to compute on the worker thread (a page that takes a while to render)."""

    work: Callable[[], Response] = field(repr=False)


Route = Callable[[Request], Response | Later]


def text(status: int, body: str) -> Response:
    """A plain-text answer."""
    return Response(status, "text/plain; charset=utf-8", body.encode())


class _State(Enum):
    HEAD = "head"  # waiting for (the rest of) a request head
    BODY = "body"  # waiting for the rest of a request body
    ANSWERING = "answering"  # the answer is being computed or taken by the client


class HttpServer:
    """The bounded server: bind it (raises OSError), `serve_forever()` on a thread of its own,
    `shutdown()` from any other. IPv4; `HttpServer6` for IPv6."""

    address_family = socket.AF_INET

    def __init__(
        self,
        host: str,
        port: int,
        route: Route,
        limits: Limits | None = None,
        never_refused: frozenset[str] = frozenset(),
        name: str = "http",
    ) -> None:
        self.socket = self._listen(host or "0.0.0.0", port)
        self.route = route
        self.limits = limits or Limits()
        self.never_refused = never_refused
        self.name = name
        self.max_connections = min(self.limits.max_connections, _file_room())
        self._per_peer: Counter[str] = Counter()
        self._open: set[_Connection] = set()
        # Connections not being answered, the one waiting longest first: the eviction order.
        self._waiting: OrderedDict[_Connection, None] = OrderedDict()
        self._waiting_by_peer: dict[str, OrderedDict[_Connection, None]] = {}
        self._answering = 0
        self._answering_by_peer: Counter[str] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._worker = _Worker(f"{name}-render")
        self.evicted = 0
        self.refused = 0

    def _listen(self, host: str, port: int) -> socket.socket:
        sock = socket.socket(self.address_family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.address_family == socket.AF_INET6 and host == "::":
                # `[::]` takes IPv4 too (dual-stack: IPV6_V6ONLY off, whatever the system
                # default net.ipv6.bindv6only says), as gRPC's own wildcard listener does.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((host, port))
            sock.listen(LISTEN_BACKLOG)
        except OSError:
            sock.close()
            raise
        return sock

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self.socket.getsockname()[1])

    @property
    def server_address(self) -> tuple[str, int]:
        """The bound address and port."""
        host, port = self.socket.getsockname()[:2]
        return str(host), int(port)

    def open_connections(self) -> int:
        """Connections held now (read from any thread)."""
        return len(self._open)

    def serve_forever(self) -> None:
        """Run the event loop until `shutdown()`: the thread's whole life."""
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_log_loop_error)
        self._loop = loop
        try:
            server = loop.run_until_complete(
                loop.create_server(
                    lambda: _Connection(self), sock=self.socket, backlog=LISTEN_BACKLOG
                )
            )
            self._ready.set()
            if not self._stopped.is_set():
                loop.run_forever()
            server.close()
            for conn in list(self._open):
                conn.transport_abort()
            loop.run_until_complete(asyncio.sleep(0))  # the connection_lost callbacks
        finally:
            self._ready.set()
            self._worker.stop()
            loop.close()

    def shutdown(self) -> None:
        """Stop serving (from another thread): close every connection and the socket."""
        self._stopped.set()
        loop = self._loop
        if loop is not None and self._ready.wait(5):
            with contextlib.suppress(RuntimeError):  # already closed
                loop.call_soon_threadsafe(loop.stop)

    def close(self) -> None:
        """Close the listening socket (after `shutdown()`, or when never served)."""
        self.socket.close()

    server_close = close  # as socketserver names it

    # The loop's side: called by the connections, on the loop's thread only.

    def admit(self, conn: _Connection) -> bool:
        """Count a new connection in, making room when its address, or the server, holds all
        it may: the longest-waiting connection of the address, or of all, is closed for it.
        False (and a 503) when every connection in the way is being answered."""
        if self._per_peer[conn.peer] >= self.limits.max_per_peer:
            victim = self._evictable(self._waiting_by_peer.get(conn.peer))
            if victim is None:
                self._refuse(conn, "too many connections from this address")
                return False
            self._evict(victim, "the longest waiting of its address")
        if len(self._open) >= self.max_connections:
            victim = self._evictable(self._waiting)
            if victim is None:  # every place answering, or just opened: none to give up
                self._refuse(conn, "too many connections")
                return False
            self._evict(victim, "the longest waiting when all places were taken")
        self._per_peer[conn.peer] += 1
        self._open.add(conn)
        self._wait(conn)
        return True

    def _evictable(self, waiting: OrderedDict[_Connection, None] | None) -> _Connection | None:
        """The longest-waiting connection of `waiting`, if it has waited long enough."""
        first = next(iter(waiting), None) if waiting else None
        if first is None or time.monotonic() - first.waiting_since < self.limits.evict_after:
            return None
        return first

    def _evict(self, victim: _Connection, why: str) -> None:
        self.evicted += 1
        log_refusal(victim.peer, f"evicted: {why}")
        self.release(victim)
        victim.transport_abort()

    def _wait(self, conn: _Connection) -> None:
        conn.waiting_since = time.monotonic()
        self._waiting[conn] = None
        self._waiting_by_peer.setdefault(conn.peer, OrderedDict())[conn] = None

    def _unwait(self, conn: _Connection) -> None:
        self._waiting.pop(conn, None)
        own = self._waiting_by_peer.get(conn.peer)
        if own is not None:
            own.pop(conn, None)
            if not own:
                del self._waiting_by_peer[conn.peer]

    def _refuse(self, conn: _Connection, reason: str) -> None:
        self.refused += 1
        log_refusal(conn.peer, reason)
        conn.refuse(REFUSAL_BODY)

    def release(self, conn: _Connection) -> None:
        """Count a connection out (idempotent: eviction releases before the loss is seen)."""
        if conn not in self._open:
            return
        self._open.discard(conn)
        self._unwait(conn)
        self._count_out(conn)
        self._per_peer[conn.peer] -= 1
        if self._per_peer[conn.peer] <= 0:
            del self._per_peer[conn.peer]

    def start_answering(self, conn: _Connection, request: Request) -> bool:
        """Take a place among the answers in flight; False when none is left for the path:
        all of the server's are taken, or all its address may hold."""
        self._unwait(conn)
        if request.path not in self.never_refused and (
            self._answering >= self.limits.max_answering
            or self._answering_by_peer[conn.peer] >= self.limits.max_answering_per_peer
        ):
            return False
        self._answering += 1
        self._answering_by_peer[conn.peer] += 1
        conn.counted_answering = True
        return True

    def answering_of(self, peer: str) -> int:
        """Answers in flight to one address (read from any thread)."""
        return self._answering_by_peer.get(peer, 0)

    def done_answering(self, conn: _Connection) -> None:
        """The answer was taken: the connection waits for its next request (newest in line)."""
        self._count_out(conn)
        if conn in self._open:
            self._wait(conn)

    def _count_out(self, conn: _Connection) -> None:
        """Give up the connection's place among the answers in flight, if it holds one."""
        if not conn.counted_answering:
            return
        conn.counted_answering = False
        self._answering -= 1
        self._answering_by_peer[conn.peer] -= 1
        if self._answering_by_peer[conn.peer] <= 0:
            del self._answering_by_peer[conn.peer]

    def answer(self, request: Request, respond: Callable[[Response], None]) -> None:
        """Route `request` and hand its answer to `respond` (at once, or from the worker)."""
        try:
            found = self.route(request)
        except Exception:
            log.exception(f"{self.name} request failed", extra={"path": request.path})
            found = text(500, "internal error\n")
        if isinstance(found, Response):
            respond(found)
            return
        assert self._loop is not None
        self._worker.submit(self._loop, self._guarded(found.work, request.path), respond)

    def _guarded(self, work: Callable[[], Response], path: str) -> Callable[[], Response]:
        def run() -> Response:
            try:
                return work()
            except Exception:
                log.exception(f"{self.name} request failed", extra={"path": path})
                return text(500, "internal error\n")

        return run


class HttpServer6(HttpServer):
    """The bounded server on an IPv6 address (`::` takes IPv4 too)."""

    address_family = socket.AF_INET6


class _Connection(asyncio.Protocol):
    """One client connection: reads requests under their deadlines, answers them in turn."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.buffer = bytearray()
        self.state = _State.HEAD
        self.timer: asyncio.TimerHandle | None = None
        self.request: Request | None = None
        self.need = 0  # bytes of head and body of the request being read
        self.counted_answering = False
        self.waiting_since = 0.0  # when it began waiting for its request
        self.write_paused = False
        self.keep_alive = False

    # asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Admit the connection (or refuse it) and start the head's deadline."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if peername else "?"
        # high=0: told (pause_writing/resume_writing) whenever an answer is not yet all taken.
        transport.set_write_buffer_limits(high=0)
        if self.server.admit(self):
            self._deadline(self.server.limits.head_timeout)

    def data_received(self, data: bytes) -> None:
        """More of a request (or, while answering, of the next one: kept, bounded)."""
        self.buffer += data
        limits = self.server.limits
        if len(self.buffer) > limits.max_head_bytes + limits.max_body_bytes:
            self.transport_abort()  # pipelining without reading the answers
            return
        if self.state is not _State.ANSWERING:
            self._advance()

    def eof_received(self) -> bool | None:
        """The client is done sending: close once any answer is out."""
        if self.state is not _State.ANSWERING:
            self._close()
        else:
            self.keep_alive = False
        return True

    def pause_writing(self) -> None:
        """The answer is not all taken yet."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The client took all of the answer."""
        self.write_paused = False
        if self.state is _State.ANSWERING and self.request is None:
            self._answered()

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone (closed, reset, evicted): count it out."""
        self._cancel()
        self.server.release(self)

    # reading

    def _advance(self) -> None:
        limits = self.server.limits
        if self.state is _State.HEAD:
            end = _head_end(self.buffer)
            if end < 0:
                if len(self.buffer) > limits.max_head_bytes:
                    self._fail(431, "request head too large\n")
                return
            request, length, error = _parse_head(bytes(self.buffer[:end]), self.peer)
            if error is not None or request is None:
                self._fail(*(error or (400, "bad request\n")))
                return
            if length > limits.max_body_bytes:
                self._fail(413, "request body too large\n")
                return
            self.request, self.need = request, end + length
            if length:
                self.state = _State.BODY
                self._deadline(limits.body_timeout)
        if len(self.buffer) < self.need:
            return
        assert self.request is not None
        head_end = self.need - int(self.request.headers.get("content-length", "0") or 0)
        request = Request(
            self.request.method,
            self.request.path,
            self.request.version,
            self.request.headers,
            self.peer,
            bytes(self.buffer[head_end : self.need]),
        )
        del self.buffer[: self.need]
        self.request, self.need = None, 0
        self._answer(request)

    # answering

    def _answer(self, request: Request) -> None:
        self._cancel()
        self.state = _State.ANSWERING
        assert self.transport is not None
        self.transport.pause_reading()
        self.keep_alive = _keep_alive(request)
        if _waiting_requests(self.buffer) > self.server.limits.max_pipelined:
            self.keep_alive = False  # this one is answered; the pile behind it is not
        if not self.server.start_answering(self, request):
            self.keep_alive = False
            self._respond(Response(503, "text/plain", REFUSAL_BODY), request.method)
            return
        self.server.answer(request, lambda r: self._respond(r, request.method))

    def _respond(self, response: Response, method: str) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.server.done_answering(self)
            return
        body = response.body
        lines = [
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Error')}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(body)}",
            *(f"{name}: {value}" for name, value in response.headers),
        ]
        if not self.keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        transport.write(head if method == "HEAD" else head + body)
        if self.write_paused:  # the client has not taken it all: it must, within the deadline
            self._deadline(self.server.limits.write_timeout)
        else:
            self._answered()

    def _answered(self) -> None:
        self._cancel()
        self.server.done_answering(self)
        if not self.keep_alive:
            self._close()
            return
        self.state = _State.HEAD
        self._deadline(self.server.limits.head_timeout)
        assert self.transport is not None
        self.transport.resume_reading()
        if self.buffer:  # a pipelined request came meanwhile
            self._advance()

    # ending

    def refuse(self, body: bytes) -> None:
        """Answer 503 and close, without waiting on the client."""
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        self._cancel()
        self.state = _State.ANSWERING
        self.keep_alive = False
        assert self.transport is not None
        self.transport.pause_reading()
        self._respond(text(status, message), "GET")

    def _deadline(self, seconds: float) -> None:
        self._cancel()
        assert self.transport is not None
        self.timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _expired(self) -> None:
        self.timer = None
        self.transport_abort()  # slow, idle or not reading: nothing more to say to it

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _close(self) -> None:
        self._cancel()
        if self.transport is not None:
            self.transport.close()

    def transport_abort(self) -> None:
        """Drop the connection now (a reset; what is unsent is dropped)."""
        self._cancel()
        if self.transport is not None:
            self.transport.abort()


class _Worker:
    """One thread for the pages that take a while (`Later`), started on first use; when the
    system refuses it, the page is computed on the loop instead (slower, still served)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, Callable[[], Response], Callable[[Response], None]]
            | None
        ] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(
        self,
        loop: asyncio.AbstractEventLoop,
        work: Callable[[], Response],
        done: Callable[[Response], None],
    ) -> None:
        """Compute `work()` on the worker and call `done` with it on `loop`."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = start_thread(self._run, self.name)
        if self._thread is None:
            done(work())
            return
        self._jobs.put((loop, work, done))

    def stop(self) -> None:
        """End the worker after the jobs queued."""
        if self._thread is not None:
            self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, work, done = job
            result = work()
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(done, result)


def _head_end(buffer: bytearray) -> int:
    """Where the head ends (past its blank line), or -1."""
    crlf = buffer.find(b"\r\n\r\n")
    lf = buffer.find(b"\n\n")
    ends = [i + n for i, n in ((crlf, 4), (lf, 2)) if i >= 0]
    return min(ends) if ends else -1


def _waiting_requests(buffer: bytearray) -> int:
    """How many whole request heads wait in `buffer` (pipelined behind the one answered)."""
    return buffer.count(b"\r\n\r\n") or buffer.count(b"\n\n")


def _parse_head(head: bytes, peer: str) -> tuple[Request | None, int, tuple[int, str] | None]:
    """The request, its body's length, or the error to answer."""
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None, 0, (400, "bad request line\n")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None, 0, (400, "bad header line\n")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        return None, 0, (501, "chunked request bodies are not taken\n")
    length_text = headers.get("content-length", "0") or "0"
    if not length_text.isdigit():
        return None, 0, (400, "bad content-length\n")
    headers["content-length"] = length_text
    request = Request(method, target.split("?", 1)[0], version, headers, peer)
    return request, int(length_text), None


def _keep_alive(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.version == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


def _file_room() -> int:
    """Connections the open-file limit leaves room for beside the agent's own files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(64, soft - OWN_FILES)


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's own errors (an accept that failed for lack of files, a callback's bug), as
    one JSON log line."""
    exc = context.get("exception")
    log.error(
        "http loop error",
        extra={"error": str(context.get("message", ""))},
        exc_info=(type(exc), exc, exc.__traceback__) if isinstance(exc, BaseException) else None,
    )


_refusals = Throttle()


def log_refusal(peer: str, reason: str) -> None:
    """Log a refused or evicted connection, at most once a minute per peer address."""
    held = _refusals.allow(peer)
    if held is not None:
        log.warning("connection refused", extra={"peer": peer, "reason": reason, "held_back": held})
