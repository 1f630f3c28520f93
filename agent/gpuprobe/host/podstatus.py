"""The node's pods as the Kubernetes API server reports them: asked live, or replayed.

Some failures of GPU pods are written nowhere on the node's disk, only in the pod's status in
the API: a pod the kubelet rejected at admission (phase `Failed`, `status.reason`
`UnexpectedAdmissionError`, no container ever ran), a container the runtime refused to create
or start (`state.waiting` `CreateContainerError` / `RunContainerError`, `lastState.terminated`
`StartError`, their `message` the runtime's error). With API access, the agent lists the pods
bound to its node (`GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`; the live source is
`gpuprobe.kube.pods`, which holds the client library) and keeps only what the `pods` check
reads, bounded: at most `MAX_PODS` pods, `MAX_CONTAINERS` containers each, messages cut to
`MAX_MESSAGE` characters (the middle goes: a runtime's error ends with its cause, a kubelet's
begins with it).

A snapshot keeps the answer in `pod-statuses.json` (the API's field names):

    {"pods": [{"namespace": "ml-team", "name": "...", "uid": "...", "phase": "Failed",
               "reason": "UnexpectedAdmissionError", "message": "Pod was rejected: ...",
               "containers": [{"name": "trainer", "init": false,
                               "gpuResources": ["nvidia.com/gpu"], "restartCount": 0,
                               "state": {"waiting": {"reason": "...", "message": "..."}},
                               "lastState": {"terminated": {"reason": "StartError", ...}}}]}],
     "truncated": false}
    {"error": {"code": "403", "message": "pods is forbidden: ..."}}

and no file where the agent had no API access (the feature off, or no credentials).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json

POD_STATUSES_FILE = "pod-statuses.json"
# A node runs at most a few hundred pods (the kubelet's --max-pods: 110 by default, 250 is
# the upstream limit tested); past this many the answer says it was cut.
MAX_PODS = 500
MAX_CONTAINERS = 64  # per pod, init containers included
# The kubelet's own bound on a termination message (4096 bytes); a runtime's create error
# is rarely longer.
MAX_MESSAGE = 4096
MAX_ERROR = 1024
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
AMD_GPU_RESOURCE = "amd.com/gpu"  # the AMD device plugin's (ROCm pods' HIP failures count)
# The API's PodStatus names of the container states the check reads.
STATE_KEYS = ("reason", "message", "exitCode", "finishedAt")


@dataclass(frozen=True)
class State:
    """A container's waiting or terminated state (`exit_code`, `finished_at`: terminated)."""

    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    finished_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The state as the API names its fields (unset ones left out)."""
        values = (self.reason, self.message, self.exit_code, self.finished_at)
        return {k: v for k, v in zip(STATE_KEYS, values, strict=True) if v is not None}


@dataclass(frozen=True)
class ContainerStatus:
    """One container of a pod: the GPUs it asks for and its current and last state."""

    name: str
    init: bool = False
    # The nvidia.com/gpu, nvidia.com/mig-* and amd.com/gpu it asks for.
    gpu_resources: tuple[str, ...] = ()
    restart_count: int = 0
    waiting: State | None = None
    terminated: State | None = None
    last_terminated: State | None = None
    # `state.running.startedAt` of a container that runs now (None: it does not).
    running_since: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The container as pod-statuses.json holds it."""
        state: dict[str, Any] = {}
        if self.running_since is not None:
            state["running"] = {"startedAt": self.running_since}
        if self.waiting is not None:
            state["waiting"] = self.waiting.to_json()
        if self.terminated is not None:
            state["terminated"] = self.terminated.to_json()
        last = {"terminated": self.last_terminated.to_json()} if self.last_terminated else {}
        return {
            "name": self.name,
            "init": self.init,
            "gpuResources": list(self.gpu_resources),
            "restartCount": self.restart_count,
            "state": state,
            "lastState": last,
        }


@dataclass(frozen=True)
class PodStatus:
    """One pod bound to the node: who it is, its phase, reason and message, its containers."""

    namespace: str
    name: str
    uid: str = ""
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    containers: tuple[ContainerStatus, ...] = ()

    @property
    def asks_for_gpus(self) -> bool:
        """Whether a container of the pod asks for GPUs: NVIDIA's, MIG devices or AMD's."""
        return any(c.gpu_resources for c in self.containers)

    def to_json(self) -> dict[str, Any]:
        """The pod as pod-statuses.json holds it."""
        d: dict[str, Any] = {"namespace": self.namespace, "name": self.name, "uid": self.uid}
        for key, value in (("phase", self.phase), ("reason", self.reason)):
            if value is not None:
                d[key] = value
        if self.message is not None:
            d["message"] = self.message
        d["containers"] = [c.to_json() for c in self.containers]
        return d


@dataclass(frozen=True)
class ApiProblem:
    """Why the API server did not answer: `code` an HTTP status (`403`), `timeout`,
    `unreachable`, `too_large` or `invalid` (kube/bounded.py), and its message."""

    code: str
    message: str


@dataclass(frozen=True)
class PodStatusAnswer:
    """The node's pods as the API server listed them, or why it did not.

    `absent`: the agent has no API access (the feature off or no credentials); `error`: the
    call failed; `truncated`: the node had more than MAX_PODS pods and the rest were not read.
    """

    pods: tuple[PodStatus, ...] = ()
    truncated: bool = False
    error: ApiProblem | None = None
    absent: bool = False

    def to_json(self) -> dict[str, Any]:
        """pod-statuses.json's content (never called for an absent answer)."""
        if self.error is not None:
            return {"error": {"code": self.error.code, "message": self.error.message}}
        return {"pods": [p.to_json() for p in self.pods], "truncated": self.truncated}


ABSENT = PodStatusAnswer(absent=True)


def failed(code: str, message: str) -> PodStatusAnswer:
    """The answer of a call that failed (its message bounded)."""
    return PodStatusAnswer(error=ApiProblem(code, _bounded(" ".join(message.split()), MAX_ERROR)))


class PodStatuses(Protocol):
    """Where the node's pods come from: the API server, or a snapshot."""

    def ask(self, node: str) -> PodStatusAnswer:
        """The pods bound to `node`, as the API server reports them."""
        ...


class RecordingPodStatuses:
    """The live API server, its last answer kept for `gpuprobe capture`."""

    def __init__(self, inner: PodStatuses) -> None:
        self.inner = inner
        self.last: PodStatusAnswer | None = None
        self._lock = threading.Lock()

    def ask(self, node: str) -> PodStatusAnswer:
        """Ask the live API server and keep its answer."""
        answer = self.inner.ask(node)
        with self._lock:
            self.last = answer
        return answer


@dataclass
class ReplayedPodStatuses:
    """A snapshot's API server (or none at all): the same answer for any node name."""

    answer: PodStatusAnswer = field(default=ABSENT)

    def ask(self, node: str) -> PodStatusAnswer:
        """The recorded answer."""
        return self.answer


# --- from the API's Pod objects ---


def pod_from_api(pod: Mapping[str, Any]) -> PodStatus:
    """What the check keeps of one Pod object (as `kubectl get pod -o json` prints it)."""
    meta = _map(pod.get("metadata"))
    spec, status = _map(pod.get("spec")), _map(pod.get("status"))
    asks: dict[tuple[bool, str], tuple[str, ...]] = {}
    order: list[tuple[bool, str]] = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for container in _list(spec.get(key)):
            name = str(_map(container).get("name") or "")
            asks[(init, name)] = _gpu_resources(_map(_map(container).get("resources")))
            order.append((init, name))
    seen: dict[tuple[bool, str], Mapping[str, Any]] = {}
    for init, key in ((True, "initContainerStatuses"), (False, "containerStatuses")):
        for entry in _list(status.get(key)):
            name = str(_map(entry).get("name") or "")
            seen[(init, name)] = _map(entry)
            if (init, name) not in asks:
                order.append((init, name))
    containers = []
    for init, name in order[:MAX_CONTAINERS]:
        entry = seen.get((init, name), {})
        state, last = _map(entry.get("state")), _map(entry.get("lastState"))
        restarts = entry.get("restartCount")
        containers.append(
            ContainerStatus(
                name,
                init,
                asks.get((init, name), ()),
                restarts if isinstance(restarts, int) and restarts >= 0 else 0,
                _state(state.get("waiting")),
                _state(state.get("terminated")),
                _state(last.get("terminated")),
                _running_since(state.get("running")),
            )
        )
    return PodStatus(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        _text(status.get("phase"), 64),
        _text(status.get("reason"), 256),
        _text(status.get("message"), MAX_MESSAGE),
        tuple(containers),
    )


def _gpu_resources(resources: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPU resources a container asks for, NVIDIA's (GPUs, MIG devices) and AMD's (limits,
    or requests: extended resources must have both, equal), at a quantity above zero."""
    found = set()
    for kind in ("limits", "requests"):
        for name, quantity in _map(resources.get(kind)).items():
            wanted = name in (GPU_RESOURCE, AMD_GPU_RESOURCE) or str(name).startswith(
                MIG_RESOURCE_PREFIX
            )
            if wanted and str(quantity).strip() not in ("0", ""):
                found.add(str(name))
    return tuple(sorted(found))


def _running_since(value: Any) -> str | None:
    """When a running container started (the API's `state.running`; "" when it says no
    time); None for a container that does not run."""
    if not isinstance(value, Mapping):
        return None
    started = value.get("startedAt")
    return started[:64] if isinstance(started, str) else ""


def _state(value: Any) -> State | None:
    if not isinstance(value, Mapping):
        return None
    code = value.get("exitCode")
    return State(
        _text(value.get("reason"), 256),
        _text(value.get("message"), MAX_MESSAGE),
        code if isinstance(code, int) and not isinstance(code, bool) else None,
        _text(value.get("finishedAt"), 64),
    )


def _text(value: Any, limit: int) -> str | None:
    return _bounded(value, limit) if isinstance(value, str) and value else None


def _bounded(text: str, limit: int) -> str:
    """At most `limit` characters: the start and the end, the middle cut out."""
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return f"{text[:half]} … {text[-half:]}"


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- pod-statuses.json ---


def answer_from_json(content: Any, where: str = POD_STATUSES_FILE) -> PodStatusAnswer:
    """A recorded answer from pod-statuses.json content; SnapshotError on a bad shape."""
    if not isinstance(content, dict):
        raise SnapshotError(f"{where}: not a JSON object")
    if "error" in content:
        error = content["error"]
        if (
            set(content) != {"error"}
            or not isinstance(error, dict)
            or set(error) != {"code", "message"}
            or not all(isinstance(v, str) for v in error.values())
        ):
            raise SnapshotError(f'{where}: "error" must be {{"code", "message"}} strings, alone')
        return PodStatusAnswer(error=ApiProblem(error["code"], error["message"]))
    if set(content) != {"pods", "truncated"} or not isinstance(content["truncated"], bool):
        raise SnapshotError(f'{where}: needs "pods" and "truncated" (or an "error")')
    pods = content["pods"]
    if not isinstance(pods, list) or len(pods) > MAX_PODS:
        raise SnapshotError(f'{where}: "pods" must be a list of at most {MAX_PODS}')
    return PodStatusAnswer(
        tuple(_pod(p, f"{where}: pods[{i}]") for i, p in enumerate(pods)), content["truncated"]
    )


_POD_KEYS = {"namespace", "name", "uid", "phase", "reason", "message", "containers"}
_CONTAINER_KEYS = {"name", "init", "gpuResources", "restartCount", "state", "lastState"}


def _pod(d: Any, where: str) -> PodStatus:
    if not isinstance(d, dict) or not set(d) <= _POD_KEYS:
        raise SnapshotError(f"{where}: not a pod object (keys {sorted(_POD_KEYS)})")
    containers = d.get("containers")
    if not isinstance(containers, list) or len(containers) > MAX_CONTAINERS:
        raise SnapshotError(f'{where}: "containers" must be a list of at most {MAX_CONTAINERS}')
    return PodStatus(
        _required(d, "namespace", where),
        _required(d, "name", where),
        _required(d, "uid", where),
        _optional(d, "phase", where),
        _optional(d, "reason", where),
        _optional(d, "message", where),
        tuple(_container(c, f"{where}.containers[{i}]") for i, c in enumerate(containers)),
    )


def _container(d: Any, where: str) -> ContainerStatus:
    if not isinstance(d, dict) or set(d) != _CONTAINER_KEYS:
        raise SnapshotError(f"{where}: a container needs exactly {sorted(_CONTAINER_KEYS)}")
    gpus, restarts = d["gpuResources"], d["restartCount"]
    if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
        raise SnapshotError(f'{where}: "gpuResources" must be a list of strings')
    if not isinstance(restarts, int) or isinstance(restarts, bool) or restarts < 0:
        raise SnapshotError(f'{where}: "restartCount" must be a count')
    if not isinstance(d["init"], bool):
        raise SnapshotError(f'{where}: "init" must be true or false')
    state, last = d["state"], d["lastState"]
    if not isinstance(state, dict) or not set(state) <= {"running", "waiting", "terminated"}:
        raise SnapshotError(f'{where}: "state" may hold "running", "waiting", "terminated" only')
    running = state.get("running")
    if running is not None and (
        not isinstance(running, dict)
        or set(running) != {"startedAt"}
        or not isinstance(running["startedAt"], str)
    ):
        raise SnapshotError(f'{where}: "state.running" must be {{"startedAt": a string}}')
    if not isinstance(last, dict) or not set(last) <= {"terminated"}:
        raise SnapshotError(f'{where}: "lastState" may hold "terminated" only')
    return ContainerStatus(
        _required(d, "name", where),
        d["init"],
        tuple(gpus),
        restarts,
        _state_json(state.get("waiting"), f"{where}.state.waiting"),
        _state_json(state.get("terminated"), f"{where}.state.terminated"),
        _state_json(last.get("terminated"), f"{where}.lastState.terminated"),
        running["startedAt"] if running is not None else None,
    )


def _state_json(d: Any, where: str) -> State | None:
    if d is None:
        return None
    if not isinstance(d, dict) or not set(d) <= set(STATE_KEYS):
        raise SnapshotError(f"{where}: a state may hold {', '.join(STATE_KEYS)} only")
    code = d.get("exitCode")
    if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
        raise SnapshotError(f'{where}: "exitCode" must be an integer')
    return State(
        _optional(d, "reason", where),
        _optional(d, "message", where),
        code,
        _optional(d, "finishedAt", where),
    )


def _required(d: dict[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str):
        raise SnapshotError(f'{where}: "{key}" must be a string')
    return value


def _optional(d: dict[str, Any], key: str, where: str) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise SnapshotError(f'{where}: "{key}" must be a string')
    return value


def load_pod_statuses(path: Path) -> PodStatusAnswer:
    """A snapshot's recorded answer; ABSENT when it has no pod-statuses.json."""
    try:
        content = read_json(path)
    except FileNotFoundError:
        return ABSENT
    return answer_from_json(content, str(path))
