"""The kubelet as the workloads readers see it: whether this is a Kubernetes node (the
directories the kubelet keeps on every node it runs on: its state under `/var/lib/kubelet`,
and inside it `pod-resources/`, where its PodResources socket lives), and what its
PodResources API answers."""

from __future__ import annotations

from gpuprobe.host import Host
from gpuprobe.host.podresources import PodResourcesAnswer

KUBELET_DIR = "/var/lib/kubelet"
PODRESOURCES_DIR = "/var/lib/kubelet/pod-resources"


def has_kubelet_dir(host: Host) -> bool:
    """Whether the kubelet's state directory is on the node."""
    return host.fs.is_dir(KUBELET_DIR)


def has_podresources_dir(host: Host) -> bool:
    """Whether the kubelet's PodResources directory is on the node (the kubelet creates it
    whenever it runs; the socket lives inside)."""
    return host.fs.is_dir(PODRESOURCES_DIR)


def ask_podresources(host: Host, socket: str, timeout_seconds: float) -> PodResourcesAnswer:
    """The kubelet's PodResources answers on `socket` (List, GetAllocatableResources; each
    call bounded by `timeout_seconds`): absent, an error, or the lists."""
    return host.podresources.ask(socket, timeout_seconds)
