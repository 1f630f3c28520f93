"""The XID check's second source: the kernel log, from `/dev/kmsg` and the host's log files.

`NVRM: Xid (PCI:...): N, ...` lines of the current boot (see `gpuprobe.gpu.kernel_log`), each
tied to its GPU by PCI address; rotated files of one log are read as one stream. `/dev/kmsg`
(this boot's ring, `gpuprobe.gpu.kmsg`) is followed: a long-lived agent reads only the records
that arrived since its last run. One record seen in several sources (the ring, kern.log and
syslog all hold the driver's line) counts once: as often as the one source that holds it most.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.xid.model import MAX_TIMES, XIDLESS, Gpu, Seen, later
from gpuprobe.checks.xid.recovery import reset_logged
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.kmsg import KmsgLog
from gpuprobe.host import Host
from gpuprobe.host.kmsg import KMSG
from gpuprobe.report import format_time

PROC_STAT = "/proc/stat"
# Where the followed /dev/kmsg lives in `host.memory` (shared by every check that reads it).
MEMORY = "kernel_log"


class KernelSource(TypedDict):
    """One kernel-log source in the xid check's `data.sources.kernel`: the device or file, its
    kind (`kmsg` | `file`), since when it holds this boot's records (its first record or
    line's time; null when unknown), and for `/dev/kmsg` the first record's sequence number,
    the records kept and the records lost (overwritten in the ring before they were read), or
    why it could not be read (`absent`, `EPERM`, ...)."""

    source: str
    kind: str
    since: str | None
    first_sequence: NotRequired[int | None]
    records: NotRequired[int]
    lost: NotRequired[int]
    error: NotRequired[str]


def read(
    host: Host,
    config: Config,
    gpus: dict[str, Gpu],
    pci_order: list[str],
    sources: dict[str, Any],
    now: datetime,
    sxids: list[tuple[kernel_log.SxidLine, int]] | None = None,
    resets: dict[str, str] | None = None,
) -> list[Seen]:
    """The current boot's XIDs in the kernel log files, one line counted once across logs;
    the SXid lines (with how often each was logged) are added to `sxids`."""
    logs, opened, described = read_sources(host, config, now)
    # kmsg, kern.log and syslog hold the same kernel lines, each with its own stamp: a record
    # (its GPU, number and text) counts as often as the one source that holds it most often
    # (identical records within one source are separate XIDs).
    lines: dict[tuple[object, ...], tuple[kernel_log.XidLine, int]] = {}
    switch_lines: dict[tuple[object, ...], tuple[kernel_log.SxidLine, int]] = {}
    uuids: dict[str, str] = {}
    for found in logs:
        counted = Counter(_xid_key(line) for line in found.xids)
        for line in found.xids:
            key = _xid_key(line)
            if counted[key] > lines.get(key, (line, 0))[1]:
                lines[key] = (line, counted[key])
        counted_sxids = Counter(_sxid_key(s) for s in found.sxids)
        for sxid in found.sxids:
            key = _sxid_key(sxid)
            if counted_sxids[key] > switch_lines.get(key, (sxid, 0))[1]:
                switch_lines[key] = (sxid, counted_sxids[key])
        uuids.update(found.uuids)
    sources["kernel_logs"] = opened
    sources["kernel"] = described
    if sxids is not None:
        sxids.extend(switch_lines.values())
    if resets is not None:
        resets.update(reset_logged([line for line, _ in lines.values()]))
    seen: dict[str, Seen] = {}
    for line, times in lines.values():
        gpu = _gpu_at(line.pci, gpus, pci_order, uuids)
        stamp = format_time(line.time) if line.time else None
        source = "kernel-log" if line.logged_xid else XIDLESS
        x = Seen(gpu, line.xid, times, stamp, source, line.message)
        x.times = [stamp] * times if stamp else []
        old = seen.get(x.key)
        if old is not None:
            old.count += times
            old.times = sorted(old.times + x.times)[-MAX_TIMES:]
            if _outranks(x, old):
                old.message = x.message or old.message
            old.last_seen = later(old.last_seen, x.last_seen)
        else:
            seen[x.key] = x
    return list(seen.values())


def _xid_key(line: kernel_log.XidLine) -> tuple[object, ...]:
    """What one XID record is, whichever source holds it and however it is stamped."""
    return (line.pci, line.xid, line.message, line.logged_xid)


def _sxid_key(line: kernel_log.SxidLine) -> tuple[object, ...]:
    return (line.pci, line.sxid, line.fatal, line.message)


def read_logs(
    host: Host, config: Config, now: datetime
) -> tuple[list[kernel_log.KernelLog], list[str]]:
    """The current boot's lines of each kernel log: `/dev/kmsg` (`xid.kmsg`) and the
    configured files (`xid.kernel_logs`), a file's rotated parts read as one stream oldest
    first; and the sources that could be read. The one reader of the kernel log for every
    check that ties a fault to an XID."""
    logs, opened, _ = read_sources(host, config, now)
    return logs, opened


def read_sources(
    host: Host, config: Config, now: datetime
) -> tuple[list[kernel_log.KernelLog], list[str], list[KernelSource]]:
    """As `read_logs`, with each source described (`KernelSource`): which were read and
    since when."""
    boot = kernel_log.boot_time(host.fs.try_read_text(PROC_STAT))
    logs: list[kernel_log.KernelLog] = []
    opened: list[str] = []
    described: list[KernelSource] = []
    if xid_settings(config).kmsg:
        view = kmsg_log(host).read(boot)
        entry: KernelSource = {"source": KMSG, "kind": "kmsg", "since": None}
        if view.error is not None:
            entry["error"] = view.error
        else:
            logs.append(kernel_log.read_stream(["\n".join(view.lines)], boot=boot, now=now))
            opened.append(KMSG)
            if boot is not None and view.first_usec is not None:
                entry["since"] = format_time(boot + timedelta(microseconds=view.first_usec))
            entry["first_sequence"] = view.first_sequence
            entry["records"] = view.records
            entry["lost"] = view.lost
        described.append(entry)
    for paths in rotation_streams(xid_settings(config).kernel_logs):
        texts = []
        for path in paths:
            content = tail_log(host, path, xid_settings(config).kernel_log_max_bytes)
            if content is not None:
                texts.append(content)
                opened.append(path)
                since = _first_time(content, boot, now)
                described.append({"source": path, "kind": "file", "since": since})
        logs.append(kernel_log.read_stream(texts, boot=boot, now=now))
    return logs, opened, described


def kmsg_log(host: Host) -> KmsgLog:
    """This host's `/dev/kmsg`, followed: kept in `host.memory`, so a long-lived agent reads
    each record once."""
    memory = host.memory.of(MEMORY)
    log = memory.get("kmsg")
    if not isinstance(log, KmsgLog):
        log = memory.setdefault("kmsg", KmsgLog(host.kmsg()))
    assert isinstance(log, KmsgLog)
    return log


def _first_time(text: str, boot: datetime | None, now: datetime) -> str | None:
    """The stamp of a log text's first stamped line (of its first 100 lines)."""
    for line in text.splitlines()[:100]:
        stamp = kernel_log.line_time(line, boot=boot, now=now)
        if stamp is not None:
            return format_time(stamp)
    return None


def rotation_streams(paths: Iterable[str]) -> list[list[str]]:
    """The log files grouped by log (`kern.log` with its `kern.log.1`, ...), each group oldest
    first: by rotation number, the highest first and the live log last, whatever order they
    are listed in (a boot marker in an older file must not drop the current boot's lines)."""
    streams: dict[str, list[str]] = {}
    for path in paths:
        group = streams.setdefault(re.sub(r"\.\d+$", "", path), [])
        if path not in group:
            group.append(path)
    return [sorted(group, key=_rotation, reverse=True) for group in streams.values()]


def _rotation(path: str) -> int:
    """A rotated file's number (`kern.log.2`: 2); the live log's is 0."""
    match = re.search(r"\.(\d+)$", path)
    return int(match.group(1)) if match else 0


def _outranks(new: Seen, old: Seen) -> bool:
    """Whether a sighting's message should speak for its XID: a more severe one (an NVLink5
    XID's Fatal line over a Nonfatal one of the same number), else the later (log order breaks
    ties)."""
    new_rank, old_rank = _rank(new), _rank(old)
    if new_rank != old_rank:
        return new_rank > old_rank
    return later(old.last_seen, new.last_seen) == new.last_seen


def _rank(x: Seen) -> int:
    # Only an NVLink5 XID's lines differ in kind under one number (Fatal and Nonfatal units);
    # others (an Xid 154 moving back to None) speak by their latest line.
    return 1 if 144 <= x.xid <= 150 and x.info.critical else 0


def tail_log(host: Host, path: str, max_bytes: int) -> str | None:
    """A log file's last `max_bytes`, without the partial line it starts with when cut."""
    try:
        data = host.fs.read_tail(path, max_bytes)
    except OSError:
        return None
    if len(data) >= max_bytes:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data.decode("utf-8", errors="replace")


def _gpu_at(pci: str, gpus: dict[str, Gpu], pci_order: list[str], uuids: dict[str, str]) -> Gpu:
    """The GPU at a PCI address: NVML's, else (a GPU NVML lost) its place on the PCI bus."""
    if pci in gpus:
        return gpus[pci]
    order = [kernel_log.pci_prefix(a) for a in pci_order]
    index = order.index(pci) if pci in order else None
    full = pci_order[index] if index is not None else f"{pci}.0"
    return Gpu(index, uuids.get(pci, ""), full)
