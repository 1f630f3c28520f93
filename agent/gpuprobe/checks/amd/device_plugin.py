"""AMD's part of the `device_plugin` check: the AMD GPU device plugin (ROCm/k8s-device-plugin,
through kubevirt's device-plugin-manager) serves `amd.com_<resource>` sockets, no suffix
(`amd.com_gpu`; the mixed naming strategy of partitioned GPUs serves one per partition type).
A Kubernetes node with AMD GPUs on the bus and no such socket advertises no `amd.com/gpu`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.containers.plugin_sockets import KUBELET_SOCKET, plugin_sockets
from gpuprobe.report import Action, Finding, Severity

AMD_SOCKET_PREFIX = "amd.com_"
AMD_RESOURCE_PREFIX = "amd.com/"


class AmdDevicePlugin:
    """AMD's rules of the `device_plugin` check (`checks.rules.vendor_part.DevicePluginRules`)."""

    def read(self, ctx: CheckContext, socket_dir: str) -> AmdPluginSockets | None:
        """The AMD plugin's sockets, where the bus shows AMD GPUs."""
        gpus = ctx.gpus.gpu_count("amd")
        if not gpus:
            return None
        return AmdPluginSockets(gpus, plugin_sockets(ctx.host, socket_dir, AMD_SOCKET_PREFIX))


@dataclass(frozen=True)
class AmdPluginSockets:
    """The AMD GPUs on the bus and the AMD plugin's sockets."""

    gpus: int
    sockets: list[str]

    @property
    def resources(self) -> list[str]:
        """The resources the sockets serve: `amd.com_gpu` → `amd.com/gpu`."""
        return [AMD_RESOURCE_PREFIX + s.removeprefix(AMD_SOCKET_PREFIX) for s in self.sockets]

    def facts(self, data: dict[str, Any]) -> None:
        data["amd_gpus"] = self.gpus
        data["amd_plugin_sockets"] = self.sockets
        data["amd_resources"] = self.resources

    def judge(self, socket_dir: str, kubelet_socket: bool) -> Part:
        """The AMD GPU device plugin's sockets against the AMD GPUs on the bus."""
        gpus, resources = self.gpus, self.resources
        if resources:
            return Part(f"AMD device plugin registered: {', '.join(resources)}", gpus=gpus)
        finding = Finding(
            "DEVICE_PLUGIN_NOT_REGISTERED",
            Severity.CRITICAL,
            f"no AMD device plugin socket ({AMD_SOCKET_PREFIX}*) in {socket_dir}"
            + ("" if kubelet_socket else f" (and no {KUBELET_SOCKET} either: is the kubelet up?)")
            + f" for the {gpus} AMD GPU{'s' if gpus != 1 else ''} on the PCI bus: the kubelet "
            "advertises no amd.com/gpu and GPU pods stay Pending. Check the AMD GPU device "
            "plugin DaemonSet's pod on this node (node selector and labels, taints, its logs)",
            Action.FIX_CONFIG,
        )
        return Part(f"no AMD device plugin registered ({gpus} GPUs)", [finding], gpus=gpus)
