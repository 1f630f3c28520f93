"""Building hosts and configs for check tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from conftest import snapshot
from gpuprobe.checks.registry import CHECKS
from gpuprobe.checks.runner import run_checks
from gpuprobe.config import Config, build
from gpuprobe.host import snapshot_host
from gpuprobe.report import CheckResult, Finding, NodeReport


def config(**sections: Any) -> Config:
    """A Config from keyword sections, as a config file would give them."""
    return build(Config, sections, "test config")


def run_check(name: str, snapshot_name: str, cfg: Config | None = None) -> CheckResult:
    """Run one check on a committed snapshot."""
    host = snapshot_host(snapshot(snapshot_name))
    return CHECKS[name](host, cfg or Config())


def codes(result: CheckResult) -> list[tuple[str, str, str, str]]:
    """A result's findings as (code, severity, action, resource), sorted."""
    return sorted(_key(f) for f in result.findings)


def _key(f: Finding) -> tuple[str, str, str, str]:
    return (f.code, f.severity.value, f.action.value, f.resource)


def node_report(
    snapshot_name: str,
    node: str | None = None,
    cfg: Config | None = None,
    time: datetime | None = None,
) -> NodeReport:
    """Every check on a committed snapshot, as the node `node` (default: the snapshot's),
    the report dated `time` if given."""
    report = run_checks(snapshot_host(snapshot(snapshot_name), node), cfg or Config(), list(CHECKS))
    if time is not None:
        report.time = time
    return report


class FakeClock:
    """A host clock that moves only when a test says so (`host.clock = FakeClock(...)`)."""

    def __init__(self, wall: float = 1_800_000_000.0, monotonic: float = 1000.0) -> None:
        self.now = wall
        self.ticks = monotonic

    def wall(self) -> float:
        """The set wall time."""
        return self.now

    def monotonic(self) -> float:
        """The set monotonic time."""
        return self.ticks

    def advance(self, seconds: float) -> None:
        """Move both clocks on by `seconds`."""
        self.now += seconds
        self.ticks += seconds
