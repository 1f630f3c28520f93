"""TCP bandwidth between two agents: a one-time sink and a sender, over plain sockets.

The receiving agent opens a `TcpSink`: a random port that accepts only the asking peer's
address, only with the sink's single-use token, only `streams` connections, and stops at its
byte and time bounds. The sending agent runs `send()`: N parallel streams, each sending for
`warmup + duration` seconds. The sink counts what arrives after the warm-up on each stream
and reports it back on that stream when the sender is done, so the figure is what was
received, as iperf3 reports it.

Wire format, per stream: the sender writes a 40-byte header (32-byte token, u32 warm-up in
milliseconds, u32 stream index); a sink that takes the stream proves it holds the token with
32 bytes (`proof()`: HMAC-SHA256 of the header under the token), and only then does the
sender send data, until it shuts its side down; the sink answers with 24 bytes (u64 bytes
received, u64 bytes received after the warm-up, f64 seconds of the window after the warm-up)
and closes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuprobe import cleanup

HEADER = struct.Struct("!32sII")
REPLY = struct.Struct("!QQd")
RECV_BYTES = 256 * 1024
SEND_BYTES = 8 * 1024 * 1024
HEADER_TIMEOUT = 5.0


class BandwidthError(Exception):
    """A bandwidth test that could not run or finish: refused, unreachable, or cut."""


class NotASink(BandwidthError):
    """Nothing at the address proved to be the sink (closed, silent, another service, or a
    sink that refused the token): no data was sent there."""


def proof(token: bytes, header: bytes) -> bytes:
    """What a sink answers a stream's header with: proof that it holds the token."""
    return hmac.new(token, b"gpuprobe-sink\0" + header, hashlib.sha256).digest()


@dataclass(frozen=True)
class StreamResult:
    """One stream's share: bytes received after the warm-up, over that window."""

    bytes_received: int
    window_bytes: int
    window_seconds: float

    @property
    def bytes_per_second(self) -> float:
        """The stream's received rate after the warm-up."""
        return self.window_bytes / self.window_seconds if self.window_seconds > 0 else 0.0


@dataclass(frozen=True)
class BandwidthResult:
    """A finished test: the total received rate and each stream's."""

    streams: tuple[StreamResult, ...]
    duration_seconds: float
    warmup_seconds: float

    @property
    def bytes_per_second(self) -> float:
        """The sum of the streams' rates (they ran side by side)."""
        return sum(s.bytes_per_second for s in self.streams)

    def to_dict(self) -> dict[str, Any]:
        """The result as report data."""
        return {
            "bytes_per_second": self.bytes_per_second,
            "streams": [
                {"bytes_per_second": s.bytes_per_second, "bytes": s.bytes_received}
                for s in self.streams
            ],
            "duration_seconds": self.duration_seconds,
            "warmup_seconds": self.warmup_seconds,
        }


@dataclass
class SinkStats:
    """What a sink saw: accepted streams, refused connections, bytes, why it stopped."""

    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    bytes_received: int = 0
    stopped: str | None = None

    def refuse(self, why: str) -> None:
        """Count a refused connection."""
        self.refused[why] = self.refused.get(why, 0) + 1


@dataclass
class _Stream:
    """One connection at the sink: its header so far, then what it received."""

    conn: socket.socket
    opened: float
    header: bytes = b""
    accepted: bool = False
    window_start: float = 0.0
    window_end: float = 0.0
    total: int = 0
    window: int = 0


class TcpSink:
    """A one-time, token-guarded, byte- and time-bounded receiver for one peer's streams.

    One thread serves the listener and every stream through a selector, as iperf3 does: on a
    busy node, threads per stream would compete for the cores the transfer needs.
    """

    def __init__(
        self,
        bind_host: str,
        allowed_peer: str,
        streams: int,
        max_bytes: int,
        max_seconds: float,
    ) -> None:
        self.token = secrets.token_bytes(32)
        self.allowed_peer = allowed_peer
        self.streams = streams
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.stats = SinkStats()
        self._closed = threading.Event()
        self._finished = 0
        self._buffer = memoryview(bytearray(RECV_BYTES))
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((bind_host, 0))
        self._listener.listen(streams + 4)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._forget = cleanup.on_exit(self.close)
        self._thread = threading.Thread(target=self._serve, name="tcp-sink", daemon=True)
        self._thread.start()

    @property
    def token_hex(self) -> str:
        """The token as the peer will be told it."""
        return self.token.hex()

    def _serve(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self._closed.is_set() and self._finished < self.streams:
                now = time.monotonic()
                if now >= deadline:
                    self._stop("time bound")
                    break
                for key, _ in self._selector.select(min(0.2, deadline - now)):
                    if key.data is None:
                        self._accept()
                    else:
                        self._readable(key.data)
                self._expire_headers()
        except (OSError, ValueError):  # closed under the loop by close()
            pass
        finally:
            self._close_all()

    def _accept(self) -> None:
        while True:
            try:
                conn, (address, *_) = self._listener.accept()
            except BlockingIOError:
                return
            if not _same_address(address, self.allowed_peer):
                self.stats.refuse("address")
                conn.close()
                continue
            conn.setblocking(False)
            self._selector.register(conn, selectors.EVENT_READ, _Stream(conn, time.monotonic()))

    def _readable(self, stream: _Stream) -> None:
        if not stream.accepted:
            self._read_header(stream)
            return
        try:
            n = stream.conn.recv_into(self._buffer)
        except BlockingIOError:
            return
        except OSError:
            self._drop(stream)
            return
        if n == 0:
            self._reply(stream)
            return
        now = time.monotonic()
        stream.total += n
        if now >= stream.window_start:
            stream.window += n
            stream.window_end = now
        self.stats.bytes_received += n
        if self.stats.bytes_received > self.max_bytes:
            self._stop("byte bound")  # the streams are cut, with no reply

    def _read_header(self, stream: _Stream) -> None:
        try:
            data = stream.conn.recv(HEADER.size - len(stream.header))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.stats.refuse("no header")
            self._drop(stream)
            return
        stream.header += data
        if len(stream.header) < HEADER.size:
            return
        token, warmup_ms, _index = HEADER.unpack(stream.header)
        if not hmac.compare_digest(token, self.token):
            self.stats.refuse("token")
            self._drop(stream)
        elif self.stats.accepted >= self.streams:
            self.stats.refuse("reused")
            self._drop(stream)
        else:
            self.stats.accepted += 1
            stream.accepted = True
            with contextlib.suppress(OSError):  # 32 bytes into an empty send buffer
                stream.conn.send(proof(self.token, stream.header))
            stream.window_start = stream.window_end = time.monotonic() + warmup_ms / 1000.0

    def _expire_headers(self) -> None:
        now = time.monotonic()
        for key in list(self._selector.get_map().values()):
            stream = key.data
            if stream is not None and not stream.accepted and now - stream.opened > HEADER_TIMEOUT:
                self.stats.refuse("no header")
                self._drop(stream)

    def _reply(self, stream: _Stream) -> None:
        self._selector.unregister(stream.conn)
        seconds = max(0.0, stream.window_end - stream.window_start)
        with contextlib.suppress(OSError):
            stream.conn.setblocking(True)
            stream.conn.settimeout(HEADER_TIMEOUT)
            stream.conn.sendall(REPLY.pack(stream.total, stream.window, seconds))
        stream.conn.close()
        self._finished += 1

    def _drop(self, stream: _Stream) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(stream.conn)
        stream.conn.close()

    def _stop(self, why: str) -> None:
        if self.stats.stopped is None:
            self.stats.stopped = why
        self._closed.set()

    def _close_all(self) -> None:
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self._closed.set()
        self._forget()

    def close(self) -> None:
        """Stop accepting and cut every stream (the serving thread closes them)."""
        self._stop("closed")
        if threading.current_thread() is not self._thread:
            self._thread.join(2)

    def wait(self, timeout: float) -> bool:
        """Wait until the sink has finished; True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _same_address(address: str, allowed: str) -> bool:
    return address.removeprefix("::ffff:") == allowed.removeprefix("::ffff:")


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise BandwidthError("connection closed early")
        data += chunk
    return bytes(data)


def send(
    host: str,
    port: int,
    token: bytes,
    streams: int = 4,
    duration: float = 10.0,
    warmup: float = 1.0,
    connect_timeout: float = 5.0,
) -> BandwidthResult:
    """Send to a sink over `streams` parallel connections; the rate the sink received.

    One thread drives every stream through a selector, as iperf3 does. No data goes out on a
    stream before the sink proved it holds `token`. Raises NotASink when nothing at
    `host`:`port` proves to be the sink (within `connect_timeout` to connect and as long to
    prove), BandwidthError when the sink refuses us or cuts the test.
    """
    conns: list[socket.socket] = []
    try:
        for index in range(streams):
            header = HEADER.pack(token, int(warmup * 1000), index)
            try:
                conn = socket.create_connection((host, port), timeout=connect_timeout)
            except OSError:
                raise NotASink(f"nothing proved to be the sink at {host}:{port}") from None
            conns.append(conn)
            try:
                conn.sendall(header)
                answer = _recv_exact(conn, 32)
            except (OSError, BandwidthError):
                answer = b""
            if not hmac.compare_digest(answer, proof(token, header)):
                raise NotASink(f"nothing proved to be the sink at {host}:{port}")
        with _zeros() as zeros:
            _pump(conns, zeros.fileno(), time.monotonic() + warmup + duration)
        results = []
        for conn in conns:
            conn.shutdown(socket.SHUT_WR)
            conn.setblocking(True)
            conn.settimeout(connect_timeout + 10)
            total, window, seconds = REPLY.unpack(_recv_exact(conn, REPLY.size))
            results.append(StreamResult(total, window, seconds))
    except (OSError, BandwidthError) as exc:
        if isinstance(exc, NotASink):
            raise
        raise BandwidthError(
            f"the sink cut the test (refused, or past its bounds): {exc}"
        ) from None
    finally:
        for conn in conns:
            conn.close()
    return BandwidthResult(tuple(results), duration, warmup)


def _pump(conns: list[socket.socket], zeros: int, end: float) -> None:
    """Send from the memory file of zeros on every stream until `end`.

    `sendfile` hands the file's pages to the socket without a copy through user space, so the
    sender's CPU goes to the network. A stream the sink stopped reading fails the test.
    """
    with selectors.DefaultSelector() as selector:
        for conn in conns:
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_WRITE)
        while (now := time.monotonic()) < end:
            ready = selector.select(min(1.0, end - now))
            if not ready and time.monotonic() < end:
                continue
            for key, _ in ready:
                with contextlib.suppress(BlockingIOError):
                    os.sendfile(key.fd, zeros, 0, SEND_BYTES)


@contextlib.contextmanager
def _zeros() -> Iterator[io.BufferedReader]:
    fd = os.memfd_create("gpuprobe-tcp-payload")
    os.ftruncate(fd, SEND_BYTES)
    with os.fdopen(fd, "rb") as f:
        yield f
