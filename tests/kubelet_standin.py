"""A kubelet's PodResources v1 service in the tests: the real gRPC API (from the committed
proto) on a real unix socket, at the kubelet's path under a test root.

It answers as the kubelet does (pkg/kubelet/apis/podresources/server_v1.go): List and
GetAllocatableResources from its state, Get by pod name and namespace (an unknown pod is an
error, as is Get where the feature gate is off), and a token-bucket rate limit that rejects
with RESOURCE_EXHAUSTED "rejected by rate limit" (the kubelet's podresources grpc limiter).
It can also hang (a stuck kubelet, to exercise the caller's deadline), or refuse: a socket
file that nobody listens on, as a kubelet leaves behind when it dies.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from gpuprobe.kubelet.podresources.v1 import api_pb2, api_pb2_grpc

SOCKET = "var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass
class KubeletState:
    """What the kubelet answers, and how it behaves."""

    listed: api_pb2.ListPodResourcesResponse
    allocatable: api_pb2.AllocatableResourcesResponse | None  # None: not served (old kubelet)
    hang: threading.Event | None = None  # set: answers; unset: every call waits on it
    get_enabled: bool = True
    burst: int = 10
    calls: list[str] = field(default_factory=list)
    _tokens: float = 10.0
    _last: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allow(self) -> bool:
        """The kubelet's limiter: 100 calls per second, bursts of `burst`."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * 100)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, state: KubeletState) -> None:
        self.state = state

    def _enter(self, name: str, context: Any) -> None:
        self.state.calls.append(name)
        if self.state.hang is not None:
            self.state.hang.wait()
        if not self.state.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def List(self, request: Any, context: Any) -> api_pb2.ListPodResourcesResponse:
        self._enter("List", context)
        return self.state.listed

    def GetAllocatableResources(
        self, request: Any, context: Any
    ) -> api_pb2.AllocatableResourcesResponse:
        self._enter("GetAllocatableResources", context)
        if self.state.allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return self.state.allocatable

    def Get(self, request: Any, context: Any) -> api_pb2.GetPodResourcesResponse:
        self._enter("Get", context)
        if not self.state.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self.state.listed.pod_resources:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )


def state_from_json(content: dict[str, Any]) -> KubeletState:
    """A kubelet answering what a snapshot's podresources.json recorded."""
    listed = json_format.ParseDict(content["list"], api_pb2.ListPodResourcesResponse())
    allocatable = None
    if "allocatable" in content:
        allocatable = json_format.ParseDict(
            content["allocatable"], api_pb2.AllocatableResourcesResponse()
        )
    return KubeletState(listed, allocatable)


@contextmanager
def kubelet(root: Path, state: KubeletState) -> Iterator[KubeletState]:
    """Serve `state` on root/var/lib/kubelet/pod-resources/kubelet.sock until the block ends."""
    path = root / SOCKET
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # the kubelet removes a stale socket before it listens
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(state), server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield state
    finally:
        if state.hang is not None:
            state.hang.set()  # let hung handlers finish so the server stops at once
        server.stop(grace=None).wait()
        path.unlink(missing_ok=True)


@contextmanager
def dead_kubelet(root: Path) -> Iterator[Path]:
    """A socket file at the kubelet's path that nobody listens on (connections refused)."""
    path = root / SOCKET
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))  # bound, never listening: connect() gets ECONNREFUSED
    try:
        yield path
    finally:
        sock.close()
        path.unlink(missing_ok=True)
