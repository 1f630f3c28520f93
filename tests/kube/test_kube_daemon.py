"""The daemon with Kubernetes on: it publishes after its rounds, exports its own state, and
keeps serving while the API server is slow or down."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import snapshot
from gpuprobe.config import Config, KubernetesConfig, TaintConfig
from gpuprobe.effects.taints import TAINT_KEY
from kube_standin import KubeStandIn, running
from serving import in_process_agent, serve_process, wait_for

NODE = "gpu-node-17"
QUICK = KubernetesConfig(start_jitter_seconds=0, taint=TaintConfig(enabled=True))


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def hardware(standin: KubeStandIn) -> str | None:
    found = standin.conditions(NODE).get("GPUHardwareReady")
    return found["status"] if found else None


def test_the_agent_sets_conditions_events_and_the_taint_of_a_lost_gpu(standin: KubeStandIn) -> None:
    with in_process_agent(
        "synthetic-gpu-lost",
        config=Config(kubernetes=QUICK),
        node_name=NODE,
        kubeconfig=str(standin.kubeconfig()),
    ) as agent:
        wait_for(lambda: hardware(standin) == "False")
        condition = standin.conditions(NODE)["GPUHardwareReady"]
        assert condition["reason"] == "GpuLost"
        assert condition["message"].startswith("GPU 5 is lost: NVML reports GpuIsLost")
        wait_for(lambda: standin.taints(NODE))
        assert standin.taints(NODE) == [
            {"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"}
        ]
        wait_for(lambda: "GpuLost" in {e["reason"] for e in standin.node_events(NODE)})
        page = wait_for(
            lambda: (m := metrics(agent.metrics_port)) and "gpuprobe_kubernetes_up 1.0" in m and m
        )
        assert not [
            line
            for line in page.splitlines()
            if line.startswith("gpuprobe_kubernetes_errors_total{")
        ]
        own = wait_for(lambda: (r := agent.store.current().report) and r.check("kubernetes"))
        assert own.findings == []


def test_a_slow_then_dead_api_server_never_holds_up_the_agent(standin: KubeStandIn) -> None:
    with in_process_agent(
        "synthetic-h100-8gpu-healthy",
        config=Config(kubernetes=KubernetesConfig(start_jitter_seconds=0, timeout_seconds=2)),
        node_name=NODE,
        kubeconfig=str(standin.kubeconfig()),
    ) as agent:
        wait_for(lambda: hardware(standin) == "True")
        assert agent.kube is not None
        wait_for(lambda: agent.kube is not None and agent.kube.loop.up)
        standin.faults.delay = 5.0
        before = len(standin.requests)
        agent.kube.loop.effects.forget()
        agent.kube.loop.offer(None)  # the loop now waits on a slow GET (its 2 s timeout) ...
        time.sleep(0.2)
        started = time.monotonic()
        page = metrics(agent.metrics_port)  # ... while /metrics answers at once
        assert time.monotonic() - started < 0.5
        assert "gpuprobe_node_status" in page
        wait_for(
            lambda: (
                'gpuprobe_kubernetes_errors_total{code="timeout",verb="get"}'
                in metrics(agent.metrics_port)
            )
        )
        assert len(standin.requests) == before  # the slow answer came after the client gave up
        standin.faults.delay = 0
        wait_for(lambda: agent.kube is not None and agent.kube.loop.up)  # back after its backoff
        with standin.down():
            agent.kube.loop.effects.forget()
            agent.kube.loop.offer(None)
            wait_for(lambda: "gpuprobe_kubernetes_up 0.0" in metrics(agent.metrics_port))
            page = metrics(agent.metrics_port)
            assert 'gpuprobe_kubernetes_errors_total{code="unreachable",verb="get"}' in page
            assert agent.store.current().report is not None


def test_serve_with_kubeconfig_publishes(standin: KubeStandIn, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"kubernetes": {"start_jitter_seconds": 0}}))
    with serve_process(
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
        "--node-name",
        NODE,
        "--kubeconfig",
        str(standin.kubeconfig()),
        "--config",
        str(config),
    ) as served:
        wait_for(lambda: hardware(standin) == "True")
        assert "gpuprobe_kubernetes_up 1.0" in wait_for(
            lambda: (m := served.metrics()) and "gpuprobe_kubernetes_up 1.0" in m and m
        )


def test_the_brake_in_the_daemon_raises_taint_withheld_and_says_so_in_an_event(
    standin: KubeStandIn,
) -> None:
    tainted = [{"key": TAINT_KEY, "value": "XID", "effect": "NoSchedule"}]
    for i in range(4):  # 1 of the 5 GPU nodes already tainted: 20 %, the brake's default
        standin.add_node(
            f"gpu-node-{i}",
            {"nvidia.com/gpu.present": "true"},
            **({"taints": tainted} if i == 0 else {}),
        )
    with in_process_agent(
        "synthetic-gpu-lost",
        config=Config(kubernetes=QUICK),
        node_name=NODE,
        kubeconfig=str(standin.kubeconfig()),
    ) as agent:
        own = wait_for(
            lambda: (
                (r := agent.store.current().report)
                and (k := r.check("kubernetes"))
                and k.findings
                and k
            )
        )
        (finding,) = own.findings
        assert finding.code == "TAINT_WITHHELD"
        assert "1 of 5 GPU nodes already carry gpuprobe.io/unhealthy" in finding.message
        event = wait_for(
            lambda: next(
                (e for e in standin.node_events(NODE) if e["reason"] == "TaintWithheld"), None
            )
        )
        assert event["type"] == "Warning"
        assert event["note"] == f"{finding.message} (node)"
        assert standin.taints(NODE) == []
        page = metrics(agent.metrics_port)
        assert (
            'gpuprobe_finding{action="NONE",check="kubernetes",code="TAINT_WITHHELD",'
            'resource="node",severity="WARNING"} 1.0' in page
        )


def test_sigterm_while_a_call_hangs_still_stops_at_once(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"kubernetes": {"start_jitter_seconds": 0}}))
    standin.faults.delay = 30.0  # every answer hangs past the agent's 10 s timeout
    with serve_process(
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
        "--node-name",
        NODE,
        "--kubeconfig",
        str(standin.kubeconfig()),
        "--config",
        str(config),
    ) as served:
        wait_for(lambda: len(standin.requests) > 0 or standin._connections)
        served.get("/metrics")
        started = time.monotonic()
        served.proc.terminate()
        assert served.proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
