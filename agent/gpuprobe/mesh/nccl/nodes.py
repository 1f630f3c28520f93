"""Which nodes an NCCL mesh tests, and how many GPUs each offers the scheduler.

Named (`--nodes`): each node as the API has it; a name the API does not know is a usage
error, a node that offers no `nvidia.com/gpu` (its device plugin down, its GPUs gone) is a
finding and not tested. Not named: every node that offers `nvidia.com/gpu` and runs a gpuprobe
agent (a Running pod of the agents' DaemonSet in the namespace), as the cluster view finds
them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprobe.audit.view.pods import AGENT_LABELS
from gpuprobe.errors import UsageError
from gpuprobe.kube.api import KubeError
from gpuprobe.kube.objects import NODES, PODS, ObjectApi
from gpuprobe.mesh.nccl.workload import GPU
from gpuprobe.report import Action, Finding, Severity


@dataclass(frozen=True)
class GpuNode:
    """A node and the GPUs it offers the scheduler (its allocatable `nvidia.com/gpu`)."""

    name: str
    gpus: int


def allocatable_gpus(node: Mapping[str, Any]) -> int:
    """The node's allocatable `nvidia.com/gpu` (0 when absent or not a whole number)."""
    value = str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0"))
    return int(value) if value.isdecimal() else 0


def named(api: ObjectApi, names: Sequence[str]) -> tuple[list[GpuNode], list[Finding]]:
    """The named nodes with GPUs; a finding for each that offers none."""
    found, findings = [], []
    for name in names:
        try:
            node = api.get(NODES, name)
        except KubeError as exc:
            if exc.code == "404":
                raise UsageError(f"--nodes: the API server has no node {name!r}") from None
            raise UsageError(f"--nodes: reading node {name}: {exc}") from None
        gpus = allocatable_gpus(node)
        if gpus:
            found.append(GpuNode(name, gpus))
        else:
            findings.append(no_gpus(name))
    return found, findings


def with_agents(api: ObjectApi) -> list[GpuNode]:
    """Every node offering GPUs that runs a gpuprobe agent in the API's namespace."""
    try:
        agents = api.list(PODS, labels=AGENT_LABELS, fields="status.phase=Running")
        nodes = api.list(NODES)
    except KubeError as exc:
        raise UsageError(f"finding the GPU nodes with a gpuprobe agent: {exc}") from None
    running = {str((p.get("spec") or {}).get("nodeName") or "") for p in agents}
    found = [
        GpuNode(str(n["metadata"]["name"]), allocatable_gpus(n))
        for n in nodes
        if allocatable_gpus(n) and n["metadata"]["name"] in running
    ]
    return sorted(found, key=lambda n: n.name)


def no_gpus(node: str) -> Finding:
    """A node named for the test that offers the scheduler no GPU."""
    return Finding(
        "BANDWIDTH_TEST_UNAVAILABLE",
        Severity.UNKNOWN,
        f"{node}'s NCCL bandwidth could not be tested: it offers the scheduler no {GPU} "
        "(allocatable 0: its device plugin is not running, or its GPUs are gone)",
        Action.NONE,
        f"peer:{node}",
    )


def alone(node: str) -> Finding:
    """A node with GPUs that has no partner with GPUs among those named."""
    return Finding(
        "BANDWIDTH_TEST_UNAVAILABLE",
        Severity.UNKNOWN,
        f"{node}'s NCCL bandwidth could not be tested: no other node named offers the "
        f"scheduler a {GPU}, and the all-reduce runs between two nodes at least",
        Action.NONE,
        f"peer:{node}",
    )
