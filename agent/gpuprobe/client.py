"""The gRPC client library: connect to an agent (token, TLS, mTLS) and read its reports.

Used by `gpuprobe audit`, the mesh, and any tool that talks to agents:

    credentials = Credentials.load(token_file="/etc/gpuprobe/token", ca_file="ca.crt")
    with Client("10.0.0.7:50051", credentials=credentials) as agent:
        report = agent.get_report()
        for check, finding in report.findings():
            print(check, finding.code, finding.resource)

    fetched = fetch_report("10.0.0.8:50051", credentials, timeout=5)   # never raises
    fetched.report or fetched.unreachable.reason

One `Credentials` serves any number of agents: its files are read once. The token travels with
every call (`authorization: Bearer <token>`): the guarded RPCs need it, and a proxy in front of
the read-only ones may too.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuprobe import wire
from gpuprobe.credentials import check_ca, check_key_pair, read_pem, read_token
from gpuprobe.errors import UsageError
from gpuprobe.report import Finding, NodeReport
from gpuprobe.report_view import DataKeys
from gpuprobe.unreachable import Failure, Unreachable, explain, status_code
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc

# Reports are a few kB per check; leave room for large nodes.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
GET_REPORT = "/gpuprobe.v1.NodeDiagnostics/GetReport"
# A client makes one call or a few on each channel, and an audit makes thousands of
# channels: no channelz bookkeeping, retries, proxy lookup, bandwidth probes or shared
# subchannel pool, which cost CPU per channel and give a short call nothing.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
    ("grpc.enable_channelz", 0),
    ("grpc.enable_retries", 0),
    ("grpc.enable_http_proxy", 0),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.use_local_subchannel_pool", 1),
)


def read_token_file(path: str) -> str:
    """The bearer token in a file (as `--token-file` reads it); raises UsageError."""
    return read_token(path)


@dataclass(frozen=True)
class Credentials:
    """How to authenticate to agents: the bearer token, and TLS (the CA that signed the
    agents' certificates, a client certificate for mTLS, the name their certificates carry).
    TLS is on when a CA or a client certificate is given."""

    token: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise UsageError("a client certificate and its key go together (--tls-cert, --tls-key)")

    @classmethod
    def load(
        cls,
        token_file: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        server_name: str | None = None,
    ) -> Credentials:
        """Read the token and PEM files once; raises UsageError naming the flag of a file that
        cannot be read or is not what it should be (a key that is not the certificate's)."""
        _check_tls_files(ca_file, cert_file, key_file)
        return cls(
            token=read_token(token_file) if token_file else None,
            ca=_read_pem(ca_file, "--tls-ca"),
            cert=_read_pem(cert_file, "--tls-cert"),
            key=_read_pem(key_file, "--tls-key"),
            server_name=server_name or None,
        )

    @property
    def tls(self) -> bool:
        """Whether calls go over TLS."""
        return self.ca is not None or self.cert is not None

    @cached_property
    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """The TLS channel credentials (made once, shared by every channel), or None."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata that carries the token."""
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


class Client:
    """A connection to one agent's `gpuprobe.v1.NodeDiagnostics` API."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        server_name: str | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """Connect to `target` (host:port) with `credentials`, or with the same given one by
        one: TLS when `ca_file` is given (mTLS with `cert_file` and `key_file`);
        `server_name` overrides the name the certificate must carry; `token` is sent as
        `authorization: Bearer <token>`. Raises UsageError for an unreadable file."""
        if credentials is None:
            _check_tls_files(ca_file, cert_file, key_file)
            credentials = Credentials(
                token=token,
                ca=_read_pem(ca_file, "--tls-ca"),
                cert=_read_pem(cert_file, "--tls-cert"),
                key=_read_pem(key_file, "--tls-key"),
                server_name=server_name,
            )
        dialled, options, channel_credentials = _channel_args(target, credentials)
        if channel_credentials is not None:
            self.channel = grpc.secure_channel(dialled, channel_credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(dialled, options=options)
        self.target = target
        self.credentials = credentials
        self._metadata = credentials.metadata

    @cached_property
    def _stub(self) -> Any:
        """The API's stub, made on first use: it registers every RPC with the channel, which
        an audit's thousands of one-call channels need not pay for."""
        return pb_grpc.NodeDiagnosticsStub(self.channel)  # type: ignore[no-untyped-call]

    def get_report_message(
        self, timeout: float = 10.0, view: pb.ReportView = pb.REPORT_VIEW_FULL
    ) -> pb.NodeReport:
        """The agent's cached report as the proto message (with per-check times); `view`
        REPORT_VIEW_SUMMARY asks for its summary view (an agent without views sends the
        whole report)."""
        call = self.channel.unary_unary(
            GET_REPORT,
            request_serializer=pb.GetReportRequest.SerializeToString,
            response_deserializer=pb.GetReportResponse.FromString,
        )
        response: pb.GetReportResponse = call(
            pb.GetReportRequest(view=view), timeout=timeout, metadata=self._metadata
        )
        return response.report

    def get_report(
        self,
        timeout: float = 10.0,
        data: DataKeys | None = None,
        view: pb.ReportView = pb.REPORT_VIEW_FULL,
    ) -> NodeReport:
        """The agent's cached report; `data` converts only the named checks' data keys
        (the rest is left empty), for tools that read a few facts of many agents."""
        return wire.report_from_proto(self.get_report_message(timeout, view), data)

    def findings(self, timeout: float = 10.0) -> Iterator[tuple[str, Finding]]:
        """Each finding of the agent's cached report, with the name of its check."""
        yield from self.get_report(timeout, data={}).findings()

    def run_checks(self, checks: Sequence[str] = (), timeout: float = 30.0) -> NodeReport:
        """Run the named checks (all when empty) on the agent now; their fresh results."""
        response = self._stub.RunChecks(
            pb.RunChecksRequest(checks=list(checks)), timeout=timeout, metadata=self._metadata
        )
        return wire.report_from_proto(response.report)

    def watch_reports(self, timeout: float | None = None) -> Iterator[NodeReport]:
        """The report now, then each changed report, until `timeout` seconds have passed (the
        iterator then ends) or the agent stops. An agent that sends not even its first report
        within `timeout` raises, as any call would (DEADLINE_EXCEEDED)."""
        stream = self._stub.WatchReports(
            pb.WatchReportsRequest(), timeout=timeout, metadata=self._metadata
        )
        answered = False
        try:
            for response in stream:
                answered = True
                yield wire.report_from_proto(response.report)
        except grpc.RpcError as exc:
            # The stream's deadline is the watch's length: reaching it is the end asked for.
            if not (answered and status_code(exc) == grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
        finally:
            stream.cancel()  # a consumer that stops early must not leave the stream open

    def clear_findings(
        self, gpu: int | None = None, timeout: float = 30.0
    ) -> tuple[int, NodeReport]:
        """Forget sticky XID findings of one GPU (all when None); how many, and the report."""
        request = pb.ClearFindingsRequest() if gpu is None else pb.ClearFindingsRequest(gpu=gpu)
        response = self._stub.ClearFindings(request, timeout=timeout, metadata=self._metadata)
        return int(response.cleared), wire.report_from_proto(response.report)

    def measure_bandwidth(
        self, request: pb.MeasureBandwidthRequest, timeout: float = 60.0
    ) -> pb.MeasureBandwidthResponse:
        """Have the agent measure its bandwidth toward the peer the request names, sending to
        the sink in `request.sink` (opened on the peer with `open_bandwidth_sink` for this
        agent's address). A failure names the side at fault: `wire.failed_side(error)`."""
        response: pb.MeasureBandwidthResponse = self._stub.MeasureBandwidth(
            request, timeout=timeout, metadata=self._metadata
        )
        return response

    def open_bandwidth_sink(
        self, request: pb.OpenBandwidthSinkRequest, timeout: float = 10.0
    ) -> pb.OpenBandwidthSinkResponse:
        """Ask the agent for a one-time sink for a test from `request.sender` (default: this
        caller); hand the answer to the sender's `measure_bandwidth` as `sink`."""
        response: pb.OpenBandwidthSinkResponse = self._stub.OpenBandwidthSink(
            request, timeout=timeout, metadata=self._metadata
        )
        return response

    def health(self, service: str = "", timeout: float = 5.0) -> str:
        """The agent's gRPC health status name (SERVING, NOT_SERVING) for `service`."""
        stub = health_pb2_grpc.HealthStub(self.channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))

    def close(self) -> None:
        """Close the connection."""
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class Fetched:
    """One agent's report, or why there is none; `seconds` is how long the call took."""

    target: str
    report: NodeReport | None
    agent_version: str = ""
    unreachable: Unreachable | None = None
    seconds: float = 0.0


def _channel_args(
    target: str, credentials: Credentials
) -> tuple[str, list[tuple[str, Any]], grpc.ChannelCredentials | None]:
    """What a channel to `target` is made of: the address gRPC dials, the channel options,
    and the TLS credentials (None: plain text)."""
    options = [*CHANNEL_OPTIONS]
    if credentials.server_name:
        options.append(("grpc.ssl_target_name_override", credentials.server_name))
    return dial_target(target), options, credentials.channel_credentials


def dial_target(target: str) -> str:
    """The gRPC target that dials `target` (host:port): an IP address goes through gRPC's
    `ipv4:`/`ipv6:` scheme, which skips the DNS resolver a name needs (a thread hop per
    channel); a name is dialled as it is."""
    host, sep, _ = target.rpartition(":")
    if not sep:
        return target
    try:
        socket.inet_pton(socket.AF_INET, host)  # most targets, a tenth of ip_address's cost
        return f"ipv4:{target}"
    except OSError:
        pass
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return target
    return f"ipv{address.version}:{target}"


def fetch_report(
    target: str,
    credentials: Credentials,
    timeout: float,
    data: DataKeys | None = None,
    view: pb.ReportView = pb.REPORT_VIEW_FULL,
) -> Fetched:
    """GetReport from one agent within `timeout` seconds (connecting included); a failed
    call, or an answer that is not a report, comes back as `unreachable` with its reason,
    never as an exception. `view` REPORT_VIEW_SUMMARY asks for the summary view."""
    started = time.monotonic()
    try:
        with Client(target, credentials=credentials) as client:
            message = client.get_report_message(timeout, view)
        return _fetched(target, message, data, started)
    except Exception as exc:
        return _not_fetched(target, exc, timeout, credentials, started)


async def fetch_report_async(
    target: str,
    credentials: Credentials,
    timeout: float,
    data: DataKeys | None = None,
    view: pb.ReportView = pb.REPORT_VIEW_FULL,
) -> Fetched:
    """`fetch_report` on gRPC's asyncio API, for fan-outs that ask thousands of agents from
    one event loop: a task per call costs about half the CPU of a thread per call (no
    hand-offs of the interpreter between threads). Call it in a running event loop."""
    started = time.monotonic()
    try:
        dialled, options, channel_credentials = _channel_args(target, credentials)
        if channel_credentials is not None:
            channel = grpc.aio.secure_channel(dialled, channel_credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(dialled, options=options)
        async with channel:
            call = channel.unary_unary(
                GET_REPORT,
                request_serializer=pb.GetReportRequest.SerializeToString,
                response_deserializer=pb.GetReportResponse.FromString,
            )
            response: pb.GetReportResponse = await call(
                pb.GetReportRequest(view=view), timeout=timeout, metadata=credentials.metadata
            )
        return _fetched(target, response.report, data, started)
    except Exception as exc:
        return _not_fetched(target, exc, timeout, credentials, started)


def _fetched(target: str, message: pb.NodeReport, data: DataKeys | None, started: float) -> Fetched:
    """A report as it came (converting it may raise: an answer this client cannot read)."""
    report = wire.report_from_proto(message, data)
    return Fetched(target, report, message.agent_version, None, time.monotonic() - started)


def _not_fetched(
    target: str, exc: Exception, timeout: float, credentials: Credentials, started: float
) -> Fetched:
    """Why a GetReport gave no report: the failed call explained, or an answer this client
    cannot read (one target's problem, never the caller's)."""
    if isinstance(exc, grpc.RpcError):
        unreachable = explain(exc, timeout, credentials.tls)
    else:
        unreachable = Unreachable(Failure.ERROR, f"unreadable answer: {type(exc).__name__}: {exc}")
    return Fetched(target, None, unreachable=unreachable, seconds=time.monotonic() - started)


def _check_tls_files(ca_file: str | None, cert_file: str | None, key_file: str | None) -> None:
    """The CA and the client certificate and key, matched before a channel uses them: a bad
    pair fails the handshake later with words that do not name the file."""
    if ca_file is not None:
        check_ca(ca_file, "--tls-ca")
    if cert_file is not None and key_file is not None:
        check_key_pair(cert_file, key_file, "--tls-cert", "--tls-key")


def _read_pem(path: str | None, flag: str) -> bytes | None:
    """A PEM file's bytes (None for no path); raises UsageError."""
    return None if path is None else read_pem(path, flag)
