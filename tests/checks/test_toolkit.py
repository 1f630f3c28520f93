"""Check `toolkit` on snapshots: the toolkit installed and wired into each engine."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import snapshot
from gpuprobe.checks import toolkit
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.containers.runtime import EngineConfig, Runtime
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import codes, run_check


def test_healthy_k8s_node_raises_nothing() -> None:
    result = run_check("toolkit", "synthetic-h100-k8s-containerd-healthy")
    assert result.findings == []
    assert result.summary == (
        "NVIDIA Container Toolkit in /usr/bin (mode auto); containerd: nvidia runtime (default)"
    )
    (engine,) = result.data["engines"]
    assert engine["runtimes"] == {
        "nvidia": {
            "binary": "/usr/bin/nvidia-container-runtime",
            "defined_in": "/etc/containerd/conf.d/99-nvidia.toml",
        }
    }
    assert (engine["config_version"], engine["default_runtime"], engine["cdi_enabled"]) == (
        2,
        "nvidia",
        True,
    )
    assert engine["in_use_because"] == [
        "process containerd (pid 1021)",
        "socket /run/containerd/containerd.sock",
    ]
    assert result.data["toolkit_config"]["mode"] == "auto"
    assert result.data["runtime_class_required"] is False


def test_containerd_v3_runtime_not_default_needs_runtime_class() -> None:
    result = run_check("toolkit", "synthetic-containerd-v3-runtimeclass")
    assert result.findings == []
    assert result.summary.endswith(
        "containerd: nvidia runtime, not the default: pods need runtimeClassName: nvidia"
    )
    assert result.data["runtime_class_required"] is True
    assert result.data["engines"][0]["config_version"] == 3


def test_runtime_never_configured() -> None:
    result = run_check("toolkit", "synthetic-containerd-no-nvidia-runtime")
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", "file:/etc/containerd/config.toml")
    ]
    assert result.findings[0].message == (
        "containerd has no nvidia runtime (configuration read: /etc/containerd/config.toml). "
        "GPU containers cannot get GPUs: run `nvidia-ctk runtime configure "
        "--runtime=containerd` and restart containerd"
    )


def test_drop_in_that_is_not_imported_is_named() -> None:
    result = run_check("toolkit", "synthetic-containerd-drop-in-not-imported")
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", "file:/etc/containerd/config.toml")
    ]
    assert (
        "/etc/containerd/conf.d/99-nvidia.toml is not imported by /etc/containerd/config.toml"
        in result.findings[0].message
    )


def test_runtime_binary_left_behind_by_the_gpu_operator() -> None:
    result = run_check("toolkit", "synthetic-runtime-binary-missing")
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", "file:/etc/containerd/config.toml")
    ]
    assert result.findings[0].message.startswith(
        "the nvidia runtime in /etc/containerd/config.toml runs "
        "/usr/local/nvidia/toolkit/nvidia-container-runtime, which does not exist on the host"
    )


def test_k3s_started_before_the_toolkit() -> None:
    result = run_check("toolkit", "synthetic-k3s-no-nvidia-runtime")
    k3s = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    assert codes(result) == [("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", f"file:{k3s}")]
    assert result.findings[0].message.endswith(
        "k3s adds the nvidia runtime itself when it finds nvidia-container-runtime at start: "
        "restart k3s so that it finds the installed toolkit"
    )
    assert result.data["engines"][0]["in_use_because"] == [
        "process containerd (pid 2077)",
        "socket /run/k3s/containerd/containerd.sock",
    ]


RKE2_CONTAINERD = "/var/lib/rancher/rke2/agent/etc/containerd"


def _as_rke2(tmp_path: Path) -> Path:
    """The k3s node as RKE2 lays it out: its containerd config under /var/lib/rancher/rke2
    (RKE2 shares k3s's containerd socket path)."""
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-k3s-no-nvidia-runtime"), copy)
    rancher = copy / "rootfs/var/lib/rancher"
    (rancher / "k3s").rename(rancher / "rke2")
    processes = copy / "processes.json"
    text = processes.read_text().replace("/var/lib/rancher/k3s/", "/var/lib/rancher/rke2/")
    processes.write_text(text)
    return copy


def test_rke2_started_before_the_toolkit(tmp_path: Path) -> None:
    result = toolkit.run(CheckContext(snapshot_host(str(_as_rke2(tmp_path)))), Config())
    config = f"{RKE2_CONTAINERD}/config.toml"
    assert codes(result) == [("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", f"file:{config}")]
    assert result.findings[0].message == (
        f"rke2 has no nvidia runtime (configuration read: {config}). GPU containers cannot get "
        "GPUs: rke2 adds the nvidia runtime itself when it finds nvidia-container-runtime at "
        "start: restart rke2 so that it finds the installed toolkit"
    )
    assert [e["flavor"] for e in result.data["engines"]] == ["rke2"]


def test_rke2_with_a_template_and_no_toolkit(tmp_path: Path) -> None:
    copy = _as_rke2(tmp_path)
    containerd_dir = copy / "rootfs" / RKE2_CONTAINERD.lstrip("/")
    template = containerd_dir / "config.toml.tmpl"
    template.write_text((containerd_dir / "config.toml").read_text())
    for binary in (copy / "rootfs/usr/bin").glob("nvidia-c*"):
        binary.unlink()
    result = toolkit.run(CheckContext(snapshot_host(str(copy))), Config())
    tmpl = f"{RKE2_CONTAINERD}/config.toml.tmpl"
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", f"file:{tmpl}"),
        ("TOOLKIT_NOT_INSTALLED", "CRITICAL", "FIX_CONFIG", "node"),
    ]
    message = next(f.message for f in result.findings if f.code == "RUNTIME_NOT_CONFIGURED")
    assert message.endswith(
        "rke2 adds the nvidia runtime itself when it finds nvidia-container-runtime at start: "
        f"install the toolkit and restart rke2, or add the runtime to the template {tmpl}"
    )


def test_unparseable_containerd_config_is_only_config_invalid(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-containerd-no-nvidia-runtime"), copy)
    (copy / "rootfs/etc/containerd/config.toml").write_text("version = 2\n[plugins\n")
    result = toolkit.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [
        ("CONFIG_INVALID", "CRITICAL", "FIX_CONFIG", "file:/etc/containerd/config.toml")
    ]
    assert result.summary.endswith(
        "containerd: runtimes unknown (/etc/containerd/config.toml is invalid)"
    )
    (engine,) = result.data["engines"]
    assert engine["config_exists"] is True and engine["files"] == []


def test_docker_host_judges_docker_not_its_containerd() -> None:
    result = run_check("toolkit", "synthetic-docker-nvidia-runtime")
    assert result.findings == []
    assert result.summary.endswith(
        "Docker: nvidia runtime, not the default: run with --runtime=nvidia"
    )
    judged = {e["engine"]: e["runs_gpu_containers"] for e in result.data["engines"]}
    assert judged == {"containerd": False, "docker": True}


def test_crio_drop_in() -> None:
    result = run_check("toolkit", "synthetic-crio-nvidia-drop-in")
    assert result.findings == []
    assert result.summary.endswith("CRI-O: nvidia runtime (default)")


def test_not_installed_when_an_engine_runs(tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-containerd-no-nvidia-runtime"), copy)
    for binary in (copy / "rootfs/usr/bin").glob("nvidia-c*"):
        binary.unlink()
    result = toolkit.run(CheckContext(snapshot_host(str(copy))), Config())
    assert codes(result) == [
        ("RUNTIME_NOT_CONFIGURED", "CRITICAL", "FIX_CONFIG", "file:/etc/containerd/config.toml"),
        ("TOOLKIT_NOT_INSTALLED", "CRITICAL", "FIX_CONFIG", "node"),
    ]


def test_gpu_node_without_container_engine_needs_no_toolkit() -> None:
    result = run_check("toolkit", "synthetic-h100-8gpu-healthy")
    assert result.status is Status.OK and result.findings == []
    assert (
        result.summary
        == "no container engine runs GPU containers on this node; toolkit not installed"
    )


def test_node_without_gpus_is_ok() -> None:
    result = run_check("toolkit", "kvm-epyc-nogpu")
    assert result.status is Status.OK and result.findings == []
    assert result.summary == "no NVIDIA GPU on this node: no container toolkit needed"


def test_a_runtime_only_containerd_2_keeps_is_a_warning(tmp_path: Path) -> None:
    """A later v2 drop-in redefines the CRI table: containerd 2.x merges it with the nvidia
    drop-in, 1.x keeps only its table. The files cannot say which containerd runs."""
    copy = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-h100-k8s-containerd-healthy"), copy)
    (copy / "rootfs/etc/containerd/conf.d/zz-registry.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n'
        'config_path = "/etc/containerd/certs.d"\n'
    )
    result = toolkit.run(CheckContext(snapshot_host(str(copy))), Config())
    last = "/etc/containerd/conf.d/zz-registry.toml"
    assert codes(result) == [("RUNTIME_NOT_CONFIGURED", "WARNING", "FIX_CONFIG", f"file:{last}")]
    assert result.findings[0].message == (
        "the nvidia runtime of /etc/containerd/conf.d/99-nvidia.toml holds only on containerd "
        f"2.x: {last} redefines the CRI plugin's table, and containerd 1.x drops it and GPU "
        "containers get no GPUs (config version 2 is read by both, so the files do not say "
        f"which runs). Define the nvidia runtime in {last}, or confirm `containerd --version` "
        "is 2.x"
    )
    assert result.summary.endswith("containerd: nvidia runtime (default)")


def test_nvidia_as_the_default_only_on_containerd_2_is_a_warning() -> None:
    nvidia = Runtime("nvidia", "/usr/bin/nvidia-container-runtime", "/etc/containerd/config.toml")
    config = EngineConfig(
        "containerd",
        "containerd",
        "/etc/containerd/config.toml",
        version=2,
        runtimes={"nvidia": nvidia},
        default_runtime="nvidia",
        last_cri_file="/etc/containerd/conf.d/zz.toml",
        default_by_1x="runc",
    )
    finding = toolkit._kept_by_containerd2_only(config)
    assert finding is not None
    assert (finding.code, finding.severity.value, finding.resource) == (
        "RUNTIME_NOT_CONFIGURED",
        "WARNING",
        "file:/etc/containerd/conf.d/zz.toml",
    )
    assert finding.message.startswith(
        "nvidia as the default runtime holds only on containerd 2.x: "
        "/etc/containerd/conf.d/zz.toml redefines the CRI plugin's table, and containerd 1.x "
        "runs runc by default and pods get no GPUs"
    )
