"""Running a mesh over real agents on loopback: rounds, directions, failures, rendering."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import ROOT, gpuprobe, require_tool
from gpuprobe.audit.fanout import fetch_all
from gpuprobe.checks.rdma import NAME as RDMA
from gpuprobe.checks.rdma import RdmaConfig
from gpuprobe.client import Client, Credentials
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.measure.bandwidth import Reason, Refused, SinkRequest, rdma_options
from gpuprobe.measure.perftest import RdmaTestConfig
from gpuprobe.mesh.render import render_mesh
from gpuprobe.mesh.run import InvalidTest, MeshOptions, Peer, identify, run_mesh
from gpuprobe.mesh.verdict import FAILED, OK, Thresholds
from gpuprobe.v1 import diagnostics_pb2 as pb
from helpers import config
from serving import in_process_agent

TOKEN = "mesh-token"
LOOPBACK = {"peer_networks": ["127.0.0.0/8"]}
# These tests are about which links are tested, and failures, never rates: no link is LOW
# (a rate below median × 0). Loopback rates between agents in one interpreter swing beyond any
# threshold under load: a sender waiting for another agent's hold on the GIL is neither on a
# CPU nor waiting for one, so the test's CPU-limit detection cannot tell, and one LOW link
# would make its ends suspects and change what quick mode retests.
CALM = Thresholds(min_relative_drop=1.0)


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
        options = MeshOptions(transport="rdma", rdma_devices=("mlx5_0",), seconds=1, force=True)
        result = run_mesh(peers, options, connect)
    # The mesh opens the receiver's sink first: there its ib_write_bw server cannot start.
    assert [(link.source, link.blamed, link.unavailable) for link in result.links] == [
        ("node-a", "node-b", True),
        ("node-b", "node-a", True),
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


def stand_in_perftest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ib_write_bw on PATH that records each command line (no RDMA device here):
    it offers `--out_json` in its help as Debian's does, the server side waits as perftest's
    does, the client side prints a recorded table and writes the recorded JSON report.
    Returns the file of recorded command lines."""
    calls = tmp_path / "calls"
    fixtures = ROOT / "tests" / "fixtures" / "perftest"
    stand_in = tmp_path / "bin" / "ib_write_bw"
    stand_in.parent.mkdir()
    stand_in.write_text(
        "#!/bin/sh\n"
        '[ "$1" = --help ] && exec echo "      --out_json  Save the report in a json file"\n'
        f'echo "$*" >> {calls}\n'
        'for last in "$@"; do case "$last" in --out_json_file=*) json=${last#*=};; esac; done\n'
        f'[ "$last" = 127.0.0.1 ] && cp {fixtures / "ib_write_bw-out.json"} "$json" &&\n'
        f"  exec cat {fixtures / 'ib_write_bw-ndr-gbits.txt'}\n"
        "exec sleep 5\n"
    )
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{stand_in.parent}:{os.environ['PATH']}")
    return calls


@pytest.mark.parametrize(
    ("gid_index", "why"), [(1, "is empty (all zeros)"), (16, "does not exist")]
)
def test_a_bad_local_gid_index_is_this_nodes_fault_found_before_the_peer_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gid_index: int, why: str
) -> None:
    # The snapshot's port 1 has GID 0 set and GID 1 unused (zeros), no GID 16.
    calls = stand_in_perftest(tmp_path, monkeypatch)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with (
        in_process_agent(
            "synthetic-ndr-fabric-healthy",
            config(rdma={"test": {"gid_index": gid_index}}, bandwidth=LOOPBACK),
            token_file=str(token),
            node_name="node-a",
        ) as a,
        in_process_agent(
            "synthetic-ndr-fabric-healthy", token_file=str(token), node_name="node-b"
        ) as b,
    ):
        peers = [
            Peer(f"127.0.0.1:{a.grpc_port}", "node-a"),
            Peer(f"127.0.0.1:{b.grpc_port}", "node-b"),
        ]
        options = MeshOptions(transport="rdma", rdma_devices=("mlx5_0",), seconds=1, force=True)
        result = run_mesh(peers, options, connect)
    # node-a's GID index fails both its tests: its own as the sender, node-b's toward it as
    # the server; node-b is blamed for neither.
    assert [(link.source, link.target, link.blamed, link.unavailable) for link in result.links] == [
        ("node-a", "node-b", "node-a", True),
        ("node-b", "node-a", "node-a", True),
    ]
    assert result.links[0].error == (
        f"the RDMA test cannot run on node-a: GID index {gid_index} (rdma.test.gid_index) {why} "
        "on mlx5_0 port 1 of node-a"
    )
    assert [(f.code, f.resource) for f in result.findings] == [
        ("BANDWIDTH_TEST_UNAVAILABLE", "peer:node-a")
    ]
    # node-a never started ib_write_bw; node-b's client never ran toward it.
    lines = calls.read_text().splitlines() if calls.exists() else []
    assert [line for line in lines if "127.0.0.1" in line or f"-x {gid_index}" in line] == []


def test_rdma_parameters_travel_with_the_sink_and_the_gid_index_is_each_nodes_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_perftest(tmp_path, monkeypatch)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    # The snapshot's ports have GID 0 only: node-a names it, node-b leaves it to perftest. The
    # server side (node-b) runs with its own size and queue pairs and says so in the sink.
    sender = config(rdma={"test": {"gid_index": 0}}, bandwidth=LOOPBACK)
    receiver = config(rdma={"test": {"message_bytes": 65536, "queue_pairs": 4}}, bandwidth=LOOPBACK)
    with (
        in_process_agent(
            "synthetic-ndr-fabric-healthy", sender, token_file=str(token), node_name="node-a"
        ) as a,
        in_process_agent(
            "synthetic-ndr-fabric-healthy", receiver, token_file=str(token), node_name="node-b"
        ) as b,
    ):
        sink_request = pb.OpenBandwidthSinkRequest(
            transport="rdma", rdma_device="mlx5_0", test_seconds=2, force=True, sender="127.0.0.1"
        )
        with connect(f"127.0.0.1:{b.grpc_port}") as client:
            sink = client.open_bandwidth_sink(sink_request)
        request = pb.MeasureBandwidthRequest(
            peer=f"127.0.0.1:{b.grpc_port}",
            transport="rdma",
            rdma_device="mlx5_0",
            force=True,
            sink=sink,
        )
        request.duration.FromTimedelta(timedelta(seconds=2))
        with connect(f"127.0.0.1:{a.grpc_port}") as client:
            response = client.measure_bandwidth(request, timeout=30)
    assert response.bytes_per_second == 391.87e9 / 8
    shared = "-d mlx5_0 -p PORT -s 65536 -D 2 -q 4 -F --report_gbits"
    called = [
        re.sub(r"-p \d+", "-p PORT", re.sub(r"--out_json_file=\S+", "--out_json_file=F", line))
        for line in calls.read_text().splitlines()
    ]
    assert (sink.message_bytes, sink.queue_pairs, sink.test_seconds) == (65536, 4, 2)
    assert called == [
        shared,  # node-b's server: its size and queue pairs, its own (no) GID index
        f"{shared} -x 0",  # node-a tries its own device before it sends
        f"{shared} -x 0 --out_json --out_json_file=F 127.0.0.1",  # node-a's client
    ]


def test_rdma_test_settings_are_bounded() -> None:
    assert Config().section(RDMA, RdmaConfig).test == RdmaTestConfig(8 * 2**20, 1, None)
    for test, message in [
        ({"message_bytes": 0}, "message_bytes: 0 is not between 1 and 1073741824"),
        ({"queue_pairs": 257}, "queue_pairs: 257 is not between 1 and 256"),
        ({"gid_index": -1}, "gid_index: -1 is negative"),
        (
            {"message_bytes": 2**30, "queue_pairs": 3},  # 3 GiB, pinned twice
            "2 × message_bytes × queue_pairs \\(the buffers ib_write_bw registers\\): "
            "6442450944 is more than 4294967296",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            config(rdma={"test": test})


def test_a_sink_refuses_rdma_buffers_beyond_the_bound_in_all() -> None:
    request = SinkRequest(message_bytes=2**30, queue_pairs=3)
    with pytest.raises(Refused) as refused:
        rdma_options("mlx5_0", 18600, request, RdmaTestConfig())
    assert refused.value.reason == Reason.INVALID
    assert str(refused.value) == (
        "1073741824 bytes per message, 3 queue pairs: at most 1073741824 and 256, "
        "4294967296 bytes registered in all (twice their product)"
    )
    fits = rdma_options("mlx5_0", 18600, SinkRequest(queue_pairs=64), RdmaTestConfig())
    assert (fits.message_bytes, fits.queue_pairs) == (8 * 2**20, 64)


def test_quick_mode_retests_each_suspect_against_a_node_known_good(agents: list[str]) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    peers, _ = identify(fetched(agents))
    options = MeshOptions(
        mode="quick", matchings=1, seconds=0.3, warmup=0.1, seed=7, thresholds=CALM
    )
    result = run_mesh([*peers, Peer(dead, "ghost")], options, connect)
    matching, retest = result.links[:4], result.links[4:]
    partner = next(link.target for link in matching if link.source == "ghost")
    suspects = sorted(["ghost", partner])
    good = [n for n in ("n1", "n2", "n3") if n != partner]
    expected = [pair for a, b in zip(suspects, good, strict=False) for pair in ((a, b), (b, a))]
    assert [(link.source, link.target) for link in retest] == expected
    # The ghost's partner fails only with the ghost: against a good node it is fine.
    assert [link.verdict for link in retest if "ghost" not in (link.source, link.target)] == [
        OK,
        OK,
    ]
    assert [(f.code, f.resource) for f in result.findings] == [("PEER_UNREACHABLE", "peer:ghost")]


def test_rails_are_meshed_in_turn_each_link_naming_its_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = stand_in_perftest(tmp_path, monkeypatch)
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with ExitStack() as stack:
        peers = [
            Peer(f"127.0.0.1:{agent.grpc_port}", name)
            for name, agent in (
                (
                    name,
                    stack.enter_context(
                        in_process_agent(
                            "synthetic-ndr-fabric-healthy", token_file=str(token), node_name=name
                        )
                    ),
                )
                for name in ("node-a", "node-b")
            )
        ]
        # mlx5_9 is on neither node: that rail fails on its own, mlx5_1's links stay OK.
        options = MeshOptions(
            transport="rdma", rdma_devices=("mlx5_1", "mlx5_9"), seconds=1, force=True
        )
        result = run_mesh(peers, options, connect)
    assert [(link.device, link.source, link.target, link.verdict) for link in result.links] == [
        ("mlx5_1", "node-a", "node-b", OK),
        ("mlx5_1", "node-b", "node-a", OK),
        ("mlx5_9", "node-a", "node-b", FAILED),
        ("mlx5_9", "node-b", "node-a", FAILED),
    ]
    assert result.to_dict()["links"][0]["device"] == "mlx5_1"
    assert [(f.code, f.resource, f.message) for f in result.findings] == [
        (
            "BANDWIDTH_TEST_UNAVAILABLE",
            "peer:node-a",
            "node-a's bandwidth could not be tested: no RDMA device mlx5_9 on node-a",
        ),
        (
            "BANDWIDTH_TEST_UNAVAILABLE",
            "peer:node-b",
            "node-b's bandwidth could not be tested: no RDMA device mlx5_9 on node-b",
        ),
    ]
    text = render_mesh(result).splitlines()
    assert [line for line in text if "bandwidth on" in line] == [
        "rdma bandwidth on mlx5_1, Gbit/s (row sends to column)",
        "rdma bandwidth on mlx5_9, Gbit/s (row sends to column)",
    ]
    assert all(" -d mlx5_9 " not in f" {line} " for line in calls.read_text().splitlines())


@pytest.mark.parametrize(
    ("devices", "message"),
    [("mlx5_0,,mlx5_1", "not RDMA device names"), ("mlx5_0,mlx5_0", "a device named twice")],
)
def test_the_rdma_device_flag_takes_distinct_names(devices: str, message: str) -> None:
    done = gpuprobe(
        "mesh", "--targets", "127.0.0.1:1", "--transport", "rdma", "--rdma-device", devices
    )
    assert done.returncode == 64
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_a_tcp_test_reports_both_ends_cpu_and_which_end_capped_it(agents: list[str]) -> None:
    peers, _ = identify(fetched(agents))
    with connect(peers[1].target) as client:
        sink = client.open_bandwidth_sink(
            pb.OpenBandwidthSinkRequest(transport="tcp", streams=2, sender="127.0.0.1")
        )
    request = pb.MeasureBandwidthRequest(
        peer=peers[1].target, transport="tcp", streams=2, sink=sink
    )
    request.duration.FromTimedelta(timedelta(seconds=0.5))
    request.warmup.FromTimedelta(timedelta(seconds=0.1))
    with connect(peers[0].target) as client:
        response = client.measure_bandwidth(request, timeout=30)
    threads = min(2, len(os.sched_getaffinity(0)))
    assert response.sender_cpu.threads == threads and response.sink_cpu.threads == threads
    assert response.sender_cpu.cpu_seconds > 0 and response.sink_cpu.cpu_seconds > 0
    spent = response.sender_cpu.cpu_seconds + response.sink_cpu.cpu_seconds
    assert response.cpu_seconds_per_gbit == pytest.approx(spent / (response.bytes * 8 / 1e9))
    expected = (
        "sender"
        if response.sender_cpu.cpu_limited
        else "sink"
        if response.sink_cpu.cpu_limited
        else ""
    )
    assert response.cpu_limited_side == expected


class Answering:
    """A client whose MeasureBandwidth answers a fixed response: which end capped the test
    (and whose OpenBandwidthSink answers a sink)."""

    def __init__(self, side: str) -> None:
        self.side = side

    def __enter__(self) -> Answering:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def open_bandwidth_sink(
        self, request: pb.OpenBandwidthSinkRequest, timeout: float
    ) -> pb.OpenBandwidthSinkResponse:
        return pb.OpenBandwidthSinkResponse(address="127.0.0.1", port=9, ticket="ab" * 32)

    def measure_bandwidth(
        self, request: pb.MeasureBandwidthRequest, timeout: float
    ) -> pb.MeasureBandwidthResponse:
        return pb.MeasureBandwidthResponse(
            peer="", transport="tcp", bytes_per_second=1e9, cpu_limited_side=self.side
        )


@pytest.mark.parametrize(
    ("side", "blamed"), [("sender", ["n1", "n2"]), ("sink", ["n2", "n1"]), ("", [None, None])]
)
def test_the_end_that_capped_a_test_is_named_on_its_link(side: str, blamed: list[str]) -> None:
    peers = [Peer("127.0.0.1:1", "n1"), Peer("127.0.0.1:2", "n2")]
    options = MeshOptions(seconds=0.1, warmup=0.0, thresholds=CALM)
    result = run_mesh(peers, options, lambda target: Answering(side))  # type: ignore[arg-type, return-value]
    links = sorted(result.links, key=lambda link: link.source)
    assert [(link.source, link.cpu_limited_by) for link in links] == list(
        zip(["n1", "n2"], blamed, strict=True)
    )
