"""`--targets`: the list syntax, and DNS discovery with the system resolver (localhost only)
and with injected resolvers (no DNS traffic)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

import pytest

from gpuprobe.errors import UsageError
from gpuprobe.targets import (
    Discovery,
    DnsFailure,
    TargetSpec,
    discover,
    join_host_port,
    parse_target,
    parse_targets,
    system_resolver,
)


def test_a_list_of_hosts_addresses_and_dns_names() -> None:
    specs = parse_targets(
        " 10.0.0.7:50051, gpu-node-3:50051,[fd00::7]:50051,"
        "dns:gpuprobe.gpuprobe.svc.cluster.local:50051,"
    )
    assert specs == [
        TargetSpec("10.0.0.7", 50051),
        TargetSpec("gpu-node-3", 50051),
        TargetSpec("fd00::7", 50051),
        TargetSpec("gpuprobe.gpuprobe.svc.cluster.local", 50051, dns=True),
    ]
    assert [s.address for s in specs] == [
        "10.0.0.7:50051",
        "gpu-node-3:50051",
        "[fd00::7]:50051",
        "gpuprobe.gpuprobe.svc.cluster.local:50051",
    ]
    assert str(specs[3]) == "dns:gpuprobe.gpuprobe.svc.cluster.local:50051"
    assert str(specs[2]) == "[fd00::7]:50051"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--targets names no agent"),
        (" , ,", "--targets names no agent"),
        ("10.0.0.7", "--targets: '10.0.0.7' is not HOST:PORT or dns:NAME:PORT"),
        (":50051", "--targets: ':50051' is not HOST:PORT or dns:NAME:PORT"),
        ("dns:50051", "--targets: 'dns:50051' is not HOST:PORT or dns:NAME:PORT"),
        ("node:", "--targets: 'node:' is not HOST:PORT or dns:NAME:PORT"),
        ("node:http", "--targets: 'node:http': the port must be 1-65535"),
        ("node:0", "--targets: 'node:0': the port must be 1-65535"),
        ("node:65536", "--targets: 'node:65536': the port must be 1-65535"),
        (
            "fd00::7:50051",
            "--targets: 'fd00::7:50051': write an IPv6 address in brackets, [fd00::7]",
        ),
        ("[node]:50051", "--targets: '[node]:50051': brackets hold an IPv6 address"),
        ("[fd00::7:50051", "--targets: '[fd00::7:50051': brackets hold an IPv6 address"),
        (
            "dns:10.0.0.7:50051",
            "--targets: 'dns:10.0.0.7:50051': dns: takes a name, not an address",
        ),
        ("dns:[::1]:50051", "--targets: 'dns:[::1]:50051': dns: takes a name, not an address"),
        ("no de:50051", "--targets: 'no de:50051': not a host name or address"),
        ("a/b:50051", "--targets: 'a/b:50051': not a host name or address"),
        (
            "http://127.0.0.1:45489",
            "--targets: 'http://127.0.0.1:45489' is a URL; a target is HOST:PORT, not a URL: "
            "127.0.0.1:45489",
        ),
        (
            "grpc://[fd00::7]:50051/",
            "--targets: 'grpc://[fd00::7]:50051/' is a URL; a target is HOST:PORT, not a URL: "
            "[fd00::7]:50051",
        ),
        (
            "https://gpu-node-1/metrics",
            "--targets: 'https://gpu-node-1/metrics' is a URL; a target is HOST:PORT, not a URL "
            "(the agent's gRPC port: 50051 in the DaemonSet)",
        ),
        (
            "http://node:99999",
            "--targets: 'http://node:99999' is a URL; a target is HOST:PORT, not a URL "
            "(the agent's gRPC port: 50051 in the DaemonSet)",
        ),
    ],
)
def test_malformed_entries_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_targets(text)
    assert str(err.value) == message


def test_join_host_port_brackets_ipv6() -> None:
    assert join_host_port("::1", 50051) == "[::1]:50051"
    assert join_host_port("127.0.0.1", 50051) == "127.0.0.1:50051"
    assert parse_target(join_host_port("::1", 7)) == TargetSpec("::1", 7)


def resolver(answers: dict[str, Sequence[str] | Exception]) -> object:
    def resolve(name: str, port: int) -> Sequence[str]:
        answer = answers[name]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return resolve


def test_dns_names_become_every_address_once_in_order() -> None:
    specs = parse_targets("10.0.0.9:50051,dns:agents.test:50051,10.0.0.2:50051,dns:more.test:50051")
    found = discover(
        specs,
        timeout=1,
        resolver=resolver(  # type: ignore[arg-type]
            {
                # a resolver rotates and repeats: the discovery orders and dedupes
                "agents.test": ["10.0.0.10", "fd00::1", "10.0.0.2", "10.0.0.10", "10.0.0.9"],
                "more.test": ["10.0.0.3"],
            }
        ),
    )
    assert found == Discovery(
        addresses=[
            "10.0.0.9:50051",
            "10.0.0.2:50051",  # numeric order: 10.0.0.2 before 10.0.0.10
            "10.0.0.10:50051",
            "[fd00::1]:50051",  # IPv4 before IPv6
            "10.0.0.3:50051",
        ],
        failures=[],
    )


def test_names_that_give_no_address_are_failures_not_errors() -> None:
    specs = parse_targets("dns:gone.test:50051,dns:empty.test:50051,dns:odd.test:1,10.0.0.1:1")
    found = discover(
        specs,
        timeout=1,
        resolver=resolver(  # type: ignore[arg-type]
            {
                "gone.test": socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
                "empty.test": [],
                "odd.test": ["not-an-address"],
            }
        ),
    )
    assert found.addresses == ["10.0.0.1:1"]
    assert found.failures == [
        DnsFailure(
            TargetSpec("gone.test", 50051, True),
            "gone.test does not resolve: Name or service not known",
        ),
        DnsFailure(TargetSpec("empty.test", 50051, True), "empty.test has no address"),
        DnsFailure(
            TargetSpec("odd.test", 1, True),
            "odd.test: 'not-an-address' does not appear to be an IPv4 or IPv6 address",
        ),
    ]


def test_a_hung_lookup_costs_its_timeout_and_lookups_run_at_once() -> None:
    release = threading.Event()

    def slow(name: str, port: int) -> Sequence[str]:
        release.wait(10)
        return ["10.0.0.1"]

    specs = parse_targets("dns:a.test:1,dns:b.test:1,dns:c.test:1")
    started = time.monotonic()
    found = discover(specs, timeout=0.3, resolver=slow)
    elapsed = time.monotonic() - started
    release.set()
    assert [f.reason for f in found.failures] == [
        "resolving a.test took over 0.3 s",
        "resolving b.test took over 0.3 s",
        "resolving c.test took over 0.3 s",
    ]
    assert found.addresses == []
    # Concurrent: well under the three timeouts one after another would take.
    assert 0.3 <= elapsed < 0.8


def test_the_system_resolver_reads_localhost_from_the_hosts_file() -> None:
    assert "127.0.0.1" in system_resolver("localhost", 50051)
    found = discover(parse_targets("dns:localhost:50051"), timeout=5)
    assert "127.0.0.1:50051" in found.addresses
    assert found.failures == []
