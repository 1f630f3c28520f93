"""The XID check's first source: NVML's event set, drained without waiting.

XidCriticalError events and the other critical types of `gpuprobe.gpu.nvidia.events`, as
`gpuprobe.gpu.event_drain` drains them; in the daemon the set is registered from the first run
on, and a snapshot's `events` are handed to it once. What was drained is kept in the check's
memory, so an event is not lost between runs. The set holds only what happened after it was
registered: when it was first drained is kept (`XidMemory.events_since`), and is all it covers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import MAX_TIMES, Gpu, Seen, later, time_text
from gpuprobe.gpu.event_drain import XID_EVENT, EventDrain
from gpuprobe.report import format_time


def drain(
    drained: EventDrain,
    gpus: dict[str, Gpu],
    memory: XidMemory,
    sources: dict[str, Any],
    now: datetime,
) -> list[Seen]:
    """Fold a drain of the NVML event set into memory; returns every XID and critical event
    it showed this boot."""
    events = memory.events
    if drained.init_error is not None:
        sources["nvml_events"] = f"unavailable (NVML {drained.init_error})"
        return _remembered(events)
    sources["nvml_events"] = "read"
    if memory.events_since is None:  # the set holds events from its first drain on
        memory.events_since = format_time(now)
    for event in drained.events:
        gpu = gpus.get(str(event.device)) or Gpu(event.device, "", None)
        stamp = _event_time(event.time, now)
        if event.type == XID_EVENT:
            x = Seen(gpu, event.data, 1, stamp, "nvml-event")
            x.recovery_field = event.recovery_field  # an Xid 154's: what it asks for
        elif event.detail == "NONE":  # the recovery is done: the field asks for none
            continue
        else:
            x = Seen(gpu, 0, 1, stamp, "nvml-event", event.detail, event=event.type)
        old = events.get(x.key)
        x.times = [stamp]
        if old is not None:
            x.times = [*(old.get("times") or []), stamp][-MAX_TIMES:]
            x.count += int(old.get("count", 0))
            x.last_seen = later(old.get("last_seen"), x.last_seen)
            x.message = x.message or str(old.get("message") or "")
            x.recovery_field = x.recovery_field or old.get("recovery_field")
        events[x.key] = x.to_entry()
    if drained.error is not None:
        sources["nvml_events"] = f"error ({drained.error})"
    return _remembered(events)


def _remembered(events: dict[str, dict[str, Any]]) -> list[Seen]:
    return [x for x in (Seen.from_entry(e) for e in events.values()) if x is not None]


def _event_time(stamp: str | None, now: datetime) -> str:
    """An event's time as RFC 3339 (when NVML gave none: now)."""
    return time_text(stamp) or format_time(now)
