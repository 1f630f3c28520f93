"""gRPC servers on loopback that misbehave the way audit targets do in the field: an agent
hung past any deadline, an auth proxy that wants a bearer token before GetReport, something that
answers gRPC without the gpuprobe API. Each is a real grpc server on an ephemeral port."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from conftest import snapshot
from gpuprobe import wire
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.serve.security import bearer
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc

# GetReport's behaviour: given the call's context, return the response or abort.
Behaviour = Callable[[Any], pb.GetReportResponse]


@dataclass
class Standin:
    """A running stand-in: where it listens and the metadata of every call it got."""

    ports: list[int]
    calls: list[dict[str, str]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.ports[0]}"

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]


class _Service(pb_grpc.NodeDiagnosticsServicer):
    def __init__(self, behaviour: Behaviour, calls: list[dict[str, str]]) -> None:
        self.behaviour = behaviour
        self.calls = calls

    def GetReport(self, request: pb.GetReportRequest, context: Any) -> pb.GetReportResponse:
        self.calls.append(dict(context.invocation_metadata()))
        return self.behaviour(context)


@contextmanager
def standin(behaviour: Behaviour | None, ports: int = 1, workers: int = 16) -> Iterator[Standin]:
    """A server whose GetReport does `behaviour` (None: no NodeDiagnostics service at all,
    only health), on `ports` loopback ports."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    calls: list[dict[str, str]] = []
    if behaviour is None:
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    else:
        pb_grpc.add_NodeDiagnosticsServicer_to_server(_Service(behaviour, calls), server)
    bound = [server.add_insecure_port("127.0.0.1:0") for _ in range(ports)]
    server.start()
    try:
        yield Standin(bound, calls)
    finally:
        server.stop(grace=0)


def report_of(snapshot_name: str, node: str | None = None) -> pb.GetReportResponse:
    """The GetReport answer an agent on this snapshot would give."""
    report = run_checks(snapshot_host(snapshot(snapshot_name), node), Config(), list(CHECKS))
    return pb.GetReportResponse(report=wire.report_to_proto(report))


def hangs(release: threading.Event) -> Behaviour:
    """An agent that hangs in GetReport until `release` is set (or 60 s)."""

    def behaviour(context: Any) -> pb.GetReportResponse:
        release.wait(60)
        return pb.GetReportResponse()

    return behaviour


def wants_token(token: str, answer: pb.GetReportResponse) -> Behaviour:
    """An auth proxy before an agent: GetReport needs `authorization: Bearer <token>`."""

    def behaviour(context: Any) -> pb.GetReportResponse:
        presented = bearer(context.invocation_metadata())
        if presented is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bearer token required")
        if presented != token:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "token not allowed")
        return answer

    return behaviour


def fails(code: grpc.StatusCode, details: str) -> Behaviour:
    """GetReport always fails with `code`."""

    def behaviour(context: Any) -> pb.GetReportResponse:
        context.abort(code, details)
        raise AssertionError("abort returned")

    return behaviour
