"""The host: the only door through which checks see the node.

A `Host` bundles the host's files (`HostFS`), the GPU vendors' libraries (NVIDIA's NVML;
AMD's ROCm SMI, beside the amdgpu sysfs files read through `HostFS`), its processes, its
network links, the kubelet's PodResources API, the node's pods as the API server reports
them, the cloud's instance metadata service and the clock the checks read (`host.clock`,
which a test may replace). It is built live (`live_host`), from a node snapshot
(`snapshot_host`), or live with recording on (`recording_host`, for `gpuprobe capture`).
Checks receive a Host and never look past it.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuprobe.errors import SnapshotError, UsageError
from gpuprobe.host.agentfiles import DEVICE_PLUGIN_FILE, AgentFile, load_agent_file
from gpuprobe.host.clock import Clock, SystemClock
from gpuprobe.host.fs import HostFS
from gpuprobe.host.jsonfile import read_json
from gpuprobe.host.kmsg import KmsgReader
from gpuprobe.host.metadata import (
    LIFECYCLE_FILE,
    LiveMetadata,
    MetadataService,
    RecordingMetadata,
    ReplayedMetadata,
    load_lifecycle,
)
from gpuprobe.host.netlink import (
    LiveNetlink,
    Netlink,
    RecordedNetlink,
    RecordingNetlink,
    load_netlink,
)
from gpuprobe.host.nvml import LiveNvml, Nvml, RecordingNvml, ReplayNvml, load_record
from gpuprobe.host.podresources import (
    PODRESOURCES_FILE,
    LivePodResources,
    PodResources,
    RecordingPodResources,
    ReplayedPodResources,
    load_podresources,
)
from gpuprobe.host.podstatus import (
    POD_STATUSES_FILE,
    PodStatuses,
    RecordingPodStatuses,
    ReplayedPodStatuses,
    load_pod_statuses,
)
from gpuprobe.host.processes import ProcessTable, live_processes, load_processes
from gpuprobe.host.rocm_smi import LiveRocmSmi, ReplayedRocmSmi, RocmSmi
from gpuprobe.report import parse_time

SNAPSHOT_FORMAT = 1
# A directory holding none of these is not a node snapshot (a folder of snapshots, /tmp): a
# replay of it would report a GPU-less node named after the folder.
SNAPSHOT_MARKERS = ("snapshot.json", "nvml.json", "rootfs/")


class Memory:
    """What a long-lived agent's readers carry from one read to the next, by name: the
    followed `/dev/kmsg` (`gpu.kernel_sources`), gpuprobe's own load on the GPUs
    (`gpu.own_load`). A check's own state is not kept here but by the check runner
    (`gpuprobe.checks.state`, declared in the check's record).
    """

    def __init__(self) -> None:
        self._by_check: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def of(self, check: str) -> dict[str, Any]:
        """The named check's memory (created empty on first use)."""
        with self._lock:
            return self._by_check.setdefault(check, {})


@dataclass
class Host:
    """One node as the checks see it."""

    fs: HostFS
    nvml: Nvml
    node_name: str
    list_processes: Callable[[], ProcessTable] = field(default=ProcessTable)
    snapshot_dir: Path | None = None
    # When the snapshot was captured (its snapshot.json), None for the live node or unknown.
    captured_at: datetime | None = None
    memory: Memory = field(default_factory=Memory)
    netlink: Netlink = field(default_factory=lambda: RecordedNetlink([]))
    # The device plugin's configuration as a snapshot (or capture) holds it; None: read the
    # file `device_plugin.config_file` names, if any.
    device_plugin_config: AgentFile | None = None
    # The kubelet's PodResources API (a node without a kubelet answers "absent").
    podresources: PodResources = field(default_factory=ReplayedPodResources)
    # The node's pods from the Kubernetes API server ("absent" without API access).
    pod_statuses: PodStatuses = field(default_factory=ReplayedPodStatuses)
    # What checks read the time from (wall and monotonic); tests step a fake one through time.
    clock: Clock = field(default_factory=SystemClock)
    # The cloud's instance metadata service (none recorded: every request "not recorded").
    metadata: MetadataService = field(default_factory=ReplayedMetadata)
    # AMD's SMI library (a snapshot does not replay it: "not asked").
    rocm_smi: RocmSmi = field(default_factory=ReplayedRocmSmi)
    # The reader of /dev/kmsg (the device, or a snapshot's file), made on first use.
    kmsg_reader: KmsgReader | None = None
    _kmsg_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def kmsg(self) -> KmsgReader:
        """This host's `/dev/kmsg` reader, one per host so it follows the ring without
        re-reading (and, when recording for capture, keeps what the device gave)."""
        with self._kmsg_lock:
            if self.kmsg_reader is None:
                self.kmsg_reader = KmsgReader(self.fs, record=self.fs.recording)
            return self.kmsg_reader

    @property
    def is_snapshot(self) -> bool:
        """Whether this host is a replayed snapshot rather than the live node."""
        return self.snapshot_dir is not None

    def processes(self) -> ProcessTable:
        """The node's processes now."""
        return self.list_processes()


def default_node_name() -> str:
    """`$NODE_NAME` (set from the downward API in the DaemonSet), else the host name."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def live_host(
    root: str = "/", node_name: str | None = None, pod_statuses: PodStatuses | None = None
) -> Host:
    """The live node, its files read under `root` (`/host` in the DaemonSet); its pods from
    `pod_statuses` (the API server, `gpuprobe.kube.pods`), absent without one."""
    fs = HostFS(root)
    return Host(
        fs=fs,
        nvml=LiveNvml(root),
        node_name=node_name or default_node_name(),
        list_processes=live_processes,
        netlink=LiveNetlink(),
        podresources=LivePodResources(fs),
        pod_statuses=pod_statuses or ReplayedPodStatuses(),
        metadata=LiveMetadata(),
        rocm_smi=LiveRocmSmi(fs),
    )


def recording_host(
    root: str = "/", node_name: str | None = None, pod_statuses: PodStatuses | None = None
) -> Host:
    """The live node with every file access and NVML call written down (for capture)."""
    host = live_host(root, node_name, pod_statuses)
    host.fs.record()
    host.nvml = RecordingNvml(host.nvml)
    host.netlink = RecordingNetlink(host.netlink)
    host.podresources = RecordingPodResources(host.podresources)
    host.pod_statuses = RecordingPodStatuses(host.pod_statuses)
    host.metadata = RecordingMetadata(host.metadata)
    table = live_processes()
    table.recording = True
    host.list_processes = lambda: table
    return host


def snapshot_host(directory: str, node_name: str | None = None) -> Host:
    """A node replayed from a snapshot directory; raises SnapshotError if it is unreadable.

    Any file of the snapshot may be absent, which means that thing is absent on the node:
    no nvml.json is a node where NVML cannot be loaded. A directory with none of
    `SNAPSHOT_MARKERS` is not a snapshot at all.
    """
    path = Path(directory)
    if not path.is_dir():
        raise SnapshotError(f"snapshot {directory}: not a directory")
    unreadable = unreadable_directory(directory)
    if unreadable is not None:
        raise SnapshotError(f"snapshot {directory}: {unreadable}")
    if not any(os.path.lexists(path / marker) for marker in SNAPSHOT_MARKERS):
        raise SnapshotError(
            f"snapshot {directory}: not a node snapshot: it holds none of "
            f"{', '.join(SNAPSHOT_MARKERS)} (what gpuprobe capture writes)"
        )
    meta = read_snapshot_meta(path)
    nvml_path = path / "nvml.json"
    record = (
        load_record(str(nvml_path))
        if nvml_path.exists()
        else {"format": 1, "init_error": "LibraryNotFound", "calls": []}
    )
    processes = load_processes(str(path / "processes.json"))
    netlink = load_netlink(str(path / "netlink.json"))
    return Host(
        fs=HostFS(path / "rootfs", snapshot=True),
        nvml=ReplayNvml(record),
        node_name=node_name or str(meta.get("node") or path.resolve().name),
        list_processes=lambda: processes,
        snapshot_dir=path,
        captured_at=_captured_at(meta, path),
        netlink=netlink,
        device_plugin_config=load_agent_file(path / DEVICE_PLUGIN_FILE),
        podresources=ReplayedPodResources(load_podresources(path / PODRESOURCES_FILE)),
        pod_statuses=ReplayedPodStatuses(load_pod_statuses(path / POD_STATUSES_FILE)),
        metadata=load_lifecycle(path / LIFECYCLE_FILE),
    )


def check_root(root: str) -> None:
    """Refuse a `--root` this process cannot read (UsageError): read through, it would look
    like a node without GPUs or kernel log, a false all-clear."""
    if not os.path.isdir(root):
        raise UsageError(f"--root {root}: not a directory")
    unreadable = unreadable_directory(root)
    if unreadable is not None:
        raise UsageError(f"--root {root}: {unreadable}")


def unreadable_directory(directory: str) -> str | None:
    """Why this process cannot read the directory (a snapshot, `--root`), in words; None
    when it can. Listing needs the directory's read bit and looking inside its search bit: a
    directory of mode 0700 that another user owns gives neither, and a tree read through it
    would look empty (no GPU, no kernel log), which is no finding about the node."""
    try:
        os.listdir(directory)
        os.stat(os.path.join(directory, "."))  # the search bit
    except OSError as exc:
        who = (
            f" (gpuprobe runs as uid {os.geteuid()})"
            if exc.errno in (errno.EACCES, errno.EPERM)
            else ""
        )
        return f"cannot read it: {exc.strerror or exc}{who}"
    return None


def _captured_at(meta: dict[str, Any], path: Path) -> datetime | None:
    """snapshot.json's `captured_at` (None when absent); raises SnapshotError on a bad one."""
    text = meta.get("captured_at")
    if text is None:
        return None
    try:
        if not isinstance(text, str):
            raise ValueError(text)
        captured = parse_time(text)
        if captured.tzinfo is None:  # RFC 3339 always names its offset
            raise ValueError(text)
        return captured
    except ValueError:
        raise SnapshotError(
            f"{path / 'snapshot.json'}: captured_at {text!r} is not an RFC 3339 time"
        ) from None


def read_snapshot_meta(path: Path) -> dict[str, Any]:
    """snapshot.json's content ({} when absent); raises SnapshotError on a bad one."""
    meta_path = path / "snapshot.json"
    try:
        meta = read_json(meta_path)
    except FileNotFoundError:
        return {}
    if not isinstance(meta, dict):
        raise SnapshotError(f"{meta_path}: not a JSON object")
    if meta.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotError(f"{meta_path}: unsupported format {meta.get('format')!r} (expected 1)")
    if not isinstance(meta.get("node", ""), str):
        raise SnapshotError(f"{meta_path}: node must be a string")
    return meta
