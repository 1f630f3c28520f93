"""The cluster view's judgement (gpuprobe.audit.view.judge) on digested facts of real shape:
Node objects as kubelets and GFD write them, PodGroups as Volcano writes them, and agents'
usage as the workloads check counts it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuprobe.audit.cluster import AuditedNode
from gpuprobe.audit.usage import Usage
from gpuprobe.audit.view.judge import Windows, judge
from gpuprobe.audit.view.nodes import digest
from gpuprobe.audit.view.objects import pod_group, storage_class
from gpuprobe.audit.view.read import ClusterFacts, Source
from gpuprobe.report import Status

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
READ = ("discovery", "nodes", "pending pods", "storageclasses", "daemonsets")


def node(
    name: str, labels: dict[str, str], gpus: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1056687772Ki", "nvidia.com/gpu": gpus}
    return {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": annotations or {},
            "creationTimestamp": "2026-11-01T00:00:00Z",
        },
        "spec": {"providerID": f"gce://rent-gpus/us-central1-a/{name}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {"kubeletVersion": "v1.31.1-gke.1678000"},
        },
    }


def facts(*nodes: dict[str, Any], groups: dict[str, list[str]] | None = None) -> ClusterFacts:
    found = ClusterFacts(version="v1.31.1-gke.1678000", groups=groups or {"": ["v1"]})
    found.nodes = [digest(n) for n in nodes]
    found.sources = {s: Source(s, "read") for s in READ}
    return found


def agent(
    name: str, usage: Usage | None, checks: tuple[str, ...] = ("driver", "gpus", "workloads")
) -> AuditedNode:
    return AuditedNode("10.0.0.1:50051", name, Status.OK, usage=usage, checks=checks)


GKE_A3 = {
    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    "cloud.google.com/gke-nodepool": "a3-pool",
    "nvidia.com/gpu.present": "true",
}


def codes(view: Any) -> list[tuple[str, str]]:
    return sorted((f.code, f.resource) for f in view.findings)


def test_an_idle_gpu_node_names_what_keeps_it_from_scaling_down() -> None:
    found = facts(
        node(
            "gke-a3-1",
            GKE_A3,
            "8",
            {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"},
        ),
        node("gke-a3-2", GKE_A3, "8"),
        node("gke-a3-3", GKE_A3, "8"),
    )
    found.autoscaler_status = "Cluster-autoscaler status at 2026-12-02 11:59:58.114 +0000 UTC:"
    counted = "2026-12-02T09:00:00Z"  # three hours of the agent's counting
    agents = [
        agent("gke-a3-1", Usage(unallocated=8, unallocated_hours=24, since=counted)),
        agent("gke-a3-2", Usage(allocated=8, allocated_hours=24, since=counted)),
        # idle now, but allocated within its counting: not idle past the window
        agent(
            "gke-a3-3", Usage(unallocated=8, allocated_hours=2, unallocated_hours=22, since=counted)
        ),
    ]
    view = judge(found, agents, NOW, Windows(idle=3600))
    assert [c for c in codes(view) if c[0] == "GPU_NODE_IDLE"] == [
        ("GPU_NODE_IDLE", "node:gke-a3-1")
    ]
    (idle,) = [f for f in view.findings if f.code == "GPU_NODE_IDLE"]
    assert idle.message.startswith("GPU node gke-a3-1 has had no GPU allocated for 3.0 h")
    assert "kept by cluster-autoscaler.kubernetes.io/scale-down-disabled=true" in idle.message
    autoscaling = next(i for i in view.items if i.name == "autoscaling")
    assert autoscaling.facts["idle_gpu_nodes"] == [
        {
            "node": "gke-a3-1",
            "idle_seconds": 10800,
            "blocked_by": ["cluster-autoscaler.kubernetes.io/scale-down-disabled=true"],
        }
    ]
    control = next(i for i in view.items if i.name == "control_plane")
    assert control.facts["provider"] == "GKE"
    # a window longer than the counting cannot tell
    assert not [
        f
        for f in judge(found, agents, NOW, Windows(idle=4 * 3600)).findings
        if f.code == "GPU_NODE_IDLE"
    ]


def test_spot_nodes_are_handled_by_gpuprobe_lifecycle_or_named_unhandled() -> None:
    karpenter = {
        "nvidia.com/gpu.present": "true",
        "karpenter.sh/capacity-type": "spot",
        "karpenter.sh/nodepool": "gpu",
    }
    azure = {"nvidia.com/gpu.present": "true", "kubernetes.azure.com/scalesetpriority": "spot"}
    found = facts(
        node("ip-10-0-1-7", karpenter, "8"),
        node("aks-gpu-1", azure, "4"),
        node("gke-spot-1", {**GKE_A3, "cloud.google.com/gke-spot": "true"}, "8"),
    )
    agents = [agent("ip-10-0-1-7", None, ("driver", "lifecycle")), agent("aks-gpu-1", None)]
    view = judge(found, agents, NOW)
    spot = next(i for i in view.items if i.name == "spot")
    assert spot.facts["handled_by"] == {"gpuprobe lifecycle": 1, "GKE graceful node shutdown": 1}
    assert spot.facts["unhandled"] == ["aks-gpu-1"]
    (finding,) = [f for f in view.findings if f.code == "SPOT_DRAIN_UNHANDLED"]
    assert (
        "1 spot GPU node(s) with nothing handling their interruption notices (aks-gpu-1)"
        in finding.message
    )


def test_shared_storage_is_found_by_provisioner_or_bound_rwx_claims() -> None:
    found = facts(node("n1", GKE_A3, "8"))
    found.storage_classes = [
        storage_class(
            {
                "metadata": {
                    "name": "standard-rwo",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": "pd.csi.storage.gke.io",
            }
        ),
        storage_class(
            {
                "metadata": {"name": "enterprise-multishare-rwx"},
                "provisioner": "filestore.csi.storage.gke.io",
            }
        ),
    ]
    view = judge(found, [], NOW)
    shared = next(i for i in view.items if i.name == "shared_storage")
    assert (shared.status, shared.summary) == (
        Status.OK,
        "ReadWriteMany: enterprise-multishare-rwx (Google Filestore)",
    )
    assert "NO_SHARED_STORAGE" not in [f.code for f in view.findings]
    found.storage_classes = found.storage_classes[:1]
    assert ("NO_SHARED_STORAGE", "cluster") in codes(judge(found, [], NOW))
    found.rwx_claims = {"nfs-manual": 2}  # a statically provisioned NFS volume, bound
    assert "NO_SHARED_STORAGE" not in [f.code for f in judge(found, [], NOW).findings]


def test_a_volcano_podgroup_below_min_member_is_partly_scheduled() -> None:
    found = facts(
        node("n1", GKE_A3, "8"), groups={"": ["v1"], "scheduling.volcano.sh": ["v1beta1"]}
    )
    found.pod_groups = [
        pod_group(
            "scheduling.volcano.sh",
            {
                "metadata": {"name": "llm-pretrain-7b", "namespace": "research"},
                "spec": {
                    "minMember": 16,
                    "minResources": {"nvidia.com/gpu": "128"},
                    "queue": "default",
                },
                "status": {"phase": "Running", "running": 12, "conditions": []},
            },
        ),
        pod_group(
            "scheduling.volcano.sh",
            {
                "metadata": {"name": "whole", "namespace": "research"},
                "spec": {"minMember": 2},
                "status": {"phase": "Running", "running": 2},
            },
        ),
    ]
    view = judge(found, [], NOW)
    assert [c for c in codes(view) if c[0].startswith("GANG")] == [
        ("GANG_PARTIALLY_SCHEDULED", "gang:PodGroup:research/llm-pretrain-7b")
    ]
    gang = next(i for i in view.items if i.name == "gang_scheduling")
    assert (gang.status, gang.facts["gang_schedulers"]) == (Status.OK, ["Volcano"])


def test_a_node_offering_gpus_through_dra_is_advertising() -> None:
    found = facts(
        node("dra-1", {"nvidia.com/gpu.present": "true"}, "0"),
        node("dra-2", {"nvidia.com/gpu.present": "true"}, "0"),
    )
    found.slices = [("gpu.nvidia.com", "dra-1", 8)]
    view = judge(found, [], NOW)
    assert [c for c in codes(view) if c[0] == "GPU_NODE_NOT_ADVERTISING"] == [
        ("GPU_NODE_NOT_ADVERTISING", "node:dra-2")
    ]
    stack = next(i for i in view.items if i.name == "device_stack")
    assert stack.status == Status.CRITICAL and stack.facts["dra_drivers"] == {"gpu.nvidia.com": 1}


def test_nothing_read_is_never_all_clear() -> None:
    found = ClusterFacts()
    found.sources = {
        "nodes": Source(
            "nodes", "failed", "timeout: the audit's deadline passed before this request"
        )
    }
    view = judge(found, [], NOW)
    assert view.status == Status.UNKNOWN
    first = next(i for i in view.items if i.name == "gpu_resources")
    assert (
        first.summary == "not read: nodes: timeout: the audit's deadline passed before this request"
    )


def test_the_view_as_text_one_line_an_item_then_the_findings() -> None:
    from gpuprobe.audit.render import render_view

    found = facts(
        node(
            "aks-gpu-1",
            {"nvidia.com/gpu.present": "true", "kubernetes.azure.com/scalesetpriority": "spot"},
            "4",
        )
    )
    found.sources["storageclasses"] = Source(
        "storageclasses", "forbidden", "forbidden", "list storageclasses.storage.k8s.io"
    )
    lines = render_view(judge(found, [], NOW))
    assert lines[:3] == [
        "",
        "cluster view WARNING (API server v1.31.1-gke.1678000)",
        "  control_plane     OK        managed (GKE): server version v1.31.1-gke.1678000, "
        "provider IDs gce://",
    ]
    # Why a source was not read is said once, below, one line a cause (issue 40).
    assert "  shared_storage    UNKNOWN   not read: storageclasses (below)" in lines
    assert "          WARNING SPOT_DRAIN_UNHANDLED on cluster, action FIX_CONFIG" in lines
    assert lines[-1] == "  not read (needs list storageclasses.storage.k8s.io): storageclasses"


def test_a_gang_starting_up_is_not_partly_scheduled_until_the_window_passes() -> None:
    from gpuprobe.audit.view.pods import waiting_gpu_pod

    found = facts(node("n1", GKE_A3, "8"), groups={"": ["v1"], "jobset.x-k8s.io": ["v1alpha2"]})
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "llama-ft",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
    }
    waiting = waiting_gpu_pod(
        {
            "metadata": {
                "name": "llama-ft-workers-0-1",
                "namespace": "ml",
                "labels": labels,
                "creationTimestamp": "2026-12-02T11:58:00Z",
            },
            "spec": {
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
            },
            "status": {"phase": "Pending"},
        }
    )
    assert waiting is not None and waiting.gang is not None
    found.waiting = [waiting]
    found.gang_running = {waiting.gang: 1}
    assert not [
        f for f in judge(found, [], NOW, Windows(pending=300)).findings if f.code.startswith("GANG")
    ]
    late = judge(found, [], NOW, Windows(pending=60))
    assert [(f.code, f.resource) for f in late.findings if f.code.startswith("GANG")] == [
        ("GANG_PARTIALLY_SCHEDULED", "gang:JobSet:ml/llama-ft")
    ]


def test_a_pod_asking_more_gpus_than_any_node_has_is_not_short_of_free_ones() -> None:
    """Issue 40: a pod asking 16 GPUs of 8-GPU nodes was 'not enough free GPUs' (wait, or add
    capacity): the view knew no node could ever hold it."""
    from gpuprobe.audit.view.pods import waiting_gpu_pod

    found = facts(node("a3-1", GKE_A3, "8"), node("a3-2", GKE_A3, "8"))
    message = (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod."
    )
    waiting = waiting_gpu_pod(
        {
            "metadata": {
                "name": "llama-70b",
                "namespace": "ml",
                "creationTimestamp": "2026-12-02T10:00:00Z",
            },
            "spec": {
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "16"}}}]
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            },
        }
    )
    assert waiting is not None
    found.waiting = [waiting]
    view = judge(found, [], NOW)
    (pending,) = [f for f in view.findings if f.code == "GPU_POD_PENDING"]
    assert pending.message.startswith(
        "pod ml/llama-70b (asks 16 nvidia.com/gpu) has been Pending 120 min: it asks 16 "
        "nvidia.com/gpu and no node offers more than 8: it can never be scheduled as asked"
    )
    assert pending.action.value == "FIX_CONFIG"
    assert [c["cause"] for c in view.waiting[0]["causes"]] == ["too_large"]
