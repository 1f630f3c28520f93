"""Faults that clear themselves: a sticky fault ends when the recovery NVIDIA prescribes for it
is seen done, and only then (what cannot be seen stays until `gpuprobe clear-xid`).

- A reboot: the boot id changed; what the last boot logged is gone (`observation`).
- A GPU reset, seen three ways, each ending the GPU's sticky faults whose action a reset
  answers (RESET_GPU, DRAIN_NODE, RESTART_APP) and that were last seen before it:
  - the driver logs it: an Xid 154 "GPU recovery action changed from ... to 0x0 (None)" for
    the GPU, later than the fault (the driver's recovery action returns to None once the GPU
    was reset);
  - the GPU's recovery action field (NVML field 230) read NONE in this round after it asked
    for a reset (GPU_RESET, BUS_RESET, DRAIN_AND_RESET) in an earlier one; only faults last
    seen before the round that first saw the request end (one seen after it was asked may be
    a new fault); a DRAIN_P2P ending is no reset;
  - a GPU that was lost (NVML could not read it) answers again with the same UUID: this one
    also ends a lost GPU's REBOOT_NODE faults (Xid 79: the GPU is back on the bus).
Each clearing is kept like an operator's (a mark with its count and time, and `by`: what was
observed), logged, and named in the entry's `recovered` in the check's data; a fault that
grows again after it is active again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import Gpu, Seen
from gpuprobe.gpu.event_drain import recovery_action
from gpuprobe.gpu.kernel_log import XidLine
from gpuprobe.host import Host
from gpuprobe.report import Action, format_time

LOG = logging.getLogger("gpuprobe.xid")
RECOVERY_NONE = re.compile(r"changed from .*? to \s*(?:0x0+\s*)?\(None\)", re.IGNORECASE)
# A DRAIN_P2P request ending means the peer-to-peer work was drained, not that the GPU was reset.
_RESET_ASKED = frozenset({"GPU_RESET", "BUS_RESET", "DRAIN_AND_RESET"})
_RESET_ANSWERS = frozenset({Action.RESET_GPU, Action.DRAIN_NODE, Action.RESTART_APP})
_BACK_ANSWERS = _RESET_ANSWERS | {Action.REBOOT_NODE}


def reset_logged(lines: list[XidLine]) -> dict[str, str]:
    """The last time the driver logged each GPU's recovery action back to None (Xid 154), by
    PCI address (`0000:3a:00`)."""
    found: dict[str, str] = {}
    for line in lines:
        if line.xid == 154 and line.time is not None and RECOVERY_NONE.search(line.message):
            stamp = format_time(line.time)
            found[line.pci] = max(found.get(line.pci, stamp), stamp)
    return found


@dataclass(frozen=True)
class NvmlSeen:
    """A reset or return NVML showed this round: what was observed, and for a reset the
    round that first saw it asked (only faults last seen before then end)."""

    why: str
    asked_at: str | None = None
    back: bool = False


def observe_gpus(
    host: Host, gpus: dict[str, Gpu], memory: XidMemory, now: datetime
) -> dict[str, NvmlSeen]:
    """Resets and returns seen in NVML this round, by GPU ident: why each GPU's faults ended
    (the recovery field back to NONE after asking for a reset; a lost GPU answering again).
    Remembers this round's readings for the next."""
    fields, asked, lost = memory.recovery_field, memory.reset_asked_at, memory.lost
    seen: dict[str, NvmlSeen] = {}
    for key, gpu in gpus.items():
        if not key.isdigit() or gpu.index is None or not gpu.uuid:
            continue
        answers = gpu.pci_bus_id is not None
        if not answers:
            lost[gpu.uuid] = True
            continue
        if lost.pop(gpu.uuid, False):
            why = f"GPU {gpu.index} answers again with the same UUID {gpu.uuid}"
            seen[gpu.ident] = NvmlSeen(why, back=True)
        field = recovery_action(host, gpu.index)
        before = fields.get(gpu.uuid)
        if field:
            fields[gpu.uuid] = field
        since = asked.get(gpu.uuid)
        if field in _RESET_ASKED:
            asked.setdefault(gpu.uuid, format_time(now))
        elif field:
            asked.pop(gpu.uuid, None)
        if field == "NONE" and before in _RESET_ASKED and gpu.ident not in seen:
            why = f"GPU {gpu.index}'s recovery action field reads NONE after asking for {before}"
            seen[gpu.ident] = NvmlSeen(why, since)
    return seen


def apply(
    xids: list[Seen],
    logged: dict[str, str],
    nvml_seen: dict[str, NvmlSeen],
    cleared: dict[str, dict[str, Any]],
    memory: XidMemory,
    now: datetime,
) -> None:
    """Mark the sticky faults a recovery ended: as cleared (a mark in `cleared` and in the
    check's memory, kept like an operator's) with `recovered` saying what was observed."""
    remembered = memory.cleared
    stamp = format_time(now)
    for x in xids:
        info = x.info
        if not info.critical:
            continue
        why = None
        pci = _prefix(x.gpu.pci_bus_id)
        when = logged.get(pci) if pci else None
        if (
            when is not None
            and info.action in _RESET_ANSWERS
            and x.xid != 154
            and (x.last_seen is None or x.last_seen < when)
        ):
            why = f"the driver logged the GPU's recovery action back to None at {when} (Xid 154)"
        observed = nvml_seen.get(x.gpu.ident)
        if why is None and observed is not None:
            answers = _BACK_ANSWERS if observed.back else _RESET_ANSWERS
            asked = observed.asked_at
            before = asked is None or x.last_seen is None or x.last_seen < asked
            if info.action in answers and before:
                why = observed.why
        if why is None:
            continue
        mark = {"count": x.count, "last_seen": x.last_seen or stamp, "by": why}
        cleared[x.key] = mark
        remembered[x.key] = mark
        LOG.info("xid: %s on GPU %s cleared itself: %s", _what(x), x.gpu.index, why)


def recovered_by(mark: dict[str, Any] | None) -> str | None:
    """What a clearing mark says was observed (None for an operator's clearing)."""
    by = (mark or {}).get("by")
    return by if isinstance(by, str) else None


def _prefix(address: str | None) -> str | None:
    if not address:
        return None
    parts = address.lower().split(".")[0]
    return parts


def _what(x: Seen) -> str:
    return f"Xid {x.xid}" if x.is_xid else x.event
