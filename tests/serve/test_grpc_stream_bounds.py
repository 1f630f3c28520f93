"""No token is needed to open a stream, so streams must not be able to starve the unary calls
(the attack: 33 server-reflection streams held open took every worker, GetReport and the
health check timed out, and the liveness probe had Kubernetes restart the agent). Each kind
(reflection, health Watch, WatchReports, any other) is bounded in all and per caller, refused
with RESOURCE_EXHAUSTED beyond; GetReport and health answer at once meanwhile. Loopback only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gpuprobe.serve import grpc_server
from gpuprobe.serve.agent import Agent
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc
from serving import in_process_agent, wait_for


@pytest.fixture
def agent() -> Iterator[Agent]:
    with in_process_agent(names=["driver"]) as running:
        yield running


class Held:
    """Streams held open on one channel until closed; each either got its first answer
    (admitted) or a status (refused)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.release = threading.Event()
        self.calls: list[Any] = []
        self.refused: list[grpc.RpcError] = []

    def reflection(self, count: int) -> None:
        stub = reflection_pb2_grpc.ServerReflectionStub(self.channel)

        def requests() -> Iterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            self.release.wait(30)  # the stream stays open, as the attacker's did

        self._open(count, lambda: stub.ServerReflectionInfo(requests(), timeout=30))

    def health_watch(self, count: int) -> None:
        stub = health_pb2_grpc.HealthStub(self.channel)
        request = health_pb2.HealthCheckRequest(service="")
        self._open(count, lambda: stub.Watch(request, timeout=30))

    def watch_reports(self, count: int) -> None:
        stub = pb_grpc.NodeDiagnosticsStub(self.channel)
        self._open(count, lambda: stub.WatchReports(pb.WatchReportsRequest(), timeout=30))

    def _open(self, count: int, start: Any) -> None:
        for _ in range(count):
            call = start()
            try:
                next(call)  # admitted streams answer at once
                self.calls.append(call)
            except grpc.RpcError as exc:
                self.refused.append(exc)

    def close(self) -> None:
        self.release.set()
        for call in self.calls:
            call.cancel()


@contextmanager
def held(target: str) -> Iterator[Held]:
    with grpc.insecure_channel(target) as channel:
        streams = Held(channel)
        try:
            yield streams
        finally:
            streams.close()


def unary_answers(target: str, calls: int = 20) -> list[float]:
    """GetReport and health Check latencies (s) on a fresh channel; raises on any failure."""
    took = []
    with grpc.insecure_channel(target) as channel:
        diagnostics = pb_grpc.NodeDiagnosticsStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(calls):
            started = time.monotonic()
            diagnostics.GetReport(pb.GetReportRequest(), timeout=2)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            took.append(time.monotonic() - started)
    return took


def test_forty_reflection_streams_leave_getreport_and_health_answering(agent: Agent) -> None:
    target = f"127.0.0.1:{agent.grpc_port}"
    with held(target) as streams:
        streams.reflection(40)
        assert len(streams.calls) == grpc_server.REFLECTION.per_peer
        assert len(streams.refused) == 40 - grpc_server.REFLECTION.per_peer
        refusal = streams.refused[0]
        assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refusal.details() == (
            "too many ServerReflectionInfo streams from one caller (at most 2); close one first"
        )
        assert max(unary_answers(target)) < 0.5
    # Their slots are back once they end.
    wait_for(lambda: agent.streams.open_streams("ServerReflectionInfo") == 0)


def test_the_total_bound_holds_whatever_the_callers(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every caller here is 127.0.0.1: lift the per-caller bound to see the total one.
    bounds = agent.streams.bounds
    monkeypatch.setitem(bounds, "ServerReflectionInfo", grpc_server.StreamBound(4, 40))
    target = f"127.0.0.1:{agent.grpc_port}"
    with held(target) as streams:
        streams.reflection(40)
        assert len(streams.calls) == 4
        assert {e.code() for e in streams.refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert streams.refused[0].details() == (
            "too many ServerReflectionInfo streams open (at most 4); try again later"
        )
        assert max(unary_answers(target)) < 0.5


def test_every_health_watch_and_reflection_stream_at_once_leave_unary_calls_answering(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each health Watch holds a worker (a blocking generator): all 32, with every reflection
    stream, still leave GetReport and health Check their own workers."""
    bounds = agent.streams.bounds
    for kind in ("health Watch", "ServerReflectionInfo"):  # one caller here: lift per-caller
        monkeypatch.setitem(bounds, kind, grpc_server.StreamBound(bounds[kind].total, 64))
    target = f"127.0.0.1:{agent.grpc_port}"
    with held(target) as streams:
        streams.health_watch(grpc_server.HEALTH_WATCH.total + 4)
        streams.reflection(grpc_server.REFLECTION.total)
        assert len(streams.calls) == grpc_server.HEALTH_WATCH.total + grpc_server.REFLECTION.total
        assert [e.details() for e in streams.refused] == [
            "too many health Watch streams open (at most 32); try again later"
        ] * 4
        assert max(unary_answers(target)) < 0.5


def test_every_kind_of_stream_is_bounded_per_caller(agent: Agent) -> None:
    target = f"127.0.0.1:{agent.grpc_port}"
    with held(target) as streams:
        streams.health_watch(10)
        streams.watch_reports(10)
        kinds = {"health Watch": 4, "WatchReports": 4}
        assert len(streams.calls) == sum(kinds.values())
        assert len(streams.refused) == 20 - sum(kinds.values())
        details = sorted({str(e.details()) for e in streams.refused})
        assert details == [
            f"too many {kind} streams from one caller (at most {n}); close one first"
            for kind, n in sorted(kinds.items())
        ]
        assert max(unary_answers(target)) < 0.5


def test_the_pool_leaves_unary_workers_whatever_the_streams() -> None:
    """Every stream kind holds a worker (health Watch too: a blocking generator); all of
    them at their bounds still leave UNARY_WORKERS."""
    for watchers in (1, 16, 256):
        bounds = grpc_server.stream_bounds(watchers)
        assert set(bounds) == {"ServerReflectionInfo", "health Watch", "WatchReports", "stream"}
        holding = sum(b.total for b in bounds.values())
        assert grpc_server.pool_workers(watchers) - holding == grpc_server.UNARY_WORKERS


def test_refused_streams_are_logged_at_most_once_a_minute_per_caller(
    agent: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    target = f"127.0.0.1:{agent.grpc_port}"
    with caplog.at_level(logging.WARNING, logger="gpuprobe.serve"), held(target) as streams:
        streams.reflection(30)
    lines = [r for r in caplog.records if r.getMessage() == "stream refused"]
    assert len(streams.refused) == 28
    assert len(lines) == 1
    assert getattr(lines[0], "peer", None) == "127.0.0.1"
