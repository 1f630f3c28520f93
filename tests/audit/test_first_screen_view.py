"""The audit's first screen before any agent is installed (issue 40): the first thing an
operator renting a cluster runs. On an 80×40 terminal it leads with the verdict and the first
things to do, counting what the API server shows (GPU nodes, GPUs); the GPU pod that waits
comes before the missing agents, which are one line; a CRITICAL is in sight."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from cluster_objects import GFD, TOKEN, gpu_node_status, now, pod, stamp, started
from gpuprobe.audit.render import render_cluster
from gpuprobe.audit.run import AuditOptions, audit
from gpuprobe.kube.api import Access

# kube-scheduler's FitError (1.31) for a pod asking more GPUs than are free on 3 nodes.
FIT_ERROR = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)


def first_screen(tmp_path: Path, silent_node: bool) -> list[str]:
    """The text audit's first 40 lines at 80 columns: 3 H100 nodes (GFD labels, 8 GPUs each),
    no gpuprobe installed, a training pod Pending for 2 hours; with `silent_node`, a fourth
    node labelled with GPUs whose device plugin never registered."""
    standin = started(tmp_path)
    try:
        from kube_standin import AUDITOR, auditor_rules

        standin.add_user(TOKEN, AUDITOR, auditor_rules())
        for i in range(3):
            standin.add_node(f"gpu-node-{i}", GFD, status=gpu_node_status("8"))
        if silent_node:
            standin.add_node("gpu-node-3", GFD, status=gpu_node_status("0"))
        waited = stamp(now() - timedelta(hours=2))
        standin.add_pod(pod("train-0", {"nvidia.com/gpu": "8"}, waited, message=FIT_ERROR))
        access = Access(kubeconfig=str(standin.kubeconfig(TOKEN)))
        report = audit(AuditOptions(targets=[], deadline=5, kube=access))
    finally:
        standin.stop()
    return render_cluster(report, width=80).splitlines()


def test_no_agent_yet_leads_with_the_verdict_the_api_counts_and_the_waiting_pod(
    tmp_path: Path,
) -> None:
    whole = first_screen(tmp_path, silent_node=False)
    lines = whole[:40]
    assert lines[0].startswith("cluster WARNING  0 targets: no gpuprobe agent pod")
    assert "API server: 3 GPU nodes offering 24 nvidia.com/gpu; gpuprobe answering on 0" in (
        " ".join(line.strip() for line in lines[:6])
    )
    at = lines.index("first")
    assert lines[at + 1] == "WARNING   NONE for GPU_POD_PENDING on pod ml/train-0"
    missing = [line for line in lines[at:] if line.startswith("WARNING   FIX_CONFIG for AGENT_")]
    assert missing == ["WARNING   FIX_CONFIG for AGENT_MISSING on 3 nodes: gpu-node-0, gpu-node-1,"]
    # No empty table of agents, no totals of nothing above a view that counts 24 GPUs.
    assert not any(line.startswith(("STATUS    NODE", "totals  0 nodes")) for line in lines)
    # The view's AGENT_MISSING findings: one entry for the three nodes.
    assert sum(line.lstrip().startswith("WARNING AGENT_MISSING on") for line in whole) == 1


def test_a_critical_is_in_sight_first(tmp_path: Path) -> None:
    lines = first_screen(tmp_path, silent_node=True)[:40]
    assert lines[0].startswith("cluster CRITICAL  0 targets")
    at = lines.index("first")
    assert lines[at + 1] == ("CRITICAL  FIX_CONFIG for GPU_NODE_NOT_ADVERTISING on gpu-node-3")
