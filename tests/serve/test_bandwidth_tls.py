"""Bandwidth tests between agents over TLS: an agent asks a peer for a sink itself only when
it verified the peer's certificate, at the one address it resolved, and in an mTLS fleet whose
certificates are server-only it presents a client certificate of its own (issue 17, items 19
and 27). Certificates are made at test time; everything runs on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from certs import Pki, make_pki
from gpuprobe import wire
from gpuprobe.client import Client, Credentials
from gpuprobe.measure.bandwidth import PEER_CALL_SECONDS
from gpuprobe.mesh.run import MeshOptions, Peer, run_mesh
from gpuprobe.mesh.verdict import OK, Thresholds
from gpuprobe.serve.agent import Agent, ServeOptions
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc
from serving import in_process_agent


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@contextmanager
def mtls_pair(pki: Pki, **sender: Any) -> Iterator[tuple[Agent, Agent]]:
    """Two agents of an mTLS fleet with server-only certificates; `sender` adds options to the
    first (the one that sends)."""
    server = {"tls_cert": pki.server_cert, "tls_key": pki.server_key, "tls_client_ca": pki.ca}
    with ExitStack() as stack:
        a = stack.enter_context(
            in_process_agent("kvm-epyc-nogpu", node_name="node-a", **server, **sender)
        )
        b = stack.enter_context(in_process_agent("kvm-epyc-nogpu", node_name="node-b", **server))
        yield a, b


def caller(pki: Pki, target: str) -> Client:
    """The orchestrating caller, with a client certificate of the fleet."""
    return Client(target, ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key)


def measure(pki: Pki, a: Agent, peer: str) -> pb.MeasureBandwidthResponse:
    """MeasureBandwidth on `a` toward `peer`, no sink given: `a` asks the peer itself."""
    request = pb.MeasureBandwidthRequest(peer=peer, streams=2)
    request.duration.FromTimedelta(timedelta(seconds=0.5))
    request.warmup.FromTimedelta(timedelta(seconds=0.1))
    with caller(pki, f"127.0.0.1:{a.grpc_port}") as client:
        return client.measure_bandwidth(request, timeout=30)


def test_an_agent_with_a_client_certificate_of_its_own_tests_an_mtls_peer(pki: Pki) -> None:
    with mtls_pair(pki, tls_client_cert=pki.client_cert, tls_client_key=pki.client_key) as (
        a,
        b,
    ):
        response = measure(pki, a, f"127.0.0.1:{b.grpc_port}")
    assert (response.source, response.peer) == ("node-a", "node-b")
    assert response.bytes_per_second > 10e6


def test_a_server_only_certificate_is_turned_away_and_the_error_says_what_to_do(
    pki: Pki,
) -> None:
    # Before: the agent presented its server certificate (serverAuth only) and the peer's
    # handshake refused it, with nothing to say why.
    with mtls_pair(pki) as (a, b), pytest.raises(grpc.RpcError) as err:
        measure(pki, a, f"127.0.0.1:{b.grpc_port}")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert wire.failed_side(err.value) == pb.TEST_SIDE_PEER
    assert err.value.details() == (
        "127.0.0.1 did not answer as a gpuprobe agent of this fleet (this agent presents its "
        "server certificate to peers: if it lacks the clientAuth key usage, give the agent "
        "one of its own with --tls-client-cert)"
    )


def test_the_mesh_runs_over_mtls_with_sinks_it_opens(pki: Pki) -> None:
    with mtls_pair(pki) as (a, b):
        credentials = Credentials.load(
            ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key
        )
        peers = [
            Peer(f"127.0.0.1:{a.grpc_port}", "node-a"),
            Peer(f"127.0.0.1:{b.grpc_port}", "node-b"),
        ]
        options = MeshOptions(
            seconds=0.3, warmup=0.1, streams=2, thresholds=Thresholds(None, 3, 0.95)
        )
        result = run_mesh(peers, options, lambda t: Client(t, credentials=credentials))
    assert [(link.source, link.target, link.verdict) for link in result.links] == [
        ("node-a", "node-b", OK),
        ("node-b", "node-a", OK),
    ]


def test_the_peer_name_is_resolved_once_and_the_data_goes_where_the_certificate_was_checked(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name that resolves elsewhere the second time (two records, DNS rebinding): before,
    # the agent resolved the name again for each data stream.
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "localhost":
            asked.append(host)
            host = "127.0.0.1" if len(asked) == 1 else "127.0.0.3"
        return real(host, *args, **kwargs)

    with mtls_pair(pki, tls_client_cert=pki.client_cert, tls_client_key=pki.client_key) as (
        a,
        b,
    ):
        monkeypatch.setattr(socket, "getaddrinfo", rebinding)
        response = measure(pki, a, f"localhost:{b.grpc_port}")
    assert response.peer == "node-b" and response.bytes_per_second > 10e6
    assert asked == ["localhost"]


def test_client_certificate_flags_come_in_pairs_and_need_mtls(pki: Pki) -> None:
    from gpuprobe.errors import UsageError

    with pytest.raises(UsageError, match="--tls-client-cert and --tls-client-key go together"):
        ServeOptions(
            tls_cert=pki.server_cert,
            tls_key=pki.server_key,
            tls_client_ca=pki.ca,
            tls_client_cert=pki.client_cert,
        )
    with pytest.raises(UsageError, match="--tls-client-cert needs --tls-client-ca"):
        ServeOptions(
            tls_cert=pki.server_cert,
            tls_key=pki.server_key,
            tls_client_cert=pki.client_cert,
            tls_client_key=pki.client_key,
        )


@pytest.mark.slow  # three failures of 5 s each, one after another
def test_over_tls_foreign_services_learn_no_credentials_and_all_look_alike(
    pki: Pki, tmp_path: Path
) -> None:
    # A caller with the token aims the agent (no sink given) at a closed port, a silent one
    # and one that answers garbage: each gets at most a TLS ClientHello, never the token,
    # and the three failures read alike after the same time.
    token = tmp_path / "token"
    token.write_text("fleet-token-never-leaves\n")
    received: list[bytes] = []

    def serve(server: socket.socket, answer: bytes | None) -> None:
        server.settimeout(PEER_CALL_SECONDS + 2)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(PEER_CALL_SECONDS + 1)
            data = b""
            try:
                while chunk := conn.recv(65536):
                    data += chunk
                    if answer is not None:
                        conn.sendall(answer)
            except OSError:
                pass
            received.append(data)

    def attempt(port: int) -> None:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            measure(pki, a, f"127.0.0.1:{port}")
        answers.append((err.value.code(), err.value.details(), time.monotonic() - started))

    answers: list[tuple[grpc.StatusCode, str, float]] = []
    with (
        mtls_pair(
            pki,
            tls_client_cert=pki.client_cert,
            tls_client_key=pki.client_key,
            token_file=str(token),
        ) as (a, _),
        socket.socket() as closed,
    ):
        closed.bind(("127.0.0.1", 0))
        for answer in (None, b"HTTP/1.1 400 Bad Request\r\n\r\n"):
            server = socket.create_server(("127.0.0.1", 0))
            thread = threading.Thread(target=serve, args=(server, answer), daemon=True)
            thread.start()
            attempt(server.getsockname()[1])
            thread.join(PEER_CALL_SECONDS + 3)
            server.close()
        attempt(closed.getsockname()[1])
    assert {(code, details) for code, details, _ in answers} == {
        (grpc.StatusCode.UNAVAILABLE, "127.0.0.1 did not answer as a gpuprobe agent of this fleet")
    }
    assert all(PEER_CALL_SECONDS - 0.05 <= took < PEER_CALL_SECONDS + 1.5 for *_, took in answers)
    assert received and all(b"fleet-token-never-leaves" not in data for data in received)


class _NonsenseSinks(pb_grpc.NodeDiagnosticsServicer):
    """A peer over the fleet's TLS whose OpenBandwidthSink answers a sink no sender can use."""

    def __init__(self, answer: pb.OpenBandwidthSinkResponse) -> None:
        self.answer = answer

    def OpenBandwidthSink(
        self, request: pb.OpenBandwidthSinkRequest, context: Any
    ) -> pb.OpenBandwidthSinkResponse:
        return self.answer


@contextmanager
def nonsense_peer(pki: Pki, answer: pb.OpenBandwidthSinkResponse) -> Iterator[int]:
    """A real gRPC server with the fleet's server certificate; yields its port."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    pb_grpc.add_NodeDiagnosticsServicer_to_server(_NonsenseSinks(answer), server)
    key, cert = Path(pki.server_key).read_bytes(), Path(pki.server_cert).read_bytes()
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    server.start()
    try:
        yield port
    finally:
        server.stop(0)


TICKET_PROBLEM, GOOD_TICKET = "a ticket that is not 64 hex digits", "ab" * 32


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (pb.OpenBandwidthSinkResponse(port=5201, ticket="zz" * 32), TICKET_PROBLEM),
        (pb.OpenBandwidthSinkResponse(port=5201, ticket=""), TICKET_PROBLEM),
        (
            pb.OpenBandwidthSinkResponse(port=70000, ticket=GOOD_TICKET),
            "port 70000, which is not a port",
        ),
        (pb.OpenBandwidthSinkResponse(port=0, ticket=GOOD_TICKET), "port 0, which is not a port"),
    ],
)
def test_a_peer_answering_a_sink_no_sender_can_use_is_refused_clearly(
    pki: Pki, answer: pb.OpenBandwidthSinkResponse, problem: str
) -> None:
    """Before: the peer's ticket went to bytes.fromhex (ValueError) and its port to the
    socket (OverflowError), and the caller got UNKNOWN."""
    answer.node, answer.address = "node-b", "127.0.0.1"
    with (
        mtls_pair(pki, tls_client_cert=pki.client_cert, tls_client_key=pki.client_key) as (a, _),
        nonsense_peer(pki, answer) as port,
        pytest.raises(grpc.RpcError) as err,
    ):
        measure(pki, a, f"127.0.0.1:{port}")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert wire.failed_side(err.value) == pb.TEST_SIDE_PEER
    assert err.value.details() == f"127.0.0.1 answered a sink with {problem}"
