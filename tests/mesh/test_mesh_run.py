"""Running a mesh over real agents on loopback: rounds, directions, failures, rendering."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from conftest import gpuprobe, require_tool
from gpuprobe.audit.fanout import fetch_all
from gpuprobe.client import Client, Credentials
from gpuprobe.mesh.render import render_mesh
from gpuprobe.mesh.run import InvalidTest, MeshOptions, Peer, identify, run_mesh
from gpuprobe.mesh.verdict import FAILED, OK, Thresholds
from serving import in_process_agent

TOKEN = "mesh-token"
CALM = Thresholds(min_relative_drop=0.95)  # loopback figures swing with the machine's load


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[str]]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                in_process_agent("kvm-epyc-nogpu", token_file=str(token), node_name=f"n{i}")
            )
            for i in range(1, 4)
        ]
        yield [f"127.0.0.1:{a.grpc_port}" for a in started]


def connect(target: str) -> Client:
    return Client(target, token=TOKEN)


def fetched(targets: list[str]) -> list:  # type: ignore[type-arg]
    return fetch_all(targets, Credentials(token=TOKEN), deadline=3)


def test_full_mesh_over_three_agents_tests_every_pair_both_ways(agents: list[str]) -> None:
    peers, unreachable = identify(fetched(agents))
    assert unreachable == []
    assert [p.node for p in peers] == ["n1", "n2", "n3"]
    options = MeshOptions(seconds=0.4, warmup=0.1, streams=2, thresholds=CALM)
    result = run_mesh(peers, options, connect)
    assert sorted((link.source, link.target) for link in result.links) == [
        ("n1", "n2"),
        ("n1", "n3"),
        ("n2", "n1"),
        ("n2", "n3"),
        ("n3", "n1"),
        ("n3", "n2"),
    ]
    assert all(link.verdict == OK and link.bytes_per_second for link in result.links)
    assert result.findings == [] and result.status.value == "OK"
    text = render_mesh(result)
    assert text.splitlines()[0] == "tcp bandwidth, Gbit/s (row sends to column)"
    assert text.splitlines()[-1] == "status OK"


def test_a_dead_agent_is_unreachable_and_the_rest_is_tested(agents: list[str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
        peers, unreachable = identify(fetched([*agents, dead]))
    assert [(f.code, f.resource) for f in unreachable] == [("PEER_UNREACHABLE", f"peer:{dead}")]
    # A peer that answered its name and then died: its links fail, it is named once.
    ghost = Peer(dead, "ghost")
    result = run_mesh(
        [*peers[:2], ghost], MeshOptions(seconds=0.3, warmup=0.1, thresholds=CALM), connect
    )
    failed = sorted((link.source, link.target) for link in result.links if link.verdict == FAILED)
    assert failed == [("ghost", "n1"), ("ghost", "n2"), ("n1", "ghost"), ("n2", "ghost")]
    assert [(f.code, f.severity.value, f.resource) for f in result.findings] == [
        ("PEER_UNREACHABLE", "CRITICAL", "peer:ghost")
    ]
    assert result.status.value == "CRITICAL"


def test_quick_mode_samples_matchings_then_retests_suspects(agents: list[str]) -> None:
    peers, _ = identify(fetched(agents))
    options = MeshOptions(
        mode="quick", matchings=2, seconds=0.3, warmup=0.1, seed=1, thresholds=CALM
    )
    result = run_mesh(peers, options, connect)
    assert len(result.links) == 2 * 2  # two matchings of one pair (3 nodes), both ways
    assert result.findings == []


def test_a_sender_without_a_usable_rdma_device_is_unavailable_not_its_peer(
    tmp_path: Path,
) -> None:
    # The snapshot lists mlx5_0 in sysfs; the real ib_write_bw finds no device on this machine,
    # as on a node whose verbs stack is broken: each sender's own fault, found before any sink.
    require_tool("ib_write_bw")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with ExitStack() as stack:
        targets = [
            f"127.0.0.1:{agent.grpc_port}"
            for agent in (
                stack.enter_context(
                    in_process_agent(
                        "synthetic-ndr-fabric-healthy", token_file=str(token), node_name=name
                    )
                )
                for name in ("node-a", "node-b")
            )
        ]
        peers, _ = identify(fetched(targets))
        options = MeshOptions(transport="rdma", rdma_device="mlx5_0", seconds=1, force=True)
        result = run_mesh(peers, options, connect)
    assert [(link.source, link.blamed, link.unavailable) for link in result.links] == [
        ("node-a", "node-a", True),
        ("node-b", "node-b", True),
    ]
    assert [(f.code, f.severity.value, f.resource) for f in result.findings] == [
        ("BANDWIDTH_TEST_UNAVAILABLE", "UNKNOWN", "peer:node-a"),
        ("BANDWIDTH_TEST_UNAVAILABLE", "UNKNOWN", "peer:node-b"),
    ]
    assert result.findings[0].message == (
        "node-a's bandwidth could not be tested: the RDMA test cannot run on node-a: "
        "ib_write_bw: Unable to find the Infiniband/RoCE device"
    )


def test_parameters_an_agent_refuses_stop_the_mesh_instead_of_blaming_peers(
    agents: list[str],
) -> None:
    peers, _ = identify(fetched(agents))
    options = MeshOptions(seconds=0.3, warmup=0.1, streams=65, thresholds=CALM)
    with pytest.raises(InvalidTest, match=r"^n\d refused the test: 65 streams: at most 64$"):
        run_mesh(peers, options, connect)


@pytest.mark.parametrize(
    ("streams", "message"),
    [("65", "at most 64: 65"), ("0", "must be at least 1: 0"), ("x", "not a whole number")],
)
def test_the_streams_flag_is_bounded(streams: str, message: str) -> None:
    done = gpuprobe("mesh", "--targets", "127.0.0.1:1", "--streams", streams)
    assert done.returncode == 64
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stdout == ""
