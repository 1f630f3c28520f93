"""The node's effects (NodeEffects, EffectsLoop) with the real client library (lightkube)
against the strict API stand-in: conditions, events, taints, the brake, conflicts, faults, RBAC."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from kube_reports import GPU_LOST, NO_RUNTIME, THERMAL, TIMEOUT, XID_APP, later, report

from gpuprobe.config import KubernetesConfig, TaintConfig
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.effects.taints import TAINT_KEY
from gpuprobe.kube.api import Access, KubeApi, KubeError
from gpuprobe.report import CheckResult, NodeReport
from kube_standin import KubeStandIn, Rule, manifest_rules, running

NODE = "gpu-node-17"
TAINTING = KubernetesConfig(taint=TaintConfig(enabled=True))


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def publisher(standin: KubeStandIn, config: KubernetesConfig = TAINTING) -> NodeEffects:
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=2)
    return NodeEffects(api, NODE, config, run="run1")


def ours(standin: KubeStandIn) -> dict[str, tuple[str, str, str]]:
    return {
        t: (c["status"], c["reason"], c["lastTransitionTime"])
        for t, c in standin.conditions(NODE).items()
        if t != "Ready"
    }


def test_conditions_go_true_false_unknown_with_their_transition_times(standin: KubeStandIn) -> None:
    p = publisher(standin)
    ready_before = standin.conditions(NODE)["Ready"]
    p.publish(report(), later(0))
    assert ours(standin) == {
        "GPUHardwareReady": ("True", "AllChecksPassed", "2026-12-01T21:00:00Z"),
        "GPURuntimeReady": ("True", "AllChecksPassed", "2026-12-01T21:00:00Z"),
    }
    p.publish(report(("gpus", GPU_LOST)), later(60))
    assert ours(standin)["GPUHardwareReady"] == ("False", "GpuLost", "2026-12-01T21:01:00Z")
    assert ours(standin)["GPURuntimeReady"] == ("True", "AllChecksPassed", "2026-12-01T21:00:00Z")
    hardware = standin.conditions(NODE)["GPUHardwareReady"]
    assert hardware["message"] == f"{GPU_LOST.message} ({GPU_LOST.resource})"
    p.publish(report(("xid", TIMEOUT), unknown=("xid",)), later(120))
    assert ours(standin)["GPUHardwareReady"] == ("Unknown", "CheckTimeout", "2026-12-01T21:02:00Z")
    p.publish(report(("gpus", THERMAL)), later(180))
    assert ours(standin)["GPUHardwareReady"] == ("True", "ThermalSlowdown", "2026-12-01T21:03:00Z")
    assert standin.conditions(NODE)["Ready"] == ready_before  # never a type it does not own


def test_an_unchanged_round_costs_nothing_and_the_heartbeat_re_asserts(
    standin: KubeStandIn,
) -> None:
    p = publisher(standin, KubernetesConfig())
    p.publish(report(), later(0))
    count = len(standin.requests)
    p.publish(report(), later(60))
    p.publish(report(), later(120))
    assert len(standin.requests) == count
    p.publish(report(), later(240))
    assert len(standin.requests) == count + 1  # one status patch
    hardware = standin.conditions(NODE)["GPUHardwareReady"]
    assert hardware["lastHeartbeatTime"] == "2026-12-01T21:04:00Z"
    assert hardware["lastTransitionTime"] == "2026-12-01T21:00:00Z"


def test_a_restarted_agent_keeps_the_transition_time_it_finds(standin: KubeStandIn) -> None:
    publisher(standin).publish(report(("gpus", GPU_LOST)), later(0))
    again = publisher(standin)
    again.publish(report(("gpus", GPU_LOST), ("gpus", THERMAL)), later(600))
    hardware = standin.conditions(NODE)["GPUHardwareReady"]
    assert hardware["lastTransitionTime"] == "2026-12-01T21:00:00Z"
    assert hardware["message"].endswith(" and 1 more")


def test_events_on_appear_and_clear_aggregate_a_flapping_finding(standin: KubeStandIn) -> None:
    p = publisher(standin, KubernetesConfig())
    for i in range(5):  # appears, clears, appears, clears, appears
        p.publish(report(("gpus", GPU_LOST)) if i % 2 == 0 else report(), later(60 * i))
    events = standin.node_events(NODE)
    assert [
        (e["type"], e["reason"], e["action"], e.get("series", {}).get("count")) for e in events
    ] == [
        ("Warning", "GpuLost", "Detected", 3),
        ("Normal", "GpuLost", "Cleared", 2),
    ]
    detected, cleared = events
    assert detected["note"] == f"{GPU_LOST.message} ({GPU_LOST.resource})"
    assert cleared["note"] == f"cleared: {GPU_LOST.message} ({GPU_LOST.resource})"
    assert detected["reportingController"] == "gpuprobe.io/agent"
    assert detected["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": NODE}
    # MicroTimes keep their six digits: a whole second is moved on by a microsecond, which
    # lightkube would otherwise write without its fraction (the API server refuses that)
    assert detected["series"]["lastObservedTime"] == "2026-12-01T21:04:00.000001Z"
    assert detected["eventTime"] == "2026-12-01T21:00:00.000001Z"


def test_warnings_make_events_but_unknowns_do_not(standin: KubeStandIn) -> None:
    p = publisher(standin, KubernetesConfig())
    p.publish(report(("xid", XID_APP), ("mig", TIMEOUT), unknown=("mig",)), later(0))
    assert [(e["type"], e["reason"]) for e in standin.node_events(NODE)] == [("Warning", "Xid")]


def test_a_critical_code_taints_a_warning_does_not_and_the_taint_clears_itself(
    standin: KubeStandIn,
) -> None:
    foreign = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    standin.touch(NODE, taints=[foreign])
    p = publisher(standin)
    p.publish(report(("xid", XID_APP)), later(0))
    assert standin.taints(NODE) == [foreign]
    p.publish(report(("gpus", GPU_LOST)), later(60))
    assert standin.taints(NODE) == [
        foreign,
        {"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"},
    ]
    p.publish(report(), later(120))  # recovered, but not for long enough
    p.publish(report(), later(359))
    assert len(standin.taints(NODE)) == 2
    p.publish(report(), later(360))
    assert standin.taints(NODE) == [foreign]  # ours gone, the foreign one left alone


def test_a_stale_write_is_refused_with_409_then_re_read_and_re_applied(
    standin: KubeStandIn,
) -> None:
    p = publisher(standin)
    p.publish(report(), later(0))
    other = {"key": "example.com/maintenance", "value": "", "effect": "NoSchedule"}
    standin.faults.interleave = lambda: standin.touch(NODE, taints=[other])
    p.publish(report(("gpus", GPU_LOST)), later(60))
    codes = [
        code
        for _, method, path, code in standin.requests
        if method == "PATCH" and path.endswith(NODE)
    ]
    assert codes == [409, 200]
    assert [(e.verb, e.code) for e in p.handled] == [("patch", "409")]  # counted by the loop
    assert standin.taints(NODE) == [
        other,
        {"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"},
    ]


def test_the_brake_withholds_a_new_taint_at_the_fraction(standin: KubeStandIn) -> None:
    tainted = [{"key": TAINT_KEY, "value": "XID", "effect": "NoSchedule"}]
    gpu = {"nvidia.com/gpu.present": "true"}
    for i in range(9):
        standin.add_node(f"gpu-node-{i}", gpu, **({"taints": tainted} if i < 2 else {}))
    standin.add_node("cpu-node-0", {}, taints=tainted)  # not a GPU node: not counted
    p = publisher(standin)
    p.publish(report(("gpus", GPU_LOST)), later(0))
    assert standin.taints(NODE) == []
    (finding,) = p.findings()
    assert (finding.code, finding.severity.value) == ("TAINT_WITHHELD", "WARNING")
    assert "2 of 10 GPU nodes already carry gpuprobe.io/unhealthy" in finding.message
    # one of them recovers: below the fraction, the taint goes on (after the recheck delay)
    standin.touch("gpu-node-0", taints=[])
    p.publish(report(("gpus", GPU_LOST)), later(60))
    assert standin.taints(NODE) == []
    p.publish(report(("gpus", GPU_LOST)), later(130))
    assert standin.taints(NODE) == [{"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"}]
    assert p.findings() == []


def test_api_down_for_a_minute_and_back_loses_nothing(standin: KubeStandIn) -> None:
    p = publisher(standin)
    p.publish(report(), later(0))
    failures = []
    with standin.down():
        for second in range(10, 70, 10):
            with pytest.raises(KubeError) as failed:
                p.publish(report(("gpus", GPU_LOST), ("toolkit", NO_RUNTIME)), later(second))
            failures.append((failed.value.verb, failed.value.code))
    # the first try fails writing; the next ones re-read the node first
    assert failures == [("patch", "unreachable")] + [("get", "unreachable")] * 5
    p.publish(report(("gpus", GPU_LOST), ("toolkit", NO_RUNTIME)), later(75))
    assert ours(standin) == {
        "GPUHardwareReady": ("False", "GpuLost", "2026-12-01T21:01:15Z"),
        "GPURuntimeReady": ("False", "RuntimeNotConfigured", "2026-12-01T21:01:15Z"),
    }
    assert sorted(e["reason"] for e in standin.node_events(NODE)) == [
        "GpuLost",
        "RuntimeNotConfigured",
    ]
    assert standin.taints(NODE) == [{"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"}]


@pytest.mark.parametrize("code", [409, 429, 500])
def test_error_answers_fail_the_attempt_and_the_next_one_completes(
    standin: KubeStandIn, code: int
) -> None:
    p = publisher(standin, KubernetesConfig())
    p.publish(report(), later(0))
    standin.faults.answers = [code]
    with pytest.raises(KubeError) as failed:
        p.publish(report(("gpus", GPU_LOST)), later(60))
    assert failed.value.code == str(code)
    p.publish(report(("gpus", GPU_LOST)), later(61))
    assert ours(standin)["GPUHardwareReady"][:2] == ("False", "GpuLost")


def test_a_slow_api_server_times_the_call_out(standin: KubeStandIn) -> None:
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=0.3)
    standin.faults.delay = 1.0
    with pytest.raises(KubeError) as failed:
        api.get_node(NODE)
    assert (failed.value.verb, failed.value.code) == ("get", "timeout")


def test_the_loop_counts_errors_backs_off_and_reports_unreachable_after_5_minutes(
    standin: KubeStandIn,
) -> None:
    clock = [1000.0]
    own: list[CheckResult] = []
    loop = EffectsLoop(
        publisher(standin, KubernetesConfig()),
        own.append,
        KubernetesConfig(),
        rng=random.Random(7),
        clock=lambda: clock[0],
        wall=lambda: later(clock[0] - 1000),
    )
    loop.offer(report())
    assert loop.step() == 240  # fine: wait for the next round or the heartbeat
    assert loop.up and own[-1].findings == []
    delays = []
    loop.offer(report(("gpus", GPU_LOST)))
    with standin.down():
        for _ in range(8):
            delays.append(loop.step())
            clock[0] += 45
    assert not loop.up
    assert loop.errors == {("patch", "unreachable"): 1, ("get", "unreachable"): 7}
    assert delays[0] <= 1 and delays[-1] <= 60 and delays[-1] >= 30  # capped, jittered
    assert all(b >= a / 2 for a, b in itertools.pairwise(delays))
    (finding,) = own[-1].findings
    assert finding.code == "KUBERNETES_UNREACHABLE"
    assert finding.message.startswith("node updates have failed for 315 s (last: get unreachable)")
    loop.step()
    assert loop.up and own[-1].findings == []


def test_a_rotated_token_is_read_again(standin: KubeStandIn) -> None:
    account = standin.service_account_dir("token-1")
    standin.tokens = {"token-1"}
    api = KubeApi(Access(account=account, server=f"https://127.0.0.1:{standin.port}"), timeout=2)
    assert api.get_node(NODE)["metadata"]["name"] == NODE
    standin.tokens = {"token-2"}  # the old one expired; the kubelet wrote the new one
    (account / "token").write_text("token-2")
    assert api.get_node(NODE)["metadata"]["name"] == NODE
    standin.tokens = set()
    with pytest.raises(KubeError) as failed:
        api.get_node(NODE)
    assert failed.value.code == "401"


def test_requests_outside_the_cluster_role_are_forbidden(tmp_path: Path) -> None:
    rules = [r for r in manifest_rules() if "nodes/status" not in r.resources]
    with running(tmp_path, rules) as standin:
        p = publisher(standin, KubernetesConfig())
        with pytest.raises(KubeError) as failed:
            p.publish(report(), later(0))
        assert (failed.value.verb, failed.value.code) == ("patch", "403")
        assert 'cannot patch resource "nodes/status"' in failed.value.message


def test_the_manifests_grant_exactly_what_the_features_use(standin: KubeStandIn) -> None:
    assert sorted(
        (sorted(r.groups), sorted(r.resources), sorted(r.verbs)) for r in standin.rules
    ) == [
        ([""], ["nodes"], ["get", "list", "patch"]),
        ([""], ["nodes/status"], ["patch"]),
        ([""], ["pods"], ["list"]),
        ([""], ["pods/eviction"], ["create"]),
        (["events.k8s.io"], ["events"], ["create", "patch"]),
        (["resource.k8s.io"], ["devicetaintrules"], ["create", "delete", "list"]),
        (["resource.k8s.io"], ["resourceslices"], ["list"]),
    ]
    assert not any(
        r.allows("", "pods", verb, "x")
        for r in standin.rules
        for verb in ("get", "watch", "delete")
    )
    assert not any(r.allows("", "nodes", "delete", NODE) for r in standin.rules)
    assert not any(r.allows("", "pods", "delete", "x", "ns") for r in standin.rules)
    assert not any(
        r.allows("resource.k8s.io", "devicetaintrules", verb, "x")
        for r in standin.rules
        for verb in ("update", "patch", "watch", "get")
    )
    assert not any(
        r.allows("resource.k8s.io", "resourceslices", verb, "x")
        for r in standin.rules
        for verb in ("create", "update", "patch", "delete")
    )
    assert not any(r.allows("", "events", "create", None) for r in standin.rules)  # core events
    assert Rule({""}, {"nodes"}, {"get"}, {"other"}).allows("", "nodes", "get", NODE) is False


def test_a_bug_in_one_attempt_does_not_end_publishing(standin: KubeStandIn) -> None:
    p = publisher(standin, KubernetesConfig(start_jitter_seconds=0))
    real, calls = p.publish, []

    def publish_once_broken(report: NodeReport, at: datetime) -> None:
        calls.append(at)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        real(report, at)

    p.publish = publish_once_broken  # type: ignore[method-assign]
    loop = EffectsLoop(p, lambda _: None, KubernetesConfig(), rng=random.Random(1))
    loop.offer(report(("gpus", GPU_LOST)))
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not loop.up and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        loop.offer(None)
        thread.join(5)
    assert loop.up and len(calls) >= 2
    assert ours(standin)["GPUHardwareReady"][:2] == ("False", "GpuLost")
