"""An audit from start to end in-process: a headless Service's name resolved (by an injected
resolver: no DNS traffic) to two real agents, one on 127.0.0.1 and one on ::1, same port."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from conftest import require
from gpuprobe.audit.run import AuditOptions, audit
from gpuprobe.targets import parse_targets
from serving import in_process_agent


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_a_dns_name_with_an_ipv4_and_an_ipv6_agent() -> None:
    require(ipv6_loopback(), "this machine has no IPv6 loopback (::1)")
    with in_process_agent("synthetic-h100-8gpu-healthy") as v4:
        port = v4.grpc_port
        with in_process_agent("synthetic-gpu-lost", grpc_listen=f"[::1]:{port}"):
            asked: list[tuple[str, int]] = []

            def resolve(name: str, p: int) -> Sequence[str]:
                asked.append((name, p))
                if name == "gone.test":
                    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
                return ["::1", "127.0.0.1"]

            options = AuditOptions(
                parse_targets(f"dns:gpuprobe.gpuprobe.svc.cluster.local:{port},dns:gone.test:9"),
                deadline=5,
            )
            report = audit(options, resolver=resolve)
    assert sorted(asked) == [("gone.test", 9), ("gpuprobe.gpuprobe.svc.cluster.local", port)]
    assert [(n.target, n.node, n.status.value) for n in report.nodes] == [
        (f"127.0.0.1:{port}", "synthetic-h100-8gpu-healthy", "OK"),
        (f"[::1]:{port}", "synthetic-gpu-lost", "CRITICAL"),
        ("dns:gone.test:9", None, "UNKNOWN"),
    ]
    last = report.nodes[2].unreachable
    assert last is not None
    assert (last.failure.value, last.reason) == (
        "dns",
        "gone.test does not resolve: Name or service not known",
    )
    assert report.exit_status() == 2
