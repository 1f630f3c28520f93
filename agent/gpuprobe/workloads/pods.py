"""Pods' names from their UIDs, and containers' names from their IDs, as the kubelet's log
directories on the host name them (no API access needed); and, with API access, the node's
pods as the API server reports them (`node_pod_statuses`).

The kubelet writes each pod's logs under `/var/log/pods/<namespace>_<pod name>_<pod uid>/`
(one directory per container inside), and links every container's log as
`/var/log/containers/<pod name>_<namespace>_<container name>-<container id>.log`. Neither
namespaces nor pod names may hold `_` (they are DNS labels and subdomains), so the names
split cleanly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.podstatus import PodStatusAnswer

POD_LOG_DIR = "/var/log/pods"
CONTAINER_LOG_DIR = "/var/log/containers"
_CONTAINER_LOG = re.compile(
    r"^(?P<pod>[^_]+)_(?P<namespace>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$"
)


@dataclass(frozen=True)
class PodName:
    """A pod's namespace and name."""

    namespace: str
    name: str


@dataclass
class PodDirectory:
    """The pods and containers the kubelet's log directories name."""

    pods: dict[str, PodName] = field(default_factory=dict)  # by pod UID
    containers: dict[str, str] = field(default_factory=dict)  # container name by container ID

    def pod(self, uid: str) -> PodName | None:
        """The pod with this UID, if the kubelet keeps its logs here."""
        return self.pods.get(uid)

    def container(self, container_id: str | None) -> str:
        """The container's name ("" when unknown)."""
        return self.containers.get(container_id or "", "")


def read_pod_directory(fs: HostFS) -> PodDirectory:
    """Read both log directories once (two directory listings)."""
    directory = PodDirectory()
    for entry in fs.listdir(POD_LOG_DIR):
        parts = entry.split("_")
        if len(parts) == 3 and all(parts):
            namespace, name, uid = parts
            directory.pods[uid] = PodName(namespace, name)
    for entry in fs.listdir(CONTAINER_LOG_DIR):
        found = _CONTAINER_LOG.match(entry)
        if found is not None:
            directory.containers[found.group("id")] = found.group("container")
    return directory


def node_pod_statuses(host: Host) -> PodStatusAnswer:
    """This node's pods and their containers' states as the API server reports them (absent
    without API access, an error when the server refused or did not answer)."""
    return host.pod_statuses.ask(host.node_name)
