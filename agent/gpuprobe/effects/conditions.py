"""A report's node conditions: one per group of checks, in the form `status.conditions` takes.

Pure: `groups` says which checks decide each condition, `desired` turns a report into
conditions; `to_write` compares them with the node's current ones and says which to send,
keeping `lastTransitionTime` while a status holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.checks import registry
from gpuprobe.config import KubernetesConfig
from gpuprobe.report import CheckResult, Finding, NodeReport, Severity, Status, format_time

# The API server's bound on a condition's message is larger; operators read it in
# `kubectl describe node`, so it is kept short.
MAX_MESSAGE = 1024
CLEAN = "AllChecksPassed"
# Which finding leads a condition of each status: the one that made it so.
_LEADS = {
    "False": (Severity.CRITICAL,),
    "Unknown": (Severity.UNKNOWN,),
    "True": (Severity.WARNING,),
}
_ORDER = {Severity.CRITICAL: 0, Severity.UNKNOWN: 1, Severity.WARNING: 2}


@dataclass(frozen=True)
class Condition:
    """One node condition gpuprobe owns: its type, status, reason and message."""

    type: str
    status: str  # "True", "False" or "Unknown"
    reason: str
    message: str


def groups(config: KubernetesConfig) -> Mapping[str, tuple[str, ...]]:
    """Each condition type and the checks that decide it: `kubernetes.conditions` where the
    configuration sets it, else the groups the checks' records name
    (`gpuprobe.checks.registry.conditions`)."""
    return config.conditions if config.conditions is not None else registry.conditions()


def camel(code: str) -> str:
    """A finding code as a condition or event reason: `GPU_LOST` → `GpuLost`."""
    return "".join(part.capitalize() for part in code.split("_") if part)


def describe(finding: Finding) -> str:
    """A finding as a line of a condition's message or an event's note: message and resource."""
    return f"{finding.message} ({finding.resource})"


def message(findings: Sequence[Finding], limit: int = MAX_MESSAGE) -> str:
    """The worst finding's message and resource, then "and N more", within `limit` characters."""
    text = describe(findings[0])
    rest = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
    if len(text) + len(rest) > limit:
        text = text[: limit - len(rest) - 1] + "…"
    return text + rest


def group_condition(condition_type: str, checks: Sequence[CheckResult]) -> Condition:
    """The condition of one group from its checks' results (at least one)."""
    statuses = {c.status for c in checks}
    findings = sorted((f for c in checks for f in c.findings), key=lambda f: _ORDER[f.severity])
    if Status.CRITICAL in statuses:
        status = "False"
    elif Status.UNKNOWN in statuses:
        status = "Unknown"
    else:
        status = "True"
    leads = [f for f in findings if f.severity in _LEADS[status]]
    ordered = leads + [f for f in findings if f not in leads]
    if leads:
        return Condition(condition_type, status, camel(leads[0].code), message(ordered))
    names = ", ".join(c.name for c in checks)
    if status == "Unknown":  # a check that could not judge and raised no finding
        unknown = [c for c in checks if c.status is Status.UNKNOWN]
        return Condition(
            condition_type, status, "CheckUnknown", f"{unknown[0].name}: {unknown[0].summary}"
        )
    return Condition(condition_type, status, CLEAN, f"gpuprobe: {names} passed")


def desired(report: NodeReport, groups: Mapping[str, Sequence[str]]) -> list[Condition]:
    """The conditions the report calls for. A group none of whose checks ran (`check --only`,
    a check this node does not have) is left out, so its condition stays as it was."""
    found: list[Condition] = []
    for condition_type, names in groups.items():
        checks = [c for c in report.checks if c.name in names]
        if checks:
            found.append(group_condition(condition_type, checks))
    return found


def to_write(
    wanted: Sequence[Condition],
    current: Sequence[Mapping[str, Any]],
    now: datetime,
    heartbeat: bool,
) -> list[dict[str, Any]]:
    """The conditions to patch: those whose status, reason or message differ from the node's
    (all of them when `heartbeat`), each with `lastHeartbeatTime` now and `lastTransitionTime`
    kept unless the status changed."""
    by_type = {str(c.get("type")): c for c in current}
    out: list[dict[str, Any]] = []
    for c in wanted:
        old = by_type.get(c.type)
        same = old is not None and (old.get("status"), old.get("reason"), old.get("message")) == (
            c.status,
            c.reason,
            c.message,
        )
        if same and not heartbeat:
            continue
        since = format_time(now)
        if old is not None and old.get("status") == c.status and old.get("lastTransitionTime"):
            since = str(old["lastTransitionTime"])
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastHeartbeatTime": format_time(now),
                "lastTransitionTime": since,
            }
        )
    return out
