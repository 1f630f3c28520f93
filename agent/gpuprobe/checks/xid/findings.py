"""What the XID check says: one finding per active XID or event, and the check's summary."""

from __future__ import annotations

import re
from typing import Any

from gpuprobe.checks.nvidia.xid_events import EventInfo, event_finding
from gpuprobe.checks.xid.model import XIDLESS, Seen
from gpuprobe.gpu.xid_catalog import CATALOG_URL, XidInfo
from gpuprobe.report import Action, Finding, Severity, gpu_resource

# How an XID finding's message names its XID (see `finding`): "GPU 6 (...): Xid 119, ...".
_XID_NAMED = re.compile(r": Xid (\d+), ")
# Xid 63: a memory row recorded for remapping (or a page for retirement), pending a reset.
REMAP_RECORDED = 63
# Xid 154: the GPU's recovery action changed (to the one its message names).
RECOVERY_CHANGED = 154


def finding(x: Seen) -> Finding:
    """The finding of one active XID or critical NVML event."""
    info = x.info
    where = f"GPU {x.gpu.index}" if x.gpu.index is not None else "a GPU"
    if x.gpu.pci_bus_id:
        where += f" ({x.gpu.pci_bus_id})"
    times = f"{x.count} time{'s' if x.count != 1 else ''}"
    last = f", last at {x.last_seen}" if x.last_seen else ""
    sticky = (
        " (reported until a reboot or a reset is seen, or `gpuprobe clear-xid` clears it)"
        if info.critical
        else ""
    )
    resource = gpu_resource(x.gpu.index, x.gpu.uuid) if x.gpu.index is not None else "node"
    if isinstance(info, EventInfo):
        return event_finding(
            info,
            where=where,
            event=x.event,
            detail=x.message,
            index=x.gpu.index,
            seen=f"{times} this boot{last}",
            sticky=sticky,
            resource=resource,
        )
    said = f' ("{_short(x.message)}")' if x.message else ""
    how = " (logged without an Xid number)" if x.source == XIDLESS else ""
    rule = f" [{x.override.label}]" if x.override is not None else ""
    return Finding(
        "XID",
        info.severity,
        f"{where}: Xid {x.xid}{how}, {info.description}, seen {times} this boot{last}{said}: "
        f"{_advice(info, x.gpu.index, x.message)}{sticky}{rule}",
        info.action,
        resource,
    )


def xid_named(found: Finding) -> int | None:
    """The XID an XID finding is about (None for any other finding)."""
    if found.code != "XID":
        return None
    match = _XID_NAMED.search(found.message)
    return int(match.group(1)) if match else None


def log_code(found: Finding) -> str:
    """The code as the daemon's log names it (the record's `log_code`): an XID's with its
    number (`XID 119`), as one GPU may have raised several."""
    number = xid_named(found)
    return found.code if number is None else f"{found.code} {number}"


def _advice(info: XidInfo, index: int | None, message: str) -> str:
    gpu = f" -i {index}" if index is not None else ""
    if info.bucket == "UNKNOWN":
        return f"look it up in NVIDIA's Xid catalog ({CATALOG_URL})"
    if info.xid == REMAP_RECORDED:
        return _pending_until_reset(gpu, message)
    if info.xid == RECOVERY_CHANGED and info.action is Action.NONE:
        # A WARNING, not "informational": the GPU needed a recovery before (or NVIDIA's
        # driver would not log the change), and a later Xid 154 may ask for one again.
        return (
            "the driver now asks for no recovery on this GPU (one it asked for before is done "
            "or withdrawn): nothing to do unless another Xid 154 asks for a reset or a reboot"
        )
    return {
        Action.RESTART_APP: (
            "restart the application that hit it and reset the GPU when convenient"
            if info.severity is Severity.CRITICAL
            else "restart the application that hit it; the GPU itself stays usable"
        ),
        Action.RESET_GPU: (
            f"drain the GPU and reset it (nvidia-smi -r{gpu}) or reboot; inspect the GPU "
            "if it recurs"
        ),
        Action.REBOOT_NODE: "drain and reboot the node; inspect the GPU if it happens again",
        Action.DRAIN_NODE: "drain the node's peer-to-peer (NVLink) work, as the driver asks",
        Action.HARDWARE_INSPECTION: "have the GPU and its seating, power and cooling inspected; "
        "contact support if it repeats",
        Action.FIX_CONFIG: "fix the driver, firmware or GPU configuration the catalog names",
        # A WARNING with no repair: say why there is none, never "informational".
        Action.NONE: (
            "NVIDIA's catalog asks for no action on it (IGNORE): watch whether it repeats"
            if info.bucket == "IGNORE"
            else "no repair is due now: watch whether it repeats"
        ),
    }.get(info.action, "see NVIDIA's Xid catalog")


def _pending_until_reset(gpu: str, message: str) -> str:
    """Xid 63: a row was recorded for remapping (Ampere and newer) or a page for retirement
    (older GPUs, "Dynamic Page Retirement" in the driver's text); either takes effect only
    when the GPU is reset (NVIDIA, "Row Remapping": "requires a GPU reset to take effect")."""
    how = f"(nvidia-smi -r{gpu} once it is drained, or a reboot)"
    if "page retirement" in message.lower():
        return (
            "page retirement is pending: the retired page takes effect when the driver reloads "
            f"or the GPU resets {how}"
        )
    return f"row remapping is pending: the remap takes effect at the GPU's next reset {how}"


def _short(message: str, limit: int = 120) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def summary(xids: list[Seen], active: list[Seen]) -> str:
    """The check's one-line summary: the active XIDs and events, most severe first."""
    if not xids:
        return "no XID errors this boot"
    if not active:
        return f"no active XID ({len(xids)} seen this boot: cleared, or warnings past their window)"
    shown = [
        (f"Xid {x.xid}" if x.is_xid else x.event)
        + f" on GPU {x.gpu.index if x.gpu.index is not None else '?'}"
        + (f" (x{x.count})" if x.count > 1 else "")
        for x in sorted(
            active, key=lambda x: (not x.info.critical, x.gpu.index or 0, x.xid, x.event)
        )
    ]
    more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
    active_xids = sum(1 for x in active if x.is_xid)
    counted = [
        f"{n} active {what}{'s' if n != 1 else ''}"
        for n, what in ((active_xids, "XID"), (len(active) - active_xids, "NVML event"))
        if n
    ]
    return f"{' and '.join(counted)}: {', '.join(shown[:4])}{more}"


def read_nothing(sources: dict[str, Any]) -> str | None:
    """What the check could not read, in words, when it read no source at all (no kernel log
    file, no NVML events); None when any source was read. Having read nothing, "no XID
    errors" would be a false all-clear."""
    # `kernel` details each kernel-log source (read or not); `kernel_logs` lists those read,
    # /dev/kmsg among them.
    summary = {name: value for name, value in sources.items() if name != "kernel"}
    if any(_was_read(value) for value in summary.values()):
        return None
    unread = [_unread(name, value) for name, value in summary.items()]
    return "read no source of XIDs: " + " and ".join(unread or ["no source configured"])


def events_only(sources: dict[str, Any], since: str | None) -> str | None:
    """What the check read, in words, when it read NVML's events but no kernel log: the
    events cover only the time since the set was first drained (`since`), so "no XID errors
    this boot" would claim the rest of the boot unread. None when a kernel log was read (or
    the events were not: `read_nothing` speaks then)."""
    if _was_read(sources.get("kernel_logs")) or sources.get("nvml_events") != "read":
        return None
    unread = [
        f"{entry['source']} {entry['error']}"
        for entry in sources.get("kernel") or []
        if isinstance(entry, dict) and entry.get("error")
    ]
    why = "; ".join([*unread, "none of xid.kernel_logs"])
    return (
        f"no XID in NVML's events since {since or 'this run'}; no kernel log could be read "
        f"({why}): nothing is known of this boot before then"
    )


def _was_read(value: object) -> bool:
    """A source's entry says it was read: "read", or the list of files that were opened."""
    return value == "read" or (isinstance(value, list) and bool(value))


def _unread(name: str, value: object) -> str:
    if name == "kernel_logs":
        return "no kernel log file could be read (xid.kernel_logs)"
    if name == "nvml_events":
        return f"NVML events {value}"
    return f"{name.replace('_', ' ')} {value or 'not read'}"
