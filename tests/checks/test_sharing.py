"""Check `sharing` on snapshots: time-slicing units, MPS daemon, MIG and compute modes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import ROOT, gpuprobe, snapshot
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import sharing
from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import plugin_paths
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status, gpu_resource
from helpers import codes, config, run_check

PLUGIN = ROOT / "tests/fixtures/device_plugin"
MPS = config(device_plugin={"config_file": str(PLUGIN / "mps.yaml")})
TIME_SLICING = config(device_plugin={"config_file": str(PLUGIN / "time-slicing.yaml")})


def gpu_uuid(i: int) -> str:
    return f"GPU-5f1c{i:04x}-8e2b-4c1d-9a7e-{i:012x}"  # as synthesize.py makes them


def gpu(i: int) -> str:
    return gpu_resource(i, gpu_uuid(i))


def test_time_slicing_units_are_gpus_times_replicas() -> None:
    result = run_check("sharing", "synthetic-h100-k8s-containerd-healthy", TIME_SLICING)
    assert result.findings == []
    assert result.summary == "time-slicing: 8 GPUs × 4 replicas = 32 nvidia.com/gpu"
    assert result.data["resources"] == [
        {
            "name": "nvidia.com/gpu",
            "advertised": "nvidia.com/gpu",
            "replicas": 4,
            "devices": "all",
            "gpus": 8,
            "schedulable_units": 32,
        }
    ]


def test_time_slicing_with_exclusive_and_prohibited_gpus() -> None:
    result = run_check("sharing", "synthetic-time-slicing-exclusive-gpu")
    assert codes(result) == [
        ("COMPUTE_MODE_MISMATCH", "CRITICAL", "FIX_CONFIG", gpu(2)),
        ("COMPUTE_MODE_MISMATCH", "CRITICAL", "FIX_CONFIG", gpu(6)),
    ]
    messages = sorted(f.message for f in result.findings)
    assert messages[0].startswith(
        "GPU 2 is in compute mode ExclusiveProcess but is shared with time-slicing: only one "
        "process can use it at a time"
    )
    assert messages[1] == (
        "GPU 6 is in compute mode Prohibited: no CUDA process can use it. "
        "Set it: nvidia-smi -i 6 -c DEFAULT"
    )


def test_mps_with_its_daemon_raises_nothing() -> None:
    result = run_check("sharing", "synthetic-mps-daemon-running")
    assert result.findings == []
    assert result.summary == (
        "mps: 8 GPUs × 2 replicas = 16 nvidia.com/gpu; MPS control daemon running (pid 4242)"
    )


def test_mps_without_its_daemon() -> None:
    result = run_check("sharing", "synthetic-mps-daemon-missing")
    assert codes(result) == [("MPS_DAEMON_NOT_RUNNING", "CRITICAL", "RESTART_APP", "node")]
    assert result.summary.endswith("; MPS control daemon not running")


def test_mps_on_mig_enabled_gpus() -> None:
    result = run_check("sharing", "synthetic-mps-on-mig")
    assert codes(result) == [
        ("MPS_MIG_CONFLICT", "CRITICAL", "FIX_CONFIG", gpu(0)),
        ("MPS_MIG_CONFLICT", "CRITICAL", "FIX_CONFIG", gpu(1)),
    ]
    assert result.data["gpus"][0] == {
        "index": 0,
        "uuid": gpu_uuid(0),
        "compute_mode": "ExclusiveProcess",
        "mig_enabled": True,
    }


def test_mps_daemon_running_but_gpus_left_in_default(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-mps-daemon-missing"), copy)
    daemon = {"pid": 7, "name": "nvidia-cuda-mps-control", "cmdline": ["nvidia-cuda-mps-control"]}
    (copy / "processes.json").write_text(json.dumps([daemon]))
    result = sharing.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [
        ("COMPUTE_MODE_MISMATCH", "WARNING", "FIX_CONFIG", gpu(i)) for i in range(8)
    ]
    assert result.findings[0].message == (
        "GPU 0 is in compute mode Default but is shared with MPS: the MPS control daemon sets "
        "EXCLUSIVE_PROCESS when it starts, so processes can bypass MPS on it. "
        "Set it: nvidia-smi -i 0 -c EXCLUSIVE_PROCESS"
    )


def test_without_a_plugin_configuration_the_summary_says_what_is_known(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-mps-daemon-running"), copy)
    (copy / "device-plugin.json").unlink()
    result = sharing.run(CheckContext(snapshot_host(str(copy))), Config())
    assert result.findings == []
    assert result.summary == (
        "8 GPUs in compute mode ExclusiveProcess; MPS control daemon running (pid 4242); "
        "sharing not judged: no device plugin configuration given (device_plugin.config_file)"
    )
    shutil.copytree(snapshot("synthetic-time-slicing-exclusive-gpu"), tmp_path / "mixed")
    (tmp_path / "mixed/device-plugin.json").unlink()
    mixed = sharing.run(CheckContext(snapshot_host(str(tmp_path / "mixed"))), Config())
    assert mixed.summary.startswith(
        "8 GPUs in compute modes Default (6), ExclusiveProcess (1), Prohibited (1); "
        "sharing not judged: "
    )


def test_invalid_plugin_configuration_is_only_noted() -> None:
    cfg = config(device_plugin={"config_file": str(PLUGIN / "invalid.yaml")})
    result = run_check("sharing", "synthetic-h100-k8s-containerd-healthy", cfg)
    assert result.findings == []
    assert result.data["config_note"] == (
        f"the device plugin configuration {PLUGIN / 'invalid.yaml'} is invalid (see device_plugin)"
    )


def test_node_without_gpus_is_ok() -> None:
    result = run_check("sharing", "kvm-epyc-nogpu", MPS)
    assert (result.status, result.summary) == (
        Status.OK,
        "no NVIDIA GPU on this node: nothing to share",
    )


def test_the_snapshots_plugin_configuration_wins_over_the_one_given() -> None:
    result = run_check("sharing", "synthetic-mps-daemon-missing", TIME_SLICING)
    assert codes(result) == [("MPS_DAEMON_NOT_RUNNING", "CRITICAL", "RESTART_APP", "node")]
    assert result.data["config_file"] == "/etc/nvidia-device-plugin/config.yaml"
    assert result.data["strategy"] == "mps"


def test_a_configuration_given_is_used_on_a_snapshot_that_keeps_none() -> None:
    result = run_check("sharing", "synthetic-h100-k8s-containerd-healthy", MPS)
    assert result.data["config_file"] == plugin_paths(MPS).config_file
    assert codes(result) == [("MPS_DAEMON_NOT_RUNNING", "CRITICAL", "RESTART_APP", "node")]


def test_check_on_the_snapshot_alone_shows_the_missing_mps_daemon() -> None:
    out = gpuprobe(
        "check",
        "--json",
        "--only",
        "sharing",
        "--snapshot",
        snapshot("synthetic-mps-daemon-missing"),
    )
    (check,) = out.json()["checks"]
    assert [(f["code"], f["severity"]) for f in check["findings"]] == [
        ("MPS_DAEMON_NOT_RUNNING", "CRITICAL")
    ]
    assert out.returncode == 2
