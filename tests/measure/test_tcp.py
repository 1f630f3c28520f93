"""The TCP sink and sender: measured figures, and every way the sink refuses abuse."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import require, require_root, require_tool
from fabric import Fabric
from gpuprobe import cleanup
from gpuprobe.cores import usable_cores
from gpuprobe.measure.tcp import (
    HEADER,
    RCV_LOWAT,
    REPLY,
    SEND_BYTES,
    BandwidthError,
    BandwidthResult,
    NotASink,
    SendBudget,
    StreamResult,
    TcpSink,
    WorkerCpu,
    cpu_use,
    header,
    normal_address,
    send,
    sink_proof,
)
from listeners import trickling_listener

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


def test_the_window_holds_exactly_what_arrived_after_the_warm_up() -> None:
    """The sink wakes its worker once per RCV_LOWAT bytes, so bytes that arrived in the
    warm-up can still be unread when it ends: the worker cuts the stream at that moment and
    counts them as warm-up. Before the cut, the first read after the warm-up counted them in
    the window."""
    s = sink(streams=1)
    warm, measured = 100_000, 300_000  # each less than RCV_LOWAT: read only when it ends
    assert measured < RCV_LOWAT
    with socket.create_connection((LOOPBACK, s.port), timeout=10) as conn:
        hello = header(s.token, 300, 0)
        conn.sendall(hello)
        assert conn.recv(32) == sink_proof(s.token, hello[:32])
        conn.sendall(bytes(warm))
        time.sleep(0.6)  # the warm-up ends 0.3 s after the header
        conn.sendall(bytes(measured))
        time.sleep(0.2)
        conn.shutdown(socket.SHUT_WR)
        reply = b""
        while len(reply) < REPLY.size:
            chunk = conn.recv(REPLY.size - len(reply))
            assert chunk
            reply += chunk
    total, window, seconds = REPLY.unpack(reply)
    assert (total, window) == (warm + measured, measured)
    assert 0.2 < seconds < 1.0  # from the cut (0.3 s) to the last bytes (at the end, 0.8 s)
    assert s.wait(5)


def test_a_wrong_token_is_refused() -> None:
    s = sink(streams=1)
    assert raw_stream(s.port, header(b"x" * 32, 0, 0)) == b""
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
    first = socket.create_connection((LOOPBACK, s.port), timeout=10)
    second = socket.create_connection((LOOPBACK, s.port), timeout=10)
    try:
        for index, conn in enumerate((first, second)):
            conn.sendall(header(s.token, 0, index))
        deadline = time.monotonic() + 10
        while s.stats.accepted < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s.stats.accepted == 2
        assert raw_stream(s.port, header(s.token, 0, 2)) == b""  # a third, same token
        assert s.stats.refused == {"reused": 1}
        assert s.stats.accepted == 2 and not s.wait(0)  # the two streams go on
    finally:
        first.close()
        second.close()
        s.close()


def test_only_the_asking_peer_may_connect() -> None:
    s = TcpSink(LOOPBACK, "10.1.2.3", 1, 10**9, 30)
    assert raw_stream(s.port, header(s.token, 0, 0)) == b""
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
            hello = b""
            while len(hello) < HEADER.size:
                hello += conn.recv(HEADER.size - len(hello))
            conn.sendall(sink_proof(token, hello[:32]))
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


def between_namespaces(net: Fabric, streams: int, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """A test from node 1 to node 2 of `net`, each end in its namespace (started under
    `prefix`, a command such as chrt); its report data."""
    args = ("sink", net.address(2), net.address(1), str(streams))
    sink_proc = net.popen(2, *prefix, sys.executable, "-c", PEER, *args, stdout=subprocess.PIPE)
    assert sink_proc.stdout is not None
    opened = json.loads(sink_proc.stdout.readline())
    sent = net.run(
        1,
        *(*prefix, sys.executable, "-c", PEER, "send", net.address(2)),
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


def realtime() -> tuple[str, ...]:
    """A prefix that starts a command at a real-time priority (round-robin, the lowest), as
    it would run on an otherwise idle machine; skips when the kernel refuses it."""
    chrt = require_tool("chrt")
    refused = subprocess.run([chrt, "-r", "1", "true"], capture_output=True).returncode
    require(refused == 0, "real-time scheduling is refused here")
    return (chrt, "-r", "1")


@pytest.mark.slow
def test_a_test_over_a_bare_veth_link_is_capped_by_a_cpu() -> None:
    """Between two namespaces there is no wire: the CPUs set the figure, and the test says so.
    Both ends run at a real-time priority, as on an idle machine: on a busy one the kernel
    does much of a veth transfer's work (its softirqs) in whichever process the CPU was
    running, so neither end's threads show it, and a busy machine is not what this asserts."""
    require_root()
    prefix = realtime()
    with Fabric(2, subnet=80) as net:
        data = between_namespaces(net, 1, prefix)
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


def _old_proof(key: bytes, hello: bytes) -> bytes:
    """The proof of the earlier wire format, keyed by the header's first 32 bytes."""
    return hmac.new(key, b"gpuprobe-sink\0" + hello, hashlib.sha256).digest()


def _nonce_keyed(key: bytes, hello: bytes) -> bytes:
    """Today's proof keyed by the nonce, the only secret-looking thing a listener sees."""
    return sink_proof(key, key)


@pytest.mark.parametrize("forge", [_old_proof, _nonce_keyed])
def test_a_listener_given_the_header_but_not_the_token_cannot_prove_to_be_the_sink(
    forge: Callable[[bytes, bytes], bytes],
) -> None:
    """Before: the header's first 32 bytes were the token, so whoever received the header
    could compute the proof (and receive data) and every foreign service got the ticket."""
    listener = socket.create_server((LOOPBACK, 0))
    port = listener.getsockname()[1]
    token = os.urandom(32)
    got = bytearray()

    def forger() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(2)
            try:
                while len(got) < HEADER.size:
                    got.extend(conn.recv(HEADER.size - len(got)))
                conn.sendall(forge(bytes(got[:32]), bytes(got)))
                while chunk := conn.recv(1 << 20):
                    got.extend(chunk)
            except OSError:
                pass

    thread = threading.Thread(target=forger, daemon=True)
    thread.start()
    try:
        with pytest.raises(NotASink):
            send(LOOPBACK, port, token, streams=1, duration=0.3, warmup=0.0, connect_timeout=2)
    finally:
        thread.join(5)
        listener.close()
    assert len(got) == HEADER.size  # the header, and not one byte of data
    assert token not in got


def test_a_replayed_header_is_refused_as_reused() -> None:
    """A listener that got a header can replay it only to the sink, which takes each nonce
    once, even with streams left."""
    s = sink(streams=2)
    hello = header(s.token, 0, 0)
    with socket.create_connection((LOOPBACK, s.port), timeout=10) as first:
        first.sendall(hello)
        assert first.recv(32) == sink_proof(s.token, hello[:32])
        assert raw_stream(s.port, hello) == b""
        assert s.stats.refused == {"reused": 1} and s.stats.accepted == 1
    s.close()


def test_a_header_altered_on_the_way_is_refused() -> None:
    s = sink(streams=1)
    hello = bytearray(header(s.token, 0, 0))
    hello[35] = 0xFF  # the warm-up: an hour instead of none
    assert raw_stream(s.port, bytes(hello)) == b""
    assert s.stats.refused == {"token": 1} and s.stats.accepted == 0
    s.close()


def test_a_trickling_listener_holds_the_sender_no_longer_than_its_deadline() -> None:
    """Before: each read had its own timeout, so one byte a second held the sender for as
    long as the listener liked."""
    with trickling_listener(interval=0.3) as port:
        started = time.monotonic()
        with pytest.raises(NotASink):
            send(LOOPBACK, port, b"t" * 32, streams=2, duration=0.3, connect_timeout=1.0)
        took = time.monotonic() - started
    assert 1.0 <= took < 1.0 + 0.3


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("starts", [0, 1, 2])
def test_a_sink_that_cannot_start_its_threads_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, starts: int
) -> None:
    """Thread.start raises RuntimeError (not OSError) when the process is out of threads:
    before, the started workers, the listener and the exit hook were left behind and the
    caller got an error it did not expect. Two workers and the serving thread: the first,
    second or third start fails."""
    started = 0
    start = threading.Thread.start
    listen = socket.socket.listen
    ports: list[int] = []

    def failing_start(thread: threading.Thread) -> None:
        nonlocal started
        if started >= starts:
            raise RuntimeError("can't start new thread")
        started += 1
        start(thread)

    def recorded_listen(sock: socket.socket, backlog: int) -> None:
        ports.append(sock.getsockname()[1])
        listen(sock, backlog)

    before = _open_fds()
    hooks = len(cleanup._callbacks)
    monkeypatch.setattr(threading.Thread, "start", failing_start)
    monkeypatch.setattr(socket.socket, "listen", recorded_listen)
    with pytest.raises(OSError, match=r"no thread to serve it \(can't start new thread\)"):
        sink(streams=2, threads=2)
    monkeypatch.undo()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("tcp-sink")]
    assert len(ports) == 1
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((LOOPBACK, ports[0]), timeout=2).close()
    assert _open_fds() == before
    assert len(cleanup._callbacks) == hooks


def test_a_stream_handed_over_as_its_worker_stopped_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker saw the sink closed and took its queue for the last time; the serving
    thread, a moment behind, handed it one more stream. Before: that stream's connection
    stayed open for good. Here the worker has stopped before the stream arrives."""

    def stopped_worker(worker: Any) -> None:
        worker.selector.close()  # what a worker does on its way out

    monkeypatch.setattr("gpuprobe.measure.tcp._SinkWorker._run", stopped_worker)
    s = sink(streams=1)
    with socket.create_connection((LOOPBACK, s.port), timeout=5) as conn:
        hello = header(s.token, 0, 0)
        conn.sendall(hello)
        assert conn.recv(32) == sink_proof(s.token, hello[:32])  # taken, handed over
        s.close()
        assert s.wait(5)
        assert conn.recv(64) == b""  # closed by the sink, not left open


@pytest.mark.parametrize(
    ("bind", "allowed", "sender"),
    [
        ("::1", "0:0::1", "::1"),  # before: "0:0::1" != "::1" as text, refused
        ("::1", "0000:0000:0000:0000:0000:0000:0000:0001", "::1"),
        (LOOPBACK, "::ffff:127.0.0.1", LOOPBACK),  # IPv4-mapped
    ],
)
def test_the_allowed_peer_is_compared_as_an_address_not_as_text(
    bind: str, allowed: str, sender: str
) -> None:
    s = TcpSink(bind, allowed, 1, 10**12, 30)
    result = send(sender, s.port, s.token, streams=1, duration=0.2, warmup=0.0)
    assert s.wait(5)
    assert s.stats.accepted == 1 and s.stats.refused == {}
    assert result.streams[0].bytes_received > 0


def test_addresses_have_one_canonical_text() -> None:
    assert normal_address("fd00:0::1") == normal_address("FD00::0001") == "fd00::1"
    assert normal_address("::ffff:10.1.2.3") == "10.1.2.3"
    assert normal_address("10.1.2.3") == "10.1.2.3"
    with pytest.raises(ValueError):
        normal_address("node-b")


def test_the_sender_paces_itself_to_its_rate_bound() -> None:
    s = sink(streams=2)
    rate = 40e6
    result = send(LOOPBACK, s.port, s.token, streams=2, duration=1.0, warmup=0.2, max_rate=rate)
    sent = sum(st.bytes_received for st in result.streams)
    # 1.2 s at 40 MB/s, plus a send call's burst per worker ahead of the rate at most
    assert sent <= rate * 1.2 + 2 * SEND_BYTES
    assert result.bytes_per_second == pytest.approx(rate, rel=0.25)
    assert s.wait(5)


def test_the_sender_stops_at_its_byte_bound() -> None:
    s = sink(streams=2)
    started = time.monotonic()
    result = send(
        LOOPBACK, s.port, s.token, streams=2, duration=5.0, warmup=0.0, max_bytes=20 * 1024**2
    )
    assert sum(st.bytes_received for st in result.streams) == 20 * 1024**2
    assert time.monotonic() - started < 4  # it stopped sending, not the clock
    assert s.wait(5)


@pytest.mark.parametrize(
    ("budget", "sent", "elapsed", "allowed"),
    [
        (SendBudget(), 10**12, 0.0, SEND_BYTES),
        (SendBudget(max_bytes=100.0), 40, 0.0, 60),
        (SendBudget(max_bytes=100.0), 100, 0.0, 0),
        (SendBudget(max_rate=1000.0), SEND_BYTES + 500, 1.0, 500),
        (SendBudget(max_rate=1000.0), SEND_BYTES + 5000, 1.0, 0),
    ],
)
def test_a_send_budget_allows_what_is_left_of_its_bytes_and_rate(
    budget: SendBudget, sent: int, elapsed: float, allowed: int
) -> None:
    assert budget.allowed(sent, elapsed) == allowed


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("max 100000\n", None),  # no quota: the affinity
        ("200000 100000\n", 2),  # a pod limited to 2 CPUs
        ("150000 100000\n", 2),  # 1.5 CPUs: two threads, rounded up
        ("50000 100000\n", 1),
        ("garbage\n", None),
    ],
)
def test_the_cores_a_test_uses_follow_the_cgroups_cpu_quota(
    tmp_path: Path, content: str, expected: int | None
) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text(content)
    affinity = len(os.sched_getaffinity(0))
    assert usable_cores(str(cpu_max)) == min(affinity, expected or affinity)
    assert usable_cores(str(tmp_path / "absent")) == affinity
