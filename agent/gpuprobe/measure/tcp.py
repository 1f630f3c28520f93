"""TCP bandwidth between two agents: a one-time sink and a sender, over plain sockets.

The receiving agent opens a `TcpSink`: a random port that accepts only the asking peer's
address, only with the sink's single-use token, only `streams` connections, and stops at its
byte and time bounds. The sending agent runs `send()`: N parallel streams, each sending for
`warmup + duration` seconds. The sink counts what arrives after the warm-up on each stream
and reports it back on that stream when the sender is done, so the figure is what was
received, as iperf3 reports it.

Wire format, per stream: the sender writes a 40-byte header (32-byte token, u32 warm-up in
milliseconds, u32 stream index), then data until it shuts its side down; the sink answers
with 24 bytes (u64 bytes received, u64 bytes received after the warm-up, f64 seconds of the
window after the warm-up) and closes.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import os
import secrets
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
RECV_BYTES = 4 * 1024 * 1024
SEND_BYTES = 8 * 1024 * 1024
HEADER_TIMEOUT = 5.0


class BandwidthError(Exception):
    """A bandwidth test that could not run or finish: refused, unreachable, or cut."""


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


class TcpSink:
    """A one-time, token-guarded, byte- and time-bounded receiver for one peer's streams."""

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
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._finished = 0
        self._connections: list[socket.socket] = []
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((bind_host, 0))
        self._listener.listen(streams + 4)
        self._listener.settimeout(0.2)  # the accept loop looks at its bounds this often
        self.port: int = self._listener.getsockname()[1]
        self._forget = cleanup.on_exit(self.close)
        self._thread = threading.Thread(target=self._serve, name="tcp-sink", daemon=True)
        self._thread.start()

    @property
    def token_hex(self) -> str:
        """The token as the peer will be told it."""
        return self.token.hex()

    def _serve(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        workers = []
        try:
            while not self._closed.is_set():
                with self._lock:
                    if self._finished >= self.streams:
                        break  # every stream came and went: the sink has done its job
                if time.monotonic() >= deadline:
                    self._stop("time bound")
                    break
                try:
                    conn, (address, *_) = self._listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                if _same_address(address, self.allowed_peer):
                    worker = threading.Thread(
                        target=self._stream, args=(conn, deadline), daemon=True
                    )
                    worker.start()
                    workers.append(worker)
                else:
                    self.stats.refuse("address")
                    conn.close()
        finally:
            self._listener.close()
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()) + 1)
        self.close()

    def _stream(self, conn: socket.socket, deadline: float) -> None:
        with conn:
            conn.settimeout(HEADER_TIMEOUT)
            try:
                header = _recv_exact(conn, HEADER.size)
            except (OSError, BandwidthError):
                self.stats.refuse("no header")
                return
            token, warmup_ms, _index = HEADER.unpack(header)
            with self._lock:
                if not hmac.compare_digest(token, self.token):
                    self.stats.refuse("token")
                    return
                if self.stats.accepted >= self.streams or self._closed.is_set():
                    self.stats.refuse("reused")
                    return
                self.stats.accepted += 1
                self._connections.append(conn)
            try:
                self._receive(conn, warmup_ms / 1000.0, deadline)
            finally:
                with self._lock:
                    self._finished += 1

    def _receive(self, conn: socket.socket, warmup: float, deadline: float) -> None:
        buffer = bytearray(RECV_BYTES)
        view = memoryview(buffer)
        total = window = 0
        started = time.monotonic()
        window_start = started + warmup
        window_end = window_start
        conn.settimeout(max(0.1, deadline - started))
        try:
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                now = time.monotonic()
                total += n
                if now >= window_start:
                    window += n
                    window_end = now
                if not self._count(n):
                    return  # over the byte bound: the stream is cut, no reply
            conn.sendall(REPLY.pack(total, window, max(0.0, window_end - window_start)))
        except OSError:
            return

    def _count(self, n: int) -> bool:
        with self._lock:
            self.stats.bytes_received += n
            if self.stats.bytes_received > self.max_bytes:
                self._stop("byte bound")
                return False
        return True

    def _stop(self, why: str) -> None:
        if self.stats.stopped is None:
            self.stats.stopped = why
        self._closed.set()
        for conn in list(self._connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting and cut every stream."""
        if not self._closed.is_set():
            self._stop("closed")
        with contextlib.suppress(OSError):
            self._listener.close()
        self._forget()

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


@contextlib.contextmanager
def _zeros() -> Iterator[io.BufferedReader]:
    fd = os.memfd_create("gpuprobe-tcp-payload")
    os.ftruncate(fd, SEND_BYTES)
    with os.fdopen(fd, "rb") as f:
        yield f


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

    Raises BandwidthError when the sink cannot be reached, refuses us, or cuts the test.
    """
    results: list[StreamResult | BaseException] = [BandwidthError("not run")] * streams
    end = time.monotonic() + warmup + duration

    def stream(index: int) -> None:
        try:
            results[index] = _send_stream(host, port, token, index, warmup, end, connect_timeout)
        except (OSError, BandwidthError) as exc:
            results[index] = exc

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(warmup + duration + connect_timeout + 15)
    errors = [r for r in results if not isinstance(r, StreamResult)]
    if errors:
        raise BandwidthError(f"{len(errors)} of {streams} streams failed: {errors[0]}")
    return BandwidthResult(
        tuple(r for r in results if isinstance(r, StreamResult)), duration, warmup
    )


def _send_stream(
    host: str, port: int, token: bytes, index: int, warmup: float, end: float, timeout: float
) -> StreamResult:
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise BandwidthError(f"cannot reach the sink at {host}:{port}: {exc}") from None
    with conn, _zeros() as zeros:
        try:
            conn.settimeout(max(timeout, end - time.monotonic() + timeout))
            conn.sendall(HEADER.pack(token, int(warmup * 1000), index))
            while time.monotonic() < end:
                # sendfile from a memory file of zeros: the kernel sends its pages with no
                # copy through user space, so the sender's CPU goes to the network.
                conn.sendfile(zeros, 0, SEND_BYTES)
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(timeout + 10)
            reply = _recv_exact(conn, REPLY.size)
        except (OSError, BandwidthError) as exc:
            raise BandwidthError(
                f"the sink cut the stream (refused, or past its bounds): {exc}"
            ) from None
    total, window, seconds = REPLY.unpack(reply)
    return StreamResult(total, window, seconds)
