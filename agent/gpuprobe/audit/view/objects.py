"""The cluster's other objects digested to the facts the checklist reads: DaemonSets,
operator policies, DRA ResourceSlices, PodGroups, JobSets and training jobs, StorageClasses
and claims."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuprobe.audit.view.pods import gpu_requests

# DaemonSets that are a part of the GPU stack or handle spot notices, by what their name
# (or their `app.kubernetes.io/name` label) says they are.
DEVICE_PLUGINS = (
    "nvidia-device-plugin",
    "amdgpu-device-plugin",
    "amd-gpu-device-plugin",
    "gpu-device-plugin",  # the GKE and AKS add-ons' (nvidia-gpu-device-plugin)
)
TERMINATION_HANDLERS = (
    "aws-node-termination-handler",
    "node-termination-handler",  # GoogleCloudPlatform/k8s-node-termination-handler
)
AGENT = "gpuprobe"
# Provisioners whose volumes pods on several nodes can mount at once (ReadWriteMany).
RWX_PROVISIONERS = {
    "efs.csi.aws.com": "Amazon EFS",
    "fsx.csi.aws.com": "Amazon FSx for Lustre",
    "filestore.csi.storage.gke.io": "Google Filestore",
    "lustre.csi.storage.gke.io": "Google Managed Lustre",
    "gcsfuse.csi.storage.gke.io": "Cloud Storage FUSE",
    "file.csi.azure.com": "Azure Files",
    "azurelustre.csi.azure.com": "Azure Managed Lustre",
    "nfs.csi.k8s.io": "NFS CSI",
    "cephfs.csi.ceph.com": "CephFS",
    "rook-ceph.cephfs.csi.ceph.com": "CephFS (Rook)",
    "k8s-sigs.io/nfs-subdir-external-provisioner": "NFS subdir provisioner",
    "cluster.local/nfs-subdir-external-provisioner": "NFS subdir provisioner",
    "driver.longhorn.io": "Longhorn (RWX share manager)",
    "csi.weka.io": "WEKA",
    "csi.vastdata.com": "VAST",
    "spectrumscale.csi.ibm.com": "IBM Storage Scale",
    "juicefs.csi.juicefs.com": "JuiceFS",
}


@dataclass(frozen=True)
class DaemonSetFacts:
    """A DaemonSet that matters to the checklist: what it is, and how many of its pods run."""

    namespace: str
    name: str
    role: str  # device-plugin, termination-handler, gpuprobe
    desired: int
    ready: int


def name_of(obj: Mapping[str, Any]) -> str:
    """An object's `metadata.name` (TypeError when it is not text)."""
    name = (obj.get("metadata") or {}).get("name", "")
    if not isinstance(name, str):
        raise TypeError(f"metadata.name is a {type(name).__name__}, not text")
    return name


def daemon_set(obj: Mapping[str, Any]) -> DaemonSetFacts | None:
    """The DaemonSet's facts if it is a device plugin, a termination handler or gpuprobe."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    app = str((meta.get("labels") or {}).get("app.kubernetes.io/name", ""))
    role = None
    for what in (name, app):
        if any(p in what for p in DEVICE_PLUGINS):
            role = "device-plugin"
        elif any(p in what for p in TERMINATION_HANDLERS):
            role = "termination-handler"
        elif what == AGENT:
            role = "gpuprobe"
        if role:
            break
    if role is None:
        return None
    status = obj.get("status") or {}
    return DaemonSetFacts(
        str(meta.get("namespace", "")),
        name,
        role,
        int(status.get("desiredNumberScheduled") or 0),
        int(status.get("numberReady") or 0),
    )


def policy_state(obj: Mapping[str, Any]) -> tuple[str, str]:
    """A ClusterPolicy's or NicClusterPolicy's name and `status.state` (ready, notReady,
    ignored; "" before the operator wrote one)."""
    meta = obj.get("metadata") or {}
    return str(meta.get("name", "")), str((obj.get("status") or {}).get("state", ""))


def resource_slice(obj: Mapping[str, Any]) -> tuple[str, str, int]:
    """A ResourceSlice's driver, node ("" for a slice of no one node) and device count."""
    spec = obj.get("spec") or {}
    return (
        str(spec.get("driver", "")),
        str(spec.get("nodeName", "")),
        len(spec.get("devices") or []),
    )


@dataclass(frozen=True)
class PodGroupFacts:
    """A PodGroup (Volcano's or scheduler-plugins'): its gang size and pods running."""

    api: str  # the group that serves it
    namespace: str
    name: str
    min_member: int
    running: int
    phase: str


def pod_group(api: str, obj: Mapping[str, Any]) -> PodGroupFacts:
    """A PodGroup's facts (`spec.minMember`, `status.running`, `status.phase`)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    return PodGroupFacts(
        api,
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        int((obj.get("spec") or {}).get("minMember") or 0),
        int(status.get("running") or 0),
        str(status.get("phase", "")),
    )


@dataclass(frozen=True)
class GpuJob:
    """A job of several pods (JobSet, PyTorchJob, MPIJob) and whether its pods ask for GPUs."""

    kind: str
    namespace: str
    name: str
    pods: int
    gpu: bool


def _template_gpu(template: Any) -> bool:
    if not isinstance(template, Mapping):
        return False
    return bool(gpu_requests(template.get("spec") or {}))


def job_set(obj: Mapping[str, Any]) -> GpuJob:
    """A JobSet: its pods (replicas × parallelism of each replicated job), GPUs asked."""
    meta = obj.get("metadata") or {}
    pods, gpu = 0, False
    for rjob in (obj.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = ((rjob.get("template") or {}).get("spec")) or {}
        pods += int(rjob.get("replicas") or 1) * int(job_spec.get("parallelism") or 1)
        gpu = gpu or _template_gpu(job_spec.get("template"))
    return GpuJob("JobSet", str(meta.get("namespace", "")), str(meta.get("name", "")), pods, gpu)


def training_job(kind: str, specs_key: str, obj: Mapping[str, Any]) -> GpuJob:
    """A Kubeflow job (PyTorchJob `pytorchReplicaSpecs`, MPIJob `mpiReplicaSpecs`)."""
    meta = obj.get("metadata") or {}
    pods, gpu = 0, False
    for spec in ((obj.get("spec") or {}).get(specs_key) or {}).values():
        if isinstance(spec, Mapping):
            pods += int(spec.get("replicas") or 1)
            gpu = gpu or _template_gpu(spec.get("template"))
    return GpuJob(kind, str(meta.get("namespace", "")), str(meta.get("name", "")), pods, gpu)


def storage_class(obj: Mapping[str, Any]) -> tuple[str, str, bool]:
    """A StorageClass's name, provisioner, and whether it is the default."""
    meta = obj.get("metadata") or {}
    default = (meta.get("annotations") or {}).get(
        "storageclass.kubernetes.io/is-default-class"
    ) == "true"
    return str(meta.get("name", "")), str(obj.get("provisioner", "")), default


def rwx_claim_class(obj: Mapping[str, Any]) -> str | None:
    """The StorageClass of a bound ReadWriteMany claim; None for any other claim."""
    spec = obj.get("spec") or {}
    bound = (obj.get("status") or {}).get("phase") == "Bound"
    if bound and "ReadWriteMany" in (spec.get("accessModes") or []):
        return str(spec.get("storageClassName") or "")
    return None
