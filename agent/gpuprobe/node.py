"""Facts about the node that several checks share: its GPUs, its driver, its kubelet."""

from __future__ import annotations

from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import plugin_paths
from gpuprobe.gpu.driver import kernel_module
from gpuprobe.gpu.nvidia.device import driver_version, gpu_count
from gpuprobe.gpu.pci import nvidia_gpus
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError


def nvidia_gpu_count(host: Host) -> int:
    """How many NVIDIA GPUs the node has: the PCI bus's count, else NVML's.

    NVML is asked only when the bus shows none (a VM or snapshot without sysfs), so a hung
    NVML does not hold up checks that only need to know whether GPUs are there.
    """
    return len(nvidia_gpus(host.fs)) or gpu_count(host.nvml) or 0


def is_kubernetes_node(host: Host, config: Config) -> bool:
    """A Kubernetes node is one where the kubelet's device-plugins directory exists."""
    return host.fs.is_dir(plugin_paths(config).socket_dir)


def loaded_driver_version(host: Host) -> str | None:
    """The driver version in use: NVML's, else the loaded kernel module's; None when neither."""
    if host.nvml.init_error is None:
        try:
            version = driver_version(host.nvml)
        except NvmlError:
            version = ""
        if version:
            return version
    module = kernel_module(host.fs)
    return module.version if module else None
