"""Saying when the agent's own state files cannot be written (a full or read-only disk).

The xid check's sticky faults and the workloads check's GPU-seconds ledger are rewritten every
round; when a write fails the check's data says so (`state_error`), and the agent's log says so
once, not every round: a line when a file first fails (or fails another way), and one when it
is written again.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("gpuprobe.state")

_failing: dict[str, str] = {}  # path -> the error last logged for it
_lock = threading.Lock()


def saved(path: str, error: str | None) -> None:
    """Record how writing the state file `path` went: `error` its failure, None success."""
    with _lock:
        before = _failing.get(path)
        if error is None:
            if before is not None:
                del _failing[path]
        elif before != error:
            _failing[path] = error
    if error is None:
        if before is not None:
            log.info("state file written again", extra={"path": path})
        return
    if before != error:
        log.warning(
            "state file not written: what it keeps is lost at the next restart",
            extra={"path": path, "error": error},
        )
