"""What of a CDI spec is gone from the node: the device nodes, mounted host paths and hook
binaries it names that do not exist here, which the `cdi` check and each vendor's part of it
(`checks/amd/cdi.py`) judge a spec stale by."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuprobe.containers.cdi import CdiSpec
from gpuprobe.containers.cdi_specs import present_paths
from gpuprobe.host import Host


@dataclass
class MissingPaths:
    """The paths a spec names that are not on the host, each once, in the spec's order."""

    device_nodes: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)

    @property
    def all(self) -> list[str]:
        return self.device_nodes + self.mounts + self.hooks


def missing_paths(host: Host, spec: CdiSpec) -> MissingPaths:
    """The spec's device nodes, mounts and hook binaries missing on the host. A relative path
    names nothing on the host (the runtime would resolve it against its own working
    directory): missing, as an absent one; a hook named by a relative path is looked up by the
    runtime, not missing."""
    gone = MissingPaths()
    present = present_paths(host, spec)
    for edits in spec.all_edits():
        for node in edits.device_nodes:
            if node not in present and node not in gone.device_nodes:
                gone.device_nodes.append(node)
        for mount in edits.mounts:
            if mount not in present and mount not in gone.mounts:
                gone.mounts.append(mount)
        for hook, _ in edits.hooks:
            missing = hook.startswith("/") and hook not in present
            if missing and hook not in gone.hooks:
                gone.hooks.append(hook)
    return gone


def names(paths: list[str], shown: int = 4) -> str:
    """The first `shown` paths, and how many more."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(paths[:shown]) + more
