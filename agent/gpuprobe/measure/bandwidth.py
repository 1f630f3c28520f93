"""Bandwidth tests between agents: sinks for peers, tests toward peers, and who is at fault.

A test from agent A to agent B has a sink on B and a sender on A. The orchestrating caller
(`gpuprobe mesh`) opens the sink on B for A's address (`open_sink`) and hands what B answered
(address, port, single-use ticket) to A (`measure`). A sends only to that address and port,
only once the sink has proven on each data connection that it holds the ticket (a foreign
service cannot), and never calls B itself. Without a sink in the request A asks B itself, but
only over TLS to a peer whose certificate it verified (`PeerSinks.verified`), at the one
address it resolved. Either side refuses while GPU processes run on it (unless forced): active
tests never compete with paying work. One test runs at a time; sinks are bounded in count,
bytes and time, and listen only on the address facing the sender.

Nothing here speaks gRPC: a refusal is a `Refused` naming its `Reason` and the `Side` it is
about, which the gRPC service maps to a status code.
"""

from __future__ import annotations

import contextlib
import enum
import ipaddress
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from gpuprobe import cleanup
from gpuprobe.config import BandwidthConfig
from gpuprobe.host.fs import HostFS
from gpuprobe.measure import perftest, tcp
from gpuprobe.measure.perftest import (
    MAX_RDMA_BUFFER_BYTES,
    MAX_RDMA_MESSAGE_BYTES,
    MAX_RDMA_QUEUE_PAIRS,
    RdmaTestConfig,
    rdma_buffer_bytes,
)

DEFAULT_SECONDS, MAX_SECONDS = 10.0, 120.0
DEFAULT_SINK_SECONDS, MAX_SINK_SECONDS = 30.0, 180.0
DEFAULT_STREAMS, MAX_STREAMS = 4, 64
DEFAULT_WARMUP = 1.0
BYTES_PER_SECOND_BOUND = 10 * 10**9  # a sink's byte bound per second of test (100 GbE ≈ 12.5e9)
SINK_GRACE_SECONDS = 15.0  # connecting, warming up and reporting back
TRANSPORTS = ("tcp", "rdma")
SYS_IB = "/sys/class/infiniband"
# The kernel's RDMA device names (IB_DEVICE_NAME_MAX is 64, the terminating NUL included).
RDMA_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# The most of a caller's value an error quotes.
QUOTED_CHARACTERS = 64
# How long a sender waits for a sink to connect and prove itself; a failure before the proof
# is reported after exactly this long, so that neither its text nor its timing tells a closed
# port from a silent one or from another service.
PROOF_SECONDS = 2.5
NOT_A_SINK = "did not prove to be the sink the test was opened on"
# How long an agent gives a peer's OpenBandwidthSink (over TLS); a peer that did not prove
# itself is reported after exactly this long, for the same reason.
PEER_CALL_SECONDS = 5.0


class Side(enum.Enum):
    """Which agent of a test a failure is about."""

    SOURCE = "source"  # the sending agent, the one asked to measure
    PEER = "peer"  # the receiving agent, whose sink it is


class Reason(enum.Enum):
    """Why a test or a sink was refused (the service maps each to a gRPC status)."""

    INVALID = "invalid"  # the request is wrong: the same for every link
    CANNOT_RUN = "cannot run"  # not here, now: GPU processes, no device or perftest, no TLS
    UNREACHABLE = "unreachable"  # the peer could not be reached or tested
    BUSY = "busy"  # a test is running, or as many sinks as allowed are open


class Refused(Exception):
    """A test or sink that cannot be served: why, and which side it is about."""

    def __init__(self, reason: Reason, message: str, side: Side = Side.SOURCE) -> None:
        super().__init__(message)
        self.reason = reason
        self.side = side


@dataclass(frozen=True)
class SinkRequest:
    """What a sink is opened for (OpenBandwidthSink); zero or None means the default."""

    transport: str = "tcp"
    lifetime_seconds: float | None = None
    max_bytes: int = 0
    streams: int = 0
    rdma_device: str = ""
    message_bytes: int = 0
    queue_pairs: int = 0
    test_seconds: int = 0
    force: bool = False
    sender: str = ""  # the sending agent's IP address; default: the caller's


@dataclass(frozen=True)
class Sink:
    """An open sink, as its agent answers it: where to send and the ticket to show."""

    address: str
    port: int
    ticket: str  # hex, TCP only
    node: str
    expires: datetime
    # RDMA: what the server side runs with; the sender uses the same.
    message_bytes: int = 0
    queue_pairs: int = 0
    test_seconds: int = 0
    # TCP: the address the sink accepts streams from; the sender binds its streams to it.
    sender: str = ""


@dataclass(frozen=True)
class MeasureRequest:
    """A test toward a peer (MeasureBandwidth); zero or None means the default."""

    peer: str  # the peer agent's gRPC address, host:port
    transport: str = "tcp"
    duration_seconds: float | None = None
    warmup_seconds: float | None = None
    max_bytes: int = 0
    streams: int = 0
    rdma_device: str = ""
    peer_rdma_device: str = ""
    force: bool = False
    sink: Sink | None = None  # the sink the caller opened on the peer


@dataclass(frozen=True)
class Measurement:
    """A finished test, as the receiving side counted it."""

    source: str
    peer: str
    transport: str
    bytes_per_second: float
    bytes: int = 0
    elapsed_seconds: float = 0.0
    stream_bytes_per_second: tuple[float, ...] = ()
    # TCP: what each end's CPU spent, and which end's CPU (not the link) capped the test.
    sender_cpu: tcp.CpuUse | None = None
    sink_cpu: tcp.CpuUse | None = None
    cpu_limited_side: str | None = None  # "sender" | "sink"
    cpu_seconds_per_gbit: float | None = None


class PeerSinks(Protocol):
    """How an agent asks a peer agent for a sink itself (the API's client, given by serve)."""

    @property
    def verified(self) -> bool:
        """Whether calls to peers verify the peer's certificate (TLS with a CA)."""
        ...

    def open_sink(self, address: str, port: int, name: str, request: SinkRequest) -> Sink:
        """Open a sink on the agent at `address`:`port` (its certificate naming `name`);
        raises Refused about the PEER side."""
        ...


def valid_streams(streams: int) -> int:
    """A request's stream count (the default when unset); INVALID above the bound."""
    streams = streams or DEFAULT_STREAMS
    if streams > MAX_STREAMS:
        raise Refused(Reason.INVALID, f"{streams} streams: at most {MAX_STREAMS}")
    return streams


def bounded_seconds(value: float | None, default: float, limit: float) -> float:
    """A request's duration in seconds (the default when unset), within (0, limit]."""
    value = default if value is None else value
    if not 0 < value <= limit:
        raise Refused(Reason.INVALID, f"duration {value:g} s is not within (0, {limit:g}]")
    return float(value)


def quoted(value: str, limit: int = QUOTED_CHARACTERS) -> str:
    """A caller's value as an error quotes it: at most `limit` characters of it (a refusal's
    words travel back in the call's trailing metadata, which clients bound at a few KiB)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value)} characters)"


def rdma_device_name(device: str, what: str = "rdma_device") -> str:
    """An RDMA device's name as the kernel names them (`mlx5_0`, `rocep1s0f0`); INVALID for
    anything else (a path, a name longer than the kernel's 64 characters)."""
    if not RDMA_DEVICE.fullmatch(device):
        raise Refused(
            Reason.INVALID,
            f"{what} {quoted(device)} is not an RDMA device name (at most 64 letters, digits, "
            "_ . -)",
        )
    return device


def split_peer(peer: str) -> tuple[str, int]:
    """A peer's host:port (IPv6 in brackets) as (host, port); INVALID otherwise."""
    host, _, port = peer.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(Reason.INVALID, f"peer {quoted(peer)} is not host:port")
    return host.strip("[]"), int(port)


def is_ip(text: str) -> bool:
    """Whether `text` is an IP address literal (not a name to resolve)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def address_facing(peer: str) -> str:
    """This host's address on the route toward `peer`: the address a peer on that route
    reaches this host at (no packet is sent; connecting a UDP socket only picks the route)."""
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((peer, 9))
        return str(probe.getsockname()[0])


class BandwidthTests:
    """One agent's side of bandwidth tests: its sinks, its one test at a time."""

    def __init__(
        self,
        node: str,
        fs: HostFS,
        busy_gpus: Callable[[], Sequence[int]],
        record: Callable[[Measurement], None],
        peers: PeerSinks | None = None,
        rdma_test: RdmaTestConfig | None = None,
        policy: BandwidthConfig | None = None,
        tcp_threads: int | None = None,
    ) -> None:
        self.node = node
        self.fs = fs
        self.busy_gpus = busy_gpus
        self.record = record
        self.peers = peers
        self.rdma_test = rdma_test or RdmaTestConfig()
        self.policy = policy or BandwidthConfig()
        # The most threads each end of a TCP test uses here (None: one per stream, up to
        # the cores): the test's CPU budget on this node.
        self.tcp_threads = tcp_threads
        # One outgoing test at a time: two at once would share (and halve) the link. A second
        # caller is refused at once rather than queued (it would hold a server worker).
        self._one_test = threading.Lock()
        self._sinks = threading.BoundedSemaphore(self.policy.max_sinks)

    def _refuse_if_busy(self, force: bool) -> None:
        if force:
            return
        busy = self.busy_gpus()
        if busy:
            listed = ", ".join(str(i) for i in busy)
            raise Refused(
                Reason.CANNOT_RUN,
                f"GPU processes are active on {self.node} (GPU {listed}): "
                "bandwidth tests wait for idle GPUs (pass --force to run anyway)",
            )

    def _allowed(self, address: str, what: str) -> None:
        if not self.policy.allows(address):
            raise Refused(
                Reason.INVALID,
                f"{what} {address} is not within this agent's peer networks "
                "(bandwidth.peer_networks)",
            )

    # --- the receiving side --------------------------------------------------------------

    def open_sink(self, request: SinkRequest, caller: str) -> Sink:
        """Open a one-time sink for the sender the request names (else the caller, at the
        IP address `caller`), listening only on this host's address facing that sender."""
        transport = request.transport or "tcp"
        if transport not in TRANSPORTS:
            raise Refused(Reason.INVALID, f"unknown transport {quoted(transport)}")
        sender = request.sender or caller
        if not is_ip(sender):
            raise Refused(Reason.INVALID, f"sender {quoted(sender)} is not an IP address")
        sender = tcp.normal_address(sender)  # the sink compares it with what accept returns
        self._allowed(sender, "sender")
        self._refuse_if_busy(request.force)
        lifetime = bounded_seconds(request.lifetime_seconds, DEFAULT_SINK_SECONDS, MAX_SINK_SECONDS)
        try:
            address = address_facing(sender)
        except OSError:
            raise Refused(Reason.CANNOT_RUN, f"{self.node} has no route to {sender}") from None
        if not self._sinks.acquire(blocking=False):
            raise Refused(
                Reason.BUSY, f"{self.policy.max_sinks} sinks are open on {self.node} already"
            )
        try:
            if transport == "tcp":
                port, ticket = self._tcp_sink(request, address, sender, lifetime)
                rdma = (0, 0, 0)
            else:
                options = self._rdma_server(request, lifetime)
                port, ticket = options.port, ""
                rdma = (options.message_bytes, options.queue_pairs, options.duration_seconds)
        except BaseException:
            self._sinks.release()
            raise
        expires = datetime.now(UTC) + timedelta(seconds=lifetime)
        accepts = sender if transport == "tcp" else ""
        return Sink(address, port, ticket, self.node, expires, *rdma, sender=accepts)

    def _tcp_sink(
        self, request: SinkRequest, address: str, sender: str, lifetime: float
    ) -> tuple[int, str]:
        streams = valid_streams(request.streams)
        bound = int(BYTES_PER_SECOND_BOUND * lifetime)
        if request.max_bytes > bound:
            raise Refused(
                Reason.INVALID,
                f"max_bytes {request.max_bytes}: at most {bound} for a {lifetime:g} s sink",
            )
        try:
            sink = tcp.TcpSink(
                address, sender, streams, request.max_bytes or bound, lifetime, self.tcp_threads
            )
        except OSError as exc:  # no port free on that address, or no thread to serve it
            raise Refused(
                Reason.CANNOT_RUN, f"{self.node} cannot open a sink: {exc.strerror or exc}"
            ) from None
        try:
            self._release_when_done(sink.wait, lifetime)
        except RuntimeError as exc:  # Thread.start: out of threads
            sink.close()
            raise Refused(
                Reason.CANNOT_RUN, f"{self.node} cannot open a sink: no thread to watch it ({exc})"
            ) from None
        return sink.port, sink.token_hex

    def _release_when_done(self, wait: Callable[[float], object], lifetime: float) -> None:
        def release() -> None:
            try:
                wait(lifetime + 5)
            finally:
                self._sinks.release()

        threading.Thread(target=release, name="bandwidth-sink", daemon=True).start()

    def _rdma_server(self, request: SinkRequest, lifetime: float) -> perftest.PerftestOptions:
        if not request.rdma_device:
            raise Refused(Reason.INVALID, "rdma needs an rdma_device")
        rdma_device_name(request.rdma_device)
        if not self.fs.exists(f"{SYS_IB}/{request.rdma_device}"):
            raise Refused(Reason.CANNOT_RUN, f"no RDMA device {request.rdma_device} on {self.node}")
        problem = self._gid_problem(request.rdma_device)
        if problem:
            raise Refused(Reason.CANNOT_RUN, problem)
        options = rdma_options(request.rdma_device, _free_port(), request, self.rdma_test)
        try:
            server = perftest.start_server(options)
        except perftest.PerftestError as exc:
            raise self._unavailable_here(exc) from None

        def stop_server() -> None:
            perftest.stop(server)

        forget = cleanup.on_exit(stop_server)

        def reap() -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # past its lifetime: stop it
                server.wait(lifetime)
            stop_server()
            forget()
            self._sinks.release()

        threading.Thread(target=reap, name="perftest-server", daemon=True).start()
        return options

    # --- the sending side ----------------------------------------------------------------

    def measure(self, request: MeasureRequest) -> Measurement:
        """Measure toward the peer the request names; one test at a time (BUSY otherwise)."""
        if not self._one_test.acquire(blocking=False):
            raise Refused(Reason.BUSY, f"a bandwidth test is already running on {self.node}")
        try:
            result = self._measure(request)
        finally:
            self._one_test.release()
        self.record(result)
        return result

    def _measure(self, request: MeasureRequest) -> Measurement:
        transport = request.transport or "tcp"
        if transport not in TRANSPORTS:
            raise Refused(Reason.INVALID, f"unknown transport {quoted(transport)}")
        host, port = split_peer(request.peer)
        self._refuse_if_busy(request.force)
        duration = bounded_seconds(request.duration_seconds, DEFAULT_SECONDS, MAX_SECONDS)
        if transport == "tcp":
            return self._measure_tcp(request, host, port, duration)
        return self._measure_rdma(request, host, port, duration)

    def _peer_sink(self, request: MeasureRequest, host: str, port: int, sink: SinkRequest) -> Sink:
        """The sink the caller opened (checked), or one this agent asks the peer for over
        verified TLS at the one address it resolved; the sink's address is where data goes."""
        if request.sink is not None:
            given = request.sink
            if not is_ip(given.address) or not 0 < given.port < 65536:
                raise Refused(Reason.INVALID, "the sink needs an IP address and a port")
            self._allowed(given.address, "the sink's address")
            if sink.transport == "tcp" and not _is_ticket(given.ticket):
                raise Refused(Reason.INVALID, "the sink's ticket is not 64 hex digits")
            return replace(given, address=tcp.normal_address(given.address))
        if self.peers is None or not self.peers.verified:
            raise Refused(
                Reason.CANNOT_RUN,
                f"{self.node} calls its peers only over TLS with a CA (it sends them its "
                "credentials): open the sink on the peer and pass it in the request",
            )
        address = self._resolve_once(host, port)
        started = time.monotonic()
        try:
            opened = self.peers.open_sink(address, port, host, sink)
        except Refused as refused:
            if refused.reason == Reason.UNREACHABLE:  # told after the same time, whatever it was
                time.sleep(max(0.0, started + PEER_CALL_SECONDS - time.monotonic()))
            raise
        # A peer that proved itself may still answer nonsense (another version, a bug): it is
        # refused here, not left to fail on the way to the socket.
        problem = (
            f"port {opened.port}, which is not a port"
            if not 0 < opened.port < 65536
            else "a ticket that is not 64 hex digits"
            if sink.transport == "tcp" and not _is_ticket(opened.ticket)
            else None
        )
        if problem is not None:
            raise Refused(Reason.UNREACHABLE, f"{host} answered a sink with {problem}", Side.PEER)
        return replace(opened, address=address)  # data goes where the certificate was checked

    def _resolve_once(self, host: str, port: int) -> str:
        """The peer's one address (a name is resolved once, here, and never again)."""
        if not is_ip(host):
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                raise Refused(Reason.UNREACHABLE, f"{host} does not resolve", Side.PEER) from None
            host = str(infos[0][4][0])
        self._allowed(host, "peer")
        return host

    def _measure_tcp(
        self, request: MeasureRequest, host: str, port: int, duration: float
    ) -> Measurement:
        streams = valid_streams(request.streams)  # refused here, before the peer is asked
        warmup = (
            DEFAULT_WARMUP
            if request.warmup_seconds is None
            else bounded_seconds(request.warmup_seconds, DEFAULT_WARMUP, MAX_SECONDS)
        )
        if duration + warmup > MAX_SECONDS:  # the time the sender sends, warm-up included
            raise Refused(
                Reason.INVALID,
                f"duration and warm-up {duration + warmup:g} s together: at most {MAX_SECONDS:g}",
            )
        sink_request = SinkRequest(
            transport="tcp",
            lifetime_seconds=duration + warmup + SINK_GRACE_SECONDS,
            max_bytes=request.max_bytes,
            streams=streams,
            force=request.force,
        )
        sink = self._peer_sink(request, host, port, sink_request)
        rate = self.policy.max_send_bytes_per_second
        source = self._source_address(sink)
        started = time.monotonic()
        try:
            result = tcp.send(
                sink.address,
                sink.port,
                bytes.fromhex(sink.ticket),
                streams,
                duration,
                warmup,
                connect_timeout=PROOF_SECONDS,  # to connect and prove every stream, in all
                threads=self.tcp_threads,
                max_bytes=int(rate * (duration + warmup)),
                max_rate=rate,
                source=source,
            )
        except (tcp.NotOurAddress, tcp.NotASink):
            # Told alike, after the same time, whatever answered (or did not) at that port,
            # and whether or not the sender address the sink names is this node's: an answer
            # at once that it is not ("not an address of <node>") told a caller which
            # addresses the node holds.
            time.sleep(max(0.0, started + PROOF_SECONDS - time.monotonic()))
            also = (
                f", or {source}, the address it accepts streams from, is not one {self.node} "
                "sends from"
                if source
                else ""
            )
            raise Refused(
                Reason.UNREACHABLE, f"{sink.address}:{sink.port} {NOT_A_SINK}{also}", Side.PEER
            ) from None
        except tcp.BandwidthError as exc:
            raise Refused(
                Reason.UNREACHABLE, f"the test toward {sink.node} failed: {exc}", Side.PEER
            ) from None
        return Measurement(
            source=self.node,
            peer=sink.node,
            transport="tcp",
            bytes_per_second=result.bytes_per_second,
            bytes=sum(s.bytes_received for s in result.streams),
            elapsed_seconds=max((s.window_seconds for s in result.streams), default=0.0),
            stream_bytes_per_second=tuple(s.bytes_per_second for s in result.streams),
            sender_cpu=result.sender_cpu,
            sink_cpu=result.sink_cpu,
            cpu_limited_side=result.limited_by,
            cpu_seconds_per_gbit=result.cpu_seconds_per_gbit,
        )

    def _source_address(self, sink: Sink) -> str | None:
        """The address to send from: the one the sink accepts streams from (None: a sink
        that does not say, from an older agent; the kernel then picks)."""
        if not sink.sender:
            return None
        if not is_ip(sink.sender):
            raise Refused(
                Reason.INVALID, f"the sink's sender {quoted(sink.sender)} is not an IP address"
            )
        sender = tcp.normal_address(sink.sender)
        self._allowed(sender, "the sink's sender")  # this node sends only within its networks
        return sender

    def _measure_rdma(
        self, request: MeasureRequest, host: str, port: int, duration: float
    ) -> Measurement:
        device = request.rdma_device
        if not device:
            raise Refused(Reason.INVALID, "rdma needs an rdma_device")
        rdma_device_name(device)
        if request.peer_rdma_device:
            rdma_device_name(request.peer_rdma_device, "peer_rdma_device")
        if not self.fs.exists(f"{SYS_IB}/{device}"):
            raise Refused(Reason.CANNOT_RUN, f"no RDMA device {device} on {self.node}")
        # perftest looks its GID up only once the peer has connected: a bad index here would
        # fail the test after the peer opened its side, as if the peer were at fault.
        problem = self._gid_problem(device)
        if problem:
            raise self._unavailable_here(perftest.PerftestError(problem))
        test_seconds = perftest.test_seconds(duration)
        sink_request = SinkRequest(
            transport="rdma",
            lifetime_seconds=test_seconds + SINK_GRACE_SECONDS,
            rdma_device=request.peer_rdma_device or device,
            message_bytes=self.rdma_test.message_bytes,
            queue_pairs=self.rdma_test.queue_pairs,
            test_seconds=test_seconds,
            force=request.force,
        )
        given = request.sink
        if given is not None and given.message_bytes:  # the server side's, as it runs
            sink_request = replace(
                sink_request,
                message_bytes=given.message_bytes,
                queue_pairs=given.queue_pairs,
                test_seconds=given.test_seconds or test_seconds,
            )
            test_seconds = sink_request.test_seconds
        # This node's own binary and device are tried before it asks the peer for anything
        # (and before it sends to a sink the caller opened): a failure here is this node's.
        try:
            perftest.probe(rdma_options(device, _free_port(), sink_request, self.rdma_test))
        except perftest.PerftestError as exc:
            raise self._unavailable_here(exc) from None
        sink = self._peer_sink(request, host, port, sink_request)
        options = rdma_options(device, sink.port, sink_request, self.rdma_test)
        try:
            result = perftest.run_client(
                options, sink.address, timeout=test_seconds + SINK_GRACE_SECONDS
            )
        except perftest.PerftestError as exc:
            if perftest.is_local(str(exc)):
                raise self._unavailable_here(exc) from None
            raise Refused(
                Reason.UNREACHABLE,
                f"the RDMA test toward {sink.node} failed: {exc}",
                Side.PEER,
            ) from None
        return Measurement(
            source=self.node,
            peer=sink.node,
            transport="rdma",
            bytes_per_second=result.average_bytes_per_second,
            elapsed_seconds=float(test_seconds),
        )

    def _gid_problem(self, device: str) -> str | None:
        """Why this node's `rdma.test.gid_index` cannot serve `device`, or None.

        The kernel lists every entry of a port's GID table under `gids/` and reads an unused
        one as all zeros; an index past the table has no file.
        """
        index = self.rdma_test.gid_index
        if index is None:
            return None
        port = perftest.IB_PORT
        gid = self.fs.try_read_text(f"{SYS_IB}/{device}/ports/{port}/gids/{index}")
        if gid is None:
            why = "does not exist"
        elif not gid.strip().replace(":", "").strip("0"):
            why = "is empty (all zeros)"
        else:
            return None
        return (
            f"GID index {index} (rdma.test.gid_index) {why} on {device} port {port} of {self.node}"
        )

    def _unavailable_here(self, exc: Exception) -> Refused:
        """This node cannot run its side of an RDMA test (no perftest, no usable device)."""
        return Refused(Reason.CANNOT_RUN, f"the RDMA test cannot run on {self.node}: {exc}")


def rdma_options(
    device: str, port: int, request: SinkRequest, local: RdmaTestConfig
) -> perftest.PerftestOptions:
    """One side's ib_write_bw options: message size, queue pairs and duration as the request
    says (both sides share them; unset: this node's configuration), the GID index as this
    node's configuration says."""
    defaults = perftest.PerftestOptions(device)
    message_bytes = request.message_bytes or local.message_bytes
    queue_pairs = request.queue_pairs or local.queue_pairs
    if (
        message_bytes > MAX_RDMA_MESSAGE_BYTES
        or queue_pairs > MAX_RDMA_QUEUE_PAIRS
        or rdma_buffer_bytes(message_bytes, queue_pairs) > MAX_RDMA_BUFFER_BYTES
    ):
        raise Refused(
            Reason.INVALID,
            f"{message_bytes} bytes per message, {queue_pairs} queue pairs: at most "
            f"{MAX_RDMA_MESSAGE_BYTES} and {MAX_RDMA_QUEUE_PAIRS}, "
            f"{MAX_RDMA_BUFFER_BYTES} bytes registered in all (twice their product)",
        )
    return perftest.PerftestOptions(
        device=device,
        port=port,
        message_bytes=message_bytes,
        duration_seconds=request.test_seconds or defaults.duration_seconds,
        queue_pairs=queue_pairs,
        gid_index=local.gid_index,
    )


def _is_ticket(ticket: str) -> bool:
    try:
        return len(bytes.fromhex(ticket)) == 32
    except ValueError:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])
