"""The planner of the opt-in taint `gpuprobe.io/unhealthy=<CODE>:<effect>`.

Pure: `due` finds the code that calls for the taint, `decide` the node's new taint list (or
None to leave it be); the brake that may withhold a new one is `gpuprobe.effects.brake`.
gpuprobe only ever adds, changes or removes the taint with its own key; every other taint on
the node stays as it is, in its place.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuprobe.config import TaintConfig
from gpuprobe.report import NodeReport, Severity, format_time

TAINT_KEY = "gpuprobe.io/unhealthy"


def due(report: NodeReport, codes: Sequence[str], covered: Collection[str] = ()) -> str | None:
    """The first of `codes` (in their configured order) CRITICAL in the report, if any;
    findings on a `covered` resource (a GPU whose device taint stands) do not count."""
    critical = {
        f.code
        for _, f in report.findings()
        if f.severity is Severity.CRITICAL and f.resource not in covered
    }
    return next((code for code in codes if code in critical), None)


def ours(taints: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """gpuprobe's taint among the node's, if it carries one."""
    return next((t for t in taints if t.get("key") == TAINT_KEY), None)


def taint(code: str, effect: str, now: datetime) -> dict[str, Any]:
    """gpuprobe's taint for `code` (NoExecute taints carry the time they were added)."""
    made: dict[str, Any] = {"key": TAINT_KEY, "value": code, "effect": effect}
    if effect == "NoExecute":
        made["timeAdded"] = format_time(now)
    return made


def decide(
    taints: Sequence[Mapping[str, Any]],
    code: str | None,
    clear_for: float,
    config: TaintConfig,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """The node's taint list after this round, or None when it stays as it is.

    `code`: the code due now (None: none); `clear_for`: seconds since one was last due.
    """
    mine = ours(taints)
    if code is not None:
        if mine is not None and (mine.get("value"), mine.get("effect")) == (code, config.effect):
            return None
        wanted = taint(code, config.effect, now)
        if mine is None:
            return [dict(t) for t in taints] + [wanted]
        return [wanted if t is mine else dict(t) for t in taints]
    if mine is not None and clear_for >= config.clear_after_seconds:
        return [dict(t) for t in taints if t is not mine]
    return None
