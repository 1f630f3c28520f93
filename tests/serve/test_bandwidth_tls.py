"""Bandwidth tests between agents over TLS: an agent asks a peer for a sink itself only when
it verified the peer's certificate, at the one address it resolved, and in an mTLS fleet whose
certificates are server-only it presents a client certificate of its own (issue 17, items 19
and 27). Certificates are made at test time; everything runs on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Any

import grpc
import pytest

from certs import Pki, make_pki
from gpuprobe import wire
from gpuprobe.client import Client, Credentials
from gpuprobe.mesh.run import MeshOptions, Peer, run_mesh
from gpuprobe.mesh.verdict import OK, Thresholds
from gpuprobe.serve.agent import Agent, ServeOptions
from gpuprobe.v1 import diagnostics_pb2 as pb
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
