"""One Node object digested to what the cluster view judges: its GPU labels and resources,
taints, provider, capacity type and scale-down annotations. The view keeps this, never the
Node (a GPU node's object is tens of kilobytes with its images list; this is a few hundred
bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Extended resources that are GPUs (or slices of one) to the scheduler.
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/gpu.shared")
MIG_PREFIX = "nvidia.com/mig-"
RDMA_PREFIX = "rdma/"
# GPU Feature Discovery's labels (NVIDIA k8s-device-plugin, gpu-feature-discovery).
GFD_LABELS = {
    "product": "nvidia.com/gpu.product",
    "count": "nvidia.com/gpu.count",
    "replicas": "nvidia.com/gpu.replicas",
    "sharing_strategy": "nvidia.com/gpu.sharing-strategy",
    "mig_strategy": "nvidia.com/mig.strategy",
    "mig_capable": "nvidia.com/mig.capable",
}
# Labels that say a node has GPUs whatever it offers the scheduler: the GPU Operator's and
# NFD's PCI vendor labels, AMD's node labeller, the clouds' accelerator labels.
GPU_PRESENT_LABELS = {
    "nvidia.com/gpu.present": "true",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/amd-gpu": "true",
    "amd.com/gpu.device-id": None,
    "cloud.google.com/gke-accelerator": None,
    "k8s.amazonaws.com/accelerator": None,
}
GPU_COUNT_LABELS = ("nvidia.com/gpu.count", "karpenter.k8s.aws/instance-gpu-count")
# Spot / preemptible capacity: the label and the value that says so, per provider.
SPOT_LABELS = {
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "SPOT",
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
}
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# Images kept by name (of the up to 50 the kubelet lists): those the NCCL mesh runs.
WORKLOAD_IMAGES = ("nccl-tests", "nccl_tests", "pytorch")


@dataclass
class NodeFacts:
    """What the view knows of one node from the API server."""

    name: str
    labels: dict[str, str]  # only the GPU, spot and provider labels the view reads
    capacity: dict[str, int]  # GPU, MIG and RDMA resources only
    allocatable: dict[str, int]
    taints: list[dict[str, str]]
    provider_id: str = ""
    kubelet_version: str = ""
    created: str = ""
    unschedulable: bool = False
    ready: bool | None = None
    blockers: list[str] = field(default_factory=list)  # annotations that stop a scale-down
    control_plane: bool = False
    images: tuple[str, ...] = ()  # nccl-tests' and PyTorch's images on the node (by tag)

    @property
    def gpu_offered(self) -> int:
        """Whole GPUs, shared replicas and MIG devices the node offers the scheduler."""
        return sum(v for k, v in self.allocatable.items() if is_gpu_resource(k))

    @property
    def gpu_capacity(self) -> int:
        """GPUs, replicas and MIG devices in the node's capacity."""
        return sum(v for k, v in self.capacity.items() if is_gpu_resource(k))

    @property
    def labelled_gpu(self) -> bool:
        """Whether a label says the node has GPUs."""
        for key, value in GPU_PRESENT_LABELS.items():
            if key in self.labels and (value is None or self.labels[key] == value):
                return True
        return any(_count(self.labels.get(k)) > 0 for k in GPU_COUNT_LABELS)

    @property
    def is_gpu_node(self) -> bool:
        """Labelled with GPUs or offering a GPU resource."""
        return self.labelled_gpu or self.gpu_capacity > 0

    @property
    def spot(self) -> str | None:
        """The label that makes it spot/preemptible capacity (`key=value`), or None."""
        for key, value in SPOT_LABELS.items():
            if self.labels.get(key) == value:
                return f"{key}={value}"
        return None


def is_gpu_resource(name: str) -> bool:
    """Whether an extended resource is a GPU, a shared GPU or a MIG device."""
    return name in GPU_RESOURCES or name.startswith(MIG_PREFIX)


def _count(value: Any) -> int:
    """A resource quantity or count label as a whole number (0 for text that is no whole
    number: `1k` RDMA devices); TypeError for a value of no quantity's type (a list, an
    object, a boolean): the object is unreadable, not the resource absent."""
    if isinstance(value, bool) or not isinstance(value, int | str | None):
        raise TypeError(f"a quantity that is a {type(value).__name__}")
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.isdecimal():
        return int(value)
    return 0


def _kept_resources(resources: Any) -> dict[str, int]:
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(f"resources that are a {type(resources).__name__}, not an object")
    return {
        str(k): _count(v)
        for k, v in resources.items()
        if is_gpu_resource(str(k)) or str(k).startswith(RDMA_PREFIX)
    }


KEPT_LABEL_PREFIXES = (
    "nvidia.com/",
    "amd.com/",
    "feature.node.kubernetes.io/pci-10de",
    "feature.node.kubernetes.io/amd-gpu",
    "cloud.google.com/gke-",
    "k8s.amazonaws.com/accelerator",
    "karpenter.",
    "eks.amazonaws.com/",
    "kubernetes.azure.com/",
    "node.kubernetes.io/instance-type",
)


def digest(node: Mapping[str, Any]) -> NodeFacts:
    """The facts of one Node object (as the API serves it)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = {
        str(k): str(v)
        for k, v in (meta.get("labels") or {}).items()
        if str(k).startswith(KEPT_LABEL_PREFIXES)
    }
    annotations = meta.get("annotations") or {}
    blockers = [
        f"{key}={annotations[key]}"
        for key in (SCALE_DOWN_DISABLED, DO_NOT_DISRUPT)
        if str(annotations.get(key, "")).lower() == "true"
    ]
    ready = next(
        (
            c.get("status") == "True"
            for c in status.get("conditions") or []
            if c.get("type") == "Ready"
        ),
        None,
    )
    all_labels = meta.get("labels") or {}
    return NodeFacts(
        name=str(meta.get("name", "")),
        labels=labels,
        capacity=_kept_resources(status.get("capacity")),
        allocatable=_kept_resources(status.get("allocatable")),
        taints=[
            {
                "key": str(t.get("key", "")),
                "value": str(t.get("value", "")),
                "effect": str(t.get("effect", "")),
            }
            for t in _objects(spec.get("taints"), "spec.taints")
        ],
        provider_id=str(spec.get("providerID", "")),
        kubelet_version=str((status.get("nodeInfo") or {}).get("kubeletVersion", "")),
        created=str(meta.get("creationTimestamp", "")),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        blockers=blockers,
        control_plane=any(k in all_labels for k in CONTROL_PLANE_LABELS),
        images=_workload_images(status.get("images")),
    )


def _objects(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of objects (none when absent); TypeError for anything else in its place."""
    listed = value or []
    if not isinstance(listed, list) or not all(isinstance(v, Mapping) for v in listed):
        raise TypeError(f"{where} is not a list of objects")
    return listed


def _workload_images(images: Any) -> tuple[str, ...]:
    """The tagged names of the node's nccl-tests and PyTorch images."""
    listed = images if isinstance(images, list) else []
    found = {
        str(name)
        for image in listed
        if isinstance(image, Mapping)
        for name in image.get("names") or []
        if "@" not in str(name) and any(w in str(name) for w in WORKLOAD_IMAGES)
    }
    return tuple(sorted(found))
