"""The report model: node report, check result, finding, and the rules that rank them.

Everything gpuprobe says about a node travels in these types: the JSON report of
`gpuprobe check --json`, the gRPC `NodeReport` and the Prometheus metrics are all
renderings of one `NodeReport`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


class Status(enum.StrEnum):
    """A check's or a node's status, as the contract names it."""

    OK = "OK"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"
    UNKNOWN = "UNKNOWN"

    @property
    def rank(self) -> int:
        """How bad this status is: CRITICAL > WARNING > UNKNOWN > OK (the exit-code order)."""
        return _RANK[self]

    @property
    def metric_value(self) -> int:
        """The gauge value of `gpuprobe_check_status`: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
        return _METRIC_VALUE[self]


_RANK = {Status.OK: 0, Status.UNKNOWN: 1, Status.WARNING: 2, Status.CRITICAL: 3}
_METRIC_VALUE = {Status.OK: 0, Status.WARNING: 1, Status.CRITICAL: 2, Status.UNKNOWN: 3}


class Severity(enum.StrEnum):
    """A finding's severity: what is fine is a fact in `data`, never a finding."""

    WARNING = "WARNING"
    CRITICAL = "CRITICAL"
    UNKNOWN = "UNKNOWN"

    @property
    def status(self) -> Status:
        """The status a check takes on when it carries this finding."""
        return Status(self.value)


class Action(enum.StrEnum):
    """The repair an operator should try first."""

    NONE = "NONE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    REBOOT_NODE = "REBOOT_NODE"
    DRAIN_NODE = "DRAIN_NODE"
    FIX_CONFIG = "FIX_CONFIG"
    HARDWARE_INSPECTION = "HARDWARE_INSPECTION"
    CHECK_NETWORK = "CHECK_NETWORK"
    CHECK_STORAGE = "CHECK_STORAGE"


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of several statuses; OK when there are none."""
    return max(statuses, key=_RANK.__getitem__, default=Status.OK)


def gpu_resource(index: int, uuid: str | None) -> str:
    """The resource name of a GPU: `gpu:<index>:<uuid>` (uuid empty when NVML cannot tell it)."""
    return f"gpu:{index}:{uuid or ''}"


@dataclass(frozen=True, order=True)
class PodRef:
    """A workload a finding affects: a container of a pod (container empty when unknown)."""

    namespace: str
    pod: str
    container: str = ""

    def to_dict(self) -> dict[str, str]:
        """The pod as the contract's `{"namespace", "pod", "container"}` object."""
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PodRef:
        """Read a pod back from its JSON object."""
        return cls(str(d["namespace"]), str(d["pod"]), str(d.get("container") or ""))

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.pod}"
        return f"{where} (container {self.container})" if self.container else where


@dataclass(frozen=True)
class Finding:
    """One thing wrong on the node, on one resource, with the repair to try first.

    `pods` names the workloads it affects (empty when none or unknown).
    """

    code: str
    severity: Severity
    message: str
    action: Action = Action.NONE
    resource: str = "node"
    pods: tuple[PodRef, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The finding as the contract's JSON object (`pods` only when there are some)."""
        d: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "action": self.action.value,
            "resource": self.resource,
        }
        if self.pods:
            d["pods"] = [p.to_dict() for p in self.pods]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        """Read a finding back from its JSON object."""
        return cls(
            code=str(d["code"]),
            severity=Severity(d["severity"]),
            message=str(d["message"]),
            action=Action(d["action"]),
            resource=str(d["resource"]),
            pods=tuple(PodRef.from_dict(p) for p in d.get("pods") or ()),
        )


@dataclass
class CheckResult:
    """What one check found: its findings, its summary line and its measured facts.

    The status follows from the findings (the worst severity among them), unless the check
    could not judge at all and says so with `status=UNKNOWN`.
    """

    name: str
    summary: str
    findings: list[Finding] = field(default_factory=list)
    # The check's facts: its TypedDict (defined beside the check), a plain dict when read back.
    data: Mapping[str, Any] = field(default_factory=dict)
    duration_seconds: float = 0.0
    floor: Status = Status.OK

    @property
    def status(self) -> Status:
        """The worst of the findings' severities and the check's own floor."""
        if not self.findings:  # most checks of a healthy node: no list to build
            return self.floor
        return worst([self.floor, *(f.severity.status for f in self.findings)])

    @property
    def ran(self) -> bool:
        """False when the check says in its data that it did not run (`"ran": false`: not
        configured, nothing to measure, not now). Its status stays OK (the contract's "does
        not apply"), but it judged nothing: the text report shows it as not run, never as OK."""
        return self.data.get("ran") is not False

    @property
    def not_run(self) -> bool:
        """A check that did not run and found nothing: shown and counted as not run."""
        return not self.ran and not self.findings and self.floor is Status.OK

    def to_dict(self) -> dict[str, Any]:
        """The check as the contract's JSON object."""
        return {
            "name": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "duration_seconds": round(self.duration_seconds, 6),
            "findings": [f.to_dict() for f in self.findings],
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckResult:
        """Read a check result back from its JSON object (the status is kept as given)."""
        findings = [Finding.from_dict(f) for f in d.get("findings", [])]
        result = cls(
            name=str(d["name"]),
            summary=str(d["summary"]),
            findings=findings,
            data=dict(d.get("data") or {}),
            duration_seconds=float(d.get("duration_seconds") or 0.0),
        )
        result.floor = Status(d["status"])
        return result


@dataclass
class NodeReport:
    """Every check's result for one node at one time."""

    node: str
    time: datetime
    checks: list[CheckResult]

    @property
    def status(self) -> Status:
        """The worst status among the checks."""
        return worst(c.status for c in self.checks)

    def check(self, name: str) -> CheckResult | None:
        """The result of the named check, if it ran."""
        for check in self.checks:  # a dozen checks: a loop beats building an index
            if check.name == name:
                return check
        return None

    def findings(self) -> list[tuple[str, Finding]]:
        """Every finding with the name of the check that raised it."""
        return [(c.name, f) for c in self.checks for f in c.findings]

    def to_dict(self) -> dict[str, Any]:
        """The report as the contract's JSON object."""
        return {
            "node": self.node,
            "time": format_time(self.time),
            "status": self.status.value,
            "checks": [c.to_dict() for c in self.checks],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeReport:
        """Read a report back from its JSON object."""
        return cls(
            node=str(d["node"]),
            time=parse_time(str(d["time"])),
            checks=[CheckResult.from_dict(c) for c in d.get("checks", [])],
        )


def exit_status(status: Status) -> int:
    """The exit status of `check`, `audit` and `mesh`: 2 CRITICAL, 1 WARNING, 3 UNKNOWN, 0 OK."""
    return {Status.CRITICAL: 2, Status.WARNING: 1, Status.UNKNOWN: 3, Status.OK: 0}[status]


def format_time(t: datetime) -> str:
    """RFC 3339 in UTC with a `Z`, to the second, as the contract writes times."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time as written by `format_time` (or with an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)
