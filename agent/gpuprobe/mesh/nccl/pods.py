"""A test's pods as the API shows them, digested to what decides the test: where each runs,
whether the scheduler placed it (and if not, its words), what its container waits for or
ended with. Pure: no calls.

Roles: the MPI Operator labels its pods `training.kubeflow.org/job-role` (`launcher`,
`worker`; the worker's index in `training.kubeflow.org/replica-index`); an Indexed Job's pods
carry their index in the `batch.kubernetes.io/job-completion-index` annotation (and label,
from Kubernetes 1.28).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LAUNCHER, WORKER, RANK = "launcher", "worker", "rank"
ROLE_LABEL = "training.kubeflow.org/job-role"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class PodState:
    """One pod of a test."""

    name: str
    hostname: str  # what NCCL calls the machine (the pod's hostname)
    node: str | None  # where the scheduler bound it (None: not yet)
    phase: str
    role: str
    index: int | None
    container: str  # the container whose log and state count
    unschedulable: str | None = None  # PodScheduled=False: the scheduler's words
    waiting: str | None = None  # the container waits: `Reason: message`
    ended: str | None = None  # the container ended: `Reason (exit N): message`
    exit_code: int | None = None
    ready: bool = False

    @property
    def failed(self) -> bool:
        """The pod failed, or its container ended non-zero (restartPolicy Never: for good)."""
        return self.phase == "Failed" or (self.exit_code is not None and self.exit_code != 0)

    @property
    def succeeded(self) -> bool:
        """The pod ran to completion."""
        return self.phase == "Succeeded"

    @property
    def started(self) -> bool:
        """Its container has run (it runs, or ran)."""
        return self.phase in ("Running", "Succeeded", "Failed") and self.waiting is None


def pod_state(pod: Mapping[str, Any], container: str) -> PodState:
    """The state of a pod (as the API serves it) and of its container named `container`."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    role = str(labels.get(ROLE_LABEL) or RANK)
    raw_index = str(
        labels.get(REPLICA_INDEX)
        or labels.get(COMPLETION_INDEX)
        or annotations.get(COMPLETION_INDEX)
        or ""
    )
    index = int(raw_index) if raw_index.isdecimal() else None
    unschedulable = None
    ready = False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            unschedulable = str(condition.get("message") or condition.get("reason") or "")
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
    waiting = ended = None
    exit_code = None
    for found in status.get("containerStatuses") or []:
        if found.get("name") != container:
            continue
        state = found.get("state") or {}
        if "waiting" in state:
            detail = state["waiting"] or {}
            waiting = _words(detail.get("reason"), detail.get("message"))
        if "terminated" in state:
            detail = state["terminated"] or {}
            exit_code = int(detail.get("exitCode", 0))
            reason = f"{detail.get('reason') or 'Terminated'} (exit {exit_code})"
            ended = _words(reason, detail.get("message"))
    return PodState(
        name=str(meta.get("name", "")),
        hostname=str(spec.get("hostname") or meta.get("name", "")),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        role=role,
        index=index,
        container=container,
        unschedulable=unschedulable,
        waiting=waiting,
        ended=ended,
        exit_code=exit_code,
        ready=ready,
    )


def _words(reason: Any, message: Any) -> str:
    text = str(reason or "")
    if message:
        text += f": {' '.join(str(message).split())}"
    return text
