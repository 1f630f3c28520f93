"""The agent's side of bandwidth tests: sinks for peers, tests toward peers, latest results.

A test between agents A and B takes two RPCs. A (asked by `gpuprobe mesh`, with
MeasureBandwidth) calls B's OpenBandwidthSink with its own credentials; B opens a one-time
sink that accepts only A's address and, for TCP, only the ticket it hands back; A sends to
the host it reached B on. Both sides refuse while GPU processes run on them (unless forced):
active tests never compete with paying work. A keeps its latest result per peer and transport.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from gpuprobe import cleanup
from gpuprobe.config import (
    MAX_RDMA_BUFFER_BYTES,
    MAX_RDMA_MESSAGE_BYTES,
    MAX_RDMA_QUEUE_PAIRS,
    RdmaTestConfig,
    rdma_buffer_bytes,
)
from gpuprobe.gpu.devices import busy_gpus
from gpuprobe.host import Host
from gpuprobe.measure import perftest, tcp
from gpuprobe.serve.state import LinkResult, ReportStore
from gpuprobe.v1 import diagnostics_pb2 as pb

DEFAULT_SECONDS, MAX_SECONDS = 10.0, 120.0
DEFAULT_SINK_SECONDS, MAX_SINK_SECONDS = 30.0, 180.0
DEFAULT_STREAMS, MAX_STREAMS = 4, 64
DEFAULT_WARMUP = 1.0
BYTES_PER_SECOND_BOUND = 10 * 10**9  # a sink's byte bound per second of test (100 GbE ≈ 12.5e9)
SINK_GRACE_SECONDS = 15.0  # connecting, warming up and reporting back
TRANSPORTS = ("tcp", "rdma")
SYS_IB = "/sys/class/infiniband"


# Errors about the peer (it refused a sink, its sink cut the test) start with this, so that
# a mesh can tell them from errors about the agent it asked.
PEER_FAULT = "peer: "


class TestRefused(Exception):
    """A bandwidth RPC that cannot be served; `code` is the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class LinkBook:
    """The latest result per (peer, transport), published to the report store for metrics."""

    def __init__(self, store: ReportStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._results: dict[tuple[str, str], LinkResult] = {}

    def record(self, result: LinkResult) -> None:
        """Keep `result` as the latest for its peer and transport."""
        with self._lock:
            self._results[(result.peer, result.transport)] = result
            latest = [self._results[k] for k in sorted(self._results)]
        self._store.update_links(latest)


def peer_address(context: Any) -> str:
    """The calling peer's IP address from gRPC's `ipv4:1.2.3.4:5` / `ipv6:[::1]:5` form."""
    peer = context.peer() or ""
    match = re.fullmatch(r"ipv4:([\d.]+):\d+|ipv6:\[([0-9a-fA-F:.%]+)\]:\d+", peer)
    if not match:
        raise TestRefused(grpc.StatusCode.FAILED_PRECONDITION, f"cannot test toward {peer!r}")
    return match.group(1) or match.group(2)


def valid_streams(streams: int) -> int:
    """A request's stream count (the default when unset); INVALID_ARGUMENT above the bound."""
    streams = streams or DEFAULT_STREAMS
    if streams > MAX_STREAMS:
        raise TestRefused(
            grpc.StatusCode.INVALID_ARGUMENT, f"{streams} streams: at most {MAX_STREAMS}"
        )
    return streams


def seconds(duration: Any, default: float, limit: float) -> float:
    """A request's Duration in seconds (the default when unset), bounded by `limit`."""
    value = duration.seconds + duration.nanos / 1e9 if duration.ByteSize() else default
    if value <= 0 or value > limit:
        raise TestRefused(
            grpc.StatusCode.INVALID_ARGUMENT, f"duration {value:g} s is not within (0, {limit:g}]"
        )
    return float(value)


def test_cpu(cpu: tcp.CpuUse) -> pb.TestCpu:
    """One end's CPU figures as the response carries them."""
    return pb.TestCpu(
        cpu_seconds=cpu.cpu_seconds,
        wall_seconds=cpu.wall_seconds,
        threads=cpu.threads,
        busiest_thread_cpu_share=cpu.busiest_share,
        cpu_limited=cpu.limited,
    )


class Bandwidth:
    """The work of OpenBandwidthSink and MeasureBandwidth on one agent."""

    def __init__(
        self,
        host: Host,
        peer_channel: PeerChannel,
        store: ReportStore,
        rdma_test: RdmaTestConfig | None = None,
        tcp_threads: int | None = None,
    ) -> None:
        self.host = host
        self.peer_channel = peer_channel
        self.links = LinkBook(store)
        self.rdma_test = rdma_test or RdmaTestConfig()
        # The most threads each end of a TCP test uses here (None: one per stream, up to
        # the cores): the test's CPU budget on this node.
        self.tcp_threads = tcp_threads

    def _refuse_if_busy(self, force: bool) -> None:
        if force:
            return
        busy = busy_gpus(self.host.nvml)
        if busy:
            listed = ", ".join(str(i) for i in busy)
            raise TestRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"GPU processes are active on {self.host.node_name} (GPU {listed}): "
                "bandwidth tests wait for idle GPUs (force to run anyway)",
            )

    # --- the receiving side --------------------------------------------------------------

    def open_sink(
        self, request: pb.OpenBandwidthSinkRequest, caller: str
    ) -> pb.OpenBandwidthSinkResponse:
        """Open a one-time sink for `caller`'s test."""
        transport = request.transport or "tcp"
        if transport not in TRANSPORTS:
            raise TestRefused(grpc.StatusCode.INVALID_ARGUMENT, f"unknown transport {transport!r}")
        self._refuse_if_busy(request.force)
        lifetime = seconds(request.duration, DEFAULT_SINK_SECONDS, MAX_SINK_SECONDS)
        expires = datetime.now(UTC) + timedelta(seconds=lifetime)
        if transport == "tcp":
            port, ticket = self._tcp_sink(request, caller, lifetime)
        else:
            port, ticket = self._rdma_server(request, lifetime), ""
        response = pb.OpenBandwidthSinkResponse(port=port, ticket=ticket, node=self.host.node_name)
        response.expires.FromDatetime(expires)
        return response

    def _tcp_sink(
        self, request: pb.OpenBandwidthSinkRequest, caller: str, lifetime: float
    ) -> tuple[int, str]:
        streams = valid_streams(request.streams)
        max_bytes = request.max_bytes or int(BYTES_PER_SECOND_BOUND * lifetime)
        bind = "::" if ":" in caller else "0.0.0.0"
        sink = tcp.TcpSink(bind, caller, streams, max_bytes, lifetime, self.tcp_threads)
        return sink.port, sink.token_hex

    def _rdma_server(self, request: pb.OpenBandwidthSinkRequest, lifetime: float) -> int:
        if not request.rdma_device:
            raise TestRefused(grpc.StatusCode.INVALID_ARGUMENT, "rdma needs an rdma_device")
        if not self.host.fs.exists(f"{SYS_IB}/{request.rdma_device}"):
            raise TestRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no RDMA device {request.rdma_device} on {self.host.node_name}",
            )
        problem = self._gid_problem(request.rdma_device)
        if problem:
            raise TestRefused(grpc.StatusCode.FAILED_PRECONDITION, problem)
        options = rdma_options(request.rdma_device, _free_port(), request, self.rdma_test)
        try:
            server = perftest.start_server(options)
        except perftest.PerftestError as exc:
            raise TestRefused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None

        def stop_server() -> None:
            perftest.stop(server)

        forget = cleanup.on_exit(stop_server)

        def reap() -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # past its lifetime: stop it
                server.wait(lifetime)
            stop_server()
            forget()

        threading.Thread(target=reap, name="perftest-server", daemon=True).start()
        return options.port

    # --- the sending side ----------------------------------------------------------------

    def measure(self, request: pb.MeasureBandwidthRequest) -> pb.MeasureBandwidthResponse:
        """Measure toward the peer agent named in `request`."""
        transport = request.transport or "tcp"
        if transport not in TRANSPORTS:
            raise TestRefused(grpc.StatusCode.INVALID_ARGUMENT, f"unknown transport {transport!r}")
        host, _, port = request.peer.rpartition(":")
        if not host or not port.isdigit():
            raise TestRefused(
                grpc.StatusCode.INVALID_ARGUMENT, f"peer {request.peer!r} is not host:port"
            )
        host = host.strip("[]")
        self._refuse_if_busy(request.force)
        duration = seconds(request.duration, DEFAULT_SECONDS, MAX_SECONDS)
        if transport == "tcp":
            result = self._measure_tcp(request, host, duration)
        else:
            result = self._measure_rdma(request, host, duration)
        self.links.record(
            LinkResult(result.peer, transport, result.bytes_per_second, datetime.now(UTC))
        )
        result.source = self.host.node_name
        return result

    def _open(
        self, request: pb.MeasureBandwidthRequest, sink: pb.OpenBandwidthSinkRequest, timeout: float
    ) -> pb.OpenBandwidthSinkResponse:
        try:
            return self.peer_channel.open_sink(request.peer, sink, timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.INVALID_ARGUMENT:  # the request's fault, not the peer's
                raise TestRefused(
                    code, f"{request.peer} refused the test's parameters: {details}"
                ) from None
            status = (
                grpc.StatusCode.FAILED_PRECONDITION
                if code == grpc.StatusCode.FAILED_PRECONDITION
                else grpc.StatusCode.UNAVAILABLE
            )
            raise TestRefused(
                status, f"{PEER_FAULT}{request.peer} refused a sink: {details}"
            ) from None

    def _measure_tcp(
        self, request: pb.MeasureBandwidthRequest, host: str, duration: float
    ) -> pb.MeasureBandwidthResponse:
        streams = valid_streams(request.streams)  # refused here, before the peer is asked
        warmup = (
            seconds(request.warmup, DEFAULT_WARMUP, MAX_SECONDS)
            if request.warmup.ByteSize()
            else DEFAULT_WARMUP
        )
        sink_request = pb.OpenBandwidthSinkRequest(
            transport="tcp", streams=streams, max_bytes=request.max_bytes, force=request.force
        )
        sink_request.duration.FromTimedelta(
            timedelta(seconds=duration + warmup + SINK_GRACE_SECONDS)
        )
        sink = self._open(request, sink_request, timeout=10)
        try:
            result = tcp.send(
                host,
                sink.port,
                bytes.fromhex(sink.ticket),
                streams,
                duration,
                warmup,
                threads=self.tcp_threads,
            )
        except tcp.BandwidthError as exc:
            raise TestRefused(
                grpc.StatusCode.UNAVAILABLE,
                f"{PEER_FAULT}the test toward {sink.node} failed: {exc}",
            ) from None
        response = pb.MeasureBandwidthResponse(
            peer=sink.node,
            transport="tcp",
            bytes_per_second=result.bytes_per_second,
            bytes=sum(s.bytes_received for s in result.streams),
            stream_bytes_per_second=[s.bytes_per_second for s in result.streams],
            cpu_limited_side=result.limited_by or "",
            cpu_seconds_per_gbit=result.cpu_seconds_per_gbit or 0.0,
        )
        for side, cpu in (("sender_cpu", result.sender_cpu), ("sink_cpu", result.sink_cpu)):
            if cpu is not None:
                getattr(response, side).CopyFrom(test_cpu(cpu))
        window = max((s.window_seconds for s in result.streams), default=0.0)
        response.elapsed.FromTimedelta(timedelta(seconds=window))
        return response

    def _measure_rdma(
        self, request: pb.MeasureBandwidthRequest, host: str, duration: float
    ) -> pb.MeasureBandwidthResponse:
        device = request.rdma_device
        if not device:
            raise TestRefused(grpc.StatusCode.INVALID_ARGUMENT, "rdma needs an rdma_device")
        if not self.host.fs.exists(f"{SYS_IB}/{device}"):
            raise TestRefused(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no RDMA device {device} on {self.host.node_name}",
            )
        # perftest looks its GID up only once the peer has connected: a bad index here would
        # fail the test after the peer opened its side, as if the peer were at fault.
        problem = self._gid_problem(device)
        if problem:
            raise self._unavailable_here(perftest.PerftestError(problem))
        test_seconds = perftest.test_seconds(duration)
        sink_request = pb.OpenBandwidthSinkRequest(
            transport="rdma",
            rdma_device=request.peer_rdma_device or device,
            message_bytes=self.rdma_test.message_bytes,
            queue_pairs=self.rdma_test.queue_pairs,
            test_seconds=test_seconds,
            force=request.force,
        )
        sink_request.duration.FromTimedelta(timedelta(seconds=test_seconds + SINK_GRACE_SECONDS))
        # This node's own binary and device are tried before the peer opens anything: a
        # failure here is this node's, never the peer's.
        try:
            perftest.probe(rdma_options(device, _free_port(), sink_request, self.rdma_test))
        except perftest.PerftestError as exc:
            raise self._unavailable_here(exc) from None
        sink = self._open(request, sink_request, timeout=10)
        options = rdma_options(device, sink.port, sink_request, self.rdma_test)
        try:
            result = perftest.run_client(options, host, timeout=test_seconds + SINK_GRACE_SECONDS)
        except perftest.PerftestError as exc:
            if perftest.is_local(str(exc)):
                raise self._unavailable_here(exc) from None
            raise TestRefused(
                grpc.StatusCode.UNAVAILABLE,
                f"{PEER_FAULT}the RDMA test toward {sink.node} failed: {exc}",
            ) from None
        response = pb.MeasureBandwidthResponse(
            peer=sink.node, transport="rdma", bytes_per_second=result.average_bytes_per_second
        )
        response.elapsed.FromTimedelta(timedelta(seconds=test_seconds))
        return response

    def _gid_problem(self, device: str) -> str | None:
        """Why this node's `rdma.test.gid_index` cannot serve `device`, or None.

        The kernel lists every entry of a port's GID table under `gids/` and reads an unused
        one as all zeros; an index past the table has no file.
        """
        index = self.rdma_test.gid_index
        if index is None:
            return None
        port = perftest.IB_PORT
        gid = self.host.fs.try_read_text(f"{SYS_IB}/{device}/ports/{port}/gids/{index}")
        if gid is None:
            why = "does not exist"
        elif not gid.strip().replace(":", "").strip("0"):
            why = "is empty (all zeros)"
        else:
            return None
        return (
            f"GID index {index} (rdma.test.gid_index) {why} on {device} port {port} "
            f"of {self.host.node_name}"
        )

    def _unavailable_here(self, exc: Exception) -> TestRefused:
        """This node cannot run its side of an RDMA test (no perftest, no usable device)."""
        return TestRefused(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the RDMA test cannot run on {self.host.node_name}: {exc}",
        )


def rdma_options(
    device: str, port: int, request: pb.OpenBandwidthSinkRequest, local: RdmaTestConfig
) -> perftest.PerftestOptions:
    """One side's ib_write_bw options: message size, queue pairs and duration as the request
    says (both sides share them), the GID index as this node's configuration says."""
    defaults = perftest.PerftestOptions(device)
    message_bytes = request.message_bytes or defaults.message_bytes
    queue_pairs = request.queue_pairs or defaults.queue_pairs
    if (
        message_bytes > MAX_RDMA_MESSAGE_BYTES
        or queue_pairs > MAX_RDMA_QUEUE_PAIRS
        or rdma_buffer_bytes(message_bytes, queue_pairs) > MAX_RDMA_BUFFER_BYTES
    ):
        raise TestRefused(
            grpc.StatusCode.INVALID_ARGUMENT,
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


class PeerChannel:
    """How this agent calls its peers' OpenBandwidthSink: its own token and TLS settings."""

    def __init__(
        self,
        token: Any = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> None:
        self._token = token  # a TokenFile (re-read on rotation), or None
        self._tls = (ca_file, cert_file, key_file)

    def open_sink(
        self, peer: str, request: pb.OpenBandwidthSinkRequest, timeout: float
    ) -> pb.OpenBandwidthSinkResponse:
        """Call OpenBandwidthSink on the agent at `peer`."""
        from gpuprobe.client import Client

        ca_file, cert_file, key_file = self._tls
        token = self._token.token() if self._token is not None else None
        with Client(
            peer, token=token, ca_file=ca_file, cert_file=cert_file, key_file=key_file
        ) as client:
            return client.open_bandwidth_sink(request, timeout=timeout)
