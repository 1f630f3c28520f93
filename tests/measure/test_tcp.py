"""The TCP sink and sender: measured figures, and every way the sink refuses abuse."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from conftest import require_root, require_tool
from fabric import Fabric
from gpuprobe import cleanup
from gpuprobe.measure.tcp import (
    HEADER,
    REPLY,
    BandwidthError,
    BandwidthResult,
    NotASink,
    StreamResult,
    TcpSink,
    WorkerCpu,
    cpu_use,
    proof,
    send,
)

LOOPBACK = "127.0.0.1"


def sink(**kw: object) -> TcpSink:
    options: dict[str, object] = {"streams": 2, "max_bytes": 10**12, "max_seconds": 30.0}
    options.update(kw)
    return TcpSink(LOOPBACK, LOOPBACK, **options)  # type: ignore[arg-type]


def test_two_streams_are_measured_on_the_receiving_side() -> None:
    s = sink()
    result = send(LOOPBACK, s.port, s.token, streams=2, duration=1.0, warmup=0.3)
    assert len(result.streams) == 2
    assert all(st.window_seconds == pytest.approx(1.0, abs=0.3) for st in result.streams)
    assert all(st.bytes_received > st.window_bytes > 0 for st in result.streams)
    assert result.bytes_per_second == pytest.approx(
        sum(st.bytes_per_second for st in result.streams)
    )
    assert result.bytes_per_second > 10e6
    assert s.wait(5)
    assert s.stats.accepted == 2 and s.stats.refused == {}
    assert s.stats.bytes_received == sum(st.bytes_received for st in result.streams)


def raw_stream(port: int, header: bytes | None) -> bytes:
    """Connect, send a header (or nothing), then data; what the sink answered."""
    with socket.create_connection((LOOPBACK, port), timeout=10) as conn:
        if header is not None:
            conn.sendall(header)
            try:
                conn.sendall(bytes(65536))
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                return b""
        try:
            return conn.recv(64)
        except OSError:
            return b""


def test_a_wrong_token_is_refused() -> None:
    s = sink(streams=1)
    assert raw_stream(s.port, HEADER.pack(b"x" * 32, 0, 0)) == b""
    assert s.stats.refused == {"token": 1} and s.stats.accepted == 0
    s.close()


def test_no_token_is_refused_after_the_header_timeout() -> None:
    s = sink(streams=1)
    started = time.monotonic()
    assert raw_stream(s.port, None) == b""
    assert time.monotonic() - started < 10
    assert s.stats.refused == {"no header": 1}
    s.close()


def test_the_token_is_single_use() -> None:
    s = sink(streams=1)
    send(LOOPBACK, s.port, s.token, streams=1, duration=0.3, warmup=0.0)
    with pytest.raises(BandwidthError):
        send(LOOPBACK, s.port, s.token, streams=1, duration=0.3, warmup=0.0)
    assert s.stats.accepted == 1


def test_a_token_used_by_every_stream_already_is_refused_while_the_sink_is_open() -> None:
    s = sink(streams=2)
    header = HEADER.pack(s.token, 0, 0)
    first = socket.create_connection((LOOPBACK, s.port), timeout=10)
    second = socket.create_connection((LOOPBACK, s.port), timeout=10)
    try:
        for conn in (first, second):
            conn.sendall(header)
        deadline = time.monotonic() + 10
        while s.stats.accepted < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.stats.accepted == 2
        assert raw_stream(s.port, HEADER.pack(s.token, 0, 2)) == b""  # a third, same token
        assert s.stats.refused == {"reused": 1}
        assert s.stats.accepted == 2 and not s.wait(0)  # the two streams go on
    finally:
        first.close()
        second.close()
        s.close()


def test_only_the_asking_peer_may_connect() -> None:
    s = TcpSink(LOOPBACK, "10.1.2.3", 1, 10**9, 30)
    assert raw_stream(s.port, HEADER.pack(s.token, 0, 0)) == b""
    assert s.stats.refused == {"address": 1}
    s.close()


def test_the_byte_bound_cuts_the_test() -> None:
    s = sink(streams=1, max_bytes=50 * 1024 * 1024)
    with pytest.raises(BandwidthError, match=r"the sink cut the test"):
        send(LOOPBACK, s.port, s.token, streams=1, duration=5, warmup=0.0)
    assert s.stats.stopped == "byte bound"
    assert s.wait(5)


def test_the_time_bound_closes_the_sink() -> None:
    s = sink(max_seconds=0.5)
    assert s.wait(5)
    assert s.stats.stopped == "time bound"
    with pytest.raises(BandwidthError):
        send(LOOPBACK, s.port, s.token, streams=1, duration=0.2, warmup=0.0, connect_timeout=1)


def test_an_unreachable_sink_fails_within_the_bound() -> None:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port = probe.getsockname()[1]  # bound but not listening: connection refused
        started = time.monotonic()
        with pytest.raises(BandwidthError, match="nothing proved to be the sink"):
            send(LOOPBACK, port, b"t" * 32, streams=2, duration=1, connect_timeout=1)
    assert time.monotonic() - started < 5


def test_an_open_sink_is_closed_by_the_exit_cleanup() -> None:
    s = sink()
    cleanup.remove_all()
    assert s.wait(5)
    assert s.stats.stopped == "closed"


def test_the_streams_are_spread_over_worker_threads_within_the_budget() -> None:
    s = sink(streams=4)
    result = send(LOOPBACK, s.port, s.token, streams=4, duration=0.5, warmup=0.1)
    expected = min(4, len(os.sched_getaffinity(0)))
    assert result.sender_cpu is not None and result.sender_cpu.threads == expected
    assert result.sink_cpu is not None and result.sink_cpu.threads == expected
    assert s.wait(5)
    budget = sink(streams=4, threads=1)
    result = send(
        LOOPBACK, budget.port, budget.token, streams=4, duration=0.5, warmup=0.1, threads=1
    )
    assert result.sender_cpu is not None and result.sender_cpu.threads == 1
    assert result.sink_cpu is not None and result.sink_cpu.threads == 1
    assert len(result.streams) == 4 and all(st.window_bytes > 0 for st in result.streams)
    assert budget.wait(5)


def test_each_end_reports_its_cpu_and_the_cpu_per_gbit() -> None:
    s = sink(streams=1)
    result = send(LOOPBACK, s.port, s.token, streams=1, duration=0.5, warmup=0.1)
    assert result.sender_cpu is not None and result.sink_cpu is not None
    for cpu in (result.sender_cpu, result.sink_cpu):
        assert 0 < cpu.cpu_seconds <= cpu.wall_seconds * cpu.threads + 0.05
        assert 0 < cpu.busiest_share <= 1
    moved = sum(st.bytes_received for st in result.streams) * 8 / 1e9
    spent = result.sender_cpu.cpu_seconds + result.sink_cpu.cpu_seconds
    assert result.cpu_seconds_per_gbit == pytest.approx(spent / moved)
    data = result.to_dict()
    assert data["sender_cpu"]["threads"] == 1 and data["limited_by"] == result.limited_by


@pytest.mark.parametrize(
    ("workers", "limited"),
    [
        ([WorkerCpu(0.05, 0.1, 2.0)], False),  # waited on the network 95 % of the time
        ([WorkerCpu(1.0, 1.3, 2.0)], True),  # on a CPU or queued for one 65 % of the time
        ([WorkerCpu(0.1, 0.2, 2.0), WorkerCpu(0.9, 1.9, 2.0)], True),  # one worker flat out
        ([WorkerCpu(0.5, 1.1, 2.0), WorkerCpu(0.5, 1.1, 2.0)], False),  # each at 55 %
    ],
)
def test_an_end_is_cpu_limited_when_a_worker_was_held_back_by_the_cpu(
    workers: list[WorkerCpu], limited: bool
) -> None:
    use = cpu_use(workers)
    assert use.limited is limited
    assert use.threads == len(workers)
    assert use.cpu_seconds == pytest.approx(sum(w.cpu_seconds for w in workers))


def test_the_sender_is_named_before_the_sink_when_both_ran_out_of_cpu() -> None:
    flat_out, idle = cpu_use([WorkerCpu(2.0, 2.0, 2.0)]), cpu_use([WorkerCpu(0.1, 0.1, 2.0)])
    streams = (StreamResult(10**9, 10**9, 1.0),)
    assert BandwidthResult(streams, 1, 0, flat_out, flat_out).limited_by == "sender"
    assert BandwidthResult(streams, 1, 0, idle, flat_out).limited_by == "sink"
    assert BandwidthResult(streams, 1, 0, idle, idle).limited_by is None
    assert BandwidthResult(streams, 1, 0, idle, None).limited_by is None
    assert BandwidthResult(streams, 1, 0, idle, None).cpu_seconds_per_gbit is None


def test_a_sink_answering_without_its_cpu_is_read() -> None:
    """A sink that proves itself and then sends the 24-byte answer alone (no CPU figures)."""
    listener = socket.create_server((LOOPBACK, 0))
    port = listener.getsockname()[1]
    token = b"t" * 32

    def earlier_sink() -> None:
        conn, _ = listener.accept()
        with conn:
            header = b""
            while len(header) < HEADER.size:
                header += conn.recv(HEADER.size - len(header))
            conn.sendall(proof(token, header))
            received = HEADER.size
            while chunk := conn.recv(1 << 20):
                received += len(chunk)
            conn.sendall(REPLY.pack(received, received - HEADER.size, 0.5))

    thread = threading.Thread(target=earlier_sink, daemon=True)
    thread.start()
    try:
        result = send(LOOPBACK, port, token, streams=1, duration=0.3, warmup=0.0)
    finally:
        listener.close()
    thread.join(5)
    assert result.sink_cpu is None and result.sender_cpu is not None
    assert result.streams[0].window_seconds == 0.5
    assert result.cpu_seconds_per_gbit is None


PEER = """
import json, sys
from gpuprobe.measure.tcp import TcpSink, send
if sys.argv[1] == "sink":
    sink = TcpSink(sys.argv[2], sys.argv[3], int(sys.argv[4]), 10**12, 60)
    print(json.dumps({"port": sink.port, "token": sink.token_hex}), flush=True)
    sink.wait(60)
else:
    token = bytes.fromhex(sys.argv[4])
    result = send(sys.argv[2], int(sys.argv[3]), token, int(sys.argv[5]), 1.5, 0.5)
    print(json.dumps(result.to_dict()))
"""


def between_namespaces(net: Fabric, streams: int) -> dict[str, Any]:
    """A test from node 1 to node 2 of `net`, each end in its namespace; its report data."""
    args = ("sink", net.address(2), net.address(1), str(streams))
    sink_proc = net.popen(2, sys.executable, "-c", PEER, *args, stdout=subprocess.PIPE)
    assert sink_proc.stdout is not None
    opened = json.loads(sink_proc.stdout.readline())
    sent = net.run(
        1,
        *(sys.executable, "-c", PEER, "send", net.address(2)),
        *(str(opened["port"]), opened["token"], str(streams)),
        timeout=30,
    )
    assert sent.returncode == 0, sent.stderr
    assert sink_proc.wait(10) == 0
    return json.loads(sent.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_streams_add_up_on_a_link_that_holds_each_flow_to_its_rate() -> None:
    """Each connection node 1 opens is held to 200 Mbit/s (an HTB class per source port):
    four streams must move four times one stream's figure, and the link, not the CPU, is
    what held them."""
    require_root()
    require_tool("tc")
    with Fabric(2, subnet=79) as net:
        net.cap_flows(1, "200mbit")
        one = between_namespaces(net, 1)
        four = between_namespaces(net, 4)
    assert one["bytes_per_second"] * 8 == pytest.approx(200e6, rel=0.15)
    assert four["bytes_per_second"] >= 3.0 * one["bytes_per_second"]
    assert one["limited_by"] is None and four["limited_by"] is None


@pytest.mark.slow
def test_a_test_over_a_bare_veth_link_is_capped_by_a_cpu() -> None:
    """Between two namespaces there is no wire: the CPUs set the figure, and the test says so."""
    require_root()
    with Fabric(2, subnet=80) as net:
        data = between_namespaces(net, 1)
    assert data["limited_by"] in ("sender", "sink")
    assert data[f"{data['limited_by']}_cpu"]["cpu_limited"] is True


def test_no_data_goes_to_a_listener_that_does_not_prove_to_be_the_sink() -> None:
    """A foreign service at the port (here one answering 32 wrong bytes) gets the header, then
    the connection closes: not one byte of data."""
    listener = socket.create_server((LOOPBACK, 0))
    port = listener.getsockname()[1]
    received: list[int] = []

    def impostor() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(2)
            total = 0
            try:
                while chunk := conn.recv(1 << 20):
                    total += len(chunk)
                    conn.sendall(b"x" * 32)
            except OSError:
                pass
            received.append(total)

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    try:
        with pytest.raises(NotASink, match=f"nothing proved to be the sink at {LOOPBACK}:{port}"):
            send(LOOPBACK, port, b"t" * 32, streams=2, duration=0.5, warmup=0.0)
    finally:
        thread.join(5)
        listener.close()
    assert received == [HEADER.size]
