"""The /metrics server is bounded and cheap (issues: 2000 idle connections cost 2045 threads;
then, bounded at 64 connections, 312 idle ones from 39 addresses made 29 of 30 scrapes and
29 of 30 /healthz answer 503, and the kubelet would restart the agent over its liveness
probe). One event loop holds every connection: at most `max_per_peer` from one address (the
rest answered 503 at once), the longest-waiting connection closed for a newcomer when every
place is taken, `/healthz` never refused, request heads and bodies read under deadlines,
pages rendered off the loop, errors as JSON log lines. Every client is on loopback
(127.0.0.2 and up play the attackers)."""

from __future__ import annotations

import dataclasses
import http.client
import logging
import select
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gpuprobe.serve import http_loop
from gpuprobe.serve.agent import Agent
from serving import in_process_agent, wait_for

ATTACKER = "127.0.0.2"
# The attack of the issue: 39 source addresses (127.0.0.2 to 127.0.0.40), 8 connections each.
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 41)]
PER_ATTACKER = 8


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
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


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


def limit(monkeypatch: pytest.MonkeyPatch, agent: Agent, **changes: float) -> None:
    server = agent.http.server
    monkeypatch.setattr(server, "limits", dataclasses.replace(server.limits, **changes))


def scrapes_and_probes(port: int, count: int) -> tuple[int, int, float]:
    """`count` scrapes and `count` /healthz from 127.0.0.1, a fresh connection each as
    Prometheus and the kubelet make them: how many answered 200, and the seconds it took."""
    started = time.monotonic()
    scraped = probed = 0
    for _ in range(count):
        status, body = get(port)
        scraped += status == 200 and b"gpuprobe_node_status" in body
        probed += get(port, "/healthz")[0] == 200
    return scraped, probed, time.monotonic() - started


class Slowloris:
    """Connections from every attacker address that send a request head one byte at a time,
    never finishing it, reopening each the server drops, until stopped."""

    def __init__(self, port: int, per_address: int, every: float = 0.3) -> None:
        self.port, self.per_address, self.every = port, per_address, every
        self.done = threading.Event()
        self.opened = self.dropped = 0
        self.socks: list[tuple[socket.socket, int]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self, source: str) -> None:
        try:
            s = socket.create_connection(
                ("127.0.0.1", self.port), timeout=2, source_address=(source, 0)
            )
        except OSError:
            return
        s.setblocking(False)
        self.socks.append((s, 0))
        self.opened += 1

    def _run(self) -> None:
        line = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 10_000
        for source in ATTACKERS:
            for _ in range(self.per_address):
                self._open(source)
        while not self.done.wait(self.every):
            alive = []
            for s, sent in self.socks:
                try:
                    s.send(line[sent % len(line) : sent % len(line) + 1])
                    alive.append((s, sent + 1))
                except OSError:  # dropped by the server: open another in its place
                    source = s.getsockname()[0]
                    s.close()
                    self.dropped += 1
                    self._open(source)
            self.socks = alive + self.socks[len(alive) + self.dropped :]

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)
        for s, _ in self.socks:
            s.close()


def test_idle_connections_from_39_addresses_leave_metrics_and_healthz_answering(
    agent: Agent,
) -> None:
    """The issue's attack: 312 idle connections from 39 loopback addresses; 30 scrapes and 30
    probes all answer 200, each within its 5 s, and the connections cost no thread each."""
    port = agent.metrics_port
    socks: list[socket.socket] = []
    try:
        for source in ATTACKERS:
            for _ in range(PER_ATTACKER):
                socks.append(
                    socket.create_connection(
                        ("127.0.0.1", port), timeout=5, source_address=(source, 0)
                    )
                )
        assert len(socks) == len(ATTACKERS) * PER_ATTACKER == 312
        scraped, probed, took = scrapes_and_probes(port, 30)
        assert (scraped, probed) == (30, 30)
        assert took < 30.0  # 60 requests; one at a time on a quiet machine takes well under 1 s
        assert threads_named("metrics-http") <= 2  # the loop and the render worker
        assert select.select(socks, [], [], 0)[0] == []  # none of the idle ones was refused
    finally:
        for s in socks:
            s.close()


def test_slowloris_from_39_addresses_leaves_metrics_and_healthz_answering(agent: Agent) -> None:
    """Heads sent a byte at a time from 39 addresses: each connection is dropped at the head
    deadline whatever it sends, and scrapes and probes answer meanwhile."""
    port = agent.metrics_port
    attack = Slowloris(port, PER_ATTACKER)
    try:
        wait_for(lambda: attack.opened >= 312)
        scraped, probed, took = scrapes_and_probes(port, 30)
        assert (scraped, probed) == (30, 30)
        assert took < 30.0
        # Each slow head is cut at its deadline (5 s), not kept alive by its drip.
        wait_for(lambda: attack.dropped >= 312, timeout=15)
    finally:
        attack.stop()


def test_past_the_per_address_bound_the_address_loses_its_longest_waiting_connections(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit(monkeypatch, agent, max_per_peer=16)
    port = agent.metrics_port
    server = agent.http.server
    with idle_connections(port, 16) as old, idle_connections(port, 16, "127.0.0.3") as other:
        wait_for(lambda: server.open_connections() == 32)
        time.sleep(server.limits.evict_after + 0.1)
        with idle_connections(port, 16) as new:
            # Each connection past the bound closed the longest waiting of its address.
            wait_for(lambda: len(answered(old, 0.1)) == 16)
            assert all(s.recv(4096) == b"" for s in old)
            assert answered(new + other, 0.2) == []
            # The address's connections are all fresh now: none is closed for a newcomer
            # (it may be a scraper's whose request is on its way), the newcomer gets 503.
            with idle_connections(port, 1) as (late,):
                assert answered([late], 1.0) == [late]
                assert late.recv(4096).startswith(b"HTTP/1.1 503 ")
            assert answered(new, 0.1) == []
            started = time.monotonic()
            status, body = get(port)  # from 127.0.0.1: its own quota
            assert status == 200 and b"gpuprobe_node_status" in body
            assert get(port, "/healthz")[0] == 200
            assert time.monotonic() - started < 1.0
    wait_for(lambda: server.open_connections() == 0)


def test_an_address_whose_connections_are_all_answering_gets_503(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit(monkeypatch, agent, max_per_peer=1)
    real = agent.metrics_page.render

    def slow(accept: str | None) -> tuple[bytes, str]:
        time.sleep(1.5)
        return real(accept)

    monkeypatch.setattr(agent.metrics_page, "render", slow)
    results: list[int] = []
    scrape = threading.Thread(target=lambda: results.append(get(agent.metrics_port)[0]))
    scrape.start()
    time.sleep(0.3)  # the scrape is being answered: nothing of 127.0.0.1 may be evicted
    status, body = get(agent.metrics_port, "/healthz")
    assert (status, body) == (503, b"too many connections, retry")
    scrape.join(10)
    assert results == [200]


def test_when_every_place_is_taken_the_longest_waiting_connection_makes_room(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = agent.http.server
    monkeypatch.setattr(server, "max_connections", 4)
    with idle_connections(agent.metrics_port, 4) as socks:
        wait_for(lambda: server.open_connections() == 4)
        time.sleep(server.limits.evict_after + 0.1)
        assert get(agent.metrics_port)[0] == 200  # the oldest idle one was closed for it
        assert answered(socks, 1.0) == [socks[0]]
        wait_for(lambda: server.open_connections() == 3)  # the scrape's connection closed
        with idle_connections(agent.metrics_port, 1):
            wait_for(lambda: server.open_connections() == 4)
            assert get(agent.metrics_port, "/healthz")[0] == 200  # the next oldest for this
            assert answered(socks, 1.0) == socks[:2]
        assert server.evicted == 2
    wait_for(lambda: server.open_connections() == 0)


def test_healthz_is_answered_when_no_other_answer_may_start(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit(monkeypatch, agent, max_answering=0)
    status, body = get(agent.metrics_port)
    assert (status, body) == (503, b"too many connections, retry")
    assert get(agent.metrics_port, "/healthz")[0] == 200


def test_a_client_that_sends_no_head_in_time_is_dropped(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit(monkeypatch, agent, head_timeout=0.5)
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


def test_a_body_must_come_within_its_deadline_and_its_bound(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit(monkeypatch, agent, body_timeout=0.5)
    with idle_connections(agent.metrics_port, 2) as (slow, big):
        slow.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab")
        started = time.monotonic()
        assert closed_by_server(slow, 3.0)
        assert time.monotonic() - started < 2.0
        big.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        big.settimeout(3)
        assert big.recv(4096).startswith(b"HTTP/1.1 413 ")
        # A whole body within the bounds is read, and the method answered.
    status, _ = get_post(agent.metrics_port)
    assert status == 405


def test_a_head_past_its_bound_is_431_and_closed(agent: Agent) -> None:
    with idle_connections(agent.metrics_port, 1) as (big,):
        big.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20_000)
        big.settimeout(3)
        answer = big.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431 ") and b"Connection: close" in answer
        assert big.recv(4096) == b""


def get_post(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("POST", "/metrics", body=b"x" * 1000)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_keep_alive_serves_several_requests_on_one_connection(agent: Agent) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", agent.metrics_port, timeout=5)
    try:
        for path in ("/metrics", "/healthz", "/metrics"):
            conn.request("GET", path)
            response = conn.getresponse()
            assert response.status == 200 and response.read()
        assert agent.http.server.open_connections() == 1
        conn.request("HEAD", "/metrics")
        response = conn.getresponse()
        assert response.status == 200 and int(response.headers["Content-Length"]) > 0
        assert response.read() == b""
    finally:
        conn.close()


def test_a_slow_render_does_not_hold_the_probe(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = agent.metrics_page.render

    def slow(accept: str | None) -> tuple[bytes, str]:
        time.sleep(2.0)
        return real(accept)

    monkeypatch.setattr(agent.metrics_page, "render", slow)
    results: list[int] = []
    scrape = threading.Thread(target=lambda: results.append(get(agent.metrics_port)[0]))
    scrape.start()
    time.sleep(0.2)  # the scrape is rendering
    started = time.monotonic()
    assert get(agent.metrics_port, "/healthz")[0] == 200
    assert time.monotonic() - started < 1.0
    scrape.join(10)
    assert results == [200]


def test_a_refused_worker_thread_renders_on_the_loop(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent.http.server._worker.stop()  # the next page wants a new worker thread
    wait_for(lambda: threads_named("metrics-render") == 0)

    def refused(*args: object, **kwargs: object) -> threading.Thread | None:
        return None  # as start_thread answers when pthread_create fails

    monkeypatch.setattr(http_loop, "start_thread", refused)
    status, body = get(agent.metrics_port)
    assert status == 200 and b"gpuprobe_node_status" in body


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


class Pipeliners:
    """The attack of issue 41 item 6: 260 connections from one address, 2,900 pipelined
    `GET /metrics` among them, whose answers are never read (a receive buffer kept small, as a
    client that stopped reading); each connection the server drops is opened again."""

    def __init__(self, port: int, connections: int = 260, requests: int = 2900) -> None:
        self.port, self.connections = port, connections
        per = -(-requests // connections)
        self.burst = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * per
        self.done = threading.Event()
        self.socks: list[socket.socket] = []
        self.opened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.bind((ATTACKER, 0))
            s.settimeout(2)
            s.connect(("127.0.0.1", self.port))
            s.sendall(self.burst)
        except OSError:
            s.close()
            return
        s.setblocking(False)
        self.socks.append(s)
        self.opened += 1

    def _run(self) -> None:
        for _ in range(self.connections):
            self._open()
        while not self.done.wait(0.2):
            alive = []
            for s in self.socks:
                try:  # more requests behind the unread answers, as long as the server takes
                    s.send(self.burst)
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                try:  # peek: closed or reset by the server? (nothing is ever read)
                    gone = s.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                else:
                    alive.append(s)
            self.socks = alive
            for _ in range(self.connections - len(alive)):
                self._open()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def test_pipelined_requests_never_read_leave_metrics_and_readyz_answering() -> None:
    """Answers are bounded per address, not only connections: the 260 pipelining connections
    of one address held every answer slot (/metrics 0 of 30, /readyz 0 of 10, only /healthz
    spared). Now /metrics and /readyz from elsewhere answer every time, and /readyz (answered
    from memory, as /healthz) even from the attacker's own address."""
    with in_process_agent() as agent:
        port = agent.metrics_port
        attack = Pipeliners(port)
        try:
            wait_for(lambda: attack.opened >= 260, timeout=30)
            time.sleep(1.0)  # the answers pile up unread
            started = time.monotonic()
            scraped = sum(
                status == 200 and b"gpuprobe_node_status" in body
                for status, body in (get(port) for _ in range(30))
            )
            ready = sum(get(port, "/readyz")[0] == 200 for _ in range(10))
            assert (scraped, ready) == (30, 10)
            assert time.monotonic() - started < 30.0
            server = agent.http.server
            assert server.answering_of(ATTACKER) <= server.limits.max_answering_per_peer
        finally:
            attack.stop()


@pytest.mark.parametrize(("sent", "answered"), [(17, 17), (18, 1)])
def test_a_connection_answers_at_most_its_bound_of_pipelined_requests(
    agent: Agent, sent: int, answered: int
) -> None:
    """One answer at a time per connection, and at most 16 requests waiting behind it: past
    that the first is answered and the connection closed (the pile is not)."""
    with socket.create_connection(("127.0.0.1", agent.metrics_port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * sent)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
            if got.count(b"HTTP/1.1 200 OK") == sent:
                break
    assert got.count(b"HTTP/1.1 200 OK") == answered
    assert got.count(b"Connection: close") == (1 if answered < sent else 0)
