"""TCP bandwidth between two agents: a one-time sink and a sender, over plain sockets.

The receiving agent opens a `TcpSink`: a random port that accepts only the asking peer's
address, only with the sink's single-use token, only `streams` connections, and stops at its
byte and time bounds. The sending agent runs `send()`: N parallel streams, each sending for
`warmup + duration` seconds. The sink counts what arrives after the warm-up on each stream
and reports it back on that stream when the sender is done, so the figure is what was
received, as iperf3 reports it.

Both ends spread their streams over worker threads (at most `threads`, the test's CPU budget;
by default one per stream up to the cores this process may use). The data never passes
through Python: the sender hands a memory file's pages to the socket with `sendfile`, and the
sink discards what arrives inside the kernel (`recv` with `MSG_TRUNC`, which TCP sockets on
Linux take to mean "drop these bytes"). Both system calls release the interpreter lock, so
the workers run on as many cores as they are given. A sink worker is woken only once a stream
holds RCV_LOWAT bytes (or ends), not for every few packets, and cuts each stream at the end
of its warm-up (what arrived until then is warm-up), so the window counts exactly what came
after however seldom it reads. Each worker times its own CPU, so a test can tell whether the
link or the machines' CPUs set its figure.

Wire format, per stream. The token never goes on the wire: whatever listens at the port
learns nothing it could use. The sender writes a 72-byte header: a fresh random 32-byte nonce,
u32 warm-up in milliseconds, u32 stream index, and 32 bytes of `sender_mac()` (HMAC-SHA256
under the token of b"sender", the nonce, the warm-up and the index). A sink takes the stream
only if that MAC is right (checked in constant time), the nonce is new to it and it has a
stream left; it then proves that it holds the token with 32 bytes (`sink_proof()`:
HMAC-SHA256 under the token of b"sink" and the nonce), and only once the sender has checked
them (in constant time, within one deadline for connecting and proving) does it send data,
until it shuts its side down; the sink answers with 52 bytes (u64 bytes received, u64 bytes
received after the warm-up, f64 seconds of the window after the warm-up; then u32 the sink's
worker, and that worker's f64 CPU seconds, f64 seconds it wanted a CPU, f64 wall seconds) and
closes. A sender still reads the first 24 bytes alone from a sink that sends no more. Senders
and sinks of versions that sent the token itself in a 40-byte header do not work with these:
a sink refuses their header ("no header"), a sender finds no proof (NotASink).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import ipaddress
import mmap
import os
import queue
import secrets
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuprobe import cleanup
from gpuprobe.cores import usable_cores

# nonce, warm-up in ms, stream index, the sender's MAC
HEADER = struct.Struct("!32sII32s")
NONCE = struct.Struct("!32sII")
REPLY = struct.Struct("!QQd")
REPLY_CPU = struct.Struct("!Iddd")
# What one discarding recv may drop. The kernel never writes the buffer (MSG_TRUNC), so every
# worker of every sink shares one, mapped and never touched: it costs no resident memory.
DISCARD_BYTES = 16 * 1024 * 1024
_DISCARD = memoryview(mmap.mmap(-1, DISCARD_BYTES))
# How much a stream's data must hold before its sink worker is woken (SO_RCVLOWAT; the end of
# the stream and a full receive buffer wake it too; Linux caps it at half of tcp_rmem's
# maximum). Woken for every few packets (about 100-500 KB a read), a worker spent as much CPU
# per byte as iperf3's copying receiver, and on a 2-core KVM guest (AMD EPYC) each wake-up also
# cost the sending core an interrupt to the other: at 4 MiB both ends' CPU per Gbit fell to
# about 0.4 of what it was and the figure doubled (docs/benchmarks.md, bench/tcp_vs_iperf3.py).
RCV_LOWAT = 4 * 1024 * 1024
WORKER_POLL_SECONDS = 0.05
SEND_BYTES = 8 * 1024 * 1024
HEADER_TIMEOUT = 5.0
PROOF_BYTES = 32  # a SHA-256 HMAC
# A worker that spent this share of its wall time on a CPU or waiting for one (runnable, with
# the cores busy) was held back by the CPU: the test, not the link, set the pace. Measured
# between two network namespaces (bench/tcp_vs_iperf3.py's veth link): tests of a link that
# capped each flow kept their busiest thread at or below 0.1, tests of the bare veth link
# (CPU-bound by nature) kept one end's at or above 0.69.
CPU_LIMITED_SHARE = 0.6
MAX_THREADS = 64


class BandwidthError(Exception):
    """A bandwidth test that could not run or finish: refused, unreachable, or cut."""


class NotASink(BandwidthError):
    """Nothing at the address proved to be the sink (closed, silent, another service, or a
    sink that refused the token): no data was sent there."""


class NotOurAddress(OSError):
    """The address to send from is not one of this host's (EADDRNOTAVAIL at bind): the
    sender's own fault, found before anything reached the sink."""


def sender_mac(token: bytes, nonce: bytes, warmup_ms: int, index: int) -> bytes:
    """The sender's proof that it holds the token, bound to this stream's nonce, warm-up and
    index (a listener can replay it only to the sink itself, which takes each nonce once)."""
    message = b"sender" + NONCE.pack(nonce, warmup_ms, index)
    return hmac.new(token, message, hashlib.sha256).digest()


def sink_proof(token: bytes, nonce: bytes) -> bytes:
    """What a sink answers a stream's header with: proof that it holds the token."""
    return hmac.new(token, b"sink" + nonce, hashlib.sha256).digest()


def header(token: bytes, warmup_ms: int, index: int, nonce: bytes | None = None) -> bytes:
    """A stream's header under `token` (a fresh random nonce unless one is given)."""
    nonce = secrets.token_bytes(32) if nonce is None else nonce
    return HEADER.pack(nonce, warmup_ms, index, sender_mac(token, nonce, warmup_ms, index))


def default_threads(streams: int) -> int:
    """Worker threads for `streams` streams: one each, up to the cores this process may use."""
    return max(1, min(streams, usable_cores(), MAX_THREADS))


@dataclass(frozen=True)
class CpuUse:
    """The CPU one end of a test spent: its workers' CPU seconds over their wall time."""

    cpu_seconds: float
    wall_seconds: float
    threads: int
    # The largest share of its wall time that any one worker was on a CPU or waiting to be.
    busiest_share: float

    @property
    def limited(self) -> bool:
        """Whether this end ran out of CPU: one of its workers never waited on the network,
        only on the CPU (running, or runnable while the cores were busy elsewhere)."""
        return self.busiest_share >= CPU_LIMITED_SHARE

    def to_dict(self) -> dict[str, Any]:
        """The figures as report data."""
        return {
            "cpu_seconds": round(self.cpu_seconds, 6),
            "wall_seconds": round(self.wall_seconds, 6),
            "threads": self.threads,
            "busiest_thread_cpu_share": round(self.busiest_share, 4),
            "cpu_limited": self.limited,
        }


@dataclass(frozen=True)
class WorkerCpu:
    """One worker thread's CPU seconds, the seconds it wanted a CPU (on one, or runnable and
    waiting for one), and its wall seconds."""

    cpu_seconds: float
    wanted_seconds: float
    wall_seconds: float


class ThreadClock:
    """The calling thread's CPU time and run-queue wait since it was made.

    Linux's per-thread schedstat (`/proc/thread-self/schedstat`: nanoseconds on a CPU,
    nanoseconds runnable but waiting, timeslices) tells a thread that was slow because it
    waited for the network from one that was slow because the cores were busy. Without it
    (no schedstats in the kernel) the CPU time alone stands for both.
    """

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu, self._wanted = self._read()

    @staticmethod
    def _read() -> tuple[float, float]:
        try:
            with open("/proc/thread-self/schedstat", "rb") as f:
                running, waiting, *_ = (int(v) for v in f.read().split())
            return running / 1e9, (running + waiting) / 1e9
        except (OSError, ValueError):
            cpu = time.thread_time()
            return cpu, cpu

    def figures(self) -> WorkerCpu:
        """What the thread has spent since the clock was made."""
        cpu, wanted = self._read()
        return WorkerCpu(cpu - self._cpu, wanted - self._wanted, time.monotonic() - self._wall)


def cpu_use(workers: Sequence[WorkerCpu]) -> CpuUse:
    """The CPU use of one end from its workers' figures."""
    shares = [w.wanted_seconds / w.wall_seconds for w in workers if w.wall_seconds > 0]
    return CpuUse(
        cpu_seconds=sum(w.cpu_seconds for w in workers),
        wall_seconds=max((w.wall_seconds for w in workers), default=0.0),
        threads=len(workers),
        busiest_share=min(1.0, max(shares, default=0.0)),
    )


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
    """A finished test: the total received rate, each stream's, and what each end's CPU did."""

    streams: tuple[StreamResult, ...]
    duration_seconds: float
    warmup_seconds: float
    sender_cpu: CpuUse | None = None
    # None: the sink is an agent of a version that does not report its CPU.
    sink_cpu: CpuUse | None = None

    @property
    def bytes_per_second(self) -> float:
        """The sum of the streams' rates (they ran side by side)."""
        return sum(s.bytes_per_second for s in self.streams)

    @property
    def limited_by(self) -> str | None:
        """ "sender" or "sink" when that end's CPU capped the test (the sender first: it does
        the most work); None when neither ran out, so the link set the figure."""
        if self.sender_cpu is not None and self.sender_cpu.limited:
            return "sender"
        if self.sink_cpu is not None and self.sink_cpu.limited:
            return "sink"
        return None

    @property
    def cpu_seconds_per_gbit(self) -> float | None:
        """Both ends' CPU seconds per Gbit moved (equally: cores busy per Gbit/s)."""
        if self.sender_cpu is None or self.sink_cpu is None:
            return None
        gbit = sum(s.bytes_received for s in self.streams) * 8 / 1e9
        cpu = self.sender_cpu.cpu_seconds + self.sink_cpu.cpu_seconds
        return cpu / gbit if gbit > 0 else None

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
            "sender_cpu": self.sender_cpu.to_dict() if self.sender_cpu else None,
            "sink_cpu": self.sink_cpu.to_dict() if self.sink_cpu else None,
            "cpu_seconds_per_gbit": self.cpu_seconds_per_gbit,
            "limited_by": self.limited_by,
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
    # When the warm-up ends: planned at first, then the moment the worker cut the stream
    # there (took all that had arrived as warm-up), so the window holds exactly what came after.
    window_start: float = 0.0
    window_end: float = 0.0
    cut: bool = False
    total: int = 0
    window: int = 0


class _SinkWorker:
    """One receiving thread: discards what its streams carry and answers each at its end."""

    def __init__(self, index: int, sink: TcpSink) -> None:
        self.index = index
        self.sink = sink
        self.incoming: queue.SimpleQueue[_Stream] = queue.SimpleQueue()
        self.selector = selectors.DefaultSelector()
        self.thread = threading.Thread(target=self._run, name=f"tcp-sink-{index}", daemon=True)
        self._clock: ThreadClock | None = None
        self._warming: list[_Stream] = []  # streams not yet cut at the end of their warm-up

    def _run(self) -> None:
        self._clock = ThreadClock()
        try:
            while not self.sink.closed.is_set():
                self._take_incoming()
                for key, _ in self.selector.select(self._timeout()):
                    self._readable(key.data)
                self._cut_due()
        except (OSError, ValueError):  # closed under the loop by close()
            pass
        finally:
            self._take_incoming()
            for key in list(self.selector.get_map().values()):
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]
            self.selector.close()

    def _take_incoming(self) -> None:
        while True:
            try:
                stream = self.incoming.get_nowait()
            except queue.Empty:
                return
            if self.sink.closed.is_set():
                stream.conn.close()
            else:
                self.selector.register(stream.conn, selectors.EVENT_READ, stream)
                self._warming.append(stream)

    def _timeout(self) -> float:
        """How long to wait for data: until the next warm-up ends (to cut that stream on
        time, however little it holds), at most WORKER_POLL_SECONDS (to see a closed sink)."""
        now = time.monotonic()
        return max(0.0, min([WORKER_POLL_SECONDS, *(s.window_start - now for s in self._warming)]))

    def _cut_due(self) -> None:
        now = time.monotonic()
        for stream in [s for s in self._warming if now >= s.window_start]:
            self._cut(stream)

    def _readable(self, stream: _Stream) -> None:
        if not stream.cut and time.monotonic() >= stream.window_start:
            self._cut(stream)
        elif n := self._receive(stream):
            self._count(stream, n)

    def _cut(self, stream: _Stream) -> None:
        """End the stream's warm-up now: what it holds arrived before this moment and is
        warm-up; everything received from here on is the window's."""
        while n := self._receive(stream):
            self._count(stream, n)
            if n < DISCARD_BYTES:
                break
        if n is None:  # it ended in its warm-up: answered with an empty window
            return
        self._warming.remove(stream)
        stream.cut = True
        stream.window_start = stream.window_end = time.monotonic()

    def _receive(self, stream: _Stream) -> int | None:
        """Discard what the stream holds now: its byte count (0: nothing yet), or None when
        the stream ended (answered at the sender's end, or dropped on an error)."""
        try:
            n = stream.conn.recv_into(_DISCARD, DISCARD_BYTES, socket.MSG_TRUNC)
        except BlockingIOError:
            return 0
        except OSError:
            self._forget(stream)
            stream.conn.close()
            return None
        if n == 0:
            self._reply(stream)
            return None
        return n

    def _count(self, stream: _Stream, n: int) -> None:
        stream.total += n
        if stream.cut:
            stream.window += n
            stream.window_end = time.monotonic()
        self.sink.received(n)

    def _forget(self, stream: _Stream) -> None:
        self.selector.unregister(stream.conn)
        if not stream.cut:
            self._warming.remove(stream)

    def _reply(self, stream: _Stream) -> None:
        self._forget(stream)
        seconds = max(0.0, stream.window_end - stream.window_start)
        assert self._clock is not None  # made first thing in the worker's thread
        spent = self._clock.figures()
        reply = REPLY.pack(stream.total, stream.window, seconds) + REPLY_CPU.pack(
            self.index, spent.cpu_seconds, spent.wanted_seconds, spent.wall_seconds
        )
        with contextlib.suppress(OSError):
            stream.conn.setblocking(True)
            stream.conn.settimeout(HEADER_TIMEOUT)
            stream.conn.sendall(reply)
        stream.conn.close()
        self.sink.finished()


class TcpSink:
    """A one-time, token-guarded, byte- and time-bounded receiver for one peer's streams.

    One thread accepts connections and reads their headers; each accepted stream is handed
    to one of at most `threads` worker threads, which discard its data in the kernel.
    """

    def __init__(
        self,
        bind_host: str,
        allowed_peer: str,
        streams: int,
        max_bytes: int,
        max_seconds: float,
        threads: int | None = None,
    ) -> None:
        self.token = secrets.token_bytes(32)
        self.allowed_peer = normal_address(allowed_peer)
        self.streams = streams
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.stats = SinkStats()
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._finished = 0
        self._all_finished = threading.Event()
        self._nonces: set[bytes] = set()
        count = max(1, min(threads or default_threads(streams), streams, MAX_THREADS))
        self._workers: list[_SinkWorker] = []
        self._thread = threading.Thread(target=self._serve, name="tcp-sink", daemon=True)
        try:
            with contextlib.ExitStack() as undo:  # a sink that cannot open leaves nothing
                undo.callback(self._stop_workers)
                for i in range(count):
                    self._workers.append(_SinkWorker(i, self))
                family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
                self._listener = socket.socket(family, socket.SOCK_STREAM)
                undo.callback(self._listener.close)
                self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self._listener.bind((bind_host, 0))
                self._listener.listen(streams + 4)
                self._listener.setblocking(False)
                self.port: int = self._listener.getsockname()[1]
                self._selector = selectors.DefaultSelector()
                undo.callback(self._selector.close)
                self._selector.register(self._listener, selectors.EVENT_READ, None)
                self._forget = cleanup.on_exit(self.close)
                undo.callback(self._forget)
                for worker in self._workers:
                    worker.thread.start()
                self._thread.start()
                undo.pop_all()  # opened: the serving thread closes it all when done
        except RuntimeError as exc:  # Thread.start: the process is out of threads
            raise OSError(errno.EAGAIN, f"no thread to serve it ({exc})") from None

    def _stop_workers(self) -> None:
        """Stop and join the workers already started (each closes its own selector); close
        the selectors of those never started."""
        self.closed.set()
        for worker in self._workers:
            if worker.thread.ident is None:
                worker.selector.close()
            else:
                worker.thread.join(2)

    @property
    def token_hex(self) -> str:
        """The token as the peer will be told it."""
        return self.token.hex()

    def received(self, n: int) -> None:
        """Count `n` bytes a worker received; past the byte bound the streams are cut."""
        with self._lock:
            self.stats.bytes_received += n
            over = self.stats.bytes_received > self.max_bytes
        if over:
            self._stop("byte bound")  # the streams are cut, with no reply

    def finished(self) -> None:
        """A worker answered one stream."""
        with self._lock:
            self._finished += 1
            done = self._finished >= self.streams
        if done:
            self._all_finished.set()

    def _serve(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self.closed.is_set() and not self._all_finished.is_set():
                now = time.monotonic()
                if now >= deadline:
                    self._stop("time bound")
                    break
                for key, _ in self._selector.select(min(0.2, deadline - now)):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read_header(key.data)
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
        nonce, warmup_ms, index, mac = HEADER.unpack(stream.header)
        if not hmac.compare_digest(mac, sender_mac(self.token, nonce, warmup_ms, index)):
            self.stats.refuse("token")
            self._drop(stream)
        elif self.stats.accepted >= self.streams or nonce in self._nonces:  # used, or replayed
            self.stats.refuse("reused")
            self._drop(stream)
        else:
            self._nonces.add(nonce)
            with contextlib.suppress(OSError):  # 32 bytes into an empty send buffer
                stream.conn.send(sink_proof(self.token, nonce))
            self._selector.unregister(stream.conn)
            # Wake its worker once per RCV_LOWAT bytes, not once per packet.
            with contextlib.suppress(OSError):
                stream.conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, RCV_LOWAT)
            stream.window_start = stream.window_end = time.monotonic() + warmup_ms / 1000.0
            worker = self._workers[self.stats.accepted % len(self._workers)]
            self.stats.accepted += 1
            worker.incoming.put(stream)

    def _expire_headers(self) -> None:
        now = time.monotonic()
        for key in list(self._selector.get_map().values()):
            stream = key.data
            if stream is not None and now - stream.opened > HEADER_TIMEOUT:
                self.stats.refuse("no header")
                self._drop(stream)

    def _drop(self, stream: _Stream) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(stream.conn)
        stream.conn.close()

    def _stop(self, why: str) -> None:
        with self._lock:
            if self.stats.stopped is None:
                self.stats.stopped = why
        self.closed.set()

    def _close_all(self) -> None:
        for key in list(self._selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()
        self.closed.set()
        for worker in self._workers:
            if worker.thread is not threading.current_thread():
                worker.thread.join(2)
        # A stream handed to a worker after the worker's last look at its queue (it saw the
        # sink closed and stopped) is closed here, or its connection would stay open.
        for worker in self._workers:
            while True:
                try:
                    worker.incoming.get_nowait().conn.close()
                except queue.Empty:
                    break
        self._forget()

    def close(self) -> None:
        """Stop accepting and cut every stream (the serving threads close them)."""
        self._stop("closed")
        if threading.current_thread() is not self._thread:
            self._thread.join(3)

    def wait(self, timeout: float) -> bool:
        """Wait until the sink has finished; True if it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


def normal_address(address: str) -> str:
    """An IP address in its one canonical text (`fd00:0::1` and `fd00::1` alike; an
    IPv4-mapped IPv6 address as the IPv4 address); ValueError when it is not one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.compressed


def _same_address(address: str, allowed: str) -> bool:
    """Whether the address a connection came from is the allowed one (as addresses, not as
    text: the kernel writes an address its own way)."""
    try:
        return normal_address(address) == normal_address(allowed)
    except ValueError:
        return False


def _proven(conn: socket.socket, hello: bytes, expected: bytes, deadline: float) -> bool:
    """Whether the other end answers `hello` with `expected` before `deadline` (one deadline
    for the whole exchange: an end that trickles its bytes gains no time by it)."""
    data = bytearray()
    try:
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        conn.sendall(hello)
        while len(data) < PROOF_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            conn.settimeout(left)
            chunk = conn.recv(PROOF_BYTES - len(data))
            if not chunk:
                return False
            data += chunk
    except OSError:  # timed out, reset, refused
        return False
    return hmac.compare_digest(bytes(data), expected)


def _recv_reply(conn: socket.socket) -> bytes:
    """The sink's answer: 52 bytes, or the 24 an agent of the earlier version sends."""
    size = REPLY.size + REPLY_CPU.size
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) not in (REPLY.size, size):
        raise BandwidthError("connection closed early")
    return bytes(data)


def send(
    host: str,
    port: int,
    token: bytes,
    streams: int = 4,
    duration: float = 10.0,
    warmup: float = 1.0,
    connect_timeout: float = 5.0,
    threads: int | None = None,
    max_bytes: int | None = None,
    max_rate: float | None = None,
    source: str | None = None,
) -> BandwidthResult:
    """Send to a sink over `streams` parallel connections; the rate the sink received.

    `source` is the address the streams leave from (the one the sink accepts; None: the
    kernel's choice). Raises NotOurAddress when this host does not hold it.

    The streams are driven by at most `threads` worker threads (the test's CPU budget;
    default: one per stream up to this process's cores). The sender holds itself to at most
    `max_bytes` in all and `max_rate` bytes per second, shared out among its workers, whatever
    the sink would take. The token itself never goes out, and
    no data goes out on a stream before the sink proved it holds `token`. Raises NotASink
    when nothing at `host`:`port` proves to be the sink on every stream within
    `connect_timeout` (one deadline for connecting and proving them all), BandwidthError when
    the sink refuses us or cuts the test.
    """
    conns: list[socket.socket] = []
    not_a_sink = NotASink(f"nothing proved to be the sink at {host}:{port}")
    deadline = time.monotonic() + connect_timeout
    try:
        for index in range(streams):
            nonce = secrets.token_bytes(32)
            hello = header(token, int(warmup * 1000), index, nonce)
            left = deadline - time.monotonic()
            if left <= 0:
                raise not_a_sink
            conn = _connect(host, port, left, source, not_a_sink)
            conns.append(conn)
            if not _proven(conn, hello, sink_proof(token, nonce), deadline):
                raise not_a_sink
        count = max(1, min(threads or default_threads(streams), streams, MAX_THREADS))
        budget = SendBudget(
            max_bytes / count if max_bytes is not None else None,
            max_rate / count if max_rate is not None else None,
        )
        with _zeros() as zeros:
            end = time.monotonic() + warmup + duration
            sender = _run_workers(
                [conns[i::count] for i in range(count)],
                lambda part: _pump(part, zeros, end, budget),
            )
        results = []
        sink_workers: dict[int, WorkerCpu] = {}
        for conn in conns:
            conn.shutdown(socket.SHUT_WR)
            conn.setblocking(True)
            conn.settimeout(connect_timeout + 10)
            reply = _recv_reply(conn)
            total, window, seconds = REPLY.unpack_from(reply)
            results.append(StreamResult(total, window, seconds))
            if len(reply) > REPLY.size:
                worker, cpu, wanted, wall = REPLY_CPU.unpack_from(reply, REPLY.size)
                # A worker answers each of its streams in turn: its last answer counts most.
                if worker not in sink_workers or wall > sink_workers[worker].wall_seconds:
                    sink_workers[worker] = WorkerCpu(cpu, wanted, wall)
    except (OSError, BandwidthError) as exc:
        if isinstance(exc, (NotASink, NotOurAddress)):
            raise
        raise BandwidthError(
            f"the sink cut the test (refused, or past its bounds): {exc}"
        ) from None
    finally:
        for conn in conns:
            conn.close()
    sink = cpu_use(list(sink_workers.values())) if sink_workers else None
    return BandwidthResult(tuple(results), duration, warmup, cpu_use(sender), sink)


def _connect(
    host: str, port: int, timeout: float, source: str | None, not_a_sink: NotASink
) -> socket.socket:
    """A connection to the sink, from `source` when given. A source this host does not hold
    is NotOurAddress (the sender's fault); any other failure is `not_a_sink`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    conn = socket.socket(family, socket.SOCK_STREAM)
    try:
        if source is not None:
            try:
                conn.bind((source, 0))
            except OSError as exc:
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EINVAL):
                    raise NotOurAddress(exc.errno, exc.strerror or str(exc)) from None
                raise not_a_sink from None
        conn.settimeout(timeout)
        try:
            conn.connect((host, port))
        except OSError:
            raise not_a_sink from None
    except BaseException:
        conn.close()
        raise
    return conn


def _run_workers(
    parts: list[list[socket.socket]], work: Callable[[list[socket.socket]], None]
) -> list[WorkerCpu]:
    """Run `work` on each part in a thread of its own; each thread's CPU and wall time.
    Raises the first error a worker met, once all have stopped."""
    figures: list[WorkerCpu | None] = [None] * len(parts)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        clock = ThreadClock()
        try:
            work(parts[i])
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)
        finally:
            figures[i] = clock.figures()

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"tcp-send-{i}", daemon=True)
        for i in range(len(parts))
    ]
    started: list[threading.Thread] = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
    except RuntimeError as exc:  # no thread could be started: the machine is out of them
        errors.append(BandwidthError(f"cannot start a sending thread: {exc}"))
    for thread in started:
        thread.join()
    if errors:
        raise errors[0]
    return [f for f in figures if f is not None]


@dataclass(frozen=True)
class SendBudget:
    """What one sending worker may send: bytes in all, and bytes per second (None: no bound)."""

    max_bytes: float | None = None
    max_rate: float | None = None

    def allowed(self, sent: int, elapsed: float) -> int:
        """How many bytes the worker may hand the socket now, having sent `sent` in `elapsed`
        seconds (a burst of one send call ahead of the rate at most)."""
        room = float(SEND_BYTES)
        if self.max_bytes is not None:
            room = min(room, self.max_bytes - sent)
        if self.max_rate is not None:
            room = min(room, self.max_rate * elapsed + SEND_BYTES - sent)
        return max(0, int(room))

    def spent(self, sent: int) -> bool:
        """Whether the worker has sent all it may."""
        return self.max_bytes is not None and sent >= self.max_bytes


def _pump(conns: list[socket.socket], zeros: int, end: float, budget: SendBudget) -> None:
    """Send from the memory file of zeros on every stream until `end`, within `budget`.

    `sendfile` hands the file's pages to the socket without a copy through user space, so the
    sender's CPU goes to the network. A stream the sink stopped reading fails the test.
    """
    sent, started = 0, time.monotonic()
    with selectors.DefaultSelector() as selector:
        for conn in conns:
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_WRITE)
        while (now := time.monotonic()) < end and not budget.spent(sent):
            if budget.allowed(sent, now - started) == 0:
                time.sleep(min(0.005, end - now))  # ahead of the rate: wait for it
                continue
            ready = selector.select(min(1.0, end - now))
            for key, _ in ready:
                # select may return past the end: nothing more is sent then (a send after the
                # end went beyond the rate's bound by the time the select overran)
                now = time.monotonic()
                size = budget.allowed(sent, now - started) if now < end else 0
                if size == 0:
                    break
                with contextlib.suppress(BlockingIOError):
                    sent += os.sendfile(key.fd, zeros, 0, size)


@contextlib.contextmanager
def _zeros() -> Iterator[int]:
    fd = os.memfd_create("gpuprobe-tcp-payload")
    try:
        os.ftruncate(fd, SEND_BYTES)
        yield fd
    finally:
        os.close(fd)
