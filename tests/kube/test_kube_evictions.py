"""Eviction of the pods that hold a failed GPU (remediation.evict_pods) with the real client
library against the API stand-in's Eviction subresource and PodDisruptionBudgets
(tests/kube_dra.py): only the pods attribution names on the GPU, never a DaemonSet's or the
agent's, never a delete; a PDB that allows no disruption keeps the pod and bounds the retries;
the per-GPU cap survives restarts within a boot; the fleet's breaker with many agents."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_reports import later

from conftest import snapshot
from gpuprobe.config import Config, KubernetesConfig, RemediationConfig
from gpuprobe.effects.daemon import KubeCollector
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.host import snapshot_host
from gpuprobe.kube.api import Access, KubeApi
from gpuprobe.pipeline import assemble, run_checks
from gpuprobe.report import CheckResult, Finding, NodeReport, PodRef
from kube_dra import PDB_MESSAGE, DraStandIn
from kube_dra import gpu_pod as pod
from kube_standin import manifest_rules

NODE = "gpu-node-17"
FAILED = "gpu:2:GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002"  # the ECC snapshot's GPU 2
BOOT = "f3c5a1d2-6e7b-4c8d-9a0b-1c2d3e4f5a6b"


def ecc_report(node: str = NODE) -> NodeReport:
    """The ECC snapshot's report: ECC_UNCORRECTABLE on GPU 2, which attribution says
    ml-team/llama-pretrain-0 holds (with GPUs 0, 1 and 3); vLLM pods hold GPUs 4 and 5."""
    host = snapshot_host(snapshot("synthetic-k8s-ecc-on-training-gpu"), node)
    return run_checks(host, Config(), ["gpus", "workloads"])


def pdb(name: str, namespace: str, allowed: int, **match: str) -> dict[str, Any]:
    """A PodDisruptionBudget with the status its controller wrote."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": match}},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": allowed,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
        },
    }


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[DraStandIn]:
    s = DraStandIn(tmp_path, manifest_rules())
    s.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    s.add_pod(pod("ml-team", "llama-pretrain-0", "StatefulSet", **{"app": "llama"}))
    s.add_pod(pod("inference", "vllm-7d9f8-kq2xp", "ReplicaSet", app="vllm"))
    s.add_pod(pod("research", "notebook-alice", None))
    s.start()
    try:
        yield s
    finally:
        s.stop()


def remediation(state: Path, **extra: Any) -> RemediationConfig:
    return RemediationConfig(evict_pods=True, state_dir=str(state), **extra)


def publisher(
    standin: DraStandIn, state: Path, node: str = NODE, boot: str = BOOT, **extra: Any
) -> NodeEffects:
    config = standin.directory / "kubeconfig-agent-token"
    if not config.exists():
        standin.kubeconfig()
    api = KubeApi(Access(kubeconfig=str(config)), timeout=5)
    return NodeEffects(api, node, KubernetesConfig(), "run1", remediation(state, **extra), boot)


def test_an_ecc_fault_evicts_the_pod_holding_the_gpu_and_only_it(
    standin: DraStandIn, tmp_path: Path
) -> None:
    report = ecc_report()
    p = publisher(standin, tmp_path)
    p.publish(report, later(0))
    assert [(ns, name, code) for _, ns, name, code in standin.evictions] == [
        ("ml-team", "llama-pretrain-0", 201)
    ]
    assert standin.deleted_pods == [("ml-team", "llama-pretrain-0")]
    assert ("inference", "vllm-7d9f8-kq2xp") in standin.pods
    # Through the Eviction API only: no request deleted a pod.
    assert not [r for r in standin.requests if r[1] == "DELETE" and "/pods/" in r[2]]
    events = [
        (e["regarding"]["kind"], e["regarding"]["name"], e["reason"])
        for e in standin.events.values()
    ]
    assert ("Pod", "llama-pretrain-0", "GpuPodEvicted") in events
    assert ("Node", NODE, "GpuPodEvicted") in events
    assert p.gpus.eviction_outcomes()["evicted"] == 1
    # The Node records it, for the fleet's breaker.
    assert standin.nodes[NODE]["metadata"]["annotations"]["gpuprobe.io/evictions"]
    ledger = json.loads((tmp_path / "evictions.json").read_text())
    uuid = FAILED.split(":")[2]
    assert ledger == {"format": 1, "boot_id": BOOT, "gpus": {uuid: 1}, "tries": {uuid: 1}}
    p.publish(report, later(30))  # the pod is gone: nothing more
    assert len(standin.evictions) == 1


def test_a_pdb_allowing_no_disruption_keeps_the_pod_with_bounded_retries(
    standin: DraStandIn, tmp_path: Path
) -> None:
    standin.add_pdb(pdb("llama", "ml-team", 0, app="llama"))
    report = ecc_report()
    p = publisher(standin, tmp_path)
    for tenth in range(401):  # 40 s of rounds every 100 ms, as fast as the loop could wake
        p.publish(report, later(tenth / 10))
    tries = [e for e in standin.evictions if e[2] == "llama-pretrain-0"]
    assert {code for *_, code in tries} == {429}
    assert 2 <= len(tries) <= 12
    assert len(tries) == 6  # after 0, 1, 3, 7, 15 and 31 s
    assert ("ml-team", "llama-pretrain-0") in standin.pods
    withheld = [f for f in p.findings() if f.code == "EVICTION_WITHHELD"]
    assert len(withheld) == 1
    assert withheld[0].resource == FAILED
    assert withheld[0].pods == (PodRef("ml-team", "llama-pretrain-0"),)
    assert withheld[0].message == (
        "pod ml-team/llama-pretrain-0 holds failed GPU 2 and is not evicted yet: the API server "
        f"refused ({PDB_MESSAGE} The disruption budget llama needs 1 healthy pods and has 1 "
        "currently); tried 6 times, retrying at a bounded pace"
    )
    blocked = [e for e in standin.events.values() if e["reason"] == "EvictionBlocked"]
    assert sorted(e["regarding"]["kind"] for e in blocked) == ["Node", "Pod"]  # once, not per try
    assert p.gpus.eviction_outcomes()["blocked"] == 6
    # The budget allows one disruption now: the next try evicts it.
    standin.pdbs[("ml-team", "llama")]["status"]["disruptionsAllowed"] = 1
    p.publish(report, later(63))
    assert standin.evictions[-1][2:] == ("llama-pretrain-0", 201)
    assert [f.code for f in p.findings()] == []


def test_daemonset_pods_and_the_agent_are_never_evicted(
    standin: DraStandIn, tmp_path: Path
) -> None:
    standin.add_pod(pod("gpu-operator", "nvidia-dcgm-exporter-4xq9z", "DaemonSet"))
    standin.add_pod(
        pod("gpuprobe", "gpuprobe-8x2kq", None, **{"app.kubernetes.io/name": "gpuprobe"})
    )
    fault = Finding(
        "ECC_UNCORRECTABLE",
        ecc_report().checks[0].findings[0].severity,
        "GPU 2 has uncorrectable ECC errors",
        ecc_report().checks[0].findings[0].action,
        FAILED,
        (
            PodRef("gpu-operator", "nvidia-dcgm-exporter-4xq9z", "exporter"),
            PodRef("gpuprobe", "gpuprobe-8x2kq", "agent"),
            PodRef("research", "notebook-alice", "jupyter"),
        ),
    )
    report = NodeReport(NODE, later(0), [CheckResult("gpus", "1 finding", [fault])])
    p = publisher(standin, tmp_path)
    p.publish(report, later(0))
    assert [(ns, name) for _, ns, name, _ in standin.evictions] == [("research", "notebook-alice")]
    assert p.gpus.data()["evictions"]["spared"] == [
        {
            "pod": "gpu-operator/nvidia-dcgm-exporter-4xq9z",
            "resource": FAILED,
            "why": "a DaemonSet's pod",
        },
        {"pod": "gpuprobe/gpuprobe-8x2kq", "resource": FAILED, "why": "gpuprobe's own pod"},
    ]


def test_the_per_gpu_cap_survives_a_restart_within_the_boot(
    standin: DraStandIn, tmp_path: Path
) -> None:
    p = publisher(standin, tmp_path, max_evictions_per_gpu=1)
    p.publish(ecc_report(), later(0))
    assert len(standin.evictions) == 1
    # The training job comes back on the same GPU; the agent restarts meanwhile.
    standin.add_pod(pod("ml-team", "llama-pretrain-0", "StatefulSet", app="llama"))
    restarted = publisher(standin, tmp_path, max_evictions_per_gpu=1)
    restarted.publish(ecc_report(), later(60))
    assert len(standin.evictions) == 1
    assert [f.message for f in restarted.findings()] == [
        "pod ml-team/llama-pretrain-0 holds failed GPU 2 and is not evicted: 1 pods were "
        "already evicted from GPU 2 this boot (remediation.max_evictions_per_gpu: 1): the GPU "
        "needs a repair, not more evictions"
    ]
    # A new boot (the node rebooted, the GPU with it): the count starts again.
    rebooted = publisher(standin, tmp_path, boot="0a1b2c3d-new-boot", max_evictions_per_gpu=1)
    rebooted.publish(ecc_report(), later(120))
    assert [code for *_, code in standin.evictions] == [201, 201]


def test_the_fleet_breaker_stops_evictions_across_many_agents(tmp_path: Path) -> None:
    """40 agents, each with a failed GPU held by one pod; the breaker stops at 10 evictions
    within the window: agents one after the other evict exactly 10, then each says why."""
    standin = DraStandIn(tmp_path, manifest_rules())
    nodes = [f"gpu-node-{i:02}" for i in range(40)]
    for node in nodes:
        standin.add_node(node, {"nvidia.com/gpu.present": "true"})
        standin.add_pod(pod("ml-team", f"train-{node}", "StatefulSet", node=node, app=node))
    standin.start()
    try:
        publishers = []
        for i, node in enumerate(nodes):
            fault = dataclasses.replace(
                ecc_report(node).checks[0].findings[0],
                pods=(PodRef("ml-team", f"train-{node}", "trainer"),),
            )
            report = NodeReport(node, later(i), [CheckResult("gpus", "1", [fault])])
            p = publisher(standin, tmp_path / node, node, fleet_max_evictions=10)
            (tmp_path / node).mkdir()
            p.publish(report, later(i))
            publishers.append(p)
        assert [code for *_, code in standin.evictions] == [201] * 10
        stopped = publishers[10].findings()
        assert [f.code for f in stopped] == ["EVICTION_WITHHELD"]
        assert stopped[0].message.endswith(
            "is not evicted: the GPU nodes' agents evicted 10 pods within the last 3600 s "
            "(the circuit breaker stops at 10: remediation.fleet_max_evictions)"
        )
        assert publishers[39].gpus.eviction_outcomes()["withheld"] == 1
        # Two minutes on, the breaker is asked again (the loop wakes for it: next_due), and
        # still holds; once the window has passed, the pod it held is evicted.
        late = publishers[20]
        assert late.gpus.next_due() == later(20 + 120)
        late.publish(late.gpus.evictor._report, later(200))  # type: ignore[union-attr, arg-type]
        assert len(standin.evictions) == 10
        late.publish(late.gpus.evictor._report, later(3700))  # type: ignore[union-attr, arg-type]
        assert standin.evictions[-1][2:] == ("train-gpu-node-20", 201)
        assert late.findings() == []
    finally:
        standin.stop()


def test_the_breaker_bounds_agents_deciding_at_once(tmp_path: Path) -> None:
    """40 agents at the same moment: the breaker reads the Nodes, so agents deciding together
    may pass it by those in flight, never by more."""
    standin = DraStandIn(tmp_path, manifest_rules())
    nodes = [f"gpu-node-{i:02}" for i in range(40)]
    for node in nodes:
        standin.add_node(node, {"nvidia.com/gpu.present": "true"})
        standin.add_pod(pod("ml-team", f"train-{node}", "StatefulSet", node=node, app=node))
    standin.start()
    base = ecc_report().checks[0].findings[0]
    standin.kubeconfig()  # written once, before the agents read it
    failed: list[BaseException] = []
    try:
        start = threading.Barrier(8)

        def agent(batch: list[str]) -> None:
            start.wait()
            try:
                decide(batch)
            except BaseException as exc:
                failed.append(exc)

        def decide(batch: list[str]) -> None:
            for node in batch:
                fault = dataclasses.replace(base, pods=(PodRef("ml-team", f"train-{node}", "t"),))
                report = NodeReport(node, later(0), [CheckResult("gpus", "1", [fault])])
                (tmp_path / node).mkdir()
                publisher(standin, tmp_path / node, node, fleet_max_evictions=10).publish(
                    report, later(0)
                )

        threads = [threading.Thread(target=agent, args=(nodes[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failed == []
        evicted = [e for e in standin.evictions if e[3] == 201]
        assert 10 <= len(evicted) <= 10 + 8 - 1
    finally:
        standin.stop()


def test_the_metric_counts_outcomes(standin: DraStandIn, tmp_path: Path) -> None:
    p = publisher(standin, tmp_path)
    p.publish(ecc_report(), later(0))
    loop = EffectsLoop(p, lambda _: None, KubernetesConfig())
    metrics = {m.name: m for m in KubeCollector(loop).collect()}
    samples = {
        s.labels["outcome"]: s.value
        for s in metrics["gpuprobe_evictions"].samples
        if s.name.endswith("_total")
    }
    assert samples == {"evicted": 1, "blocked": 0, "gone": 0, "withheld": 0, "failed": 0}


def test_the_finding_names_the_pod_evicted(standin: DraStandIn, tmp_path: Path) -> None:
    own: list[CheckResult] = []
    effects = publisher(standin, tmp_path)
    loop = EffectsLoop(effects, own.append, KubernetesConfig())
    report = ecc_report()
    loop.offer(report)
    loop.step()
    told = assemble(NODE, report.time, [*report.checks, own[-1]])
    ecc = told.checks[0].findings[0]
    assert ecc.message.endswith("; evicted: pod ml-team/llama-pretrain-0")
    assert own[-1].data["evictions"]["evicted"][0]["pod"] == "ml-team/llama-pretrain-0"


def test_a_budget_refusing_for_good_ends_in_a_finding_not_endless_retries(
    standin: DraStandIn, tmp_path: Path
) -> None:
    standin.add_pdb(pdb("llama", "ml-team", 0, app="llama"))
    report = ecc_report()
    p = publisher(standin, tmp_path, max_eviction_requests_per_gpu=4)
    for second in range(0, 600, 5):
        p.publish(report, later(second))
    assert len(standin.evictions) == 4
    (finding,) = p.findings()
    assert finding.message.startswith(
        "pod ml-team/llama-pretrain-0 holds failed GPU 2 and is not evicted: 4 eviction "
        "requests were made for GPU 2 this boot (remediation.max_eviction_requests_per_gpu: 4); "
        f"the last refusal: {PDB_MESSAGE}"
    )
    assert p.gpus.next_due() is None  # nothing left to wake for
    restarted = publisher(standin, tmp_path, max_eviction_requests_per_gpu=4)
    restarted.publish(report, later(700))
    assert len(standin.evictions) == 4
    assert [f.code for f in restarted.findings()] == ["EVICTION_WITHHELD"]


def test_an_eviction_refused_by_rbac_is_said_and_the_events_still_go(tmp_path: Path) -> None:
    rules = [r for r in manifest_rules() if "pods/eviction" not in r.resources]
    standin = DraStandIn(tmp_path, rules)
    standin.add_node(NODE, {"nvidia.com/gpu.present": "true"})
    standin.add_pod(pod("ml-team", "llama-pretrain-0", "StatefulSet", app="llama"))
    standin.start()
    try:
        p = publisher(standin, tmp_path)
        loop = EffectsLoop(p, lambda _: None, KubernetesConfig(), wall=lambda: later(0))
        loop.offer(ecc_report())
        loop.step()
        assert loop.errors == {("create", "403"): 1} and loop.up
        assert "EccUncorrectable" in {e["reason"] for e in standin.node_events(NODE)}
        (finding,) = p.findings()
        assert finding.message.startswith(
            "pod ml-team/llama-pretrain-0 holds failed GPU 2 and is not evicted yet: the API "
            'server refused (403: pods "llama-pretrain-0" is forbidden'
        )
        assert p.gpus.eviction_outcomes()["failed"] == 1
        assert p.gpus.next_due() == later(1)
    finally:
        standin.stop()
