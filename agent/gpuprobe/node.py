"""Facts about the node that several checks share: its GPUs, its driver, its kubelet."""

from __future__ import annotations

from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import plugin_paths
from gpuprobe.gpu.nvidia.backend import NvidiaBackend
from gpuprobe.host import Host


def nvidia_gpu_count(host: Host) -> int:
    """How many NVIDIA GPUs the node has: the PCI bus's count, else NVML's.

    NVML is asked only when the bus shows none (a VM or snapshot without sysfs), so a hung
    NVML does not hold up checks that only need to know whether GPUs are there.
    """
    backend = NvidiaBackend(host)
    return len(backend.bus_gpus()) or backend.count() or 0


def is_kubernetes_node(host: Host, config: Config) -> bool:
    """A Kubernetes node is one where the kubelet's device-plugins directory exists."""
    return host.fs.is_dir(plugin_paths(config).socket_dir)


def loaded_driver_version(host: Host) -> str | None:
    """The driver version in use: NVML's, else the loaded kernel module's; None when neither."""
    return NvidiaBackend(host).driver().version
