"""The gRPC health service's Watch streams: status changes racing Watch streams that close
leave the server answering, and a shutdown tells every open Watch NOT_SERVING."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuprobe.serve.agent import Agent
from gpuprobe.serve.grpc_server import SERVICE_NAME
from serving import in_process_agent

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def agent() -> Iterator[Agent]:
    with in_process_agent("kvm-epyc-nogpu") as started:
        yield started


def test_status_changes_racing_closing_watch_streams_leave_the_server_answering(
    agent: Agent,
) -> None:
    """With grpc_health's non-blocking Watch this froze the whole server within about 3 s:
    `set` sent to each Watch holding the servicer's lock, while a Watch that closed took that
    lock in the thread the send waited on."""
    target = f"127.0.0.1:{agent.grpc_port}"
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            agent.health.set(SERVICE_NAME, NOT_SERVING)
            agent.health.set(SERVICE_NAME, SERVING)

    def churn() -> None:  # Watch streams that read a status or two and go
        while not stop.is_set():
            with grpc.insecure_channel(target) as channel:
                call = health_pb2_grpc.HealthStub(channel).Watch(
                    health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5
                )
                try:
                    next(call)
                    next(call)
                except grpc.RpcError:
                    pass  # refused past the per-caller bound: another round
                call.cancel()

    threads = [threading.Thread(target=flip), *(threading.Thread(target=churn) for _ in range(3))]
    for thread in threads:
        thread.start()
    answered = 0
    try:
        end = time.monotonic() + 8
        with grpc.insecure_channel(target) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            while time.monotonic() < end:
                reply = check(health_pb2.HealthCheckRequest(service=""), timeout=3)
                assert reply.status == SERVING
                answered += 1
                time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert answered >= 20
    assert not any(thread.is_alive() for thread in threads)


def test_a_shutdown_tells_each_open_watch_not_serving_and_ends_it() -> None:
    with in_process_agent("kvm-epyc-nogpu") as agent:
        channel = grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}")
        calls = [
            health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=service), timeout=30
            )
            for service in ("", SERVICE_NAME)
        ]
        assert [next(call).status for call in calls] == [SERVING, SERVING]
        started = time.monotonic()
        agent.stop(grace=2)
        assert [next(call).status for call in calls] == [NOT_SERVING, NOT_SERVING]
        for call in calls:
            with pytest.raises((grpc.RpcError, StopIteration)):
                next(call)
        assert time.monotonic() - started < 5
        channel.close()
