"""The fan-out: every target asked at once (up to the concurrency), each bounded by the
deadline, the answers in the order of the targets."""

from __future__ import annotations

import socket
import threading
import time

from gpuprobe.audit.fanout import fetch_all
from gpuprobe.client import Credentials
from gpuprobe.unreachable import Failure
from grpc_standins import hangs, report_of, standin


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_fetch(targets: list[str], deadline: float, concurrency: int) -> float:
    started = time.monotonic()
    fetched = fetch_all(targets, Credentials(), deadline, concurrency)
    elapsed = time.monotonic() - started
    assert [f.unreachable.failure if f.unreachable else None for f in fetched] == [
        Failure.TIMEOUT
    ] * len(targets)
    return elapsed


def test_hung_agents_cost_one_deadline_each_round_of_concurrency() -> None:
    release = threading.Event()
    with standin(hangs(release), ports=6, workers=8) as server:
        try:
            # All six at once: one deadline.
            assert 0.4 <= timed_fetch(server.targets, 0.4, 6) < 0.4 + 0.6
            # Two at a time: three rounds of the deadline.
            assert 1.2 <= timed_fetch(server.targets, 0.4, 2) < 1.2 + 0.8
        finally:
            release.set()


def test_answers_come_back_in_the_order_of_the_targets() -> None:
    response = report_of("synthetic-h100-8gpu-healthy", node="answering")
    dead = f"127.0.0.1:{closed_port()}"
    with standin(lambda context: response, ports=2) as server:
        targets = [server.targets[0], dead, server.targets[1]]
        fetched = fetch_all(targets, Credentials(), 5, 3)
    assert [f.target for f in fetched] == targets
    assert [f.report.node if f.report else None for f in fetched] == [
        "answering",
        None,
        "answering",
    ]
    assert fetched[1].unreachable is not None
    assert fetched[1].unreachable.failure == Failure.REFUSED


def test_no_targets() -> None:
    assert fetch_all([], Credentials()) == []
