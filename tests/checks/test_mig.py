"""Check `mig` on snapshots: MIG modes, layouts, and the device plugin's MIG strategy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import mig
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import codes, config, run_check, snapshot

UUID = "GPU-5f1c{0:04x}-8e2b-4c1d-9a7e-{0:012x}"


def gpu(index: int) -> str:
    return f"gpu:{index}:{UUID.format(index)}"


def plugin_config(tmp_path: Path, strategy: str) -> dict[str, dict[str, str]]:
    """gpuprobe config sections pointing at a device plugin config with this MIG strategy."""
    path = tmp_path / "plugin.yaml"
    path.write_text(f"version: v1\nflags:\n  migStrategy: {strategy}\n")
    return {"device_plugin": {"config_file": str(path)}}


def test_healthy_node_with_mig_off_raises_nothing() -> None:
    result = run_check("mig", "synthetic-h100-8gpu-healthy")
    assert result.findings == []
    assert result.status is Status.OK
    assert result.summary == "MIG disabled on all 8 MIG-capable GPUs"
    assert result.data["gpus"][0] == {
        "index": 0,
        "uuid": UUID.format(0),
        "name": "NVIDIA H100 80GB HBM3",
        "mig_capable": True,
        "mig_mode_current": 0,
        "mig_mode_pending": 0,
    }
    assert result.data["device_plugin_mig_strategy"] is None


def test_single_layout_fits_the_single_strategy(tmp_path: Path) -> None:
    result = run_check("mig", "synthetic-mig-single", config(**plugin_config(tmp_path, "single")))
    assert result.findings == []
    assert result.summary == (
        "MIG on 8 of 8 GPUs: 56 MIG devices (1g.10gb); device plugin MIG strategy single"
    )
    facts = result.data["gpus"][1]
    assert facts["mig_device_count"] == 7
    assert [gi["id"] for gi in facts["gpu_instances"]] == list(range(7, 14))
    assert facts["gpu_instances"][0] == {
        "id": 7,
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
        "memory_bytes": 9984 * 1024 * 1024,
        "compute_instances": [
            {
                "id": 0,
                "mig_device_index": 0,
                "uuid": "MIG-7b3d0100-1c9e-5a0f-8d42-000001000000",
                "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                "profile": "1g.10gb",
                "memory_bytes": 9984 * 1024 * 1024,
                "multiprocessor_count": 16,
                "placement": {"start": 0, "size": 1},
                "resource": "mig:1:7:0",
            }
        ],
    }


def test_mixed_layout_lists_every_instance_and_fits_the_mixed_strategy(tmp_path: Path) -> None:
    result = run_check("mig", "synthetic-mig-mixed", config(**plugin_config(tmp_path, "mixed")))
    assert result.findings == []
    gpus = result.data["gpus"]
    assert [g["mig_mode_current"] for g in gpus] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert [(gi["id"], gi["profile"]) for gi in gpus[0]["gpu_instances"]] == [
        (2, "3g.40gb"),
        (3, "2g.20gb"),
        (9, "1g.10gb"),
        (10, "1g.10gb"),
    ]
    assert gpus[1]["gpu_instances"][0]["placement"] == {"start": 0, "size": 8}
    assert gpus[1]["gpu_instances"][0]["profile"] == "7g.80gb"
    # GPU 3: one 3g.40gb GPU instance shared by three single-slice compute instances.
    (instance,) = gpus[3]["gpu_instances"]
    assert (instance["id"], instance["profile"]) == (1, "3g.40gb")
    assert [
        (ci["id"], ci["profile"], ci["placement"], ci["resource"], ci["multiprocessor_count"])
        for ci in instance["compute_instances"]
    ] == [
        (0, "1c.3g.40gb", {"start": 0, "size": 1}, "mig:3:1:0", 20),
        (1, "1c.3g.40gb", {"start": 1, "size": 1}, "mig:3:1:1", 20),
        (2, "1c.3g.40gb", {"start": 2, "size": 1}, "mig:3:1:2", 20),
    ]
    assert "gpu_instances" not in gpus[4]
    assert result.summary.startswith("MIG on 4 of 8 GPUs: 10 MIG devices")


@pytest.mark.parametrize(
    ("snapshot_name", "strategy", "why"),
    [
        ("synthetic-mig-mixed", "single", "MIG is off on GPUs 4, 5, 6, 7 and on on GPUs 0, 1"),
        ("synthetic-mig-mixed", "none", "MIG is enabled on GPUs 0, 1, 2, 3"),
        ("synthetic-mig-single", "none", "MIG is enabled on GPUs 0, 1, 2, 3, 4, 5, 6, 7"),
    ],
)
def test_strategy_that_does_not_fit_the_layout_is_a_conflict(
    tmp_path: Path, snapshot_name: str, strategy: str, why: str
) -> None:
    result = run_check("mig", snapshot_name, config(**plugin_config(tmp_path, strategy)))
    assert codes(result) == [("MIG_STRATEGY_CONFLICT", "WARNING", "FIX_CONFIG", "node")]
    assert why in result.findings[0].message


def test_single_strategy_needs_one_identical_profile(tmp_path: Path) -> None:
    cfg = config(**plugin_config(tmp_path, "single"))
    result = run_check("mig", "synthetic-mig-two-profiles", cfg)
    assert codes(result) == [("MIG_STRATEGY_CONFLICT", "WARNING", "FIX_CONFIG", "node")]
    assert "2 profiles (1g.10gb, 3g.40gb)" in result.findings[0].message
    cfg = config(**plugin_config(tmp_path, "mixed"))
    assert run_check("mig", "synthetic-mig-two-profiles", cfg).findings == []


def test_single_strategy_with_mig_off_everywhere_is_no_conflict(tmp_path: Path) -> None:
    cfg = config(**plugin_config(tmp_path, "single"))
    assert run_check("mig", "synthetic-h100-8gpu-healthy", cfg).findings == []


def test_invalid_plugin_config_leaves_the_strategy_unknown_without_a_finding(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text("flags: {migStrategy: [single\n")
    result = run_check(
        "mig", "synthetic-mig-mixed", config(device_plugin={"config_file": str(path)})
    )
    assert result.findings == []
    assert result.data["device_plugin_mig_strategy"] == "unknown"
    assert result.data["device_plugin_config_file"] == str(path)
    assert result.summary.endswith(
        "; device plugin MIG strategy unknown (its configuration is invalid)"
    )


def test_missing_plugin_config_is_unknown_too(tmp_path: Path) -> None:
    cfg = config(device_plugin={"config_file": str(tmp_path / "absent.yaml")})
    result = run_check("mig", "synthetic-mig-single", cfg)
    assert result.findings == []
    assert result.data["device_plugin_mig_strategy"] == "unknown"
    assert result.data["device_plugin_config_file"] == str(tmp_path / "absent.yaml")


def test_pending_mode_change() -> None:
    result = run_check("mig", "synthetic-mig-pending")
    assert codes(result) == [("MIG_PENDING_CHANGE", "WARNING", "RESET_GPU", gpu(2))]
    assert result.findings[0].message.startswith("GPU 2: MIG mode is off but on is pending")
    assert result.summary.endswith("; MIG mode change pending on GPU 2")


def test_mig_on_without_instances() -> None:
    result = run_check("mig", "synthetic-mig-no-instances")
    assert codes(result) == [("MIG_NO_INSTANCES", "WARNING", "FIX_CONFIG", gpu(5))]
    assert result.data["gpus"][5]["mig_device_count"] == 0
    assert result.data["gpus"][5]["gpu_instances"] == []


def test_gpus_without_mig_are_ok_and_say_so(tmp_path: Path) -> None:
    # GPUs that are not MIG-capable answer NotSupported: a record without MIG mode.
    src = Path(snapshot("synthetic-h100-8gpu-healthy"))
    dest = tmp_path / "no-mig"
    shutil.copytree(src, dest)
    record = json.loads((dest / "nvml.json").read_text())
    record["calls"] = [c for c in record["calls"] if c["fn"] != "nvmlDeviceGetMigMode"]
    (dest / "nvml.json").write_text(json.dumps(record))
    result = mig.run(CheckContext(snapshot_host(str(dest))), Config())
    assert result.status is Status.OK
    assert result.findings == []
    assert result.summary == "no MIG-capable GPU (8 GPUs)"
    assert result.data["gpus"][0]["mig_capable"] is False


def test_no_gpu_node_and_nvml_unavailable() -> None:
    assert run_check("mig", "kvm-epyc-nogpu").summary == "no NVIDIA GPU on this node"
    result = run_check("mig", "synthetic-driver-not-loaded")
    assert result.status is Status.UNKNOWN
    assert result.findings == []
