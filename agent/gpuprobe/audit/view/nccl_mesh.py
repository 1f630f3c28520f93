"""The checklist's `nccl_mesh` item: whether `gpuprobe mesh --transport nccl` can run here, and
how (docs/mesh.md, "NCCL between nodes").

It runs as an MPIJob where the API serves the MPI Operator's `kubeflow.org/v2beta1` (discovery),
else as an Indexed Job in a PyTorch image; a pair's test asks for every GPU of both nodes at
once, so what counts is each GPU node's free `nvidia.com/gpu` (allocatable, less what its agent
says is allocated: unknown without an answering agent); and an image already on the nodes
starts without a pull (the kubelet lists a node's images: nccl-tests' and PyTorch's are named).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuprobe.audit.cluster import AuditedNode
from gpuprobe.audit.view.checklist import Judged, names, unread
from gpuprobe.audit.view.model import Item
from gpuprobe.audit.view.read import ClusterFacts
from gpuprobe.report import Status

NAME = "nccl_mesh"
GPU = "nvidia.com/gpu"


def nccl_mesh(facts: ClusterFacts, agents: Mapping[str, AuditedNode]) -> Judged:
    """How the NCCL mesh would run, and which GPU nodes it could test now."""
    if (item := unread(NAME, facts, "discovery", "nodes")) is not None:
        return item, []
    operator = "v2beta1" in facts.groups.get("kubeflow.org", [])
    nodes: list[dict[str, Any]] = []
    for node in facts.nodes:
        offered = node.allocatable.get(GPU, 0)
        if not offered:
            continue
        agent = agents.get(node.name)
        usage = agent.usage if agent is not None and agent.reachable else None
        free = None if usage is None else max(0.0, offered - usage.allocated)
        nodes.append(
            {
                "node": node.name,
                "allocatable": offered,
                "free": None if free is None else round(free, 3),
                "nccl_images": [i for i in node.images if "nccl" in i],
                "pytorch_images": [i for i in node.images if "pytorch" in i],
            }
        )
    ready = [
        str(n["node"]) for n in nodes if n["free"] is not None and n["free"] >= n["allocatable"]
    ]
    unknown = [str(n["node"]) for n in nodes if n["free"] is None]
    image_key = "nccl_images" if operator else "pytorch_images"
    cached = [str(n["node"]) for n in nodes if n[image_key]]
    out: dict[str, Any] = {
        "runner": "mpijob" if operator else "job",
        "mpi_operator": operator,
        "gpu_nodes": nodes,
        "all_gpus_free": ready,
    }
    how = (
        "an MPIJob (the MPI Operator serves kubeflow.org/v2beta1) running nccl-tests"
        if operator
        else "an Indexed Job running gpuprobe's rank program in a PyTorch image (no MPI Operator)"
    )
    kind = "nccl-tests" if operator else "PyTorch"
    text = (
        f"NCCL between nodes would run as {how}; {len(ready)} of {len(nodes)} GPU node(s) have "
        f"every GPU free" + (f" ({names(ready)})" if ready else "")
    )
    if unknown:
        text += f"; free GPUs unknown on {names(unknown)} (no agent answered)"
    if len(ready) < 2:
        text += ": a test now would wait for GPUs"
    text += f"; a {kind} image is already on {len(cached)} of the {len(nodes)}"
    return Item(NAME, Status.OK, text, out), []
