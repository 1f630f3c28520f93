"""Every way a GetReport can fail in the field, made for real on loopback, and what it is
called: refused, timed out, unauthorised, TLS mismatches, not ready, not an agent."""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from certs import Pki, make_pki
from gpuprobe.checks.context import CheckContext
from gpuprobe.client import Credentials, fetch_report
from gpuprobe.config import Config
from gpuprobe.report import CheckResult
from gpuprobe.serve.agent import Agent
from gpuprobe.unreachable import Failure, Unreachable, explain
from gpuprobe.v1 import diagnostics_pb2 as pb
from grpc_standins import fails, hangs, report_of, standin, wants_token
from helpers import use_check
from serving import in_process_agent


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def why(target: str, credentials: Credentials | None = None, timeout: float = 2) -> Unreachable:
    fetched = fetch_report(target, credentials or Credentials(), timeout)
    assert fetched.report is None, "the call should have failed"
    assert fetched.unreachable is not None
    return fetched.unreachable


def test_nothing_listening_is_refused() -> None:
    assert why(f"127.0.0.1:{closed_port()}") == Unreachable(
        Failure.REFUSED, "connection refused: nothing listens at the address"
    )


def test_a_hung_agent_times_out_at_the_deadline() -> None:
    release = threading.Event()
    with standin(hangs(release)) as server:
        started = time.monotonic()
        got = why(server.target, timeout=0.5)
        elapsed = time.monotonic() - started
        release.set()
    assert got == Unreachable(
        Failure.TIMEOUT, "no answer within 0.5 s (the agent is down, hung or filtered)"
    )
    assert 0.5 <= elapsed < 1.5


def test_missing_and_wrong_tokens_are_unauthorised() -> None:
    with standin(wants_token("s3cret", report_of("synthetic-h100-8gpu-healthy"))) as server:
        assert why(server.target) == Unreachable(
            Failure.UNAUTHORISED, "refused our credentials (UNAUTHENTICATED): bearer token required"
        )
        assert why(server.target, Credentials(token="other")) == Unreachable(
            Failure.UNAUTHORISED, "refused our credentials (PERMISSION_DENIED): token not allowed"
        )
        fetched = fetch_report(server.target, Credentials(token="s3cret"), 2)
        assert fetched.report is not None
        assert fetched.report.node == "synthetic-h100-8gpu-healthy"


def test_plaintext_to_a_tls_agent(pki: Pki) -> None:
    with in_process_agent(tls_cert=pki.server_cert, tls_key=pki.server_key) as agent:
        assert why(f"127.0.0.1:{agent.grpc_port}") == Unreachable(
            Failure.TLS,
            "the agent closed the connection at setup: it serves TLS: call it with --tls-ca",
        )


def test_tls_to_a_plaintext_agent(pki: Pki) -> None:
    """gRPC says `SSL_ERROR_SSL: ... WRONG_VERSION_NUMBER`: the answer to our TLS hello was
    not TLS."""
    with in_process_agent() as agent:
        got = why(f"127.0.0.1:{agent.grpc_port}", Credentials.load(ca_file=pki.ca))
    assert got == Unreachable(
        Failure.TLS,
        "it does not speak TLS: call it without --tls-ca (a plain-text agent), or check the port",
    )


@pytest.fixture
def web_server() -> Iterator[http.server.ThreadingHTTPServer]:
    """A real HTTP/1.1 server on loopback (Python's own), as a web port given as a target."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_http1_server_is_not_an_agent(web_server: http.server.ThreadingHTTPServer) -> None:
    """gRPC says `Failed parsing HTTP/2 (Expected SETTINGS frame as the first frame, got
    frame type 79)`: an HTTP/1 answer to the HTTP/2 preface."""
    got = why(f"127.0.0.1:{web_server.server_address[1]}")
    assert got == Unreachable(
        Failure.NOT_AN_AGENT,
        "it does not speak gRPC (HTTP/2): an HTTP/1 server, such as an agent's /metrics port "
        "(the gRPC port is another), or one that wants TLS (--tls-ca)",
    )


def test_an_agents_metrics_port_given_as_its_grpc_target() -> None:
    with in_process_agent() as agent:
        got = why(f"127.0.0.1:{agent.metrics_port}")
    assert got.failure == Failure.NOT_AN_AGENT
    assert "such as an agent's /metrics port" in got.reason


def test_tls_to_an_http1_server(web_server: http.server.ThreadingHTTPServer, pki: Pki) -> None:
    got = why(f"127.0.0.1:{web_server.server_address[1]}", Credentials.load(ca_file=pki.ca))
    assert got.failure == Failure.TLS
    assert got.reason.startswith("it does not speak TLS: call it without --tls-ca")


def test_tls_to_an_https_server_without_http2(pki: Pki) -> None:
    """gRPC says `Cannot check peer: missing selected ALPN property.`: the handshake held but
    the server did not choose h2."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        got = why(f"127.0.0.1:{server.server_address[1]}", Credentials.load(ca_file=pki.ca))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert got == Unreachable(
        Failure.NOT_AN_AGENT,
        "it speaks TLS but not gRPC (HTTP/2): an HTTPS server, not an agent's gRPC port",
    )


def test_an_agent_certificate_from_another_ca(pki: Pki, tmp_path: Path) -> None:
    stranger_ca = str(Path(pki.ca).parent / "stranger-ca.crt")
    with in_process_agent(tls_cert=pki.server_cert, tls_key=pki.server_key) as agent:
        got = why(f"127.0.0.1:{agent.grpc_port}", Credentials.load(ca_file=stranger_ca))
    assert got.failure == Failure.TLS
    assert "CERTIFICATE_VERIFY_FAILED" in got.reason


def test_an_agent_certificate_for_another_name(pki: Pki) -> None:
    credentials = Credentials.load(ca_file=pki.ca, server_name="other.example")
    with in_process_agent(tls_cert=pki.server_cert, tls_key=pki.server_key) as agent:
        got = why(f"127.0.0.1:{agent.grpc_port}", credentials)
    assert got.failure == Failure.TLS
    assert got.reason.startswith("TLS handshake failed: ")
    assert "Hostname Verification Check failed" in got.reason


@pytest.mark.parametrize("client", ["none", "stranger"])
def test_an_mtls_agent_refuses_callers_without_its_certificate(pki: Pki, client: str) -> None:
    cert = {"none": (None, None), "stranger": (pki.stranger_cert, pki.stranger_key)}[client]
    credentials = Credentials.load(ca_file=pki.ca, cert_file=cert[0], key_file=cert[1])
    with in_process_agent(
        tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca
    ) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        assert why(target, credentials) == Unreachable(
            Failure.TLS,
            "the agent closed the connection at setup: it wants a client certificate its CA "
            "signed (--tls-cert, --tls-key)",
        )
        good = Credentials.load(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)
        fetched = fetch_report(target, good, 2)
        assert fetched.report is not None and fetched.unreachable is None


@pytest.fixture
def starting_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    """A real agent whose first round of checks has not finished."""
    release = threading.Event()

    def slow(ctx: CheckContext, cfg: Config) -> CheckResult:
        release.wait(30)
        return CheckResult("slow", "done")

    use_check(monkeypatch, "slow", slow)
    with in_process_agent(names=["slow"], wait=False) as agent:
        try:
            yield agent
        finally:
            release.set()  # before the agent stops


def test_a_summary_whose_facts_are_not_json_is_an_unreadable_answer() -> None:
    broken = pb.GetReportResponse(
        report=pb.NodeReport(
            node="n", checks=[pb.CheckResult(name="driver", data_json='{"driver_version": 550')]
        )
    )
    with standin(lambda context: broken) as server:
        assert why(server.target) == Unreachable(
            Failure.ERROR,
            "unreadable answer: ValueError: the driver check's data_json is not JSON: "
            "Expecting ',' delimiter: line 1 column 23 (char 22)",
        )


def test_an_agent_without_a_report_yet_is_not_ready(starting_agent: Agent) -> None:
    assert why(f"127.0.0.1:{starting_agent.grpc_port}") == Unreachable(
        Failure.NOT_READY, "the agent has no report yet: the first round of checks is running"
    )


def test_a_grpc_server_without_the_api_is_not_an_agent() -> None:
    with standin(None) as server:
        assert why(server.target) == Unreachable(
            Failure.NOT_AN_AGENT,
            "answers gRPC but not gpuprobe.v1.NodeDiagnostics/GetReport: Method not found!",
        )


def test_other_errors_are_named_by_their_code() -> None:
    with standin(fails(grpc.StatusCode.INTERNAL, "disk on fire")) as server:
        assert why(server.target) == Unreachable(Failure.ERROR, "INTERNAL: disk on fire")


def test_a_host_name_that_does_not_resolve() -> None:
    class Failed(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            # gRPC's words for a static target whose name the resolver does not know.
            return (
                "DNS resolution failed for gpu-node-9:50051: C-ares status is not ARES_SUCCESS "
                "qtype=A name=gpu-node-9 is_balancer=0: Domain name not found"
            )

    assert explain(Failed(), 5, tls=False) == Unreachable(
        Failure.UNAVAILABLE,
        "the host name does not resolve: DNS resolution failed for gpu-node-9:50051: C-ares "
        "status is not ARES_SUCCESS qtype=A name=gpu-node-9 is_balancer=0: Domain name not "
        "found",
    )


def test_an_error_without_code_or_details() -> None:
    assert explain(grpc.RpcError(), 5, tls=False) == Unreachable(Failure.ERROR, "UNKNOWN: -")


def test_an_answer_that_is_not_a_readable_report() -> None:
    broken = pb.GetReportResponse(report=pb.NodeReport(node="from-the-future"))
    broken.report.time.seconds = 2**62  # past what a timestamp may hold
    with standin(lambda context: broken) as server:
        assert why(server.target) == Unreachable(
            Failure.ERROR,
            "unreadable answer: ValueError: Timestamp is not valid: Seconds 4611686018427387904 "
            "must be in range [-62135596800, 253402300799].",
        )
