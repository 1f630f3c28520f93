"""`capture` (root, as the DaemonSet and support cases run it) never writes through a link it
did not mean to: it creates the snapshot directory itself, refuses one another user owns or
others may write to (there a planted `rootfs` link won the race 1 time in 4 and root wrote host
files through it), and writes every file through directory descriptors with links resolved
inside the snapshot — planted ones, and absolute ones copied from the host alike."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import gpuprobe, require_root, snapshot
from gpuprobe.capture import copy_tree, prepare_target, write_snapshot
from gpuprobe.config import Config
from gpuprobe.errors import UsageError
from gpuprobe.host import recording_host
from gpuprobe.host.fs import HostFS
from gpuprobe.pipeline import run_checks

NOBODY = 65534


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    require_root()
    target = tmp_path / "snap"
    target.mkdir(mode=0o755)
    os.chown(target, NOBODY, NOBODY)
    out = gpuprobe("capture", str(target), "--only", "driver")
    assert out.returncode == 64
    assert out.stderr.splitlines() == [
        f"gpuprobe: capture: {target} belongs to another user (uid {NOBODY}): "
        "name a new directory and capture creates it (see gpuprobe capture --help)"
    ]
    assert listing(target) == []


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    target.mkdir()
    target.chmod(0o1777)  # as /tmp itself: anyone may plant a link in it
    out = gpuprobe("capture", str(target), "--only", "driver")
    assert out.returncode == 64
    assert out.stderr.splitlines() == [
        f"gpuprobe: capture: {target} is writable by others (mode 1777): "
        "name a new directory and capture creates it (see gpuprobe capture --help)"
    ]
    assert listing(target) == []


def test_a_link_as_the_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "snap").symlink_to(tmp_path / "real")
    out = gpuprobe("capture", str(tmp_path / "snap"), "--only", "driver")
    assert out.returncode == 64
    assert out.stderr.splitlines() == [
        f"gpuprobe: capture: {tmp_path}/snap is a symbolic link: name the directory itself "
        "(see gpuprobe capture --help)"
    ]
    assert listing(tmp_path / "real") == []


def test_a_rootfs_link_planted_after_the_checks_leads_nowhere_outside(tmp_path: Path) -> None:
    """The race the attack won: a link appears in the directory while the checks run."""
    host_root = tmp_path / "host"
    shutil.copytree(Path(snapshot("synthetic-h100-8gpu-healthy")) / "rootfs", host_root)
    victim = tmp_path / "victim"  # stands for the host's /etc
    victim.mkdir()
    (victim / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    target = tmp_path / "snap"
    tree = prepare_target(target)
    try:
        host = recording_host(str(host_root), "node-a")
        report = run_checks(host, Config(), ["driver", "gpus"])
        (target / "rootfs").symlink_to(victim)  # planted between the checks and the writes
        (target / "report.json").symlink_to(victim / "passwd")
        write_snapshot(tree, host, report)
    finally:
        tree.close()
    assert listing(victim) == ["passwd"]
    assert (victim / "passwd").read_text() == "root:x:0:0::/root:/bin/sh\n"
    # The writes went inside the snapshot, where the links lead when read from its root.
    inside = target / str(victim).lstrip("/")
    assert (inside / "proc/driver/nvidia/version").read_text().startswith("NVRM version:")
    assert (inside / "passwd").read_text().startswith("{")  # report.json, through its link


def test_an_absolute_host_link_is_resolved_inside_the_snapshot(tmp_path: Path) -> None:
    """An absolute link in the host's tree names a path of the host: read under the root
    (as the checks read it), copied as a link, and the snapshot's copy resolves inside it."""
    outside = tmp_path / "outside"  # the agent's own directory of the link's name
    outside.mkdir()
    (outside / "speed").write_text("100000\n")
    before = (outside / "speed").stat()
    host = tmp_path / "host"
    (host / "sys/class/net").mkdir(parents=True)
    in_host = host / str(outside).lstrip("/")  # the same path, in the host's tree
    in_host.mkdir(parents=True)
    (in_host / "speed").write_text("400000\n")
    (host / "sys/class/net/ib0").symlink_to(outside)  # absolute, as sysfs links are not
    fs = HostFS(host)
    fs.record()
    assert fs.readlink("/sys/class/net/ib0") == str(outside)
    assert fs.read_text("/sys/class/net/ib0/speed") == "400000\n"
    fs.exists("/sys/class/net/ib0/carrier")  # asked about, absent: no placeholder
    fs.exists("/sys/class/net/ib0/speed")
    rootfs = tmp_path / "rootfs"
    copy_tree(fs, rootfs)
    assert listing(outside) == ["speed"]
    after = (outside / "speed").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert os.readlink(rootfs / "sys/class/net/ib0") == str(outside)
    copied = rootfs / str(outside).lstrip("/") / "speed"
    assert copied.read_text() == "400000\n"
    assert HostFS(rootfs, snapshot=True).read_text("/sys/class/net/ib0/speed") == "400000\n"


def test_prepare_target_refuses_a_non_empty_directory_it_opened(tmp_path: Path) -> None:
    (tmp_path / "snap").mkdir()
    (tmp_path / "snap" / "x").write_text("")
    with pytest.raises(UsageError, match="exists and is not an empty directory"):
        prepare_target(tmp_path / "snap")
