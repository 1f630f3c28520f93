"""The kernel log of this boot, read once a run: `/dev/kmsg` and the host's log files.

Every record is parsed once, by every registered parser (`gpu.kernel_events.entry_of`:
NVIDIA's XIDs, SXids and XID-less faults in `gpuprobe.gpu.kernel_log`, amdgpu's faults in
`gpuprobe.gpu.amd.faults`, PCIe AER's in `gpuprobe.gpu.aer`); the readers fold the kept events
(`nvidia_logs`, `amdgpu_faults`), so the xid check's run reads each source once whatever
vendors the node has (the pods check, which ties pod failures to XIDs, reads it in its own
run).

`/dev/kmsg` (this boot's ring, `gpuprobe.gpu.kmsg`) is followed by the host's kernel journal
(`gpu.journal.journal.KernelJournal`, in `host.memory`): a long-lived agent reads and parses
only the records that arrived since its last run and keeps the rest with their events. So are
the log files (`gpu.journal.files.LogFiles`, in `host.memory`): each file's last `max_bytes`,
then only what was written since, each line parsed once; the rotated files of one log
(`kern.log.1`, `kern.log`) are one stream, oldest first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NotRequired, TypedDict

from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.journal import files
from gpuprobe.gpu.journal.journal import KernelJournal
from gpuprobe.gpu.journal.journald import JournaldJournal
from gpuprobe.gpu.journal.record import Item
from gpuprobe.gpu.kmsg import KmsgLog, since_boot
from gpuprobe.host import Host
from gpuprobe.host.kmsg import KMSG
from gpuprobe.report import format_time

PROC_STAT = "/proc/stat"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# Where the followed /dev/kmsg lives in `host.memory` (shared by every check that reads it).
MEMORY = "kernel_log"
_JOURNAL_LOCK = threading.Lock()
# The systemd journal as a kernel-log source (its directories: `gpuprobe.host.journald`).
JOURNALD = "journald"


class KernelSource(TypedDict):
    """One kernel-log source as read: the device, journal or file, its kind (`kmsg` |
    `journald` | `file`), since when it holds this boot's records (its first record or line's
    time; null when unknown), for the journal the records kept, and for `/dev/kmsg` the first
    record's sequence number, the records kept and the records
    lost (overwritten in the ring before they were read, or lines too long to be records), or
    why it could not be read (`absent`, `EPERM`, ...); a file's `lost`, when any, counts the
    lines passed over as too long to be the kernel's."""

    source: str
    kind: str
    since: str | None
    first_sequence: NotRequired[int | None]
    records: NotRequired[int]
    lost: NotRequired[int]
    error: NotRequired[str]


@dataclass(frozen=True)
class LogStream:
    """One log's records of this read, each with its events, oldest first: `/dev/kmsg`'s
    (`kind` `kmsg`, this boot's by nature), the journal's (`kind` `journald`, this boot's by
    its `_BOOT_ID`), or a log file's rotated parts that could be read (`kind` `file`)."""

    kind: str
    entries: Sequence[Item]


@dataclass(frozen=True)
class KernelLogRead:
    """What one read of the kernel log gave: the boot time (from /proc/stat), the streams
    (`/dev/kmsg` first when it could be read, then each configured log), the sources that
    could be read, each source described, and the time of the read (undated syslog stamps
    take their year from it)."""

    boot: datetime | None
    now: datetime
    streams: tuple[LogStream, ...]
    opened: tuple[str, ...]
    sources: tuple[KernelSource, ...]

    def nvidia_logs(self) -> list[kernel_log.KernelLog]:
        """NVIDIA's lines of each stream (XIDs, SXids, GPUs' UUIDs), one `KernelLog` a stream."""
        return [
            kernel_log.fold(stream.entries, boot=self.boot, boots=stream.kind == "file")
            for stream in self.streams
        ]

    def amdgpu_faults(self) -> list[list[faults.AmdgpuFault]]:
        """amdgpu's faults of each stream (`/dev/kmsg`'s records too: on a journald-only host
        they are the only kernel log), each stream's in log order."""
        found: list[list[faults.AmdgpuFault]] = []
        for stream in self.streams:
            # the ring and the journal's boot are this boot's: a boot line in them begins nothing
            files = stream.kind == "file"
            found.append(faults.fold(stream.entries, boot=self.boot, boots=files))
        return found


def read_kernel_log(
    host: Host,
    *,
    kmsg: bool,
    paths: Iterable[str],
    max_bytes: int,
    now: datetime,
    journald: bool = False,
) -> KernelLogRead:
    """This boot's kernel log: `/dev/kmsg` when `kmsg`, the host's systemd journal when
    `journald`, and the log files at `paths` (each file's last `max_bytes`), a file's rotated
    parts read as one stream oldest first."""
    boot = boot_time(host)
    streams: list[LogStream] = []
    opened: list[str] = []
    described: list[KernelSource] = []
    if kmsg:
        read = kernel_journal(host).this_boot(boot, boot_id(host), known=True)
        view = read.ring
        entry: KernelSource = {"source": KMSG, "kind": "kmsg", "since": None}
        if view.error is not None:
            entry["error"] = view.error
        else:
            streams.append(LogStream("kmsg", read.entries))
            opened.append(KMSG)
            first = since_boot(boot, view.first_usec) if view.first_usec is not None else None
            if first is not None:
                entry["since"] = format_time(first)
            entry["first_sequence"] = view.first_sequence
            entry["records"] = view.records
            entry["lost"] = view.lost
        described.append(entry)
    if journald:
        described.append(_read_journald(host, streams, opened))
    for group in followed_files(host).read(host.fs, paths, max_bytes, now):
        entries: list[Item] = []
        for log in group:
            entries += log.items
            opened.append(log.path)
            since = format_time(log.since) if log.since is not None else None
            file_entry: KernelSource = {"source": log.path, "kind": "file", "since": since}
            if log.lost:
                file_entry["lost"] = log.lost  # lines too long to be the kernel's
            described.append(file_entry)
        streams.append(LogStream("file", entries))
    return KernelLogRead(boot, now, tuple(streams), tuple(opened), tuple(described))


def boot_time(host: Host) -> datetime | None:
    """When this boot began (/proc/stat's `btime`), None when unknown."""
    return kernel_log.boot_time(host.fs.try_read_text(PROC_STAT))


def boot_id(host: Host) -> str | None:
    """This boot's id (the kernel's random `boot_id`): a reboot changes it; None when
    unknown."""
    return (host.fs.try_read_text(BOOT_ID) or "").strip() or None


def _read_journald(host: Host, streams: list[LogStream], opened: list[str]) -> KernelSource:
    """The journal's kernel records of this boot, as a stream (when any directory could be
    read) and its source's description."""
    entry: KernelSource = {"source": JOURNALD, "kind": "journald", "since": None}
    this_boot = boot_id(host)
    if this_boot is None:
        entry["error"] = "boot id unknown"
        return entry
    entries, errors = followed_journald(host).this_boot(this_boot)
    if all(error is not None for error in errors.values()):
        entry["error"] = "; ".join(f"{where}: {error}" for where, error in errors.items())
        return entry
    streams.append(LogStream("journald", entries))
    opened.append(JOURNALD)
    first = entries[0].record.time if entries else None
    entry["since"] = format_time(first) if first is not None else None
    entry["records"] = len(entries)
    return entry


def followed_journald(host: Host) -> JournaldJournal:
    """This host's systemd journal, followed by cursor: kept in `host.memory`, so a
    long-lived agent reads and parses each record once."""
    memory = host.memory.of(MEMORY)
    with _JOURNAL_LOCK:
        journal = memory.get("journald")
        if not isinstance(journal, JournaldJournal):
            journal = JournaldJournal(host.fs)
            memory["journald"] = journal
    return journal


def followed_files(host: Host) -> files.LogFiles:
    """This host's kernel log files, each followed by its cursor: kept in `host.memory`, so a
    long-lived agent reads and parses each line once."""
    memory = host.memory.of(MEMORY)
    with _JOURNAL_LOCK:
        logs = memory.get("files")
        if not isinstance(logs, files.LogFiles):
            logs = files.LogFiles()
            memory["files"] = logs
    return logs


def kernel_journal(host: Host) -> KernelJournal:
    """This host's kernel journal over its followed `/dev/kmsg`: kept in `host.memory`, so a
    long-lived agent reads and parses each record once."""
    memory = host.memory.of(MEMORY)
    with _JOURNAL_LOCK:
        journal = memory.get("journal")
        if not isinstance(journal, KernelJournal):
            journal = KernelJournal(
                followed_kmsg(host), boot=boot_time(host), boot_id=boot_id(host)
            )
            memory["journal"] = journal
    return journal


def followed_kmsg(host: Host) -> KmsgLog:
    """This host's `/dev/kmsg`, followed: kept in `host.memory`, so a long-lived agent reads
    each record once."""
    memory = host.memory.of(MEMORY)
    log = memory.get("kmsg")
    if not isinstance(log, KmsgLog):
        log = memory.setdefault("kmsg", KmsgLog(host.kmsg()))
    assert isinstance(log, KmsgLog)
    return log
