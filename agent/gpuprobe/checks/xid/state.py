"""The XID check's state file: sticky critical XIDs and what an operator cleared, per boot.

Critical XIDs stay reported until the node reboots (its boot id changes) or an operator clears
them (`gpuprobe clear-xid`, or the agent's RPC). The state lives in `<xid.state_dir>/
xid-state.json` (`/var/lib/gpuprobe` by default; a hostPath in the DaemonSet), so a clearing
outlives the command that made it and a restarted agent still knows the XIDs it saw:

    {"format": 1, "boot_id": "c71b1604-...",
     "cleared": {"GPU-5f1c...|79": {"count": 1, "last_seen": "2026-11-29T20:58:01Z"}},
     "sticky": {"GPU-5f1c...|79": {"gpu": 3, "uuid": "GPU-5f1c...", "xid": 79, ...}}}

A critical NVML event other than an XID is kept the same way under `<uuid>|<event type>`
(`GPU-5f1c...|DoubleBitEccError`, its entry with `"event"` and `"xid": 0`). A state written in
another boot is void. The file lies in the runner's state directory (`gpuprobe.checks.state`,
which reads and replaces it atomically); this module says only what it holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.checks.state import StateDir, StateError

__all__ = ["FORMAT", "LOCK", "STATE_FILE", "StateError", "XidState", "load", "save"]

STATE_FILE = "xid-state.json"
FORMAT = 1
# One writer at a time in this process: the check's run and an RPC's clear can overlap.
LOCK = threading.RLock()
# What the runner's state directory says about the file and a missing directory.
WHAT = "xid state"
MISSING = "create it or set xid.state_dir"


@dataclass
class XidState:
    """Cleared markers and sticky XIDs of one boot, by XID key (`<uuid>|<xid>`, or
    `<uuid>|<event type>` for another critical NVML event)."""

    boot_id: str | None = None
    cleared: dict[str, dict[str, Any]] = field(default_factory=dict)
    sticky: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The state file's content."""
        return {
            "format": FORMAT,
            "boot_id": self.boot_id,
            "cleared": self.cleared,
            "sticky": self.sticky,
        }


def state_path(state_dir: StateDir | str) -> Path:
    """Where the state file lies."""
    directory = state_dir if isinstance(state_dir, StateDir) else StateDir(state_dir)
    return directory.file(STATE_FILE)


def load(state_dir: StateDir) -> XidState:
    """The saved state (empty when there is none); raises StateError for a bad file."""
    raw = state_dir.load(STATE_FILE, WHAT)
    if raw is None:
        return XidState()
    if not (
        isinstance(raw, dict)
        and raw.get("format") == FORMAT
        and isinstance(raw.get("boot_id"), str | None)
        and _entries(raw.get("cleared", {}))
        and _entries(raw.get("sticky", {}))
    ):
        raise StateError(
            f"{WHAT} {state_path(state_dir)}: not a gpuprobe XID state file (format {FORMAT})"
        )
    return XidState(raw.get("boot_id"), dict(raw.get("cleared", {})), dict(raw.get("sticky", {})))


def _entries(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def save(state_dir: StateDir, state: XidState) -> None:
    """Write the state (atomically, by the state directory); raises StateError when the
    directory is missing or read-only."""
    state_dir.save(STATE_FILE, WHAT, state.to_json(), MISSING)
