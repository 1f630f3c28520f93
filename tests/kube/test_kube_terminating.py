"""The taint `gpuprobe.io/terminating=<kind>:NoSchedule`: pure decisions, and the effects
with the real client library against the strict API stand-in, brake or no brake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_reports import GPU_LOST, T0, later, report

from gpuprobe.config import KubernetesConfig, TaintConfig
from gpuprobe.effects.node import NodeEffects
from gpuprobe.effects.taints import TAINT_KEY
from gpuprobe.effects.terminating import KEEP, TERMINATING_KEY, decide, wanted
from gpuprobe.kube.api import Access, KubeApi
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, Status
from kube_standin import KubeStandIn, running

NODE = "gpu-node-17"
FOREIGN = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
PREEMPTION = Finding(
    "NODE_PREEMPTION_NOTICE", Severity.CRITICAL, "AWS announced it", Action.DRAIN_NODE
)
MAINTENANCE = Finding(
    "NODE_MAINTENANCE_SCHEDULED", Severity.WARNING, "GCE maintenance", Action.DRAIN_NODE
)
REBALANCE = Finding(
    "NODE_REBALANCE_RECOMMENDED", Severity.WARNING, "AWS rebalance", Action.DRAIN_NODE
)


def with_lifecycle(
    *found: Finding, unknown: bool = False, base: NodeReport | None = None
) -> NodeReport:
    result = CheckResult("lifecycle", "s", list(found))
    if unknown:
        result.floor = Status.UNKNOWN
    out = base or report()
    return NodeReport(out.node, out.time, [*out.checks, result])


def taint(kind: str) -> dict[str, str]:
    return {"key": TERMINATING_KEY, "value": kind, "effect": "NoSchedule"}


def test_the_kind_is_the_most_urgent_notice_and_unknown_keeps_the_taint() -> None:
    assert wanted(with_lifecycle(REBALANCE, PREEMPTION)) == "preemption"
    assert wanted(with_lifecycle(REBALANCE, MAINTENANCE)) == "maintenance"
    assert wanted(with_lifecycle(REBALANCE)) == "rebalance"
    assert wanted(with_lifecycle()) is None
    assert wanted(with_lifecycle(unknown=True)) is KEEP
    assert wanted(report()) is KEEP  # no lifecycle result in the report at all


def test_decide_adds_replaces_in_place_and_removes_only_its_own() -> None:
    assert decide([FOREIGN], "preemption") == [FOREIGN, taint("preemption")]
    assert decide([FOREIGN, taint("preemption")], "preemption") is None
    assert decide([taint("rebalance"), FOREIGN], "preemption") == [taint("preemption"), FOREIGN]
    assert decide([FOREIGN, taint("rebalance")], None) == [FOREIGN]
    assert decide([FOREIGN], None) is None
    assert decide([FOREIGN, taint("preemption")], KEEP) is None


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def publisher(standin: KubeStandIn, enabled: bool = True) -> NodeEffects:
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=2)
    config = KubernetesConfig(taint=TaintConfig(enabled=enabled))
    return NodeEffects(api, NODE, config, run="run1")


def test_a_notice_taints_the_node_through_the_brake_and_its_end_removes_it(
    standin: KubeStandIn,
) -> None:
    unhealthy = [{"key": TAINT_KEY, "value": "XID", "effect": "NoSchedule"}]
    for i in range(9):  # every other GPU node carries the unhealthy taint: the brake is on
        standin.add_node(f"gpu-node-{i}", {"nvidia.com/gpu.present": "true"}, taints=unhealthy)
    standin.touch(NODE, taints=[FOREIGN])
    p = publisher(standin)
    p.publish(with_lifecycle(PREEMPTION, base=report(("gpus", GPU_LOST))), later(0))
    assert standin.taints(NODE) == [FOREIGN, taint("preemption")]  # the notice's, not braked
    assert [f.code for f in p.findings()] == ["TAINT_WITHHELD"]  # the unhealthy one is
    reasons = {e["reason"] for e in standin.node_events(NODE)}
    assert "NodePreemptionNotice" in reasons
    before = len(standin.requests)
    p.publish(with_lifecycle(PREEMPTION, base=report(("gpus", GPU_LOST))), later(10))
    node_patches = [r for r in standin.requests[before:] if r[1] == "PATCH" and r[2].endswith(NODE)]
    assert node_patches == []  # the node already says it: no write
    p.publish(with_lifecycle(PREEMPTION, unknown=True), later(20))  # unknown: kept
    assert standin.taints(NODE) == [FOREIGN, taint("preemption")]
    p.publish(with_lifecycle(), later(30))  # the notice is gone: removed at once
    assert standin.taints(NODE) == [FOREIGN]


def test_without_the_taint_setting_a_notice_taints_nothing(standin: KubeStandIn) -> None:
    p = publisher(standin, enabled=False)
    p.publish(with_lifecycle(PREEMPTION), T0)
    assert standin.taints(NODE) == []
    assert "NodePreemptionNotice" in {e["reason"] for e in standin.node_events(NODE)}
