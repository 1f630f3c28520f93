"""Which GPU or MIG device each device the kubelet handed out is.

From `List`, every container's devices:

- device-plugin resources (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`, or whatever name the
  plugin's config renamed them to) whose device IDs are GPU UUIDs or indices (the plugin's
  `DEVICE_ID_STRATEGY`), MIG UUIDs or `<gpu>:<mig index>`, and under time-slicing replicas
  `<id>::<n>` (n the replica number); AMD's (`amd.com/gpu`) whose device IDs are the GPUs'
  PCI addresses (ROCm/k8s-device-plugin; the partitions of a partitioned MI300,
  `amdgpu_xcp_<n>` under `amd.com/<compute>_<memory>`, name no GPU and stay unresolved);
- DRA claims (`dynamic_resources`) whose devices name CDI devices (`vendor/class=name`),
  resolved through the node's CDI specs: by the device name itself when it is an index,
  UUID or `<gpu>:<mig>` (nvidia-ctk's names), else by the UUIDs in the device's
  `NVIDIA_VISIBLE_DEVICES`, or its device nodes: a MIG device's compute-instance capability
  `/dev/nvidia-caps/nvidia-cap<minor>` (the driver's `/proc/driver/nvidia-caps/mig-minors`
  names it `gpu<GPU minor>/gi<gi>/ci<ci>/access <minor>`) before its parent's
  `/dev/nvidia<minor>`; a DRA device named `gpu-<index>` (the NVIDIA DRA driver's) is that GPU
  when no spec says more.

A device ID that names no GPU of this node is kept, unresolved, when its resource also hands
out GPUs or is AMD's (a stale or foreign ID, a GPU partition); resources that are no GPUs at
all (NICs, FPGAs) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gpuprobe.containers.cdi import CdiSpec, ContainerEdits, parse_cdi_spec
from gpuprobe.gpu.backend import GpuUse
from gpuprobe.host.fs import HostFS
from gpuprobe.kubelet.podresources.v1 import api_pb2
from gpuprobe.report import PodRef

CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
_CAP_NODE = re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d+)$")
_CI_ACCESS = re.compile(r"^gpu(\d+)/gi(\d+)/ci(\d+)/access (\d+)$")
_DRA_GPU = re.compile(r"^gpu-(\d+)$")
DEVICE_PLUGIN, DRA = "device-plugin", "dra"
AMD_RESOURCE_PREFIX = "amd.com/"


@dataclass(frozen=True)
class Grant:
    """One device the kubelet gave one container, and the GPU or MIG device it is.

    `device` is the finding resource (`gpu:<i>:<uuid>`, `mig:<g>:<gi>:<ci>`), None when the
    ID names no device of this node. `replica` is the time-slicing replica number.
    `claim` is a DRA claim's `<namespace>/<name>`; `resource` the resource name or, for DRA,
    the CDI device name.
    """

    pod: PodRef
    resource: str
    device_id: str
    device: str | None
    via: str = DEVICE_PLUGIN
    replica: str | None = None
    claim: str | None = None


class DeviceNames:
    """Every name a GPU or MIG device of this node goes by, to its finding resource."""

    def __init__(self, gpus: Iterable[GpuUse]) -> None:
        self.by_name: dict[str, str] = {}
        self.by_node: dict[str, str] = {}  # a CDI spec's device node path
        self.by_instance: dict[tuple[int, int, int], str] = {}  # (GPU minor, gi, ci)
        for gpu in gpus:
            for name in gpu.plugin_ids:
                self.by_name[name] = gpu.resource
            if gpu.device_node is not None:
                self.by_node[gpu.device_node] = gpu.resource
            for mig in gpu.partitions:
                if gpu.minor is not None:
                    self.by_instance[(gpu.minor, mig.gi, mig.ci)] = mig.resource
                self.by_name[f"{gpu.index}:{mig.slot}"] = mig.resource
                if mig.uuid:
                    self.by_name[mig.uuid] = mig.resource

    def resolve(self, device_id: str) -> tuple[str | None, str | None]:
        """(finding resource, replica) of a device-plugin device ID."""
        base, sep, replica = device_id.partition("::")
        return self.by_name.get(base), (replica if sep else None)


def device_plugin_grants(
    listed: api_pb2.ListPodResourcesResponse, names: DeviceNames
) -> list[Grant]:
    """The device-plugin devices of every container, resolved to GPUs and MIG devices."""
    found: list[Grant] = []
    for pod, container in _containers(listed):
        for devices in container.devices:
            for device_id in devices.device_ids:
                device, replica = names.resolve(device_id)
                found.append(Grant(pod, devices.resource_name, device_id, device, replica=replica))
    gpu_resources = {g.resource for g in found if g.device is not None}
    return [
        g
        for g in found
        if g.device is not None
        or g.resource in gpu_resources
        or g.resource.startswith(AMD_RESOURCE_PREFIX)
    ]


def dra_grants(
    listed: api_pb2.ListPodResourcesResponse, names: DeviceNames, specs: CdiDevices
) -> list[Grant]:
    """The DRA claims' devices of every container, resolved through the CDI specs."""
    found: list[Grant] = []
    for pod, container in _containers(listed):
        for claim in container.dynamic_resources:
            claim_name = f"{claim.claim_namespace}/{claim.claim_name}"
            for resource in claim.claim_resources:
                cdi_names = [d.name for d in resource.cdi_devices]
                devices = {d for n in cdi_names for d in specs.resolve(n, names)}
                if not devices and (fallback := _dra_device(resource.device_name, names)):
                    devices = {fallback}
                label = ",".join(cdi_names) or f"{resource.driver_name}/{resource.device_name}"
                device_id = resource.device_name or label
                targets: list[str | None] = [*sorted(devices)] or [None]
                for device in targets:
                    found.append(Grant(pod, label, device_id, device, DRA, claim=claim_name))
    return [g for g in found if g.device is not None or _gpu_driver(g.resource)]


def _gpu_driver(label: str) -> bool:
    return "nvidia.com" in label


def _dra_device(device_name: str, names: DeviceNames) -> str | None:
    found = _DRA_GPU.match(device_name)
    return names.by_name.get(found.group(1)) if found else None


def _containers(
    listed: api_pb2.ListPodResourcesResponse,
) -> Iterator[tuple[PodRef, api_pb2.ContainerResources]]:
    for pod in listed.pod_resources:
        for container in pod.containers:
            yield PodRef(pod.namespace, pod.name, container.name), container


def has_dra(listed: api_pb2.ListPodResourcesResponse) -> bool:
    """Whether any container holds a DRA claim (only then are CDI specs read)."""
    return any(c.dynamic_resources for _, c in _containers(listed))


class CdiDevices:
    """The node's CDI devices by fully qualified name (`vendor/class=name`)."""

    def __init__(self, specs: Iterable[CdiSpec], mig_minors: str = "") -> None:
        self.edits: dict[str, ContainerEdits] = {}
        # Compute-instance capability minors: (GPU minor, gi, ci) by capability minor.
        self.instances: dict[int, tuple[int, int, int]] = {}
        for line in mig_minors.splitlines():
            if found := _CI_ACCESS.match(line.strip()):
                gpu, gi, ci, minor = (int(g) for g in found.groups())
                self.instances[minor] = (gpu, gi, ci)
        for spec in specs:
            for device in spec.devices:
                self.edits[f"{spec.kind}={device.name}"] = device.edits

    def resolve(self, qualified: str, names: DeviceNames) -> set[str]:
        """The GPUs and MIG devices a CDI device gives a container."""
        _, _, name = qualified.partition("=")
        direct, _ = names.resolve(name)
        if direct is not None:
            return {direct}
        edits = self.edits.get(qualified)
        if edits is None:
            return set()
        found: set[str] = set()
        for env in edits.env:
            key, _, value = env.partition("=")
            if key == "NVIDIA_VISIBLE_DEVICES":
                found |= {d for v in value.split(",") if (d := names.resolve(v.strip())[0])}
        migs = {
            names.by_instance.get(self.instances.get(int(cap.group(1)), (-1, -1, -1)))
            for node in edits.device_nodes
            if (cap := _CAP_NODE.match(node))
        } - {None}
        if migs:  # a MIG device: its parent's /dev/nvidia<minor> is not the whole GPU's grant
            return found | {m for m in migs if m is not None}
        for node in edits.device_nodes:
            if device := names.by_node.get(node):
                found.add(device)
        return found


def read_cdi_devices(fs: HostFS, dirs: Iterable[str] = CDI_SPEC_DIRS) -> CdiDevices:
    """Every valid CDI spec in the spec directories (invalid ones are the cdi check's)."""
    specs = []
    for directory in dirs:
        for entry in fs.listdir(directory):
            if not entry.endswith((".json", ".yaml")):
                continue
            path = f"{directory}/{entry}"
            try:
                raw = fs.read_bytes(path)
            except OSError:
                continue
            spec = parse_cdi_spec(path, raw)
            if isinstance(spec, CdiSpec):
                specs.append(spec)
    return CdiDevices(specs, fs.try_read_text(MIG_MINORS) or "")
