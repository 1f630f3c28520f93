"""Device taints for a failed GPU (kubernetes.device_taints) with the real client library
(lightkube) against the API stand-in serving resource.k8s.io (tests/kube_dra.py): one rule
for the right device by UUID, cleared after its delay, foreign rules untouched, the served
version from discovery (1.37 v1, 1.36 v1beta2, none), the node taint only for what no device
taint covers, the brake counting the fleet's GPUs, the events and the metric."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_reports import GPU3, GPU_LOST, NO_RUNTIME, later

from conftest import snapshot
from gpuprobe.config import Config, DeviceTaintConfig, KubernetesConfig, TaintConfig
from gpuprobe.effects.daemon import KubeCollector
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.host import snapshot_host
from gpuprobe.kube.api import Access, KubeApi, KubeError
from gpuprobe.pipeline import assemble, run_checks
from gpuprobe.report import CheckResult, NodeReport, PodRef
from kube_dra import DraStandIn, nvidia_slice
from kube_standin import manifest_rules

NODE = "gpu-node-17"
FAILED = "GPU-5f1c0006-8e2b-4c1d-9a7e-000000000006"  # the remap-failure snapshot's GPU 6
# The DRA driver's minor numbers follow the driver's probe order, not NVML's PCI order: GPU
# index i is minor MINORS[i], so GPU 6 is the device gpu-7.
MINORS = [1, 0, 3, 2, 5, 4, 7, 6]
CODES = (*TaintConfig().codes, "ROW_REMAP_FAILURE")
TAINTING = TaintConfig(enabled=True, codes=CODES)


def config(
    effect: str = "NoSchedule", clear: float = 300.0, fraction: float = 0.1
) -> KubernetesConfig:
    devices = DeviceTaintConfig(
        enabled=True, effect=effect, clear_after_seconds=clear, max_quarantined_fraction=fraction
    )
    return KubernetesConfig(taint=TAINTING, device_taints=devices)


def remap_failure() -> NodeReport:
    """The gpus check on the 8-GPU remap-failure snapshot: ROW_REMAP_FAILURE on GPU 6."""
    host = snapshot_host(snapshot("synthetic-remap-failure"), NODE)
    return run_checks(host, Config(), ["gpus"])


def healthy() -> NodeReport:
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"), NODE)
    return run_checks(host, Config(), ["gpus"])


def published(report: NodeReport) -> list[tuple[int, str, str]]:
    gpus = report.checks[0].data["gpus"]
    return [(MINORS[g["index"]], g["uuid"], g["pci_bus_id"]) for g in gpus]


def stand_in(
    directory: Path, release: str = "1.37", dra: bool = True, gate: bool = True
) -> DraStandIn:
    standin = DraStandIn(directory, manifest_rules(), release, dra, gate)
    standin.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    if dra:
        standin.add_slice(nvidia_slice(NODE, published(remap_failure())))
    return standin


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[DraStandIn]:
    s = stand_in(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def publisher(standin: DraStandIn, cfg: KubernetesConfig, node: str = NODE) -> NodeEffects:
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=5)
    return NodeEffects(api, node, cfg, run="run1")


def ours(standin: DraStandIn) -> dict[str, tuple[str, str, str, str]]:
    """The rules of the node: name -> (driver, device, taint value, effect)."""
    return {
        name: (
            r["spec"]["deviceSelector"]["driver"],
            r["spec"]["deviceSelector"]["device"],
            r["spec"]["taint"]["value"],
            r["spec"]["taint"]["effect"],
        )
        for name, r in standin.rules_on(NODE).items()
    }


RULE = "gpuprobe-gpu-node-17-gpu-7-row-remap-failure"


def test_a_row_remap_failure_on_one_of_eight_gpus_is_one_rule_for_its_device_by_uuid(
    standin: DraStandIn,
) -> None:
    p = publisher(standin, config())
    p.publish(remap_failure(), later(0))
    assert ours(standin) == {RULE: ("gpu.nvidia.com", "gpu-7", "ROW_REMAP_FAILURE", "NoSchedule")}
    rule = standin.taint_rules[RULE]
    assert rule["apiVersion"] == "resource.k8s.io/v1"
    assert rule["spec"]["deviceSelector"]["pool"] == NODE
    assert rule["spec"]["taint"]["key"] == "gpuprobe.io/unhealthy"
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuprobe"
    assert rule["metadata"]["annotations"]["gpuprobe.io/gpu"] == f"gpu:6:{FAILED}"
    assert rule["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": f"uid-{NODE}"}
    ]
    # ROW_REMAP_FAILURE is among the node taint's codes: its device taint stands for it.
    assert standin.taints(NODE) == []
    reasons = [(e["reason"], e["regarding"]["kind"]) for e in standin.node_events(NODE)]
    assert ("DeviceTainted", "Node") in reasons
    p.publish(remap_failure(), later(30))  # a second round writes nothing more
    assert [w[0] for w in standin.rule_writes] == ["create"]


def test_effect_none_is_written_as_none_and_a_changed_effect_replaces_the_rule(
    standin: DraStandIn,
) -> None:
    publisher(standin, config("None")).publish(remap_failure(), later(0))
    assert ours(standin)[RULE][3] == "None"
    publisher(standin, config("NoExecute")).publish(remap_failure(), later(10))
    assert ours(standin) == {RULE: ("gpu.nvidia.com", "gpu-7", "ROW_REMAP_FAILURE", "NoExecute")}
    assert [w[0] for w in standin.rule_writes] == ["create", "delete", "create"]


def test_healthy_again_the_rule_goes_after_the_clear_delay_and_one_round(
    standin: DraStandIn,
) -> None:
    p = publisher(standin, config(clear=120))
    p.publish(remap_failure(), later(0))
    p.publish(healthy(), later(60))
    assert RULE in ours(standin)  # gone for 60 s of 120
    p.publish(healthy(), later(119))
    assert RULE in ours(standin)
    p.publish(healthy(), later(120))
    assert ours(standin) == {}
    removed = [e for e in standin.node_events(NODE) if e["reason"] == "DeviceTaintRemoved"]
    assert len(removed) == 1 and removed[0]["type"] == "Normal"


def foreign(name: str, labels: dict[str, str], device: str = "gpu-7") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": device},
            "taint": {"key": "example.com/maintenance", "value": "bios", "effect": "NoSchedule"},
        },
    }


def test_foreign_rules_survive_and_stale_own_rules_are_pruned_at_start(
    standin: DraStandIn,
) -> None:
    standin.add_rule(foreign("ops-maintenance-gpu-7", {"team": "ops"}))
    # gpuprobe's label on another key: still not ours (the key is not under gpuprobe.io/).
    standin.add_rule(foreign("odd", {"app.kubernetes.io/managed-by": "gpuprobe"}, "gpu-3"))
    # A rule of ours for a device no longer published (gpu-9) and one for a device whose
    # finding has gone (gpu-2): the first goes at once, the second after the clear delay.
    for device in ("gpu-9", "gpu-2"):
        body = foreign(f"gpuprobe-{NODE}-{device}-gpu-lost", {}, device)
        body["metadata"]["labels"] = {
            "app.kubernetes.io/managed-by": "gpuprobe",
            "gpuprobe.io/node": NODE,
        }
        body["metadata"]["annotations"] = {"gpuprobe.io/node": NODE, "gpuprobe.io/gpu": GPU3}
        body["spec"]["taint"] = {
            "key": "gpuprobe.io/unhealthy",
            "value": "GPU_LOST",
            "effect": "NoSchedule",
        }
        standin.add_rule(body)
    # Another node's rule of ours: that agent's, never this one's to touch.
    other = foreign("gpuprobe-gpu-node-18-gpu-0-gpu-lost", {}, "gpu-0")
    other["spec"]["deviceSelector"]["pool"] = "gpu-node-18"
    other["metadata"]["labels"] = {
        "app.kubernetes.io/managed-by": "gpuprobe",
        "gpuprobe.io/node": "gpu-node-18",
    }
    other["metadata"]["annotations"] = {"gpuprobe.io/node": "gpu-node-18"}
    other["spec"]["taint"]["key"] = "gpuprobe.io/unhealthy"
    standin.add_rule(other)

    # (One node of 8 GPUs, two of them quarantined already: the brake's 10 % would hold a
    # third; this test is about pruning.)
    p = publisher(standin, config(clear=300, fraction=0.5))
    p.publish(remap_failure(), later(0))
    names = set(standin.taint_rules)
    assert f"gpuprobe-{NODE}-gpu-9-gpu-lost" not in names  # stale: pruned at start
    assert {
        "ops-maintenance-gpu-7",
        "odd",
        f"gpuprobe-{NODE}-gpu-2-gpu-lost",
        "gpuprobe-gpu-node-18-gpu-0-gpu-lost",
        RULE,
    } == names
    p.publish(healthy(), later(300))
    assert set(standin.taint_rules) == {
        "ops-maintenance-gpu-7",
        "odd",
        "gpuprobe-gpu-node-18-gpu-0-gpu-lost",
    }
    deleted = [name for verb, _, name in standin.rule_writes if verb == "delete"]
    assert sorted(deleted) == sorted(
        [f"gpuprobe-{NODE}-gpu-9-gpu-lost", f"gpuprobe-{NODE}-gpu-2-gpu-lost", RULE]
    )


@pytest.mark.parametrize(
    ("release", "gate", "version"), [("1.37", True, "v1"), ("1.36", True, "v1beta2")]
)
def test_the_version_comes_from_discovery(
    tmp_path: Path, release: str, gate: bool, version: str
) -> None:
    standin = stand_in(tmp_path, release, gate=gate)
    standin.start()
    try:
        publisher(standin, config()).publish(remap_failure(), later(0))
        assert standin.rule_writes == [("create", version, RULE)]
        assert standin.taints(NODE) == []
    finally:
        standin.stop()


@pytest.mark.parametrize(("release", "dra"), [("1.36", False), ("1.36", True), ("1.37", False)])
def test_without_device_taint_rules_the_node_taint_as_before_and_nothing_written_there(
    tmp_path: Path, release: str, dra: bool
) -> None:
    # dra=False: no resource.k8s.io at all; 1.36 with DRA but without the feature gate.
    standin = stand_in(tmp_path, release, dra=dra, gate=False)
    standin.start()
    try:
        publisher(standin, config()).publish(remap_failure(), later(0))
        assert standin.taints(NODE) == [
            {"key": "gpuprobe.io/unhealthy", "value": "ROW_REMAP_FAILURE", "effect": "NoSchedule"}
        ]
        assert standin.taint_rules == {} and standin.rule_writes == []
        to_dra = [r for r in standin.requests if "/resource.k8s.io" in r[2]]
        assert {method for _, method, _, _ in to_dra} <= {"GET"}  # discovery only
    finally:
        standin.stop()


def test_node_wide_causes_keep_the_node_taint_beside_device_taints(standin: DraStandIn) -> None:
    report = remap_failure()
    runtime = CheckResult("toolkit", "toolkit: 1 finding", [NO_RUNTIME])
    report = dataclasses.replace(report, checks=[*report.checks, runtime])
    publisher(standin, config()).publish(report, later(0))
    assert list(ours(standin)) == [RULE]
    assert standin.taints(NODE) == [
        {"key": "gpuprobe.io/unhealthy", "value": "RUNTIME_NOT_CONFIGURED", "effect": "NoSchedule"}
    ]


def test_a_mig_gpu_is_tainted_on_each_mig_device_by_parent_uuid(tmp_path: Path) -> None:
    standin = stand_in(tmp_path)
    parent = "GPU-5f1c3b7e-8a2d-4c1e-9f0a-6b2d8e4c1a93"  # GPU3 of kube_reports
    migs = [
        (4, "MIG-a1b2c3d4-0000-5e6f-8a9b-0c1d2e3f4a50", parent, (19, 0, 1)),
        (4, "MIG-a1b2c3d4-0000-5e6f-8a9b-0c1d2e3f4a51", parent, (19, 1, 1)),
    ]
    standin.slices.clear()
    standin.add_slice(nvidia_slice(NODE, [(0, "GPU-other", "0000:18:00.0")], migs))
    standin.start()
    try:
        report = NodeReport(NODE, later(0), [CheckResult("gpus", "1 finding", [GPU_LOST])])
        publisher(standin, config()).publish(report, later(0))
        assert sorted(v[1] for v in ours(standin).values()) == [
            "gpu-4-mig-19-0-1",
            "gpu-4-mig-19-1-1",
        ]
    finally:
        standin.stop()


def test_the_brake_counts_the_fleets_gpus(tmp_path: Path) -> None:
    """10 nodes of 8 GPUs; at 10 % (8 GPUs) quarantined, a ninth GPU's rule is withheld and
    the agent says why; a GPU already quarantined keeps its rules."""
    standin = DraStandIn(tmp_path, manifest_rules())
    nodes = [f"gpu-node-{i:02}" for i in range(10)]
    for i, node in enumerate(nodes):
        standin.add_node(node, {"nvidia.com/gpu.present": "true"})
        gpus = [
            (g, f"GPU-{i:04x}{g:04x}-8e2b-4c1d-9a7e-000000000000", f"0000:{g:02x}:00.0")
            for g in range(8)
        ]
        standin.add_slice(nvidia_slice(node, gpus))
    standin.start()
    try:
        cfg = config()
        for i, node in enumerate(nodes[:9]):
            uuid = f"GPU-{i:04x}0000-8e2b-4c1d-9a7e-000000000000"
            lost = dataclasses.replace(GPU_LOST, resource=f"gpu:0:{uuid}")
            report = NodeReport(node, later(0), [CheckResult("gpus", "1 finding", [lost])])
            p = publisher(standin, cfg, node)
            p.publish(report, later(i))
            if i < 8:
                assert p.gpus.taints is not None and p.gpus.taints.withheld is None
        assert len(standin.taint_rules) == 8
        assert [f.code for f in p.findings()] == ["DEVICE_TAINT_WITHHELD"]
        assert p.findings()[0].message == (
            "a DeviceTaintRule is due but withheld: 8 of 80 GPUs in the fleet are already "
            "quarantined by gpuprobe's DeviceTaintRules (the brake holds new ones at 10% or more)"
        )
        # Without its device taint, the GPU_LOST on node 8 taints the node as before.
        assert standin.taints(nodes[8])[0]["value"] == "GPU_LOST"
    finally:
        standin.stop()


def test_events_go_to_the_pods_on_the_gpu_and_the_metric_counts_rules(
    standin: DraStandIn,
) -> None:
    report = remap_failure()
    failure = report.checks[0].findings[0]
    on_gpu = dataclasses.replace(failure, pods=(PodRef("research", "notebook-alice", "jupyter"),))
    report = dataclasses.replace(
        report, checks=[dataclasses.replace(report.checks[0], findings=[on_gpu])]
    )
    p = publisher(standin, config())
    p.publish(report, later(0))
    pod_events = [e for e in standin.events.values() if e["regarding"]["kind"] == "Pod"]
    assert [
        (e["metadata"]["namespace"], e["regarding"]["name"], e["reason"]) for e in pod_events
    ] == [("research", "notebook-alice", "DeviceTainted")]
    assert pod_events[0]["note"] == (
        f"GPU 6 (gpu:6:{FAILED}) has ROW_REMAP_FAILURE: DeviceTaintRule {RULE} taints its DRA "
        "device gpu-7 with gpuprobe.io/unhealthy=ROW_REMAP_FAILURE:NoSchedule"
    )
    loop = EffectsLoop(p, lambda _: None, config())
    metrics = {m.name: m for m in KubeCollector(loop).collect()}
    samples = {s.labels["effect"]: s.value for s in metrics["gpuprobe_device_taints"].samples}
    assert samples == {"None": 0, "NoSchedule": 1, "NoExecute": 0}
    assert p.gpus.data()["device_taints"]["rules"] == [
        {
            "name": RULE,
            "device": "gpu-7",
            "resource": f"gpu:6:{FAILED}",
            "code": "ROW_REMAP_FAILURE",
            "effect": "NoSchedule",
        }
    ]


def test_the_finding_says_what_was_done(standin: DraStandIn) -> None:
    """The loop's own result carries the rules; the pipeline's post-pass tells each in the
    finding it stands for."""
    own: list[CheckResult] = []
    effects = publisher(standin, config())
    loop = EffectsLoop(effects, own.append, config())
    report = remap_failure()
    loop.offer(report)
    loop.step()
    told = assemble(NODE, report.time, [*report.checks, own[-1]])
    assert told.checks[0].findings[0].message == (
        f"{report.checks[0].findings[0].message}; quarantined: its DRA device gpu-7 carries "
        f"gpuprobe.io/unhealthy=ROW_REMAP_FAILURE:NoSchedule (DeviceTaintRule {RULE})"
    )
    assert own[-1].name == "kubernetes" and own[-1].findings == []


def test_a_foreign_rule_under_our_name_is_never_taken_for_ours(standin: DraStandIn) -> None:
    squatter = foreign(RULE, {"team": "ops"})
    standin.add_rule(squatter)
    p = publisher(standin, config(clear=0))
    p.publish(remap_failure(), later(0))
    p.publish(healthy(), later(10))
    p.publish(healthy(), later(20))
    assert standin.taint_rules[RULE]["metadata"]["labels"] == {"team": "ops"}
    assert [w[0] for w in standin.rule_writes] == ["create"]  # refused 409, never a delete


def test_an_event_that_failed_is_sent_at_the_next_attempt(standin: DraStandIn) -> None:
    p = publisher(standin, config())
    real = p.gpus.api.create_event
    failures = [KubeError("create", "500", "etcd leader changed")]

    def flaky(event: dict[str, Any]) -> None:
        if event["reason"] == "DeviceTainted" and failures:
            raise failures.pop()
        real(event)

    p.gpus.api.create_event = flaky  # type: ignore[method-assign]
    with pytest.raises(KubeError):
        p.publish(remap_failure(), later(0))
    assert not [e for e in standin.node_events(NODE) if e["reason"] == "DeviceTainted"]
    p.publish(remap_failure(), later(5))
    assert [e["reason"] for e in standin.node_events(NODE)].count("DeviceTainted") == 1


def test_a_device_taint_refused_leaves_the_node_its_conditions_and_taint(tmp_path: Path) -> None:
    """An overlay that took the devicetaintrules grant away while the feature is on: 403. The
    conditions and the node taint are written as without device taints, the agent says why,
    and the loop counts the refusal and tries again within 30 s."""
    rules = [r for r in manifest_rules() if "devicetaintrules" not in r.resources]
    standin = DraStandIn(tmp_path, rules)
    standin.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    standin.add_slice(nvidia_slice(NODE, published(remap_failure())))
    standin.start()
    try:
        p = publisher(standin, config())
        loop = EffectsLoop(p, lambda _: None, config(), wall=lambda: later(0))
        loop.offer(remap_failure())
        delay = loop.step()
        assert standin.conditions(NODE)["GPUHardwareReady"]["reason"] == "RowRemapFailure"
        assert standin.taints(NODE)[0]["value"] == "ROW_REMAP_FAILURE"
        (finding,) = p.findings()
        assert finding.code == "DEVICE_TAINT_WITHHELD"
        assert finding.message.startswith("device taints not brought up to date: list 403: ")
        assert loop.errors == {("list", "403"): 1}
        assert delay == 30.0
    finally:
        standin.stop()
