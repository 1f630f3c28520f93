"""The XID check's second source: the kernel log, from `/dev/kmsg` and the host's log files.

`NVRM: Xid (PCI:...): N, ...` lines of the current boot (see `gpuprobe.gpu.kernel_log`), each
tied to its GPU by PCI address; the log is read once a run (`gpuprobe.gpu.kernel_sources`:
`/dev/kmsg` followed, rotated files of one log read as one stream) and the same read gives
amdgpu's faults (`amdgpu`). One record seen in several sources (the ring, kern.log and syslog
all hold the driver's line) counts once: as often as the one source that holds it most.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuprobe.checks.xid.model import MAX_TIMES, XIDLESS, Gpu, Seen, later
from gpuprobe.checks.xid.recovery import reset_logged
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.kernel_sources import KernelLogRead
from gpuprobe.report import format_time


def sightings(
    log: KernelLogRead,
    gpus: dict[str, Gpu],
    pci_order: list[str],
    sources: dict[str, Any],
    sxids: list[tuple[kernel_log.SxidLine, int]] | None = None,
    resets: dict[str, str] | None = None,
) -> list[Seen]:
    """The current boot's XIDs in the kernel log, one line counted once across logs;
    the SXid lines (with how often each was logged) are added to `sxids`."""
    logs = log.nvidia_logs()
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
    sources["kernel_logs"] = list(log.opened)
    sources["kernel"] = list(log.sources)
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


def _gpu_at(pci: str, gpus: dict[str, Gpu], pci_order: list[str], uuids: dict[str, str]) -> Gpu:
    """The GPU at a PCI address: NVML's, else (a GPU NVML lost) its place on the PCI bus."""
    if pci in gpus:
        return gpus[pci]
    order = [kernel_log.pci_prefix(a) for a in pci_order]
    index = order.index(pci) if pci in order else None
    full = pci_order[index] if index is not None else f"{pci}.0"
    return Gpu(index, uuids.get(pci, ""), full)
