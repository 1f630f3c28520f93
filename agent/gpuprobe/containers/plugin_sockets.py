"""The kubelet's device-plugins directory: whether the node has one (a Kubernetes node), and
the unix sockets in it (the kubelet's own `kubelet.sock` and each plugin's)."""

from __future__ import annotations

from gpuprobe.host import Host

# The kubelet's own socket in the directory (device plugins register through it).
KUBELET_SOCKET = "kubelet.sock"


def has_plugin_dir(host: Host, directory: str) -> bool:
    """Whether the kubelet's device-plugins directory is on the node."""
    return host.fs.is_dir(directory)


def has_socket(host: Host, directory: str, name: str) -> bool:
    """Whether `name` in the directory is a unix socket."""
    return host.fs.is_socket(f"{directory}/{name}")


def plugin_sockets(host: Host, directory: str, prefix: str, suffix: str = "") -> list[str]:
    """The names of the sockets in the directory that start with `prefix` and end with
    `suffix`, sorted."""
    return [
        name
        for name in host.fs.listdir(directory)
        if name.startswith(prefix)
        and name.endswith(suffix)
        and host.fs.is_socket(f"{directory}/{name}")
    ]
