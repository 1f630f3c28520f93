"""Agents whose advertised addresses are not the kernel's default source address toward
their peers (127.0.0.1, .2 and .3 on loopback, as a multi-homed GPU node's fabric address
beside its primary one): each sender binds its streams to the address the sink was opened
for, so every link is measured; a sender that cannot is blamed itself, not its peer."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from gpuprobe import wire
from gpuprobe.audit.fanout import fetch_all
from gpuprobe.client import Client, Credentials
from gpuprobe.measure import tcp
from gpuprobe.measure.bandwidth import address_facing
from gpuprobe.mesh.run import MeshOptions, identify, run_mesh
from gpuprobe.mesh.verdict import OK, Thresholds
from gpuprobe.v1 import diagnostics_pb2 as pb
from helpers import config
from serving import in_process_agent

TOKEN = "mesh-token"
CALM = Thresholds(min_relative_drop=1.0)  # about which links work, never their rates


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[str]]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    cfg = config(bandwidth={"peer_networks": ["127.0.0.0/8"]})
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                in_process_agent(
                    "kvm-epyc-nogpu",
                    config=cfg,
                    token_file=str(token),
                    node_name=f"n{i}",
                    grpc_listen=f"127.0.0.{i}:0",
                )
            )
            for i in range(1, 4)
        ]
        yield [f"127.0.0.{i}:{a.grpc_port}" for i, a in enumerate(started, 1)]


def connect(target: str) -> Client:
    return Client(target, token=TOKEN)


def test_agents_on_127_0_0_1_2_3_measure_every_link(agents: list[str]) -> None:
    peers, unreachable = identify(fetch_all(agents, Credentials(token=TOKEN), deadline=3))
    assert unreachable == []
    result = run_mesh(
        peers, MeshOptions(seconds=0.4, warmup=0.1, streams=2, thresholds=CALM), connect
    )
    assert sorted((link.source, link.target, link.verdict) for link in result.links) == [
        (s, t, OK) for s in ("n1", "n2", "n3") for t in ("n1", "n2", "n3") if s != t
    ]
    assert all(link.bytes_per_second for link in result.links)
    assert result.findings == []


def test_the_sink_names_the_address_it_accepts_streams_from(agents: list[str]) -> None:
    with connect(agents[2]) as receiver:
        sink = receiver.open_bandwidth_sink(
            pb.OpenBandwidthSinkRequest(transport="tcp", streams=1, sender="127.0.0.2"), timeout=5
        )
    # It listens on n3's address facing the sender (the kernel's route), and accepts only it.
    assert (sink.address, sink.sender) == (address_facing("127.0.0.2"), "127.0.0.2")


def test_a_sender_address_outside_the_peer_networks_is_refused_as_invalid(
    agents: list[str],
) -> None:
    """A sink opened for 192.0.2.7 (outside these agents' peer networks): n1 sends from no
    such address, and says so without trying it (issue 41 item 10: trying told at once
    whether the address is n1's; one within the networks that n1 does not hold is told as a
    sink that did not prove itself: tests/measure/test_bandwidth.py)."""
    with connect(agents[2]) as receiver:
        sink = receiver.open_bandwidth_sink(
            pb.OpenBandwidthSinkRequest(transport="tcp", streams=1, sender="127.0.0.2"), timeout=5
        )
    sink.sender = "192.0.2.7"
    request = pb.MeasureBandwidthRequest(peer=agents[2], transport="tcp", streams=1, sink=sink)
    with connect(agents[0]) as sender, pytest.raises(grpc.RpcError) as err:
        sender.measure_bandwidth(request, timeout=20)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert wire.failed_side(err.value) == pb.TEST_SIDE_SOURCE
    assert err.value.details() == (
        "the sink's sender 192.0.2.7 is not within this agent's peer networks "
        "(bandwidth.peer_networks)"
    )


def test_send_binds_its_streams_to_the_source_address() -> None:
    sink = tcp.TcpSink("127.0.0.3", "127.0.0.2", streams=1, max_bytes=10**10, max_seconds=10)
    try:
        result = tcp.send(
            "127.0.0.3", sink.port, sink.token, 1, 0.2, 0.05, max_bytes=10**8, source="127.0.0.2"
        )
    finally:
        sink.close()
    assert result.streams[0].bytes_received > 0
    assert sink.stats.refused == {}
