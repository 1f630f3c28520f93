"""`gpuprobe capture`: write this host's node snapshot.

Runs every check once against the live host with recording on, then writes what they saw:
the NVML calls and answers (nvml.json), the host files they read (rootfs/), the process list
(processes.json), the device plugin's configuration when one is given (device-plugin.json),
the kubelet's PodResources answers when the node has its socket (podresources.json),
and the live report itself (report.json, to compare a replay with).
Replaying the snapshot with `gpuprobe check --snapshot DIR` gives the same findings.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from gpuprobe import __version__
from gpuprobe.config import Config
from gpuprobe.errors import UsageError
from gpuprobe.host import SNAPSHOT_FORMAT, Host, recording_host
from gpuprobe.host.agentfiles import DEVICE_PLUGIN_FILE, read_agent_file, write_agent_file
from gpuprobe.host.fs import LINK, LIST, MAX_READ_BYTES, READ, HostFS
from gpuprobe.host.netlink import RecordingNetlink
from gpuprobe.host.nvml import RecordingNvml
from gpuprobe.host.podresources import PODRESOURCES_FILE, RecordingPodResources, write_podresources
from gpuprobe.host.processes import to_json
from gpuprobe.report import NodeReport, format_time, now


def capture(
    directory: str, config: Config, names: list[str], root: str = "/", node_name: str | None = None
) -> NodeReport:
    """Run the checks on the live host and write its snapshot to `directory`."""
    from gpuprobe.checks.runner import run_checks

    target = Path(directory)
    prepare_target(target)
    host = recording_host(root, node_name)
    if config.device_plugin.config_file is not None:  # read once, by the checks and for DIR
        host.device_plugin_config = read_agent_file(config.device_plugin.config_file)
    report = run_checks(host, config, names)
    try:
        write_snapshot(target, host, report)
    except OSError as exc:  # the disk filled or the directory went away while checks ran
        raise UsageError(f"capture: cannot write to {directory}: {_reason(exc)}") from None
    return report


def prepare_target(target: Path) -> None:
    """Create the snapshot directory and prove it writable, before any check runs.

    A path that cannot hold a snapshot (under a file, in /proc, read-only) is a usage error,
    found before the checks spend their time.
    """
    try:
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise UsageError(f"capture: {target} exists and is not an empty directory")
        target.mkdir(parents=True, exist_ok=True)
        probe = target / ".gpuprobe-write-test"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"capture: cannot write to {target}: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def write_snapshot(target: Path, host: Host, report: NodeReport) -> None:
    """Write the snapshot files of a recording host and its report."""
    assert isinstance(host.nvml, RecordingNvml)
    target.mkdir(parents=True, exist_ok=True)
    meta = {
        "format": SNAPSHOT_FORMAT,
        "node": host.node_name,
        "captured_at": format_time(now()),
        "gpuprobe_version": __version__,
    }
    _write_json(target / "snapshot.json", meta)
    _write_json(target / "nvml.json", host.nvml.record())
    _write_json(target / "processes.json", to_json(host.processes().seen()))
    _write_json(target / "report.json", report.to_dict())
    if isinstance(host.netlink, RecordingNetlink) and (links := host.netlink.recorded()):
        _write_json(target / "netlink.json", links.to_json())
    if host.device_plugin_config is not None:
        write_agent_file(target / DEVICE_PLUGIN_FILE, host.device_plugin_config)
    if isinstance(host.podresources, RecordingPodResources) and host.podresources.last:
        write_podresources(target / PODRESOURCES_FILE, host.podresources.last)
    copy_tree(host.fs, target / "rootfs")


def _write_json(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")


def copy_tree(fs: HostFS, rootfs: Path) -> None:
    """Copy what the checks asked of the host's files into `rootfs`, at their host paths.

    A file that was read is copied (the last 16 MiB of a larger one); a path whose existence
    was asked about is kept as an empty placeholder (a directory as a directory); a listed
    directory keeps its entries' names as placeholders; a link read as a link stays a link.
    Sockets and device nodes become empty regular files, as the snapshot format says.
    """
    rootfs.mkdir(exist_ok=True)
    recorded = fs.recorded()
    for path, uses in sorted(recorded.items()):
        real, dest = fs.root / path.lstrip("/"), rootfs / path.lstrip("/")
        if LINK in uses and os.path.islink(real):
            _copy_link(real, dest)
        else:
            _placeholder(real, dest)
            if LIST in uses:
                for entry in _entries(real):
                    _placeholder(real / entry, dest / entry)
    for path, uses in sorted(recorded.items()):
        if READ in uses:
            _copy_file(fs.root / path.lstrip("/"), rootfs / path.lstrip("/"))


def _copy_link(real: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(dest):
        os.symlink(os.readlink(real), dest)


def _placeholder(real: Path, dest: Path) -> None:
    try:
        mode = real.stat().st_mode
    except OSError:
        return  # absent (or unreachable): absent in the snapshot too
    if os.path.lexists(dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISDIR(mode):
        dest.mkdir()
    else:
        dest.touch()


def _entries(real: Path) -> list[str]:
    try:
        return sorted(os.listdir(real))
    except OSError:
        return []


def _tail(src: BinaryIO) -> bytes:
    """The last 16 MiB of a file; procfs files (/proc/<pid>/cgroup) cannot seek from their
    end (EINVAL) and are read from their start instead."""
    try:
        size = src.seek(0, os.SEEK_END)
    except OSError:
        return src.read(MAX_READ_BYTES)
    src.seek(max(0, size - MAX_READ_BYTES))
    return src.read()


def _copy_file(real: Path, dest: Path) -> None:
    try:
        with open(real, "rb") as src:
            data = _tail(src)
    except OSError:
        return  # absent or unreadable (write-only sysfs files): no content to keep
    if os.path.isdir(dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
