"""Whether this is a Kubernetes node: the directories the kubelet keeps on every node it runs
on (its state under `/var/lib/kubelet`, and inside it `pod-resources/`, where its
PodResources socket lives)."""

from __future__ import annotations

from gpuprobe.host import Host

KUBELET_DIR = "/var/lib/kubelet"
PODRESOURCES_DIR = "/var/lib/kubelet/pod-resources"


def has_kubelet_dir(host: Host) -> bool:
    """Whether the kubelet's state directory is on the node."""
    return host.fs.is_dir(KUBELET_DIR)


def has_podresources_dir(host: Host) -> bool:
    """Whether the kubelet's PodResources directory is on the node (the kubelet creates it
    whenever it runs; the socket lives inside)."""
    return host.fs.is_dir(PODRESOURCES_DIR)
