"""The bandwidth RPCs' wiring: messages to and from the tests of `gpuprobe.measure.bandwidth`,
its refusals to gRPC status codes, and the client this agent calls its peers with (only over
verified TLS). The tests themselves, publishing their latest results to the report store,
are the daemon's (`gpuprobe.daemon.links`).
"""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from typing import Any

import grpc

from gpuprobe import wire
from gpuprobe.client import Client
from gpuprobe.credentials import TokenFile
from gpuprobe.measure.bandwidth import (
    PEER_CALL_SECONDS,
    Measurement,
    MeasureRequest,
    Reason,
    Refused,
    Side,
    Sink,
    SinkRequest,
)
from gpuprobe.measure.tcp import CpuUse
from gpuprobe.v1 import diagnostics_pb2 as pb

STATUS = {
    Reason.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    Reason.CANNOT_RUN: grpc.StatusCode.FAILED_PRECONDITION,
    Reason.UNREACHABLE: grpc.StatusCode.UNAVAILABLE,
    Reason.BUSY: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
SIDES = {Side.SOURCE: pb.TEST_SIDE_SOURCE, Side.PEER: pb.TEST_SIDE_PEER}


def peer_address(context: Any) -> str:
    """The calling peer's IP address from gRPC's `ipv4:1.2.3.4:5` / `ipv6:[::1]:5` form."""
    peer = context.peer() or ""
    match = re.fullmatch(r"ipv4:([\d.]+):\d+|ipv6:\[([0-9a-fA-F:.%]+)\]:\d+", peer)
    if not match:
        raise Refused(Reason.CANNOT_RUN, f"cannot test toward {peer!r}")
    return match.group(1) or match.group(2)


def status(refused: Refused) -> grpc.StatusCode:
    """The gRPC status a refusal is answered with."""
    return STATUS[refused.reason]


def failure_metadata(refused: Refused) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata that tells the caller which side of the test failed."""
    return wire.failure_metadata(SIDES[refused.side])


# --- messages ------------------------------------------------------------------------------


def _seconds(duration: Any) -> float | None:
    return duration.seconds + duration.nanos / 1e9 if duration.ByteSize() else None


def sink_request(message: pb.OpenBandwidthSinkRequest) -> SinkRequest:
    """An OpenBandwidthSinkRequest as the domain's request."""
    return SinkRequest(
        transport=message.transport or "tcp",
        lifetime_seconds=_seconds(message.duration),
        max_bytes=message.max_bytes,
        streams=message.streams,
        rdma_device=message.rdma_device,
        message_bytes=message.message_bytes,
        queue_pairs=message.queue_pairs,
        test_seconds=message.test_seconds,
        force=message.force,
        sender=message.sender,
    )


def sink_request_message(request: SinkRequest) -> pb.OpenBandwidthSinkRequest:
    """The domain's sink request as the message a peer is sent."""
    message = pb.OpenBandwidthSinkRequest(
        transport=request.transport,
        max_bytes=request.max_bytes,
        streams=request.streams,
        rdma_device=request.rdma_device,
        message_bytes=request.message_bytes,
        queue_pairs=request.queue_pairs,
        test_seconds=request.test_seconds,
        force=request.force,
        sender=request.sender,
    )
    if request.lifetime_seconds is not None:
        message.duration.FromTimedelta(timedelta(seconds=request.lifetime_seconds))
    return message


def sink_message(sink: Sink) -> pb.OpenBandwidthSinkResponse:
    """An open sink as the OpenBandwidthSinkResponse."""
    message = pb.OpenBandwidthSinkResponse(
        port=sink.port,
        ticket=sink.ticket,
        node=sink.node,
        address=sink.address,
        message_bytes=sink.message_bytes,
        queue_pairs=sink.queue_pairs,
        test_seconds=sink.test_seconds,
        sender=sink.sender,
    )
    message.expires.FromDatetime(sink.expires)
    return message


def sink_from_message(message: pb.OpenBandwidthSinkResponse) -> Sink:
    """An OpenBandwidthSinkResponse as the domain's sink."""
    return Sink(
        address=message.address,
        port=message.port,
        ticket=message.ticket,
        node=message.node,
        expires=message.expires.ToDatetime(tzinfo=UTC),
        message_bytes=message.message_bytes,
        queue_pairs=message.queue_pairs,
        test_seconds=message.test_seconds,
        sender=message.sender,
    )


def measure_request(message: pb.MeasureBandwidthRequest) -> MeasureRequest:
    """A MeasureBandwidthRequest as the domain's request."""
    return MeasureRequest(
        peer=message.peer,
        transport=message.transport or "tcp",
        duration_seconds=_seconds(message.duration),
        warmup_seconds=_seconds(message.warmup),
        max_bytes=message.max_bytes,
        streams=message.streams,
        rdma_device=message.rdma_device,
        peer_rdma_device=message.peer_rdma_device,
        force=message.force,
        sink=sink_from_message(message.sink) if message.HasField("sink") else None,
    )


def test_cpu(cpu: CpuUse) -> pb.TestCpu:
    """One end's CPU figures as the response carries them."""
    return pb.TestCpu(
        cpu_seconds=cpu.cpu_seconds,
        wall_seconds=cpu.wall_seconds,
        threads=cpu.threads,
        busiest_thread_cpu_share=cpu.busiest_share,
        cpu_limited=cpu.limited,
    )


def result_message(result: Measurement) -> pb.MeasureBandwidthResponse:
    """A finished test as the MeasureBandwidthResponse."""
    message = pb.MeasureBandwidthResponse(
        peer=result.peer,
        transport=result.transport,
        bytes_per_second=result.bytes_per_second,
        bytes=result.bytes,
        stream_bytes_per_second=list(result.stream_bytes_per_second),
        source=result.source,
        cpu_limited_side=result.cpu_limited_side or "",
        cpu_seconds_per_gbit=result.cpu_seconds_per_gbit or 0.0,
    )
    for side, cpu in (("sender_cpu", result.sender_cpu), ("sink_cpu", result.sink_cpu)):
        if cpu is not None:
            getattr(message, side).CopyFrom(test_cpu(cpu))
    message.elapsed.FromTimedelta(timedelta(seconds=result.elapsed_seconds))
    return message


# --- calling peers -------------------------------------------------------------------------


class PeerChannel:
    """How this agent calls its peers' OpenBandwidthSink: its own token and TLS settings,
    its own client certificate for peers that require one (mTLS)."""

    def __init__(
        self,
        token: TokenFile | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        server_certificate_as_client: bool = False,
    ) -> None:
        self._token = token  # re-read on rotation
        self._tls = (ca_file, cert_file, key_file)
        # The client certificate is the server's own (no --tls-client-cert): a peer that
        # requires clientAuth in the extended key usage turns it away during the handshake.
        self._hint = (
            " (this agent presents its server certificate to peers: if it lacks the "
            "clientAuth key usage, give the agent one of its own with --tls-client-cert)"
            if server_certificate_as_client
            else ""
        )

    @property
    def verified(self) -> bool:
        """Whether calls verify the peer's certificate (a CA is set)."""
        return self._tls[0] is not None

    def open_sink(self, address: str, port: int, name: str, request: SinkRequest) -> Sink:
        """Call OpenBandwidthSink on the agent at `address`:`port`, its certificate checked
        for `name`; raises Refused about the peer."""
        ca_file, cert_file, key_file = self._tls
        token = self._token.token() if self._token is not None else None
        target = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        try:
            with Client(
                target,
                token=token,
                ca_file=ca_file,
                cert_file=cert_file,
                key_file=key_file,
                server_name=None if name == address else name,
            ) as client:
                return sink_from_message(
                    client.open_bandwidth_sink(
                        sink_request_message(request), timeout=PEER_CALL_SECONDS
                    )
                )
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            details = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.INVALID_ARGUMENT:  # the request's fault, not the peer's
                raise Refused(
                    Reason.INVALID, f"{name} refused the test's parameters: {details}"
                ) from None
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                # Nothing proved (over TLS) to be an agent there: say nothing of what answered.
                raise Refused(
                    Reason.UNREACHABLE,
                    f"{name} did not answer as a gpuprobe agent of this fleet{self._hint}",
                    Side.PEER,
                ) from None
            reason = {
                grpc.StatusCode.FAILED_PRECONDITION: Reason.CANNOT_RUN,
                grpc.StatusCode.RESOURCE_EXHAUSTED: Reason.BUSY,
            }.get(code, Reason.UNREACHABLE)
            raise Refused(reason, f"{name} refused a sink: {details}", Side.PEER) from None
