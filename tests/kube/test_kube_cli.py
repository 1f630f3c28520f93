"""`gpuprobe check --publish` and `gpuprobe audit --kubeconfig` against the API stand-in."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import gpuprobe, snapshot
from gpuprobe.effects.taints import TAINT_KEY
from kube_standin import KubeStandIn, running

NODE = "gpu-node-17"


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def test_check_publish_writes_conditions_and_events_but_no_taint(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"kubernetes": {"taint": {"enabled": True}}}))
    args = ("check", "--snapshot", snapshot("synthetic-gpu-lost"), "--node-name", NODE)
    kube = ("--publish", "--kubeconfig", str(standin.kubeconfig()), "--config", str(config))
    done = gpuprobe(*args, *kube)
    assert done.returncode == 2, done.stderr
    hardware = standin.conditions(NODE)["GPUHardwareReady"]
    assert (hardware["status"], hardware["reason"]) == ("False", "GpuLost")
    assert [(e["type"], e["reason"]) for e in standin.node_events(NODE)] == [("Warning", "GpuLost")]
    assert standin.taints(NODE) == []  # a one-shot run never taints
    again = gpuprobe(*args, *kube)  # a second run finds its event there: no second one
    assert again.returncode == 2, again.stderr
    assert len(standin.node_events(NODE)) == 1


def test_check_publish_failing_says_so_and_an_ok_run_exits_3(standin: KubeStandIn) -> None:
    kubeconfig = str(standin.kubeconfig())
    standin.stop()
    done = gpuprobe(
        "check",
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
        "--only",
        "driver",
        "--node-name",
        NODE,
        "--publish",
        "--kubeconfig",
        kubeconfig,
        timeout=120,
    )
    assert done.returncode == 3
    (line,) = done.stderr.splitlines()
    assert line.startswith("gpuprobe: publishing to Kubernetes failed: get: unreachable:")


def test_kube_flags_misused_are_usage_errors(tmp_path: Path) -> None:
    healthy = snapshot("synthetic-h100-8gpu-healthy")
    alone = gpuprobe("check", "--snapshot", healthy, "--kubeconfig", str(tmp_path / "k"))
    assert (alone.returncode, alone.stderr) == (
        64,
        "gpuprobe: --kubeconfig goes with --publish (see gpuprobe check --help)\n",
    )
    nowhere = gpuprobe("check", "--snapshot", healthy, "--publish")
    assert nowhere.returncode == 64
    assert nowhere.stderr == (
        "gpuprobe: no Kubernetes access: give --kubeconfig (no in-cluster credentials) "
        "(see gpuprobe check --help)\n"
    )
    (tmp_path / "k").write_text("clusters: [oops\n")
    broken = gpuprobe(
        "check", "--snapshot", healthy, "--publish", "--kubeconfig", str(tmp_path / "k")
    )
    assert broken.returncode == 64
    assert len(broken.stderr.splitlines()) == 1 and "kubernetes access" in broken.stderr


def test_audit_shows_the_gpuprobe_conditions_and_taints_of_the_gpu_nodes(
    standin: KubeStandIn,
) -> None:
    gpuprobe(
        "check",
        "--snapshot",
        snapshot("synthetic-gpu-lost"),
        "--node-name",
        NODE,
        "--publish",
        "--kubeconfig",
        str(standin.kubeconfig()),
    )
    taint = {"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"}
    standin.touch(NODE, taints=[taint, {"key": "other", "effect": "NoSchedule"}])
    standin.add_node("gpu-node-18", {"nvidia.com/gpu.present": "true"})
    standin.add_node("cpu-node-1")
    args = (
        "audit",
        "--targets",
        "127.0.0.1:9",
        "--deadline",
        "1",
        "--kubeconfig",
        str(standin.kubeconfig()),
    )
    done = gpuprobe(*args, "--json")
    kube = json.loads(done.stdout)["kubernetes"]
    assert kube["error"] is None
    assert [n["node"] for n in kube["nodes"]] == [NODE, "gpu-node-18"]
    mine = kube["nodes"][0]
    assert [(c["type"], c["status"], c["reason"]) for c in mine["conditions"]] == [
        ("GPUHardwareReady", "False", "GpuLost"),
        ("GPURuntimeReady", "True", "AllChecksPassed"),
        ("GPUNetworkReady", "True", "AllChecksPassed"),
        ("GPUStorageReady", "True", "AllChecksPassed"),
    ]
    assert mine["taints"] == [taint]
    assert kube["nodes"][1] == {"node": "gpu-node-18", "conditions": [], "taints": []}
    text = gpuprobe(*args).stdout
    assert "kubernetes  2 GPU nodes, 1 not ready or tainted" in text
    assert f"  {NODE}  GPUHardwareReady=False, GPURuntimeReady=True" in text
    assert "TAINT gpuprobe.io/unhealthy=GPU_LOST:NoSchedule" in text
    assert "      GPUHardwareReady GpuLost: GPU 5 is lost" in text


def test_serve_with_kubernetes_on_and_no_access_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("kubernetes: {enabled: true}\n")
    done = gpuprobe(
        "serve",
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
        "--config",
        str(config),
        "--grpc-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    )
    assert done.returncode == 64
    assert done.stderr.splitlines()[-1] == (
        "gpuprobe: kubernetes: no in-cluster credentials "
        "(/var/run/secrets/kubernetes.io/serviceaccount/token and $KUBERNETES_SERVICE_HOST); "
        "give --kubeconfig (see gpuprobe serve --help)"
    )


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
    server: https://10.0.0.1:6443
  name: gpu-cluster
contexts:
- context:
    cluster: gpu-cluster
    user: gpuprobe
  name: gpuprobe@gpu-cluster
current-context: gpuprobe@gpu-cluster
users:
- name: gpuprobe
  user:
    token: abc
"""


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (KUBECONFIG.replace("clusters:", "clusterz:"), "no 'clusters' list"),
        (gzip.compress(KUBECONFIG.encode()), "not UTF-8 text (a binary file?)"),
        (b"\x00\x01kubeconfig",
         "unacceptable character #x0000: special characters are not allowed"),
        ("- a\n- b\n", "a YAML list, not a mapping"),
        (KUBECONFIG.replace("  name: gpu-cluster\n", ""), "clusters[0] has no name"),
        (KUBECONFIG.replace("users:\n- name: gpuprobe", "users:\n- nom: gpuprobe"),
         "users[0] has no name"),
    ],
    ids=["no-clusters", "gzip", "nul", "list", "nameless-cluster", "nameless-user"],
)  # fmt: skip
def test_a_file_that_is_no_kubeconfig_is_one_line(
    tmp_path: Path, content: str | bytes, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    healthy = snapshot("synthetic-h100-8gpu-healthy")
    done = gpuprobe("check", "--snapshot", healthy, "--publish", "--kubeconfig", str(path))
    assert (done.returncode, done.stdout) == (64, "")
    assert done.stderr == (
        f"gpuprobe: kubernetes access ({path}): not a kubeconfig: {problem} "
        "(see gpuprobe check --help)\n"
    )
