"""What the checks' records say beyond running a check, and who reads it from the registry:
which sources wake a check (`wakes`, `poll`), which finding codes announce the node's end
(`notices`: the terminating taint's kinds, the pods attribution names), and how an operator
clears its sticky findings (`clear`: `gpuprobe clear-xid`, gRPC ClearFindings). A throwaway
record is seen by each reader without a line of theirs changed."""

from __future__ import annotations

import pytest

from conftest import snapshot
from gpuprobe.checks import registry
from gpuprobe.checks.attribution import attribute_findings, node_ends
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import WAKE_KERNEL_LOG, WAKE_NVML_EVENTS, Check, Poll
from gpuprobe.config import Config
from gpuprobe.effects.terminating import KEEP, wanted
from gpuprobe.gpu import kernel_events
from gpuprobe.host import snapshot_host
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, PodRef, Severity, Status, now

NOTICE = Finding("THROWAWAY_NODE_GOES", Severity.CRITICAL, "the rack powers off", Action.DRAIN_NODE)


def nothing(context: CheckContext, config: Config) -> CheckResult:
    return CheckResult("throwaway", "nothing", [])


def cleared_two(ctx: CheckContext, config: Config, gpu: int | None) -> int:
    return 2


THROWAWAY: Check[object] = Check(
    "throwaway",
    nothing,
    wakes=(WAKE_KERNEL_LOG,),
    notices=(("THROWAWAY_NODE_GOES", "maintenance"),),
    clear=cleared_two,
)


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> Check[object]:
    monkeypatch.setitem(registry.CHECKS, THROWAWAY.name, THROWAWAY)
    return THROWAWAY


def report(*results: CheckResult) -> NodeReport:
    return NodeReport("gpu-node-17", now(), list(results))


def test_the_records_say_what_wakes_xid_and_lifecycle_and_what_they_announce_and_clear() -> None:
    everyone = list(registry.CHECKS)
    assert registry.woken_by(WAKE_NVML_EVENTS, everyone) == ["xid"]
    assert registry.woken_by(WAKE_KERNEL_LOG, everyone) == ["xid"]
    assert registry.woken_by(WAKE_KERNEL_LOG, ["driver", "gpus"]) == []
    assert [c.name for c in registry.ORDER if c.poll is not None] == ["lifecycle"]
    assert registry.notices() == (
        ("lifecycle", "NODE_PREEMPTION_NOTICE", "preemption"),
        ("lifecycle", "NODE_MAINTENANCE_SCHEDULED", "maintenance"),
        ("lifecycle", "NODE_REBALANCE_RECOMMENDED", "rebalance"),
    )
    assert registry.clearable(everyone) == ["xid"]
    assert registry.pod_attribution() == "workloads"


def test_the_lifecycle_record_polls_only_where_a_cloud_gives_notices() -> None:
    lifecycle = registry.CHECKS["lifecycle"]
    assert lifecycle.poll is not None
    off_cloud = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"), "gpu-node-17")
    assert lifecycle.poll(CheckContext(off_cloud), Config()) is None
    spot = snapshot_host(snapshot("synthetic-aws-spot-interruption"), "gpu-node-17")
    found = lifecycle.poll(CheckContext(spot), Config())
    assert isinstance(found, Poll)
    assert (found.seconds, found.reason) == (5.0, "cloud notice")
    assert found.sense() == found.sense()  # the same notices heard twice: no change


def test_a_new_record_wakes_announces_and_clears_through_the_registry(
    throwaway: Check[object],
) -> None:
    assert registry.woken_by(WAKE_KERNEL_LOG, ["xid", "throwaway"]) == ["xid", "throwaway"]
    # a record that names no kinds of kernel event is woken by every kind a parser reads
    kinds = registry.kernel_kinds(["xid", "throwaway"])
    assert kinds["throwaway"] == frozenset(kernel_events.EVENTS) > kinds["xid"]
    assert "THROWAWAY_NODE_GOES" in node_ends()
    lifecycle = CheckResult("lifecycle", "no notice", [])
    ends = CheckResult("throwaway", "the rack goes", [NOTICE])
    assert wanted(report(lifecycle, ends)) == "maintenance"
    assert wanted(report(lifecycle, CheckResult("throwaway", "fine", []))) is None
    assert wanted(report(lifecycle)) is KEEP  # a check that announces the end did not run
    unknown = CheckResult("throwaway", "could not ask", [])
    unknown.floor = Status.UNKNOWN
    assert wanted(report(lifecycle, unknown)) is KEEP
    # the lifecycle record's kinds come first: its preemption outranks the throwaway's
    preempted = CheckResult(
        "lifecycle",
        "spot",
        [Finding("NODE_PREEMPTION_NOTICE", Severity.CRITICAL, "AWS", Action.DRAIN_NODE)],
    )
    assert wanted(report(preempted, ends)) == "preemption"
    # attribution: the node's end affects every pod on its GPUs
    holder = {"namespace": "ml", "pod": "train-0", "container": "c"}
    devices = [{"resource": "gpu:0:GPU-a", "gpu": 0, "holders": [holder]}]
    workloads = CheckResult("workloads", "s", [], {"devices": devices})
    out = attribute_findings([ends, workloads])
    assert out[0].findings[0].pods == (PodRef("ml", "train-0", "c"),)
    # clearing: every record's `clear`, summed; the named checks' only when names are given
    assert registry.clearable(["throwaway", "driver"]) == ["throwaway"]
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"), "gpu-node-17")
    assert registry.clear(CheckContext(host), Config(), None, ["throwaway"]) == 2
