"""Which mount a path is on, shared filesystems, and free space as statvfs tells it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprobe.measure.mounts import Mount, is_shared, mount_of, space_of
from mounting import mounted

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("fstype", "shared"),
    [
        ("nfs", True),
        ("nfs4", True),
        ("lustre", True),
        ("gpfs", True),
        ("wekafs", True),
        ("ceph", True),
        ("cephfs", True),
        ("beegfs", True),
        ("cifs", True),
        ("fuse.juicefs", True),
        ("fuse.ceph-fuse", True),
        ("ext4", False),
        ("xfs", False),
        ("tmpfs", False),
        ("overlay", False),
        ("fuseblk", False),
    ],
)
def test_shared_filesystems_are_recognised(fstype: str, shared: bool) -> None:
    assert is_shared(fstype) is shared


TABLE = [
    Mount("/dev/nvme0n1p2", "/", "ext4", ("rw",)),
    Mount("/dev/md0", "/data", "xfs", ("rw",)),
    Mount("10.0.0.5:/export", "/data/shared", "nfs4", ("rw", "vers=4.2")),
    Mount("tmpfs", "/data/shared", "tmpfs", ("rw",)),  # mounted over the NFS export
]


@pytest.mark.parametrize(
    ("path", "device"),
    [
        ("/", "/dev/nvme0n1p2"),
        ("/database", "/dev/nvme0n1p2"),  # /data is a prefix of the name, not a parent
        ("/data", "/dev/md0"),
        ("/data/x", "/dev/md0"),
        ("/data/shared/run1", "tmpfs"),  # the last mount on a point is the one in effect
    ],
)
def test_the_deepest_mount_holds_a_path(path: str, device: str) -> None:
    mount = mount_of(Path(path), TABLE)
    assert mount is not None and mount.device == device


def test_the_live_mount_table_finds_a_tmpfs() -> None:
    with mounted("tmpfs", "size=8m,mode=0755") as point:
        (point / "sub").mkdir()
        mount = mount_of(point / "sub")
    assert mount is not None
    assert (mount.device, mount.mount_point, mount.fstype) == ("tmpfs", str(point), "tmpfs")
    assert "size=8192k" in mount.options and mount.shared is False


def test_space_and_inodes_of_a_tmpfs() -> None:
    with mounted("tmpfs", "size=8m,nr_inodes=100") as point:
        (point / "f").write_bytes(b"\1" * MIB)
        space = space_of(point)
    assert (space.total_bytes, space.free_bytes) == (8 * MIB, 7 * MIB)
    assert (space.total_inodes, space.free_inodes) == (100, 98)
    assert space.read_only is False


def test_ramfs_keeps_no_account() -> None:
    with mounted("ramfs") as point:
        space = space_of(point)
    assert (space.total_bytes, space.free_bytes, space.total_inodes, space.free_inodes) == (
        None,
        None,
        None,
        None,
    )


def test_a_read_only_mount_says_so() -> None:
    with mounted("tmpfs", "ro,size=1m") as point:
        assert space_of(point).read_only is True
