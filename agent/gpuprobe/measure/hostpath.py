"""Where a host path is on the machine the agent runs on: the host's `/` is `/` on the node
itself and `/host` in the DaemonSet (`--root`), and a path is resolved inside that root as a
chroot would resolve it, so an active measurement writes where the host's path really is."""

from __future__ import annotations

from pathlib import Path

from gpuprobe.host import Host


def host_root(host: Host) -> Path:
    """The host's `/` on this machine."""
    return host.fs.root


def local_path(host: Host, path: str) -> Path:
    """This machine's path for a host path, its links resolved inside the host's root."""
    return host.fs.real_path(path)
