"""What the XID check keeps between runs (its state, kept by the runner: `persist.KEEPS`), all
of one boot: a reboot voids it (`observation`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class XidMemory:
    """The XID check's memory of this boot, each part kept by the module that judges by it."""

    # The boot it holds (None until a run read one; `booted`: a run has looked).
    boot_id: str | None = None
    booted: bool = False
    # The NVML event set's XIDs and critical events (`events`), by key, and when the set was
    # first drained: what it covers begins then.
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    events_since: str | None = None
    # Sticky (critical) faults and operators' or recoveries' clearings, by key (`sticky`,
    # `clearing`, `recovery`); the state file keeps them across restarts.
    sticky: dict[str, dict[str, Any]] = field(default_factory=dict)
    cleared: dict[str, dict[str, Any]] = field(default_factory=dict)
    # When each XID's and SXid's count last grew (`sticky`, `sxid`): the warning window.
    grew: dict[str, list[Any]] = field(default_factory=dict)
    sxid_grew: dict[str, list[Any]] = field(default_factory=dict)
    # Each GPU's recovery action field, when it asked for a reset, and whether NVML lost it
    # (`recovery`), by UUID.
    recovery_field: dict[str, str] = field(default_factory=dict)
    reset_asked_at: dict[str, str] = field(default_factory=dict)
    lost: dict[str, bool] = field(default_factory=dict)
    # PCIe AER correctable counts over the daemon's rounds (`aer`), by device.
    aer: dict[str, list[list[float]]] = field(default_factory=dict)
    # amdgpu's faults: their count and when it last grew (`amdgpu`), by fault key.
    amdgpu_faults: dict[str, tuple[int, float]] = field(default_factory=dict)
