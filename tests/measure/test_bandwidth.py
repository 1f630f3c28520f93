"""The bandwidth tests' domain without gRPC: peer networks, bounds, refusals and their sides."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuprobe.config import PRIVATE_NETWORKS, BandwidthConfig
from gpuprobe.errors import ConfigError
from gpuprobe.host.fs import HostFS
from gpuprobe.measure import tcp
from gpuprobe.measure.bandwidth import (
    PROOF_SECONDS,
    BandwidthTests,
    Measurement,
    MeasureRequest,
    Reason,
    Refused,
    Side,
    Sink,
    SinkRequest,
    address_facing,
    bounded_seconds,
    split_peer,
)
from helpers import config
from listeners import trickling_listener


def agent_tests(
    tmp_path: Path, policy: BandwidthConfig, busy: list[int] | None = None
) -> BandwidthTests:
    recorded: list[Measurement] = []
    return BandwidthTests(
        "node-a", HostFS(str(tmp_path)), lambda: busy or [], recorded.append, policy=policy
    )


def test_the_default_peer_networks_are_the_private_ranges_pod_networks_come_from() -> None:
    policy = BandwidthConfig()
    assert policy.peer_networks == PRIVATE_NETWORKS
    inside = [
        "10.244.3.7",
        "172.20.0.9",
        "192.168.1.20",
        "100.64.12.1",
        "fd00::7",
        "::ffff:10.1.2.3",
    ]
    outside = ["127.0.0.1", "::1", "8.8.8.8", "169.254.169.254", "2001:db8::1", "localhost", ""]
    assert [policy.allows(a) for a in inside] == [True] * len(inside)
    assert [policy.allows(a) for a in outside] == [False] * len(outside)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"peer_networks": ["10.0.0.0/33"]}, "peer_networks: '10.0.0.0/33' is not a network"),
        ({"peer_networks": ["pods"]}, "peer_networks: 'pods' is not a network"),
        ({"max_sinks": 0}, "max_sinks: 0 is not between 1 and 64"),
        ({"max_sinks": 65}, "max_sinks: 65 is not between 1 and 64"),
    ],
)
def test_bad_bandwidth_settings_name_their_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(bandwidth=section)


def test_requests_are_bounded_and_refusals_say_why() -> None:
    assert split_peer("[fd00::1]:50051") == ("fd00::1", 50051)
    for bad in ("node", "node:", ":50051", "node:65536", "node:0"):
        with pytest.raises(Refused) as refused:
            split_peer(bad)
        assert (refused.value.reason, refused.value.side) == (Reason.INVALID, Side.SOURCE)
    assert bounded_seconds(None, 10, 120) == 10
    with pytest.raises(Refused, match=r"duration 0 s is not within \(0, 120\]"):
        bounded_seconds(0, 10, 120)


def test_a_sink_is_opened_only_for_senders_in_the_peer_networks(tmp_path: Path) -> None:
    tests = agent_tests(tmp_path, BandwidthConfig())
    with pytest.raises(Refused) as refused:
        tests.open_sink(SinkRequest(sender="127.0.0.1"), "10.0.0.1")
    assert refused.value.reason == Reason.INVALID
    with pytest.raises(Refused, match="sender 'node-b' is not an IP address"):
        tests.open_sink(SinkRequest(sender="node-b"), "10.0.0.1")


def test_without_a_sink_and_without_verified_tls_the_agent_calls_no_peer(tmp_path: Path) -> None:
    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",)))
    with pytest.raises(Refused) as refused:
        tests.measure(MeasureRequest(peer="127.0.0.1:50051"))
    assert refused.value.reason == Reason.CANNOT_RUN
    assert "open the sink on the peer and pass it in the request" in str(refused.value)


def test_a_sink_named_by_a_name_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",)))
    sink = Sink("localhost", 9, "ab" * 32, "node-b", datetime.now(UTC))
    with pytest.raises(Refused, match="the sink needs an IP address and a port"):
        tests.measure(MeasureRequest(peer="localhost:50051", sink=sink))


def test_busy_gpus_refuse_a_test_unless_forced(tmp_path: Path) -> None:
    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",)), busy=[0, 3])
    with pytest.raises(Refused) as refused:
        tests.open_sink(SinkRequest(sender="127.0.0.1"), "127.0.0.1")
    assert refused.value.reason == Reason.CANNOT_RUN
    assert str(refused.value) == (
        "GPU processes are active on node-a (GPU 0, 3): bandwidth tests wait for idle GPUs "
        "(pass --force to run anyway)"
    )
    sink = tests.open_sink(SinkRequest(sender="127.0.0.1", force=True, lifetime_seconds=0.5), "x")
    assert (sink.address, sink.node, len(sink.ticket)) == ("127.0.0.1", "node-a", 64)


def test_the_address_facing_a_sender_is_the_one_its_route_leaves_from() -> None:
    assert address_facing("127.0.0.1") == "127.0.0.1"
    assert address_facing("127.0.0.5") == "127.0.0.1"  # loopback's route leaves from .1
    assert address_facing("::1") == "::1"


def test_a_sender_sends_for_at_most_120_s_warm_up_included(tmp_path: Path) -> None:
    # Before: 120 s of test after up to 120 s of warm-up, 240 s of sending.
    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",)))
    request = MeasureRequest(peer="127.0.0.1:50051", duration_seconds=120, warmup_seconds=120)
    with pytest.raises(Refused) as refused:
        tests.measure(request)
    assert refused.value.reason == Reason.INVALID
    assert str(refused.value) == "duration and warm-up 240 s together: at most 120"


def test_a_trickling_sink_is_told_after_the_proof_time_and_no_later(tmp_path: Path) -> None:
    """One byte a second from the "sink" (each within any one read's timeout): before, it
    held the sender 6 s against PROOF_SECONDS; connecting and proving share one deadline."""
    from datetime import UTC, datetime

    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",)))
    with trickling_listener() as port:
        sink = Sink("127.0.0.1", port, "ab" * 32, "node-b", datetime.now(UTC))
        started = time.monotonic()
        with pytest.raises(Refused) as refused:
            tests.measure(MeasureRequest(peer="127.0.0.1:50051", sink=sink, streams=2))
        took = time.monotonic() - started
    assert (refused.value.reason, refused.value.side) == (Reason.UNREACHABLE, Side.PEER)
    assert (
        str(refused.value)
        == f"127.0.0.1:{port} did not prove to be the sink the test was opened on"
    )
    assert PROOF_SECONDS <= took < PROOF_SECONDS + 0.3


def test_a_sink_without_a_thread_to_serve_it_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8",), max_sinks=1))

    def no_thread(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    with pytest.raises(Refused) as refused:
        tests.open_sink(SinkRequest(sender="127.0.0.1"), "127.0.0.1")
    monkeypatch.undo()
    assert (refused.value.reason, refused.value.side) == (Reason.CANNOT_RUN, Side.SOURCE)
    assert str(refused.value) == (
        "node-a cannot open a sink: no thread to serve it (can't start new thread)"
    )
    # The one sink allowed was given back: the next opens.
    sink = tests.open_sink(SinkRequest(sender="127.0.0.1", lifetime_seconds=0.5), "127.0.0.1")
    assert sink.port > 0


def test_a_sink_opened_for_a_sender_written_differently_takes_it(tmp_path: Path) -> None:
    """The sender named as `0:0::1` is the ::1 the sink's accept reports: before, the sink
    compared the two as text and refused the sender it was opened for."""
    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("::1/128",)))
    sink = tests.open_sink(SinkRequest(sender="0:0::1", streams=1), "10.0.0.9")
    result = tcp.send(sink.address, sink.port, bytes.fromhex(sink.ticket), 1, 0.2, 0.0)
    assert sink.address == "::1"
    assert result.streams[0].bytes_received > 0


def test_the_sinks_sender_is_held_to_the_peer_networks_and_tells_no_address(
    tmp_path: Path,
) -> None:
    """The sender address a sink names (the address this node must send from) was bound as
    given: one outside the peer networks was tried, and one this node does not hold answered
    at once "not an address of node-a", telling the node's addresses (issue 41 item 10). Now
    one outside the networks is refused as invalid, and one inside that the node does not hold
    is told exactly as a port that proved no sink, after the same time."""
    from datetime import UTC, datetime

    tests = agent_tests(tmp_path, BandwidthConfig(peer_networks=("127.0.0.0/8", "198.51.100.0/24")))

    def told(sender: str, port: int) -> tuple[Reason, Side, str, float]:
        sink = Sink("127.0.0.1", port, "ab" * 32, "node-b", datetime.now(UTC), sender=sender)
        started = time.monotonic()
        with pytest.raises(Refused) as refused:
            tests.measure(MeasureRequest(peer="127.0.0.1:50051", sink=sink, streams=1))
        return (
            refused.value.reason,
            refused.value.side,
            str(refused.value).replace(sender, "SENDER").replace(f":{port} ", ":PORT "),
            time.monotonic() - started,
        )

    outside = told("192.0.2.7", 9)
    assert outside[:3] == (
        Reason.INVALID,
        Side.SOURCE,
        "the sink's sender SENDER is not within this agent's peer networks "
        "(bandwidth.peer_networks)",
    )
    assert outside[3] < 1.0
    with trickling_listener() as port:
        not_ours = told("198.51.100.7", port)
        ours = told("127.0.0.2", port)  # an address of this node, and a port that is no sink
    assert (
        not_ours[:3]
        == ours[:3]
        == (
            Reason.UNREACHABLE,
            Side.PEER,
            "127.0.0.1:PORT did not prove to be the sink the test was opened on, or SENDER, the "
            "address it accepts streams from, is not one node-a sends from",
        )
    )
    assert PROOF_SECONDS <= not_ours[3] < PROOF_SECONDS + 0.5
    assert PROOF_SECONDS <= ours[3] < PROOF_SECONDS + 0.5
