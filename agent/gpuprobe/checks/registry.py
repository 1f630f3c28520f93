"""The checks gpuprobe runs, in report order: one record (`record.Check`) per check.

Adding a check means writing its module (ending with its `CHECK` record) and adding the
record here; docs/architecture.md lists the steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from gpuprobe.checks import (
    cdi,
    device_plugin,
    driver,
    gpus,
    lifecycle,
    nccl,
    network,
    pods,
    rdma,
    storage,
    toolkit,
    workloads,
    xid,
)
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import mig, sharing
from gpuprobe.checks.record import WAKE_KERNEL_LOG, Check, Policy
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.gpu import kernel_events
from gpuprobe.report import Finding
from gpuprobe.report_view import DataKeys

S = TypeVar("S")

# The report order.
ORDER: tuple[Check[Any], ...] = (
    driver.CHECK,
    gpus.CHECK,
    mig.CHECK,
    xid.CHECK,
    toolkit.CHECK,
    cdi.CHECK,
    device_plugin.CHECK,
    sharing.CHECK,
    workloads.CHECK,
    pods.CHECK,
    lifecycle.CHECK,
    network.CHECK,
    rdma.CHECK,
    nccl.CHECK,
    storage.CHECK,
)

# The records by name, in report order: what the runner, the daemon, the config loader, the
# metrics collector, the node conditions and the summary view read (tests add or replace
# records here).
CHECKS: dict[str, Check[Any]] = {check.name: check for check in ORDER}


def resolve(names: list[str] | None) -> list[str]:
    """The named checks in report order (all when None); raises KeyError for an unknown name."""
    if names is None:
        return list(CHECKS)
    for name in names:
        if name not in CHECKS:
            raise KeyError(name)
    return [name for name in CHECKS if name in names]


def refuse_unknown_names(config: Config) -> None:
    """Raise ConfigError when the configuration sets an interval or a deadline for a check
    this build does not have: a typo there would silently leave the check on its default.
    `check`, `capture` and `serve` all call this one validation."""
    for where, named in (
        ("serve.intervals", config.serve.intervals),
        ("checks.deadlines", config.checks.deadlines),
    ):
        unknown = sorted(set(named) - set(CHECKS))
        if unknown:
            raise ConfigError(f"{where}: unknown check {unknown[0]!r}")


def active(names: Iterable[str]) -> frozenset[str]:
    """Those of the named checks that are active (they load the node)."""
    return frozenset(name for name in names if CHECKS[name].active)


def sections() -> dict[str, type[Any]]:
    """Each check's config section type, by check name (for `config.load_config`)."""
    return {c.name: c.section for c in CHECKS.values() if c.section is not None}


def section_name(section: type[Any]) -> str:
    """The name the config section of type `section` is read under: its check's (the
    record that declares it). KeyError: no record declares it."""
    for c in CHECKS.values():
        if c.section is section:
            return c.name
    raise KeyError(section.__name__)


def section(config: Config, kind: type[S]) -> S:
    """The config section of type `kind`, read under its check's name (a face or the daemon
    reads a check's settings through its type, never its module)."""
    return config.section(section_name(kind), kind)


def conditions() -> dict[str, tuple[str, ...]]:
    """The default node conditions (`kubernetes.conditions`): each condition type that a
    check's record names, in the order of its first check, and the checks that decide it, in
    report order."""
    groups: dict[str, tuple[str, ...]] = {}
    for c in CHECKS.values():
        if c.condition is not None:
            groups[c.condition] = (*groups.get(c.condition, ()), c.name)
    return groups


def summary_keys() -> dict[str, DataKeys]:
    """The facts the summary view keeps of each check's data, by check name
    (`report_view.summary`)."""
    return {c.name: c.summary_keys for c in CHECKS.values() if c.summary_keys is not None}


def woken_by(source: str, names: Iterable[str]) -> list[str]:
    """Those of the named checks that the event source `source` wakes (their records'
    `wakes`), in report order."""
    named = set(names)
    return [c.name for c in CHECKS.values() if c.name in named and source in c.wakes]


def kernel_kinds(names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Those of the named checks that the kernel log wakes (`WAKE_KERNEL_LOG`), in report
    order, each with the kinds of kernel-log event that wake it (its record's
    `kernel_events`; every kind a parser reads when it names none). Raises ValueError for a
    kind no parser reads: a record with a typo there would never be woken."""
    kinds: dict[str, frozenset[str]] = {}
    for name in woken_by(WAKE_KERNEL_LOG, names):
        wanted = CHECKS[name].kernel_events or tuple(kernel_events.EVENTS)
        unknown = sorted(set(wanted) - set(kernel_events.EVENTS))
        if unknown:
            raise ValueError(f"check {name!r}: no parser reads kernel events {unknown[0]!r}")
        kinds[name] = frozenset(wanted)
    return kinds


def notices() -> tuple[tuple[str, str, str], ...]:
    """(check, code, kind) of every finding code announcing the node's end (the records'
    `notices`), in report order, each check's the most urgent first."""
    return tuple((c.name, code, kind) for c in CHECKS.values() for code, kind in c.notices)


def pod_attribution() -> str | None:
    """The check whose data names the pods on each GPU (its record's `attributes_pods`: the
    workloads check), if any."""
    return next((c.name for c in CHECKS.values() if c.attributes_pods), None)


def policy() -> Policy | None:
    """The policy an operator may ask to see (`check --explain-policy`: the first record
    with a `policy`, the xid check's), if any."""
    return next((c.policy for c in CHECKS.values() if c.policy is not None), None)


def log_code(check: str, finding: Finding) -> str:
    """How the daemon's log names the code of `check`'s `finding` (its record's
    `log_code`: an XID's with its number), the code alone for a check without one."""
    record = CHECKS.get(check)
    if record is None or record.log_code is None:
        return finding.code
    return record.log_code(finding)


def clearable(names: Iterable[str]) -> list[str]:
    """Those of the named checks whose sticky findings an operator may clear (a record with
    `clear`), in report order."""
    named = set(names)
    return [c.name for c in CHECKS.values() if c.name in named and c.clear is not None]


def clear(
    ctx: CheckContext, config: Config, gpu: int | None, names: Iterable[str] | None = None
) -> int:
    """Forget the sticky findings of GPU index `gpu` (every GPU's when None) of the named
    checks (all), as `gpuprobe clear-xid` and ClearFindings do; how many were forgotten.
    Raises NoSuchGpu or ClearStateError (`gpuprobe.checks.record`)."""
    cleared = 0
    for name in clearable(CHECKS if names is None else names):
        clearing = CHECKS[name].clear
        assert clearing is not None
        cleared += clearing(ctx, config, gpu)
    return cleared
