"""A small GPU cluster as the API stand-in serves it, with an agent answering on its GPU node:
every kind of object the cluster view reads, each of real shape, so that the view of it is as
healthy as a real cluster's can be (the fuzz suite mutates what the server answers, and the
view's tests change one thing at a time).

Shapes: the node's labels as gpu-feature-discovery (NVIDIA k8s-device-plugin v0.17) writes them
and its status as the kubelet reports it; the device plugin's DaemonSet, the GPU Operator's
`ClusterPolicy` (nvidia.com/v1, `status.state` as gpu-operator v24.9 sets it), Volcano's
`PodGroup` (scheduling.volcano.sh/v1beta1), a Kubeflow `PyTorchJob`, Karpenter's `NodePool`,
DRA's `ResourceSlice` (resource.k8s.io/v1, the NVIDIA DRA driver's `gpu.nvidia.com`), EFS's
StorageClass, CSIDriver and a bound ReadWriteMany claim as the EFS CSI driver's examples
create them, kube-scheduler's FailedScheduling event, and cluster-autoscaler's status ConfigMap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kube_standin import AUDITOR, KubeStandIn, auditor_rules, served_key

TOKEN = "auditor-token"
GPU_NODE = "gpu-node-1"
AGENT_LABELS = {"app.kubernetes.io/name": "gpuprobe", "app.kubernetes.io/component": "node-agent"}
GFD = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.replicas": "1",
    "nvidia.com/gpu.sharing-strategy": "none",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/gpu.memory": "81559",
}


def stamp(when: datetime) -> str:
    """An RFC 3339 time as the API writes it."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_node_status(gpus: str, kernel: str = "6.1.112") -> dict[str, Any]:
    """A GPU node's capacity, allocatable and nodeInfo as the kubelet (1.31) reports them."""
    resources = {"cpu": "192", "memory": "2113412928Ki", "pods": "110", "nvidia.com/gpu": gpus}
    version = "v1.31.2-eks-7f9249a"
    return {
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {
            "kubeletVersion": version,
            "architecture": "amd64",
            "bootID": "b",
            "containerRuntimeVersion": "containerd://1.7.22",
            "kernelVersion": kernel,
            "kubeProxyVersion": version,
            "machineID": "m",
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023",
            "systemUUID": "s",
        },
    }


def pod(
    name: str,
    gpus: dict[str, str],
    created: str,
    phase: str = "Pending",
    message: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "ml",
    node: str | None = None,
    ip: str | None = None,
    ports: list[dict[str, Any]] | None = None,
    scheduler: str = "default-scheduler",
) -> dict[str, Any]:
    """A Pod as `kubectl get pod -o json` prints it (the fields the view reads)."""
    container: dict[str, Any] = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3"}
    if gpus:
        container["resources"] = {"limits": gpus}
    if ports:
        container["ports"] = ports
    spec: dict[str, Any] = {"containers": [container], "schedulerName": scheduler}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if message is not None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": created,
            }
        ]
    if ip:
        status["podIP"] = ip
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": created,
        "labels": labels or {},
    }
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def agent_pod(node: str, port: int, created: str, ip: str = "127.0.0.1") -> dict[str, Any]:
    """The gpuprobe DaemonSet's pod on `node`, answering gRPC at `ip:port`."""
    return pod(
        f"gpuprobe-{node[-5:]}",
        {},
        created,
        "Running",
        namespace="gpuprobe",
        node=node,
        ip=ip,
        labels=AGENT_LABELS,
        ports=[{"name": "grpc", "containerPort": port, "protocol": "TCP"}],
    )


def daemon_set(name: str, namespace: str, ready: int, desired: int) -> dict[str, Any]:
    """A DaemonSet with its status as the controller writes it."""
    labels = {"app.kubernetes.io/name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": name, "image": f"nvcr.io/nvidia/{name}:v0.17.0"}]},
            },
        },
        "status": {
            "currentNumberScheduled": desired,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "numberAvailable": ready,
            "updatedNumberScheduled": desired,
            "observedGeneration": 1,
        },
    }


def healthy_gpu_cluster(standin: KubeStandIn, agent_port: int, now: datetime) -> None:
    """One GPU node with its agent answering, the GPU Operator ready, Volcano with a gang
    that waits (only just: inside the window), EFS shared storage, Karpenter, DRA."""
    old = stamp(now - timedelta(days=3))
    fresh = stamp(now - timedelta(seconds=30))
    standin.add_user(TOKEN, AUDITOR, auditor_rules())
    eks = {"eks.amazonaws.com/nodegroup": "h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}
    standin.add_node(
        GPU_NODE,
        {**GFD, **eks},
        status=gpu_node_status("8"),
        providerID="aws:///us-east-1a/i-0a1b2c3d4e5f60001",
    )
    standin.add_pod(agent_pod(GPU_NODE, agent_port, old))
    for group, versions in (
        ("nvidia.com", ["v1"]),
        ("scheduling.volcano.sh", ["v1beta1"]),
        ("kubeflow.org", ["v1", "v2beta1"]),
        ("karpenter.sh", ["v1"]),
        ("resource.k8s.io", ["v1"]),
    ):
        standin.install(group, versions)
    standin.add_object(daemon_set("nvidia-device-plugin-daemonset", "gpu-operator", 1, 1))
    standin.add_object(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"driver": {"enabled": True}, "toolkit": {"enabled": True}},
            "status": {"namespace": "gpu-operator", "state": "ready"},
        }
    )
    standin.add_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{GPU_NODE}-gpu.nvidia.com-x7k2p"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": GPU_NODE,
                "pool": {"name": GPU_NODE, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": f"gpu-{i}"} for i in range(8)],
            },
        }
    )
    gang = "llama-pg"
    standin.add_object(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": gang, "namespace": "ml"},
            "spec": {"minMember": 1, "queue": "default"},
            "status": {"phase": "Pending"},
        }
    )
    message = (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod."
    )
    standin.add_pod(
        pod(
            "llama-0",
            {"nvidia.com/gpu": "8"},
            fresh,
            message=message,
            annotations={"scheduling.k8s.io/group-name": gang},
        )
    )
    standin.add_object(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "llama-0.1813e4a5b2c7d901", "namespace": "ml"},
            "involvedObject": {
                "kind": "Pod",
                "namespace": "ml",
                "name": "llama-0",
                "apiVersion": "v1",
            },
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "source": {"component": "default-scheduler"},
            "reportingComponent": "default-scheduler",
            "reportingInstance": "",
            "firstTimestamp": fresh,
            "lastTimestamp": fresh,
            "count": 1,
        }
    )
    template = {
        "spec": {
            "containers": [
                {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ]
        }
    }
    standin.add_object(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "bert", "namespace": "ml"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": template},
                    "Worker": {"replicas": 1, "template": template},
                }
            },
        }
    )
    standin.add_object(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "efs-sc"},
            "provisioner": "efs.csi.aws.com",
            "parameters": {"provisioningMode": "efs-ap", "fileSystemId": "fs-92107410"},
        }
    )
    standin.add_object(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": "efs.csi.aws.com"},
            "spec": {"attachRequired": False},
        }
    )
    standin.add_object(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": "ml"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "efs-sc",
                "resources": {"requests": {"storage": "5Gi"}},
                "volumeName": "pvc-5b0c",
            },
            "status": {
                "phase": "Bound",
                "accessModes": ["ReadWriteMany"],
                "capacity": {"storage": "5Gi"},
            },
        }
    )
    standin.add_object(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}},
        }
    )


@contextmanager
def recording(standin: KubeStandIn) -> Iterator[dict[str, Any]]:
    """Every document the stand-in answers a GET with (200), by `served_key`: what the view
    read, as the server gave it."""
    answered: dict[str, Any] = {}
    original: Callable[..., tuple[int, Any]] = standin.handle

    def handle(
        method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes
    ) -> tuple[int, Any]:
        code, answer = original(method, path, query, headers, body)
        if method == "GET" and code == 200:
            answered[served_key(path, query)] = answer
        return code, answer

    standin.handle = handle  # type: ignore[method-assign]
    try:
        yield answered
    finally:
        del standin.handle


def started(directory: Path) -> KubeStandIn:
    """A stand-in with no node yet (the caller stops it)."""
    standin = KubeStandIn(directory, auditor_rules())
    standin.start()
    return standin


def now() -> datetime:
    """The time now, as the view reads it."""
    return datetime.now(UTC)
