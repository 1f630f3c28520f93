"""NVML's event set drained without waiting: the XIDs and the other critical events
(`gpuprobe.gpu.nvidia.events`), with what each event asks read when it is drained.

An event names only its GPU and type, so what it asks is read from the GPU right away: a
GpuRecoveryAction event's recovery action field, and for an Xid 154 (which carries no text
when it comes only as an event) the same field. In the daemon the set is registered from the
first drain on; a snapshot's recorded events are handed over once.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.gpu.nvidia import events
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError

XID_EVENT = "XidCriticalError"
# The XID whose event asks for a recovery action (read from the GPU's field).
RECOVERY_XID = 154
# Bounds the drain of the event set: a GPU in an XID storm must not hold a check forever.
MAX_EVENT_DRAINS = 10_000


@dataclass(frozen=True)
class DrainedEvent:
    """One event drained: its GPU (NVML index), type, data (the XID for XidCriticalError),
    NVML's time stamp, and what the GPU's recovery action field said when it was drained (a
    GpuRecoveryAction event's `detail`, `""` when unread; an Xid 154's `recovery_field`)."""

    device: int
    type: str
    data: int
    time: str | None
    detail: str = ""
    recovery_field: str | None = None


@dataclass(frozen=True)
class EventDrain:
    """What one drain gave: the XID and critical events in arrival order; why NVML could not
    be asked (`init_error`, its init error) or why the drain stopped (`error`, an NVML error
    name; the events before it are kept)."""

    events: tuple[DrainedEvent, ...]
    init_error: str | None = None
    error: str | None = None


def drain_events(host: Host) -> EventDrain:
    """Drain the event set of every event that arrived (other types than the XID and critical
    ones, single-bit ECC among them, are passed over)."""
    if host.nvml.init_error is not None:
        return EventDrain((), init_error=host.nvml.init_error)
    drained: list[DrainedEvent] = []
    try:
        for _ in range(MAX_EVENT_DRAINS):
            batch = host.nvml.wait_events(0)
            if not batch:
                break
            for event in batch:
                if event.type == XID_EVENT:
                    field = None
                    if event.data == RECOVERY_XID:
                        field = events.recovery_field(host.nvml, event.device)
                    drained.append(
                        DrainedEvent(event.device, event.type, event.data, event.time, "", field)
                    )
                elif event.type in events.EVENTS:
                    said = events.detail(host.nvml, event.type, event.device)
                    drained.append(
                        DrainedEvent(event.device, event.type, event.data, event.time, said)
                    )
    except NvmlError as exc:
        return EventDrain(tuple(drained), error=exc.name)
    return EventDrain(tuple(drained))


def recovery_action(host: Host, index: int) -> str:
    """GPU `index`'s recovery action field now (`NONE`, `GPU_RESET`, ...; `""` when it cannot
    be read)."""
    return events.detail(host.nvml, events.RECOVERY, index)
