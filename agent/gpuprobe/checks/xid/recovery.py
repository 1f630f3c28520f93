"""Faults that clear themselves: a sticky fault ends when the recovery NVIDIA prescribes for it
is seen done, and only then (what cannot be seen stays until `gpuprobe clear-xid`).

- A reboot: the boot id changed; what the last boot logged is gone (`observation`).
- A GPU reset, seen three ways, each ending the GPU's sticky faults whose action a reset
  answers (RESET_GPU, DRAIN_NODE, RESTART_APP) and that were last seen before it:
  - the driver logs it: an Xid 154 "GPU recovery action changed from ... to 0x0 (None)" for
    the GPU, later than the fault (the driver's recovery action returns to None once the GPU
    was reset);
  - the GPU's recovery action field (NVML field 230) read NONE in this round after it asked
    for a reset (GPU_RESET, BUS_RESET, DRAIN_AND_RESET, DRAIN_P2P) in an earlier one;
  - a GPU that was lost (NVML could not read it) answers again with the same UUID: this one
    also ends a lost GPU's REBOOT_NODE faults (Xid 79: the GPU is back on the bus).
Each clearing is kept like an operator's (a mark with its count and time, and `by`: what was
observed), logged, and named in the entry's `recovered` in the check's data; a fault that
grows again after it is active again.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.model import Gpu, Seen
from gpuprobe.gpu import nvml_events
from gpuprobe.gpu.kernel_log import XidLine
from gpuprobe.host import Host
from gpuprobe.report import Action, format_time

LOG = logging.getLogger("gpuprobe.xid")
RECOVERY_NONE = re.compile(r"changed from .*? to \s*(?:0x0+\s*)?\(None\)", re.IGNORECASE)
_RESET_ASKED = frozenset({"GPU_RESET", "BUS_RESET", "DRAIN_AND_RESET", "DRAIN_P2P"})
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


def observe_gpus(host: Host, gpus: dict[str, Gpu], memory: dict[str, Any]) -> dict[str, str]:
    """Resets and returns seen in NVML this round, by GPU ident: why each GPU's faults ended
    (the recovery field back to NONE after asking for a reset; a lost GPU answering again).
    Remembers this round's readings for the next."""
    fields: dict[str, str] = memory.setdefault("recovery_field", {})
    lost: dict[str, bool] = memory.setdefault("lost", {})
    seen: dict[str, str] = {}
    for key, gpu in gpus.items():
        if not key.isdigit() or gpu.index is None or not gpu.uuid:
            continue
        answers = gpu.pci_bus_id is not None
        if not answers:
            lost[gpu.uuid] = True
            continue
        if lost.pop(gpu.uuid, False):
            seen[gpu.ident] = f"GPU {gpu.index} answers again with the same UUID {gpu.uuid}"
        field = nvml_events.detail(host.nvml, nvml_events.RECOVERY, gpu.index)
        before = fields.get(gpu.uuid)
        if field:
            fields[gpu.uuid] = field
        if field == "NONE" and before in _RESET_ASKED:
            seen.setdefault(
                gpu.ident,
                f"GPU {gpu.index}'s recovery action field reads NONE after asking for {before}",
            )
    return seen


def apply(
    xids: list[Seen],
    logged: dict[str, str],
    nvml_seen: dict[str, str],
    cleared: dict[str, dict[str, Any]],
    memory: dict[str, Any],
    now: datetime,
) -> None:
    """Mark the sticky faults a recovery ended: as cleared (a mark in `cleared` and in the
    check's memory, kept like an operator's) with `recovered` saying what was observed."""
    remembered = memory.setdefault("cleared", {})
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
            back = observed.endswith(x.gpu.uuid) and "answers again" in observed
            if info.action in (_BACK_ANSWERS if back else _RESET_ANSWERS):
                why = observed
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
