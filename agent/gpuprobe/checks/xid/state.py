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
another boot is void. The file is replaced atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.checks.record import ClearStateError

STATE_FILE = "xid-state.json"
FORMAT = 1
# One writer at a time in this process: the check's run and an RPC's clear can overlap.
LOCK = threading.RLock()


class StateError(ClearStateError):
    """The XID state directory is missing or read-only, or its state file is unreadable."""


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


def state_path(state_dir: str) -> Path:
    """Where the state file lies."""
    return Path(state_dir) / STATE_FILE


def load(state_dir: str) -> XidState:
    """The saved state (empty when there is none); raises StateError for a bad file."""
    path = state_path(state_dir)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return XidState()
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(f"xid state {path}: {_why(exc)}") from None
    except json.JSONDecodeError as exc:
        raise StateError(f"xid state {path}: line {exc.lineno}: {exc.msg}") from None
    if not (
        isinstance(raw, dict)
        and raw.get("format") == FORMAT
        and isinstance(raw.get("boot_id"), str | None)
        and _entries(raw.get("cleared", {}))
        and _entries(raw.get("sticky", {}))
    ):
        raise StateError(f"xid state {path}: not a gpuprobe XID state file (format {FORMAT})")
    return XidState(raw.get("boot_id"), dict(raw.get("cleared", {})), dict(raw.get("sticky", {})))


def _entries(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def save(state_dir: str, state: XidState) -> None:
    """Write the state atomically; raises StateError when the directory is missing or
    read-only."""
    directory = Path(state_dir)
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise StateError(f"xid state directory {state_dir} {what}: create it or set xid.state_dir")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".xid-state-", dir=directory)
    except OSError as exc:
        raise StateError(f"xid state directory {state_dir}: {_why(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state.to_json(), f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, state_path(state_dir))
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise StateError(f"xid state {state_path(state_dir)}: {_why(exc)}") from None


def writable(state_dir: str) -> bool:
    """Whether the state directory exists and this process may write in it."""
    return os.path.isdir(state_dir) and os.access(state_dir, os.W_OK | os.X_OK)


def _why(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return (exc.strerror or str(exc)).lower()
