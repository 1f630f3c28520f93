"""The XID check's first source: NVML's event set, drained without waiting.

XidCriticalError events and the other critical types of `gpuprobe.gpu.nvidia.events`; in the
daemon the set is registered from the first run on, and a snapshot's `events` are handed to
it once. What was drained is kept in the check's memory, so an event is not lost between runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.model import MAX_TIMES, XID_EVENT, Gpu, Seen, later, time_text
from gpuprobe.gpu.nvidia import events as nvml_events
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError
from gpuprobe.report import format_time

# Bounds the drain of the event set: a GPU in an XID storm must not hold the check forever.
MAX_EVENT_DRAINS = 10_000


def drain(
    host: Host, gpus: dict[str, Gpu], memory: dict[str, Any], sources: dict[str, Any], now: datetime
) -> list[Seen]:
    """Drain the NVML event set into memory; returns every XID and critical event it showed
    this boot (other event types, single-bit ECC among them, are passed over)."""
    events: dict[str, dict[str, Any]] = memory.setdefault("events", {})
    if host.nvml.init_error is not None:
        sources["nvml_events"] = f"unavailable (NVML {host.nvml.init_error})"
    else:
        sources["nvml_events"] = "read"
        try:
            for _ in range(MAX_EVENT_DRAINS):
                batch = host.nvml.wait_events(0)
                if not batch:
                    break
                for event in batch:
                    xid = event.type == XID_EVENT
                    if not xid and event.type not in nvml_events.EVENTS:
                        continue
                    gpu = gpus.get(str(event.device)) or Gpu(event.device, "", None)
                    stamp = _event_time(event.time, now)
                    if xid:
                        x = Seen(gpu, event.data, 1, stamp, "nvml-event")
                        if event.data == 154:  # no text: the field says what it asks for
                            x.recovery_field = nvml_events.recovery_field(host.nvml, event.device)
                    else:
                        said = nvml_events.detail(host.nvml, event.type, event.device)
                        if said == "NONE":  # the recovery is done: the field asks for none
                            continue
                        x = Seen(gpu, 0, 1, stamp, "nvml-event", said, event=event.type)
                    old = events.get(x.key)
                    x.times = [stamp]
                    if old is not None:
                        x.times = [*(old.get("times") or []), stamp][-MAX_TIMES:]
                        x.count += int(old.get("count", 0))
                        x.last_seen = later(old.get("last_seen"), x.last_seen)
                        x.message = x.message or str(old.get("message") or "")
                        x.recovery_field = x.recovery_field or old.get("recovery_field")
                    events[x.key] = x.to_entry()
        except NvmlError as exc:
            sources["nvml_events"] = f"error ({exc.name})"
    return [x for x in (Seen.from_entry(e) for e in events.values()) if x is not None]


def _event_time(stamp: str | None, now: datetime) -> str:
    """An event's time as RFC 3339 (when NVML gave none: now)."""
    return time_text(stamp) or format_time(now)
