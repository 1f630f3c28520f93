"""The gRPC client library: connect to an agent (token, TLS, mTLS) and read its reports.

Used by `gpuprobe audit`, the mesh, and any tool that talks to agents:

    with Client("10.0.0.7:50051", token=read_token_file("/etc/gpuprobe/token")) as agent:
        report = agent.get_report()
        for check, finding in report.findings():
            print(check, finding.code, finding.resource)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuprobe.report import NodeReport
from gpuprobe.serve import convert
from gpuprobe.serve.security import read_token
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc

# Reports are a few kB per check; leave room for large nodes.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024


def read_token_file(path: str) -> str:
    """The bearer token in a file (as `--token-file` reads it); raises UsageError."""
    return read_token(path)


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
    ) -> None:
        """Connect to `target` (host:port): TLS when `ca_file` is given (mTLS with
        `cert_file` and `key_file`); `server_name` overrides the name the certificate must
        carry; `token` is sent as `authorization: Bearer <token>`."""
        options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES)]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if ca_file or cert_file:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(ca_file),
                private_key=_read(key_file),
                certificate_chain=_read(cert_file),
            )
            self.channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(target, options=options)
        self.target = target
        self._stub = pb_grpc.NodeDiagnosticsStub(self.channel)  # type: ignore[no-untyped-call]
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def get_report_message(self, timeout: float = 10.0) -> pb.NodeReport:
        """The agent's cached report as the proto message (with per-check times)."""
        response: pb.GetReportResponse = self._stub.GetReport(
            pb.GetReportRequest(), timeout=timeout
        )
        return response.report

    def get_report(self, timeout: float = 10.0) -> NodeReport:
        """The agent's cached report."""
        return convert.report_from_proto(self.get_report_message(timeout))

    def run_checks(self, checks: Sequence[str] = (), timeout: float = 30.0) -> NodeReport:
        """Run the named checks (all when empty) on the agent now; their fresh results."""
        response = self._stub.RunChecks(
            pb.RunChecksRequest(checks=list(checks)), timeout=timeout, metadata=self._metadata
        )
        return convert.report_from_proto(response.report)

    def watch_reports(self, timeout: float | None = None) -> Iterator[NodeReport]:
        """The report now, then each changed report, until `timeout` or the agent stops."""
        for response in self._stub.WatchReports(pb.WatchReportsRequest(), timeout=timeout):
            yield convert.report_from_proto(response.report)

    def clear_findings(
        self, gpu: int | None = None, timeout: float = 30.0
    ) -> tuple[int, NodeReport]:
        """Forget sticky XID findings of one GPU (all when None); how many, and the report."""
        request = pb.ClearFindingsRequest() if gpu is None else pb.ClearFindingsRequest(gpu=gpu)
        response = self._stub.ClearFindings(request, timeout=timeout, metadata=self._metadata)
        return int(response.cleared), convert.report_from_proto(response.report)

    def measure_bandwidth(
        self, request: pb.MeasureBandwidthRequest, timeout: float = 60.0
    ) -> pb.MeasureBandwidthResponse:
        """Have the agent measure its bandwidth toward the peer the request names."""
        response: pb.MeasureBandwidthResponse = self._stub.MeasureBandwidth(
            request, timeout=timeout, metadata=self._metadata
        )
        return response

    def open_bandwidth_sink(
        self, request: pb.OpenBandwidthSinkRequest, timeout: float = 10.0
    ) -> pb.OpenBandwidthSinkResponse:
        """Ask the agent for a one-time sink for a test from this caller (agents call this)."""
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


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()
