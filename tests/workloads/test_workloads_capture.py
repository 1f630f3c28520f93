"""A capture of a Kubernetes GPU node keeps what attribution read: the kubelet's answers in
podresources.json (as MessageToDict writes them), each GPU process's /proc/<pid>/cgroup and
the kubelet's log directories; replaying it attributes every GPU the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import snapshot
from gpuprobe.capture import _tail, prepare_target, write_snapshot
from gpuprobe.config import Config
from gpuprobe.host import recording_host, snapshot_host
from gpuprobe.host.nvml import RecordingNvml, ReplayNvml, load_record
from gpuprobe.host.processes import load_processes
from gpuprobe.pipeline import run_checks
from kubelet_standin import kubelet, state_from_json

NAME = "synthetic-k8s-mig-mixed"


def test_capture_keeps_the_kubelets_answers_and_the_cgroups_then_replays(
    short_tmp: Path,
) -> None:
    source = Path(snapshot(NAME))
    root = short_tmp / "host"
    shutil.copytree(source / "rootfs", root)
    recorded = json.loads((source / "podresources.json").read_text())
    target = short_tmp / "snap"
    with kubelet(root, state_from_json(recorded)):
        # The live host under `root`, with the snapshot's GPUs standing in for NVML.
        host = recording_host(str(root), "gpu-node-3")
        host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
        table = load_processes(str(source / "processes.json"))
        table.recording = True
        host.list_processes = lambda: table
        live = run_checks(host, Config(), ["workloads"])
        write_snapshot(prepare_target(target), host, live)
    assert json.loads((target / "podresources.json").read_text()) == recorded
    cgroup = "proc/44001/cgroup"
    assert (target / "rootfs" / cgroup).read_text() == (source / "rootfs" / cgroup).read_text()
    assert sorted(p.name for p in (target / "rootfs/var/log/pods").iterdir()) == sorted(
        p.name for p in (source / "rootfs/var/log/pods").iterdir()
    )
    replay = run_checks(snapshot_host(str(target)), Config(), ["workloads"])
    assert replay.checks[0].data["devices"] == live.checks[0].data["devices"]
    assert replay.checks[0].summary == live.checks[0].summary


def test_procfs_files_are_copied_although_they_cannot_seek_from_their_end() -> None:
    with open("/proc/self/cgroup", "rb") as f:
        kept = _tail(f)
    assert kept == Path("/proc/self/cgroup").read_bytes()
