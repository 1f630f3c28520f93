"""Per GPU and MIG device: the pods the kubelet gave it, and the pods whose processes run on it.

`attribute` reads everything once per round: the kubelet's answer, the GPUs as workloads get
them (the vendors' backends through the GPU view, `checks.rules.vendors.node_uses`: NVIDIA's
from NVML, AMD's from sysfs and the processes' open device files), each GPU process's cgroup
(`/proc/<pid>/cgroup`) and the kubelet's log directories (pod and container names), and
returns one `DeviceUse` per GPU and per MIG device, in the vendors' order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.gpu.backend import GpuUse, Partition, Vendor, VendorUses
from gpuprobe.host import Host
from gpuprobe.host.podresources import PodResourcesAnswer
from gpuprobe.report import PodRef
from gpuprobe.workloads.allocations import (
    DeviceNames,
    Grant,
    device_plugin_grants,
    dra_grants,
    has_dra,
    read_cdi_devices,
)
from gpuprobe.workloads.cgroups import PodCgroup, parse_cgroup_file
from gpuprobe.workloads.pods import PodDirectory, read_pod_directory

# A cgroup file is a few hundred bytes; reading it with the default 16 MiB bound would allocate
# that much per process.
CGROUP_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class ProcessOwner:
    """A GPU process and the pod it belongs to (pod None: a host process, or a pod whose
    name the kubelet's log directories do not give)."""

    pid: int
    pod: PodRef | None
    cgroup: PodCgroup | None

    def to_dict(self) -> dict[str, Any]:
        """The process as the check's data shows it."""
        d: dict[str, Any] = {"pid": self.pid}
        if self.pod is not None:
            d.update(self.pod.to_dict())
        if self.cgroup is not None:
            d["pod_uid"] = self.cgroup.pod_uid
            if self.cgroup.container_id:
                d["container_id"] = self.cgroup.container_id
        return d


@dataclass
class DeviceUse:
    """One GPU or MIG device: who holds it, who runs on it, and its load."""

    resource: str  # gpu:<i>:<uuid> or mig:<g>:<gi>:<ci>
    gpu: int
    uuid: str | None  # NVIDIA's GPU UUID; AMD's unique_id, else its PCI address
    mig: Partition | None = None
    grants: list[Grant] = field(default_factory=list)
    processes: list[ProcessOwner] | None = None  # None: the driver's processes unknown
    utilization_percent: int | None = None
    samples: list[tuple[int, float]] | None = None  # (µs, percent); whole GPUs only
    vendor: Vendor = "nvidia"

    @property
    def gpu_key(self) -> tuple[Vendor, int]:
        """The GPU this device is or belongs to (an index alone repeats on a node with both
        vendors' GPUs)."""
        return self.vendor, self.gpu

    @property
    def holders(self) -> list[PodRef]:
        """The containers the kubelet gave this device, each once, in order."""
        return sorted({g.pod for g in self.grants})

    def to_dict(self) -> dict[str, Any]:
        """The device as the check's data shows it."""
        d: dict[str, Any] = {"resource": self.resource, "gpu": self.gpu, "uuid": self.uuid}
        if self.mig is not None:
            d["mig"] = {"uuid": self.mig.uuid, "name": self.mig.name, "gi": self.mig.gi}
            d["mig"]["ci"] = self.mig.ci
        d["holders"] = [_grant(g) for g in self.grants]
        if self.processes is not None:
            d["processes"] = [p.to_dict() for p in self.processes]
        if self.utilization_percent is not None:
            d["utilization_gpu_percent"] = self.utilization_percent
        return d


def _grant(grant: Grant) -> dict[str, Any]:
    d: dict[str, Any] = grant.pod.to_dict()
    d.update({"resource": grant.resource, "device_id": grant.device_id, "via": grant.via})
    if grant.replica is not None:
        d["replica"] = grant.replica
    if grant.claim is not None:
        d["claim"] = grant.claim
    return d


@dataclass
class Attribution:
    """Every device's use, the granted IDs that name no device of this node, and the
    processes that hold AMD's KFD and no GPU's render node (None: no AMD GPU, or their
    descriptors cannot be read)."""

    devices: list[DeviceUse]
    unresolved: list[Grant]
    kfd_only: list[ProcessOwner] | None = None

    def by_resource(self) -> dict[str, DeviceUse]:
        """The devices by finding resource."""
        return {d.resource: d for d in self.devices}


def attribute(host: Host, answer: PodResourcesAnswer, uses: list[VendorUses]) -> Attribution:
    """Tie every GPU and MIG device to its holders and its processes' pods. `uses`: the
    node's GPUs as workloads get them, vendor by vendor (a caller that judges one vendor's
    GPUs passes that vendor's alone: the others' grants then name no device)."""
    gpus = [gpu for vendor in uses for gpu in vendor.gpus]
    unplaced = [pid for vendor in uses if vendor.gpus for pid in vendor.unplaced or []]
    placed_known = any(vendor.gpus and vendor.unplaced is not None for vendor in uses)
    names = DeviceNames(gpus)
    grants: list[Grant] = []
    if answer.list is not None:
        grants = device_plugin_grants(answer.list, names)
        if has_dra(answer.list):
            grants += dra_grants(answer.list, names, read_cdi_devices(host.fs))
    directory = PodDirectory()
    if any(g.processes for g in gpus) or unplaced:
        directory = read_pod_directory(host.fs)
    devices: list[DeviceUse] = []
    for gpu in gpus:
        devices += _uses(host, gpu, directory)
    by_resource = {d.resource: d for d in devices}
    unresolved = []
    for grant in grants:
        if grant.device is not None and grant.device in by_resource:
            by_resource[grant.device].grants.append(grant)
        else:
            unresolved.append(grant)
    kfd_only = [_owner(host, pid, directory) for pid in unplaced] if placed_known else None
    return Attribution(devices, unresolved, kfd_only)


def _uses(host: Host, gpu: GpuUse, directory: PodDirectory) -> list[DeviceUse]:
    vendor = gpu.identity.vendor
    # The data's `uuid` is the id the resource names (AMD's unique_id, else its PCI address).
    uuid = gpu.identity.stable_id
    whole = DeviceUse(gpu.resource, gpu.index, uuid, vendor=vendor)
    whole.utilization_percent, whole.samples = gpu.utilization_percent, gpu.samples
    migs = [DeviceUse(m.resource, gpu.index, uuid, m, vendor=vendor) for m in gpu.partitions]
    if gpu.processes is None:
        return [whole, *migs]
    whole.processes = []
    for mig in migs:
        mig.processes = []
    by_instance = {(m.mig.gi, m.mig.ci): m for m in migs if m.mig is not None}
    for process in gpu.processes:
        owner = _owner(host, process.pid, directory)
        whole.processes.append(owner)
        target = None
        if process.gi is not None and process.ci is not None:
            target = by_instance.get((process.gi, process.ci))
        if target is not None and target.processes is not None:
            target.processes.append(owner)
    return [whole, *migs]


def _owner(host: Host, pid: int, directory: PodDirectory) -> ProcessOwner:
    try:
        text = host.fs.read_text(f"/proc/{pid}/cgroup", CGROUP_MAX_BYTES)
    except OSError:  # the process ended since the driver listed it
        text = ""
    cgroup = parse_cgroup_file(text) if text else None
    if cgroup is None:
        return ProcessOwner(pid, None, None)
    name = directory.pod(cgroup.pod_uid)
    if name is None:
        return ProcessOwner(pid, None, cgroup)
    pod = PodRef(name.namespace, name.name, directory.container(cgroup.container_id))
    return ProcessOwner(pid, pod, cgroup)
