"""The XID check's state machine: each XID seen this boot is active, cleared or past.

A critical XID (or critical NVML event) is sticky: active from the first sighting until an
operator's clearing covers it (nothing new since, in count and time) or the node reboots. A
warning XID stays active for `xid.warning_window_seconds` after it last grew. A clearing no
longer covers an XID that grew again. An XID that `xid.policy` ignores is never active, and
one whose rule asks for a count is not active (nor sticky) until it reached it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import Seen, time_text
from gpuprobe.checks.xid.policy import threshold_met
from gpuprobe.checks.xid.recovery import recovered_by
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config


def judge(
    xids: list[Seen],
    cleared: dict[str, dict[str, Any]],
    memory: XidMemory,
    config: Config,
    now: datetime,
) -> None:
    """Mark each XID cleared or active, and remember the critical ones as sticky."""
    grew, sticky = memory.grew, memory.sticky
    stamp = now.timestamp()
    for x in xids:
        if x.override is not None and x.override.rule.ignore:
            x.ignored, x.active = True, False
            sticky.pop(x.key, None)
            continue
        if not threshold_met(x.override, x.count, x.times, now):
            x.held, x.active = True, False
            continue
        mark = cleared.get(x.key)
        x.cleared = mark is not None and covers(mark, x.count, x.last_seen)
        x.recovered = recovered_by(mark) if x.cleared else None
        last = grew.get(x.key)
        if last is None or x.count > last[0]:
            grew[x.key] = [x.count, stamp]
        if x.info.critical:
            x.active = not x.cleared
            if x.active:
                sticky[x.key] = x.to_entry()
            else:
                sticky.pop(x.key, None)
        else:
            recent = stamp - grew[x.key][1] <= xid_settings(config).warning_window_seconds
            x.active = not x.cleared and recent


def newest_clearings(
    saved: dict[str, dict[str, Any]], remembered: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The clearings in force: the state file's, each replaced by this process's memory's
    when that one covers as many sightings or more."""
    cleared = dict(saved)
    for key, mark in remembered.items():
        if key not in cleared or mark_count(mark) >= mark_count(cleared[key]):
            cleared[key] = mark
    return cleared


def covers(mark: dict[str, Any], count: int, last_seen: str | None) -> bool:
    """Whether a clearing still covers an XID or SXid seen `count` times, last at
    `last_seen`: nothing new since, by count and by time (a rotated log lowers the count, so
    a new line at a count no higher than the cleared one is told by its time)."""
    if count > mark_count(mark):
        return False
    last = time_text(mark.get("last_seen"))
    return last_seen is None or last is None or last_seen <= last


def mark_count(mark: dict[str, Any]) -> int:
    """A clearing's count (-1 when the state file holds no whole number there)."""
    count = mark.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) else -1
