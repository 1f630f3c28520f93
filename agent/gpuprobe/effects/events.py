"""Events on the node when a CRITICAL or WARNING finding appears or clears (events.k8s.io/v1).

Pure: `changes` compares two rounds' findings; `body` and `series_patch` are what the API
takes. An event is named after its finding, transition and this agent's run, so a finding
that flaps makes one series per transition (its `series.count` rising), not one event per
round, and a restarted agent starts new series instead of colliding with old ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.effects.conditions import camel, describe
from gpuprobe.report import Finding, NodeReport, Severity

REPORTING_CONTROLLER = "gpuprobe.io/agent"
# Cluster-scoped objects' events live in `default`, as kubectl and the kubelet expect.
NAMESPACE = "default"
MAX_NOTE = 1024  # the events API's bound (events.k8s.io/v1 `note`)
MAX_FIELD = 128  # reportingInstance, action, reason
DETECTED, CLEARED = "Detected", "Cleared"

FindingKey = tuple[str, str]  # (code, resource)


@dataclass(frozen=True)
class NodeEvent:
    """One transition of one finding, as an event to send."""

    code: str
    resource: str
    action: str  # Detected or Cleared
    note: str

    @property
    def type(self) -> str:
        """Warning when a finding appears, Normal when it clears."""
        return "Warning" if self.action == DETECTED else "Normal"

    @property
    def reason(self) -> str:
        """The finding's code in CamelCase, as conditions name it."""
        return camel(self.code)[:MAX_FIELD]


def notable(report: NodeReport) -> dict[FindingKey, Finding]:
    """The report's CRITICAL and WARNING findings by (code, resource)."""
    kept = (Severity.CRITICAL, Severity.WARNING)
    return {(f.code, f.resource): f for _, f in report.findings() if f.severity in kept}


def changes(
    before: Mapping[FindingKey, Finding], after: Mapping[FindingKey, Finding]
) -> list[NodeEvent]:
    """The findings that appeared (in `after` only) and cleared (in `before` only)."""
    appeared = [
        NodeEvent(f.code, f.resource, DETECTED, describe(f)[:MAX_NOTE])
        for key, f in after.items()
        if key not in before
    ]
    cleared = [
        NodeEvent(f.code, f.resource, CLEARED, f"cleared: {describe(f)}"[:MAX_NOTE])
        for key, f in before.items()
        if key not in after
    ]
    return appeared + cleared


def event_name(node: str, event: NodeEvent, run: str) -> str:
    """The event's object name: the node's, then a digest of the transition and the run."""
    digest = hashlib.sha256(f"{event.code}\0{event.resource}\0{event.action}\0{run}".encode())
    return f"{node[:200]}.gpuprobe.{digest.hexdigest()[:16]}"


def micro_time(t: datetime) -> str:
    """A MicroTime, as the events API takes `eventTime`: six fractional digits, always.

    The API server decodes MicroTime with Go's RFC3339Micro layout, which refuses a time
    without them; lightkube writes a time whose microseconds are 0 without its fraction, so
    such a time is moved on by one microsecond."""
    if t.microsecond == 0:
        t = t.replace(microsecond=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(event: NodeEvent, node: str, name: str, now: datetime) -> dict[str, Any]:
    """The new Event object for the first occurrence of a transition."""
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"gpuprobe-{node}"[:MAX_FIELD],
        "action": event.action,
        "reason": event.reason,
        "type": event.type,
        "note": event.note,
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def series_patch(count: int, now: datetime) -> dict[str, Any]:
    """The merge patch that records the `count`th occurrence of an event (count ≥ 2)."""
    return {"series": {"count": count, "lastObservedTime": micro_time(now)}}


def effect_name(node: str, what: str, now: datetime) -> str:
    """The object name of an event about something the agent did (a device taint, an
    eviction): the node's, then a digest of what and when (each act is its own event)."""
    digest = hashlib.sha256(f"{what}\0{now.isoformat()}".encode())
    return f"{node[:200]}.gpuprobe.{digest.hexdigest()[:16]}"


def effect_body(
    node: str,
    regarding: dict[str, Any],
    reason: str,
    action: str,
    note: str,
    warning: bool,
    now: datetime,
    what: str,
) -> dict[str, Any]:
    """An Event about something the agent did, on the node (namespace `default`) or on a pod
    (`regarding` a Pod: the pod's namespace, where `kubectl describe pod` finds it)."""
    namespace = str(regarding.get("namespace") or NAMESPACE)
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": effect_name(node, f"{what}\0{namespace}", now),
            "namespace": namespace,
        },
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"gpuprobe-{node}"[:MAX_FIELD],
        "action": action[:MAX_FIELD],
        "reason": reason[:MAX_FIELD],
        "type": "Warning" if warning else "Normal",
        "note": note[:MAX_NOTE],
        "regarding": regarding,
    }
