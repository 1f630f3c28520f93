"""The kubelet's PodResources API (v1): asked live over its unix socket, or replayed.

The kubelet serves `v1.PodResourcesLister` on `/var/lib/kubelet/pod-resources/kubelet.sock`:
`List` (every pod on the node and the devices, CPUs and DRA claims its containers hold) and
`GetAllocatableResources` (what the node can hand out; kubelets before 1.23 answer
UNIMPLEMENTED, which leaves it out). Each call is bounded by a deadline, so a hung kubelet
costs that deadline and is reported as DEADLINE_EXCEEDED.

A snapshot keeps the answers in `podresources.json`, in protobuf's JSON mapping as
`MessageToDict` writes it (lowerCamelCase names):

    {"list": {"podResources": [...]}, "allocatable": {"devices": [...]}}
    {"error": "UNAVAILABLE"}          (the kubelet refused or hung: the gRPC status name)

and no file at all where the node has no kubelet socket.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import json_format

from gpuprobe.errors import SnapshotError
from gpuprobe.host.fs import HostFS
from gpuprobe.host.jsonfile import read_json
from gpuprobe.kubelet.podresources.v1 import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
PODRESOURCES_FILE = "podresources.json"
# The kubelet's own limit on a PodResources answer (podresources.DefaultMaxMsgSize, 16 MiB).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class PodResourcesAnswer:
    """What the kubelet answered, or why it did not.

    `absent`: no socket at the path (not a Kubernetes node, or the kubelet is down);
    `error`: the gRPC status name of a refused or hung call (UNAVAILABLE, DEADLINE_EXCEEDED).
    `allocatable` is None where the kubelet does not serve GetAllocatableResources.
    """

    list: api_pb2.ListPodResourcesResponse | None = None
    allocatable: api_pb2.AllocatableResourcesResponse | None = None
    error: str | None = None
    absent: bool = False

    def to_json(self) -> dict[str, Any]:
        """podresources.json's content (never called for an absent socket)."""
        if self.error is not None or self.list is None:
            return {"error": self.error or "UNKNOWN"}
        content = {"list": json_format.MessageToDict(self.list)}
        if self.allocatable is not None:
            content["allocatable"] = json_format.MessageToDict(self.allocatable)
        return content


ABSENT = PodResourcesAnswer(absent=True)


class PodResources(Protocol):
    """Where the kubelet's answers come from: its socket, or a snapshot."""

    def ask(self, socket: str, timeout_s: float) -> PodResourcesAnswer:
        """List (and GetAllocatableResources) from the kubelet at the host path `socket`."""
        ...


class LivePodResources:
    """The kubelet on this host, over its unix socket (a host path under the HostFS root)."""

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs

    def ask(self, socket: str, timeout_s: float) -> PodResourcesAnswer:
        """One List and one GetAllocatableResources, each within `timeout_s`."""
        if not self.fs.is_socket(socket):
            return ABSENT
        try:
            target = f"unix://{self.fs.resolved_path(socket)}"
        except OSError:
            return ABSENT
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        with grpc.insecure_channel(target, options=options) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            try:
                listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout_s)
            except grpc.RpcError as exc:
                return PodResourcesAnswer(error=_status_name(exc))
            try:
                allocatable = stub.GetAllocatableResources(
                    api_pb2.AllocatableResourcesRequest(), timeout=timeout_s
                )
            except grpc.RpcError:
                # Older kubelets do not serve it; List alone still attributes every device.
                allocatable = None
        return PodResourcesAnswer(list=listed, allocatable=allocatable)


def _status_name(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


class RecordingPodResources:
    """The live kubelet, its last answer kept for `gpuprobe capture`."""

    def __init__(self, inner: PodResources) -> None:
        self.inner = inner
        self.last: PodResourcesAnswer | None = None
        self._lock = threading.Lock()

    def ask(self, socket: str, timeout_s: float) -> PodResourcesAnswer:
        """Ask the live kubelet and keep its answer."""
        answer = self.inner.ask(socket, timeout_s)
        with self._lock:
            self.last = answer
        return answer


class ReplayedPodResources:
    """A snapshot's kubelet: the same answer every time, whatever the socket's path."""

    def __init__(self, answer: PodResourcesAnswer = ABSENT) -> None:
        self.answer = answer

    def ask(self, socket: str, timeout_s: float) -> PodResourcesAnswer:
        """The recorded answer."""
        return self.answer


def answer_from_json(content: Any, where: str = PODRESOURCES_FILE) -> PodResourcesAnswer:
    """A recorded answer from podresources.json content; SnapshotError on a bad shape."""
    if not isinstance(content, dict):
        raise SnapshotError(f"{where}: not a JSON object")
    if "error" in content:
        if not isinstance(content["error"], str) or set(content) != {"error"}:
            raise SnapshotError(f'{where}: "error" must be a gRPC status name, alone')
        return PodResourcesAnswer(error=content["error"])
    if not isinstance(content.get("list"), dict):
        raise SnapshotError(f'{where}: needs a "list" object (or an "error")')
    unknown = set(content) - {"list", "allocatable"}
    if unknown:
        raise SnapshotError(f"{where}: unknown keys {sorted(unknown)}")
    try:
        listed = json_format.ParseDict(content["list"], api_pb2.ListPodResourcesResponse())
        allocatable = None
        if content.get("allocatable") is not None:
            allocatable = json_format.ParseDict(
                content["allocatable"], api_pb2.AllocatableResourcesResponse()
            )
    except json_format.ParseError as exc:
        raise SnapshotError(f"{where}: {exc}") from None
    return PodResourcesAnswer(list=listed, allocatable=allocatable)


def load_podresources(path: Path) -> PodResourcesAnswer:
    """A snapshot's recorded answer; ABSENT when it has no podresources.json."""
    try:
        content = read_json(path)
    except FileNotFoundError:
        return ABSENT
    return answer_from_json(content, str(path))


def write_podresources(path: Path, answer: PodResourcesAnswer) -> None:
    """Write podresources.json (nothing for an absent socket, as the contract says)."""
    if answer.absent:
        return
    path.write_text(json.dumps(answer.to_json(), indent=1) + "\n", encoding="utf-8")
