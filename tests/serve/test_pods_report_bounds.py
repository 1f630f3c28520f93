"""A node with 5,000 GPU containers: the `pods` check judges them all and the agent's
GetReport, through a real gRPC client, stays under 1 MB (3,001 containers once made 2.6 MB,
and about 5,000 would pass the 4 MB every gRPC client refuses by default)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import snapshot
from gpuprobe.checks.rules.pods_bounds import MAX_LISTED, MAX_NAMED
from gpuprobe.client import Client
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.serve.agent import Agent, ServeOptions
from serving import LOOPBACK, LOOPBACK_PEERS, PASSIVE, wait_for

CONTAINERS = 5000
TASKS = "rootfs/run/containerd/io.containerd.runtime.v2.task/k8s.io"
SOURCE = "synthetic-pods-cuda12.8-geforce-550"


def crowded_node(tmp_path: Path) -> Path:
    """The GeForce node whose CUDA 12.8 image needs a newer driver, running 5,000 of that
    container (each its own pod, its spec as containerd writes it, its log with PyTorch's
    driver-too-old error): the worst case, every container a finding and a failure."""
    node = tmp_path / "node"
    shutil.copytree(snapshot(SOURCE), node, symlinks=True)
    tasks = node / TASKS
    (template_dir,) = [
        d
        for d in tasks.iterdir()
        if json.loads((d / "config.json").read_text())["annotations"].get(
            "io.kubernetes.cri.container-type"
        )
        == "container"
    ]
    template = json.loads((template_dir / "config.json").read_text())
    (log_dir,) = (node / "rootfs/var/log/pods").glob("ml-team_llama-finetune-0_*")
    crash = (log_dir / "trainer/0.log").read_text()
    for i in range(CONTAINERS):
        pod, uid = f"llama-finetune-{i + 1}", f"7c1e0028-2d4b-4a8e-9f3c-{i + 1:012x}"
        spec = json.loads(json.dumps(template))
        notes = spec["annotations"]
        notes["io.kubernetes.cri.sandbox-name"] = pod
        notes["io.kubernetes.cri.sandbox-uid"] = uid
        spec["hostname"] = pod
        cid = f"{i + 1:064x}"
        (tasks / cid).mkdir()
        (tasks / cid / "config.json").write_text(json.dumps(spec))
        logs = node / f"rootfs/var/log/pods/ml-team_{pod}_{uid}/trainer"
        logs.mkdir(parents=True)
        (logs / "0.log").write_text(crash)
    return node


def test_get_report_stays_under_1_mb_with_5000_gpu_containers(tmp_path: Path) -> None:
    host = snapshot_host(str(crowded_node(tmp_path)))
    config = Config(bandwidth=LOOPBACK_PEERS)
    agent = Agent(host, config, PASSIVE, ServeOptions(**LOOPBACK))
    agent.start()
    try:
        wait_for(lambda: agent.store.current().report is not None, timeout=120)
        with Client(f"127.0.0.1:{agent.grpc_port}") as client:
            message = client.get_report_message(timeout=30)
            report = client.get_report(timeout=30)
    finally:
        agent.stop(grace=0.5)
    size = message.ByteSize()
    assert size < 1_000_000, size
    (pods,) = [c for c in report.checks if c.name == "pods"]
    judged = CONTAINERS + 1  # the snapshot's own container too
    assert pods.summary == (
        f"{judged} GPU container(s); {judged} need a newer driver; 512 pod(s) failed for GPU "
        "reasons"
    )
    assert len(pods.data["containers"]) == MAX_LISTED
    assert pods.data["containers_not_listed"] == {
        "count": judged - MAX_LISTED,
        "verdicts": {"too-new": judged - MAX_LISTED},
    }
    assert len(pods.data["failures"]) == MAX_LISTED
    assert pods.data["failures_not_listed"]["count"] == 512 - MAX_LISTED
    assert pods.data["logs"]["containers_not_read"] == judged - 512
    too_new = [f for f in pods.findings if f.code == "IMAGE_CUDA_TOO_NEW"]
    assert len(too_new) == MAX_NAMED + 1  # one GPU each, and one for the rest
    rest = too_new[-1]
    assert (rest.resource, rest.severity.value) == ("node", "CRITICAL")
    assert rest.message.startswith(
        f"{judged - MAX_NAMED} more GPU container(s) run images that need more CUDA than "
        "driver 550.54.15 (CUDA 12.4) gives their GPUs (images' CUDA: 12.8 ×"
        f"{judged - MAX_NAMED}); only the first {MAX_NAMED} are named one by one"
    )
    failed = [f for f in pods.findings if f.code == "POD_GPU_FAILURE"]
    assert len(failed) == MAX_NAMED + 1
    assert failed[-1].message.startswith(
        f"{512 - MAX_NAMED} more pod failure(s) for GPU reasons (cuda-driver-too-old ×"
    )
