"""The /metrics server is bounded (issue: 2000 idle connections cost 2045 threads and 50 MB,
and 160 under a pids limit broke the agent for good): at most MAX_CONNECTIONS at once and
MAX_CONNECTIONS_PER_PEER from one address, the rest answered 503 at once; a request head must
come whole within the header timeout; a thread the system refuses costs one connection; its
errors are JSON log lines. Every client is on loopback (127.0.0.2 plays the attacker)."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gpuprobe.serve import metrics_http
from gpuprobe.serve.agent import Agent
from serving import in_process_agent, wait_for

ATTACKER = "127.0.0.2"


def get(port: int, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@contextmanager
def idle_connections(
    port: int, count: int, source: str = ATTACKER
) -> Iterator[list[socket.socket]]:
    """`count` TCP connections to the metrics port that never send a byte."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def threads_named(prefix: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == prefix)


def answered(socks: list[socket.socket], within: float) -> list[socket.socket]:
    """The sockets the server answered (or closed) within `within` seconds, all waited on
    together."""
    ready, _, _ = select.select(socks, [], [], within)
    time.sleep(0.1)  # the others of a burst
    ready, _, _ = select.select(socks, [], [], 0)
    return ready


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes (or refuses) `sock` within `within` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(4096) is not None  # b"" (closed) or the 503
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


@pytest.fixture
def agent() -> Iterator[Agent]:
    with in_process_agent(names=["driver"]) as running:
        yield running


def test_idle_connections_are_bounded_and_a_scrape_still_answers(agent: Agent) -> None:
    port = agent.metrics_port
    server = agent.http.server
    with idle_connections(port, 40) as socks, idle_connections(port, 40, "127.0.0.3") as more:
        wait_for(lambda: server.open_connections() == 2 * metrics_http.MAX_CONNECTIONS_PER_PEER)
        # Past the per-peer bound each connection is answered 503 and closed at once.
        refused = answered(socks, 1.0)
        assert len(refused) == 40 - metrics_http.MAX_CONNECTIONS_PER_PEER
        assert all(s.recv(4096).startswith(b"HTTP/1.1 503 ") for s in refused)
        assert threads_named("metrics-http") <= 2 * metrics_http.MAX_CONNECTIONS_PER_PEER
        started = time.monotonic()
        status, body = get(port)  # from 127.0.0.1: its own quota
        assert status == 200 and b"gpuprobe_node_status" in body
        assert get(port, "/healthz")[0] == 200
        assert time.monotonic() - started < 1.0
        assert len(more) == 40


def test_past_the_total_bound_connections_get_503(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = agent.http.server
    monkeypatch.setattr(server, "max_connections", 4)
    with idle_connections(agent.metrics_port, 4):
        wait_for(lambda: server.open_connections() == 4)
        status, body = get(agent.metrics_port)
        assert status == 503
        assert body == b"too many connections, retry"
    wait_for(lambda: server.open_connections() == 0)
    assert get(agent.metrics_port)[0] == 200


def test_a_client_that_sends_no_head_in_time_is_dropped(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_http, "HEADER_TIMEOUT_SECONDS", 0.5)
    server = agent.http.server
    with idle_connections(agent.metrics_port, 3) as socks:
        wait_for(lambda: server.open_connections() == 3)
        started = time.monotonic()
        assert all(closed_by_server(s, 3.0) for s in socks)
        assert time.monotonic() - started < 2.0
        wait_for(lambda: server.open_connections() == 0)
    # Slowloris: a byte now and then keeps no connection past the deadline either.
    with idle_connections(agent.metrics_port, 1) as (slow,):
        started = time.monotonic()
        with pytest.raises(OSError):
            for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                slow.sendall(bytes([byte]))
                time.sleep(0.1)
                if time.monotonic() - started > 5:
                    break
        assert time.monotonic() - started < 2.0


def test_a_refused_thread_costs_one_connection_not_the_server(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = metrics_http.start_thread
    refusals = [1]

    def once_refused(*args: object, **kwargs: object) -> threading.Thread | None:
        if refusals:
            refusals.pop()
            return None  # as start_thread answers when pthread_create fails
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_http, "start_thread", once_refused)
    assert get(agent.metrics_port)[0] == 503
    assert agent.http.server.open_connections() == 0  # its slot is back
    assert get(agent.metrics_port)[0] == 200


def test_a_failing_page_is_a_json_log_line_and_a_500(
    agent: Agent,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    def broken(accept: str | None) -> tuple[bytes, str]:
        raise ValueError("encoder failed")

    monkeypatch.setattr(agent.metrics_page, "render", broken)
    with caplog.at_level(logging.ERROR, logger="gpuprobe.serve"):
        status, _ = get(agent.metrics_port)
    assert status == 500
    (record,) = [r for r in caplog.records if r.getMessage() == "metrics request failed"]
    assert record.exc_info is not None and "encoder failed" in str(record.exc_info[1])
    assert "Traceback" not in capfd.readouterr().err  # nothing printed beside the log
