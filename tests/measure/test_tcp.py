"""The TCP sink and sender: measured figures, and every way the sink refuses abuse."""

from __future__ import annotations

import socket
import time

import pytest

from gpuprobe import cleanup
from gpuprobe.measure.tcp import HEADER, BandwidthError, TcpSink, send

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
