"""The default listen addresses take IPv6 and IPv4 (dual-stack clusters): `gpuprobe serve` on
`[::]` answers gRPC and HTTP over 127.0.0.1 and ::1 alike; on a kernel without IPv6 the
metrics server falls back to every IPv4 address. Only loopback is connected to."""

from __future__ import annotations

import errno
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from conftest import snapshot
from gpuprobe.cli import build_parser
from gpuprobe.client import Client
from gpuprobe.serve import metrics_http
from gpuprobe.serve.metrics_http import MetricsPage, MetricsServer
from serving import serve_process

HAS_IPV6_LOOPBACK = socket.has_ipv6 and any(
    info[0] == socket.AF_INET6 for info in socket.getaddrinfo("::1", 0, type=socket.SOCK_STREAM)
)


def status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


def test_the_defaults_are_the_dual_stack_wildcard() -> None:
    args = build_parser().parse_args(["serve"])
    assert args.grpc_listen == "[::]:50051"
    assert args.metrics_listen == "[::]:9760"


@pytest.mark.skipif(not HAS_IPV6_LOOPBACK, reason="this machine has no IPv6 loopback")
def test_serve_on_the_wildcard_answers_both_families_on_loopback() -> None:
    with serve_process(
        "--grpc-listen",
        "[::]:0",
        "--metrics-listen",
        "[::]:0",
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
    ) as agent:
        for host in ("127.0.0.1", "[::1]"):
            assert status(f"http://{host}:{agent.metrics_port}/healthz") == 200, host
            with Client(f"{host}:{agent.grpc_port}") as client:
                assert client.health() == "SERVING", host


def test_the_metrics_server_falls_back_to_ipv4_without_ipv6(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel booted with ipv6.disable=1 refuses AF_INET6 sockets (EAFNOSUPPORT)."""

    def no_ipv6(self: object, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(metrics_http._Server6, "__init__", no_ipv6)
    page = MetricsPage(CollectorRegistry(), CollectorRegistry())
    server = MetricsServer("[::]:0", page, lambda: (200, "ok\n"))
    server.start()
    try:
        assert server.server.address_family == socket.AF_INET
        assert server.server.server_address[0] == "0.0.0.0"
        assert status(f"http://127.0.0.1:{server.port}/healthz") == 200
    finally:
        server.stop()
    with pytest.raises(Exception, match="--metrics-listen \\[::1\\]:0"):
        MetricsServer("[::1]:0", page, lambda: (200, "ok\n"))  # a named address: no fallback


@pytest.mark.skipif(not HAS_IPV6_LOOPBACK, reason="this machine has no IPv6 loopback")
def test_the_wildcard_socket_is_dual_stack_whatever_bindv6only_says() -> None:
    """net.ipv6.bindv6only=1 (some distributions' choice) would make `[::]` IPv6 only: the
    server turns IPV6_V6ONLY off on its socket itself."""
    page = MetricsPage(CollectorRegistry(), CollectorRegistry())
    server = MetricsServer("[::]:0", page, lambda: (200, "ok\n"))
    try:
        sock = server.server.socket
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
    finally:
        server.server.server_close()  # never started: nothing to shut down
