"""Check `cdi` on snapshots: valid, current specs raise nothing; stale and invalid ones do."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from conftest import ROOT, snapshot
from gpuprobe.checks import cdi
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import codes, config, run_check

CDI_CRI = str(ROOT / "tests/fixtures/device_plugin/cdi-cri.yaml")
SPEC = "file:/var/run/cdi/nvidia.yaml"


def test_healthy_spec_raises_nothing() -> None:
    result = run_check("cdi", "synthetic-h100-k8s-containerd-healthy")
    assert result.findings == []
    assert result.summary == "1 CDI spec, 9 devices; CDI not in use for GPUs"
    (spec,) = result.data["specs"]
    assert spec["stale"] == {
        "missing_device_nodes": [],
        "missing_mounts": [],
        "missing_hooks": [],
        "driver_versions": ["550.54.15"],  # libnvidia-egl-wayland.so.1.1.13 is no driver version
        "gpu_devices": 8,
    }
    assert result.data["driver_version"] == "550.54.15"


def test_stale_after_a_driver_upgrade_names_both_versions() -> None:
    result = run_check("cdi", "synthetic-cdi-stale-after-driver-upgrade")
    assert codes(result) == [("CDI_SPEC_STALE", "WARNING", "FIX_CONFIG", SPEC)]
    message = result.findings[0].message
    assert message.startswith(
        "CDI spec /var/run/cdi/nvidia.yaml (nvidia.com/gpu) is stale: it names driver "
        "550.54.15 but driver 550.90.07 is loaded; 22 mounted host paths do not exist "
        "(/usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.550.54.15, "
    )
    assert message.endswith(
        "regenerate it (nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml), "
        "as after every driver upgrade"
    )
    stale = result.data["specs"][0]["stale"]
    assert "/lib/firmware/nvidia/550.54.15/gsp_ga10x.bin" in stale["missing_mounts"]
    assert stale["missing_device_nodes"] == [] and stale["missing_hooks"] == []


def test_stale_spec_is_critical_when_gpus_go_through_cdi() -> None:
    cfg = config(device_plugin={"config_file": CDI_CRI})
    result = run_check("cdi", "synthetic-cdi-stale-after-driver-upgrade", cfg)
    # The plugin names devices of its own kind, whose spec this node lacks.
    assert codes(result) == [
        ("CDI_SPEC_MISSING", "CRITICAL", "FIX_CONFIG", "node"),
        ("CDI_SPEC_STALE", "CRITICAL", "FIX_CONFIG", SPEC),
    ]
    assert result.data["cdi_in_use_because"] == [
        f"the device plugin passes devices as CDI names (deviceListStrategy cdi-cri in {CDI_CRI})"
    ]


def test_spec_generated_with_a_gpu_missing() -> None:
    result = run_check("cdi", "synthetic-cdi-spec-missing-gpu")
    assert codes(result) == [("CDI_SPEC_STALE", "WARNING", "FIX_CONFIG", SPEC)]
    assert "it defines 7 GPU devices but NVML sees 8 GPUs" in result.findings[0].message


def test_invalid_spec_in_cdi_mode_is_critical_and_named() -> None:
    result = run_check("cdi", "synthetic-cdi-spec-invalid")
    assert codes(result) == [("CDI_SPEC_INVALID", "CRITICAL", "FIX_CONFIG", SPEC)]
    assert result.findings[0].message.startswith(
        "CDI spec /var/run/cdi/nvidia.yaml is invalid: device '0' is defined twice. "
        "CDI runtimes skip it"
    )
    assert result.data["cdi_in_use_because"] == [
        "the NVIDIA Container Runtime runs in cdi mode (/etc/nvidia-container-runtime/config.toml)"
    ]


def test_cdi_in_use_without_any_spec() -> None:
    cfg = config(device_plugin={"config_file": CDI_CRI})
    result = run_check("cdi", "synthetic-k3s-no-nvidia-runtime", cfg)
    assert codes(result) == [("CDI_SPEC_MISSING", "CRITICAL", "FIX_CONFIG", "node")]


def test_node_without_gpus_is_ok() -> None:
    result = run_check("cdi", "kvm-epyc-nogpu")
    assert result.status is Status.OK
    assert result.summary == "no CDI spec; no NVIDIA GPU on this node"


def test_same_device_in_two_specs_of_one_directory(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-h100-k8s-containerd-healthy"), copy)
    cdi_dir = copy / "rootfs/etc/cdi"
    cdi_dir.mkdir(parents=True)
    spec = (copy / "rootfs/var/run/cdi/nvidia.yaml").read_text()
    (cdi_dir / "a.yaml").write_text(spec)
    (cdi_dir / "b.yaml").write_text(spec)
    (cdi_dir / "c.yml").write_text(spec)
    result = cdi.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [
        ("CDI_DEVICE_CONFLICT", "WARNING", "FIX_CONFIG", "file:/etc/cdi/b.yaml")
    ]
    assert result.findings[0].message.startswith(
        "CDI device nvidia.com/gpu=0 is defined in both /etc/cdi/a.yaml and /etc/cdi/b.yaml"
    )
    assert result.data["ignored_files"] == ["/etc/cdi/c.yml"]


def _copy(tmp_path: Path, name: str) -> Path:
    copy = tmp_path / "node"
    shutil.copytree(snapshot(name), copy)
    return copy


def _rewrite_devices(spec_path: Path, devices: list[str]) -> None:
    """Keep the spec as generated but with only the devices named (in that order), the MIG
    ones (a ':' in the name) added with GPU 0's device node."""
    spec = yaml.safe_load(spec_path.read_text())
    by_name = {d["name"]: d for d in spec["devices"]}
    first = spec["devices"][0]["containerEdits"]
    spec["devices"] = [by_name.get(n, {"name": n, "containerEdits": first}) for n in devices]
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))


def test_type_index_names_count_as_gpus() -> None:
    result = run_check("cdi", "synthetic-cdi-type-index-names")
    assert result.findings == []
    (spec,) = result.data["specs"]
    assert spec["devices"] == [f"gpu{i}" for i in range(8)] + ["all"]
    assert spec["stale"]["gpu_devices"] == 8


def test_type_index_spec_missing_a_gpu_is_stale_and_mig_devices_are_no_gpus(
    tmp_path: Path,
) -> None:
    copy = _copy(tmp_path, "synthetic-cdi-type-index-names")
    names = [f"gpu{i}" for i in range(7)] + ["mig0:0", "mig0:1", "all"]
    _rewrite_devices(copy / "rootfs/var/run/cdi/nvidia.yaml", names)
    result = cdi.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [("CDI_SPEC_STALE", "WARNING", "FIX_CONFIG", SPEC)]
    assert result.findings[0].message.startswith(
        "CDI spec /var/run/cdi/nvidia.yaml (nvidia.com/gpu) is stale: it defines 7 GPU devices "
        "but NVML sees 8 GPUs. Containers given its devices fail"
    )


def test_names_of_several_strategies_count_each_gpu_once(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "synthetic-h100-k8s-containerd-healthy")
    names = [str(i) for i in range(8)] + [f"gpu{i}" for i in range(8)] + ["all"]
    _rewrite_devices(copy / "rootfs/var/run/cdi/nvidia.yaml", names)
    result = cdi.run(CheckContext(snapshot_host(str(copy))), Config())
    assert result.findings == []
    assert result.data["specs"][0]["stale"]["gpu_devices"] == 8


def test_unrecognised_device_names_leave_the_gpu_count_unjudged(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "synthetic-h100-k8s-containerd-healthy")
    _rewrite_devices(copy / "rootfs/var/run/cdi/nvidia.yaml", ["all"])
    result = cdi.run(CheckContext(snapshot_host(str(copy))), Config())
    assert result.findings == []
    assert result.data["specs"][0]["stale"]["gpu_devices"] is None


def test_device_plugin_spec_serves_its_cdi_names() -> None:
    result = run_check("cdi", "synthetic-cdi-device-plugin-spec")  # cdi-cri, kept in the snapshot
    assert result.findings == []
    assert result.data["cdi_in_use_because"] == [
        "the device plugin passes devices as CDI names (deviceListStrategy cdi-cri in "
        "/etc/nvidia-device-plugin/config.yaml)"
    ]
    assert result.summary == "1 CDI spec, 9 devices; CDI in use for GPUs"
    (spec,) = result.data["specs"]
    assert spec["path"] == "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"
    assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
    assert spec["stale"]["gpu_devices"] == 8


def test_device_plugin_cdi_names_without_its_spec() -> None:
    cfg = config(device_plugin={"config_file": CDI_CRI})
    result = run_check("cdi", "synthetic-h100-k8s-containerd-healthy", cfg)
    assert codes(result) == [("CDI_SPEC_MISSING", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message == (
        "containers get GPUs through CDI (the device plugin passes devices as CDI names "
        f"(deviceListStrategy cdi-cri in {CDI_CRI})) but no CDI spec in /etc/cdi, /var/run/cdi "
        "defines k8s.device-plugin.nvidia.com/gpu devices: GPU containers fail to start. The "
        "device plugin writes /var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json when it "
        "starts: restart the device plugin pod on this node and read its log"
    )


def test_cdi_mode_reads_only_the_toolkit_spec_dirs(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "synthetic-h100-k8s-containerd-healthy")
    toolkit = copy / "rootfs/etc/nvidia-container-runtime/config.toml"
    text = toolkit.read_text().replace('mode = "auto"', 'mode = "cdi"')
    toolkit.write_text(
        text.replace('spec-dirs = ["/etc/cdi", "/var/run/cdi"]', 'spec-dirs = ["/etc/cdi"]')
    )
    result = cdi.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [("CDI_SPEC_MISSING", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message == (
        "containers get GPUs through CDI (the NVIDIA Container Runtime runs in cdi mode "
        "(/etc/nvidia-container-runtime/config.toml)) but no CDI spec in /etc/cdi defines "
        "nvidia.com/gpu devices: GPU containers fail to start. Generate it: nvidia-ctk cdi "
        "generate --output=/etc/cdi/nvidia.yaml"
    )
    # The spec in /var/run/cdi is still read and validated.
    assert [s["path"] for s in result.data["specs"]] == ["/var/run/cdi/nvidia.yaml"]
