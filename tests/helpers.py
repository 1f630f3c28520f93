"""Building hosts and configs for check tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from conftest import snapshot
from gpuprobe.checks import registry
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check, CheckFn
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config, build
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import CheckResult, Finding, NodeReport


def config(**sections: Any) -> Config:
    """A Config from keyword sections, as a config file would give them."""
    return build(Config, sections, "test config", registry.sections())


def run_check(name: str, snapshot_name: str, cfg: Config | None = None) -> CheckResult:
    """Run one check on a committed snapshot."""
    host = snapshot_host(snapshot(snapshot_name))
    return CHECKS[name].run(CheckContext(host), cfg or Config())


def as_record(name: str, run: CheckFn) -> Check[Any]:
    """A record that runs `run` as the check `name`: the registered check's record with its
    function replaced (its deadline and the rest kept), or a bare record for a new name."""
    known = registry.CHECKS.get(name)
    return replace(known, run=run) if known is not None else Check(name, run)


def records(runs: Mapping[str, CheckFn]) -> dict[str, Check[Any]]:
    """Records for a runner: each function as the check of its name (see `as_record`)."""
    return {name: as_record(name, run) for name, run in runs.items()}


def use_check(monkeypatch: pytest.MonkeyPatch, name: str, run: CheckFn) -> None:
    """Register `run` as the check `name` (replacing or adding it) for one test."""
    monkeypatch.setitem(registry.CHECKS, name, as_record(name, run))


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
