"""`gpuprobe capture`: write this host's node snapshot.

Runs every check once against the live host with recording on, then writes what they saw:
the NVML calls and answers (nvml.json), the host files they read (rootfs/), the process list
(processes.json), the device plugin's configuration when one is given (device-plugin.json),
the kubelet's PodResources answers when the node has its socket (podresources.json),
the node's pods as the API server listed them when the agent has API access
(pod-statuses.json), the cloud metadata service's answers when the lifecycle check asked it
(lifecycle.json), the kernel ring's records as `/dev/kmsg` gave them (rootfs/dev/kmsg),
and the live report itself (report.json, to compare a replay with).
Replaying the snapshot with `gpuprobe check --snapshot DIR` gives the same findings.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from gpuprobe import __version__
from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import plugin_paths
from gpuprobe.errors import UsageError
from gpuprobe.host import SNAPSHOT_FORMAT, Host, check_root, recording_host
from gpuprobe.host.agentfiles import DEVICE_PLUGIN_FILE, agent_file_bytes, read_agent_file
from gpuprobe.host.fs import LINK, LIST, MAX_READ_BYTES, READ, HostFS
from gpuprobe.host.kmsg import KMSG
from gpuprobe.host.metadata import LIFECYCLE_FILE, RecordingMetadata
from gpuprobe.host.netlink import RecordingNetlink
from gpuprobe.host.nvml import RecordingNvml
from gpuprobe.host.podresources import PODRESOURCES_FILE, RecordingPodResources
from gpuprobe.host.podstatus import POD_STATUSES_FILE, PodStatuses, RecordingPodStatuses
from gpuprobe.host.processes import to_json
from gpuprobe.host.rootwalk import RootTree
from gpuprobe.host.writetree import WriteTree
from gpuprobe.pipeline import run_checks
from gpuprobe.report import NodeReport, format_time, now


def capture(
    directory: str,
    config: Config,
    names: list[str],
    root: str = "/",
    node_name: str | None = None,
    pod_statuses: PodStatuses | None = None,
) -> NodeReport:
    """Run the checks on the live host and write its snapshot to `directory` (the node's pods
    from `pod_statuses`, the API server, when the agent has API access)."""
    check_root(root)
    target = Path(directory)
    tree = prepare_target(target)
    try:
        host = recording_host(root, node_name, pod_statuses)
        plugin_file = plugin_paths(config).config_file
        if plugin_file is not None:  # read once, by the checks and DIR
            host.device_plugin_config = read_agent_file(plugin_file)
        report = run_checks(host, config, names)
        try:
            write_snapshot(tree, host, report)
        except OSError as exc:  # the disk filled, or something was planted in the directory
            raise UsageError(f"capture: cannot write to {directory}: {_reason(exc)}") from None
    finally:
        tree.close()
    return report


# Write bits for group and others: a directory they can write to is one where they could
# plant links or files while root writes the snapshot.
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


def prepare_target(target: Path) -> WriteTree:
    """The snapshot directory, open, proven writable, before any check runs.

    capture creates the directory itself; an existing one must be an empty directory (not a
    link) owned by this user and writable by no one else, or another user could plant links in
    it for root to write through. A path that cannot hold a snapshot (under a file, in /proc,
    read-only) is a usage error too, found before the checks spend their time.
    """
    try:
        if not os.path.lexists(target):
            if not os.path.lexists(target.parent):
                target.parent.mkdir(parents=True, exist_ok=True)
            # Raced with another creator: judged as an existing directory below.
            with contextlib.suppress(FileExistsError):
                os.mkdir(target, 0o755)
        before = os.lstat(target)
        _judge_existing(target, before)
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"capture: cannot write to {target}: {_reason(exc)}") from None
    tree = WriteTree(fd)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise UsageError(f"capture: {target} was replaced while it was opened")
        if os.listdir(fd):
            raise UsageError(f"capture: {target} exists and is not an empty directory")
        tree.write(PROBE, b"")
        os.unlink(PROBE, dir_fd=fd)
    except OSError as exc:
        tree.close()
        raise UsageError(f"capture: cannot write to {target}: {_reason(exc)}") from None
    except UsageError:
        tree.close()
        raise
    return tree


PROBE = ".gpuprobe-write-test"


def _judge_existing(target: Path, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"capture: {target} is a symbolic link: name the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"capture: {target} exists and is not an empty directory")
    if st.st_uid != os.geteuid():
        raise UsageError(
            f"capture: {target} belongs to another user (uid {st.st_uid}): "
            "name a new directory and capture creates it"
        )
    if st.st_mode & _SHARED_WRITE:
        raise UsageError(
            f"capture: {target} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            "name a new directory and capture creates it"
        )


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def write_snapshot(tree: WriteTree, host: Host, report: NodeReport) -> None:
    """Write the snapshot files of a recording host and its report."""
    assert isinstance(host.nvml, RecordingNvml)
    meta = {
        "format": SNAPSHOT_FORMAT,
        "node": host.node_name,
        "captured_at": format_time(now()),
        "gpuprobe_version": __version__,
    }
    _write_json(tree, "snapshot.json", meta)
    _write_json(tree, "nvml.json", host.nvml.record())
    _write_json(tree, "processes.json", to_json(host.processes().seen()))
    _write_json(tree, "report.json", report.to_dict())
    if isinstance(host.netlink, RecordingNetlink) and (links := host.netlink.recorded()):
        _write_json(tree, "netlink.json", links.to_json())
    if host.device_plugin_config is not None:
        tree.write(DEVICE_PLUGIN_FILE, agent_file_bytes(host.device_plugin_config))
    if isinstance(host.podresources, RecordingPodResources) and host.podresources.last:
        answer = host.podresources.last
        if not answer.absent:  # nothing for an absent socket, as the contract says
            _write_json(tree, PODRESOURCES_FILE, answer.to_json())
    if isinstance(host.pod_statuses, RecordingPodStatuses) and host.pod_statuses.last:
        listed = host.pod_statuses.last
        if not listed.absent:  # no API access: no file
            _write_json(tree, POD_STATUSES_FILE, listed.to_json())
    if isinstance(host.metadata, RecordingMetadata) and host.metadata.answers:
        _write_json(tree, LIFECYCLE_FILE, host.metadata.to_json())  # no token: redacted
    rootfs = tree.subtree("rootfs")
    try:
        copy_tree(host.fs, rootfs)
        kmsg = host.kmsg_reader
        if kmsg is not None and kmsg.read_once:  # what the ring gave, one record a line
            rootfs.write(KMSG.lstrip("/"), "".join(r + "\n" for r in kmsg.recorded()).encode())
    finally:
        rootfs.close()


def _write_json(tree: WriteTree, name: str, content: Any) -> None:
    tree.write(name, (json.dumps(content, indent=1) + "\n").encode("utf-8"))


def copy_tree(fs: HostFS, rootfs: WriteTree | Path) -> None:
    """Copy what the checks asked of the host's files into `rootfs`, at their host paths.

    A file that was read is copied (the last 16 MiB of a larger one); a path whose existence
    was asked about is kept as an empty placeholder (a directory as a directory); a listed
    directory keeps its entries' names as placeholders; a link read as a link stays a link.
    Sockets and device nodes become empty regular files, as the snapshot format says.
    Every write goes through `rootfs` as a WriteTree: links (planted, or copied from the host)
    are resolved inside it, never followed out of it.
    """
    if isinstance(rootfs, Path):
        rootfs.mkdir(exist_ok=True)
        tree = WriteTree(os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))
        try:
            copy_tree(fs, tree)
        finally:
            tree.close()
        return
    recorded = fs.recorded()
    host_tree = fs.tree  # every host path resolved inside the root, as the checks read them
    # The links first: a listed directory's entries become placeholders, and an entry that is
    # a link read as a link (/sys/bus/pci/devices/<address>, into the device tree) must stay
    # one rather than turn into the directory it points at.
    links: dict[str, str] = {}
    for path, uses in recorded.items():
        if LINK in uses and stat.S_ISLNK(host_tree.mode(path, follow=False) or 0):
            with contextlib.suppress(OSError, ValueError):
                links[path] = host_tree.readlink(path)
    for path, target in sorted(links.items()):
        rootfs.symlink(target, path.lstrip("/"))
    for path, uses in sorted(recorded.items()):
        dest = path.lstrip("/")
        if path not in links:
            _placeholder(rootfs, host_tree.mode(path), dest)
            if LIST in uses:
                for entry in _entries(host_tree, path):
                    entry_path = f"{path.rstrip('/')}/{entry}"
                    _placeholder(rootfs, host_tree.mode(entry_path), f"{dest}/{entry}")
    for path, uses in sorted(recorded.items()):
        if READ in uses:
            _copy_file(rootfs, host_tree, path)


def _placeholder(tree: WriteTree, mode: int | None, dest: str) -> None:
    if mode is None:
        return  # absent (or unreachable): absent in the snapshot too
    if tree.kind(dest) is not None:
        return
    if stat.S_ISDIR(mode):
        tree.makedirs(dest)
    else:
        tree.write(dest, b"")


def _entries(tree: RootTree, path: str) -> list[str]:
    try:
        return tree.listdir(path)
    except (OSError, ValueError):
        return []


def _tail(src: BinaryIO) -> bytes:
    """The last 16 MiB of a file; procfs files (/proc/<pid>/cgroup) cannot seek from their
    end (EINVAL) and are read from their start instead. At most 16 MiB either way: a device
    (a link to /dev/zero) has no end."""
    try:
        size = src.seek(0, os.SEEK_END)
    except OSError:
        return src.read(MAX_READ_BYTES)
    src.seek(max(0, size - MAX_READ_BYTES))
    return src.read(MAX_READ_BYTES)


def _copy_file(rootfs: WriteTree, tree: RootTree, path: str) -> None:
    """Copy the host file at `path`, read where the checks read it: inside the root (a link
    out of the host's tree is resolved in it, never to the agent's own file). Opened
    non-blocking: a FIFO on the host would hold capture for ever."""
    dest = path.lstrip("/")
    try:
        with os.fdopen(tree.open_read(path), "rb") as src:
            data = _tail(src)
    except (OSError, ValueError):
        return  # absent or unreadable (write-only sysfs files): no content to keep
    kind = rootfs.kind(dest)
    if kind is not None and stat.S_ISDIR(kind):
        return
    rootfs.write(dest, data)
