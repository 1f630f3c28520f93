"""The filesystem a directory lives on: its mount (device, type, options) and its free space.

Mounts come from psutil (this process's mount table, `/proc/self/mounts`): under `--root
/host` in the DaemonSet the host's mounts appear below `/host`, and the mount that holds the
measured directory is the one whose writes the test measures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Filesystems that several nodes share over the network (kernel type names as in
# /proc/mounts; FUSE filesystems are `fuse.<name>`, e.g. fuse.juicefs, fuse.ceph-fuse).
SHARED_TYPES = frozenset(
    {"nfs", "nfs4", "lustre", "gpfs", "wekafs", "ceph", "cephfs", "beegfs", "cifs", "smb3"}
)


def is_shared(fstype: str) -> bool:
    """Whether a filesystem type is a shared (network or parallel) filesystem."""
    return fstype in SHARED_TYPES or fstype.startswith("fuse.")


@dataclass(frozen=True)
class Mount:
    """One entry of the mount table."""

    device: str
    mount_point: str
    fstype: str
    options: tuple[str, ...]

    @property
    def shared(self) -> bool:
        """Whether this is a shared filesystem."""
        return is_shared(self.fstype)


def mounts() -> list[Mount]:
    """Every mount this process sees."""
    import psutil  # imported here: `gpuprobe --help` and snapshot replays never need it

    return [
        Mount(p.device, p.mountpoint, p.fstype, tuple(o for o in p.opts.split(",") if o))
        for p in psutil.disk_partitions(all=True)
    ]


def mount_of(path: Path, table: list[Mount] | None = None) -> Mount | None:
    """The mount holding `path` (symbolic links resolved): the deepest mount point above it."""
    target = os.path.realpath(path)
    best: Mount | None = None
    depth = -1
    for mount in mounts() if table is None else table:
        point = mount.mount_point.rstrip("/")
        # The last of several mounts on one point is the one in effect, hence >=.
        if (target == point or target.startswith(point + "/")) and len(point) >= depth:
            best, depth = mount, len(point)
    return best


@dataclass(frozen=True)
class Space:
    """Free space and inodes of a filesystem, as `df` shows them (None: not reported)."""

    total_bytes: int | None
    free_bytes: int | None
    total_inodes: int | None
    free_inodes: int | None
    read_only: bool


def space_of(path: Path) -> Space:
    """statvfs of `path`; raises OSError. Free is what an unprivileged writer may use.

    A filesystem that reports no blocks (ramfs, some FUSE) does not account space; one that
    reports no inodes (btrfs, some network filesystems) allocates them on demand.
    """
    st = os.statvfs(path)
    accounts_space = st.f_blocks > 0
    accounts_inodes = st.f_files > 0
    return Space(
        total_bytes=st.f_blocks * st.f_frsize if accounts_space else None,
        free_bytes=st.f_bavail * st.f_frsize if accounts_space else None,
        total_inodes=st.f_files if accounts_inodes else None,
        free_inodes=st.f_favail if accounts_inodes else None,
        read_only=bool(st.f_flag & os.ST_RDONLY),
    )
