"""The XID check's second source: the host's kernel log files.

`NVRM: Xid (PCI:...): N, ...` lines of the current boot (see `gpuprobe.gpu.kernel_log`), each
tied to its GPU by PCI address; rotated files of one log are read as one stream.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.model import MAX_TIMES, XIDLESS, Gpu, Seen, later
from gpuprobe.checks.xid.recovery import reset_logged
from gpuprobe.config import Config
from gpuprobe.gpu import kernel_log
from gpuprobe.host import Host
from gpuprobe.report import format_time

PROC_STAT = "/proc/stat"


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
    boot = kernel_log.boot_time(host.fs.try_read_text(PROC_STAT))
    streams: dict[str, list[str]] = {}
    for path in config.xid.kernel_logs:
        streams.setdefault(re.sub(r"\.\d+$", "", path), []).append(path)
    opened: list[str] = []
    # kern.log and syslog hold the same kernel lines: a line counts as often as the one log
    # that holds it most often (identical lines within one log are separate XIDs).
    lines: dict[str, tuple[kernel_log.XidLine, int]] = {}
    switch_lines: dict[str, tuple[kernel_log.SxidLine, int]] = {}
    uuids: dict[str, str] = {}
    for paths in streams.values():
        texts = []
        for path in paths:
            content = _tail(host, path, config.xid.kernel_log_max_bytes)
            if content is not None:
                texts.append(content)
                opened.append(path)
        found = kernel_log.read_stream(texts, boot=boot, now=now)
        counted = Counter(line.line for line in found.xids)
        for line in found.xids:
            if counted[line.line] > lines.get(line.line, (line, 0))[1]:
                lines[line.line] = (line, counted[line.line])
        counted_sxids = Counter(s.line for s in found.sxids)
        for sxid in found.sxids:
            if counted_sxids[sxid.line] > switch_lines.get(sxid.line, (sxid, 0))[1]:
                switch_lines[sxid.line] = (sxid, counted_sxids[sxid.line])
        uuids.update(found.uuids)
    sources["kernel_logs"] = opened
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


def _tail(host: Host, path: str, max_bytes: int) -> str | None:
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
