"""Check `device_plugin` on snapshots: the plugin's sockets against the GPUs and its config."""

from __future__ import annotations

from conftest import ROOT
from gpuprobe.checks.device_plugin import resource_of, socket_name
from gpuprobe.report import Status
from helpers import codes, config, run_check

PLUGIN = ROOT / "tests/fixtures/device_plugin"


def test_registered_plugin_raises_nothing() -> None:
    result = run_check("device_plugin", "synthetic-h100-k8s-containerd-healthy")
    assert result.findings == []
    assert result.summary == "NVIDIA device plugin registered: nvidia.com/gpu"
    assert result.data["plugin_sockets"] == ["nvidia-gpu.sock"]
    assert result.data["kubelet_socket"] is True


def test_kubernetes_node_without_the_plugin_socket() -> None:
    result = run_check("device_plugin", "synthetic-k8s-no-device-plugin")
    assert codes(result) == [("DEVICE_PLUGIN_NOT_REGISTERED", "CRITICAL", "FIX_CONFIG", "node")]
    assert result.findings[0].message.startswith(
        "no NVIDIA device plugin socket (nvidia-*.sock) in /var/lib/kubelet/device-plugins: "
        "the kubelet advertises no nvidia.com/gpu and GPU pods stay Pending"
    )
    assert result.summary == "no NVIDIA device plugin registered (8 GPUs)"


def test_plugin_running_an_older_configuration() -> None:
    path = str(PLUGIN / "time-slicing-renamed.yaml")
    result = run_check(
        "device_plugin",
        "synthetic-h100-k8s-containerd-healthy",
        config(device_plugin={"config_file": path}),
    )
    assert codes(result) == [("DEVICE_PLUGIN_NOT_REGISTERED", "WARNING", "RESTART_APP", "node")]
    assert result.findings[0].message.startswith(
        f"the device plugin's configuration {path} advertises nvidia.com/gpu.shared but "
        "/var/lib/kubelet/device-plugins has no nvidia-gpu.shared.sock; the plugin serves "
        "nvidia.com/gpu."
    )
    assert result.data["expected_resources"] == ["nvidia.com/gpu.shared"]


def test_configuration_shown_in_data_and_summary() -> None:
    path = str(PLUGIN / "time-slicing.yaml")
    result = run_check(
        "device_plugin",
        "synthetic-h100-k8s-containerd-healthy",
        config(device_plugin={"config_file": path}),
    )
    assert result.findings == []
    assert result.summary == (
        "NVIDIA device plugin registered: nvidia.com/gpu (MIG strategy none, sharing time-slicing)"
    )
    assert result.data["config"]["time_slicing"] == [
        {"name": "nvidia.com/gpu", "advertised": "nvidia.com/gpu", "replicas": 4, "devices": "all"}
    ]


def test_invalid_configuration_is_config_invalid() -> None:
    path = str(PLUGIN / "invalid.yaml")
    result = run_check(
        "device_plugin",
        "synthetic-h100-k8s-containerd-healthy",
        config(device_plugin={"config_file": path}),
    )
    assert codes(result) == [("CONFIG_INVALID", "WARNING", "FIX_CONFIG", f"file:{path}")]
    assert result.findings[0].message == (
        f"the NVIDIA device plugin configuration {path} is invalid: "
        "sharing.timeSlicing.resources[0].replicas must be a whole number above 0"
    )


def test_not_a_kubernetes_node_and_no_gpu_are_ok() -> None:
    for name, summary in (
        (
            "synthetic-docker-nvidia-runtime",
            "not a Kubernetes node (no /var/lib/kubelet/device-plugins)",
        ),
        ("kvm-epyc-nogpu", "not a Kubernetes node (no /var/lib/kubelet/device-plugins)"),
    ):
        result = run_check("device_plugin", name)
        assert (result.status, result.summary, result.findings) == (Status.OK, summary, [])


def test_socket_names() -> None:
    assert socket_name("nvidia.com/mig-1g.10gb") == "nvidia-mig-1g.10gb.sock"
    assert resource_of("nvidia-gpu.shared.sock") == "nvidia.com/gpu.shared"
