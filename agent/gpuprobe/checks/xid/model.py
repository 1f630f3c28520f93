"""The XID check's record model: a GPU as XIDs name it, one XID (or critical NVML event) seen
on it this boot, and one look at the node."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

from gpuprobe.checks.nvidia import xid_events
from gpuprobe.checks.nvidia.xid_events import EventInfo
from gpuprobe.checks.xid.policy import Override, apply
from gpuprobe.checks.xid.state import XidState
from gpuprobe.gpu import nvlink5
from gpuprobe.gpu.event_drain import XID_EVENT
from gpuprobe.gpu.kernel_log import SxidLine
from gpuprobe.gpu.kernel_sources import KernelLogRead
from gpuprobe.gpu.xid_catalog import XidInfo, classify, classify_unlogged
from gpuprobe.report import format_time

# The check's name.
NAME = "xid"
# The source of a fault the driver logged without an XID number (read as the XID NVIDIA files
# it under: a GPU fallen off the bus as 79, RmInitAdapter failed as 143).
XIDLESS = "kernel-log (no Xid number)"
# How many sighting times an entry keeps (for `xid.policy` count windows).
MAX_TIMES = 256


class XidPolicy(TypedDict, total=False):
    """What `xid.policy` and self-clearing did to an XID (only what applies)."""

    policy: str
    ignored: bool
    below_threshold: bool
    recovered: str


class XidNvlink5(TypedDict, total=False):
    """The NVLink5 decode of an Xid 144-150's message, when it carries one."""

    nvlink5: dict[str, Any]


class XidEntry(XidPolicy, XidNvlink5):
    """One XID in the check's `data.xids` (docs/checks.md, check `xid`)."""

    gpu: int | None
    uuid: str
    xid: int
    count: int
    last_seen: str | None
    severity: str
    action: str
    description: str
    source: str
    pci_bus_id: str | None
    message: str
    active: bool
    cleared: bool


class EventEntry(TypedDict):
    """One critical NVML event other than an XID in the check's `data.events`."""

    gpu: int | None
    uuid: str
    pci_bus_id: str | None
    type: str
    code: str
    count: int
    last_seen: str | None
    severity: str
    action: str
    description: str
    recovery_action: str | None
    active: bool
    cleared: bool


@dataclass(frozen=True)
class Gpu:
    """A GPU as XIDs name it: NVML index, UUID and PCI address, whichever are known."""

    index: int | None
    uuid: str
    pci_bus_id: str | None

    @property
    def ident(self) -> str:
        """What keys this GPU's XIDs across runs and boots: its UUID, else its address."""
        return self.uuid or self.pci_bus_id or f"index:{self.index}"


@dataclass
class Seen:
    """One XID (or other critical NVML event: `event`, with `xid` 0) on one GPU this boot: how
    often, when last, from which source, and its verdict. A GpuRecoveryAction event's
    `message` is the recovery action the GPU's field named when the event was drained."""

    gpu: Gpu
    xid: int
    count: int
    last_seen: str | None
    source: str
    message: str = ""
    active: bool = True
    cleared: bool = False
    event: str = XID_EVENT
    # When each sighting was (RFC 3339, oldest first, the last MAX_TIMES; a count window of
    # `xid.policy` counts them).
    times: list[str] = field(default_factory=list)
    # The `xid.policy` rule deciding for this XID, and what it did: ignored, or held back
    # below its count.
    override: Override | None = None
    ignored: bool = False
    held: bool = False
    # How it cleared itself, when it did (docs/checks.md, "Faults that clear themselves").
    recovered: str | None = None
    # An Xid 154 drained as an NVML event: the GPU's recovery action field then (None: unread).
    recovery_field: str | None = None

    @property
    def is_xid(self) -> bool:
        """Whether this is an XID (not another NVML event)."""
        return self.event == XID_EVENT

    @property
    def key(self) -> str:
        """The key in memory and in the state file: `<gpu ident>|<xid>` for an XID,
        `<gpu ident>|<event type>` for another event."""
        return f"{self.gpu.ident}|{self.xid if self.is_xid else self.event}"

    @property
    def info(self) -> XidInfo | EventInfo:
        """The catalog's verdict on this XID, or the verdict on the event type."""
        if self.is_xid:
            # No kernel-log text (the XID came only as an NVML event): nothing to decode.
            found = (
                classify(self.xid, self.message)
                if self.message
                else classify_unlogged(self.xid, self.recovery_field)
            )
            return apply(found, self.override)
        verdict = xid_events.verdict(self.event, self.message)
        if verdict is None:  # an entry that no run of this version wrote
            raise ValueError(f"no verdict on NVML event type {self.event}")
        return verdict

    def to_entry(self) -> dict[str, Any]:
        """The XID as kept in memory and in the state file."""
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "pci_bus_id": self.gpu.pci_bus_id,
            "xid": self.xid,
            "count": self.count,
            "last_seen": self.last_seen,
            "source": self.source,
            "message": self.message,
            "event": self.event,
            "times": self.times[-MAX_TIMES:],
            **({"recovery_field": self.recovery_field} if self.recovery_field else {}),
        }

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Seen | None:
        """Read an XID back from memory or the state file (None for a malformed entry)."""
        try:
            index = entry.get("gpu")
            pci = entry.get("pci_bus_id")
            gpu = Gpu(
                None if index is None else int(index),
                str(entry.get("uuid") or ""),
                None if pci is None else str(pci),
            )
            event = str(entry.get("event") or XID_EVENT)
            if event != XID_EVENT and not xid_events.known(event):
                return None
            return cls(
                gpu,
                int(entry["xid"]),
                int(entry["count"]),
                time_text(entry.get("last_seen")),
                str(entry.get("source") or "kernel-log"),
                str(entry.get("message") or ""),
                event=event,
                times=[t for t in (time_text(v) for v in entry.get("times") or []) if t],
                recovery_field=str(entry["recovery_field"])
                if entry.get("recovery_field")
                else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def to_data(self) -> XidEntry:
        """The XID as an entry of the check's `data.xids`."""
        info = self.info
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "xid": self.xid,
            "count": self.count,
            "last_seen": self.last_seen,
            "severity": info.severity.value,
            "action": info.action.value,
            "description": info.description,
            "source": self.source,
            "pci_bus_id": self.gpu.pci_bus_id,
            "message": self.message,
            "active": self.active,
            "cleared": self.cleared,
            **self._policy_data(),
            **self._nvlink5_data(),
        }

    def _policy_data(self) -> XidPolicy:
        """What `xid.policy` and self-clearing did to this entry (only what applies)."""
        data: XidPolicy = {}
        if self.override is not None:
            data["policy"] = self.override.label
        if self.ignored:
            data["ignored"] = True
        if self.held:
            data["below_threshold"] = True
        if self.recovered:
            data["recovered"] = self.recovered
        return data

    def _nvlink5_data(self) -> XidNvlink5:
        """The NVLink5 decode of an Xid 144-150's message, when it carries one."""
        decoded = nvlink5.decode(self.xid, self.message) if self.is_xid else None
        return {"nvlink5": decoded.to_data()} if decoded is not None else {}

    def to_event_data(self) -> EventEntry:
        """A non-XID event as an entry of the check's `data.events`."""
        info = self.info
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "pci_bus_id": self.gpu.pci_bus_id,
            "type": self.event,
            "code": self.code,
            "count": self.count,
            "last_seen": self.last_seen,
            "severity": info.severity.value,
            "action": info.action.value,
            "description": info.description,
            "recovery_action": (self.message or None)
            if self.event == xid_events.RECOVERY
            else None,
            "active": self.active,
            "cleared": self.cleared,
        }

    @property
    def code(self) -> str:
        """The finding code: XID, or the event type's."""
        info = self.info
        return info.code if isinstance(info, EventInfo) else "XID"


@dataclass
class Observation:
    """Everything one look at the node found: the boot, the XIDs, where they came from."""

    boot_id: str | None
    xids: list[Seen]
    # The kernel log as this look read it (amdgpu's faults are read from it too).
    kernel_log: KernelLogRead
    sources: dict[str, Any] = field(default_factory=dict)
    state: XidState | None = None
    state_error: str | None = None
    # The SXid lines of the kernel log this boot (judged by `sxid`), one line once across logs.
    sxids: list[tuple[SxidLine, int]] = field(default_factory=list)
    # The loaded driver's version, as the policy's driver ranges read it.
    driver: str | None = None
    # The GPUs by NVML index and PCI address, the clearings in force, and when it looked.
    gpus: dict[str, Gpu] = field(default_factory=dict)
    cleared: dict[str, dict[str, Any]] = field(default_factory=dict)
    now: datetime | None = None
    # When the driver last logged each GPU's recovery action back to None (by PCI address).
    resets_logged: dict[str, str] = field(default_factory=dict)


def later(a: str | None, b: str | None) -> str | None:
    """The later of two RFC 3339 times as format_time writes them (None is unknown)."""
    if a is None or b is None:
        return a or b
    return max(a, b)


def time_text(value: Any) -> str | None:
    """An RFC 3339 time as format_time writes it, from a state or memory entry (else None)."""
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return format_time(stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC))
